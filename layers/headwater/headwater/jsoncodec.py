"""JSON in and out, fast and value-exact.

orjson is an order of magnitude faster than the stdlib, with two differences that matter for
payloads stored verbatim: it parses integers beyond 64 bits as floats (losing digits), and it
refuses strings holding lone surrogates. So parsing uses orjson only when the body holds no
run of 19+ digits (every shorter integer fits 64 bits exactly) and falls back to the stdlib on
anything orjson refuses; encoding falls back to the stdlib with ASCII escapes, which
represents every value exactly. NaN and infinities are rejected either way.

Nesting is capped at MAX_DEPTH levels (orjson's own parse limit), whichever parser runs, and
anything `loads` accepts `dumps` encodes. The stdlib's C codec recurses once per level and
gives up near the interpreter's recursion limit (1000 by default, less the caller's stack),
and orjson encodes at most 254 levels; past those, an explicit-stack parser and encoder
(slower, used only for such deep values) take over, so a deep value is never a
RecursionError."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson

from headwater.jsondepth import NestingTooDeep

#: The deepest nesting of arrays and objects accepted (`[]` is depth 1). orjson's limit: the
#: fast parser enforces it natively and no payload stored before the cap existed went deeper.
MAX_DEPTH = 1024

# Digits -> 1, everything else -> 0; a run of 19 ones marks a possible >64-bit integer.
# (bytes.translate + substring search: ~20x cheaper than a regex over the body.)
_DIGIT_MAP = bytes(1 if 0x30 <= b <= 0x39 else 0 for b in range(256))
_LONG_RUN = b"\x01" * 19
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _loads_stdlib(raw: bytes) -> Any:
    try:
        return json.loads(raw, parse_constant=_reject_constant, parse_float=_parse_float)
    except RecursionError:
        pass  # deeper than the C scanner can go from here: parse without recursion
    text = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads decodes
    return _loads_deep(text, MAX_DEPTH)


def loads(raw: bytes) -> Any:
    """Strict JSON: raises ValueError (or UnicodeDecodeError) on anything invalid, including
    nesting deeper than MAX_DEPTH (NestingTooDeep)."""
    if _LONG_RUN not in raw.translate(_DIGIT_MAP):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the stdlib decides: a real error, or something orjson is stricter on
    return _loads_stdlib(raw)


def exact(raw: bytes) -> bytes:
    """`raw` in an allocation of its own size. orjson 3.13 hands back its output buffer
    unshrunk: tracemalloc counts ~4 KB held by a 13-byte document, ~8 KB by a 1 KB one and
    ~780 KB by a 100 KB one (issue 42's soak: the frame cache held ~8x what it counted, and
    RSS followed). Whatever is kept (a record in a cached frame, a frame in a send buffer)
    must be copied; the copy costs ~0.5 us per KB."""
    return bytes(memoryview(raw))


def dumps(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes (exactly sized: `exact`)."""
    try:
        return exact(orjson.dumps(value))
    except TypeError:  # >64-bit ints, lone surrogates, deeper than orjson encodes
        pass
    try:
        return _ASCII_ENCODER.encode(value).encode()
    except RecursionError:
        return _dumps_deep(value).encode()


def is_scalar_text(text: str) -> bool:
    """True when `text` holds Unicode scalar values only: no lone surrogate, which JSON's
    `\\ud800` escapes can produce but UTF-8, DynamoDB strings and S3 keys cannot hold."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- without recursion -----------------------------------------------------------------------
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"null": None, "true": True, "false": False}
# The stdlib's own string scanner (C): escapes, lone surrogates and control characters
# exactly as json.loads treats them. Not in typeshed.
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _fail(msg: str, text: str, pos: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(msg, text, pos)


def _scalar(text: str, idx: int) -> tuple[Any, int]:
    """A string, number or literal starting at `idx` (the stdlib's rules), and its end."""
    if text.startswith('"', idx):
        return _scanstring(text, idx + 1, True)
    for word, value in _LITERALS.items():
        if text.startswith(word, idx):
            return value, idx + len(word)
    m = _NUMBER.match(text, idx)
    if m is None:
        for word in ("NaN", "Infinity", "-Infinity"):
            if text.startswith(word, idx):
                _reject_constant(word)
        raise _fail("Expecting value", text, idx)
    integer, frac, exp = m.groups()
    if frac or exp:
        return _parse_float(integer + (frac or "") + (exp or "")), m.end()
    return int(integer), m.end()


def _key(text: str, idx: int) -> tuple[str, int]:
    """An object key and its ':' at `idx`; returns the key and where its value starts."""
    if not text.startswith('"', idx):
        raise _fail("Expecting property name enclosed in double quotes", text, idx)
    key, idx = _scanstring(text, idx + 1, True)
    idx = _WS.match(text, idx).end()  # type: ignore[union-attr]
    if not text.startswith(":", idx):
        raise _fail("Expecting ':' delimiter", text, idx)
    return key, _WS.match(text, idx + 1).end()  # type: ignore[union-attr]


def _loads_deep(text: str, limit: int) -> Any:
    """json.loads's grammar and values with an explicit stack (no recursion), refusing
    nesting deeper than `limit`."""
    ws = _WS.match
    idx = ws(text, 0).end()  # type: ignore[union-attr]
    # Open containers, innermost last: (the container, the key its next value goes under).
    stack: list[tuple[list[Any] | dict[str, Any], str]] = []
    while True:
        value: Any
        opener = text[idx : idx + 1]
        if opener in ("[", "{"):
            if len(stack) >= limit:
                raise NestingTooDeep(limit, idx)
            idx = ws(text, idx + 1).end()  # type: ignore[union-attr]
            if text.startswith("]" if opener == "[" else "}", idx):
                value, idx = ([] if opener == "[" else {}), idx + 1
            elif opener == "[":
                stack.append(([], ""))
                continue
            else:
                key, idx = _key(text, idx)
                stack.append(({}, key))
                continue
        else:
            value, idx = _scalar(text, idx)
        # A complete value: store it in its container, closing every container it completes.
        while True:
            idx = ws(text, idx).end()  # type: ignore[union-attr]
            if not stack:
                if idx != len(text):
                    raise _fail("Extra data", text, idx)
                return value
            container, key = stack[-1]
            if isinstance(container, list):
                container.append(value)
            else:
                container[key] = value
            if text.startswith(",", idx):
                idx = ws(text, idx + 1).end()  # type: ignore[union-attr]
                if isinstance(container, dict):
                    key, idx = _key(text, idx)
                    stack[-1] = (container, key)
                break  # the next element
            if not text.startswith("]" if isinstance(container, list) else "}", idx):
                raise _fail("Expecting ',' delimiter", text, idx)
            idx += 1
            stack.pop()
            value = container


class _Text:
    """Already-encoded output on the encoder's work stack."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_encode_str = json.encoder.encode_basestring_ascii
_CLOSE_LIST, _CLOSE_DICT = _Text("]"), _Text("}")


def _float_text(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
    return float.__repr__(value)


def _key_text(key: object) -> str:
    """A dict key as the stdlib encoder writes it."""
    if isinstance(key, str):
        return _encode_str(key)
    if key is True or key is False or key is None:
        return _encode_str(json.dumps(key))
    if isinstance(key, int):
        return _encode_str(int.__repr__(key))
    if isinstance(key, float):
        return _encode_str(_float_text(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _dumps_deep(value: Any) -> str:
    """What _ASCII_ENCODER writes, with an explicit stack (no recursion)."""
    out: list[str] = []
    work: list[Any] = [value]
    while work:
        item = work.pop()
        if isinstance(item, _Text):
            out.append(item.text)
        elif isinstance(item, str):
            out.append(_encode_str(item))
        elif item is None or item is True or item is False:
            out.append(json.dumps(item))
        elif isinstance(item, int):
            out.append(int.__repr__(item))
        elif isinstance(item, float):
            out.append(_float_text(item))
        elif isinstance(item, list | tuple):
            out.append("[")
            work.append(_CLOSE_LIST)
            for i in range(len(item) - 1, -1, -1):
                work.append(item[i])
                if i:
                    work.append(_Text(","))
        elif isinstance(item, dict):
            out.append("{")
            work.append(_CLOSE_DICT)
            entries = list(item.items())
            for i in range(len(entries) - 1, -1, -1):
                k, v = entries[i]
                work.append(v)
                work.append(_Text(("," if i else "") + _key_text(k) + ":"))
        else:
            raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")
    return "".join(out)
