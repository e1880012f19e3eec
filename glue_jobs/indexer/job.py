"""Build the /v1 streams' index companions on Spark (Glue 5.0 = Spark 3.5).

The driver reads the server's tables: every live stream whose schema registry has a search
config or a routing key, its index catalogue (reset when the search config changed: a new
plan generation) and its sealed segments past the covered prefix (headwater.index.build's
`prepare`). The builds are mapped over those segments in Spark tasks: each task reads its
segment from S3, runs the same pure per-segment build the server's upkeep runs
(`build_segment`) and writes the companion next to the segment. The driver then publishes
each stream's new coverage with one conditional catalogue write (`commit`), and compacts the
covered segments' routing keys into lexicon runs (headwater.index.runs: the run builds mapped
over Spark tasks too, the driver publishing them with another conditional write).

Idempotent and incremental: a run with nothing new builds nothing; a run that dies before
publishing leaves objects that the next run rewrites byte for byte; two runs at once build the
same bytes at the same keys and only one of them publishes each step (the other's conditional
write fails and it moves on)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger("headwater.indexer")


@dataclass(frozen=True)
class JobArgs:
    bucket: str
    resource_prefix: str
    endpoint_url: str | None = None
    region: str | None = None
    job_name: str | None = None
    max_segments: int = 1000  # per stream per run: the rest waits for the next run
    tasks_per_core: int = 2  # Spark partitions per core (balance vs per-task overhead)


def parse_args(argv: Sequence[str]) -> JobArgs:
    p = argparse.ArgumentParser(prog="indexer", description=__doc__)
    p.add_argument("--bucket", required=True)
    p.add_argument("--resource-prefix", required=True)
    p.add_argument("--endpoint-url", default=None)
    p.add_argument("--region", default=None)
    p.add_argument("--max-segments", type=int, default=1000)
    p.add_argument("--tasks-per-core", type=int, default=2)
    ns, _unknown = p.parse_known_args(list(argv))  # Glue passes arguments of its own
    job_name = None
    if "--JOB_NAME" in argv:
        job_name = list(argv)[list(argv).index("--JOB_NAME") + 1]
    return JobArgs(
        bucket=ns.bucket,
        resource_prefix=ns.resource_prefix,
        endpoint_url=ns.endpoint_url or None,
        region=ns.region or None,
        job_name=job_name,
        max_segments=max(1, ns.max_segments),
        tasks_per_core=max(1, ns.tasks_per_core),
    )


def _clients(args: JobArgs) -> tuple[Any, Any]:
    import boto3
    from rollup.job import _region

    region = _region(args.region)
    return (
        boto3.client("dynamodb", endpoint_url=args.endpoint_url, region_name=region),
        boto3.client("s3", endpoint_url=args.endpoint_url, region_name=region),
    )


@functools.lru_cache(maxsize=4)
def _executor_s3(endpoint_url: str | None, region: str | None) -> Any:
    """The S3 client of a Spark task, made once per Python worker (Spark reuses workers
    across tasks; a boto3 client costs ~0.1-0.3 s of CPU to make)."""
    import boto3
    from rollup.job import _region

    return boto3.client("s3", endpoint_url=endpoint_url, region_name=_region(region))


@dataclass(frozen=True)
class Task:
    """One segment to build: where it is, the seqs deleted since it was sealed, and the
    registry (canonical JSON) its stream's plan comes from."""

    topic: str
    epoch: int
    segment_key: str
    last_seq: int
    deleted: tuple[int, ...]
    registry_json: str


def _slices(spark: SparkSession, args: JobArgs, n: int) -> int:
    """Spark partitions for `n` tasks: `tasks_per_core` per core, at most one per task."""
    return max(1, min(n, spark.sparkContext.defaultParallelism * args.tasks_per_core))


def build_tasks(
    tasks: Iterator[Task], bucket: str, endpoint_url: str | None, region: str | None
) -> Iterator[tuple[str, int, int, int, float, float, float]]:
    """A Spark partition's builds: (topic, epoch, segment last seq, companion bytes, and the
    seconds its task spent reading the segment, building, writing the companion)."""
    from headwater.engine.segment import companion_key
    from headwater.index.build import build_segment
    from headwater.index.plan import IndexPlan

    s3 = _executor_s3(endpoint_url, region)
    plans: dict[str, tuple[IndexPlan, dict[str, Any]]] = {}
    for t in tasks:
        if t.registry_json not in plans:
            reg = json.loads(t.registry_json)
            plan = IndexPlan.from_registry(reg)
            assert plan is not None  # the driver only sends streams that have one
            plans[t.registry_json] = (plan, reg)
        plan, reg = plans[t.registry_json]
        t0 = time.perf_counter()
        blob = s3.get_object(Bucket=bucket, Key=t.segment_key)["Body"].read()
        t1 = time.perf_counter()
        body = build_segment(plan, reg, blob, t.deleted)
        t2 = time.perf_counter()
        s3.put_object(Bucket=bucket, Key=companion_key(t.segment_key), Body=body)
        yield (t.topic, t.epoch, t.last_seq, len(body), t1 - t0, t2 - t1, time.perf_counter() - t2)


def run(spark: SparkSession, args: JobArgs) -> dict[str, Any]:
    """One run over every live stream: what it built and published, per stream."""
    from headwater.durable.state import state_of
    from headwater.index.build import Pending, commit, prepare
    from headwater.settings import Settings
    from headwater.storage.heads import DynamoHeadStore
    from headwater.storage.index_catalogue import DynamoIndexCatalogue
    from headwater.storage.segments import DynamoSegmentStore

    ddb, s3 = _clients(args)
    settings = Settings(resource_prefix=args.resource_prefix)
    heads = DynamoHeadStore(ddb, settings)
    segments = DynamoSegmentStore(ddb, settings)
    catalogue = DynamoIndexCatalogue(ddb, settings)
    now = int(time.time() * 1000)
    t0 = time.perf_counter()

    pending: dict[tuple[str, int], Pending] = {}
    tasks: list[Task] = []
    summary: dict[str, Any] = {"streams": {}, "built": 0, "bytes": 0}
    after: str | None = None
    while True:
        page = heads.list_live("", after, 100)
        for head in page:
            state = state_of(head)
            if state is None or not state.registry_key or not head.sealed_through:
                continue
            raw = s3.get_object(Bucket=args.bucket, Key=state.registry_key)["Body"].read()
            reg = json.loads(raw)
            work = prepare(
                head,
                reg,
                segments=segments,
                catalogue=catalogue,
                now_ms=now,
                max_segments=args.max_segments,
            )
            if not isinstance(work, Pending):
                continue
            pending[(head.topic, head.epoch)] = work
            canonical = json.dumps(reg, sort_keys=True, separators=(",", ":"))
            tasks.extend(
                Task(head.topic, head.epoch, s.key, s.last_seq, tuple(sorted(s.deleted)), canonical)
                for s in work.todo
            )
        if len(page) < 100:
            break
        after = page[-1].topic

    t1 = time.perf_counter()
    built: list[tuple[str, int, int, int, float, float, float]] = []
    published: dict[tuple[str, int], tuple[Any, Any]] = {}
    if tasks:
        bucket, endpoint, region = args.bucket, args.endpoint_url, args.region
        slices = _slices(spark, args, len(tasks))
        built = (
            spark.sparkContext.parallelize(tasks, slices)
            .mapPartitions(lambda part: build_tasks(part, bucket, endpoint, region))
            .collect()
        )
    t2 = time.perf_counter()
    sizes: dict[tuple[str, int], dict[int, int]] = {}
    for topic, epoch, last_seq, size, *_ in built:
        sizes.setdefault((topic, epoch), {})[last_seq] = size
    for (topic, epoch), work in sorted(pending.items()):
        got = sizes.get((topic, epoch), {})
        # publish the contiguous prefix that was built (all of it, unless a task failed)
        done: list[int] = []
        for seg in work.todo:
            if seg.last_seq not in got:
                break
            done.append(got[seg.last_seq])
        progress = commit(work, done, catalogue=catalogue, now_ms=int(time.time() * 1000))
        if progress.catalogue is not None and work.plan.routing_keys:
            published[(topic, epoch)] = (work.head, progress.catalogue)
        if progress.built or progress.lost_race or progress.reset:
            summary["streams"][topic] = {
                "built": progress.built,
                "covered_through": progress.covered_through,
                "segments": progress.segments,
                "lost_race": progress.lost_race,
                "reset": progress.reset,
            }
        summary["built"] += progress.built
        summary["bytes"] += progress.bytes
    t3 = time.perf_counter()
    summary["runs"] = _compact(spark, args, published, segments, catalogue)
    # where a run's time went (wall seconds): the driver's reads, the Spark builds, the
    # catalogue writes, the lexicon-run compaction (its Spark stage and publication)
    summary["seconds"] = {
        "prepare": round(t1 - t0, 3),
        "build": round(t2 - t1, 3),
        "publish": round(t3 - t2, 3),
        "compact": round(time.perf_counter() - t3, 3),
        # summed over the Spark tasks (they overlap): segment reads, builds, companion writes
        "task_get": round(sum(b[4] for b in built), 3),
        "task_build": round(sum(b[5] for b in built), 3),
        "task_put": round(sum(b[6] for b in built), 3),
    }
    log.info(
        "indexed %d segments and compacted %d lexicon runs of %d streams",
        summary["built"],
        summary["runs"],
        len(pending),
    )
    return summary


@dataclass(frozen=True)
class RunTask:
    """One lexicon run to build: its stream, plan generation and member segments
    ((first seq, last seq, object key) each, in order)."""

    topic: str
    epoch: int
    generation: str
    members: tuple[tuple[int, int, str], ...]


def build_runs(
    tasks: Iterator[RunTask], bucket: str, endpoint_url: str | None, region: str | None
) -> Iterator[tuple[str, int, int, int, str]]:
    """A Spark partition's lexicon runs: (topic, epoch, first seq, last seq, last segment's
    object name) of each run built and written (a run whose companions are not all there
    yet is skipped: the next run builds it)."""
    from headwater.index.runs import build_run_of, run_key

    s3 = _executor_s3(endpoint_url, region)

    def get(key: str) -> bytes:
        try:
            body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:  # missing or unreadable: not compacted this run
            raise LookupError(key) from exc
        return body

    for t in tasks:
        body = build_run_of(t.generation, t.members, get)
        if body is None:
            continue
        last_key = t.members[-1][2]
        s3.put_object(Bucket=bucket, Key=run_key(last_key), Body=body)
        yield (t.topic, t.epoch, t.members[0][0], t.members[-1][1], last_key.rsplit("/", 1)[-1])


def _compact(
    spark: SparkSession,
    args: JobArgs,
    published: dict[tuple[str, int], tuple[Any, Any]],
    segments: Any,
    catalogue: Any,
) -> int:
    """Compact each stream's covered segments into lexicon runs (headwater.index.runs): the
    run builds are mapped over Spark tasks, then the driver publishes each stream's new runs
    (the contiguous prefix that was built) with one conditional catalogue write."""
    from headwater.index.runs import members_of, plan_runs, publish_runs

    tasks: list[RunTask] = []
    for (topic, epoch), (head, cat) in sorted(published.items()):
        for group in plan_runs(head, cat, segments, max_runs=args.max_segments):
            tasks.append(RunTask(topic, epoch, cat.generation, members_of(group)))
    if not tasks:
        return 0
    bucket, endpoint, region = args.bucket, args.endpoint_url, args.region
    slices = _slices(spark, args, len(tasks))
    built = (
        spark.sparkContext.parallelize(tasks, slices)
        .mapPartitions(lambda part: build_runs(part, bucket, endpoint, region))
        .collect()
    )
    spans: dict[tuple[str, int], dict[int, tuple[int, int, str]]] = {}
    for topic, epoch, first, last, name in built:
        spans.setdefault((topic, epoch), {})[first] = (first, last, name)
    done = 0
    for (topic, epoch), (head, cat) in sorted(published.items()):
        got = spans.get((topic, epoch), {})
        runs: list[tuple[int, int, str]] = []
        for t in tasks:
            if (t.topic, t.epoch) != (topic, epoch):
                continue
            if t.members[0][0] not in got:
                break
            runs.append(got[t.members[0][0]])
        if not runs:
            continue
        now = int(time.time() * 1000)
        if publish_runs(head, cat, runs, segments=segments, catalogue=catalogue, now_ms=now):
            done += len(runs)
    return done


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from rollup.spark import GlueRun, session

    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = spark or session()
    glue = GlueRun(spark, args.job_name)
    print(json.dumps(run(spark, args), sort_keys=True))
    glue.commit()
    return 0
