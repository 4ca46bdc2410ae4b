"""PLY (LALR) parser for RocketMQ's SQL92 selector, building the checked AST of `filterlib.sql92.ast`.

The grammar and the parse-time checks follow SelectorParser.jj and ComparisonExpression's create* methods
(RocketMQ 5.3.3). The JavaCC parser never checks for end of input: it parses one expression and stops at the
first token that cannot continue it. `parse` reproduces that: when the LALR parse fails on a (lexable) token,
the tokens before it are parsed alone, and if they form a complete selector the rest is ignored, exactly as
RocketMQ ignores it (`a > 0L AND b = 1` is `a > 0`). The tables are built once per process, in memory.
"""

from __future__ import annotations

import copy
import sys
import threading
from dataclasses import dataclass
from typing import Any

from ply import lex, yacc

from filterlib.errors import FilterEvaluationError, FilterSyntaxError
from filterlib.sql92 import ast
from filterlib.sql92.evaluate import LITERAL_CLASS, make_java_compare
from filterlib.sql92.javanum import INT_MAX, LONG_MAX
from filterlib.sql92.lexer import KEYWORDS_5_1_3, make_lexer, tokens  # noqa: F401  (PLY reads `tokens`)

# Deeper trees are refused (Java's own limit is its thread stack); real selectors are a few levels deep.
MAX_DEPTH = 200
DOUBLE_MIN_VALUE = 5e-324

start = "selector"

_DISPLAY = {
    "EQ": "'='", "NE": "'<>'", "GT": "'>'", "GE": "'>='", "LT": "'<'", "LE": "'<='", "LPAREN": "'('",
    "RPAREN": "')'", "COMMA": "','", "PLUS": "'+'", "MINUS": "'-'", "DECIMAL": "an integer",
    "FLOAT": "a decimal number", "STRING": "a string literal", "ID": "a property name", "$end": "end of input",
}


class _SemanticError(Exception):
    """A create*-time check failed (RuntimeException or NumberFormatException in Java)."""

    def __init__(self, message: str, pos: int, text: str, java_cause: str = "RuntimeException"):
        super().__init__(message)
        self.pos = pos
        self.text = text
        self.java_cause = java_cause
        self.open_plus = None  # the outermost `+` token still waiting for its operand when the check failed


class _ParseStop(Exception):
    """The LALR automaton met a token it cannot shift; carries that token (None at end of input)."""

    def __init__(self, token, expected: tuple[str, ...]):
        super().__init__()
        self.token = token
        self.expected = expected


# ---- checks mirroring ComparisonExpression / SelectorParser --------------------------------------------------

def _describe(node: ast.Node) -> str:
    """Short text for a node in messages."""
    if isinstance(node, ast.Literal):
        if node.kind == "null":
            return "NULL"
        if node.kind == "bool":
            return "TRUE" if node.value else "FALSE"
        if node.kind == "string":
            return "'" + str(node.value).replace("'", "''") + "'"
        return repr(node.value)
    if isinstance(node, ast.Property):
        return node.name
    return type(node).__name__.lower() + " expression"


def _as_boolean(node: ast.Node) -> ast.Node:
    """SelectorParser.asBooleanExpression: conditions pass, a bare property is cast, anything else is refused."""
    if ast.is_boolean_expression(node):
        return node
    if isinstance(node, ast.Property):
        return ast.BoolCast(node, node.pos)
    raise _SemanticError(f"Expression will not result in a boolean value: {_describe(node)}", node.pos,
                         _describe(node), "ParseException")


def _check_less_than_operand(node: ast.Node, op: str, pos: int) -> None:
    """checkLessThanOperand: only numbers, properties and negations may be ordered."""
    if isinstance(node, ast.Literal):
        if node.kind in ("int", "long", "double"):
            return
        raise _SemanticError(f"Value '{_describe(node)}' cannot be compared with {op}", node.pos, _describe(node))
    if ast.is_boolean_expression(node):
        raise _SemanticError(f"Value '{_describe(node)}' cannot be compared with {op} (it is a condition)",
                             pos, op)


def _check_equal_operands(left: ast.Node, right: ast.Node, pos: int) -> None:
    """checkEqualOperand and checkEqualOperandCompatability: no NULL literal, no `TRUE = 1`."""
    for n in (left, right):
        if isinstance(n, ast.Literal) and n.kind == "null":
            raise _SemanticError("'NULL' cannot be compared with '=' or '<>' (use IS NULL / IS NOT NULL)",
                                 n.pos, "NULL")
    if isinstance(left, ast.Literal) and isinstance(right, ast.Literal):
        if left.kind in ("bool", "null") and right.kind not in ("bool", "null"):
            raise _SemanticError(f"'{_describe(left)}' cannot be compared with '{_describe(right)}'", pos, "=")


def _create_equal(left: ast.Node, right: ast.Node, pos: int) -> ast.Node:
    """createEqual."""
    _check_equal_operands(left, right, pos)
    return ast.Compare("=", left, right, pos)


def _create_ordering(op: str, left: ast.Node, right: ast.Node, pos: int) -> ast.Node:
    """createGreaterThan / ...: both operands must be orderable."""
    _check_less_than_operand(left, op, pos)
    _check_less_than_operand(right, op, pos)
    return ast.Compare(op, left, right, pos)


def _create_between(value: ast.Node, low: ast.Node, high: ast.Node, pos: int, negated: bool) -> ast.Node:
    """createBetween / createNotBetween: literal bounds must be non-null and ordered; then rewritten.

    createBetween orders two literal bounds with the evaluator's `__compare(high, low)`, so it throws what that
    throws (ClassCastException for a String low and a Boolean high); createNotBetween checks nothing.
    """
    if not negated and isinstance(low, ast.Literal) and isinstance(high, ast.Literal):
        if low.kind == "null" or high.kind == "null":
            raise _SemanticError("Illegal values of between, values can not be null!", pos, "BETWEEN")
        compare = make_java_compare(LITERAL_CLASS[high.kind], LITERAL_CLASS[low.kind])
        try:
            order = -1 if compare is None else compare(high.value, low.value)
        except FilterEvaluationError as e:
            raise _SemanticError(f"Illegal values of between: {e}", pos, "BETWEEN", e.java_class) from None
        if order < 0:
            raise _SemanticError(f"Illegal values of between, left value({_describe(low)}) must less than or "
                                 f"equal to right value({_describe(high)})", pos, "BETWEEN")
    if negated:
        return _make_logic(ast.Or, _create_ordering("<", value, low, pos), _create_ordering(">", value, high, pos),
                           pos)
    return _make_logic(ast.And, _create_ordering(">=", value, low, pos), _create_ordering("<=", value, high, pos),
                       pos)


def _create_in(left: ast.Node, values: list[str], negated: bool, pos: int) -> ast.Node:
    """createInFilter: the left side must be a plain property."""
    if not isinstance(left, ast.Property):
        raise _SemanticError(f"Expected a property for In expression, got: {_describe(left)}", pos, "IN")
    return ast.In(left, tuple(values), negated, pos)


def _make_logic(cls, left: ast.Node, right: ast.Node, pos: int) -> ast.Node:
    """createAND / createOR with both operands cast to conditions; nested chains are flattened."""
    left = _as_boolean(left)
    right = _as_boolean(right)
    parts: list[ast.Node] = []
    for n in (left, right):
        parts.extend(n.operands if isinstance(n, cls) else (n,))
    return cls(tuple(parts), pos)


def _decimal_literal(text: str, pos: int) -> ast.Literal:
    """ConstantExpression.createFromDecimal: Integer when in int range, else Long; beyond long → error."""
    digits = text[:-1] if text[-1] in "lL" else text
    value = int(digits)
    if value > LONG_MAX:
        raise _SemanticError(f'For input string: "{digits}" (out of the long range)', pos, text,
                             "NumberFormatException")
    return ast.Literal(value, "int" if value <= INT_MAX else "long", pos)


def _float_literal(text: str, pos: int) -> ast.Literal:
    """ConstantExpression.createFloat: a Double that must be finite and at least Double.MIN_VALUE."""
    value = float(text)
    if value == float("inf"):
        raise _SemanticError(f"{text} is greater than 1.7976931348623157E308", pos, text)
    if value < DOUBLE_MIN_VALUE:
        raise _SemanticError(f"{text} is less than 4.9E-324 (zero float literals are refused)", pos, text)
    return ast.Literal(value, "double", pos)


def _string_literal(image: str) -> str:
    """Decode a quoted literal: drop the quotes, '' stands for one quote."""
    return image[1:-1].replace("''", "'")


# ---- grammar (docstrings are PLY productions) ------------------------------------------------------------------

def p_selector(p):
    "selector : or_expr"
    p[0] = p[1]


def p_or_expr(p):
    """or_expr : or_expr OR and_expr
               | and_expr"""
    p[0] = p[1] if len(p) == 2 else _make_logic(ast.Or, p[1], p[3], p.lexpos(2))


def p_and_expr(p):
    """and_expr : and_expr AND eq_expr
                | eq_expr"""
    p[0] = p[1] if len(p) == 2 else _make_logic(ast.And, p[1], p[3], p.lexpos(2))


def p_eq_expr(p):
    """eq_expr : eq_expr EQ cmp_expr
               | eq_expr NE cmp_expr
               | eq_expr IS NULL
               | eq_expr IS NOT NULL
               | cmp_expr"""
    if len(p) == 2:
        p[0] = p[1]
        return
    pos = p.lexpos(2)
    kind = p.slice[2].type
    if kind == "EQ":
        p[0] = _create_equal(p[1], p[3], pos)
    elif kind == "NE":
        p[0] = ast.Not(_create_equal(p[1], p[3], pos), pos)
    else:
        is_null = ast.Compare("=", p[1], ast.Literal(None, "null", p.lexpos(len(p) - 1)), pos)
        p[0] = is_null if len(p) == 4 else ast.Not(is_null, pos)


def p_cmp_ordering(p):
    """cmp_expr : cmp_expr GT unary
                | cmp_expr GE unary
                | cmp_expr LT unary
                | cmp_expr LE unary"""
    p[0] = _create_ordering(p[2], p[1], p[3], p.lexpos(2))


def p_cmp_match(p):
    """cmp_expr : cmp_expr CONTAINS STRING
                | cmp_expr STARTSWITH STRING
                | cmp_expr ENDSWITH STRING
                | cmp_expr NOT CONTAINS STRING
                | cmp_expr NOT STARTSWITH STRING
                | cmp_expr NOT ENDSWITH STRING"""
    negated = len(p) == 5
    op = p.slice[-2].type.lower()
    p[0] = ast.Match(op, p[1], _string_literal(p[len(p) - 1]), negated, p.lexpos(2))


def p_cmp_between(p):
    """cmp_expr : cmp_expr BETWEEN unary AND unary
                | cmp_expr NOT BETWEEN unary AND unary"""
    negated = len(p) == 7
    p[0] = _create_between(p[1], p[len(p) - 3], p[len(p) - 1], p.lexpos(2), negated)


def p_cmp_in(p):
    """cmp_expr : cmp_expr IN LPAREN string_list RPAREN
                | cmp_expr NOT IN LPAREN string_list RPAREN"""
    negated = len(p) == 7
    p[0] = _create_in(p[1], p[len(p) - 2], negated, p.lexpos(2))


def p_cmp_unary(p):
    "cmp_expr : unary"
    p[0] = p[1]


def p_string_list(p):
    """string_list : STRING
                   | string_list COMMA STRING"""
    if len(p) == 2:
        p[0] = [_string_literal(p[1])]
    else:
        p[1].append(_string_literal(p[3]))
        p[0] = p[1]


def p_unary(p):
    """unary : PLUS unary
             | MINUS unary
             | NOT unary
             | primary"""
    if len(p) == 2:
        p[0] = p[1]
        return
    kind = p.slice[1].type
    pos = p.lexpos(1)
    if kind == "PLUS":
        p[0] = p[2]
    elif kind == "MINUS":
        p[0] = ast.Negate(p[2], pos)
    else:
        operand = _as_boolean(p[2])
        # NOT NOT x is x: the operand is a condition, so its value is TRUE, FALSE or null, all of which survive.
        p[0] = operand.operand if isinstance(operand, ast.Not) else ast.Not(operand, pos)


def p_primary_literal(p):
    """primary : STRING
               | DECIMAL
               | FLOAT
               | TRUE
               | FALSE
               | NULL"""
    kind = p.slice[1].type
    pos = p.lexpos(1)
    text = p[1]
    if kind == "STRING":
        p[0] = ast.Literal(_string_literal(text), "string", pos)
    elif kind == "DECIMAL":
        p[0] = _decimal_literal(text, pos)
    elif kind == "FLOAT":
        p[0] = _float_literal(text, pos)
    elif kind == "NULL":
        p[0] = ast.Literal(None, "null", pos)
    else:
        p[0] = ast.Literal(kind == "TRUE", "bool", pos)


def p_primary_id(p):
    "primary : ID"
    p[0] = ast.Property(p[1], p.lexpos(1))


def p_primary_group(p):
    "primary : LPAREN or_expr RPAREN"
    p[0] = p[2]


def p_error(tok):
    """Stop at the first token the automaton cannot take; `parse` decides what that means."""
    state = _parser.statestack[-1] if _parser is not None and _parser.statestack else None
    expected: tuple[str, ...] = ()
    if state is not None:
        expected = tuple(sorted(k for k in _parser.action[state] if k != "error"))
    raise _ParseStop(tok, expected)


# ---- driver ----------------------------------------------------------------------------------------------------

_parser = None
_build_lock = threading.Lock()
_parse_lock = threading.Lock()


def _get_parser():
    """Build the LALR tables once per process, lazily and in memory (no parsetab, no parser.out)."""
    global _parser
    if _parser is None:
        with _build_lock:
            if _parser is None:
                _parser = yacc.yacc(module=sys.modules[__name__], start=start, write_tables=False, debug=False,
                                    tabmodule="_filterlib_sql92_no_parsetab", errorlog=yacc.NullLogger())
    return _parser


class _Feed:
    """Token source for PLY that remembers what it handed out (the lookahead JavaCC would also have lexed)."""

    def __init__(self, source):
        self.source = source
        self.seen: list = []

    def token(self):
        """Next token, recorded."""
        tok = self.source.token() if hasattr(self.source, "token") else next(self.source, None)
        if tok is not None:
            self.seen.append(tok)
        return tok


@dataclass(frozen=True)
class ParseResult:
    """A parsed selector: the checked tree, and the trailing text RocketMQ silently ignores ('' when none)."""

    tree: ast.Node
    ignored_text: str
    ignored_position: int | None


def _line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of an offset (lines end at LF)."""
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _where(text: str, pos: int) -> str:
    """'line L, column C' for messages."""
    line, col = _line_col(text, pos)
    return f"column {col}" if line == 1 else f"line {line}, column {col}"


# ActiveMQ selector words RocketMQ removed: the hint a user needs when one of them stops a parse.
_UNSUPPORTED = {
    "LIKE": "no RocketMQ version supports LIKE; CONTAINS, STARTSWITH and ENDSWITH exist since 5.1.3",
    "ESCAPE": "no RocketMQ version supports LIKE ... ESCAPE",
}


def _syntax_error(text: str, stop: _ParseStop, old_grammar: bool) -> FilterSyntaxError:
    """A readable FilterSyntaxError for a token the grammar cannot take (or a lexical error)."""
    tok = stop.token
    expected = stop.expected
    if old_grammar:  # the one LALR table holds 5.1.3's operators; an older grammar never expects them
        expected = tuple(k for k in expected if k not in KEYWORDS_5_1_3)
    if tok is None:
        pos = len(text)
        msg = f"Invalid MessageSelector: unexpected end of expression at {_where(text, pos)}"
        if expected:
            msg += "; expected " + _expected(expected)
        return FilterSyntaxError(msg, text, pos, "", java_cause="ParseException")
    if tok.type == "LEXERROR":
        msg = f"Invalid MessageSelector: lexical error at {_where(text, tok.lexpos)}: {tok.reason}"
        return FilterSyntaxError(msg, text, tok.lexpos, tok.value, java_cause="TokenMgrError")
    since = None
    if old_grammar and tok.type == "ID" and tok.value.upper() in KEYWORDS_5_1_3:
        since = "5.1.3"
    msg = f"Invalid MessageSelector: encountered '{tok.value}' at {_where(text, tok.lexpos)}"
    if expected:
        msg += "; expected " + _expected(expected)
    if since:
        msg += f" ({tok.value.upper()} is an operator only since RocketMQ {since})"
    elif tok.type == "ID" and tok.value.upper() in _UNSUPPORTED:
        msg += f" ({_UNSUPPORTED[tok.value.upper()]})"
    return FilterSyntaxError(msg, text, tok.lexpos, str(tok.value), since=since, java_cause="ParseException")


def _expected(kinds: tuple[str, ...]) -> str:
    """Human list of expected token kinds."""
    names = [_DISPLAY.get(k, k) for k in kinds]
    return names[0] if len(names) == 1 else "one of " + ", ".join(names)


def _run(parser, feed) -> ast.Node:
    """One LALR parse over a token feed; a semantic error notes the outermost `+` still waiting for its operand."""
    try:
        return parser.parse(lexer=feed, tracking=False)
    except _SemanticError as e:
        e.open_plus = next((s for s in parser.symstack if isinstance(s, lex.LexToken) and s.type == "PLUS"), None)
        raise


def _probe(tok) -> lex.LexToken:
    """A `>` standing in for a lexically bad token: as a lookahead it completes exactly the rules JavaCC finishes
    without peeking at the next token (literals, unary operators, the comparison operators, IS NULL, IN, BETWEEN;
    `>` follows cmp_expr but never eq_expr, and_expr or or_expr, whose JavaCC loops must lex the next token)."""
    probe = lex.LexToken()
    probe.type, probe.value, probe.lineno, probe.lexpos = "GT", ">", tok.lineno, tok.lexpos
    return probe


_recognizer = None


def _recognize(toks: list) -> tuple[set[int], bool]:
    """Syntax only (no checks run, as in a JavaCC scan): where `+ operand`s were completed, and whether every
    token was taken (the parse stopped only at the end of `toks`, or accepted them)."""
    completed, stop = _recognize_to(toks)
    return completed, stop is None


def _recognize_to(toks: list) -> tuple[set[int], Any]:
    """`_recognize`, with the first token the syntax could not take (None when it took every one)."""
    global _recognizer
    if _recognizer is None:  # the same LALR tables, with an action that only notes completed `+` operands
        _recognizer = copy.copy(_get_parser())
        _recognizer.productions = [copy.copy(prod) for prod in _recognizer.productions]
        for prod in _recognizer.productions:
            prod.callable = _note_plus
        _recognizer.errorfunc = _stop
    _recognizer.completed_plus = set()
    try:
        _recognizer.parse(lexer=_Feed(iter(toks)), tracking=False)
    except _ParseStop as stop:
        return _recognizer.completed_plus, stop.token
    return _recognizer.completed_plus, None


def _note_plus(p) -> None:
    """Recognizer action: remember where each `+ operand` was completed."""
    if len(p) == 3 and p.slice[1].type == "PLUS":
        _recognizer.completed_plus.add(p.lexpos(1))


def _stop(tok) -> None:
    """Recognizer error handler: stop at the first token the syntax cannot take."""
    raise _ParseStop(tok, ())


def _plus_scan_error(text: str, plus, old_grammar: bool) -> FilterSyntaxError | None:
    """JavaCC's LOOKAHEAD("+" unaryExpr()): a `+` operand is scanned (lexed, syntax only) before any of its
    actions run, so a lexical error in it is a TokenMgrError and a syntax error a ParseException at the `+`.
    None when the operand scans cleanly (then its semantic errors stand)."""
    toks = list(iter(make_lexer(text, not old_grammar).token, None))
    rest = toks[next(i for i, t in enumerate(toks) if t.lexpos == plus.lexpos):]
    bad = rest[-1] if rest[-1].type == "LEXERROR" else None
    clean = rest[:-1] if bad is not None else rest
    # The scan reads no further than the operand's last token: a bad token right after it does not matter, nor does
    # a token the syntax cannot take there (`+9223372036854775808 x`: the operand scans, its NumberFormatException
    # stands), which the probe stands in for too.
    completed, stop = _recognize_to(clean if bad is None else [*clean, _probe(bad)])
    if plus.lexpos in completed:
        return None
    at = next((i for i, t in enumerate(clean) if t is stop), None)
    if at is not None and plus.lexpos in _recognize([*clean[:at], _probe(stop)])[0]:
        return None
    if bad is not None and _recognize(clean)[1]:
        return _syntax_error(text, _ParseStop(bad, ()), old_grammar)
    return _syntax_error(text, _ParseStop(plus, ()), old_grammar)


def parse(text: str, with_5_1_3_keywords: bool = True) -> ParseResult:
    """Parse a selector as RocketMQ does; FilterSyntaxError where RocketMQ throws MQFilterException.

    Errors come in Java's order: JavaCC lexes lazily, so a check that completes before a lexically bad token
    wins over the lexical error (`c < 'x' %` is the comparison's RuntimeException); and a `+` operand is scanned
    before its checks run, so its lexical or syntax errors win over them.
    """
    parser = _get_parser()
    old_grammar = not with_5_1_3_keywords
    feed = _Feed(make_lexer(text, with_5_1_3_keywords))
    ignored_pos: int | None = None
    try:
        with _parse_lock:
            try:
                tree = _run(parser, feed)
            except _ParseStop as stop:
                tok = stop.token
                if tok is not None and tok.type == "LEXERROR":
                    try:
                        _run(parser, _Feed(iter([*feed.seen[:-1], _probe(tok)])))
                    except _ParseStop:
                        pass
                if tok is None or tok.type == "LEXERROR":
                    raise _syntax_error(text, stop, old_grammar) from None
                prefix = iter(feed.seen[:-1])
                try:
                    tree = _run(parser, _Feed(prefix))
                except _ParseStop:
                    raise _syntax_error(text, stop, old_grammar) from None
                ignored_pos = tok.lexpos
            tree = _as_boolean(tree)
    except _SemanticError as e:
        plus = e.open_plus
        if plus is not None:
            with _parse_lock:
                scan_error = _plus_scan_error(text, plus, old_grammar)
            if scan_error is not None:
                raise scan_error from None
        raise FilterSyntaxError(f"Invalid MessageSelector: {e} (at {_where(text, e.pos)})", text, e.pos, e.text,
                                java_cause=e.java_cause) from None
    if ast.depth(tree) > MAX_DEPTH:
        raise FilterSyntaxError(f"Invalid MessageSelector: expression nested deeper than {MAX_DEPTH} levels",
                                text, None, None, java_cause="StackOverflowError")
    ignored = text[ignored_pos:] if ignored_pos is not None else ""
    return ParseResult(tree, ignored, ignored_pos)
