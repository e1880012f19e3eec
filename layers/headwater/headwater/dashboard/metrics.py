"""The dashboard's metrics as a running tally: exact counts of the sentiment items in the
topic, from the sentiment rollup (glue_jobs, `sentiment.json`) plus the records after it.

- `total`, `positive`, `neutral`, `negative`: items (records whose data is a valid item);
- `by_tag`: items per ticker (canonical upper case);
- `rate_last_hour` / `rate_last_24h`: items appended (the record's append time, not the
  item's own `timestamp`) in the current UTC minute and the 59 (1,439) minutes before it,
  relative to the metrics' `timestamp`. Minute windows are exactly what the rollup keeps, so
  rates stay exact whether an item is rolled up or still in the tail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headwater.dashboard.items import LABELS, Item, iso_ms

MINUTE_MS = 60_000
HOUR_MINUTES = 60
DAY_MINUTES = 1_440
KEEP_MS = 25 * 3_600_000  # minute windows older than this cannot count towards any rate


def minute_of(ts_ms: int) -> int:
    return ts_ms - ts_ms % MINUTE_MS


@dataclass(slots=True)
class Tally:
    items: int = 0
    by_label: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LABELS, 0))
    by_ticker: dict[str, int] = field(default_factory=dict)
    minutes: dict[int, int] = field(default_factory=dict)  # minute start (ms) -> items

    def add(self, item: Item, ts_ms: int) -> None:
        self.items += 1
        self.by_label[item.label] += 1
        self.by_ticker[item.ticker] = self.by_ticker.get(item.ticker, 0) + 1
        m = minute_of(ts_ms)
        self.minutes[m] = self.minutes.get(m, 0) + 1

    def add_rollup(self, doc: dict[str, Any]) -> None:
        """Add a sentiment rollup object (`sentiment.json`)."""
        self.items += int(doc.get("items", 0))
        for label, n in (doc.get("by_label") or {}).items():
            if label in self.by_label:
                self.by_label[label] += int(n)
        for ticker, n in (doc.get("by_ticker") or {}).items():
            self.by_ticker[ticker] = self.by_ticker.get(ticker, 0) + int(n)
        for w in doc.get("minute") or ():
            m = int(w["window_start"])
            self.minutes[m] = self.minutes.get(m, 0) + int(w["items"])

    def prune(self, now_ms: int) -> None:
        floor = now_ms - KEEP_MS
        for m in [m for m in self.minutes if m < floor]:
            del self.minutes[m]

    def rate(self, now_ms: int, minutes: int) -> int:
        since = minute_of(now_ms) - (minutes - 1) * MINUTE_MS
        return sum(n for m, n in self.minutes.items() if m >= since)

    def metrics(self, now_ms: int) -> dict[str, Any]:
        """The `metrics` event's data at `now_ms`."""
        by_tag = dict(sorted(self.by_ticker.items(), key=lambda kv: (-kv[1], kv[0])))
        return {
            "total": self.items,
            "positive": self.by_label["positive"],
            "neutral": self.by_label["neutral"],
            "negative": self.by_label["negative"],
            "by_tag": by_tag,
            "rate_last_hour": self.rate(now_ms, HOUR_MINUTES),
            "rate_last_24h": self.rate(now_ms, DAY_MINUTES),
            "timestamp": iso_ms(now_ms),
        }
