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


def record(seq: int, ts: int, tag: str | None = None, node: str | None = None) -> StoredRecord:
    data = json.dumps({"n": seq}).encode()
    return StoredRecord(
        seq=seq,
        ts=ts,
        data_raw=data,
        node_json=json_literal(node) if node is not None else None,
        tag_json=json_literal(tag) if tag is not None else None,
        meta_raw=None,
        size=len(data) + 16,
    )


def put_segment(s3: Any, bucket: str, topic: str, epoch: int, recs: list[StoredRecord]) -> None:
    blob, info = encode_segment(topic, epoch, recs, block_bytes=64)
    key = (
        f"segments/{object_key_component(topic)}/{epoch}/"
        f"{info.first_seq:020d}-{info.last_seq:020d}-{uuid.uuid4().hex[:8]}"
    )
    s3.put_object(Bucket=bucket, Key=key, Body=blob)


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
    args = parse_args(["--bucket=b", "--output-prefix", "r/", "--endpoint-url", "http://x"])
    assert (args.output_prefix, args.endpoint_url) == ("r/", "http://x")


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
    assert {"headwater/engine/segment.py", "headwater/names.py", "rollup/job.py"} <= names
    assert not any("__pycache__" in n for n in names)
    # Glue puts the zip on sys.path: the job's modules import from it alone
    code = (
        "import rollup.transforms, headwater.engine.segment, headwater.names;"
        "print(rollup.transforms.__file__); print(headwater.engine.segment.__file__)"
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
