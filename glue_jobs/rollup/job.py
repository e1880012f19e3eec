"""The rollup job: list segment objects, fetch and decode them in Spark tasks, roll them up
(transforms.py), write per-topic rollup objects and, last, the manifest that points at them.

Arguments (Glue style, `--name value`): --bucket (required), --segments-prefix (segments/),
--output-prefix (rollups/v1/), --endpoint-url (an emulator; unset on AWS), --region.
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


@dataclass(frozen=True)
class JobArgs:
    bucket: str
    segments_prefix: str = "segments/"
    output_prefix: str = "rollups/v1/"
    endpoint_url: str | None = None
    region: str | None = None
    job_name: str | None = None


def parse_args(argv: Sequence[str]) -> JobArgs:
    p = argparse.ArgumentParser(prog="rollup", description=__doc__)
    p.add_argument("--bucket", required=True)
    p.add_argument("--segments-prefix", default="segments/")
    p.add_argument("--output-prefix", default="rollups/v1/")
    p.add_argument("--endpoint-url", default=None)
    p.add_argument("--region", default=None)
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
        segments_prefix=ns.segments_prefix,
        output_prefix=ns.output_prefix,
        endpoint_url=ns.endpoint_url or None,
        region=ns.region or None,
        job_name=job_name,
    )


def s3_client(endpoint_url: str | None, region: str | None) -> Any:
    import boto3

    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region or "us-east-1")


def list_keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents", ()) if not o["Key"].endswith("/"))
    return keys


def segment_rows(
    keys: Iterable[str], bucket: str, endpoint_url: str | None, region: str | None
) -> Iterator[tuple[Any, ...]]:
    """Runs in a Spark task: one S3 client per partition, one row per stored record."""
    from headwater.engine.segment import decode_segment

    s3 = s3_client(endpoint_url, region)
    for key in keys:
        blob = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        info, records = decode_segment(blob)
        for r in records:
            yield (info.topic, info.epoch, r.seq, r.ts, r.size, r.tag, r.node)


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


def run(spark: SparkSession, args: JobArgs) -> dict[str, Any]:
    """The whole job against one session; returns the manifest it wrote."""
    from headwater.names import object_key_component

    s3 = s3_client(args.endpoint_url, args.region)
    keys = list_keys(s3, args.bucket, args.segments_prefix)
    log.info(
        "rolling up %d segment objects under s3://%s/%s",
        len(keys),
        args.bucket,
        args.segments_prefix,
    )
    sc = spark.sparkContext
    slices = max(1, min(len(keys), sc.defaultParallelism * 4))
    bucket, endpoint, region = args.bucket, args.endpoint_url, args.region
    rdd = sc.parallelize(keys, slices).mapPartitions(
        lambda part: segment_rows(part, bucket, endpoint, region)
    )
    result = rollup(spark.createDataFrame(rdd, ROW_SCHEMA))
    summary = result.summary.collect()
    minute = _windows(result.minute.collect())
    hour = _windows(result.hour.collect())

    topics: dict[str, Any] = {}
    for s in summary:
        topic = s["topic"]
        base = f"{args.output_prefix}{object_key_component(topic)}/"
        minute_key, hour_key = base + "minute.json", base + "hour.json"
        _put_json(s3, args.bucket, minute_key, minute.get(topic, []))
        _put_json(s3, args.bucket, hour_key, hour.get(topic, []))
        topics[topic] = {
            "epoch": int(s["epoch"]),
            "through_seq": int(s["through_seq"]),
            "records": int(s["records"]),
            "minute": minute_key,
            "hour": hour_key,
        }
    manifest = {
        "version": MANIFEST_VERSION,
        "generated_at": time.time_ns() // 1_000_000,
        "segments": len(keys),
        "topics": topics,
    }
    # Last: a reader that sees this manifest finds every object it points at.
    _put_json(s3, args.bucket, args.output_prefix + MANIFEST_NAME, manifest)
    log.info("wrote rollups for %d topics", len(topics))
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
