"""Feature-flag manifests across OS processes (stand-ins for Lambda instances).

- Six writers publish distinct trees to one namespace through two server processes at once
  while a `*` subscriber on one of them follows: versions come out 1..N without a gap or a
  duplicate, each writer's publishes keep its order, every version's closure hash is the
  tree its writer sent, and the subscriber's events chain (each prev_closure_hash is the
  previous event's closure_hash, versions strictly increase) up to the last version.
- A snapshot URL signed by one process is served by the other (one signing key).
- The per-token connection cap holds across processes (slots in DynamoDB), and a closed
  connection's slot is free again."""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServerProcess, sse_events

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TOKEN = "e2e-flags-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TOKENS = json.dumps(
    [
        {
            "token": TOKEN,
            "tenant": "acme",
            "kind": "service",
            "permissions": ["manifest.read", "manifest.write"],
            "namespaces": ["*"],
        }
    ]
)
WRITERS = 6
PER_WRITER = 5
NS = "/api/v1/tenants/acme/namespaces/billing"


def flag_env(**extra: str) -> dict[str, str]:
    return {
        "HEADWATER_FLAG_TOKENS": TOKENS,
        "HEADWATER_SIGNING_KEY": "e2e-signing-key-" + "x" * 32,
        "HEADWATER_FLAGS_KEEPALIVE_SEC": "1",
        **extra,
    }


def tree_hash(files: dict[str, str]) -> str:
    """The spec's closure hash, written out here (not the product's function)."""
    buffer = b""
    for path in sorted(files, key=lambda p: p.encode()):
        raw = path.encode()
        buffer += struct.pack(">I", len(raw)) + raw + hashlib.sha256(files[path].encode()).digest()
    return "sha256:" + hashlib.sha256(buffer).hexdigest()


def tree_of(writer: int, n: int) -> dict[str, str]:
    return {
        "namespace.toml": f'name = "billing"\nwriter = {writer}\nn = {n}\n',
        "flags/checkout.toml": f'segment = "staff"\nowner = "w{writer}"\n',
        "segments/staff.toml": 'rule = "staff"\n',
    }


def test_concurrent_publishes_through_two_processes_give_one_gapless_history(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, **flag_env())
    # the namespace exists before the subscriber connects
    with httpx.Client(base_url=a.url, timeout=30, headers=AUTH) as client:
        first = client.put(NS + "/manifest", json={"files": tree_of(0, 0)})
        assert first.status_code == 201, first.text
    total = 1 + WRITERS * PER_WRITER
    followed: list[dict[str, Any]] = []
    ready = threading.Event()
    failures: list[BaseException] = []

    def follow() -> None:
        try:
            with (
                httpx.Client(base_url=b.url, timeout=60, headers=AUTH) as client,
                client.stream("GET", "/api/v1/events", params={"ns": "billing:*"}) as r,
            ):
                assert r.status_code == 200, r.read()
                for event, body in sse_events(r):
                    followed.append({"event": event, **body})
                    ready.set()
                    if body.get("version") == total:
                        return
        except BaseException as exc:
            failures.append(exc)
            ready.set()

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    assert ready.wait(30) and not failures, failures

    results: dict[int, list[tuple[int, str]]] = {w: [] for w in range(1, WRITERS + 1)}

    def write(w: int) -> None:
        server = a if w % 2 else b
        try:
            with httpx.Client(base_url=server.url, timeout=30, headers=AUTH) as client:
                for n in range(PER_WRITER):
                    resp = client.put(NS + "/manifest", json={"files": tree_of(w, n)})
                    assert resp.status_code == 201, resp.text
                    body = resp.json()
                    assert body["closure_hash"] == tree_hash(tree_of(w, n))
                    results[w].append((body["version"], body["closure_hash"]))
        except BaseException as exc:
            failures.append(exc)

    writers = [threading.Thread(target=write, args=(w,)) for w in results]
    for t in writers:
        t.start()
    for t in writers:
        t.join(120)
    assert not failures, failures

    # every publish got its own version, versions 2..total without a gap or a duplicate,
    # and each writer's versions increase in the order it published
    versions = sorted(v for rs in results.values() for v, _ in rs)
    assert versions == list(range(2, total + 1))
    for rs in results.values():
        assert [v for v, _ in rs] == sorted(v for v, _ in rs)
    with httpx.Client(base_url=b.url, timeout=30, headers=AUTH) as client:
        listed = client.get(NS + "/manifest/versions").json()["versions"]
    assert [v["version"] for v in listed] == list(range(1, total + 1))
    by_version = {v["version"]: v["closure_hash"] for v in listed}
    for rs in results.values():
        for version, digest in rs:
            assert by_version[version] == digest

    follower.join(60)
    assert not failures, failures
    # the subscriber's history: a first snapshot, then strictly increasing versions whose
    # hashes chain, ending at the last version with its closure hash
    assert followed[0]["delivery"] == "snapshot" and followed[0]["prev_version"] is None
    for prev, event in itertools.pairwise(followed):
        assert event["event"] == "version", event
        assert event["version"] > prev["version"]
        assert event["prev_version"] == prev["version"]
        assert event["prev_closure_hash"] == prev["closure_hash"]
        assert by_version[event["version"]] == event["closure_hash"]
    assert followed[-1]["version"] == total


def test_snapshot_urls_and_the_connection_cap_hold_across_processes(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, **flag_env(HEADWATER_FLAGS_MAX_CONNECTIONS_PER_TOKEN="3"))
    files = tree_of(1, 1)
    with httpx.Client(timeout=30, headers=AUTH) as client:
        assert client.put(a.url + NS + "/manifest", json={"files": files}).status_code == 201

    held: list[Iterator[tuple[str, dict[str, Any]]]] = []
    with ExitStack() as stack:

        def connect(server: ServerProcess) -> dict[str, Any]:
            client = stack.enter_context(httpx.Client(base_url=server.url, timeout=30))
            resp = stack.enter_context(
                client.stream(
                    "GET", "/api/v1/events", params={"ns": "billing:checkout"}, headers=AUTH
                )
            )
            assert resp.status_code == 200, resp.read()
            # keep the reader: dropping a half-read line iterator closes the connection
            events = sse_events(resp)
            held.append(events)
            return next(events)[1]

        # GIVEN three connections, two on A and one on B
        first = connect(a)
        connect(a)
        connect(b)
        # a snapshot URL signed by A is served by B, with no bearer at all
        url = first["snapshot_url"]
        assert url.startswith(a.url)
        served = httpx.get(b.url + url[len(a.url) :], timeout=30)
        assert served.status_code == 200, served.text
        assert served.headers["etag"] == f'"v1-{first["closure_hash"]}"'
        # WHEN a fourth connects through B THEN the token's cap (3) refuses it
        refused = httpx.get(
            b.url + "/api/v1/events", params={"ns": "billing:checkout"}, headers=AUTH, timeout=30
        )
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        held.clear()

    # AND once connections close their slots are free again (released asynchronously)
    deadline = time.monotonic() + 15
    while True:
        with (
            httpx.Client(base_url=b.url, timeout=30) as client,
            client.stream(
                "GET", "/api/v1/events", params={"ns": "billing:checkout"}, headers=AUTH
            ) as resp,
        ):
            if resp.status_code == 200:
                events = sse_events(resp)
                assert next(events)[1]["version"] == 1
                break
        assert time.monotonic() < deadline, "slots were not released"
        time.sleep(0.2)


def version_tree(v: int) -> dict[str, str]:
    """Version v of a namespace whose narrow closures gain and lose segments: `checkout`
    uses `staff` on even versions and `beta` (which uses `staff`) on multiples of 3; `banner`
    changes every version; segments change every fifth version."""
    uses = []
    if v % 2 == 0:
        uses.append("staff")
    if v % 3 == 0:
        uses.append("beta")
    files = {
        "namespace.toml": 'name = "billing"\n',
        "flags/checkout.toml": f"segments = {json.dumps(uses)}\ndefault = {v % 2 == 0}\n".lower(),
        "flags/banner.toml": f'text = "hello {v}"\n',
        "segments/staff.toml": f'rule = "staff {v // 5}"\n',
        "segments/beta.toml": f'segment = "staff"\ncohort = {v // 5}\n',
    }
    if v % 4 == 0:
        files[f"flags/extra-{v}.toml"] = "on = true\n"
    return files


def spec_closure(files: dict[str, str], flags: set[str] | None) -> dict[str, bytes]:
    """The spec's closure, computed here: namespace.toml, the subscribed flags, and every
    segment reachable through `segment`/`segments` keys (None: everything)."""
    import tomllib

    def refs(text: str) -> set[str]:
        doc = tomllib.loads(text)
        out: set[str] = set()
        if isinstance(doc.get("segment"), str):
            out.add(doc["segment"])
        out.update(doc.get("segments", []))
        return out

    if flags is None:
        return {p: c.encode() for p, c in files.items()}
    keep = {"namespace.toml"} | {f"flags/{f}.toml" for f in flags if f"flags/{f}.toml" in files}
    todo = [s for p in list(keep) if p.startswith("flags/") for s in refs(files[p])]
    while todo:
        path = f"segments/{todo.pop()}.toml"
        if path in files and path not in keep:
            keep.add(path)
            todo.extend(refs(files[path]))
    return {p: files[p].encode() for p in keep}


def test_two_clients_follow_twenty_versions_and_a_stale_client_recovers_by_snapshot(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    from headwater_client.flags import FlagSubscriber

    a, b = start_servers(2, **flag_env(HEADWATER_FLAGS_RETAIN_VERSIONS="3"))
    writer = httpx.Client(timeout=30, headers=AUTH)
    assert writer.put(a.url + NS + "/manifest", json={"files": version_tree(1)}).status_code == 201
    narrow_http = httpx.Client()
    narrow = FlagSubscriber(a.url, TOKEN, {"billing": ["checkout"]}, http=narrow_http)
    everything = FlagSubscriber(b.url, TOKEN, {"billing": "*"})
    try:
        narrow.start()
        everything.start()
        assert narrow.wait_for_version("billing", 1, 30), narrow.last_refresh_error()
        assert everything.wait_for_version("billing", 1, 30), everything.last_refresh_error()
        # WHEN 20 more versions are published through both processes while both follow
        for v in range(2, 22):
            server = a if v % 2 else b
            resp = writer.put(server.url + NS + "/manifest", json={"files": version_tree(v)})
            assert resp.status_code == 201 and resp.json()["version"] == v, resp.text
            time.sleep(0.05)
        # THEN both end at version 21 with exactly the spec's closures and their hashes
        for sub, flags in ((narrow, {"checkout"}), (everything, None)):
            assert sub.wait_for_version("billing", 21, 30), sub.last_refresh_error()
            expected = spec_closure(version_tree(21), flags)
            assert sub.tree("billing") == expected
            as_text = {p: c.decode() for p, c in expected.items()}
            assert sub.closure_hash("billing") == tree_hash(as_text)
        # the narrow client mostly took inline deltas (it does not need every version: the
        # ones that left its closure unchanged sent nothing)
        stats = narrow.stats().namespaces["billing"]
        assert stats.inline_applied >= 5, stats
        assert narrow.last_refresh_error() is None, narrow.last_refresh_error()

        # GIVEN the narrow client goes away at 21 and six versions later (retention 3) its
        # version is past retention
        narrow.stop()
        for v in range(22, 28):
            resp = writer.put(b.url + NS + "/manifest", json={"files": version_tree(v)})
            assert resp.status_code == 201, resp.text
        before = narrow.stats().namespaces["billing"].snapshots_applied
        # WHEN it reconnects with since=billing:21 THEN a snapshot brings it to 27, verified
        assert narrow.events_request()[0].endswith("since=billing:21")
        narrow.start()
        assert narrow.wait_for_version("billing", 27, 30), narrow.last_refresh_error()
        assert narrow.stats().namespaces["billing"].snapshots_applied == before + 1
        assert narrow.tree("billing") == spec_closure(version_tree(27), {"checkout"})
        # and the server says that closure is the one at 27
        closure = writer.get(
            a.url + NS + "/closure",
            params={"version": "27", "subscription": "Y2hlY2tvdXQ"},  # "checkout"
        )
        assert closure.status_code == 200
        assert closure.headers["etag"] == f'"v27-{narrow.closure_hash("billing")}"'
    finally:
        narrow.stop()
        everything.stop()
        narrow_http.close()
        writer.close()
