"""Producer and worker processes for tests/e2e/test_queue_stress.py (spec §10 work queues).

Run as `python -m tests.e2e.queue_worker <producer|worker> <json args>`. Every HTTP exchange
is appended to a per-process JSONL event log (flushed line by line, so an os._exit loses
nothing already written); the test reads these logs afterwards and checks the invariants.

Times: `sent`/`recv` are this process's wall clock in ms (time.time_ns() // 1e6, the same
clock and rounding the servers use for deadlines and $ts), taken just before the request
is sent and just after its response arrived."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx

CRASH_EXIT = 17  # a worker's deliberate abrupt exit while holding leases
TRANSPORT_EXIT = 3  # a request failed below HTTP: the lease state is unknown, give up
EXTEND_MS = 4_000  # lease_ms of an extend: the ack then comes after the original deadline


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Recorder:
    def __init__(self, path: str) -> None:
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as we do

    def write(self, event: dict[str, Any]) -> None:
        self._f.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._f.flush()


class Api:
    def __init__(self, rec: Recorder, who: str) -> None:
        self.rec = rec
        self.who = who
        self.http = httpx.Client(timeout=httpx.Timeout(90, connect=30))

    def post(self, url: str, path: str, body: dict[str, Any]) -> tuple[int, Any, int, int]:
        """One POST: (status, json body, sent ms, recv ms). Any non-200 is recorded."""
        sent = now_ms()
        try:
            r = self.http.post(url + path, json=body)
        except httpx.HTTPError as exc:
            self.rec.write(
                {
                    "ev": "transport_error",
                    "who": self.who,
                    "url": url,
                    "path": path,
                    "body": body,
                    "sent": sent,
                    "recv": now_ms(),
                    "error": repr(exc),
                }
            )
            os._exit(TRANSPORT_EXIT)
        recv = now_ms()
        try:
            out = r.json()
        except ValueError:
            out = None
        if r.status_code != 200:
            self.rec.write(
                {
                    "ev": "http_status",
                    "who": self.who,
                    "url": url,
                    "path": path,
                    "body": body,
                    "status": r.status_code,
                    "text": r.text[:2000],
                    "sent": sent,
                    "recv": recv,
                }
            )
        return r.status_code, out, sent, recv


# --- producer --------------------------------------------------------------------------------
def producer(a: dict[str, Any]) -> None:
    rng = random.Random(a["seed"])
    rec = Recorder(a["log"])
    api = Api(rec, f"p{a['index']}")
    urls: list[str] = a["urls"]
    made = k = 0
    while made < a["jobs"]:
        n = min(rng.randint(1, 5), a["jobs"] - made)
        ids = [f"p{a['index']}-{made + j}" for j in range(n)]
        poison = [rng.random() < a["poison_rate"] for _ in range(n)]
        body = {
            "records": [{"data": {"id": i, "poison": p}} for i, p in zip(ids, poison, strict=True)]
        }
        url = urls[k % len(urls)]  # half the appends to each server process
        k += 1
        sent = now_ms()
        r = api.http.post(f"{url}/v0/topics/{a['topic']}", json=body)
        if r.status_code not in (200, 201):
            rec.write(
                {
                    "ev": "http_status",
                    "who": api.who,
                    "url": url,
                    "status": r.status_code,
                    "text": r.text[:2000],
                }
            )
            sys.exit(4)
        rec.write(
            {
                "ev": "produce",
                "url": url,
                "ids": ids,
                "poison": poison,
                "seqs": r.json()["seqs"],
                "sent": sent,
                "recv": now_ms(),
            }
        )
        made += n
        time.sleep(rng.uniform(0.02, 0.12))


# --- worker ----------------------------------------------------------------------------------
class Worker:
    def __init__(self, a: dict[str, Any]) -> None:
        self.a = a
        self.rng = random.Random(a["seed"])
        self.node = f"w{a['index']}.{a['gen']}-{os.getpid()}"
        self.rec = Recorder(a["log"])
        self.api = Api(self.rec, self.node)
        self.urls: list[str] = a["urls"]
        self.topic: str = a["topic"]
        self.turn = self.rng.randrange(len(self.urls))

    def url(self) -> str:
        self.turn += 1
        return self.urls[self.turn % len(self.urls)]

    def run(self) -> None:
        claims = 0
        stop = Path(self.a["stop"])
        self.rec.write({"ev": "start", "node": self.node, "crash_after": self.a["crash_after"]})
        while not stop.exists():
            url = self.url()
            body: dict[str, Any] = {"node": self.node, "max": self.rng.randint(1, 8)}
            lease_ms = self.a["lease_ms"]
            if self.rng.random() < 0.3:
                lease_ms = self.rng.randint(1_000, 2_500)
                body["lease_ms"] = lease_ms
            status, out, sent, recv = self.api.post(url, f"/v0/topics/{self.topic}/claim", body)
            if status != 200:
                time.sleep(0.2)
                continue
            jobs = [
                {
                    "seq": j["$seq"],
                    "lease_id": j["lease_id"],
                    "deadline": j["deadline"],
                    "deliveries": j["deliveries"],
                    "id": j["data"]["id"],
                    "poison": j["data"]["poison"],
                }
                for j in out["claimed"]
            ]
            self.rec.write(
                {
                    "ev": "claim",
                    "node": self.node,
                    "url": url,
                    "max": body["max"],
                    "lease_ms": lease_ms,
                    "sent": sent,
                    "recv": recv,
                    "jobs": jobs,
                    "count": out["count"],
                    "ready": out["ready"],
                }
            )
            if not jobs:
                time.sleep(self.rng.uniform(0.05, 0.15))
                continue
            claims += 1
            if 0 <= self.a["crash_after"] <= claims:
                # Die abruptly while holding every job just claimed: their leases must lapse.
                self.rec.write({"ev": "crash", "node": self.node, "held": jobs, "at": now_ms()})
                os._exit(CRASH_EXIT)
            self.handle(jobs)

    def op(
        self, verb: str, jobs: list[dict[str, Any]], kind: str = "", **extra: Any
    ) -> dict[str, Any] | None:
        """ack / nack / extend `jobs` on a random server; fenced with lease ids half the time.
        Records (and returns) the outcome per seq."""
        if not jobs:
            return None
        url = self.urls[self.rng.randrange(len(self.urls))]
        seqs = [j["seq"] for j in jobs]
        ids = [j["lease_id"] for j in jobs]
        fenced = self.rng.random() < 0.5
        body: dict[str, Any] = {"node": self.node, "seqs": seqs, **extra}
        if fenced:
            body["lease_ids"] = ids
        status, out, sent, recv = self.api.post(url, f"/v0/topics/{self.topic}/{verb}", body)
        event: dict[str, Any] = {
            "ev": verb,
            "node": self.node,
            "url": url,
            "seqs": seqs,
            "lease_ids": ids,
            "fenced": fenced,
            "sent": sent,
            "recv": recv,
            "status": status,
            "kind": kind,
            **extra,
        }
        if status == 200:
            done = {"ack": "acked", "nack": "nacked", "extend": "extended"}[verb]
            event.update(done=out[done], skipped=out["skipped"])
            if verb == "extend":
                event["deadlines"] = out["deadlines"]
        self.rec.write(event)
        return event if status == 200 else None

    def handle(self, jobs: list[dict[str, Any]]) -> None:
        rng = self.rng
        time.sleep(rng.uniform(0, 0.02))  # "processing"
        acts: dict[str, list[dict[str, Any]]] = {}
        for job in jobs:
            r = rng.random()
            if job["poison"]:
                # A poison job is never acked: it fails every delivery until dead-lettered.
                act = "nack" if r < 0.4 else "nack_delay" if r < 0.7 else "forget"
            elif r < 0.62:
                act = "ack"
            elif r < 0.70:
                act = "nack"
            elif r < 0.76:
                act = "nack_delay"
            elif r < 0.84:
                act = "extend"
            elif r < 0.90:
                act = "forget"
            else:
                act = "late_ack"
            acts.setdefault(act, []).append(job)

        ext = self.op("extend", acts.get("extend", []), lease_ms=EXTEND_MS)
        self.op("nack", acts.get("nack", []), delay_ms=0)
        self.op("nack", acts.get("nack_delay", []), delay_ms=rng.randint(20, 300))
        if acts.get("forget"):
            # A worker that silently drops jobs (a crash in all but name): no ack, no nack.
            self.rec.write(
                {"ev": "forget", "node": self.node, "seqs": [j["seq"] for j in acts["forget"]]}
            )
        acked = self.op("ack", acts.get("ack", []))
        if acked is not None and acked["done"] and rng.random() < 0.15:
            # The same ack again, maybe to the other server: a no-op, everything skipped.
            again = [j for j in acts["ack"] if j["seq"] not in set(acked["skipped"])]
            self.op("ack", again, kind="dup")

        # Then the slow ones, in deadline order: acks after the extended jobs' original
        # deadline (the extension must keep them held), and acks just past the deadline of
        # jobs never extended (at-least-once: skipped if re-leased meanwhile, else acked).
        later: list[tuple[int, str, dict[str, Any]]] = []
        if ext is not None:
            extended = {int(s) for s in ext["deadlines"]}
            for j in acts["extend"]:
                if j["seq"] in extended:
                    later.append((j["deadline"] + rng.randint(100, 300), "after_extend", j))
                else:
                    self.rec.write({"ev": "extend_lost", "node": self.node, "seq": j["seq"]})
        for j in acts.get("late_ack", []):
            later.append((j["deadline"] + rng.randint(0, 250), "late", j))
        for at, kind, j in sorted(later, key=lambda t: t[0]):
            wait = (at - now_ms()) / 1000
            if wait > 0:
                time.sleep(wait)
            self.op("ack", [j], kind=kind)


def main() -> None:
    role, raw = sys.argv[1], sys.argv[2]
    args = json.loads(raw)
    if role == "producer":
        producer(args)
    elif role == "worker":
        Worker(args).run()
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
