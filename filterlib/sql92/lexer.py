"""PLY lexer for RocketMQ's SQL92 selector, matching the JavaCC token manager of SelectorParser.jj.

Longest match as JavaCC does it: `--` is a comment only when a line break ends it (else two minus signs),
`0L` is `0` then the identifier `L`, `5f` is `5` then `f`, keywords are case-insensitive and reserved, and
identifiers are ASCII only. An unlexable character does not raise here: it becomes one LEXERROR token, so that
the parser can decide — like JavaCC, which lexes lazily — whether the text before it already ended the selector.
"""

from __future__ import annotations

import sys
import threading

from ply import lex

KEYWORDS_OLD = ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS")
KEYWORDS_5_1_3 = ("CONTAINS", "STARTSWITH", "ENDSWITH")
# The reserved words of a grammar version: CONTAINS, STARTSWITH and ENDSWITH became keywords in 5.1.3.
RESERVED_OLD = {k: k for k in KEYWORDS_OLD}
RESERVED_5_1_3 = {**RESERVED_OLD, **{k: k for k in KEYWORDS_5_1_3}}

tokens = (
    *KEYWORDS_OLD,
    *KEYWORDS_5_1_3,
    "DECIMAL", "FLOAT", "STRING", "ID",
    "EQ", "NE", "GT", "GE", "LT", "LE", "LPAREN", "RPAREN", "COMMA", "PLUS", "MINUS",
    "LEXERROR",
)

# JavaCC's whitespace: space, tab, LF, CR, FF only (no other Unicode spaces).
t_ignore = " \t\n\r\f"

t_NE = r"<>"
t_GE = r">="
t_LE = r"<="
t_EQ = r"="
t_GT = r">"
t_LT = r"<"
t_LPAREN = r"\("
t_RPAREN = r"\)"
t_COMMA = r","
t_PLUS = r"\+"
t_MINUS = r"-"


def t_LINE_COMMENT(t):
    r"--[^\n\r]*(?:\r\n|\r|\n)"
    return None


def t_BLOCK_COMMENT(t):
    r"/\*[^*]*\*+(?:[^*/][^*]*\*+)*/"
    return None


def t_FLOAT(t):
    r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
    return t


def t_DECIMAL(t):
    r"0|[1-9][0-9]*[lL]?"
    return t


def t_STRING(t):
    r"'[^']*(?:''[^']*)*'"
    return t


def t_ID(t):
    r"[A-Za-z_$][A-Za-z0-9_$]*"
    t.type = t.lexer.reserved.get(t.value.upper(), "ID")
    return t


def t_error(t):
    """Turn the first unlexable character into a LEXERROR token and end the stream there."""
    data = t.lexer.lexdata
    pos = t.lexer.lexpos
    ch = data[pos]
    if ch == "'":
        t.value = data[pos:]
        t.reason = "unterminated string literal"
    elif data.startswith("/*", pos):
        t.value = data[pos:]
        t.reason = "unterminated /* comment"
    else:
        t.value = ch
        if ch == '"':
            t.reason = "double quotes are not allowed (strings use single quotes)"
        elif ch == "!":
            t.reason = "'!' is not an operator (use <> or NOT)"
        elif ch.isspace():
            t.reason = f"U+{ord(ch):04X} is not whitespace here (only space, tab, CR, LF and FF are)"
        elif ord(ch) > 127:
            t.reason = f"non-ASCII character U+{ord(ch):04X} outside a string literal"
        elif ch in "*/%":
            t.reason = (f"unexpected character {ch!r}: no RocketMQ version has arithmetic in selectors, and property "
                        "names may hold only A-Z, a-z, 0-9, '_' and '$'")
        else:
            t.reason = f"unexpected character {ch!r}"
    t.type = "LEXERROR"
    t.lexer.lexpos = len(data)
    return t


_master = None
_master_lock = threading.Lock()


def _master_lexer():
    """Build the PLY lexer once per process (in memory: no lextab is ever written)."""
    global _master
    if _master is None:
        with _master_lock:
            if _master is None:
                _master = lex.lex(module=sys.modules[__name__], optimize=False, errorlog=lex.NullLogger())
    return _master


def make_lexer(text: str, with_5_1_3_keywords: bool = True):
    """A fresh lexer over `text`; the keyword set follows the grammar version (CONTAINS & co. since 5.1.3)."""
    lexer = _master_lexer().clone()
    lexer.reserved = RESERVED_5_1_3 if with_5_1_3_keywords else RESERVED_OLD
    lexer.input(text)
    return lexer
