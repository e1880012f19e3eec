"""Pure DataFrame transforms: segment record rows in, per-topic rollups out. No I/O.

Input rows (ROW_SCHEMA): one per sealed record, possibly duplicated when two segment objects
overlap (an orphan left by a crashed concurrent seal). Only each topic's latest epoch is
rolled up: an older epoch is a deleted incarnation of the topic whose seqs start over.
`ticker` and `label` are set only on the records of a sentiment topic whose data is a valid
sentiment item (headwater.dashboard.items.parse_item, applied by the job when decoding);
`sentiment` counts those."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
GRANULARITIES = {"minute": MINUTE_MS, "hour": HOUR_MS}

ROW_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("epoch", LongType(), False),
        StructField("seq", LongType(), False),
        StructField("ts_ms", LongType(), False),
        StructField("bytes", LongType(), False),
        StructField("tag", StringType(), True),
        StructField("node", StringType(), True),
        StructField("ticker", StringType(), True),  # canonical (upper case); sentiment items
        StructField("label", StringType(), True),  # positive / neutral / negative
    ]
)

KEY = ["topic", "epoch", "seq"]


@dataclass(frozen=True)
class Rollups:
    summary: DataFrame  # topic, epoch, through_seq, records, bytes
    minute: DataFrame  # topic, window_start, records, bytes, by_tag_prefix, by_node
    hour: DataFrame
    # Only when asked for (rollup(..., sentiment=True)); see sentiment().
    sentiment_totals: DataFrame | None = None  # topic, items, by_label, by_ticker
    sentiment_minute: DataFrame | None = None  # topic, window_start, items


def dedupe(rows: DataFrame) -> DataFrame:
    """One row per (topic, epoch, seq): overlapping segments hold the same records."""
    return rows.dropDuplicates(KEY)


def latest_epoch(rows: DataFrame) -> DataFrame:
    """Only the rows of each topic's highest epoch."""
    latest = rows.groupBy("topic").agg(F.max("epoch").alias("epoch"))
    return rows.join(latest, ["topic", "epoch"], "left_semi")


def tag_prefix(tag: Column) -> Column:
    """The part of a tag before its first ':' (the whole tag without one); null stays null."""
    return F.when(tag.isNull(), F.lit(None)).otherwise(F.substring_index(tag, ":", 1))


def window_start(ts_ms: Column, size_ms: int) -> Column:
    """Start (epoch ms, UTC) of the fixed window holding ts_ms; floors negatives too."""
    return (ts_ms - F.pmod(ts_ms, F.lit(size_ms))).cast(LongType())


def _count_map(rows: DataFrame, keys: list[str], value: str, alias: str) -> DataFrame:
    """Per `keys`: {value: count} over the rows whose value is not null (empty map if none)."""
    counted = rows.groupBy(*keys, value).agg(F.count(F.lit(1)).alias("n"))
    entry = F.when(F.col(value).isNotNull(), F.struct(F.col(value), F.col("n")))
    return counted.groupBy(*keys).agg(F.map_from_entries(F.collect_list(entry)).alias(alias))


def windows(rows: DataFrame, size_ms: int) -> DataFrame:
    """Per topic and window: records, bytes, by_tag_prefix and by_node counts.
    `rows` must already be deduplicated and limited to the epoch being rolled up."""
    keys = ["topic", "window_start"]
    base = rows.select(
        "topic",
        window_start(F.col("ts_ms"), size_ms).alias("window_start"),
        "bytes",
        tag_prefix(F.col("tag")).alias("prefix"),
        "node",
    )
    totals = base.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("records"), F.sum("bytes").cast(LongType()).alias("bytes")
    )
    tags = _count_map(base, keys, "prefix", "by_tag_prefix")
    nodes = _count_map(base, keys, "node", "by_node")
    return totals.join(tags, keys).join(nodes, keys).orderBy(*keys)


def summary(rows: DataFrame) -> DataFrame:
    """Per topic: its epoch, the highest seq seen (through_seq), record and byte totals."""
    return (
        rows.groupBy("topic", "epoch")
        .agg(
            F.max("seq").alias("through_seq"),
            F.count(F.lit(1)).alias("records"),
            F.sum("bytes").cast(LongType()).alias("bytes"),
        )
        .orderBy("topic")
    )


def sentiment(rows: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Sentiment item counts over the rows with a label (the valid items of sentiment topics):
    per topic `items`, `by_label` and `by_ticker` (label / ticker -> count), and per topic and
    minute window (of the record's append time `ts_ms`) `items`. Topics without a valid item
    have no row. `rows` must already be deduplicated and limited to the latest epoch."""
    items = rows.where(F.col("label").isNotNull()).select(
        "topic", "ticker", "label", window_start(F.col("ts_ms"), MINUTE_MS).alias("window_start")
    )
    counts = items.groupBy("topic").agg(F.count(F.lit(1)).alias("items"))
    labels = _count_map(items, ["topic"], "label", "by_label")
    tickers = _count_map(items, ["topic"], "ticker", "by_ticker")
    totals = counts.join(labels, "topic").join(tickers, "topic").orderBy("topic")
    minute = (
        items.groupBy("topic", "window_start")
        .agg(F.count(F.lit(1)).alias("items"))
        .orderBy("topic", "window_start")
    )
    return totals, minute


def rollup(rows: DataFrame, with_sentiment: bool = False) -> Rollups:
    """Everything the job writes, from raw (possibly duplicated, multi-epoch) rows; the
    sentiment counts only `with_sentiment` (no extra Spark work for jobs without them)."""
    live = latest_epoch(dedupe(rows)).cache()
    totals, minute = sentiment(live) if with_sentiment else (None, None)
    return Rollups(summary(live), windows(live, MINUTE_MS), windows(live, HOUR_MS), totals, minute)
