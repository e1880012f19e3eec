"""The rollup transforms on plain rows (no S3): dedupe, windows, tag prefixes, nodes, epochs."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
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
    """(topic, epoch, seq, ts_ms, bytes, tag, node); tag and node default to None."""
    full = [tuple(d) + (None,) * (7 - len(d)) for d in data]
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
