"""/api/v1 notifications across OS processes (stand-ins for Lambda instances): writers notify
the same event type through two server processes at once while a watch held by one of them
delivers live. Nothing is lost, duplicated or reordered: the seqs are 1..N without a gap,
each writer's notifications keep the order it sent them in, and the live watch, a replay
through the other process and a replay from the middle agree on one order."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServerProcess, sse_events

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

WRITERS = 6
PER_WRITER = 25
TOTAL = WRITERS * PER_WRITER
EVENT_TYPE = "extreme"  # the example schema: watch fields all optional


def notification_ids(events: Iterator[tuple[str, dict[str, Any]]], kind: str, n: int) -> list:
    """(id, payload) of the first `n` notification frames of `kind`."""
    out: list[tuple[str, Any]] = []
    for event, body in events:
        if event == kind and "id" in body:
            out.append((body["id"], body["data"]["payload"]))
            if len(out) == n:
                break
        elif event == "error":
            raise AssertionError(f"error frame: {body}")
    return out


def test_concurrent_notifies_through_two_processes_are_delivered_once_in_one_order(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2)
    watched: list[tuple[str, Any]] = []
    ready = threading.Event()
    failures: list[BaseException] = []

    def watch() -> None:
        # GIVEN a live watch held by process B (from now on, every notification)
        try:
            with (
                httpx.Client(base_url=b.url, timeout=60) as client,
                client.stream(
                    "POST", "/api/v1/watch", json={"event_type": EVENT_TYPE, "identifier": {}}
                ) as r,
            ):
                assert r.status_code == 200
                events = sse_events(r)
                first = next(events)
                assert first[1]["type"] == "connection_established", first
                ready.set()
                watched.extend(notification_ids(events, "live-notification", TOTAL))
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
            ready.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert ready.wait(30) and not failures, failures

    def write(w: int) -> None:
        # WHEN six writers notify at once, alternating between the two processes
        try:
            clients = [httpx.Client(base_url=s.url, timeout=30) for s in (a, b)]
            for n in range(PER_WRITER):
                body = {
                    "event_type": EVENT_TYPE,
                    "identifier": {
                        "region": ["north", "south"][w % 2],
                        "run_time": "1200",
                        "severity": 1 + w % 7,
                        "anomaly": 12.5,
                    },
                    "payload": {"w": w, "n": n},
                }
                r = clients[(w + n) % 2].post("/api/v1/notification", json=body)
                assert r.status_code == 200, r.text
            for c in clients:
                c.close()
        except BaseException as exc:
            failures.append(exc)

    writers = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(120)
    assert not failures, failures

    # THEN a replay through process A has seqs 1..N, each notification once, and every
    # writer's notifications in the order that writer sent them
    with httpx.Client(base_url=a.url, timeout=60) as client:
        with client.stream(
            "POST",
            "/api/v1/replay",
            json={"event_type": EVENT_TYPE, "identifier": {}, "from_id": "1"},
        ) as r:
            assert r.status_code == 200
            replayed = notification_ids(sse_events(r), "replay", TOTAL)
        assert [i for i, _ in replayed] == [f"{EVENT_TYPE}@{s}" for s in range(1, TOTAL + 1)]
        sent = sorted((p["w"], p["n"]) for _, p in replayed)
        assert sent == [(w, n) for w in range(WRITERS) for n in range(PER_WRITER)]
        for w in range(WRITERS):
            assert [p["n"] for _, p in replayed if p["w"] == w] == list(range(PER_WRITER))

        # AND the live watch in process B saw exactly the same sequence
        watcher.join(60)
        assert not failures, failures
        assert watched == replayed

        # AND a replay from the middle starts exactly there
        middle = TOTAL // 2
        with client.stream(
            "POST",
            "/api/v1/replay",
            json={"event_type": EVENT_TYPE, "identifier": {}, "from_id": str(middle)},
        ) as r:
            tail = notification_ids(sse_events(r), "replay", TOTAL - middle + 1)
        assert tail == replayed[middle - 1 :]
