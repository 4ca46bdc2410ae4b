"""Java's String and number semantics that filter and store code share, in one place.

RocketMQ's results depend on Java details a Python port gets wrong by default: hash codes over UTF-16 units,
`trim` stripping every char <= U+0020, `split` dropping trailing empty pieces, `Integer.parseInt` accepting
Unicode digits, and `new String(bytes, UTF_8)` replacing malformed input unit by unit as OpenJDK 17 does.
"""

from __future__ import annotations

import sys

_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_JAVA_TRIM_CHARS = "".join(chr(c) for c in range(0x21))


def to_int32(value: int) -> int:
    """Java `(int)` narrowing of an integer: keep the low 32 bits as a signed value."""
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


def utf16_units(text: str) -> memoryview:
    """The Java `char` sequence of a Python string (lone surrogates kept as single units)."""
    return memoryview(text.encode(_UTF16_NATIVE, "surrogatepass")).cast("H")


def java_string_hash(text: str) -> int:
    """Java `String.hashCode`: over UTF-16 code units, wrapped to a signed 32-bit int."""
    units = text.encode("ascii") if text.isascii() else utf16_units(text)
    h = 0
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def java_trim(text: str) -> str:
    """Java `String.trim`: strip leading and trailing chars <= U+0020 (not Unicode spaces)."""
    return text.strip(_JAVA_TRIM_CHARS)


def java_split(text: str, separator: str) -> list[str]:
    """Java `String.split` on a literal separator with limit 0: trailing empty pieces removed, '' gives ['']."""
    if text == "":
        return [""]
    pieces = text.split(separator)
    while pieces and pieces[-1] == "":
        pieces.pop()
    return pieces


def java_parse_int(text: str, bits: int = 32) -> int | None:
    """`Integer.parseInt` (`Long.parseLong` with bits=64): a sign, then BMP Unicode decimal digits, in range;
    None where Java throws."""
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or not digits.isdecimal() or any(ord(c) > 0xFFFF for c in digits):
        return None
    value = int(text)
    return value if -(1 << (bits - 1)) <= value < (1 << (bits - 1)) else None


def java_is_blank(text: str) -> bool:
    """commons-lang `StringUtils.isBlank`: empty, or only `Character.isWhitespace` chars (not the no-break
    spaces and NEL that Python's isspace also counts)."""
    return all(c.isspace() and c not in "\x85\u00a0\u2007\u202f" for c in text)


REPL = "\ufffd"



def _cont(b: int) -> bool:
    return (b & 0xC0) == 0x80


def java_utf8_encode(text: str) -> bytes:
    """Java `String.getBytes(UTF_8)`: surrogate pairs joined, each unpaired surrogate written as `?`."""
    if text.isascii():
        return text.encode("ascii")
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return joined.encode("utf-8", "replace")


def java_utf8_decode(data: bytes) -> str:
    """Decode bytes the way `new String(bytes, UTF_8)` does on OpenJDK 17 (one U+FFFD per malformed unit)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out: list[str] = []
    n = len(data)
    sp = 0
    while sp < n:
        b1 = data[sp]
        rem = n - sp
        if b1 < 0x80:
            out.append(chr(b1))
            sp += 1
        elif (b1 >> 5) == 0b110 and (b1 & 0x1E) != 0:
            if rem < 2:
                out.append(REPL)
                break
            b2 = data[sp + 1]
            if not _cont(b2):
                out.append(REPL)
                sp += 1
            else:
                out.append(chr(((b1 & 0x1F) << 6) | (b2 & 0x3F)))
                sp += 2
        elif (b1 >> 4) == 0b1110:
            if rem < 3:
                if rem > 1 and _malformed3_2(b1, data[sp + 1]):
                    out.append(REPL)
                    sp += 1
                    continue
                out.append(REPL)
                break
            b2, b3 = data[sp + 1], data[sp + 2]
            if _malformed3_2(b1, b2) or not _cont(b3):
                out.append(REPL)
                sp += 1 if _malformed3_2(b1, b2) else 2
                continue
            c = ((b1 & 0x0F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F)
            out.append(REPL if 0xD800 <= c <= 0xDFFF else chr(c))
            sp += 3
        elif (b1 >> 3) == 0b11110:
            if rem < 4:
                if b1 > 0xF4 or (rem > 1 and _malformed4_2(b1, data[sp + 1])):
                    out.append(REPL)
                    sp += 1
                    continue
                if rem > 2 and not _cont(data[sp + 2]):
                    out.append(REPL)
                    sp += 2
                    continue
                out.append(REPL)
                break
            b2, b3, b4 = data[sp + 1], data[sp + 2], data[sp + 3]
            uc = ((b1 & 0x07) << 18) | ((b2 & 0x3F) << 12) | ((b3 & 0x3F) << 6) | (b4 & 0x3F)
            if not _cont(b2) or not _cont(b3) or not _cont(b4) or not (0x10000 <= uc <= 0x10FFFF):
                out.append(REPL)
                if b1 > 0xF4 or _malformed4_2(b1, b2):
                    sp += 1
                elif not _cont(b3):
                    sp += 2
                else:
                    sp += 3
                continue
            out.append(chr(uc))
            sp += 4
        else:
            out.append(REPL)
            sp += 1
    return "".join(out)


def _malformed3_2(b1: int, b2: int) -> bool:
    return (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _cont(b2)


def _malformed4_2(b1: int, b2: int) -> bool:
    return (b1 == 0xF0 and (b2 < 0x90 or b2 > 0xBF)) or (b1 == 0xF4 and (b2 & 0xF0) != 0x80) or not _cont(b2)
