"""RocketMQ's message-filter semantics and store formats in pure Python (never imports pyspark).

Public API (see the project design): `from filterlib import sql92, tags, bloom`, `filterlib.errors`,
`filterlib.registry`, `filterlib.message_filter`, `filterlib.store`.
"""

__all__ = ["sql92", "tags", "bloom"]

if ".zip" in __file__:  # shipped in a --py-files zip: numba's kernel cache keyed by the module, not the zip's path
    from filterlib.kernel_cache import install

    install()


def __getattr__(name: str):
    """Import the public submodules lazily so `import filterlib` stays cheap."""
    if name in __all__:
        import importlib

        return importlib.import_module(f"filterlib.{name}")
    raise AttributeError(name)
