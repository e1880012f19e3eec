"""Number text exactly as aviso-server (Rust) reads and writes it.

aviso parses identifier values with Rust's `str::parse` and writes them back with Rust's
`Display` (canonical identifier values) or with serde_json (JSON numbers turned into identifier
strings, and every JSON body it emits). Python's `int()`/`float()`/`repr()` differ at the edges
(whitespace, `_`, non-ASCII digits, `1e+16` vs `1e16`, `1.0` vs `1`), so each of those rules
lives here once.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

_EMPTY_INT = "cannot parse integer from empty string"
_INVALID_DIGIT = "invalid digit found in string"
_POS_OVERFLOW = "number too large to fit in target type"
_NEG_OVERFLOW = "number too small to fit in target type"
_EMPTY_FLOAT = "cannot parse float from empty string"
_INVALID_FLOAT = "invalid float literal"

# Rust's f64 grammar: sign? ( inf | infinity | nan | digits[.digits][e sign? digits] | .digits[...])
_RUST_FLOAT = re.compile(
    r"[+-]?(?:(?i:inf|infinity|nan)|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
)


#: Rust's char::is_whitespace (Unicode White_Space), which `str::trim` strips
RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def rust_trim(text: str) -> str:
    return text.strip(RUST_WHITESPACE)


class RustParseError(ValueError):
    """The text Rust's parser reports (aviso puts it in the error body's `details`)."""


def parse_rust_int(text: str, *, signed: bool = True, bits: int = 64) -> int:
    """`str::parse::<i64>()` (or `u32`, `u64`): ASCII digits, one optional sign, no spaces."""
    if text == "":
        raise RustParseError(_EMPTY_INT)
    if text in ("+", "-"):
        raise RustParseError(_INVALID_DIGIT)
    negative = False
    digits = text
    if text[0] == "+":
        digits = text[1:]
    elif text[0] == "-" and signed:
        negative, digits = True, text[1:]
    if signed:
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    else:
        lo, hi = 0, 2**bits - 1
    value = 0
    # Digit by digit like core::num: a bad digit is reported only if no overflow came first.
    for ch in digits:
        if not ("0" <= ch <= "9"):
            raise RustParseError(_INVALID_DIGIT)
        value = value * 10 + (ord(ch) - 48)
        if negative and -value < lo:
            raise RustParseError(_NEG_OVERFLOW)
        if not negative and value > hi:
            raise RustParseError(_POS_OVERFLOW)
    return -value if negative else value


def parse_rust_f64(text: str) -> float:
    """`str::parse::<f64>()`: accepts inf/infinity/nan (any case), rejects spaces and `_`."""
    if text == "":
        raise RustParseError(_EMPTY_FLOAT)
    if not _RUST_FLOAT.fullmatch(text):
        raise RustParseError(_INVALID_FLOAT)
    return float(text)


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip digits d and exponent e with |value| == int(d) * 10**e (d w/o zeros)."""
    _sign, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).lstrip("0") or "0"
    assert isinstance(exponent, int)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    return stripped, exponent


def rust_display_f64(value: float) -> str:
    """Rust's `format!("{}", f64)`: shortest round-trip digits, positional, `1` not `1.0`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    digits, exponent = _shortest_digits(value)
    if exponent >= 0:
        return sign + digits + "0" * exponent
    point = len(digits) + exponent
    if point > 0:
        return sign + digits[:point] + "." + digits[point:]
    return sign + "0." + "0" * (-point) + digits


def ryu_f64(value: float) -> str:
    """serde_json's float text (the ryu crate): `1.0`, `0.1`, `1e21`, `1.5e-7`."""
    if not math.isfinite(value):
        raise ValueError("JSON cannot carry a non-finite number")
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    digits, k = _shortest_digits(value)
    length = len(digits)
    kk = length + k
    if k >= 0 and kk <= 21:
        return sign + digits + "0" * k + ".0"
    if 0 < kk <= 21:
        return sign + digits[:kk] + "." + digits[kk:]
    if -6 < kk <= 0:
        return sign + "0." + "0" * (-kk) + digits
    mantissa = digits if length == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{kk - 1}"


def serde_number_text(value: int | float) -> str:
    """`serde_json::Number::to_string()`: integers that fit i64/u64 verbatim, others as f64."""
    if isinstance(value, int) and I64_MIN <= value <= U64_MAX:
        return str(value)
    return ryu_f64(float(value))


_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _escape_json_string(text: str) -> str:
    if _NEEDS_ESCAPE.search(text) is None:  # the common case: nothing to escape
        return '"' + text + '"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20:
            out.append(
                {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(code, f"\\u{code:04x}")
            )
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def wire_json(value: Any) -> str:
    """JSON text byte-for-byte as aviso writes it: compact, object keys sorted at every level
    (serde_json's map is a BTreeMap), floats in ryu form, non-ASCII unescaped."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return serde_number_text(value)
    if isinstance(value, float):
        return ryu_f64(value)
    if isinstance(value, str):
        return _escape_json_string(value)
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ",".join(f"{_escape_json_string(k)}:{wire_json(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(wire_json(v) for v in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")
