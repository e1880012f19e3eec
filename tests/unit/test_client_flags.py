"""headwater_client.flags: FlagSubscriber's event handling against a fake closure endpoint
(httpx.MockTransport), and the event streams it reads (httpx-sse's parser under it, plus the
standard's rules it adds: a BOM, UTF-8 whatever the charset, `retry`, events without data).
Hashes and event payloads are built here by hand from the spec's rules, not with the module
under test."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import re
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from headwater.flags.tarball import build_snapshot
from headwater_client.flags import FlagSubscriber

BASE = "http://flags.test"
TOKEN = "tok_" + "x" * 30


# --- independent helpers ----------------------------------------------------------------------
def chash(files: Mapping[str, bytes]) -> str:
    """The spec's closure hash, written out: sorted by path bytes, u32 BE length, path, raw
    sha256 of the content; sha256 of the buffer."""
    buf = b""
    for path in sorted(files, key=lambda p: p.encode("utf-8")):
        raw = path.encode("utf-8")
        buf += struct.pack(">I", len(raw)) + raw + hashlib.sha256(files[path]).digest()
    return "sha256:" + hashlib.sha256(buf).hexdigest()


def content_entry(path: str, op: str, content: bytes) -> dict[str, str]:
    return {
        "path": path,
        "op": op,
        "sha256": hashlib.sha256(content).hexdigest(),
        "content_b64": base64.b64encode(content).decode(),
    }


def sub_b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


V1 = {
    "namespace.toml": b'name = "billing"\n',
    "flags/a.toml": b'segment = "staff"\n',
    "segments/staff.toml": b"emails = []\n",
}
V2 = {
    "namespace.toml": b'name = "billing"\nowner = "team"\n',
    "flags/a.toml": b'segments = ["beta"]\n',
    "flags/b.toml": b"on = true\n",
    "segments/beta.toml": b"pct = 5\n",
}
V3 = {**V2, "flags/b.toml": b"on = false\n"}
V5 = {"namespace.toml": b'name = "billing"\n', "flags/a.toml": b"on = 1\n"}
CLOSURES = {1: V1, 2: V2, 3: V3, 5: V5}


def inline_v2(prev_hash: str | None = None) -> dict[str, Any]:
    """The delta v1 -> v2 of subscription a,b: namespace modified, flag a modified, flag b
    added, segment beta entered, segment staff left."""
    return {
        "protocol": "v2",
        "namespace": "billing",
        "version": 2,
        "prev_version": 1,
        "prev_closure_hash": prev_hash or chash(V1),
        "closure_hash": chash(V2),
        "delivery": "inline",
        "files": [
            content_entry("flags/a.toml", "modified", V2["flags/a.toml"]),
            content_entry("flags/b.toml", "added", V2["flags/b.toml"]),
            content_entry("namespace.toml", "modified", V2["namespace.toml"]),
            content_entry("segments/beta.toml", "enter", V2["segments/beta.toml"]),
            {"path": "segments/staff.toml", "op": "leave"},
        ],
    }


def signed_url(version: int, label_tenant: str = "acme", slug: str = "billing") -> str:
    return (
        f"{BASE}/api/v1/tenants/{label_tenant}/namespaces/{slug}/closure"
        f"?version={version}&subscription={sub_b64('a,b')}&token=signed{version}"
    )


def snapshot_event(version: int, prev: int | None = None, url: str | None = None) -> str:
    return json.dumps(
        {
            "protocol": "v2",
            "namespace": "billing",
            "version": version,
            "prev_version": prev,
            "prev_closure_hash": chash(CLOSURES[prev]) if prev else None,
            "closure_hash": chash(CLOSURES[version]),
            "delivery": "snapshot",
            "snapshot_url": url or signed_url(version),
            "snapshot_size_bytes": 10240,
        }
    )


@dataclass
class FakeServer:
    """The closure endpoint: serves build_snapshot(CLOSURES[version]) with the spec's ETag,
    304 on a matching If-None-Match; `bad_bodies` corrupt the next N responses; `status`
    answers the next N requests with a status; `on_request` sees every request first."""

    bad_bodies: int = 0
    statuses: list[int] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)
    on_request: Callable[[httpx.Request], None] | None = None
    etag_hash_override: str | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.on_request is not None:
            self.on_request(request)
        if self.statuses:
            status = self.statuses.pop(0)
            return httpx.Response(
                status,
                json={"error": {"code": "boom", "message": "injected"}},
                headers={"Retry-After": "0"},
            )
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        version = int(request.url.params["version"])
        files = CLOSURES[version]
        etag = f'"v{version}-{self.etag_hash_override or chash(files)}"'
        if request.headers.get("if-none-match") == etag:
            return httpx.Response(304, headers={"ETag": etag})
        body = build_snapshot(files).body
        if self.bad_bodies:
            self.bad_bodies -= 1
            body = build_snapshot({**files, "flags/evil.toml": b"x = 1\n"}).body
        return httpx.Response(
            200, content=body, headers={"ETag": etag, "Content-Type": "application/x-tar"}
        )


def make(server: FakeServer, subs: Mapping[str, Any] | None = None, **kw: Any) -> FlagSubscriber:
    http = httpx.Client(transport=httpx.MockTransport(server))
    kw.setdefault("snapshot_retry_s", 0)
    return FlagSubscriber(BASE, TOKEN, subs or {"billing": ["b", "a"]}, http=http, **kw)


def at_v1(server: FakeServer, **kw: Any) -> FlagSubscriber:
    sub = make(server, **kw)
    assert sub.handle_event("version", "billing:1", snapshot_event(1))
    assert sub.tree("billing") == V1
    return sub


# --- snapshot and inline ----------------------------------------------------------------------
def test_first_snapshot_applies_verified_tree() -> None:
    server = FakeServer()
    sub = make(server)
    assert sub.version("billing") is None and sub.tree("billing") is None
    assert sub.handle_event("version", "billing:1", snapshot_event(1))
    assert sub.tree("billing") == V1
    assert sub.closure_hash("billing") == chash(V1)
    assert sub.version("billing") == 1
    assert sub.last_error("billing") is None
    assert sub.stats().namespaces["billing"].snapshots_applied == 1
    (req,) = server.requests
    assert str(req.url) == signed_url(1)


def test_inline_delta_applies_without_fetching() -> None:
    server = FakeServer()
    sub = at_v1(server)
    assert sub.handle_event("version", "billing:2", json.dumps(inline_v2()))
    assert sub.tree("billing") == V2
    assert sub.closure_hash("billing") == chash(V2)
    assert sub.version("billing") == 2
    assert len(server.requests) == 1  # only the first snapshot
    stats = sub.stats().namespaces["billing"]
    assert (stats.inline_applied, stats.fallbacks, stats.errors) == (1, 0, 0)


def corrupt_pre_apply(data: dict[str, Any]) -> None:
    data["prev_closure_hash"] = "sha256:" + "0" * 64


def corrupt_per_file(data: dict[str, Any]) -> None:
    data["files"][1]["content_b64"] = base64.b64encode(b"on = false\n").decode()


def corrupt_post_apply(data: dict[str, Any]) -> None:
    # every entry self-consistent, but the delta forgets the segment that entered
    data["files"] = [f for f in data["files"] if f["path"] != "segments/beta.toml"]


@pytest.mark.parametrize(
    ("point", "corrupt"),
    [
        ("pre_apply", corrupt_pre_apply),
        ("per_file", corrupt_per_file),
        ("post_apply", corrupt_post_apply),
    ],
)
def test_each_check_falls_back_to_the_bearer_closure(
    point: str, corrupt: Callable[[dict[str, Any]], None]
) -> None:
    server = FakeServer()
    sub = at_v1(server)
    seen_during_fallback: list[Any] = []
    server.on_request = lambda _r: seen_during_fallback.append(
        (sub.tree("billing"), sub.version("billing"), sub.last_error("billing"))
    )
    data = inline_v2()
    corrupt(data)
    assert sub.handle_event("version", "billing:2", json.dumps(data))
    # while the fallback was fetched the old tree was still served and the error recorded
    ((tree, version, err),) = seen_during_fallback
    assert (tree, version) == (V1, 1)
    assert err is not None and err.point == point and err.version == 2
    # the bearer closure endpoint at the event's version, for the canonical subscription
    req = server.requests[-1]
    assert req.url.path == "/api/v1/tenants/acme/namespaces/billing/closure"
    assert parse_qs(urlsplit(str(req.url)).query) == {
        "version": ["2"],
        "subscription": [sub_b64("a,b")],
    }
    assert sub.tree("billing") == V2
    assert sub.closure_hash("billing") == chash(V2)
    assert sub.last_error("billing") is err  # kept: the last failure, not cleared
    stats = sub.stats().namespaces["billing"]
    assert (stats.fallbacks, stats.snapshots_applied, stats.inline_applied) == (1, 2, 0)
    # and the chain continues inline from the fallback's state
    v3 = {
        "protocol": "v2",
        "namespace": "billing",
        "version": 3,
        "prev_version": 2,
        "prev_closure_hash": chash(V2),
        "closure_hash": chash(V3),
        "delivery": "inline",
        "files": [content_entry("flags/b.toml", "modified", V3["flags/b.toml"])],
    }
    assert sub.handle_event("version", "billing:3", json.dumps(v3))
    assert sub.tree("billing") == V3


def test_wrong_closure_hash_leaves_state_untouched() -> None:
    server = FakeServer()
    sub = at_v1(server, snapshot_attempts=2)
    data = inline_v2()
    data["closure_hash"] = "sha256:" + "1" * 64
    assert not sub.handle_event("version", "billing:2", json.dumps(data))
    assert sub.tree("billing") == V1 and sub.version("billing") == 1
    assert sub.closure_hash("billing") == chash(V1)
    err = sub.last_error("billing")
    assert err is not None and err.point == "snapshot"  # the fallback could not verify
    assert len(server.requests) == 3  # first snapshot + two fallback attempts
    assert sub._reconnect.is_set()  # the stream is dropped: the next first event reseats


def test_tenant_is_learned_from_the_snapshot_url() -> None:
    server = FakeServer()
    sub = make(server)  # no tenant= and a bare slug
    url = signed_url(1, label_tenant="globex")
    assert sub.handle_event("version", "billing:1", snapshot_event(1, url=url))
    assert sub.handle_event("version", "billing:2", json.dumps(inline_v2("sha256:" + "0" * 64)))
    assert server.requests[-1].url.path == "/api/v1/tenants/globex/namespaces/billing/closure"
    assert sub.tree("billing") == V2


def test_explicit_tenant_and_superadmin_labels() -> None:
    server = FakeServer()
    sub = make(server, {"acme/billing": "a,b"})
    data = json.loads(snapshot_event(1))
    data["namespace"] = "acme/billing"
    assert sub.handle_event("version", "acme/billing:1", json.dumps(data))
    assert sub.tree("acme/billing") == V1
    url, headers = sub.events_request()
    assert "ns=acme/billing:a,b" in url and "since=acme/billing:1" in url
    assert headers["Last-Event-ID"] == "acme/billing:1"
    # a non-superadmin connection labels `acme/billing` as bare `billing`: still routed
    assert sub.handle_event("version", "billing:2", json.dumps(inline_v2()))
    assert sub.version("acme/billing") == 2


# --- snapshots: the fourth check ----------------------------------------------------------------
def test_bad_snapshot_is_refetched_then_applied() -> None:
    server = FakeServer(bad_bodies=2)
    sub = make(server, snapshot_attempts=3)
    assert sub.handle_event("version", "billing:1", snapshot_event(1))
    assert sub.tree("billing") == V1
    assert len(server.requests) == 3
    err = sub.last_error("billing")
    assert err is not None and err.point == "snapshot"
    assert sub.stats().namespaces["billing"].snapshot_retries == 2


def test_bad_snapshot_exhausts_attempts_state_untouched() -> None:
    server = FakeServer()
    sub = at_v1(server, snapshot_attempts=3)
    server.bad_bodies = 3
    assert not sub.handle_event("version", "billing:2", snapshot_event(2, prev=1))
    assert sub.tree("billing") == V1
    assert sub.version("billing") == 1
    assert sub.closure_hash("billing") == chash(V1)
    err = sub.last_error("billing")
    assert err is not None and err.point == "snapshot" and err.version == 2
    assert len(server.requests) == 4
    assert sub.last_refresh_error() is err


def test_signed_url_refused_uses_bearer_endpoint() -> None:
    server = FakeServer(statuses=[401])
    sub = make(server)
    assert sub.handle_event("version", "billing:1", snapshot_event(1))
    assert sub.tree("billing") == V1
    first, second = server.requests
    assert "token" in first.url.params and "token" not in second.url.params


def test_same_version_snapshot_is_a_conditional_get() -> None:
    server = FakeServer()
    sub = at_v1(server)
    sub._seen_on_connection.clear()  # as after a reconnect: the first event is a snapshot
    assert sub.handle_event("version", "billing:1", snapshot_event(1))
    req = server.requests[-1]
    assert req.headers["if-none-match"] == f'"v1-{chash(V1)}"'
    assert sub.stats().namespaces["billing"].not_modified == 1
    assert sub.tree("billing") == V1


# --- resync and ordering -----------------------------------------------------------------------
def resync(version: int, reason: str = "version_too_old") -> str:
    return json.dumps(
        {
            "protocol": "v2",
            "namespace": "billing",
            "current_version": version,
            "reason": reason,
            "snapshot_url": signed_url(version),
        }
    )


def test_resync_resets_state_to_current_version() -> None:
    server = FakeServer()
    sub = at_v1(server)
    assert sub.handle_event("version", "billing:2", json.dumps(inline_v2()))
    assert sub.handle_event("resync", "billing:5", resync(5))
    assert sub.tree("billing") == V5
    assert sub.closure_hash("billing") == chash(V5)
    assert sub.version("billing") == 5
    assert sub.stats().namespaces["billing"].resyncs == 1
    # a resync to an older version (unknown_since: the server was restored) is followed too
    assert sub.handle_event("resync", "billing:3", resync(3, "unknown_since"))
    assert sub.tree("billing") == V3 and sub.version("billing") == 3


def test_resync_tarball_must_match_its_etag() -> None:
    server = FakeServer(etag_hash_override="sha256:" + "2" * 64)
    sub = at_v1(FakeServer())
    sub._http = httpx.Client(transport=httpx.MockTransport(server))
    assert not sub.handle_event("resync", "billing:5", resync(5))
    assert sub.tree("billing") == V1
    err = sub.last_error("billing")
    assert err is not None and err.point == "snapshot"


def test_resync_protocol_downgrade_is_fatal() -> None:
    sub = at_v1(FakeServer())
    assert not sub.handle_event("resync", "billing:5", resync(5, "protocol_downgrade"))
    fatal = sub.fatal_error
    assert fatal is not None and fatal.point == "fatal"
    assert sub.tree("billing") == V1
    assert not sub.wait_for_version("billing", 5, timeout=5)


def test_out_of_order_versions_are_ignored() -> None:
    server = FakeServer()
    sub = make(server)
    assert sub.handle_event("version", "billing:3", snapshot_event(3))
    before = len(server.requests)
    assert not sub.handle_event("version", "billing:2", json.dumps(inline_v2()))
    assert not sub.handle_event("version", "billing:3", snapshot_event(3, prev=2))
    assert not sub.handle_event("version", "billing:1", snapshot_event(1))
    assert len(server.requests) == before  # nothing fetched for ignored events
    assert sub.tree("billing") == V3 and sub.version("billing") == 3
    err = sub.last_error("billing")
    assert err is not None and err.point == "order" and err.version == 1
    assert sub.stats().namespaces["billing"].ignored == 3


def test_garbage_and_foreign_events_are_recorded_not_raised() -> None:
    sub = at_v1(FakeServer())
    assert not sub.handle_event("version", None, "{not json")
    assert not sub.handle_event("version", None, json.dumps({**inline_v2(), "namespace": "x"}))
    assert not sub.handle_event("version", None, json.dumps({**inline_v2(), "protocol": "v3"}))
    assert not sub.handle_event("message", None, "hello")
    assert sub.tree("billing") == V1
    err = sub.last_refresh_error()
    assert err is not None and err.point == "protocol"


# --- the connection loop over a fake events endpoint ------------------------------------------
SSE_HEADERS = {"Content-Type": "text/event-stream"}


def sse(*events: tuple[str, str, str]) -> bytes:
    return b"".join(f"event: {e}\nid: {i}\ndata: {d}\n\n".encode() for e, i, d in events)


def test_run_once_streams_and_resumes_with_hints() -> None:
    closures = FakeServer()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/api/v1/events":
            return closures(request)
        seen.append(request)
        body = sse(
            ("version", "billing:1", snapshot_event(1)),
            ("version", "billing:2", json.dumps(inline_v2())),
        )
        return httpx.Response(200, content=b":keepalive\n\n" + body, headers=SSE_HEADERS)

    sub = FlagSubscriber(
        BASE, TOKEN, {"billing": "a,b"}, http=httpx.Client(transport=httpx.MockTransport(handler))
    )
    assert sub.run_once() == (True, None)
    assert sub.tree("billing") == V2
    assert sub.run_once() == (True, None)  # the repeated stream: v1 snapshot baseline, v2 again
    first, second = seen
    assert first.url.params.get_list("ns") == ["billing:a,b"]
    assert "since" not in first.url.params and "last-event-id" not in first.headers
    assert second.url.params["since"] == "billing:2"
    assert second.headers["last-event-id"] == "billing:2"
    assert second.headers["authorization"] == f"Bearer {TOKEN}"
    assert sub.stats().connections == 2


def awkward_stream() -> bytes:
    """One connection's stream written every way the standard allows: a BOM, a `retry` on
    its own, a comment, CRLF, CR and LF line endings, `data:` with and without the space and a
    payload over several data lines, a non-ASCII payload, a bad and a bare `retry`, an event
    without data, and an event the stream ends before finishing."""
    crlf = f"event: version\r\nid: billing:1\r\ndata: {snapshot_event(1)}\r\n\r\n"
    lines = json.dumps(inline_v2(), indent=1).split("\n")
    data = "".join(f"data:{line}\r" if i % 2 else f"data: {line}\r" for i, line in enumerate(lines))
    cr = f"event: version\rid: billing:2\r{data}\r"
    foreign = json.dumps({**inline_v2(), "namespace": "é🙂", "version": 9}, ensure_ascii=False)
    v3 = {
        "protocol": "v2",
        "namespace": "billing",
        "version": 3,
        "prev_version": 2,
        "prev_closure_hash": chash(V2),
        "closure_hash": chash(V3),
        "delivery": "inline",
        "files": [content_entry("flags/b.toml", "modified", V3["flags/b.toml"])],
    }
    text = (
        "\ufeffretry: 1500\n\n:keepalive\n\n"
        + crlf
        + cr
        + f"event: version\nid: billing:9\ndata: {foreign}\n\n"
        + "retry: -1\nretry: x\n\n"
        + "event: version\nid: billing:7\n\n"  # no data field: not dispatched
        + f"event: version\nid: billing:3\ndata: {json.dumps(v3)}\n"  # no blank line
    )
    return text.encode()


@pytest.mark.parametrize(
    ("chunked", "charset"),
    [(False, ""), (True, ""), (True, "; charset=iso-8859-1")],
    ids=["whole", "byte-by-byte", "charset-ignored"],
)
def test_event_stream_parsing(chunked: bool, charset: str) -> None:
    closures = FakeServer()
    body = awkward_stream()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/api/v1/events":
            return closures(request)
        headers = {"Content-Type": "text/event-stream" + charset}
        if not chunked:
            return httpx.Response(200, content=body, headers=headers)
        # every boundary splits something: the BOM, a CRLF, a CR and the next line, an é
        one_byte_chunks = iter([body[i : i + 1] for i in range(len(body))])
        return httpx.Response(200, content=one_byte_chunks, headers=headers)

    sub = FlagSubscriber(
        BASE,
        TOKEN,
        {"billing": "a,b"},
        http=httpx.Client(transport=httpx.MockTransport(handler)),
        reconnect_min_s=0.01,
        reconnect_max_s=30,
    )
    assert sub.run_once() == (True, None)
    # the snapshot, then the inline delta spread over CR-terminated data lines, and not v3
    assert sub.tree("billing") == V2 and sub.version("billing") == 2
    stats = sub.stats().namespaces["billing"]
    assert (stats.snapshots_applied, stats.inline_applied, stats.errors) == (1, 1, 0)
    # the payload was read as UTF-8 (the label quoted in the error), and the event without
    # data after it recorded nothing
    err = sub.last_refresh_error()
    assert err is not None and err.point == "protocol" and "'é🙂'" in err.message, err
    # retry: 1500 holds (the negative and non-numeric ones do not count)
    assert all(0.75 <= sub._backoff(0) <= 1.5 for _ in range(20))
    _, headers = sub.events_request()
    assert headers["Last-Event-ID"] == "billing:2"


def test_a_stream_that_is_not_an_event_stream_is_a_connection_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/api/v1/events":
            return FakeServer()(request)
        body = sse(("version", "billing:1", snapshot_event(1)))
        return httpx.Response(200, content=body, headers={"Content-Type": "text/plain"})

    sub = FlagSubscriber(
        BASE, TOKEN, {"billing": "a,b"}, http=httpx.Client(transport=httpx.MockTransport(handler))
    )
    assert sub.run_once() == (False, None)
    assert sub.tree("billing") is None and sub.fatal_error is None
    err = sub.last_refresh_error()
    assert err is not None and err.point == "connection" and "text/event-stream" in err.message


def test_a_transport_error_mid_stream_keeps_what_was_applied() -> None:
    def chunks() -> Iterator[bytes]:
        yield sse(("version", "billing:1", snapshot_event(1)))
        raise httpx.ReadTimeout("no keepalive")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/api/v1/events":
            return FakeServer()(request)
        return httpx.Response(200, content=chunks(), headers=SSE_HEADERS)

    sub = FlagSubscriber(
        BASE, TOKEN, {"billing": "a,b"}, http=httpx.Client(transport=httpx.MockTransport(handler))
    )
    assert sub.run_once() == (True, None)  # healthy: v1 was applied before the error
    assert sub.tree("billing") == V1
    err = sub.last_refresh_error()
    assert err is not None and err.point == "connection" and "ReadTimeout" in err.message


@pytest.mark.parametrize("status", [400, 401, 403])
def test_refusal_statuses_are_fatal(status: int) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"code": "forbidden", "message": "no"}})

    sub = FlagSubscriber(
        BASE, TOKEN, {"billing": "*"}, http=httpx.Client(transport=httpx.MockTransport(handler))
    )
    sub.start()
    assert not sub.wait_for_version("billing", 1, timeout=5)
    deadline = time.monotonic() + 5
    while sub.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not sub.running
    fatal = sub.fatal_error
    assert fatal is not None and fatal.status == status and "no" in fatal.message
    sub.stop()


def test_retryable_statuses_back_off_and_honour_retry_after() -> None:
    calls: list[float] = []
    lock = threading.Lock()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/api/v1/events":
            return FakeServer()(request)
        with lock:
            calls.append(0)
            n = len(calls)
        if n == 1:
            return httpx.Response(429, headers={"Retry-After": "0"}, json={})
        if n == 2:
            return httpx.Response(503, json={})
        body = sse(("version", "billing:1", snapshot_event(1)))
        return httpx.Response(200, content=body, headers=SSE_HEADERS)

    sub = FlagSubscriber(
        BASE,
        TOKEN,
        {"billing": "a,b"},
        http=httpx.Client(transport=httpx.MockTransport(handler)),
        reconnect_min_s=0.01,
        reconnect_max_s=0.05,
    )
    assert sub.run_once() == (False, 0.0)
    err = sub.last_refresh_error()
    assert err is not None and err.point == "http" and err.status == 429
    with sub:
        assert sub.wait_for_version("billing", 1, timeout=5)
    assert sub.fatal_error is None
    assert sub.stats().connect_failures == 2


def test_wait_for_version_wakes_on_apply() -> None:
    sub = at_v1(FakeServer())
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(sub.wait_for_version("billing", 2, 5)))
    waiter.start()
    assert sub.handle_event("version", "billing:2", json.dumps(inline_v2()))
    waiter.join(5)
    assert result == [True]
    assert sub.wait_for_version("billing", 1, timeout=0)
    assert not sub.wait_for_version("billing", 3, timeout=0.01)


def test_bad_subscriptions_are_refused() -> None:
    for subs in ({}, {"billing": []}, {"billing": "A"}, {"billing:x": "*"}, {"a/b/c": "*"}):
        with pytest.raises(ValueError):
            FlagSubscriber(BASE, TOKEN, subs)


# --- what the client needs installed -----------------------------------------------------------
REPO = Path(__file__).resolve().parents[2]
_BLOCKING_IMPORT = """
import importlib.abc, sys
blocked = set(sys.argv[1:])
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not installed)")
        return None
sys.meta_path.insert(0, Block())
import headwater_client, headwater_client.cli
from headwater_client import FlagSubscriber
"""


def test_the_client_imports_without_the_layers_dependencies() -> None:
    """`pip install '.[client]'` installs httpx, httpx-sse, typer and rich, and none of the
    Lambda layer's runtime requirements: the client, FlagSubscriber and the flags modules it
    shares included, imports with every one of them missing."""

    def canon(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    lines = (REPO / "layers" / "headwater" / "requirements.txt").read_text().splitlines()
    layer = {canon(line.split("==")[0]) for line in lines if line and not line.startswith("#")}
    modules = importlib.metadata.packages_distributions()
    blocked = sorted(m for m, dists in modules.items() if layer & {canon(d) for d in dists})
    assert {"boto3", "fastapi", "orjson", "yaml"} <= set(blocked), blocked
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKING_IMPORT, *blocked],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-3000:]
