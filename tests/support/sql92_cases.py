"""The seeded random SQL92 selectors and property maps that tests send to the real SqlFilter and to filterlib."""

from __future__ import annotations

import random

SEED = 20240613
N_EXPRESSIONS = 5000
MAPS_PER_EXPRESSION = 8

NAMES = ["a", "b", "c", "TAGS", "A", "$x", "_y", "a1", "now", "ORDER", "INDEX"]
PROP_NAMES = ["a", "b", "c", "TAGS", "A", "$x", "_y", "a1", "now"]
STRINGS = ["'x'", "'5'", "''", "'it''s'", "'5.5'", "'true'", "'TRUE'", "'TagA'", "'TagB'", "'é😀'", "' 5'",
           "'NaN'", "'a b'", "'1e3'", "'-0'", "'\ud83d'", "'ab'", "'b'", "'A'"]
INTS = ["0", "1", "3", "5", "10", "2147483647", "2147483648", "9223372036854775807", "9223372036854775808",
        "5L", "7l", "2147483647L", "007", "0L", "100"]
FLOATS = ["1.5", "5.0", ".5", "5.", "1e3", "1E-3", "0.0", ".0", "0e5", "1e400", "1e-320", "1e-330", "3.5e+2",
          "5.5", "2.0", "1.7976931348623157e308", "1.8e308", "4.9e-324"]
KEYWORD_LITS = ["TRUE", "FALSE", "NULL", "true", "False", "null"]
JUNK = ["0L", "LIKE 'x%'", "#", ";", "!=", "==", "--c\n", "/* c */", "--x", "b = 1", ")", "(", "'unterminated",
        "/* open", "\"x\"", "*", "%", "\u00a0", "é", "5f", "0x10", ",", "IS", "NOT", "AND", "OR", "IN", "-", "+",
        "a", "'y'", "1.5f", ".", "contains", "ESCAPE", "=", "<>", "IS NOT", "\t", "\f", "/", "1e", "1e+"]
VALUES = [" 5", "5", "5.5", "1e3", "NaN", "-NaN", "+NaN", "Infinity", "-Infinity", "0x10", "0x1.4p2", "0X1P-2d",
          "9223372036854775808", "9223372036854775807", "-9223372036854775808", "2147483648", "2147483647",
          "-2147483648", "-0", "-0.0", "0.0", "0", "", "true", "TRUE", "false", "x", "abc", "1L", "5f", "5d", "5D",
          "+5", "05", "१२", "５", "1_000", " 5 ", "\t5", "5\x00", "1e", ".", "1.", ".5", "TagA", "TagB", "é", "😀",
          "10", "3", "1", "2", "1.0", "1e-400", "1e400", "4.9e-324", "it's", "a b", "ab", "xaby", "\ud83d", "😀x",
          "0x", "0x1p", "1e+3", "+.5e-1f", "NaNd", "infinity", "٣", "-", "+", "1__0", "00", "3.0", "2.5", "-1"]


CHAIN_NUMBERS = ["1", "3", "5", "10", "1.5", "5.0", "10.0", "-1", "-1.5", "2147483648", "-5.0"]
CHAIN_VALUES = ["1", "3", "5", "10", "1.5", "5.0", "10.0", "-1", "-1.5", "2147483648", "-5.0", "NaN", "-0.0",
                "Infinity", "TagA", "x", "5.5", "3.0", "-5", "0", " 5", "abc"]
N_CHAINS = 2000

# Refusals whose Java cause depends on JavaCC's order of events: lazy lexing (a check completed before a
# lexically bad character wins, one that must peek at the next token does not), the `+` operand scanned before
# its checks run, and createBetween ordering literal bounds with __compare.
ORDER_OF_EVENTS = ["c < 'ab' %", "NOT 'x' .", "a BETWEEN NOT 'x' %", "'x' IN ('y') *", "TRUE = 1 %", "a AND 5 %",
                   "a BETWEEN 'x' %", "a > +('x' > 1 %", "a = +(1e400 <> (b)", "a > +'x' %", "a > +('x' > 1) %",
                   "+(a a %", "a > + + 'x' %", "a > +(b) AND 'x' > 1 %", "a BETWEEN 'x' AND TRUE",
                   "a BETWEEN TRUE AND 'x'", "a BETWEEN 'x' AND 5", "a BETWEEN 2 AND 1.5", "a = 99999999999999999999 %",
                   "a > 0.0 %", "(a = 1 %", "a IN ('x' %", "a IS %", "a IS NULL %"]


class _Gen:
    """Seeded random selector text over the whole grammar, deliberately wandering off it now and then."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def ws(self) -> str:
        r = self.r.random()
        if r < 0.85:
            return " "
        return self.r.choice(["", "  ", "\t", "\n", "\r\n", "/* k */", "--note\n", "\f", " /**/ "])

    def name(self) -> str:
        return self.r.choice(NAMES)

    def literal(self) -> str:
        k = self.r.random()
        if k < 0.35:
            return self.r.choice(STRINGS)
        if k < 0.65:
            return self.r.choice(INTS)
        if k < 0.9:
            return self.r.choice(FLOATS)
        return self.r.choice(KEYWORD_LITS)

    def unary(self, depth: int) -> str:
        k = self.r.random()
        if k < 0.45:
            return self.name()
        if k < 0.75:
            return self.literal()
        if k < 0.82:
            return "-" + self.ws() + self.unary(depth)
        if k < 0.86:
            return "+" + self.unary(depth)
        if k < 0.92:
            return self.r.choice(["NOT", "not"]) + " " + self.unary(depth)
        if depth > 0:
            return "(" + self.expr(depth - 1) + ")"
        return self.name()

    def comparison(self, depth: int) -> str:
        left = self.unary(depth)
        k = self.r.random()
        w = self.ws
        if k < 0.25:
            return left + w() + self.r.choice([">", ">=", "<", "<="]) + w() + self.unary(depth)
        if k < 0.45:
            return left + w() + self.r.choice(["=", "<>"]) + w() + self.unary(depth)
        if k < 0.55:
            return left + w() + self.r.choice(["IS NULL", "IS NOT NULL", "is null", "IS  NOT\tNULL"])
        if k < 0.65:
            neg = self.r.choice(["", "NOT "])
            return f"{left} {neg}BETWEEN {self.unary(depth)} AND {self.unary(depth)}"
        if k < 0.75:
            neg = self.r.choice(["", "NOT "])
            items = [self.r.choice(STRINGS) if self.r.random() < 0.93 else self.literal()
                     for _ in range(self.r.randint(1, 6))]
            return f"{left} {neg}IN ({', '.join(items)})"
        if k < 0.85:
            neg = self.r.choice(["", "NOT "])
            op = self.r.choice(["CONTAINS", "STARTSWITH", "ENDSWITH", "contains", "EndsWith"])
            search = self.r.choice(STRINGS) if self.r.random() < 0.93 else self.literal()
            return f"{left} {neg}{op} {search}"
        return left

    def expr(self, depth: int) -> str:
        parts = [self.comparison(depth)]
        for _ in range(self.r.choice([0, 0, 0, 1, 1, 2, 3])):
            parts.append(self.r.choice([" AND ", " OR ", " and ", " or "]))
            parts.append(self.comparison(depth))
        return "".join(parts)

    def selector(self) -> str:
        text = self.expr(self.r.choice([0, 1, 1, 2, 3]))
        k = self.r.random()
        if k < 0.12:
            text += self.r.choice(["", " "]) + self.r.choice(JUNK) + self.r.choice(["", " a = 1", " 'z'"])
        elif k < 0.2:
            text = self.mutate(text)
        elif k < 0.23:
            text = self.r.choice(JUNK) + " " + text
        return text

    def mutate(self, text: str) -> str:
        toks = text.split(" ")
        i = self.r.randrange(len(toks))
        op = self.r.random()
        if op < 0.4:
            del toks[i]
        elif op < 0.8:
            toks.insert(i, self.r.choice(JUNK + NAMES + INTS + ["AND", "OR", "NOT", "(", ")"]))
        else:
            toks[i] = toks[i] + toks[i]
        return " ".join(toks)

    def chain(self) -> str:
        """An AND/OR chain of simple property predicates (the evaluator's fused fast path) with exact bounds."""
        preds = []
        for _ in range(self.r.randint(2, 5)):
            n = self.r.choice(["a", "b", "TAGS"])
            lit = self.r.choice(CHAIN_NUMBERS)
            k = self.r.random()
            if k < 0.12:
                preds.append(f"{n} IS {self.r.choice(['', 'NOT '])}NULL")
            elif k < 0.24:
                preds.append(f"{n} {self.r.choice(['', 'NOT '])}IN ('TagA', '5', 'x')")
            elif k < 0.5:
                preds.append(f"{n} {self.r.choice(['=', '<>', '>', '>=', '<', '<='])} {lit}")
            elif k < 0.62:
                lo, hi = sorted([self.r.choice(CHAIN_NUMBERS[:5]), self.r.choice(CHAIN_NUMBERS[:5])], key=float)
                if self.r.random() < 0.5:
                    lo, hi = self.r.choice([("1.5", "5.0"), ("-1.5", "10.0"), ("1", "10"), ("3", "3")])
                preds.append(f"{n} {self.r.choice(['', 'NOT '])}BETWEEN {lo} AND {hi}")
            elif k < 0.72:
                preds.append(self.r.choice([f"{lit} = {n}", f"'TagA' = {n}", f"{n} = 'TagA'", f"'5' <> {n}"]))
            elif k < 0.8:
                preds.append(n)
            elif k < 0.9:
                preds.append(f"({n} > {lit} OR {n} IS NULL)")
            else:
                preds.append(f"{n} CONTAINS 'a'")
        glue = self.r.choice([" AND ", " OR ", None])
        if glue:
            return glue.join(preds)
        return "".join(p + self.r.choice([" AND ", " OR "]) for p in preds[:-1]) + preds[-1]

    def chain_props(self) -> dict:
        return {n: self.r.choice(CHAIN_VALUES) for n in ("a", "b", "TAGS") if self.r.random() < 0.8}

    def props(self) -> dict:
        m = {}
        for n in PROP_NAMES:
            if self.r.random() < 0.55:
                m[n] = self.r.choice(VALUES) if self.r.random() < 0.97 else None
        return m


def selector_cases() -> list[dict]:
    """Fixed and seeded random selectors, each with property maps: the same cases on every run."""
    gen = _Gen(SEED)
    fixed = ["a > 5", "a = 'x'", "'x' = a", "'x' <> a", "a = b", "TRUE = a", "a = FALSE", "NOT a", "a", "NULL",
             "TRUE", "FALSE", "a IS NULL", "a NOT IN ('x','y')", "a NOT CONTAINS ''", "-a > 5", "a > b",
             "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
             "b='y' OR a=1", "a=1 OR b='y'", "a between 1.0 and 2.0", "a between -1 and -5", "1 = TRUE",
             "a > 1.0", "a > 0.5", "a <= -2147483648", "a = -9223372036854775807", "-(a = 1) > 2",
             "-(a = 1) = a", "(a = 'x') = b", "a = 'x' = TRUE", "NOT NOT a", "NOT NOT NOT a", "5 CONTAINS '5'",
             "(a > 1) CONTAINS 'T'", "a = - -5", "a > -1.5", "a BETWEEN 1 AND 2147483648", "a = 5L",
             "a = 2147483648", "- 'x' = a", "-NULL = a", "a > -TRUE", "a IS NULL IS NULL", "NULL IS NULL",
             "(a <> 1) = (b <> 2)", "a > 3000000000", "a = 1 --x", "a = 1 --x\n AND b = 2",
             "a = 1 /* open", "a Is NoT nUlL", "a IN ('x' , 'y' ,)", "a IN ()", "a = 'line\nbreak'",
             "a CONTAINS '\ud83d'", "a ENDSWITH '\ude00'", "((((((((((a = 1))))))))))", "a = 1 AND", "a =",
             "a BETWEEN 1 AND", "a BETWEEN 2 AND 1.5", "a BETWEEN 1.5 AND 2", "a NOT BETWEEN 10 AND 1",
             "a BETWEEN NULL AND 1", "a NOT BETWEEN NULL AND 1", "a > '5'", "5 IN ('5')", "a IS 5", "a IS NOT 5",
             "NOT a > 1", "(a > 1) > 0", "a + 1 > 2", "a = 'x' b = 'y'", "a = 1.5f AND b = 1", "a > 0x10",
             "a > 007", "a = 'x' ; b", "a = 'x' #", "a != 1", "a == 1", "a = \"x\"", "a\u00a0= 1", "é = 1",
             "a = 1e-320", "a <> 'x' OR b <> 'y'", "contains = 1", "a.b = 1", "a-b = 1", "a = -0.5",
             "a > 1 AND b > 1 AND c > 1 OR a < 0", "a IN ('TagA','TagB','x','y','z','w')", "a STARTSWITH ''",
             # a `+` operand scans whole before the token after it is looked at: its own errors stand
             "+9223372036854775808 x", "+ +9223372036854775808 z", "+ (a x)", "+ 'x' y", "+a b = 1",
             "+9223372036854775808 EndsWith '5'"]
    cases = []
    texts = fixed + [gen.selector() for _ in range(N_EXPRESSIONS)]
    for i, text in enumerate(texts):
        cases.append({"kind": "sql", "id": f"s{i}", "expr": text,
                      "props": [gen.props() for _ in range(MAPS_PER_EXPRESSION)]})
    for i in range(N_CHAINS):
        cases.append({"kind": "sql", "id": f"c{i}", "expr": gen.chain(),
                      "props": [gen.chain_props() for _ in range(MAPS_PER_EXPRESSION)]})
    for i, text in enumerate(ORDER_OF_EVENTS):
        cases.append({"kind": "sql", "id": f"o{i}", "expr": text, "props": [{"a": "1"}]})
    return cases
