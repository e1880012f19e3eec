"""Acceptance (spec §10 work queues): 4 producer and 8 worker OS processes against two server
processes sharing one emulator. Workers claim from both servers and randomly ack, nack (now
or after a delay), extend then ack after the original deadline, ack late, silently forget
jobs, or die abruptly (os._exit) while holding leases and are replaced under a new node name.
Some jobs are poison (never acked) so they are dead-lettered after max_deliveries.

At the end, from the per-process event logs:
- every produced job was acked exactly once or dead-lettered (never both, never neither);
- no two leases of a job ever overlapped: each lease was granted only after the previous one
  ended (its deadline, or its nack + delay_ms), nothing was leased after an ack, and no
  claim response leased the same job twice;
- an ack that returned before its lease's deadline (extended or not) succeeded;
- the dead-letter topic holds exactly the dead-lettered jobs, with their data and the
  $dead_letter_* meta; the queue ends empty (count 0, ready 0, in_flight 0);
- no response was a 5xx (or any other non-200), and the servers logged no errors.

The worker and producer code lives in tests/e2e/queue_worker.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater.dev.emulator import die_with_parent, stop_process
from tests.e2e.conftest import Cluster, ServerProcess
from tests.e2e.queue_worker import CRASH_EXIT, EXTEND_MS

pytestmark = [pytest.mark.serial, pytest.mark.e2e, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
QUEUE, DEAD = "jobs", "jobs-dead"
PRODUCERS, JOBS_PER_PRODUCER = 4, 150
WORKERS = 8
CRASHY_WORKERS = 4  # worker slots 0..3 die abruptly (twice each), 4..7 never do
CRASH_GENERATIONS = 2
LEASE_MS = 1_500
MAX_DELIVERIES = 4
POISON_RATE = 0.03
RUN_BUDGET_S = 300  # generous: the machine is shared; a normal run drains in about a minute


@dataclass
class Proc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    out: Path


@dataclass
class Holding:
    """One lease of one job, as granted by a claim and changed by the holder's own ops."""

    seq: int
    lease_id: str
    node: str
    grant: int  # server clock at the grant: deadline - effective lease_ms
    deadline: int  # latest deadline (an extend moves it)
    deliveries: int
    claim: dict[str, Any]
    nack: tuple[int, int] | None = None  # (request sent, delay_ms) of a successful nack
    acked: dict[str, Any] | None = None  # the event of the successful ack
    ops: list[dict[str, Any]] = field(default_factory=list)

    @property
    def end(self) -> int:
        """A lower bound on when the job could be leased again. A nack is committed after
        its request was sent and makes the job claimable at commit time + delay_ms, so
        sent + delay_ms bounds it from below; otherwise the lease ends at its deadline (a
        claim pass re-leases only when due <= now, on the same wall clock)."""
        if self.nack is not None:
            return self.nack[0] + self.nack[1]
        return self.deadline


class Run:
    def __init__(self, cluster: Cluster, servers: list[ServerProcess], tmp: Path) -> None:
        self.cluster = cluster
        self.servers = servers
        self.urls = [s.url for s in servers]
        self.tmp = tmp
        self.stop = tmp / "stop"
        self.producers: list[Proc] = []
        self.workers: dict[int, Proc] = {}
        self.generation: dict[int, int] = {}
        self.all: list[Proc] = []
        self.crashes = 0

    def spawn(self, role: str, name: str, args: dict[str, Any]) -> Proc:
        log = self.tmp / f"{name}.jsonl"
        out = self.tmp / f"{name}.out"
        args = {**args, "log": str(log), "urls": self.urls, "topic": QUEUE}
        with open(out, "wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.queue_worker", role, json.dumps(args)],
                cwd=REPO,
                env=self.cluster.env(),
                stdout=fh,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        p = Proc(name, proc, log, out)
        self.all.append(p)
        return p

    def spawn_worker(self, index: int) -> None:
        gen = self.generation.get(index, -1) + 1
        self.generation[index] = gen
        crash_after = -1
        if index < CRASHY_WORKERS and gen < CRASH_GENERATIONS:
            crash_after = 3 + (7 * index + 5 * gen) % 12  # after 3..14 non-empty claims
        self.workers[index] = self.spawn(
            "worker",
            f"w{index}.{gen}",
            {
                "index": index,
                "gen": gen,
                "seed": 7_000 + 100 * index + gen,
                "lease_ms": LEASE_MS,
                "stop": str(self.stop),
                "crash_after": crash_after,
            },
        )

    def tail(self, p: Proc) -> str:
        text = p.out.read_text(errors="replace") if p.out.exists() else ""
        events = p.log.read_text().splitlines()[-5:] if p.log.exists() else []
        return f"--- {p.name} output:\n{text[-3000:]}\n--- last events:\n" + "\n".join(events)

    def server_problems(self) -> list[str]:
        out = []
        for s in self.servers:
            for line in Path(s.log_path).read_text(errors="replace").splitlines():
                if "auth is DISABLED" in line:
                    continue
                if any(w in line for w in (" ERROR ", " WARNING ", "Traceback", "CRITICAL")):
                    out.append(f"{s.url}: {line}")
        return out

    def queue_state(self, url: str) -> dict[str, Any]:
        r = httpx.get(f"{url}/v0/topics/{QUEUE}", params={"touch": "false"}, timeout=60)
        assert r.status_code == 200, r.text
        return dict(r.json())


def _put(url: str, topic: str, body: dict[str, Any]) -> None:
    r = httpx.put(f"{url}/v0/topics/{topic}", json=body, timeout=60)
    assert r.status_code == 201, r.text


def _read_all(url: str, topic: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    cursor = 0
    with httpx.Client(timeout=60) as http:
        while True:
            r = http.post(f"{url}/v0/topics/{topic}/diff", json={"from_seq": cursor, "limit": 1000})
            assert r.status_code == 200, r.text
            body = r.json()
            records.extend(body["records"])
            cursor = body["next_from_seq"]
            if body["caught_up"]:
                return records


def _events(paths: list[Path]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in paths:
        if p.exists():
            out.extend(json.loads(line) for line in p.read_text().splitlines() if line)
    return out


@pytest.fixture
def run(
    cluster: Cluster,
    start_servers: Callable[..., list[ServerProcess]],
    tmp_path: Path,
) -> Iterator[Run]:
    servers = start_servers(2)
    r = Run(cluster, servers, tmp_path)
    try:
        yield r
    finally:
        r.stop.touch()
        for p in r.all:
            stop_process(p.proc, grace_s=5)


def _drive(run: Run) -> float:
    """Start everything, replace crashed workers, stop once the queue is drained. Returns
    the wall time from the first producer to the drained queue."""
    _put(run.urls[0], DEAD, {})
    _put(
        run.urls[1],
        QUEUE,
        {
            "type": "queue",
            "lease_ms": LEASE_MS,
            "max_deliveries": MAX_DELIVERIES,
            "dead_letter": DEAD,
        },
    )
    started = time.monotonic()
    for i in range(PRODUCERS):
        run.producers.append(
            run.spawn(
                "producer",
                f"p{i}",
                {
                    "index": i,
                    "seed": 1_000 + i,
                    "jobs": JOBS_PER_PRODUCER,
                    "poison_rate": POISON_RATE,
                },
            )
        )
    for i in range(WORKERS):
        run.spawn_worker(i)

    deadline = started + RUN_BUDGET_S
    state: dict[str, Any] = {}
    while True:
        for index, w in list(run.workers.items()):
            rc = w.proc.poll()
            if rc is None:
                continue
            assert rc == CRASH_EXIT, f"worker {w.name} exited with {rc}\n{run.tail(w)}"
            run.crashes += 1
            run.spawn_worker(index)  # the replacement claims under a new node name
        for p in run.producers:
            rc = p.proc.poll()
            assert rc in (None, 0), f"producer {p.name} exited with {rc}\n{run.tail(p)}"
        if all(p.proc.poll() == 0 for p in run.producers):
            state = run.queue_state(run.urls[0])
            if state["count"] == 0 and run.queue_state(run.urls[1])["count"] == 0:
                break
        assert time.monotonic() < deadline, (
            f"queue not drained after {RUN_BUDGET_S} s: {state}\n"
            + "\n".join(run.server_problems()[-20:])
        )
        time.sleep(0.25)
    drained = time.monotonic() - started
    run.stop.touch()
    for w in run.workers.values():
        try:
            rc = w.proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {w.name} did not stop\n{run.tail(w)}")
        assert rc == 0, f"worker {w.name} exited with {rc}\n{run.tail(w)}"
    return drained


def test_queue_stress_many_processes_ack_once_or_dead_letter_no_overlap(run: Run) -> None:
    drained = _drive(run)
    events = _events([p.log for p in run.all])
    problems: list[str] = []

    def timeline(seq: int) -> str:
        rows = []
        for e in events:
            seqs = e.get("seqs") or [j["seq"] for j in e.get("jobs", e.get("held", []))]
            seqs = seqs or [e.get("seq")]
            if seq in seqs:
                row = {k: v for k, v in e.items() if k not in ("jobs", "held", "ids", "poison")}
                if "jobs" in e or "held" in e:
                    row["job"] = [j for j in e.get("jobs") or e["held"] if j["seq"] == seq]
                rows.append(row)
        rows.sort(key=lambda r: r.get("sent", r.get("at", 0)))
        return f"seq {seq}:\n" + "\n".join("  " + json.dumps(r) for r in rows)

    # --- no 5xx (nor any other non-200), no transport errors, no server errors ----------
    bad = [e for e in events if e["ev"] in ("http_status", "transport_error")]
    fives = [e for e in bad if e.get("status", 0) >= 500]
    assert not fives, f"{len(fives)} 5xx responses, e.g. {fives[:5]}"
    assert not bad, f"{len(bad)} failed requests, e.g. {bad[:5]}"

    # --- what was produced ---------------------------------------------------------------
    produced: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["ev"] == "produce":
            for seq, id_, poison in zip(e["seqs"], e["ids"], e["poison"], strict=True):
                assert seq not in produced
                produced[seq] = {"id": id_, "poison": poison}
    assert len(produced) == PRODUCERS * JOBS_PER_PRODUCER
    assert len({d["id"] for d in produced.values()}) == len(produced)
    poison = {s for s, d in produced.items() if d["poison"]}

    # --- every lease, from the claims ----------------------------------------------------
    leases: dict[str, Holding] = {}
    stale_on_arrival = 0  # leases whose deadline had passed before the claim response came
    by_seq: dict[int, list[Holding]] = defaultdict(list)
    for e in events:
        if e["ev"] != "claim":
            continue
        seqs = [j["seq"] for j in e["jobs"]]
        if len(set(seqs)) != len(seqs):
            # One response leasing a job twice: the first lease was already superseded (and
            # the job re-delivered) before the worker even saw it.
            twice = sorted({s for s in seqs if seqs.count(s) > 1})
            problems.append(
                f"seq {twice[0]}: one claim by {e['node']} returned seqs {twice} twice "
                f"(round trip {e['sent']}..{e['recv']})"
            )
        stale_on_arrival += sum(j["deadline"] <= e["recv"] for j in e["jobs"])
        for j in e["jobs"]:
            h = Holding(
                j["seq"],
                j["lease_id"],
                e["node"],
                j["deadline"] - e["lease_ms"],
                j["deadline"],
                j["deliveries"],
                e,
            )
            assert h.lease_id not in leases, f"lease id {h.lease_id} handed out twice"
            leases[h.lease_id] = h
            by_seq[h.seq].append(h)
            if produced.get(h.seq) != {"id": j["id"], "poison": j["poison"]}:
                problems.append(
                    f"seq {h.seq} claimed with data {j} but produced as {produced.get(h.seq)}"
                )
            # The server's grant time lies within the claim's round trip (one machine clock,
            # both sides truncate to the ms): this validates deriving it from the deadline.
            if not e["sent"] <= h.grant <= e["recv"]:
                problems.append(
                    f"seq {h.seq} lease {h.lease_id}: grant {h.grant} outside the claim round "
                    f"trip [{e['sent']}, {e['recv']}]"
                )

    # --- the holders' ops, applied to their leases ----------------------------------------
    acks: dict[int, list[Holding]] = defaultdict(list)
    after_extend_ok = late_acks = dup_acks = delayed_nacks = 0
    for e in sorted(
        (e for e in events if e["ev"] in ("ack", "nack", "extend")), key=lambda e: e["sent"]
    ):
        skipped = set(e["skipped"])
        if e["done"] != len(set(e["seqs"]) - skipped):
            problems.append(
                f"{e['ev']} reports {e['done']} done but skipped {skipped} of {e['seqs']}"
            )
        first: dict[int, str] = {}
        for seq, lid in zip(e["seqs"], e["lease_ids"], strict=True):
            first.setdefault(seq, lid)  # the server ignores repeats of a seq in one request
        for seq, lid in first.items():
            if not e["fenced"]:
                # Matched by node: the server acts on this node's latest lease of the seq.
                lid = max(
                    (
                        h
                        for h in by_seq[seq]
                        if h.node == e["node"] and h.claim["recv"] <= e["sent"]
                    ),
                    key=lambda h: h.grant,
                ).lease_id
            h = leases[lid]
            h.ops.append(e)
            ok = seq not in skipped
            if e["ev"] == "extend" and ok:
                new = e["deadlines"][str(seq)]
                if not e["sent"] + EXTEND_MS <= new <= e["recv"] + EXTEND_MS:
                    problems.append(
                        f"seq {seq}: extended deadline {new} not now + {EXTEND_MS} in "
                        f"[{e['sent']}, {e['recv']}]"
                    )
                h.deadline = new
            elif e["ev"] == "nack" and ok:
                h.nack = (e["sent"], e["delay_ms"])
                delayed_nacks += e["delay_ms"] > 0
            elif e["ev"] == "ack":
                if e["kind"] == "dup":
                    dup_acks += 1
                    if ok:
                        problems.append(f"seq {seq}: a repeated ack succeeded again")
                if ok:
                    h.acked = e
                    acks[seq].append(h)
                    after_extend_ok += e["kind"] == "after_extend"
                    late_acks += e["kind"] == "late"
                elif h.acked is None and h.nack is None and e["recv"] < h.deadline:
                    # The ack committed before its response came back, so before the
                    # deadline: no one else can have been leased the job yet.
                    problems.append(
                        f"seq {seq}: ack by {e['node']} of lease {lid} skipped although it "
                        f"returned at {e['recv']}, before the lease deadline {h.deadline}"
                    )

    # --- acked exactly once ----------------------------------------------------------------
    acked = set(acks)
    for seq, hs in acks.items():
        if len(hs) > 1:
            problems.append(f"seq {seq} acked {len(hs)} times: {[h.lease_id for h in hs]}")
    if acked & poison:
        problems.append(f"poison jobs acked: {sorted(acked & poison)}")

    # --- leases never overlap; nothing leased after an ack --------------------------------
    for seq, hs in by_seq.items():
        hs.sort(key=lambda h: (h.grant, h.deliveries))
        if hs[0].deliveries != 1:
            problems.append(f"seq {seq}: first lease has deliveries {hs[0].deliveries}")
        for a, b in pairwise(hs):
            if b.deliveries != a.deliveries + 1:
                problems.append(f"seq {seq}: deliveries {a.deliveries} then {b.deliveries}")
            if a.acked is not None:
                problems.append(
                    f"seq {seq}: leased to {b.node} ({b.lease_id}) after the ack of {a.lease_id}"
                )
            # Zero tolerance: grant, deadline and nack times all come from the one machine
            # wall clock (servers and workers alike), truncated to the ms the same way, and
            # a claim pass reads its clock after it read the lease it re-leases.
            if b.grant < a.end:
                problems.append(
                    f"seq {seq}: OVERLAP lease {b.lease_id} ({b.node}) granted at {b.grant}, "
                    f"{a.end - b.grant} ms before lease {a.lease_id} ({a.node}) ended at "
                    f"{a.end} (deadline {a.deadline}, nack {a.nack})"
                )

    # --- the dead letters ----------------------------------------------------------------
    dl_records = _read_all(run.urls[0], DEAD)
    assert _read_all(run.urls[1], DEAD) == dl_records
    dead: set[int] = set()
    for rec in dl_records:
        meta = rec.get("meta") or {}
        src = int(meta.get("$dead_letter_src_seq", -1))
        if src in dead:
            problems.append(f"seq {src} dead-lettered twice")
        dead.add(src)
        if src not in produced:
            problems.append(f"dead letter of unknown seq: {rec}")
            continue
        if rec["data"] != produced[src]:
            problems.append(
                f"dead letter of seq {src} carries {rec['data']}, produced {produced[src]}"
            )
        if meta.get("$dead_letter_from") != QUEUE:
            problems.append(f"dead letter of seq {src}: $dead_letter_from {meta}")
        if meta.get("$dead_letter_deliveries") != MAX_DELIVERIES:
            problems.append(f"dead letter of seq {src}: $dead_letter_deliveries {meta}")
        hs = by_seq.get(src, [])
        if not hs or hs[-1].deliveries != MAX_DELIVERIES:
            problems.append(
                f"seq {src} dead-lettered after {[h.deliveries for h in hs]} deliveries"
            )
        elif rec["$ts"] < hs[-1].end:
            problems.append(
                f"seq {src} dead-lettered at {rec['$ts']} while lease {hs[-1].lease_id} "
                f"held it until {hs[-1].end}"
            )
    both = acked & dead
    if both:
        problems.append(f"{len(both)} jobs both acked and dead-lettered: {sorted(both)}")
        for rec in dl_records:
            if rec.get("meta", {}).get("$dead_letter_src_seq") in both:
                problems.append(f"  its dead letter: {rec}")
    lost = set(produced) - acked - dead
    if lost:
        problems.append(f"{len(lost)} jobs neither acked nor dead-lettered: {sorted(lost)}")
    if not poison <= dead:
        problems.append(f"poison jobs not dead-lettered: {sorted(poison - dead)}")

    # --- the queue ends empty, on both servers --------------------------------------------
    for url in run.urls:
        state = run.queue_state(url)
        if state["count"] != 0 or state["queue"] != {
            "ready": 0,
            "in_flight": 0,
            "dead_lettered": len(dl_records),
        }:
            problems.append(f"{url}: final queue state {state}")
        if _read_all(url, QUEUE):
            problems.append(f"{url}: the queue topic still has records")

    server_problems = run.server_problems()
    errors = [line for line in server_problems if " WARNING " not in line]
    if errors:
        problems.append("server errors:\n" + "\n".join(errors[:30]))

    if problems:
        bad_seqs: list[int] = []
        for p in problems:
            m = re.match(r"seq (\d+)", p)
            if m:
                bad_seqs.append(int(m.group(1)))
        for s in sorted(both)[:2] + sorted(lost)[:2]:
            bad_seqs.append(s)
        detail = "\n".join(timeline(s) for s in list(dict.fromkeys(bad_seqs))[:4])
        pytest.fail(
            f"{len(problems)} problems (after {drained:.1f} s):\n"
            + "\n".join(problems[:40])
            + f"\n\nserver warnings:\n{chr(10).join(server_problems[:20])}\n\n{detail}"
        )

    # --- and the run exercised what it claims to -----------------------------------------
    claims = [e for e in events if e["ev"] == "claim"]
    redelivered = sum(1 for hs in by_seq.values() if len(hs) > 1)
    forgets = sum(e["ev"] == "forget" for e in events)
    summary = (
        f"drained in {drained:.1f} s: {len(claims)} claims, {len(leases)} leases, "
        f"{len(acked)} acked, {len(dead)} dead-lettered ({len(poison)} poison), "
        f"{redelivered} jobs redelivered, {run.crashes} crashes, {forgets} forgets, "
        f"{after_extend_ok} acks after an extend, {late_acks} late acks ok, "
        f"{dup_acks} repeated acks, {delayed_nacks} delayed nacks, "
        f"{stale_on_arrival} leases already expired when their claim response arrived"
    )
    print(summary)
    assert run.crashes >= CRASHY_WORKERS, summary
    assert forgets > 0 and after_extend_ok > 0 and dup_acks > 0 and delayed_nacks > 0, summary
    assert dead >= poison and len(dead) > 0 and redelivered > len(dead), summary
    assert len({e["url"] for e in claims if e["jobs"]}) == 2, "claims served by both servers"
