"""The rollup transforms on plain rows (no S3): dedupe, windows, tag prefixes, nodes, epochs,
sentiment counts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from rollup.job import sentiment_item
from rollup.transforms import (
    HOUR_MS,
    MINUTE_MS,
    ROW_SCHEMA,
    dedupe,
    latest_epoch,
    rollup,
    window_start,
)

pytestmark = pytest.mark.glue

T0 = 1_700_000_000_000 - (1_700_000_000_000 % HOUR_MS)  # an hour boundary (UTC)


def rows(spark: SparkSession, *data: tuple[Any, ...]) -> DataFrame:
    """(topic, epoch, seq, ts_ms, bytes, tag, node, ticker, label); the optional ones default
    to None."""
    full = [tuple(d) + (None,) * (len(ROW_SCHEMA.fields) - len(d)) for d in data]
    return spark.createDataFrame(full, ROW_SCHEMA)


def windows_of(df: DataFrame) -> list[dict[str, Any]]:
    return [
        {**r.asDict(), "by_tag_prefix": dict(r["by_tag_prefix"]), "by_node": dict(r["by_node"])}
        for r in df.collect()
    ]


def test_dedupe_keeps_one_row_per_topic_epoch_seq(spark: SparkSession) -> None:
    # GIVEN two overlapping segments (seqs 2-3 in both) and the same seq in another epoch
    df = rows(
        spark,
        ("a", 1, 1, T0, 10),
        ("a", 1, 2, T0, 10),
        ("a", 1, 3, T0, 10),
        ("a", 1, 2, T0, 10),
        ("a", 1, 3, T0, 10),
        ("a", 2, 2, T0, 10),
        ("b", 1, 2, T0, 10),
    )
    # WHEN deduplicating
    out = sorted(tuple(r) for r in dedupe(df).select("topic", "epoch", "seq").collect())
    # THEN each (topic, epoch, seq) is kept once
    assert out == [("a", 1, 1), ("a", 1, 2), ("a", 1, 3), ("a", 2, 2), ("b", 1, 2)]


def test_overlapping_segments_are_not_double_counted(spark: SparkSession) -> None:
    df = rows(spark, *[("a", 1, s, T0 + s, 5, "t") for s in (1, 2, 3, 2, 3, 3)])
    result = rollup(df)
    [s] = result.summary.collect()
    assert (s["records"], s["bytes"], s["through_seq"]) == (3, 15, 3)
    [m] = windows_of(result.minute)
    assert (m["records"], m["bytes"], m["by_tag_prefix"]) == (3, 15, {"t": 3})


def test_window_start_floors_to_utc_minute_and_hour(spark: SparkSession) -> None:
    ts = [T0, T0 + MINUTE_MS - 1, T0 + MINUTE_MS, T0 + HOUR_MS - 1, T0 + HOUR_MS, -1]
    df = spark.createDataFrame([(t,) for t in ts], "ts_ms long")
    got = df.select(
        window_start(df.ts_ms, MINUTE_MS).alias("m"), window_start(df.ts_ms, HOUR_MS).alias("h")
    ).collect()
    assert [(r.m, r.h) for r in got] == [
        (T0, T0),
        (T0, T0),
        (T0 + MINUTE_MS, T0),
        (T0 + HOUR_MS - MINUTE_MS, T0),
        (T0 + HOUR_MS, T0 + HOUR_MS),
        (-MINUTE_MS, -HOUR_MS),
    ]


def test_minute_and_hour_windows_at_boundaries(spark: SparkSession) -> None:
    # GIVEN records on both sides of a minute and an hour boundary
    df = rows(
        spark,
        ("a", 1, 1, T0, 1),
        ("a", 1, 2, T0 + MINUTE_MS - 1, 2),
        ("a", 1, 3, T0 + MINUTE_MS, 4),
        ("a", 1, 4, T0 + HOUR_MS - 1, 8),
        ("a", 1, 5, T0 + HOUR_MS, 16),
    )
    result = rollup(df)
    # THEN minute windows split at each minute, hour windows at the hour, ordered by start
    minute = [(w["window_start"], w["records"], w["bytes"]) for w in windows_of(result.minute)]
    assert minute == [
        (T0, 2, 3),
        (T0 + MINUTE_MS, 1, 4),
        (T0 + HOUR_MS - MINUTE_MS, 1, 8),
        (T0 + HOUR_MS, 1, 16),
    ]
    hour = [(w["window_start"], w["records"], w["bytes"]) for w in windows_of(result.hour)]
    assert hour == [(T0, 4, 15), (T0 + HOUR_MS, 1, 16)]


def test_tag_prefix_is_before_first_colon_and_untagged_not_counted(spark: SparkSession) -> None:
    df = rows(
        spark,
        ("a", 1, 1, T0, 1, "order:created"),
        ("a", 1, 2, T0, 1, "order:paid:card"),
        ("a", 1, 3, T0, 1, "ping"),
        ("a", 1, 4, T0, 1, "ping"),
        ("a", 1, 5, T0, 1, ":odd"),
        ("a", 1, 6, T0, 1, None),
    )
    [w] = windows_of(rollup(df).minute)
    assert w["records"] == 6
    assert w["by_tag_prefix"] == {"order": 2, "ping": 2, "": 1}


def test_node_counts_skip_records_without_node(spark: SparkSession) -> None:
    df = rows(
        spark,
        ("a", 1, 1, T0, 1, None, "n1"),
        ("a", 1, 2, T0, 1, "x", "n1"),
        ("a", 1, 3, T0, 1, None, "n2"),
        ("a", 1, 4, T0, 1, None, None),
        ("a", 1, 5, T0 + MINUTE_MS, 1),
    )
    [w1, w2] = windows_of(rollup(df).minute)
    assert w1["by_node"] == {"n1": 2, "n2": 1} and w1["records"] == 4
    assert w2["by_node"] == {} and w2["by_tag_prefix"] == {} and w2["records"] == 1


def test_through_seq_and_windows_come_from_the_latest_epoch(spark: SparkSession) -> None:
    # GIVEN topic a deleted and recreated (epoch 1 up to seq 9, epoch 2 up to seq 3) and b
    df = rows(
        spark,
        ("a", 1, 8, T0, 100),
        ("a", 1, 9, T0, 100),
        ("a", 2, 1, T0 + HOUR_MS, 1),
        ("a", 2, 3, T0 + HOUR_MS, 1),
        ("b", 5, 42, T0, 7),
    )
    assert latest_epoch(df).count() == 3
    result = rollup(df)
    got = {r["topic"]: r.asDict() for r in result.summary.collect()}
    # THEN a reports epoch 2 through seq 3 (not 9) and only epoch 2's records
    assert got["a"] == {"topic": "a", "epoch": 2, "through_seq": 3, "records": 2, "bytes": 2}
    assert got["b"] == {"topic": "b", "epoch": 5, "through_seq": 42, "records": 1, "bytes": 7}
    hours = [(w["topic"], w["window_start"], w["records"]) for w in windows_of(result.hour)]
    assert hours == [("a", T0 + HOUR_MS, 2), ("b", T0, 1)]


def test_empty_input_gives_empty_rollups(spark: SparkSession) -> None:
    result = rollup(rows(spark))
    assert result.summary.collect() == []
    assert result.minute.collect() == [] and result.hour.collect() == []


def test_sentiment_counts_valid_items_of_the_latest_epoch_once(spark: SparkSession) -> None:
    def item(ticker: str, label: str, **extra: Any) -> bytes:
        body = {"ticker": ticker, "score": 0.5, "label": label, "confidence": 0.9, "source": "s"}
        return json.dumps({**body, **extra}).encode()

    m = MINUTE_MS
    raw = [  # (epoch, seq, ts_ms, data): ticker / label as the job decodes them
        (1, 1, T0, item("AAPL", "positive")),  # the old incarnation: not counted
        (2, 1, T0, item("aapl", "positive")),
        (2, 1, T0, item("aapl", "positive")),  # an overlapping segment repeats seq 1
        (2, 2, T0 + 5, item("AAPL", "negative")),
        (2, 3, T0 + m - 1, item("Msft", "neutral", timestamp="2020-01-01T00:00:00Z")),
        (2, 4, T0 + m, item("brk.b", "positive")),
        (2, 5, T0 + m, item("AAPL", "great")),  # invalid: label
        (2, 6, T0 + m, item("AAPL", "neutral", score=2)),  # invalid: score
        (2, 7, T0 + m, item("$AAPL", "neutral")),  # invalid: ticker
        (2, 8, T0 + m, item("AAPL", "neutral", timestamp="2020-01-01T00:00:00")),  # no zone
        (2, 9, T0 + m, b'["AAPL", "positive"]'),  # not an object
        (2, 10, T0 + m, b"not json"),
        (2, 11, T0 + m, b"\xff\xfe"),  # not UTF-8
        (2, 12, T0 + 3 * m, item("msft", "negative")),
    ]
    decoded = [(e, s, ts, sentiment_item(data, ts) or (None, None)) for e, s, ts, data in raw]
    df = rows(
        spark,
        *[("news", e, s, ts, 1, None, None, *tl) for e, s, ts, tl in decoded],
        ("other", 1, 1, T0, 1),  # a topic without items
    )
    # WHEN rolled up with the sentiment counts
    result = rollup(df, with_sentiment=True)
    assert result.sentiment_totals is not None and result.sentiment_minute is not None
    # THEN only the valid items of epoch 2, each seq once, tickers in canonical case
    [t] = result.sentiment_totals.collect()
    assert (t["topic"], t["items"]) == ("news", 5)
    assert dict(t["by_label"]) == {"positive": 2, "negative": 2, "neutral": 1}
    assert dict(t["by_ticker"]) == {"AAPL": 2, "MSFT": 2, "BRK.B": 1}
    # AND per minute of the append time (not the item's own timestamp)
    minute = [tuple(r) for r in result.sentiment_minute.collect()]
    assert minute == [("news", T0, 3), ("news", T0 + m, 1), ("news", T0 + 3 * m, 1)]
    # AND without sentiment topics nothing extra is computed
    assert rollup(df).sentiment_totals is None
