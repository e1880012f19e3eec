"""Sentiment items: the records of the dashboard topic.

An item is a record whose `data` is an object
`{ticker, score, label, confidence, source, timestamp}`:

- `ticker`: 1-16 characters, letters, digits, `.`, `-` or `_`, starting with a letter or
  digit; case-insensitive, canonically upper case (`aapl` counts as `AAPL`);
- `score`: a number in [-1, 1]; `confidence`: a number in [0, 1] (booleans are not numbers);
- `label`: `positive`, `neutral` or `negative`;
- `source`: a non-empty string of at most 64 characters;
- `timestamp`: an ISO 8601 date-time with a zone (`Z` or an offset), rendered in UTC with
  milliseconds (`2025-12-02T10:30:00.000Z`); when absent, the record's append time.

Other fields are ignored. `check_item` says exactly what is wrong (the ingest route's 400);
`parse_item` is the lenient reader used on the log (by the server's tally and the Glue
rollup job alike, so both count exactly the same records): a record that is not a valid
item is not counted and produces no `sentiment_update`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

LABELS = ("positive", "neutral", "negative")
TICKER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}")
MAX_SOURCE_CHARS = 64
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIELDS = ("ticker", "score", "label", "confidence", "source", "timestamp")


class ItemError(ValueError):
    """One invalid field: `field` names it, the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Item:
    ticker: str
    score: float
    label: str
    confidence: float
    source: str
    timestamp: str  # UTC, milliseconds, "Z"

    def as_json(self) -> dict[str, Any]:
        return {
            "ticker": self.ticker,
            "score": self.score,
            "label": self.label,
            "confidence": self.confidence,
            "source": self.source,
            "timestamp": self.timestamp,
        }


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as the contract's timestamp: `2025-12-02T10:30:00.000Z`."""
    dt = datetime.fromtimestamp(ms // 1000, UTC)
    return f"{dt:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def parse_timestamp(raw: str) -> int:
    """An ISO 8601 date-time with a zone, as epoch milliseconds (ValueError otherwise)."""
    text = raw.strip()
    if len(text) > 40 or "T" not in text.upper():
        raise ValueError("not an ISO 8601 date-time")
    dt = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" else text)
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("the date-time has no zone (add Z or an offset)")
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def canonical_ticker(raw: object) -> str | None:
    if isinstance(raw, str) and TICKER_RE.fullmatch(raw):
        return raw.upper()
    return None


def _number(data: dict[str, Any], name: str, lo: float, hi: float) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ItemError(name, f"{name} must be a number")
    # Compared as is: an int of any size compares exactly with the bounds, while converting
    # one beyond the float range (10**400) raises OverflowError.
    if (isinstance(value, float) and not math.isfinite(value)) or not lo <= value <= hi:
        raise ItemError(name, f"{name} must be between {lo:g} and {hi:g}")
    return value


def check_item(data: object, default_ms: int) -> Item:
    """The item `data` holds, or ItemError naming the first bad field."""
    if not isinstance(data, dict):
        raise ItemError("", "an item must be a JSON object")
    if "ticker" not in data:
        raise ItemError("ticker", "ticker is required")
    ticker = canonical_ticker(data["ticker"])
    if ticker is None:
        raise ItemError(
            "ticker", "ticker must be 1-16 letters, digits, '.', '-' or '_' (e.g. AAPL, BRK.B)"
        )
    score = _number(data, "score", -1, 1)
    label = data.get("label")
    if label not in LABELS:
        raise ItemError("label", "label must be positive, neutral or negative")
    confidence = _number(data, "confidence", 0, 1)
    source = data.get("source")
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_SOURCE_CHARS:
        raise ItemError("source", f"source must be a non-empty string of <= {MAX_SOURCE_CHARS}")
    raw_ts = data.get("timestamp")
    if raw_ts is None:
        ms = default_ms
    else:
        if not isinstance(raw_ts, str):
            raise ItemError("timestamp", "timestamp must be an ISO 8601 string")
        try:
            ms = parse_timestamp(raw_ts)
        except (ValueError, OverflowError) as exc:
            raise ItemError(
                "timestamp", f"timestamp must be an ISO 8601 date-time with a zone ({exc})"
            ) from None
        if not 0 <= ms < 253_402_300_800_000:  # 1970 .. 9999
            raise ItemError("timestamp", "timestamp is out of range")
    return Item(ticker, score, str(label), confidence, source, iso_ms(ms))


def parse_item(data: object, default_ms: int) -> Item | None:
    """The item a record's data holds, or None when it is not a valid item."""
    try:
        return check_item(data, default_ms)
    except ItemError:
        return None
