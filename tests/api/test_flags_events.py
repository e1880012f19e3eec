"""GET /api/v1/events over HTTP (spec: flag-closure-events.txt, 'GET /api/v1/events',
'Events', 'Ordering', 'Error responses'): request errors, the per-token cap, the first
snapshot, inline deltas with every op, hash chaining, the churn and size budgets, resync,
keepalive and superadmin labels. Expected closures, ops and hashes come from flags_helpers'
independent model; every inline event is applied to a tracked tree with the client's checks."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
from api_helpers import MakeClient
from flags_helpers import (
    ADMIN,
    LIMITED,
    NSCLIENT,
    OTHER,
    RO,
    SVC,
    WO,
    Sse,
    apply_inline,
    auth,
    closure_files,
    closure_hash,
    enc,
    expected_ops,
    flag_error,
    flags_client,
    ns_path,
    publish_ok,
    relative,
    untar,
)
from starlette.testclient import TestClient
from test_tiering import services

from headwater.engine.ports import Head
from headwater.flags.live import EventStream
from headwater.flags.store import Lru, topic_of
from headwater.flags.subscription import parse_events_request
from headwater.http.app import begin_shutdown

pytestmark = pytest.mark.api

EVENTS = "/api/v1/events"
V1 = {
    "namespace.toml": "name = 'billing'\n",
    "flags/checkout.toml": "segment = 'employees'\n",
    "flags/other.toml": "segments = ['beta']\n",
    "segments/employees.toml": "segment = 'staff'\n",
    "segments/staff.toml": "s = 1\n",
    "segments/beta.toml": "b = 1\n",
    "segments/gamma.toml": "g = 1\n",
}
SNAPSHOT_KEYS = [
    "protocol",
    "namespace",
    "version",
    "prev_version",
    "prev_closure_hash",
    "closure_hash",
    "delivery",
    "snapshot_url",
    "snapshot_size_bytes",
]
INLINE_KEYS = [*SNAPSHOT_KEYS[:7], "files"]


@pytest.fixture
def fc(make_client: MakeClient) -> TestClient:
    return flags_client(make_client)


@contextlib.contextmanager
def events(client: TestClient, query: str, token: str = SVC, **headers: str) -> Iterator[Sse]:
    with client.stream("GET", f"{EVENTS}?{query}", headers={**auth(token), **headers}) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        yield Sse(resp)


def refused(
    client: TestClient, query: str, token: str | None = SVC, **headers: str
) -> httpx.Response:
    """A request that must fail before the stream starts (never hangs on a 200)."""
    hdrs = {**(auth(token) if token else {}), **headers}
    with client.stream("GET", f"{EVENTS}?{query}", headers=hdrs) as resp:
        assert resp.status_code != 200, "the stream started"
        resp.read()
        return resp


def snapshot_tree(client: TestClient, data: dict[str, Any]) -> dict[str, bytes]:
    """Fetch a snapshot_url without a bearer; the fourth check (hash over the untarred tree)."""
    resp = client.get(relative(data["snapshot_url"]))
    assert resp.status_code == 200, resp.text
    tree = untar(resp.content)
    assert closure_hash(tree) == data["closure_hash"]
    if "snapshot_size_bytes" in data:  # spec: the uncompressed tarball size
        assert len(gzip.decompress(resp.content)) == data["snapshot_size_bytes"]
    return tree


def check_first(fr: Any, label: str, version: int, closure: dict[str, bytes]) -> None:
    assert fr.event == "version"
    assert fr.id == f"{label}:{version}"
    assert list(fr.data) == SNAPSHOT_KEYS, fr.data
    assert fr.data["protocol"] == "v2"
    assert fr.data["namespace"] == label
    assert fr.data["version"] == version
    assert fr.data["prev_version"] is None and fr.data["prev_closure_hash"] is None
    assert fr.data["delivery"] == "snapshot"
    assert fr.data["closure_hash"] == closure_hash(closure)
    assert isinstance(fr.data["snapshot_size_bytes"], int) and fr.data["snapshot_size_bytes"] > 0


# --- request errors (before the stream) -----------------------------------------------------
def test_request_errors(fc: TestClient) -> None:
    publish_ok(fc, "billing", V1)
    publish_ok(fc, "growth", V1)
    flag_error(refused(fc, ""), 400, "invalid_request")
    flag_error(refused(fc, "since=billing:1&foo=bar"), 400, "invalid_request")
    err = flag_error(refused(fc, "ns=nosuch:*"), 400, "invalid_subscription")
    assert err["details"]["reason"] == "unknown_namespace"
    err = flag_error(refused(fc, "ns=billing:*&ns=nosuch:a"), 400, "invalid_subscription")
    assert err["details"]["reason"] == "unknown_namespace"

    many = "&".join(f"ns=n{i}:*" for i in range(33))
    err = flag_error(refused(fc, many), 400, "invalid_subscription")
    assert err["details"]["reason"] == "too_many_namespaces"
    # 32 namespaces are within the cap (they fail only for not existing).
    err = flag_error(refused(fc, many.rsplit("&", 1)[0]), 400, "invalid_subscription")
    assert err["details"]["reason"] == "unknown_namespace"

    flags65 = ",".join(f"f{i}" for i in range(65))
    err = flag_error(refused(fc, f"ns=growth:*&ns=billing:{flags65}"), 400, "invalid_subscription")
    assert err["details"]["reason"] == "too_many_flags"
    assert err["details"]["namespace"] == "billing"
    # 64 flags (none of which exist but one) are fine: the closure omits the missing ones.
    flags64 = ",".join([*(f"f{i}" for i in range(63)), "checkout"])
    with events(fc, f"ns=billing:{flags64}") as sse:
        fr = sse.event()
        closure = closure_files(enc(V1), "checkout")
        check_first(fr, "billing", 1, closure)
        assert snapshot_tree(fc, fr.data) == closure

    flag_error(refused(fc, "ns=billing:*", token=None), 401, "unauthorized")
    # manifest.read is needed on every listed namespace, before existence is looked at.
    flag_error(refused(fc, "ns=billing:*&ns=growth:*", token=LIMITED), 403, "forbidden")
    flag_error(refused(fc, "ns=billing:*&ns=nosuch:*", token=LIMITED), 403, "forbidden")
    flag_error(refused(fc, "ns=billing:*", token=WO), 403, "forbidden")
    flag_error(refused(fc, "ns=billing:*", token=NSCLIENT), 403, "forbidden")
    flag_error(refused(fc, "ns=acme/billing:*", token=OTHER), 403, "forbidden")
    err = flag_error(refused(fc, "ns=billing:*", token=OTHER), 400, "invalid_subscription")
    assert err["details"]["reason"] == "unknown_namespace"  # globex/billing
    err = flag_error(refused(fc, "ns=billing:*", token=ADMIN), 400, "invalid_subscription")
    assert err["details"]["reason"] == "tenant_required"
    with events(fc, "ns=billing:*", token=LIMITED) as sse:
        check_first(sse.event(), "billing", 1, enc(V1))


def test_query_over_8_kib_is_414_with_no_body(fc: TestClient) -> None:
    publish_ok(fc, "billing", V1)
    base = "ns=billing:*&pad="
    resp = refused(fc, base + "x" * (8192 - len(base) + 1))
    assert resp.status_code == 414
    assert resp.content == b""
    # Exactly 8 KiB is accepted (unknown parameters are ignored).
    with events(fc, base + "x" * (8192 - len(base))) as sse:
        check_first(sse.event(), "billing", 1, enc(V1))


def test_per_token_connection_cap(make_client: MakeClient) -> None:
    fc = flags_client(make_client, max_connections_per_token=2)
    publish_ok(fc, "billing", V1)
    with events(fc, "ns=billing:*") as s1:
        s1.event()
        with events(fc, "ns=billing:checkout") as s2:
            s2.event()
            resp = refused(fc, "ns=billing:*")
            err = flag_error(resp, 429, "rate_limit_exceeded")
            assert err["message"]
            # The cap is per token: another token still connects.
            with events(fc, "ns=billing:*", token=RO) as s3:
                s3.event()
        # One closed: a new connection gets its slot (released asynchronously).
        deadline = time.monotonic() + 10
        while True:
            with fc.stream("GET", f"{EVENTS}?ns=billing:*", headers=auth(SVC)) as resp:
                if resp.status_code == 200:
                    Sse(resp).event()
                    break
                assert resp.status_code == 429
                resp.read()
            assert time.monotonic() < deadline, "slot never released"
            time.sleep(0.1)


def test_origin_header_is_accepted_without_cors_headers(fc: TestClient) -> None:
    publish_ok(fc, "billing", V1)
    origin = {"Origin": "https://browser.example"}
    # Elsewhere the app does answer CORS (so the check below can fail) ...
    resp = fc.get(ns_path("billing", "/manifest"), headers={**auth(SVC), **origin})
    assert "access-control-allow-origin" in resp.headers
    # ... but not on the event stream.
    with events(fc, "ns=billing:*", **origin) as sse:
        assert not any(k.lower().startswith("access-control-") for k in sse.response.headers)
        check_first(sse.event(), "billing", 1, enc(V1))


# --- first event ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "last_event_id"),
    [
        ("", None),
        ("&since=billing:1", None),
        ("&since=billing:2", "billing:1"),
        ("&since=billing:3", "billing:3"),
        ("&since=billing:99", None),
        ("", "billing:99"),
        ("", "garbage"),
    ],
)
def test_first_event_is_always_a_snapshot(
    fc: TestClient, query: str, last_event_id: str | None
) -> None:
    trees = [V1]
    for i in range(2):
        trees.append({**trees[-1], "flags/checkout.toml": f"segment = 'employees'\nn = {i}\n"})
    for t in trees:
        publish_ok(fc, "billing", t)
    hdrs = {"Last-Event-ID": last_event_id} if last_event_id else {}
    with events(fc, f"ns=billing:checkout{query}", **hdrs) as sse:
        fr = sse.event()
    closure = closure_files(enc(trees[-1]), "checkout")
    check_first(fr, "billing", 3, closure)
    assert snapshot_tree(fc, fr.data) == closure


def test_two_namespaces_each_get_a_first_snapshot_and_their_own_chain(fc: TestClient) -> None:
    growth = {"namespace.toml": "name = 'growth'\n", "flags/a.toml": "v = 1\n"}
    publish_ok(fc, "billing", V1)
    publish_ok(fc, "growth", growth)
    publish_ok(fc, "growth", {**growth, "flags/a.toml": "v = 2\n"})
    trees = {"billing": enc(V1), "growth": enc({**growth, "flags/a.toml": "v = 2\n"})}
    subs = {"billing": "checkout", "growth": "*"}
    with events(fc, "ns=billing:checkout&ns=growth:*") as sse:
        firsts = [sse.event(), sse.event()]
        by_ns = {fr.data["namespace"]: fr for fr in firsts}
        assert set(by_ns) == {"billing", "growth"}
        check_first(by_ns["billing"], "billing", 1, closure_files(trees["billing"], "checkout"))
        check_first(by_ns["growth"], "growth", 2, trees["growth"])
        tracked = {ns: snapshot_tree(fc, fr.data) for ns, fr in by_ns.items()}
        last = {ns: fr.data for ns, fr in by_ns.items()}
        steps: list[tuple[str, dict[str, str]]] = [
            ("growth", {**growth, "flags/a.toml": "v = 3\n"}),
            ("billing", {**V1, "flags/checkout.toml": "segment = 'employees'\nx = 1\n"}),
            ("growth", {**growth, "flags/a.toml": "v = 3\n", "flags/b.toml": "w = 1\n"}),
            ("billing", {**V1, "segments/staff.toml": "s = 2\n"}),
        ]
        for ns, tree in steps:
            publish_ok(fc, ns, tree)
            fr = sse.event()
            assert fr.data["namespace"] == ns
            assert fr.data["prev_version"] == last[ns]["version"]
            assert fr.data["version"] == last[ns]["version"] + 1
            assert fr.data["prev_closure_hash"] == last[ns]["closure_hash"]
            assert fr.id == f"{ns}:{fr.data['version']}"
            assert [(e["path"], e["op"]) for e in fr.data["files"]] == expected_ops(
                trees[ns], enc(tree), subs[ns]
            )
            tracked[ns] = apply_inline(tracked[ns], fr.data)
            trees[ns] = enc(tree)
            assert tracked[ns] == closure_files(trees[ns], subs[ns])
            last[ns] = fr.data


# --- inline deltas --------------------------------------------------------------------------
def follow(
    client: TestClient,
    sse: Sse,
    slug: str,
    flags: str,
    tracked: dict[str, bytes],
    prev: dict[str, Any],
    old_tree: dict[str, str],
    new_tree: dict[str, str],
    want_ops: Sequence[tuple[str, str]],
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Publish `new_tree`, read its inline event, check it and apply it."""
    body = publish_ok(client, slug, new_tree)
    assert body["version"] == prev["version"] + 1
    fr = sse.event()
    assert fr.event == "version"
    data = fr.data
    assert list(data) == INLINE_KEYS, data
    assert fr.id == f"{slug}:{body['version']}"
    assert data["protocol"] == "v2" and data["namespace"] == slug
    assert data["version"] == body["version"]
    assert data["prev_version"] == prev["version"]
    assert data["prev_closure_hash"] == prev["closure_hash"]
    assert data["delivery"] == "inline"
    got_ops = [(e["path"], e["op"]) for e in data["files"]]
    # The expected ops twice over: written out by hand, and from the model.
    assert got_ops == list(want_ops)
    assert got_ops == expected_ops(enc(old_tree), enc(new_tree), flags)
    tracked = apply_inline(tracked, data)
    assert tracked == closure_files(enc(new_tree), flags)
    return tracked, data


def test_inline_deltas_with_every_op_for_a_narrow_subscription(fc: TestClient) -> None:
    flags = "checkout,later"
    publish_ok(fc, "billing", V1)
    with events(fc, f"ns=billing:{flags}") as sse:
        first = sse.event()
        check_first(first, "billing", 1, closure_files(enc(V1), flags))
        tracked = snapshot_tree(fc, first.data)
        assert set(tracked) == {
            "namespace.toml",
            "flags/checkout.toml",
            "segments/employees.toml",
            "segments/staff.toml",
        }
        prev = first.data

        # The flag starts using an existing segment whose bytes also changed: enter.
        v2 = {
            **V1,
            "flags/checkout.toml": "segments = ['employees', 'beta']\n",
            "segments/beta.toml": "b = 2\n",
        }
        tracked, prev = follow(
            fc, sse, "billing", flags, tracked, prev, V1, v2,
            [("flags/checkout.toml", "modified"), ("segments/beta.toml", "enter")],
        )  # fmt: skip
        # It stops using employees (and so staff): leave, the files still exist.
        v3 = {**v2, "flags/checkout.toml": "segments = ['beta']\n"}
        tracked, prev = follow(
            fc, sse, "billing", flags, tracked, prev, v2, v3,
            [
                ("flags/checkout.toml", "modified"),
                ("segments/employees.toml", "leave"),
                ("segments/staff.toml", "leave"),
            ],
        )  # fmt: skip
        # A subscribed flag that did not exist appears with a new segment: added.
        v4 = {
            **v3,
            "namespace.toml": "name = 'billing'\nowner = 'team'\n",
            "flags/later.toml": "[[rules]]\nsegment = 'newseg'\n",
            "segments/newseg.toml": "n = 1\n",
        }
        tracked, prev = follow(
            fc, sse, "billing", flags, tracked, prev, v3, v4,
            [
                ("flags/later.toml", "added"),
                ("namespace.toml", "modified"),
                ("segments/newseg.toml", "added"),
            ],
        )  # fmt: skip
        # Both deleted from the namespace: removed; the other flag gains gamma: enter.
        v5 = {k: v for k, v in v4.items() if k not in ("flags/later.toml", "segments/newseg.toml")}
        v5["flags/checkout.toml"] = "segments = ['beta', 'gamma']\n"
        tracked, prev = follow(
            fc, sse, "billing", flags, tracked, prev, v4, v5,
            [
                ("flags/checkout.toml", "modified"),
                ("flags/later.toml", "removed"),
                ("segments/gamma.toml", "enter"),
                ("segments/newseg.toml", "removed"),
            ],
        )  # fmt: skip
        # The subscribed flag itself is deleted: removed; its segments stay: leave.
        v6 = {k: v for k, v in v5.items() if k != "flags/checkout.toml"}
        tracked, prev = follow(
            fc, sse, "billing", flags, tracked, prev, v5, v6,
            [
                ("flags/checkout.toml", "removed"),
                ("segments/beta.toml", "leave"),
                ("segments/gamma.toml", "leave"),
            ],
        )  # fmt: skip
        assert tracked == {"namespace.toml": enc(v6)["namespace.toml"]}
    # The tracked tree equals the closure endpoint's tarball of the last version.
    resp = fc.get(
        ns_path("billing", "/closure") + "?version=6&subscription=Y2hlY2tvdXQsbGF0ZXI",
        headers=auth(RO),
    )
    assert resp.status_code == 200, resp.text
    assert untar(resp.content) == tracked
    assert resp.headers["etag"] == f'"v6-{closure_hash(tracked)}"'


def test_inline_deltas_for_a_wildcard_subscription(fc: TestClient) -> None:
    publish_ok(fc, "billing", V1)
    with events(fc, "ns=billing:*") as sse:
        first = sse.event()
        check_first(first, "billing", 1, enc(V1))
        tracked = snapshot_tree(fc, first.data)
        assert tracked == enc(V1)  # orphan segment gamma included for *
        prev = first.data
        v2 = {**V1, "flags/new.toml": "segment = 'gamma'\n", "segments/orph.toml": "o = 1\n"}
        tracked, prev = follow(
            fc, sse, "billing", "*", tracked, prev, V1, v2,
            [("flags/new.toml", "added"), ("segments/orph.toml", "added")],
        )  # fmt: skip
        v3 = {k: v for k, v in v2.items() if k not in ("flags/other.toml", "segments/orph.toml")}
        v3["segments/beta.toml"] = "b = 3\n"  # now an orphan, still in the * closure
        tracked, prev = follow(
            fc, sse, "billing", "*", tracked, prev, v2, v3,
            [
                ("flags/other.toml", "removed"),
                ("segments/beta.toml", "modified"),
                ("segments/orph.toml", "removed"),
            ],
        )  # fmt: skip


def test_no_event_when_the_subscription_closure_is_unchanged(fc: TestClient) -> None:
    publish_ok(fc, "billing", V1)
    with events(fc, "ns=billing:checkout") as sse:
        first = sse.event()
        tracked = snapshot_tree(fc, first.data)
        # Outside checkout's closure: an unsubscribed flag and an unreached segment.
        v2 = {**V1, "flags/other.toml": "segments = ['beta', 'gamma']\n"}
        v3 = {**v2, "segments/beta.toml": "b = 9\n"}
        assert publish_ok(fc, "billing", v2)["version"] == 2
        sse.quiet_for(1)
        assert publish_ok(fc, "billing", v3)["version"] == 3
        v4 = {**v3, "segments/staff.toml": "s = 4\n"}  # reached through employees
        assert publish_ok(fc, "billing", v4)["version"] == 4
        fr = sse.event()
        assert fr.id == "billing:4"
        assert fr.data["version"] == 4
        assert fr.data["prev_version"] == 1
        assert fr.data["prev_closure_hash"] == first.data["closure_hash"]
        assert [(e["path"], e["op"]) for e in fr.data["files"]] == [
            ("segments/staff.toml", "modified")
        ]
        tracked = apply_inline(tracked, fr.data)
        assert tracked == closure_files(enc(v4), "checkout")


# --- delivery budgets -----------------------------------------------------------------------
def test_churn_budget_switches_to_a_snapshot(make_client: MakeClient) -> None:
    fc = flags_client(make_client, churn_max_entries=2)
    publish_ok(fc, "billing", V1)
    with events(fc, "ns=billing:*") as sse:
        first = sse.event()
        tracked = snapshot_tree(fc, first.data)
        v2 = {**V1, "segments/beta.toml": "b = 2\n", "segments/gamma.toml": "g = 2\n"}
        tracked, prev = follow(
            fc, sse, "billing", "*", tracked, first.data, V1, v2,
            [("segments/beta.toml", "modified"), ("segments/gamma.toml", "modified")],
        )  # fmt: skip
        v3 = {**v2, "segments/beta.toml": "b = 3\n", "segments/gamma.toml": "g = 3\n"}
        v3["flags/z.toml"] = "z = 1\n"
        publish_ok(fc, "billing", v3)
        fr = sse.event()
        assert list(fr.data) == SNAPSHOT_KEYS
        assert fr.data["delivery"] == "snapshot"
        assert fr.id == "billing:3"
        assert fr.data["prev_version"] == 2
        assert fr.data["prev_closure_hash"] == prev["closure_hash"]
        assert fr.data["closure_hash"] == closure_hash(enc(v3))
        assert snapshot_tree(fc, fr.data) == enc(v3)


def test_inline_size_budget_switches_to_a_snapshot(make_client: MakeClient) -> None:
    fc = flags_client(make_client, inline_max_bytes=1000)
    publish_ok(fc, "billing", V1)
    with events(fc, "ns=billing:*") as sse:
        first = sse.event()
        tracked = snapshot_tree(fc, first.data)
        v2 = {**V1, "segments/beta.toml": "b = 2\n"}
        tracked, prev = follow(
            fc, sse, "billing", "*", tracked, first.data, V1, v2,
            [("segments/beta.toml", "modified")],
        )  # fmt: skip
        v3 = {**v2, "segments/beta.toml": "b = '" + "x" * 1000 + "'\n"}
        publish_ok(fc, "billing", v3)
        fr = sse.event()
        assert fr.data["delivery"] == "snapshot", fr.data
        assert fr.data["prev_version"] == 2
        assert fr.data["prev_closure_hash"] == prev["closure_hash"]
        assert snapshot_tree(fc, fr.data) == enc(v3)
        # Back under the budget: inline again, chained to the snapshot.
        v4 = {**v3, "segments/gamma.toml": "g = 4\n"}
        follow(
            fc, sse, "billing", "*", enc(v3), fr.data, v3, v4,
            [("segments/gamma.toml", "modified")],
        )  # fmt: skip


# --- retention and resync -------------------------------------------------------------------
def test_prior_version_past_retention_is_a_snapshot(make_client: MakeClient) -> None:
    fc = flags_client(make_client, retain_versions=1, retain_sec=0)
    publish_ok(fc, "billing", V1)
    with events(fc, "ns=billing:checkout") as sse:
        first = sse.event()
        snapshot_tree(fc, first.data)
        v2 = {**V1, "segments/staff.toml": "s = 2\n"}
        publish_ok(fc, "billing", v2)
        fr = sse.event()
        # No inline event was sent yet: a snapshot, not a resync (spec: resync only after
        # an inline event).
        assert fr.event == "version"
        assert fr.data["delivery"] == "snapshot"
        assert fr.data["prev_version"] == 1
        assert fr.data["prev_closure_hash"] == first.data["closure_hash"]
        assert snapshot_tree(fc, fr.data) == closure_files(enc(v2), "checkout")


def test_resync_version_too_old_after_an_inline_event(make_client: MakeClient) -> None:
    # Retention keeps the newest 2 versions only. v1 -> v2 is inline; v3 touches nothing
    # subscribed (no event, whether or not the stream sees it); at v4 the connection's last
    # delivered version (2) is past retention: resync, deterministically.
    fc = flags_client(make_client, retain_versions=2, retain_sec=0)
    publish_ok(fc, "billing", V1)
    with events(fc, "ns=billing:checkout") as sse:
        first = sse.event()
        tracked = snapshot_tree(fc, first.data)
        v2 = {**V1, "segments/staff.toml": "s = 2\n"}
        tracked, _ = follow(
            fc, sse, "billing", "checkout", tracked, first.data, V1, v2,
            [("segments/staff.toml", "modified")],
        )  # fmt: skip
        v3 = {**v2, "flags/other.toml": "segments = ['beta', 'gamma']\n"}
        publish_ok(fc, "billing", v3)
        v4 = {**v3, "segments/staff.toml": "s = 4\n"}
        publish_ok(fc, "billing", v4)
        fr = sse.event()
        assert fr.event == "resync", fr
        assert fr.id == "billing:4"
        assert list(fr.data) == [
            "protocol",
            "namespace",
            "current_version",
            "reason",
            "snapshot_url",
        ]
        assert fr.data["protocol"] == "v2" and fr.data["namespace"] == "billing"
        assert fr.data["current_version"] == 4
        assert fr.data["reason"] == "version_too_old"
        resp = fc.get(relative(fr.data["snapshot_url"]))
        assert resp.status_code == 200
        tracked = untar(resp.content)
        assert tracked == closure_files(enc(v4), "checkout")
        # The connection stays open and resumes inline from current_version.
        v5 = {**v4, "flags/checkout.toml": "segment = 'employees'\non = true\n"}
        follow(
            fc, sse, "billing", "checkout", tracked,
            {"version": 4, "closure_hash": closure_hash(tracked)}, v4, v5,
            [("flags/checkout.toml", "modified")],
        )  # fmt: skip


class _Hub:
    """A stand-in for the per-process FlagHub whose head the test moves by hand."""

    def __init__(self, head: Head) -> None:
        self.head = head
        self.inline_events: Lru[Any, Any] = Lru(1 << 20)

    def latest(self, topic: str) -> Head:
        assert topic == self.head.topic
        return self.head

    @contextlib.contextmanager
    def follow(self, heads: Sequence[Head], wake: asyncio.Event) -> Iterator[None]:
        yield


def _parse(frame: bytes) -> tuple[str | None, str | None, dict[str, Any]]:
    event = ident = None
    data: dict[str, Any] = {}
    for line in frame.decode().split("\n"):
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
    return event, ident, data


def test_resync_unknown_since_when_history_goes_backwards(fc: TestClient) -> None:
    """Over HTTP a deleted namespace ends the stream as soon as this process's hub sees the
    delete, so a restore that lands before the hub looks (another process, between two
    polls) is driven here through EventStream with the app's real store and signer."""
    svc = services(fc)
    flags = svc.flags
    trees = [V1]
    for i in range(2):
        trees.append({**trees[-1], "segments/staff.toml": f"s = {10 + i}\n"})
    for t in trees:
        publish_ok(fc, "billing", t)
    principal = flags.tokens.authenticate(SVC)
    assert principal is not None
    sub = parse_events_request("ns=billing:checkout", principal)
    head = fc.portal.call(flags.store.head, "acme", "billing")
    assert head is not None and head.head_seq == 3
    hub = _Hub(head)
    shutdown = asyncio.Event()
    stream = EventStream(
        store=flags.store,
        hub=hub,  # type: ignore[arg-type]
        signer=flags.signer,
        policy=flags.policy,
        principal=principal,
        namespaces=sub.namespaces,
        heads=[head],
        base_url="http://testserver",
        keepalive_s=1,
        max_duration_s=60,
        shutdown=shutdown,
        clock_ms=svc.engine.clock,
    )
    gen = stream.frames()

    async def next_event() -> tuple[str | None, str | None, dict[str, Any]]:
        async with asyncio.timeout(10):
            while True:
                parsed = _parse(await gen.__anext__())
                if parsed[0] is not None:
                    return parsed

    try:
        event, ident, data = fc.portal.call(next_event)
        assert (event, ident, data["delivery"]) == ("version", "billing:3", "snapshot")
        # Restored from an older backup: deleted and republished with fewer versions.
        topic = topic_of("acme", "billing")
        fc.portal.call(lambda: svc.engine.delete_topic(topic, if_empty=False))
        restored = {**V1, "segments/employees.toml": "segment = 'staff'\nr = 1\n"}
        assert publish_ok(fc, "billing", restored)["version"] == 1
        new_head = fc.portal.call(flags.store.head, "acme", "billing")
        assert new_head is not None and new_head.head_seq == 1
        assert new_head.epoch != head.epoch
        hub.head = new_head
        event, ident, data = fc.portal.call(next_event)
        assert event == "resync" and ident == "billing:1"
        assert data["reason"] == "unknown_since"
        assert data["current_version"] == 1 and data["protocol"] == "v2"
        tracked = snapshot_tree(
            fc, {**data, "closure_hash": closure_hash(closure_files(enc(restored), "checkout"))}
        )
        # Then inline again from the restored history.
        v2 = {**restored, "segments/staff.toml": "s = 99\n"}
        publish_ok(fc, "billing", v2)
        hub.head = fc.portal.call(flags.store.head, "acme", "billing")
        event, ident, data = fc.portal.call(next_event)
        assert (event, ident) == ("version", "billing:2")
        assert data["delivery"] == "inline" and data["prev_version"] == 1
        tracked = apply_inline(tracked, data)
        assert tracked == closure_files(enc(v2), "checkout")
    finally:
        fc.portal.call(gen.aclose)


# --- keepalive and superadmin ---------------------------------------------------------------
def test_keepalive_when_idle(fc: TestClient) -> None:
    publish_ok(fc, "billing", V1)
    with events(fc, "ns=billing:*") as sse:
        sse.event()
        started = time.monotonic()
        fr = sse.frame()
        assert fr.is_keepalive, fr
        assert fr.comments == ["keepalive"] and fr.id is None and not fr.data
        assert time.monotonic() - started < 5
        assert sse.frame().is_keepalive


def test_superadmin_labels_carry_the_tenant(fc: TestClient) -> None:
    publish_ok(fc, "billing", V1)
    globex = {**V1, "namespace.toml": "name = 'globex billing'\n"}
    publish_ok(fc, "billing", globex, tenant="globex", token=OTHER)
    query = "ns=acme/billing:checkout&ns=globex/billing:*&since=acme/billing:1"
    with events(fc, query, token=ADMIN) as sse:
        by_ns = {fr.data["namespace"]: fr for fr in (sse.event(), sse.event())}
        assert set(by_ns) == {"acme/billing", "globex/billing"}
        acme_closure = closure_files(enc(V1), "checkout")
        check_first(by_ns["acme/billing"], "acme/billing", 1, acme_closure)
        check_first(by_ns["globex/billing"], "globex/billing", 1, enc(globex))
        assert (
            "/tenants/acme/namespaces/billing/closure" in by_ns["acme/billing"].data["snapshot_url"]
        )
        assert "/tenants/globex/" in by_ns["globex/billing"].data["snapshot_url"]
        tracked = snapshot_tree(fc, by_ns["acme/billing"].data)
        assert snapshot_tree(fc, by_ns["globex/billing"].data) == enc(globex)
        v2 = {**V1, "segments/staff.toml": "s = 5\n"}
        publish_ok(fc, "billing", v2)
        fr = sse.event()
        assert fr.id == "acme/billing:2"
        assert fr.data["namespace"] == "acme/billing"
        apply_inline(tracked, fr.data)


def test_server_shutdown_ends_open_streams_at_once(make_client: MakeClient) -> None:
    # GIVEN an idle open stream past its first event (keepalives 30 s apart)
    client = flags_client(make_client, keepalive_sec=30)
    publish_ok(client, "billing", V1)
    with events(client, "ns=billing:*") as sse:
        sse.event()
        # WHEN the server begins a graceful shutdown
        started = time.monotonic()
        client.portal.call(begin_shutdown, client.app)  # type: ignore[union-attr]
        # THEN the stream ends now, not at its next keepalive
        rest = list(sse._lines)
        assert time.monotonic() - started < 10
        assert not any(line.startswith(":") for line in rest), rest


def test_connections_in_one_state_share_events_and_others_get_their_own(fc: TestClient) -> None:
    # GIVEN two narrow connections and one wildcard connection, all at version 1
    publish_ok(fc, "billing", V1)
    with (
        events(fc, "ns=billing:checkout") as narrow1,
        events(fc, "ns=billing:checkout") as narrow2,
        events(fc, "ns=billing:*") as wide,
    ):
        for sse in (narrow1, narrow2, wide):
            sse.event()
        # WHEN one publish changes a file every one of them holds
        v2 = {**V1, "segments/staff.toml": "s = 2\n"}
        publish_ok(fc, "billing", v2)
        a, b, w = narrow1.event(), narrow2.event(), wide.event()
        # THEN the narrow ones get the same event, the wildcard its own, each its closure's
        assert a.data == b.data and a.data["delivery"] == "inline"
        assert a.data["closure_hash"] == closure_hash(closure_files(enc(v2), "checkout"))
        assert w.data["closure_hash"] == closure_hash(enc(v2))
        assert w.data["prev_closure_hash"] == closure_hash(enc(V1))
        assert a.data["prev_closure_hash"] == closure_hash(closure_files(enc(V1), "checkout"))
