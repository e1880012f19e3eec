"""Exactly-once outcomes under the faults AWS really produces (docs/storage.md "Exactly-once
writes"). Two server processes reach DynamoDB through a fault-injecting proxy
(tests/faults/proxy.py) that drops the response of writes after they applied, holds some past
the client's read timeout, answers 500 and ThrottlingException without forwarding, and slows
others down; botocore retries on its own. Concurrent clients append to a /v0 topic (with and
without idempotency keys), follow it with long-polls, produce to a Durable Stream as
idempotent producers, and work a queue, while a router copies the topic exactly-once and the
sealer moves it to S3. Then the faults stop and the whole history is checked
(tests/faults/history.py): nothing acknowledged lost, nothing written twice, no refusal that
applied, no "deduped" on a first attempt, reads in order without gaps, every job acked once.

Run twice: with the emulator honouring ClientRequestToken (as DynamoDB and DynamoDB Local
do) and with it ignoring the token (stock moto), which leaves every retried write to be
recognised by its commit id and read-back alone."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater.dev.emulator import MotoServer
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from headwater.storage.schema import HEADS
from tests.e2e.conftest import Cluster, ServerProcess, sse_events
from tests.faults.harness import FaultProxyProcess, wait_until
from tests.faults.history import (
    AppendOp,
    check_acks,
    check_appends,
    check_producer_streams,
    check_reads,
    tally,
)

pytestmark = [pytest.mark.serial, pytest.mark.e2e, pytest.mark.timeout(420)]

TOPIC, COPY, STREAM, QUEUE = "hist", "hist-copy", "hist-ds", "jobs"
APPENDERS, OPS_PER_APPENDER = 4, 36
READERS = 2
PRODUCERS, SEQS_PER_PRODUCER = 2, 40
CONSUMERS, JOBS = 3, 72
NOTIFICATIONS, FLAG_VERSIONS = 30, 12
MIN_RUN_S = 45.0  # appenders go on this long: past the 30 s seal grace, so trims happen too
FLAG_TOKEN = {"Authorization": "Bearer dev-acme-flags-rw-0000000000000000"}
FLAG_NS = "/api/v1/tenants/acme/namespaces/faults/manifest"
FAULTS = {"drop": 0.10, "timeout": 0.01, "error": 0.02, "throttle": 0.02, "slow": 0.02}
SERVER_ENV = {
    "HEADWATER_AWS_READ_TIMEOUT_MS": "2000",  # the proxy holds answers 3 s: they time out
    "HEADWATER_SEAL_RECORDS": "24",  # seal early (and trim: MIN_RUN_S) during the run
    # Trimming waits out the longest a lost answer can stay unresolved (here ~2 s x 8
    # botocore attempts + the 10 s re-send budget), as the default 60 s does: a commit's
    # frame must not be trimmed while its outcome may still be in question (docs/storage.md)
    "HEADWATER_SEAL_GRACE_MS": "30000",
    "HEADWATER_TIERING_INTERVAL_MS": "500",
    # one line per router forward and cursor advance, quoted when the copy differs
    "HEADWATER_DEBUG_LOGGERS": "headwater.engine.routers,headwater.engine.append",
}


@dataclass
class Rig:
    proxy: FaultProxyProcess
    servers: list[ServerProcess]
    prefix: str
    started: float = field(default_factory=time.monotonic)
    fivexx: list[str] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def thread(self, target: Any, *args: Any) -> threading.Thread:
        """A client thread whose failure is recorded (and fails the test), not lost."""

        def run() -> None:
            try:
                target(self, *args)
            except BaseException as exc:  # reported by the test
                with self.lock:
                    self.crashed.append(f"{target.__name__}{args[:1]}: {exc!r}")

        return threading.Thread(target=run, daemon=True)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def note_5xx(self, where: str, r: httpx.Response) -> None:
        with self.lock:
            self.fivexx.append(f"{where}: {r.status_code} {r.text[:300]}")


@pytest.fixture(params=["tokens", "no-tokens"])
def rig(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Rig]:
    tokens = request.param == "tokens"
    with MotoServer(env={"HEADWATER_EMULATOR_TOKENS": "on" if tokens else "off"}) as moto:
        prefix = f"faults-{uuid.uuid4().hex[:8]}"
        settings = Settings(resource_prefix=prefix)
        for k, v in moto.env().items():
            monkeypatch.setenv(k, v)
        import boto3

        ensure_resources(
            settings, AwsClients.create(settings, session=boto3.Session(region_name="us-east-1"))
        )
        with FaultProxyProcess(moto.url, seed=7, **FAULTS) as proxy:
            cluster = Cluster(moto, prefix)
            env = {**SERVER_ENV, "AWS_ENDPOINT_URL_DYNAMODB": proxy.url}
            servers = [cluster.start_server(str(tmp_path), **env) for _ in range(2)]
            try:
                yield Rig(proxy, servers, prefix)
            finally:
                for s in servers:
                    s.stop()


def _error_outcome(r: httpx.Response) -> str:
    try:
        detail = r.json().get("error", {}).get("detail") or {}
    except ValueError:
        detail = {}
    return "unknown" if detail.get("outcome") == "unknown" else "failed"


def _throttled(r: httpx.Response) -> bool:
    """A 429: the topic's head key was throttled (the fault injector's throttles) and nothing
    was written; the client backs off as told (the hint, at most 1 s) and sends it again."""
    if r.status_code != 429:
        return False
    try:
        hint = (r.json().get("error", {}).get("detail") or {}).get("retry_after_ms")
    except ValueError:
        hint = None
    wait_s = hint / 1000 if isinstance(hint, int) else float(r.headers.get("retry-after", "1"))
    time.sleep(min(wait_s, 1.0))
    return True


def _appender(rig: Rig, index: int, ops: list[AppendOp]) -> None:
    rnd = random.Random(100 + index)
    name = f"a{index}"
    with httpx.Client(base_url=rig.urls[index % 2], timeout=60) as http:
        for n in itertools.count():
            if n >= OPS_PER_APPENDER and time.monotonic() > rig.started + MIN_RUN_S:
                break
            ids = [f"{name}-{n}-{j}" for j in range(rnd.randint(1, 4))]
            key = f"{name}-{n}" if n % 2 == 0 else None
            op = AppendOp(name, ids, key)
            body: dict[str, Any] = {"records": [{"data": {"id": i}} for i in ids], "node": name}
            if key is not None:
                body["idempotency_key"] = key
            while True:
                op.attempts += 1
                r = http.post(f"/v0/topics/{TOPIC}", json=body)
                op.statuses.append(r.status_code)
                if r.status_code < 300:
                    out = r.json()
                    op.outcome = "ok"
                    op.first_seq, op.last_seq = out["first_seq"], out["last_seq"]
                    op.deduped = bool(out.get("deduped"))
                    break
                if _throttled(r) and op.attempts < 20:  # not written: sent again, key or not
                    continue
                if r.status_code >= 500:
                    rig.note_5xx(f"append {name}", r)
                if key is None or r.status_code < 500 or op.attempts >= 20:
                    op.outcome = _error_outcome(r) if r.status_code >= 500 else "failed"
                    break
                time.sleep(0.05)  # same key: the server answers the original seqs
            ops.append(op)


def _reader(rig: Rig, index: int, stop: threading.Event, seen: list[tuple[int, str]]) -> None:
    cursor = 0
    with httpx.Client(timeout=60) as http:
        while True:
            url = rig.urls[(index + cursor) % 2]  # alternate servers mid-stream
            r = http.post(
                f"{url}/v0/topics/{TOPIC}/diff",
                json={"from_seq": cursor, "limit": 50, "wait_ms": 300},
            )
            if r.status_code >= 500:
                rig.note_5xx(f"reader {index}", r)
                continue
            assert r.status_code == 200, r.text
            body = r.json()
            seen.extend((rec["$seq"], rec["data"]["id"]) for rec in body["records"])
            cursor = body["next_from_seq"]
            if stop.is_set() and body["caught_up"]:
                return


def _producer(rig: Rig, index: int) -> None:
    pid = f"p{index}"
    with httpx.Client(base_url=rig.urls[index % 2], timeout=60) as http:
        for seq in range(SEQS_PER_PRODUCER):
            for _ in range(20):
                r = http.post(
                    f"/v1/stream/{STREAM}",
                    content=json.dumps([{"p": pid, "s": seq}]),
                    headers={
                        "Content-Type": "application/json",
                        "Producer-Id": pid,
                        "Producer-Epoch": "0",
                        "Producer-Seq": str(seq),
                    },
                )
                if r.status_code < 300:
                    break
                if _throttled(r):  # not written: the same seq again
                    continue
                if r.status_code >= 500:
                    rig.note_5xx(f"producer {pid}", r)
                if r.status_code >= 500 or r.status_code == 408:
                    # 408 append_timeout (protocol: the outcome is unknown): an idempotent
                    # producer re-sends the same seq
                    time.sleep(0.05)
                    continue
                raise AssertionError(f"producer {pid} seq {seq}: {r.status_code} {r.text}")


def _consumer(rig: Rig, index: int, acked: list[int], done: threading.Event) -> None:
    rnd = random.Random(500 + index)
    node = f"c{index}"
    with httpx.Client(base_url=rig.urls[index % 2], timeout=60) as http:
        while not done.is_set():
            r = http.post(f"/v0/topics/{QUEUE}/claim", json={"node": node, "max": 5})
            if r.status_code >= 500:
                rig.note_5xx(f"claim {node}", r)
                continue
            assert r.status_code == 200, r.text
            claimed = r.json()["claimed"]
            if not claimed:
                time.sleep(0.05)
                continue
            nack = [j for j in claimed if rnd.random() < 0.1]
            ack = [j for j in claimed if j not in nack]
            for op, jobs in (("nack", nack), ("ack", ack)):
                if not jobs:
                    continue
                seqs = [j["$seq"] for j in jobs]
                body = {"node": node, "seqs": seqs, "lease_ids": [j["lease_id"] for j in jobs]}
                r = http.post(f"/v0/topics/{QUEUE}/{op}", json=body)
                if r.status_code >= 500:
                    rig.note_5xx(f"{op} {node}", r)
                    continue
                assert r.status_code == 200, r.text
                if op == "ack":
                    skipped = set(r.json().get("skipped", []))
                    acked.extend(s for s in seqs if s not in skipped)


def _notifier(rig: Rig, outcomes: dict[int, str]) -> None:
    """One aviso notify per n, never re-sent (aviso has no idempotency key): each answered
    200 must be stored once, each refused must not be stored."""
    with httpx.Client(base_url=rig.urls[1], timeout=60) as http:
        for n in range(NOTIFICATIONS):
            body = {
                "event_type": "extreme",
                "identifier": {
                    "region": "north",
                    "run_time": "1200",
                    "severity": 3,
                    "anomaly": 1.5,
                },
                "payload": {"n": n},
            }
            r = http.post("/api/v1/notification", json=body)
            if r.status_code == 200:
                outcomes[n] = "ok"
            else:
                rig.note_5xx("notify", r)
                unknown = "may or may not" in r.text
                outcomes[n] = "unknown" if unknown else "failed"


def _flag_publisher(rig: Rig, versions: dict[int, int]) -> None:
    """Publish distinct trees in order, each re-sent until answered (an identical tree
    settles to the version that holds it)."""
    with httpx.Client(base_url=rig.urls[0], timeout=60, headers=FLAG_TOKEN) as http:
        for n in range(FLAG_VERSIONS):
            files = {
                "namespace.toml": 'name = "faults"\n',
                "flags/f.toml": f"default = {n}\n",
            }
            for _ in range(20):
                r = http.put(FLAG_NS, json={"files": files})
                if r.status_code in (200, 201):
                    versions[n] = r.json()["version"]
                    break
                rig.note_5xx("flag publish", r)
                time.sleep(0.05)


def _replayed_notifications(url: str) -> list[int]:
    out: list[int] = []
    with (
        httpx.Client(base_url=url, timeout=60) as http,
        http.stream(
            "POST",
            "/api/v1/replay",
            json={"event_type": "extreme", "identifier": {}, "from_id": "1"},
        ) as r,
    ):
        assert r.status_code == 200
        for event, body in sse_events(r):
            if event == "replay" and "id" in body:
                out.append(body["data"]["payload"]["n"])
            elif event in ("error", "connection-closing") or body.get("type") == "end_of_stream":
                break
    return out


def _read_ids(url: str, topic: str) -> list[tuple[int, str]]:
    """The whole topic, after the faults: a 503 here is the loaded machine (the emulator
    slower than the read timeout), so the read is repeated a few times."""
    out: list[tuple[int, str]] = []
    cursor = 0
    with httpx.Client(timeout=60) as http:
        while True:
            for _ in range(5):
                body = {"from_seq": cursor, "limit": 1000}
                r = http.post(f"{url}/v0/topics/{topic}/diff", json=body)
                if r.status_code != 503:
                    break
            assert r.status_code == 200, r.text
            body = r.json()
            out.extend((rec["$seq"], rec["data"]["id"]) for rec in body["records"])
            cursor = body["next_from_seq"]
            if body["caught_up"]:
                return out


def _forward_lines(rig: Rig) -> str:
    """The servers' router forward / advance lines (HEADWATER_DEBUG_LOGGERS), in time order:
    what each forwarder read, skipped, copied under which key, and where it moved the cursor."""
    lines: list[str] = []
    for s in rig.servers:
        text = Path(s.log_path).read_text(errors="replace")
        lines += [ln for ln in text.splitlines() if "headwater.engine.routers" in ln]
    return "\n".join(sorted(lines)[-400:])


def _setup(url: str) -> None:
    with httpx.Client(base_url=url, timeout=60) as http:
        for path, body in (
            (f"/v0/topics/{TOPIC}", {}),
            (f"/v0/topics/{QUEUE}", {"type": "queue", "lease_ms": 5000, "max_deliveries": 100}),
        ):
            assert http.put(path, json=body).status_code in (200, 201)
        r = http.put(
            f"/v0/routers/{TOPIC}->{COPY}",
            json={"source": TOPIC, "dest": COPY, "guarantee": "exactly_once"},
        )
        assert r.status_code in (200, 201), r.text
        r = http.put(f"/v1/stream/{STREAM}", headers={"Content-Type": "application/json"})
        assert r.status_code in (200, 201), r.text


def _produce_jobs(rig: Rig) -> list[int]:
    seqs: list[int] = []
    with httpx.Client(base_url=rig.urls[0], timeout=60) as http:
        for n in range(JOBS):
            for _ in range(20):
                r = http.post(
                    f"/v0/topics/{QUEUE}",
                    json={"records": [{"data": {"job": n}}], "idempotency_key": f"job-{n}"},
                )
                if r.status_code < 300:
                    seqs.append(r.json()["first_seq"])
                    break
                if not _throttled(r):
                    rig.note_5xx("produce job", r)
    return seqs


def test_exactly_once_outcomes_under_injected_faults(rig: Rig) -> None:
    # GIVEN the topic, queue, stream and router, created through the faults
    _setup(rig.urls[0])
    ops: list[AppendOp] = []
    acked: list[int] = []
    seen: dict[str, list[tuple[int, str]]] = {f"r{i}": [] for i in range(READERS)}
    stop, drained = threading.Event(), threading.Event()

    # WHEN clients append, read, produce and work the queue concurrently
    started = rig.started = time.monotonic()
    jobs = _produce_jobs(rig)
    threads = [rig.thread(_appender, i, ops) for i in range(APPENDERS)]
    threads += [rig.thread(_producer, i) for i in range(PRODUCERS)]
    notified: dict[int, str] = {}
    published: dict[int, int] = {}
    threads += [rig.thread(_notifier, notified), rig.thread(_flag_publisher, published)]
    readers = [rig.thread(_reader, i, stop, seen[f"r{i}"]) for i in range(READERS)]
    consumers = [rig.thread(_consumer, i, acked, drained) for i in range(CONSUMERS)]
    for t in threads + readers + consumers:
        t.start()
    for t in threads:
        t.join(240)
    assert not rig.crashed, rig.crashed
    with httpx.Client(base_url=rig.urls[1], timeout=60) as http:

        def queue_empty() -> bool:
            assert not rig.crashed, rig.crashed
            state = http.get(f"/v0/topics/{QUEUE}", params={"touch": "false"}).json()
            return int(state["count"]) == 0

        try:
            wait_until(queue_empty, 120, "the queue to drain")
        except AssertionError:
            state = http.get(f"/v0/topics/{QUEUE}", params={"touch": "false"}).json()
            raise AssertionError(
                f"queue not drained: {state}; {len(acked)} acks of {len(jobs)} jobs, "
                f"5xx: {rig.fivexx[:5]}"
            ) from None
    drained.set()
    stop.set()
    for t in readers + consumers:
        t.join(120)
    assert not rig.crashed, rig.crashed
    elapsed = time.monotonic() - started
    faults = rig.proxy.stats()
    # (sealing and trimming run under the faults too: the head item, read from the emulator.
    # A trim comes the grace period (30 s) after its seal, and the faults can hold the first
    # seal back past the run's 45 s: the faults stay on until one has happened)
    settings = Settings(resource_prefix=rig.prefix)
    dynamodb = AwsClients.create(settings).dynamodb

    def head_item() -> dict[str, Any]:
        return dynamodb.get_item(
            TableName=settings.table_name(HEADS.logical), Key={"pk": {"S": TOPIC}}
        )["Item"]

    def trimmed() -> bool:
        return int(head_item().get("tt", {"N": "0"})["N"]) > 0

    waited = time.monotonic()
    with contextlib.suppress(AssertionError):
        wait_until(trimmed, 45, "a trim under the faults")
    trim_wait_s = round(time.monotonic() - waited, 1)
    item = head_item()
    trimmed_through = int(item.get("tt", {"N": "0"})["N"])

    # THEN, with the faults off, the whole history holds
    rig.proxy.calm()
    log = _read_ids(rig.urls[0], TOPIC)
    problems = check_appends(ops, log)
    problems += check_reads(seen, log)
    problems += check_acks(jobs, acked)
    with httpx.Client(base_url=rig.urls[1], timeout=60) as http:
        r = http.get(f"/v1/stream/{STREAM}", params={"offset": "-1"})
        assert r.status_code == 200, r.text
        entries = [(e["p"], e["s"]) for e in r.json()]
    problems += check_producer_streams(
        {f"p{i}": SEQS_PER_PRODUCER for i in range(PRODUCERS)}, entries
    )
    # each notification answered 200 is stored once, each refused one not at all
    replayed = _replayed_notifications(rig.urls[0])
    for n, outcome in notified.items():
        times = replayed.count(n)
        if (outcome == "ok" and times != 1) or (outcome == "failed" and times) or times > 1:
            problems.append(f"notification {n} ({outcome}) stored {times} times")
    # every flag tree published once, in order, as consecutive versions
    with httpx.Client(base_url=rig.urls[1], timeout=60, headers=FLAG_TOKEN) as http:
        listed = http.get(f"{FLAG_NS}/versions").json()["versions"]
    got = [v["version"] for v in listed]
    want = list(range(1, FLAG_VERSIONS + 1))
    if sorted(got) != want or [published[n] for n in range(FLAG_VERSIONS)] != want:
        problems.append(f"flag versions {got} (answered {published})")
    # the exactly-once router copies each source record once, in order
    wait_until(lambda: len(_read_ids(rig.urls[1], COPY)) >= len(log), 60, "the router to catch up")
    copied = _read_ids(rig.urls[1], COPY)
    copy = [rid for _, rid in copied]
    if copy != [rid for _, rid in log]:
        dups = [(s, rid) for s, rid in copied if copy.count(rid) > 1]
        problems.append(
            f"router copy differs: {len(copy)} records vs {len(log)} in the source; "
            f"copied twice: {dups[:12]}\n" + _forward_lines(rig)
        )

    acknowledged = sum(1 for op in ops if op.outcome == "ok")
    summary = {
        "operations": len(ops)
        + len(jobs)
        + PRODUCERS * SEQS_PER_PRODUCER
        + NOTIFICATIONS
        + FLAG_VERSIONS,
        "appends_acknowledged": acknowledged,
        "records": len(log),
        "faults": {k: faults[k] for k in ("drop", "timeout", "error", "throttle", "slow")},
        "storage_requests": faults["requests"],
        **tally(ops, log),
        "acks_misreported": len(check_acks(jobs, acked)),
        "5xx": len(rig.fivexx),
        "problems": len(problems),
        "trimmed_through": trimmed_through,
        "sealed_through": int(item.get("st", {"N": "0"})["N"]),
        "trim_waited_s": trim_wait_s,
        "seconds": round(elapsed, 1),
    }
    print("fault run:", json.dumps(summary))
    assert sum(summary["faults"].values()) > 50, f"too few faults injected: {faults}"
    assert not problems, "\n".join(problems[:20])
    assert not rig.fivexx, "\n".join(rig.fivexx[:10])
    assert acknowledged == len(ops)
    assert trimmed_through > 0, "nothing was trimmed during the faults"
