"""The rollup job end to end: segment objects in a moto server's bucket → the job's main with
--endpoint-url (Spark tasks fetch and decode) → rollup objects and the manifest."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from pyspark.sql import SparkSession
from rollup.job import main, parse_args

from headwater.dev.emulator import MotoServer
from headwater.engine.records import StoredRecord, json_literal
from headwater.engine.segment import encode_segment
from headwater.names import object_key_component
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.glue

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000 - (1_700_000_000_000 % HOUR_MS)


@pytest.fixture(scope="module")
def emulator() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
def bucket(emulator: MotoServer) -> tuple[str, Any]:
    settings = Settings(resource_prefix=f"glue-{uuid.uuid4().hex[:8]}")
    clients = AwsClients(
        dynamodb=boto3.client("dynamodb", endpoint_url=emulator.url, region_name="us-east-1"),
        s3=boto3.client("s3", endpoint_url=emulator.url, region_name="us-east-1"),
    )
    ensure_resources(settings, clients)
    return settings.bucket_name, clients.s3


def record(
    seq: int, ts: int, tag: str | None = None, node: str | None = None, data: bytes | None = None
) -> StoredRecord:
    data = json.dumps({"n": seq}).encode() if data is None else data
    return StoredRecord(
        seq=seq,
        ts=ts,
        data_raw=data,
        node_json=json_literal(node) if node is not None else None,
        tag_json=json_literal(tag) if tag is not None else None,
        meta_raw=None,
        size=len(data) + 16,
    )


def put_segment(s3: Any, bucket: str, topic: str, epoch: int, recs: list[StoredRecord]) -> str:
    blob, info = encode_segment(topic, epoch, recs, block_bytes=64)
    key = (
        f"segments/{object_key_component(topic)}/{epoch}/"
        f"{info.first_seq:020d}-{info.last_seq:020d}-{uuid.uuid4().hex[:8]}"
    )
    s3.put_object(Bucket=bucket, Key=key, Body=blob)
    return key


def get_json(s3: Any, bucket: str, key: str) -> Any:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_parse_args_glue_style_with_defaults_and_foreign_arguments() -> None:
    args = parse_args(["--JOB_NAME", "j", "--bucket", "b", "--job-bookmark-option", "x"])
    assert (args.bucket, args.segments_prefix, args.output_prefix) == (
        "b",
        "segments/",
        "rollups/v1/",
    )
    assert args.endpoint_url is None and args.job_name == "j"
    assert args.sentiment_topics == ()
    args = parse_args(["--bucket=b", "--output-prefix", "r/", "--endpoint-url", "http://x"])
    assert (args.output_prefix, args.endpoint_url) == ("r/", "http://x")
    args = parse_args(["--bucket", "b", "--sentiment-topics", " sentiment, news,,sentiment"])
    assert args.sentiment_topics == ("sentiment", "news")


def test_job_writes_rollups_then_manifest(
    spark: SparkSession, emulator: MotoServer, bucket: tuple[str, Any]
) -> None:
    name, s3 = bucket
    # GIVEN two overlapping segments of "orders" (an orphan from a crashed seal repeats 3-4),
    # one of "a:b.c" in its second epoch, and an old epoch of it
    orders = [
        record(1, T0, "order:created", "n1"),
        record(2, T0 + 1, "order:paid", "n2"),
        record(3, T0 + 60_000, "ping"),
        record(4, T0 + HOUR_MS, None, "n1"),
    ]
    put_segment(s3, name, "orders", 1, orders[:4])
    put_segment(s3, name, "orders", 1, [*orders[2:], record(5, T0 + HOUR_MS + 5, "x:y")])
    put_segment(s3, name, "a:b.c", 1, [record(s, T0, "old") for s in range(1, 30)])
    put_segment(s3, name, "a:b.c", 2, [record(1, T0, "t"), record(2, T0 + 2, None, "n")])
    s3.put_object(Bucket=name, Key="other/not-a-segment", Body=b"junk")
    before = time.time_ns() // 1_000_000

    # WHEN the job runs against the emulator
    assert main(["--bucket", name, "--endpoint-url", emulator.url], spark=spark) == 0

    # THEN the manifest lists both topics with their latest epoch and through_seq
    manifest = get_json(s3, name, "rollups/v1/manifest.json")
    assert manifest["version"] == 1 and manifest["segments"] == 4
    assert before <= manifest["generated_at"] <= time.time_ns() // 1_000_000
    base = f"rollups/v1/{object_key_component('orders')}/"
    assert manifest["topics"]["orders"] == {
        "epoch": 1,
        "through_seq": 5,
        "records": 5,
        "minute": base + "minute.json",
        "hour": base + "hour.json",
    }
    abc = manifest["topics"]["a:b.c"]
    assert (abc["epoch"], abc["through_seq"], abc["records"]) == (2, 2, 2)
    # AND every object the manifest points at exists, windows sorted by start
    size = orders[0].size
    assert get_json(s3, name, manifest["topics"]["orders"]["hour"]) == [
        {
            "window_start": T0,
            "records": 3,
            "bytes": 3 * size,
            "by_tag_prefix": {"order": 2, "ping": 1},
            "by_node": {"n1": 1, "n2": 1},
        },
        {
            "window_start": T0 + HOUR_MS,
            "records": 2,
            "bytes": 2 * size,
            "by_tag_prefix": {"x": 1},
            "by_node": {"n1": 1},
        },
    ]
    minute = get_json(s3, name, manifest["topics"]["orders"]["minute"])
    assert [(w["window_start"], w["records"]) for w in minute] == [
        (T0, 2),
        (T0 + 60_000, 1),
        (T0 + HOUR_MS, 2),
    ]
    assert get_json(s3, name, abc["minute"]) == [
        {
            "window_start": T0,
            "records": 2,
            "bytes": 2 * size,
            "by_tag_prefix": {"t": 1},
            "by_node": {"n": 1},
        }
    ]


def test_job_with_no_segments_writes_an_empty_manifest(
    spark: SparkSession, emulator: MotoServer, bucket: tuple[str, Any]
) -> None:
    name, s3 = bucket
    assert main(["--bucket", name, "--endpoint-url", emulator.url], spark=spark) == 0
    manifest = get_json(s3, name, "rollups/v1/manifest.json")
    assert manifest["segments"] == 0 and manifest["topics"] == {}


def test_package_zip_holds_both_packages_and_imports(tmp_path: Any) -> None:
    import subprocess
    import sys
    import zipfile

    from package import build  # glue_jobs/package.py

    out = build(tmp_path / "job.zip")
    names = set(zipfile.ZipFile(out).namelist())
    assert {
        "headwater/engine/segment.py",
        "headwater/names.py",
        "headwater/dashboard/items.py",
        "rollup/job.py",
    } <= names
    assert not any("__pycache__" in n for n in names)
    # Glue puts the zip on sys.path: the job's modules import from it alone
    code = (
        "import rollup.transforms, headwater.engine.segment, headwater.names;"
        "import headwater.dashboard.items as items;"
        "print(rollup.transforms.__file__); print(headwater.engine.segment.__file__);"
        "print(items.__file__)"
    )
    env = {"PYTHONPATH": str(out), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert all(line.startswith(str(out)) for line in done.stdout.split()), done.stdout


def test_package_uploads_to_the_data_bucket_named_by_the_stack(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto import mock_aws
    from package import S3_KEY
    from package import main as package_main

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    template = {
        "Resources": {"DataBucket": {"Type": "AWS::S3::Bucket"}},
        "Outputs": {"DataBucketName": {"Value": {"Ref": "DataBucket"}}},
    }
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="us-east-1")
        cfn.create_stack(StackName="hw-test", TemplateBody=json.dumps(template))
        [out] = cfn.describe_stacks(StackName="hw-test")["Stacks"][0]["Outputs"]
        assert package_main(["--stack", "hw-test", "--out", str(tmp_path / "z.zip")]) == 0
        s3 = boto3.client("s3", region_name="us-east-1")
        body = s3.get_object(Bucket=out["OutputValue"], Key=S3_KEY)["Body"].read()
        assert body == (tmp_path / "z.zip").read_bytes()
        # A stack without the output is a clear error, not an upload somewhere else.
        cfn.create_stack(
            StackName="other", TemplateBody=json.dumps({"Resources": template["Resources"]})
        )
        with pytest.raises(SystemExit, match="no DataBucketName output"):
            package_main(["--stack", "other", "--out", str(tmp_path / "z.zip")])


def sentiment_data(ticker: str, label: str, **extra: Any) -> bytes:
    body = {"ticker": ticker, "score": -0.25, "label": label, "confidence": 0.5, "source": "rss"}
    return json.dumps({**body, **extra}).encode()


M, H = 60_000, HOUR_MS
G1 = T0  # generated_at of the first run (a minute boundary), G2 of the later ones
G2 = G1 + 2 * H
# (seq, append time, data, the (ticker, label) it counts as, by hand: None = not an item)
SENT_A = [
    (1, G1 - 26 * H, sentiment_data("AAPL", "positive"), ("AAPL", "positive")),
    (2, G1 - 25 * H - 1, sentiment_data("msft", "negative"), ("MSFT", "negative")),
    (3, G1 - 25 * H, sentiment_data("aapl", "neutral"), ("AAPL", "neutral")),
    (4, G1 - H, sentiment_data("AAPL", "positive"), ("AAPL", "positive")),
    (5, G1 - H + 1, b"not json", None),
    (6, G1 - H + M - 1, sentiment_data("Msft", "positive"), ("MSFT", "positive")),
    (7, G1 - 10 * M, sentiment_data("AAPL", "bullish"), None),
    (8, G1 - 10 * M, sentiment_data("TSLA", "negative"), ("TSLA", "negative")),  # deleted
    (9, G1 - 5 * M, json.dumps({"n": 9}).encode(), None),
]
SENT_B = [
    (10, G1 + 30 * M, sentiment_data("tsla", "positive"), ("TSLA", "positive")),
    (
        11,
        G1 + H,
        sentiment_data("AAPL", "negative", timestamp="2020-01-01T00:00:00Z"),
        ("AAPL", "negative"),
    ),
    (12, G1 + H, sentiment_data("AAPL", "positive", confidence=True), None),
]
NEWS = [
    (1, G1 - 2 * H, sentiment_data("NVDA", "neutral"), ("NVDA", "neutral")),
    (2, G1 - 2 * H, b"{}", None),
]
QUIET = [(1, G1, b'{"ticker": "AAPL"}', None)]
DELETED = (8,)


def expected_sentiment(recs: list[tuple[Any, ...]], generated_at: int) -> dict[str, Any]:
    """The sentiment object, counted by brute force from the hand-written expectations."""
    counted = [(ts, tl) for seq, ts, _, tl in recs if tl is not None and seq not in DELETED]
    by_label = {"negative": 0, "neutral": 0, "positive": 0}
    by_ticker: dict[str, int] = {}
    minute: dict[int, int] = {}
    for ts, (ticker, label) in counted:
        by_label[label] += 1
        by_ticker[ticker] = by_ticker.get(ticker, 0) + 1
        if ts - ts % M >= generated_at - 25 * H:
            minute[ts - ts % M] = minute.get(ts - ts % M, 0) + 1
    return {
        "items": len(counted),
        "by_label": by_label,
        "by_ticker": dict(sorted(by_ticker.items())),
        "minute": [{"window_start": k, "items": v} for k, v in sorted(minute.items())],
    }


def test_sentiment_rollups_full_incremental_and_newly_added_topics(
    spark: SparkSession,
    emulator: MotoServer,
    bucket: tuple[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rollup import job
    from rollup.job import Source, TopicState

    from headwater.dashboard.items import LABELS

    assert tuple(sorted(LABELS)) == job.LABELS
    name, s3 = bucket

    def seg(topic: str, recs: list[tuple[Any, ...]]) -> str:
        return put_segment(s3, name, topic, 1, [record(r[0], r[1], data=r[2]) for r in recs])

    # GIVEN a catalogue (as the server's tables would give it) of three topics
    state = TopicState(epoch=1, del_ver=1, earliest_seq=1, evict_floor=0)
    key_a, key_news, key_quiet = seg("sentiment", SENT_A), seg("news", NEWS), seg("quiet", QUIET)
    catalogue = {
        "sentiment": (state, [Source(key_a, 9, DELETED, 1)]),
        "news": (state, [Source(key_news, 2)]),
        "quiet": (state, [Source(key_quiet, 1)]),
    }
    clock = [G1]
    monkeypatch.setattr(job, "catalogue", lambda *_: dict(catalogue))
    monkeypatch.setattr(job, "now_ms", lambda: clock[0])

    def run(topics: str, prefix: str = "rollups/v1/") -> dict[str, Any]:
        args = ["--bucket", name, "--resource-prefix", "x", "--endpoint-url", emulator.url]
        args += ["--output-prefix", prefix, "--sentiment-topics", topics]
        return job.run(spark, parse_args(args))

    def obj(manifest: dict[str, Any], topic: str) -> Any:
        return get_json(s3, name, manifest["topics"][topic]["sentiment"])

    # WHEN the job runs with two of them as sentiment topics
    first = run("sentiment,quiet")
    # THEN each gets its sentiment.json (written before the manifest that points at it)
    assert first["generated_at"] == G1
    base = f"rollups/v1/{object_key_component('sentiment')}/"
    assert first["topics"]["sentiment"]["sentiment"] == base + "sentiment.json"
    sent = obj(first, "sentiment")
    assert list(sent) == ["items", "by_label", "by_ticker", "minute"]
    assert sent == expected_sentiment(SENT_A, G1)
    # (the same numbers by hand: 8 is deleted; minute windows from G1 - 25 h on)
    assert sent["items"] == 5 and sent["by_ticker"] == {"AAPL": 3, "MSFT": 2}
    assert list(sent["by_label"].items()) == [("negative", 1), ("neutral", 1), ("positive", 3)]
    assert sent["minute"] == [
        {"window_start": G1 - 25 * H, "items": 1},
        {"window_start": G1 - H, "items": 2},
    ]
    # AND a sentiment topic without items gets zeros, another topic no sentiment at all
    assert obj(first, "quiet") == {
        "items": 0,
        "by_label": {"negative": 0, "neutral": 0, "positive": 0},
        "by_ticker": {},
        "minute": [],
    }
    assert "sentiment" not in first["topics"]["news"]

    # GIVEN a new segment of "sentiment", "news" made a sentiment topic, two hours later
    key_b = seg("sentiment", SENT_B)
    catalogue["sentiment"] = (state, [*catalogue["sentiment"][1], Source(key_b, 12)])
    clock[0] = G2
    # WHEN the job runs again
    second = run("sentiment,quiet,news")
    # THEN only the new segment of "sentiment" is read and merged into its counts, "news"
    # (no sentiment yet, nothing new) is recomputed from its segments, "quiet" is kept
    assert second["segments"] == 2
    assert obj(second, "sentiment") == expected_sentiment(SENT_A + SENT_B, G2)
    assert obj(second, "sentiment")["minute"][0] == {"window_start": G1 - H, "items": 2}
    assert obj(second, "news") == expected_sentiment(NEWS, G2)
    assert obj(second, "news")["items"] == 1
    assert second["topics"]["quiet"] == first["topics"]["quiet"]
    assert second["topics"]["sentiment"]["through_seq"] == 12

    # AND the incremental result equals a full recompute of the same catalogue
    full = run("sentiment,quiet,news", prefix="rollups/full/")
    assert full["segments"] == 4
    for topic in ("sentiment", "news", "quiet"):
        for kind in ("sentiment", "minute", "hour"):
            inc = s3.get_object(Bucket=name, Key=second["topics"][topic][kind])["Body"].read()
            rec = s3.get_object(Bucket=name, Key=full["topics"][topic][kind])["Body"].read()
            assert inc == rec, (topic, kind)

    # WHEN "news" is no longer a sentiment topic THEN its entry drops the key; the others
    # (nothing new) keep theirs as they were
    third = run("sentiment,quiet")
    assert third["segments"] == 0
    assert third["topics"]["news"] == {
        k: v for k, v in second["topics"]["news"].items() if k != "sentiment"
    }
    assert third["topics"]["sentiment"] == second["topics"]["sentiment"]
