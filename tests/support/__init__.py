"""Helpers several test modules share; test modules import them from here, never from one another."""
