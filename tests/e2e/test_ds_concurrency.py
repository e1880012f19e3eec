"""/v1 (Durable Streams) is correct under concurrency: several OS processes write to ONE
stream through TWO Headwater server processes that share one emulator.

* idempotent producers, every append retried on the other server: no loss, no duplicate,
  no reorder, and every retry is recognised as a duplicate (204);
* racing Stream-Seq writers: each accepted seq lands exactly once, in strictly increasing
  order, and everything else is a 409 that appends nothing;
* a close racing appends: every 204 is in the stream, nothing after the close is, and
  appends after the close answer 409 with Stream-Closed: true;
* forks racing appends to their source and its delete: each fork holds exactly the source's
  entries up to its fork point, and the deleted source is kept while any fork reads from
  it and reclaimed when the last one goes (no reference lost or counted twice)."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServerProcess

pytestmark = [pytest.mark.serial, pytest.mark.e2e, pytest.mark.timeout(180)]

JSON = {"content-type": "application/json"}
PRODUCERS = 6
APPENDS_PER_PRODUCER = 150
SEQ_WRITERS = 6
SEQ_RANGE = 240
APPENDERS = 5
CLOSE_AFTER_ACCEPTED = 60
MAX_APPENDS_PER_APPENDER = 400
APPENDS_AFTER_409 = 5

# Shared with pool workers through the initializer (spawn context).
_shared: dict[str, Any] = {}


def _init_worker(counter: Any, barrier: Any) -> None:
    _shared["accepted"] = counter
    _shared["barrier"] = barrier


def _stream_url(base: str, name: str) -> str:
    return f"{base}/v1/stream/{name}"


def _other(urls: list[str], url: str) -> str:
    return urls[1] if url == urls[0] else urls[0]


def _read_all(base: str, name: str) -> tuple[list[Any], httpx.Response]:
    """Every entry of a JSON stream, paging with Stream-Next-Offset until up to date."""
    items: list[Any] = []
    offset = "-1"
    pages = 0
    with httpx.Client(timeout=30) as http:
        while True:
            r = http.get(_stream_url(base, name), params={"offset": offset})
            assert r.status_code == 200, (r.status_code, r.text)
            page = r.json()
            assert isinstance(page, list), page
            items.extend(page)
            nxt = r.headers["stream-next-offset"]
            pages += 1
            assert pages < 10_000, "paging does not end"
            if r.headers.get("stream-up-to-date") == "true":
                assert not page or nxt >= offset
                return items, r
            assert page, f"empty page short of the tail at {offset}"
            assert nxt > offset, (offset, nxt)
            offset = nxt


def _create(url: str) -> None:
    r = httpx.put(url, headers=JSON, timeout=30)
    assert r.status_code == 201, (r.status_code, r.text)


# --- 1. idempotent producers -----------------------------------------------------------------
def _idempotent_producer(args: tuple[int, list[str], str, int]) -> list[str]:
    """Appends n = 0..N-1 as producer p<i> (epoch 0, seq n) to a random server, then retries
    the same append on the other server. Returns a list of problems (empty when all good)."""
    producer, urls, name, seed = args
    rng = random.Random(seed)
    problems: list[str] = []
    _shared["barrier"].wait()
    with httpx.Client(timeout=30) as http:
        for n in range(APPENDS_PER_PRODUCER):
            headers = {
                **JSON,
                "Producer-Id": f"p{producer}",
                "Producer-Epoch": "0",
                "Producer-Seq": str(n),
            }
            body = json.dumps([{"p": producer, "n": n}])
            first = rng.choice(urls)
            r1 = http.post(_stream_url(first, name), headers=headers, content=body)
            if r1.status_code != 200:
                problems.append(f"p{producer} n={n} first: {r1.status_code} {r1.text[:200]}")
            elif r1.headers.get("producer-seq") != str(n):
                problems.append(f"p{producer} n={n} first echoed {r1.headers.get('producer-seq')}")
            r2 = http.post(_stream_url(_other(urls, first), name), headers=headers, content=body)
            if r2.status_code != 204:
                problems.append(f"p{producer} n={n} retry: {r2.status_code} {r2.text[:200]}")
            elif r2.headers.get("producer-seq") != str(n):
                problems.append(f"p{producer} n={n} retry echoed {r2.headers.get('producer-seq')}")
    return problems


def test_idempotent_producers_retried_across_servers_no_loss_no_dup_no_reorder(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    urls = [s.url for s in start_servers(2)]
    name = f"ds-producers-{uuid.uuid4().hex[:8]}"
    _create(_stream_url(urls[0], name))

    # WHEN 6 processes each append 150 entries as idempotent producers, every append sent
    # twice (the second time to the other server)
    ctx = mp.get_context("spawn")
    with ctx.Pool(
        PRODUCERS, initializer=_init_worker, initargs=(ctx.Value("i", 0), ctx.Barrier(PRODUCERS))
    ) as pool:
        problems = pool.map(
            _idempotent_producer,
            [(p, urls, name, 7000 + p) for p in range(PRODUCERS)],
            chunksize=1,
        )
    # THEN every first attempt was fresh (200) and every retry a duplicate (204)
    flat = [x for ps in problems for x in ps]
    assert not flat, f"{len(flat)} unexpected answers, e.g. {flat[:10]}"

    # ...and both servers hold the same log: each entry exactly once, per-producer in order
    log, last = _read_all(urls[0], name)
    assert _read_all(urls[1], name)[0] == log
    assert last.headers.get("stream-closed") is None
    assert len(log) == PRODUCERS * APPENDS_PER_PRODUCER, len(log)
    counts = Counter((e["p"], e["n"]) for e in log)
    dups = [k for k, c in counts.items() if c > 1]
    assert not dups, f"duplicated entries: {dups[:10]}"
    for p in range(PRODUCERS):
        ns = [e["n"] for e in log if e["p"] == p]
        assert ns == list(range(APPENDS_PER_PRODUCER)), f"producer p{p} out of order or lossy"
    # the producers really interleaved (not one after the other)
    switches = sum(1 for a, b in itertools.pairwise(log) if a["p"] != b["p"])
    assert switches > PRODUCERS * 5, switches


# --- 2. racing Stream-Seq writers --------------------------------------------------------------
def _seq_writer(args: tuple[int, list[str], str, int]) -> list[tuple[str, int, str | None]]:
    """Walks the shared seq range 000000..SEQ_RANGE-1 with random skips, appending each
    chosen seq to a random server. Returns (seq, status, Stream-Next-Offset)."""
    writer, urls, name, seed = args
    rng = random.Random(seed)
    out: list[tuple[str, int, str | None]] = []
    _shared["barrier"].wait()
    with httpx.Client(timeout=30) as http:
        for v in range(SEQ_RANGE):
            if rng.random() < 0.5:
                continue
            seq = f"{v:06d}"
            r = http.post(
                _stream_url(rng.choice(urls), name),
                headers={**JSON, "Stream-Seq": seq},
                content=json.dumps([{"w": writer, "s": seq}]),
            )
            out.append((seq, r.status_code, r.headers.get("stream-next-offset")))
    return out


def test_racing_stream_seq_writers_accept_each_seq_once_in_order(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    urls = [s.url for s in start_servers(2)]
    name = f"ds-seq-{uuid.uuid4().hex[:8]}"
    _create(_stream_url(urls[0], name))

    # WHEN 6 processes race Stream-Seq appends over one shared, colliding seq range
    ctx = mp.get_context("spawn")
    with ctx.Pool(
        SEQ_WRITERS,
        initializer=_init_worker,
        initargs=(ctx.Value("i", 0), ctx.Barrier(SEQ_WRITERS)),
    ) as pool:
        results = pool.map(
            _seq_writer,
            [(w, urls, name, 9100 + w) for w in range(SEQ_WRITERS)],
            chunksize=1,
        )

    statuses = Counter(status for res in results for _s, status, _o in res)
    # THEN every answer is 204 (accepted) or 409 (seq not above the last one)
    assert set(statuses) <= {204, 409}, statuses
    assert statuses[204] > 0 and statuses[409] > 0, statuses
    accepted = {(w, seq) for w, res in enumerate(results) for seq, st, _o in res if st == 204}
    rejected = {(w, seq) for w, res in enumerate(results) for seq, st, _o in res if st == 409}

    log, _ = _read_all(urls[1], name)
    got = [(e["w"], e["s"]) for e in log]
    # every accepted append is in the stream exactly once, nothing rejected is
    assert len(got) == len(set(got)) == statuses[204], (len(got), statuses)
    assert set(got) == accepted
    assert not (set(got) & rejected)
    # the accepted seqs are unique and strictly increasing in stream order (byte order)
    seqs = [s for _w, s in got]
    assert all(a < b for a, b in itertools.pairwise(seqs)), "Stream-Seq order broken"
    # each accepted append's Stream-Next-Offset is unique (one append, one position)
    offsets = [o for res in results for _s, st, o in res if st == 204]
    assert None not in offsets and len(set(offsets)) == len(offsets)
    print(f"\nStream-Seq race: {statuses[204]} accepted, {statuses[409]} rejected (409)")


# --- 3. close racing appends ---------------------------------------------------------------------
def _appender(
    args: tuple[int, list[str], str, int],
) -> list[tuple[int, float, float, int, str | None, str | None]]:
    """Appends n = 0, 1, ... to random servers until APPENDS_AFTER_409 appends after the
    first 409. Returns (n, sent, answered, status, Stream-Closed, Stream-Next-Offset)."""
    worker, urls, name, seed = args
    rng = random.Random(seed)
    out: list[tuple[int, float, float, int, str | None, str | None]] = []
    after_409 = 0
    _shared["barrier"].wait()
    with httpx.Client(timeout=30) as http:
        for n in range(MAX_APPENDS_PER_APPENDER):
            sent = time.monotonic()
            r = http.post(
                _stream_url(rng.choice(urls), name),
                headers=JSON,
                content=json.dumps([{"w": worker, "n": n}]),
            )
            answered = time.monotonic()
            out.append(
                (
                    n,
                    sent,
                    answered,
                    r.status_code,
                    r.headers.get("stream-closed"),
                    r.headers.get("stream-next-offset"),
                )
            )
            if r.status_code == 204:
                with _shared["accepted"].get_lock():
                    _shared["accepted"].value += 1
            else:
                after_409 += 1
                if after_409 > APPENDS_AFTER_409:
                    break
    return out


def _closer(args: tuple[int, list[str], str, int]) -> list[tuple[int, float, float, int, Any, Any]]:
    """Waits until CLOSE_AFTER_ACCEPTED appends were accepted, then closes the stream."""
    _worker, urls, name, seed = args
    rng = random.Random(seed)
    _shared["barrier"].wait()
    deadline = time.monotonic() + 60
    while _shared["accepted"].value < CLOSE_AFTER_ACCEPTED and time.monotonic() < deadline:
        time.sleep(0.005)
    sent = time.monotonic()
    r = httpx.post(
        _stream_url(rng.choice(urls), name), headers={"Stream-Closed": "true"}, timeout=30
    )
    answered = time.monotonic()
    return [
        (
            -1,
            sent,
            answered,
            r.status_code,
            r.headers.get("stream-closed"),
            r.headers.get("stream-next-offset"),
        )
    ]


def _role(args: tuple[int, list[str], str, int]) -> list[Any]:
    return _closer(args) if args[0] == APPENDERS else _appender(args)


def test_close_racing_appends_keeps_every_acknowledged_append_and_nothing_after(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    urls = [s.url for s in start_servers(2)]
    name = f"ds-close-{uuid.uuid4().hex[:8]}"
    _create(_stream_url(urls[0], name))

    # WHEN 5 processes append while a 6th closes the stream after 60 accepted appends
    ctx = mp.get_context("spawn")
    with ctx.Pool(
        APPENDERS + 1,
        initializer=_init_worker,
        initargs=(ctx.Value("i", 0), ctx.Barrier(APPENDERS + 1)),
    ) as pool:
        results = pool.map(
            _role, [(w, urls, name, 4200 + w) for w in range(APPENDERS + 1)], chunksize=1
        )
    appends = {w: res for w, res in enumerate(results[:APPENDERS])}
    ((_n, close_sent, close_done, close_status, close_hdr, close_offset),) = results[APPENDERS]

    # THEN the close succeeded and reports the final offset
    assert close_status == 204 and close_hdr == "true", (close_status, close_hdr)
    assert close_offset

    ok: set[tuple[int, int]] = set()
    for w, res in appends.items():
        seen_409 = False
        for n, sent, answered, status, closed, offset in res:
            assert status in (204, 409), (w, n, status)
            if status == 204:
                # a writer never gets a 204 after its own 409 (the close is permanent)
                assert not seen_409, f"writer {w}: append {n} accepted after a 409"
                # an append sent after the close was answered was not accepted
                assert sent <= close_done, f"writer {w}: append {n} accepted after the close"
                ok.add((w, n))
            else:
                seen_409 = True
                assert closed == "true", (w, n, "409 without Stream-Closed: true")
                # the 409 of a closed stream carries the final offset
                assert offset == close_offset, (w, n, offset, close_offset)
                # an append answered before the close was even sent cannot be refused
                assert answered >= close_sent, f"writer {w}: append {n} refused before close"
        assert seen_409, f"writer {w} never saw the close"
        last_ok = max((n for n, *_ in res if (w, n) in ok), default=-1)
        assert [n for n, *_ in res if (w, n) in ok] == list(range(last_ok + 1))

    # ...the stream holds exactly the acknowledged appends, and it is closed at the tail
    log, last = _read_all(urls[1], name)
    got = [(e["w"], e["n"]) for e in log]
    assert len(got) == len(set(got)), "duplicate entries"
    assert set(got) == ok, (len(got), len(ok))
    assert len(log) >= CLOSE_AFTER_ACCEPTED
    assert last.headers.get("stream-closed") == "true"
    assert last.headers["stream-next-offset"] == close_offset
    for w in appends:
        ns = [n for ww, n in got if ww == w]
        assert ns == sorted(ns), f"writer {w} reordered"
    refused = sum(1 for res in appends.values() for r in res if r[3] == 409)
    print(f"\nclose race: {len(ok)} appends accepted, {refused} refused with 409 after the close")
    head = httpx.head(_stream_url(urls[0], name), timeout=30)
    assert head.headers.get("stream-closed") == "true"
    assert head.headers.get("stream-next-offset") == close_offset


# --- 4. forks racing appends to their source and its delete ----------------------------------
FORKERS = 4
FORKS_PER_FORKER = 12
DELETE_AFTER_FORKS = 20
SOURCE_APPENDS = 400


def _fork_role(args: tuple[int, list[str], str, int]) -> list[Any]:
    """Role 0 appends {"n": k} to the source, role 1 deletes it once enough forks exist, the
    rest fork it at its tail on random servers: (fork name, status, PUT Stream-Next-Offset)."""
    role, urls, src, seed = args
    rng = random.Random(seed)
    out: list[Any] = []
    _shared["barrier"].wait()
    with httpx.Client(timeout=30) as http:
        if role == 0:
            for k in range(SOURCE_APPENDS):
                body = json.dumps([{"n": k}])
                r = http.post(_stream_url(rng.choice(urls), src), headers=JSON, content=body)
                out.append(r.status_code)
                if r.status_code != 204:
                    break
            return out
        if role == 1:
            deadline = time.monotonic() + 60
            while _shared["accepted"].value < DELETE_AFTER_FORKS and time.monotonic() < deadline:
                time.sleep(0.01)
            out.append(http.delete(_stream_url(rng.choice(urls), src)).status_code)
            return out
        for i in range(FORKS_PER_FORKER):
            name = f"{src}-f{role}-{i}"
            r = http.put(
                _stream_url(rng.choice(urls), name),
                headers={"Stream-Forked-From": f"/v1/stream/{src}"},
            )
            if r.status_code == 201:
                with _shared["accepted"].get_lock():
                    _shared["accepted"].value += 1
            out.append((name, r.status_code, r.headers.get("stream-next-offset")))
    return out


def test_forks_racing_appends_and_the_source_delete_keep_their_history(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    urls = [s.url for s in start_servers(2)]
    src = f"ds-fork-{uuid.uuid4().hex[:8]}"
    _create(_stream_url(urls[0], src))
    roles = FORKERS + 2

    # WHEN 4 processes fork a stream at its tail while a 5th appends to it and a 6th deletes
    # it after 20 forks exist
    ctx = mp.get_context("spawn")
    with ctx.Pool(
        roles, initializer=_init_worker, initargs=(ctx.Value("i", 0), ctx.Barrier(roles))
    ) as pool:
        results = pool.map(_fork_role, [(r, urls, src, 900 + r) for r in range(roles)], chunksize=1)
    appends, (delete_status,) = results[0], results[1]
    forks = [f for res in results[2:] for f in res]

    # THEN the delete succeeded, and appends were accepted until it (then 410: soft-deleted)
    assert delete_status == 204
    assert set(appends[:-1]) <= {204} and appends[-1] in (204, 410), Counter(appends)
    made = [(name, nxt) for name, status, nxt in forks if status == 201]
    assert len(made) >= DELETE_AFTER_FORKS
    # ...every fork either succeeded or was refused because the source was deleted
    assert {status for _, status, _ in forks} <= {201, 409}, Counter(s for _, s, _ in forks)

    # ...each fork holds exactly the source's entries up to its fork point: a gapless prefix
    for i, (name, nxt) in enumerate(made):
        log, last = _read_all(urls[i % 2], name)
        assert log == [{"n": k} for k in range(len(log))], name
        assert last.headers["stream-next-offset"] == nxt, name

    # ...the deleted source is kept (410) while any fork still reads it, and reclaimed (404)
    # when the last fork goes: no reference was lost or counted twice
    with httpx.Client(timeout=30) as http:
        assert http.head(_stream_url(urls[0], src)).status_code == 410
        *most, (last_fork, _) = made
        with ctx.Pool(4) as pool:
            deleted = pool.map(_delete, [(urls[i % 2], n) for i, (n, _) in enumerate(most)])
        assert set(deleted) == {204}, Counter(deleted)
        assert http.head(_stream_url(urls[1], src)).status_code == 410
        assert http.get(_stream_url(urls[1], last_fork), params={"offset": "-1"}).status_code == 200
        assert http.delete(_stream_url(urls[0], last_fork)).status_code == 204
        assert http.head(_stream_url(urls[0], src)).status_code == 404
        assert http.head(_stream_url(urls[1], src)).status_code == 404
        assert http.put(_stream_url(urls[1], src), headers=JSON).status_code == 201


def _delete(args: tuple[str, str]) -> int:
    base, name = args
    return httpx.delete(_stream_url(base, name), timeout=30).status_code
