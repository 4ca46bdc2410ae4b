"""Errors raised by filterlib, named for the RocketMQ failure they stand for."""

from __future__ import annotations


class FilterError(ValueError):
    """Base of every filter failure (a ValueError, so plain callers can catch it generically)."""


class FilterSyntaxError(FilterError):
    """An expression RocketMQ's SQL92 compiler rejects (MQFilterException "Invalid MessageSelector.").

    `position` is the 0-based character offset of the offending text in the expression (None when the error is
    not tied to one place), `text` the offending token or fragment, `since` a RocketMQ version from which the
    construct would be accepted when that applies (e.g. CONTAINS needs 5.1.3). `java_cause` names the Java
    exception behind RocketMQ's rejection (ParseException, TokenMgrError, RuntimeException, NumberFormatException).
    """

    def __init__(self, message: str, expression: str = "", position: int | None = None, text: str | None = None,
                 since: str | None = None, java_cause: str | None = None):
        super().__init__(message)
        self.expression = expression
        self.position = position
        self.text = text
        self.since = since
        self.java_cause = java_cause


class FilterEvaluationError(FilterError):
    """Evaluation threw in Java (e.g. a ClassCastException or NumberFormatException); `java_class` names it.

    `java_cause` names the wrapped cause when Java wraps one (RuntimeException around NumberFormatException).
    """

    def __init__(self, message: str, java_class: str = "RuntimeException", java_cause: str | None = None):
        super().__init__(message)
        self.java_class = java_class
        self.java_cause = java_cause


class StoreFormatError(ValueError):
    """A store file that cannot be read where the broker would also refuse it; says which file and offset."""

    def __init__(self, message: str, path: str | None = None, offset: int | None = None):
        where = f" ({path}{'' if offset is None else f' @ {offset}'})" if path else ""
        super().__init__(message + where)
        self.path = path
        self.offset = offset


class SubscriptionParseError(FilterSyntaxError):
    """A subscription FilterAPI refuses to build (tag `subString split error`, empty SQL expression)."""


class BrokerFilterError(FilterError):
    """The broker's filter itself throws (not the expression), e.g. a retry message without RETRY_TOPIC."""

    def __init__(self, message: str, java_class: str = "NullPointerException"):
        super().__init__(message)
        self.java_class = java_class
