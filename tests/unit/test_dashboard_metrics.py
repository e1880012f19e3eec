"""The metrics tally (docs/dashboard.md "Metrics"): counts, by_tag order, rates over the
current UTC minute and the 59 (1,439) before it, the rollup base, pruning. Expectations are
computed by hand or by a brute-force count over the appended times."""

from __future__ import annotations

import random

import pytest

from headwater.dashboard.items import Item
from headwater.dashboard.metrics import Tally

pytestmark = pytest.mark.unit

M = 60_000
H = 60 * M
T = 1_764_671_417_123  # 2025-12-02T10:30:17.123Z
T_MIN = T - T % M


def it(ticker: str = "AAPL", label: str = "positive") -> Item:
    return Item(ticker, 0.5, label, 0.5, "s", "2025-12-02T10:30:00.000Z")


def brute(times: list[int], now: int, minutes: int) -> int:
    now_minute = now // M
    return sum(1 for t in times if 0 <= now_minute - t // M < minutes)


def test_empty() -> None:
    assert Tally().metrics(T) == {
        "total": 0,
        "positive": 0,
        "neutral": 0,
        "negative": 0,
        "by_tag": {},
        "rate_last_hour": 0,
        "rate_last_24h": 0,
        "timestamp": "2025-12-02T10:30:17.123Z",
    }


def test_counts_and_by_tag_order() -> None:
    t = Tally()
    for ticker, label in [
        ("MSFT", "neutral"),
        ("AAPL", "positive"),
        ("TSLA", "negative"),
        ("AAPL", "negative"),
        ("MSFT", "positive"),
        ("AMD", "neutral"),
    ]:
        t.add(it(ticker, label), T)
    m = t.metrics(T)
    assert (m["total"], m["positive"], m["neutral"], m["negative"]) == (6, 2, 2, 2)
    assert list(m["by_tag"].items()) == [("AAPL", 2), ("MSFT", 2), ("AMD", 1), ("TSLA", 1)]


@pytest.mark.parametrize(
    ("ts", "hour", "day"),
    [
        (T, 1, 1),
        (T_MIN, 1, 1),
        (T_MIN + M - 1, 1, 1),  # later in the current minute
        (T_MIN - 1, 1, 1),
        (T_MIN - 59 * M, 1, 1),
        (T_MIN - 59 * M - 1, 0, 1),
        (T_MIN - 60 * M + 59_999, 0, 1),
        (T_MIN - 1439 * M, 0, 1),
        (T_MIN - 1439 * M - 1, 0, 0),
        (T_MIN - 25 * H, 0, 0),
    ],
)
def test_rate_minute_boundaries(ts: int, hour: int, day: int) -> None:
    t = Tally()
    t.add(it(), ts)
    m = t.metrics(T)
    assert (m["rate_last_hour"], m["rate_last_24h"]) == (hour, day)
    assert m["total"] == 1


def test_rates_match_a_brute_force_count() -> None:
    rng = random.Random(7)
    times = sorted(T - rng.randrange(0, 26 * H) for _ in range(500))
    t = Tally()
    for ts in times:
        t.add(it(), ts)
    for now in (T, T_MIN, T + 37 * M, T + 3 * H, T + 24 * H):
        m = t.metrics(now)
        assert m["rate_last_hour"] == brute(times, now, 60), now
        assert m["rate_last_24h"] == brute(times, now, 1440), now


def test_prune_keeps_every_window_a_rate_can_count() -> None:
    rng = random.Random(3)
    times = sorted(T - rng.randrange(0, 48 * H) for _ in range(400))
    t = Tally()
    for ts in times:
        t.add(it(), ts)
    t.prune(T)
    assert min(t.minutes) >= T - 25 * H
    assert t.items == 400  # pruning only drops minute windows, never counts
    for now in (T, T + 30 * M, T + H):
        m = t.metrics(now)
        assert m["rate_last_hour"] == brute(times, now, 60)
        assert m["rate_last_24h"] == brute(times, now, 1440)
    assert t.metrics(T)["total"] == 400


def test_add_rollup_then_tail() -> None:
    t = Tally()
    t.add_rollup(
        {
            "items": 10,
            "by_label": {"negative": 2, "neutral": 3, "positive": 5},
            "by_ticker": {"AAPL": 6, "MSFT": 4},
            "minute": [
                {"window_start": T_MIN - 10 * M, "items": 4},
                {"window_start": T_MIN - 2 * H, "items": 5},
                {"window_start": T_MIN - 30 * H, "items": 1},
            ],
        }
    )
    t.add(it("MSFT", "negative"), T_MIN - 10 * M + 5)
    t.add(it("TSLA", "neutral"), T)
    m = t.metrics(T)
    assert (m["total"], m["positive"], m["neutral"], m["negative"]) == (12, 5, 4, 3)
    assert m["by_tag"] == {"AAPL": 6, "MSFT": 5, "TSLA": 1}
    assert (m["rate_last_hour"], m["rate_last_24h"]) == (6, 11)


def test_empty_rollup_document() -> None:
    t = Tally()
    t.add_rollup({})
    assert t.metrics(T)["total"] == 0
