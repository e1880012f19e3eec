"""Durable Streams wire helpers: header/query parsing, SSE framing, cursors and ETags.

Everything here is a pure function over strings and bytes; no I/O, no clock (callers pass
``now_ms``), and randomness only through an injectable ``rand``. Every parse failure raises
:class:`WireError`, whose ``str()`` is a short client-facing message naming the header or query
parameter. The offending value is never echoed back.

Rules, as exercised by the public conformance suite (``docs/durable-streams-conformance-notes.md``):

* ``Stream-TTL``: ``^(0|[1-9][0-9]*)$`` seconds, or the same integer with a ``ms|s|m|h|d`` suffix.
  At most ten years.
* ``Stream-Expires-At``: RFC 3339 (``T``/``t`` separator, optional 1-9 fractional digits,
  ``Z``/``z``/``±HH:MM`` offset required). ``Stream-Timestamp`` and ``since=`` also accept Unix
  nanoseconds (1-20 digits). All timestamps are returned as Unix milliseconds, rounded down.
* ``timeout=``: ``<int>`` seconds or ``<int>ms|s|m``.
* ``Producer-Id``/``Producer-Epoch``/``Producer-Seq``: all three or none. The id is 1-256
  characters. Epoch and seq are ``^[0-9]+$`` and at most ``2**53 - 1``.
* SSE: ``event: data`` then one ``data:`` line per payload line (CRLF, CR and LF all split, so
  a payload cannot inject events), then a blank line. The control event is flat compact JSON.
"""

from __future__ import annotations

import base64
import json
import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Final, Literal
from urllib.parse import quote

__all__ = [
    "CURSOR_EPOCH_MS",
    "CURSOR_INTERVAL_MS",
    "MAX_PRODUCER_ID_LENGTH",
    "MAX_SAFE_INTEGER",
    "MAX_TTL_MS",
    "Producer",
    "SseEncoding",
    "WireError",
    "etag_matches",
    "is_json_type",
    "media_type",
    "parse_expires_at",
    "parse_producer",
    "parse_rfc3339",
    "parse_timeout_ms",
    "parse_timestamp",
    "parse_ttl",
    "slice_etag",
    "sse_control_event",
    "sse_data_event",
    "sse_encoding",
    "stream_cursor",
]

SseEncoding = Literal["json", "text", "base64"]

MAX_SAFE_INTEGER: Final = 2**53 - 1
MAX_PRODUCER_ID_LENGTH: Final = 256
# Ten calendar years can hold at most three leap days.
MAX_TTL_MS: Final = (10 * 365 + 3) * 86_400_000
CURSOR_EPOCH_MS: Final = 1_728_432_000_000  # 2024-10-09T00:00:00Z
CURSOR_INTERVAL_MS: Final = 20_000
_CURSOR_JITTER_S: Final = 3600
_CURSOR_MAX_DIGITS: Final = 32  # longer client cursors are ignored rather than parsed

# Bounds on digit runs, so int() never sees huge input (and never hits CPython's
# int-from-str digit limit, which would raise a plain ValueError).
_MAX_DURATION_DIGITS: Final = 18
_MAX_NANOS_DIGITS: Final = 20

_UNIT_MS: Final[dict[str, int]] = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
_TTL_RE: Final = re.compile(r"(0|[1-9][0-9]*)(ms|s|m|h|d)?")
_TIMEOUT_RE: Final = re.compile(r"([0-9]+)(ms|s|m)?")
_RFC3339_RE: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)
_NANOS_RE: Final = re.compile(r"[0-9]{1,20}")
_DIGITS_RE: Final = re.compile(r"[0-9]+")
_LINE_BREAK_RE: Final = re.compile(r"\r\n|\r|\n")
_UNIX_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()

_PRODUCER_ID: Final = "producer-id"
_PRODUCER_EPOCH: Final = "producer-epoch"
_PRODUCER_SEQ: Final = "producer-seq"

# Characters left as-is inside an ETag component: printable ASCII minus the quoted-string
# specials (``"`` and ``\``), ``%`` (so the escaping is reversible), ``:`` (the component
# separator) and ``,`` (the If-None-Match list separator). Space and everything outside
# printable ASCII are percent-encoded too.
_ETAG_SAFE: Final = "!#$&'()*+/;<=>?@[]^_`{|}~-."


class WireError(ValueError):
    """A header or query parameter is malformed; ``str(err)`` is a client-facing message."""


@dataclass(frozen=True, slots=True)
class Producer:
    """An idempotent-producer tuple from ``Producer-Id``/``Producer-Epoch``/``Producer-Seq``."""

    id: str
    epoch: int
    seq: int


# --------------------------------------------------------------------------- durations


def parse_ttl(text: str) -> int:
    """Parse ``Stream-TTL`` (integer seconds, or an integer with ``ms|s|m|h|d``) into ms."""
    match = _TTL_RE.fullmatch(text)
    if match is None or len(match.group(1)) > _MAX_DURATION_DIGITS:
        raise WireError("invalid Stream-TTL: expected a non-negative integer number of seconds")
    ttl_ms = int(match.group(1)) * _UNIT_MS[match.group(2) or "s"]
    if ttl_ms > MAX_TTL_MS:
        raise WireError("invalid Stream-TTL: must not exceed 10 years")
    return ttl_ms


def parse_timeout_ms(text: str) -> int:
    """Parse the ``timeout=`` query parameter (``<int>`` seconds or ``<int>ms|s|m``) into ms."""
    match = _TIMEOUT_RE.fullmatch(text)
    digits = match.group(1).lstrip("0") if match else ""
    if match is None or len(digits) > _MAX_DURATION_DIGITS:
        raise WireError("invalid timeout: expected a duration such as 5s, 500ms or 1m")
    return int(digits or "0") * _UNIT_MS[match.group(2) or "s"]


# --------------------------------------------------------------------------- timestamps


def parse_rfc3339(text: str, what: str) -> int:
    """Parse an RFC 3339 date-time with a mandatory offset into Unix ms (sub-ms truncated).

    ``T`` or ``t`` separates date and time (the space RFC 3339 §5.6 mentions is not accepted).
    Up to nine fractional digits are allowed. Leap seconds (``:60``) are rejected.
    """
    match = _RFC3339_RE.fullmatch(text)
    if match is None:
        raise WireError(f"invalid {what}: expected an RFC 3339 timestamp with offset")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = match.group(7) or ""
    if match.group(8):
        offset_s = 0
    else:
        off_h, off_m = int(match.group(10)), int(match.group(11))
        if off_h > 23 or off_m > 59:
            raise WireError(f"invalid {what}: timezone offset out of range")
        offset_s = (off_h * 3600 + off_m * 60) * (-1 if match.group(9) == "-" else 1)
    if hour > 23 or minute > 59 or second > 59:
        raise WireError(f"invalid {what}: time of day out of range")
    try:
        days = date(year, month, day).toordinal() - _UNIX_EPOCH_ORDINAL
    except ValueError:
        raise WireError(f"invalid {what}: date out of range") from None
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s
    return seconds * 1000 + int(fraction[:3].ljust(3, "0"))


def parse_expires_at(text: str) -> int:
    """Parse ``Stream-Expires-At`` (RFC 3339) into Unix ms."""
    return parse_rfc3339(text, "Stream-Expires-At")


def parse_timestamp(text: str, what: str) -> int:
    """Parse ``Stream-Timestamp``/``since=``: RFC 3339(Nano) or 1-20 digits of Unix ns, to ms."""
    if _NANOS_RE.fullmatch(text):
        return int(text) // 1_000_000
    try:
        return parse_rfc3339(text, what)
    except WireError:
        raise WireError(
            f"invalid {what}: expected an RFC 3339 timestamp or Unix nanoseconds"
        ) from None


# --------------------------------------------------------------------------- producers


def _producer_int(value: str, header: str) -> int:
    if not _DIGITS_RE.fullmatch(value):
        raise WireError(f"invalid {header}: expected a non-negative decimal integer")
    significant = value.lstrip("0") or "0"
    if len(significant) > len(str(MAX_SAFE_INTEGER)) or int(significant) > MAX_SAFE_INTEGER:
        raise WireError(f"invalid {header}: must not exceed 2^53-1")
    return int(significant)


def parse_producer(headers: Mapping[str, str]) -> Producer | None:
    """Read the idempotent-producer headers (case-insensitive names); ``None`` if all absent."""
    found: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key in (_PRODUCER_ID, _PRODUCER_EPOCH, _PRODUCER_SEQ):
            found.setdefault(key, value)  # first occurrence wins, like Headers.get()
    if not found:
        return None
    if len(found) != 3:
        raise WireError(
            "Producer-Id, Producer-Epoch and Producer-Seq must be sent together or not at all"
        )
    producer_id = found[_PRODUCER_ID]
    if not producer_id:
        raise WireError("invalid Producer-Id: must not be empty")
    if len(producer_id) > MAX_PRODUCER_ID_LENGTH:
        raise WireError(f"invalid Producer-Id: longer than {MAX_PRODUCER_ID_LENGTH} characters")
    return Producer(
        id=producer_id,
        epoch=_producer_int(found[_PRODUCER_EPOCH], "Producer-Epoch"),
        seq=_producer_int(found[_PRODUCER_SEQ], "Producer-Seq"),
    )


# --------------------------------------------------------------------------- content types


def media_type(content_type: str | None) -> str:
    """The lower-cased media type of a ``Content-Type`` value, without parameters."""
    if not content_type:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def is_json_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` selects JSON mode (``application/json``, any parameters)."""
    return media_type(content_type) == "application/json"


def sse_encoding(content_type: str) -> SseEncoding:
    """How a stream's data is carried in SSE: JSON arrays, UTF-8 text, or padded base64."""
    kind = media_type(content_type)
    if kind == "application/json":
        return "json"
    if kind.startswith("text/"):
        return "text"
    return "base64"


# --------------------------------------------------------------------------- cursors


def stream_cursor(
    now_ms: int, client_cursor: str | None, rand: Callable[[], float] = random.random
) -> str:
    """The ``Stream-Cursor`` value: the current 20 s interval, bumped past the client's cursor.

    A cursor older than 2024-10-09 (the interval epoch) clamps to ``0``. When the client echoes
    a cursor at or beyond the current interval, the result is that cursor plus a random
    1-180 intervals (up to one hour), so it is always strictly greater than the client's.
    """
    interval = max(0, (now_ms - CURSOR_EPOCH_MS) // CURSOR_INTERVAL_MS)
    if (
        client_cursor is not None
        and len(client_cursor) <= _CURSOR_MAX_DIGITS
        and _DIGITS_RE.fullmatch(client_cursor)
    ):
        client = int(client_cursor)
        if client >= interval:
            jitter = math.ceil(rand() * _CURSOR_JITTER_S * 1000 / CURSOR_INTERVAL_MS)
            return str(client + max(1, jitter))
    return str(interval)


# --------------------------------------------------------------------------- SSE framing


def _data_line(line: str) -> bytes:
    # No space after "data:" (the suite matches "data:line1"). A line that itself starts with a
    # space gets one extra, because SSE parsers strip exactly one leading space from the value.
    prefix = "data: " if line.startswith(" ") else "data:"
    return (prefix + line + "\n").encode("utf-8")


def sse_data_event(payload: bytes, encoding: SseEncoding) -> bytes:
    """Frame ``payload`` as one ``event: data`` SSE event, ending in a blank line.

    ``json`` and ``text`` payloads are decoded as UTF-8 (invalid bytes become U+FFFD) and split
    on CRLF, CR and LF, one ``data:`` line each, so embedded line breaks can never end the event
    or start another. ``base64`` payloads become a single line of standard padded base64.
    """
    if encoding == "base64":
        lines = [base64.b64encode(payload).decode("ascii")]
    else:
        lines = _LINE_BREAK_RE.split(payload.decode("utf-8", errors="replace"))
    return b"event: data\n" + b"".join(_data_line(line) for line in lines) + b"\n"


def sse_control_event(fields: Mapping[str, object]) -> bytes:
    """Frame ``fields`` as one ``event: control`` SSE event with flat, compact, ASCII JSON.

    Values must not be mappings: the suite extracts the payload with ``data:({[^}]+})``.
    """
    for name, value in fields.items():
        if isinstance(value, Mapping):
            raise TypeError(f"control event field {name!r} must not be an object")
    body = json.dumps(dict(fields), separators=(",", ":"), ensure_ascii=True)
    return b"event: control\ndata:" + body.encode("ascii") + b"\n\n"


# --------------------------------------------------------------------------- ETags


def _etag_part(value: str) -> str:
    return quote(value, safe=_ETAG_SAFE, encoding="utf-8", errors="surrogatepass")


def slice_etag(
    start: str,
    next_: str,
    key: str | None,
    fmt: str,
    filter_: str | None,
    closed: bool,
) -> str:
    """A weak ETag identifying one read slice; every component is percent-encoded as needed."""
    tag = (
        f"slice:{_etag_part(start)}:{_etag_part(next_)}"
        f":key={_etag_part(key or '')}:fmt={_etag_part(fmt)}:filter={_etag_part(filter_ or '')}"
    )
    if closed:
        tag += ":closed"
    return f'W/"{tag}"'


def _opaque(tag: str) -> str:
    tag = tag.strip()
    if tag[:2] in ("W/", "w/"):
        tag = tag[2:].lstrip()
    if len(tag) >= 2 and tag[0] == '"' and tag[-1] == '"':
        tag = tag[1:-1]
    return tag


def _if_none_match_tags(header: str) -> list[str]:
    """Split an ``If-None-Match`` list, honouring commas inside quoted entity-tags."""
    tags: list[str] = []
    i, n = 0, len(header)
    while i < n:
        while i < n and header[i] in " \t,":
            i += 1
        if i >= n:
            break
        start = i
        if header.startswith(("W/", "w/"), i):
            i += 2
        if i < n and header[i] == '"':
            end = header.find('"', i + 1)
            i = n if end < 0 else end + 1
        while i < n and header[i] != ",":
            i += 1
        tags.append(header[start:i].strip())
    return tags


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 7232 weak comparison of ``etag`` against an ``If-None-Match`` list (``*`` matches)."""
    if not if_none_match:
        return False
    wanted = _opaque(etag)
    for candidate in _if_none_match_tags(if_none_match):
        if candidate == "*" or _opaque(candidate) == wanted:
            return True
    return False
