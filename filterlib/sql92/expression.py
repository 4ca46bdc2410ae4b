"""The compiled selector object other tools hold: evaluate / matches plus what the jobs need to know about it."""

from __future__ import annotations

from collections.abc import Mapping

from filterlib.errors import FilterEvaluationError
from filterlib.sql92 import ast
from filterlib.sql92.evaluate import compile_tree

_EMPTY: Mapping[str, str] = {}


class Sql92Expression:
    """One compiled SQL92 selector, evaluated with the semantics of RocketMQ's Java expression objects.

    `text` is the selector as given, `ast` the checked tree, `referenced_properties` the property names it reads,
    `ignored_text` whatever trailing text RocketMQ's parser silently ignores ('' normally; e.g. `AND b = 1` in
    `a > 0L AND b = 1`) and `ignored_position` its offset (None when nothing is ignored).
    """

    __slots__ = ("text", "ast", "referenced_properties", "ignored_text", "ignored_position", "version", "_fn")

    def __init__(self, text: str, tree: ast.Node, ignored_text: str = "", ignored_position: int | None = None,
                 version: str = "5.3.3"):
        self.text = text
        self.ast = tree
        self.referenced_properties = frozenset(
            n.name for n in ast.walk(tree) if isinstance(n, ast.Property))
        self.ignored_text = ignored_text
        self.ignored_position = ignored_position
        self.version = version
        self._fn = compile_tree(tree)

    def evaluate(self, props: Mapping[str, str] | None) -> bool | None:
        """What RocketMQ's evaluate returns (True, False or None); FilterEvaluationError where Java throws."""
        return self._fn(_EMPTY if props is None else props)

    def matches(self, props: Mapping[str, str] | None) -> bool:
        """The broker's decision: True only when evaluate gives exactly TRUE; null, FALSE and errors are False."""
        try:
            return self._fn(_EMPTY if props is None else props) is True
        except FilterEvaluationError:
            return False

    def __repr__(self) -> str:
        """Readable form for notebooks and logs."""
        return f"Sql92Expression({self.text!r})"
