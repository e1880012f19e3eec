"""The rollup job: find the segments to read, fetch and decode them in Spark tasks, roll them
up (transforms.py), write per-topic rollup objects and, last, the manifest that points at them.

Which segments: with --resource-prefix (the deployment's table prefix, as the template passes)
the job reads the catalogue the server keeps in DynamoDB: every live topic's head and its
committed segment items. Only the current incarnation's committed segments are read, and the
seqs deleted since sealing are skipped, so the rollups count exactly the live sealed records.
The run is incremental: a topic whose history is unchanged since the last manifest (same
epoch, delete version and floors) only has its new segments read, and their windows are
added to the previous ones; any other topic is recomputed. Without --resource-prefix the job
lists every object under --segments-prefix (an archive of segment objects with no tables):
orphans of crashed seals are deduplicated, but deletes after sealing are not known.
The records of the --sentiment-topics that are valid sentiment items
(headwater.dashboard.items.parse_item, the server's rule) are also counted, into
<topic>/sentiment.json.

Arguments (Glue style, `--name value`): --bucket (required), --resource-prefix,
--segments-prefix (segments/), --output-prefix (rollups/v1/), --sentiment-topics
(comma-separated topic names, none by default), --endpoint-url (an emulator; unset on AWS),
--region.
Glue adds its own arguments (--JOB_NAME, --job-bookmark-option, ...): they are ignored, except
JOB_NAME, read with awsglue's getResolvedOptions when awsglue is importable."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row, SparkSession

from rollup.transforms import ROW_SCHEMA, rollup

log = logging.getLogger("headwater.rollup")

MANIFEST_VERSION = 1
MANIFEST_NAME = "manifest.json"
SENTIMENT_NAME = "sentiment.json"
SENTIMENT_KEEP_MS = 25 * 3600 * 1000  # sentiment minute windows kept behind generated_at
LABELS = ("negative", "neutral", "positive")  # headwater.dashboard.items.LABELS, sorted


@dataclass(frozen=True)
class JobArgs:
    bucket: str
    resource_prefix: str | None = None
    segments_prefix: str = "segments/"
    output_prefix: str = "rollups/v1/"
    endpoint_url: str | None = None
    region: str | None = None
    job_name: str | None = None
    sentiment_topics: tuple[str, ...] = ()


def parse_args(argv: Sequence[str]) -> JobArgs:
    p = argparse.ArgumentParser(prog="rollup", description=__doc__)
    p.add_argument("--bucket", required=True)
    p.add_argument("--resource-prefix", default=None)
    p.add_argument("--segments-prefix", default="segments/")
    p.add_argument("--output-prefix", default="rollups/v1/")
    p.add_argument("--endpoint-url", default=None)
    p.add_argument("--region", default=None)
    p.add_argument("--sentiment-topics", default="")
    ns, _unknown = p.parse_known_args(list(argv))  # Glue passes arguments of its own
    job_name = None
    if "--JOB_NAME" in argv:
        try:
            from awsglue.utils import getResolvedOptions

            job_name = getResolvedOptions(list(argv), ["JOB_NAME"])["JOB_NAME"]
        except ImportError:
            job_name = argv[list(argv).index("--JOB_NAME") + 1]
    return JobArgs(
        bucket=ns.bucket,
        resource_prefix=ns.resource_prefix or None,
        segments_prefix=ns.segments_prefix,
        output_prefix=ns.output_prefix,
        endpoint_url=ns.endpoint_url or None,
        region=ns.region or None,
        job_name=job_name,
        sentiment_topics=tuple(
            dict.fromkeys(t.strip() for t in ns.sentiment_topics.split(",") if t.strip())
        ),
    )


def s3_client(endpoint_url: str | None, region: str | None) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url, region_name=_region(region))


def _region(region: str | None) -> str:
    env = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return region or env or "us-east-1"


def list_keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents", ()) if not o["Key"].endswith("/"))
    return keys


@dataclass(frozen=True)
class TopicState:
    """What a topic's rollups depend on besides its segments: equal states mean the
    records already rolled up are still exactly the live ones."""

    epoch: int
    del_ver: int
    earliest_seq: int
    evict_floor: int

    def as_json(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "del_ver": self.del_ver,
            "earliest_seq": self.earliest_seq,
            "evict_floor": self.evict_floor,
        }


@dataclass(frozen=True)
class Source:
    """One segment object to read, the seqs in it deleted since sealing, and the topic's
    floor (seqs below it were deleted by a prefix delete)."""

    key: str
    last_seq: int
    deleted: tuple[int, ...] = ()
    floor: int = 1


def catalogue(
    resource_prefix: str, endpoint_url: str | None, region: str | None
) -> dict[str, tuple[TopicState, list[Source]]]:
    """Every live topic's state and committed segments, from the server's tables."""
    import boto3

    from headwater.settings import Settings
    from headwater.storage.heads import DynamoHeadStore
    from headwater.storage.segments import DynamoSegmentStore

    ddb = boto3.client("dynamodb", endpoint_url=endpoint_url, region_name=_region(region))
    settings = Settings(resource_prefix=resource_prefix)
    heads, segments = DynamoHeadStore(ddb, settings), DynamoSegmentStore(ddb, settings)
    out: dict[str, tuple[TopicState, list[Source]]] = {}
    after: str | None = None
    while True:
        page = heads.list_live("", after, 100)
        for head in page:
            if not head.sealed_through:
                continue
            state = TopicState(head.epoch, head.del_ver, head.earliest_seq, head.evict_floor)
            sources: list[Source] = []
            last = 0
            while True:
                items = segments.after(head, last, 100)
                for it in items:
                    if it.last_seq < head.earliest_seq:
                        continue  # wholly below the floor (deleted prefix, not yet reclaimed)
                    deleted = tuple(sorted(it.deleted))
                    sources.append(Source(it.key, it.last_seq, deleted, head.earliest_seq))
                if len(items) < 100:
                    break
                last = items[-1].last_seq
            out[head.topic] = (state, sources)
        if len(page) < 100:
            return out
        after = page[-1].topic


def sentiment_item(data_raw: bytes, default_ms: int) -> tuple[str, str] | None:
    """(ticker, label) of a record whose data is a valid sentiment item, else None: exactly
    the server's rule (headwater.dashboard.items.parse_item, default time = append time)."""
    from headwater.dashboard.items import parse_item

    try:
        data = json.loads(data_raw)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError)
        return None
    item = parse_item(data, default_ms)
    return None if item is None else (item.ticker, item.label)


def segment_rows(
    sources: Iterable[tuple[str, tuple[int, ...], int]],
    bucket: str,
    endpoint_url: str | None,
    region: str | None,
    sentiment_topics: frozenset[str] = frozenset(),
) -> Iterator[tuple[Any, ...]]:
    """Runs in a Spark task: one S3 client per partition, one row per live stored record.
    Records of a sentiment topic that are valid items carry their ticker and label."""
    from headwater.engine.segment import decode_segment

    s3 = s3_client(endpoint_url, region)
    for key, deleted, floor in sources:
        skip = frozenset(deleted)
        blob = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        info, records = decode_segment(blob)
        items = info.topic in sentiment_topics
        for r in records:
            if r.seq >= floor and r.seq not in skip:
                item = sentiment_item(r.data_raw, r.ts) if items else None
                ticker, label = item if item is not None else (None, None)
                yield (info.topic, info.epoch, r.seq, r.ts, r.size, r.tag, r.node, ticker, label)


def _windows(rows: list[Row]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:  # already ordered by topic, window_start
        out.setdefault(r["topic"], []).append(
            {
                "window_start": int(r["window_start"]),
                "records": int(r["records"]),
                "bytes": int(r["bytes"]),
                "by_tag_prefix": dict(sorted((r["by_tag_prefix"] or {}).items())),
                "by_node": dict(sorted((r["by_node"] or {}).items())),
            }
        )
    return out


def _put_json(s3: Any, bucket: str, key: str, body: Any) -> None:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/json")


def _get_json(s3: Any, bucket: str, key: str) -> Any:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None


def merge_windows(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Windows of the same topic added up by window_start (counts and maps are sums)."""
    by_start: dict[int, dict[str, Any]] = {}
    for w in [*old, *new]:
        cur = by_start.get(w["window_start"])
        if cur is None:
            by_start[w["window_start"]] = {
                **w,
                "by_tag_prefix": dict(w["by_tag_prefix"]),
                "by_node": dict(w["by_node"]),
            }
            continue
        cur["records"] += w["records"]
        cur["bytes"] += w["bytes"]
        for field in ("by_tag_prefix", "by_node"):
            for k, v in w[field].items():
                cur[field][k] = cur[field].get(k, 0) + v
    out = [by_start[k] for k in sorted(by_start)]
    for w in out:
        w["by_tag_prefix"] = dict(sorted(w["by_tag_prefix"].items()))
        w["by_node"] = dict(sorted(w["by_node"].items()))
    return out


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def empty_sentiment() -> dict[str, Any]:
    return {"items": 0, "by_label": dict.fromkeys(LABELS, 0), "by_ticker": {}, "minute": []}


def _sentiments(totals: list[Row], minute: list[Row]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in totals:
        s = out.setdefault(r["topic"], empty_sentiment())
        s["items"] = int(r["items"])
        for k, v in (r["by_label"] or {}).items():
            s["by_label"][k] = int(v)
        s["by_ticker"] = {k: int(v) for k, v in sorted((r["by_ticker"] or {}).items())}
    for r in minute:  # already ordered by topic, window_start
        s = out.setdefault(r["topic"], empty_sentiment())
        s["minute"].append({"window_start": int(r["window_start"]), "items": int(r["items"])})
    return out


def merge_sentiment(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Two sentiment objects of the same topic added up (totals, maps, minute windows)."""
    out = empty_sentiment()
    minute: dict[int, int] = {}
    for s in (old, new):
        out["items"] += int(s["items"])
        for field in ("by_label", "by_ticker"):
            for k, v in s[field].items():
                out[field][k] = out[field].get(k, 0) + int(v)
        for w in s["minute"]:
            minute[w["window_start"]] = minute.get(w["window_start"], 0) + int(w["items"])
    out["by_label"] = dict(sorted(out["by_label"].items()))
    out["by_ticker"] = dict(sorted(out["by_ticker"].items()))
    out["minute"] = [{"window_start": k, "items": minute[k]} for k in sorted(minute)]
    return out


def prune_sentiment(s: dict[str, Any], generated_at: int) -> dict[str, Any]:
    """Only the minute windows starting at most SENTIMENT_KEEP_MS before generated_at."""
    since = generated_at - SENTIMENT_KEEP_MS
    return {**s, "minute": [w for w in s["minute"] if w["window_start"] >= since]}


def run(spark: SparkSession, args: JobArgs) -> dict[str, Any]:
    """The whole job against one session; returns the manifest it wrote."""
    from headwater.names import object_key_component

    s3 = s3_client(args.endpoint_url, args.region)
    manifest_key = args.output_prefix + MANIFEST_NAME
    previous = _get_json(s3, args.bucket, manifest_key) or {}
    prev_topics: dict[str, Any] = previous.get("topics", {})
    sentiment_topics = frozenset(args.sentiment_topics)
    kept: dict[str, Any] = {}  # topics whose rollups carry over unchanged
    carried: dict[str, Any] = {}  # topics whose new segments add to the previous windows
    states: dict[str, TopicState] = {}
    sealed: dict[str, int] = {}  # catalogue topics: the last seq their segments cover
    work: list[tuple[str, tuple[int, ...], int]] = []
    if args.resource_prefix:
        mode = "catalogue"
        for topic, (state, sources) in catalogue(
            args.resource_prefix, args.endpoint_url, args.region
        ).items():
            states[topic] = state
            sealed[topic] = max((x.last_seq for x in sources), default=0)
            prev = prev_topics.get(topic)
            # A topic that became a sentiment topic is recomputed like a changed one.
            counted = topic not in sentiment_topics or "sentiment" in (prev or {})
            if prev is not None and prev.get("state") == state.as_json() and counted:
                fresh = [x for x in sources if x.last_seq > int(prev["through_seq"])]
                if not fresh:
                    kept[topic] = prev
                    continue
                carried[topic] = prev
                sources = fresh
            work.extend((x.key, x.deleted, x.floor) for x in sources)
    else:
        mode = "listing"
        work = [(k, (), 1) for k in list_keys(s3, args.bucket, args.segments_prefix)]
    log.info(
        "rolling up %d segment objects from s3://%s (%s; %d topics unchanged)",
        len(work),
        args.bucket,
        mode,
        len(kept),
    )
    sc = spark.sparkContext
    slices = max(1, min(len(work), sc.defaultParallelism * 4))
    bucket, endpoint, region = args.bucket, args.endpoint_url, args.region
    rdd = sc.parallelize(work, slices).mapPartitions(
        lambda part: segment_rows(part, bucket, endpoint, region, sentiment_topics)
    )
    result = rollup(spark.createDataFrame(rdd, ROW_SCHEMA), with_sentiment=bool(sentiment_topics))
    summary = result.summary.collect()
    minute = _windows(result.minute.collect())
    hour = _windows(result.hour.collect())
    sentiments: dict[str, dict[str, Any]] = {}
    if result.sentiment_totals is not None and result.sentiment_minute is not None:
        sentiments = _sentiments(
            result.sentiment_totals.collect(), result.sentiment_minute.collect()
        )

    generated_at = now_ms()  # the manifest's; sentiment minute windows are pruned by it
    topics: dict[str, Any] = dict(kept)
    for s in summary:
        topic = s["topic"]
        base = f"{args.output_prefix}{object_key_component(topic)}/"
        minute_key, hour_key = base + "minute.json", base + "hour.json"
        new_minute, new_hour = minute.get(topic, []), hour.get(topic, [])
        records, through = int(s["records"]), int(s["through_seq"])
        prev = carried.get(topic)
        if prev is not None:
            old_minute = _get_json(s3, args.bucket, prev["minute"]) or []
            new_minute = merge_windows(old_minute, new_minute)
            new_hour = merge_windows(_get_json(s3, args.bucket, prev["hour"]) or [], new_hour)
            records += int(prev["records"])
            through = max(through, int(prev["through_seq"]))
        _put_json(s3, args.bucket, minute_key, new_minute)
        _put_json(s3, args.bucket, hour_key, new_hour)
        topics[topic] = {
            "epoch": int(s["epoch"]),
            "through_seq": through,
            "records": records,
            "minute": minute_key,
            "hour": hour_key,
        }
        if topic in sentiment_topics:
            sentiment = sentiments.get(topic, empty_sentiment())
            if prev is not None:  # carried: its entry has "sentiment" (else recomputed)
                old = _get_json(s3, args.bucket, prev["sentiment"]) or empty_sentiment()
                sentiment = merge_sentiment(old, sentiment)
            sentiment_key = base + SENTIMENT_NAME
            _put_json(s3, args.bucket, sentiment_key, prune_sentiment(sentiment, generated_at))
            topics[topic]["sentiment"] = sentiment_key
        if topic in states:
            # Through the last segment read, even if its last records were deleted.
            topics[topic]["through_seq"] = max(through, sealed[topic])
            topics[topic]["state"] = states[topic].as_json()
    for topic, prev in carried.items():
        if topic not in topics:  # the new segments held only deleted records
            topics[topic] = {**prev, "through_seq": sealed[topic]}
    for topic, entry in list(topics.items()):
        if topic not in sentiment_topics and "sentiment" in entry:
            # No longer a sentiment topic: its (now stale) object is no longer pointed at.
            topics[topic] = {k: v for k, v in entry.items() if k != "sentiment"}
    manifest = {
        "version": MANIFEST_VERSION,
        "generated_at": generated_at,
        "mode": mode,
        "segments": len(work),
        "topics": dict(sorted(topics.items())),
    }
    # Last: a reader that sees this manifest finds every object it points at.
    _put_json(s3, args.bucket, manifest_key, manifest)
    log.info("wrote rollups for %d topics (%d unchanged)", len(topics) - len(kept), len(kept))
    return manifest


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from rollup.spark import GlueRun, session

    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = spark or session()
    glue = GlueRun(spark, args.job_name)
    run(spark, args)
    glue.commit()
    return 0
