"""kill -9 of a server between its reservation and its frame write (docs/storage.md "The
sequencer"): the seqs it reserved are a slot nobody will write. Real processes, a real
emulator, a fault proxy that holds the server's frame PutItem (it never reaches storage)
while the test kills the server.

Then: a reader that follows the topic on another server is not stuck behind the open slot
(it waits at most the hole timeout, fills it and reads on), a writer that appended after the
dead one is acknowledged and read in order, the dead writer's client retries with its
idempotency key and is appended once, and the whole history holds every acknowledged record
exactly once, nothing else."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Cluster
from tests.faults.harness import FaultProxyProcess, wait_until
from tests.faults.history import AppendOp, check_appends, check_reads

pytestmark = [pytest.mark.serial, pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "seq-crash"
HOLE_MS = 1000
SERVER_ENV = {"HEADWATER_HOLE_TIMEOUT_MS": str(HOLE_MS), "HEADWATER_TIERING_INTERVAL_MS": "0"}


def _append(url: str, rid: str, key: str | None = None, timeout: float = 30) -> httpx.Response:
    body: dict[str, Any] = {"records": [{"data": {"id": rid}}]}
    if key is not None:
        body["idempotency_key"] = key
    return httpx.post(f"{url}/v0/topics/{TOPIC}", json=body, timeout=timeout)


def _log(url: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    cursor = 0
    while True:
        body = httpx.post(
            f"{url}/v0/topics/{TOPIC}/diff", json={"from_seq": cursor, "limit": 1000}, timeout=30
        ).json()
        out += [(r["$seq"], r["data"]["id"]) for r in body["records"]]
        if body["next_from_seq"] == cursor or body["caught_up"]:
            return out
        cursor = body["next_from_seq"]


def test_a_writer_killed_between_reservation_and_frame_write(
    cluster: Cluster, tmp_path: object
) -> None:
    with FaultProxyProcess(cluster.emulator.url, seed=3) as proxy:
        # GIVEN server A reaching DynamoDB through the proxy, server B directly
        a = cluster.start_server(str(tmp_path), AWS_ENDPOINT_URL_DYNAMODB=proxy.url, **SERVER_ENV)
        b = cluster.start_server(str(tmp_path), **SERVER_ENV)
        ops: list[AppendOp] = []
        for i in range(3):
            r = _append(b.url, f"r{i}")
            assert r.status_code in (200, 201), r.text
            ops.append(
                AppendOp("b", [f"r{i}"], None, 1, "ok", r.json()["first_seq"], r.json()["last_seq"])
            )
        # AND a reader following the topic on B (long-polls from its cursor)
        seen: list[tuple[int, str]] = []
        failures: list[BaseException] = []
        stop = threading.Event()

        def follow() -> None:
            try:
                _follow()
            except BaseException as exc:  # surfaced by the waits below
                failures.append(exc)

        def _follow() -> None:
            cursor = 0
            while not stop.is_set():
                body = httpx.post(
                    f"{b.url}/v0/topics/{TOPIC}/diff",
                    json={"from_seq": cursor, "wait_ms": 20_000},
                    timeout=60,
                ).json()
                seen.extend((rec["$seq"], rec["data"]["id"]) for rec in body["records"])
                cursor = body["next_from_seq"]

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        wait_until(lambda: len(seen) == 3 or failures, 30, "the reader saw the first records")
        assert not failures, failures

        # WHEN A's next frame write is held on its way to storage: A has reserved its seq
        proxy.set(stall=1.0, only=["PutItem", "TransactWriteItems"])
        dead: dict[str, Any] = {}

        def doomed() -> None:
            try:
                dead["resp"] = _append(a.url, "lost", key="k-lost", timeout=60)
            except httpx.HTTPError as exc:
                dead["error"] = exc

        t = threading.Thread(target=doomed, daemon=True)
        t.start()
        wait_until(lambda: proxy.stats().get("stall", 0) >= 1, 30, "A's frame put is held")
        # AND A is killed before its frame reaches storage
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait(timeout=10)
        t.join(timeout=30)
        assert "resp" not in dead, "the killed server answered"
        proxy.calm()
        # AND another writer appends after the dead one's seq
        r = _append(b.url, "after")
        assert r.status_code == 200, r.text
        after = r.json()
        ops.append(AppendOp("b", ["after"], None, 1, "ok", after["first_seq"], after["last_seq"]))
        assert after["first_seq"] == 5  # 4 is the dead writer's
        # THEN the reader gets it: it waited for seq 4 at most the hole timeout (its long-poll
        # is 20 s: without the fill it would still be waiting), then filled it and read on
        started = time.monotonic()
        wait_until(lambda: any(rid == "after" for _, rid in seen), 15, "the reader passed the hole")
        assert time.monotonic() - started < 15
        # AND the dead writer's client retries with its key on B: not a duplicate (nothing of
        # it applied), appended once
        r = _append(b.url, "lost", key="k-lost")
        assert r.status_code == 200, r.text
        retry = r.json()
        assert retry["deduped"] is False and retry["first_seq"] == 6
        ops.append(AppendOp("a", ["lost"], "k-lost", 2, "ok", 6, 6))
        # AND A, restarted, appends as before
        a2 = cluster.start_server(str(tmp_path), **SERVER_ENV)
        r = _append(a2.url, "again")
        assert r.status_code == 200, r.text
        ops.append(
            AppendOp("a", ["again"], None, 1, "ok", r.json()["first_seq"], r.json()["last_seq"])
        )
        wait_until(lambda: any(rid == "again" for _, rid in seen), 30, "the reader saw the rest")
        stop.set()

        # the whole history: every acknowledged record once, at its seq; seq 4 holds nothing
        log = _log(b.url)
        assert 4 not in [s for s, _ in log]
        assert check_appends(ops, log) == []
        assert check_reads({"reader": seen}, log) == []
        head = httpx.get(f"{b.url}/v0/topics/{TOPIC}", timeout=10).json()
        assert head["head_seq"] == 7
