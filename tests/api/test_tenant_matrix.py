"""Tenant isolation, route by route (issue 23 item 5): every route the app serves, enumerated
from the FastAPI app itself (a new route without an entry here fails
`test_every_route_has_a_matrix_entry`), called with every kind of credential — a full key, a
read-only, a write-only, an admin-only and a prefix-limited key, no key and a wrong key — and
the outcome each must get (docs/security.md has the model). For the prefix-limited key every
name a route takes (path, body or header: a fork source, a router's source and dest, a watch
body topic, a dead-letter topic) is also tried outside its allowlist (403), and no response it
gets anywhere may carry another tenant's name.

Every call addresses names of its own (one set per case and key kind), created beforehand with
the full key; the other tenant ("secret...") has topics, a queue, streams, routers (one of them
feeding a tenant42 topic), notifications, all alive during every call."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from dashboard_helpers import item
from flags_helpers import SVC, auth, ns_path
from starlette.routing import BaseRoute
from starlette.testclient import TestClient, WebSocketDenialResponse
from tenant_helpers import (
    FOREIGN,
    FULL,
    KINDS,
    PREFIX,
    SCHEMA,
    Kind,
    mk_note,
    mk_queue,
    mk_records,
    mk_router,
    mk_stream,
    mk_topic,
    mk_touch_stream,
    seed_other_tenant,
    stream_url,
    tenant_settings,
    topic,
    user,
    with_json,
)
from test_ws import assert_ws_error, recv, request, send

from headwater.http.app import create_app
from headwater.http.lazy_routes import load_all
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = [pytest.mark.api, pytest.mark.timeout(300)]


@dataclass(frozen=True)
class N:
    """The names one call addresses: `t` the target (topic, stream, router, event type),
    `r` and `d` the names it refers to (a fork or router source, a router dest, a dead-letter
    topic); `ctx` what the case's setup made (a watch id, a configuration id)."""

    t: str
    r: str
    d: str
    ctx: Any = None


Call = Callable[[TestClient, dict[str, str], N], httpx.Response]
Setup = Callable[[TestClient, N, Kind], Any]


@dataclass(frozen=True)
class Case:
    id: str
    route: tuple[str, str]  # (method, path as the app declares it)
    call: Call
    # API-key scopes the route needs (all of them); None: an API key is not this route's
    # credential (public, X-User-ID, flag tokens), and `ok` holds whatever the key.
    needs: frozenset[str] | None
    ok: frozenset[int]
    setup: Setup | None = None
    foreign: tuple[str, ...] = ()  # fields of N the prefix key also tries outside its allowlist
    expect: dict[str, frozenset[int]] = field(default_factory=dict)  # per-kind overrides
    stream: bool = False  # an endless SSE response: only its status is looked at


def s(*codes: int) -> frozenset[int]:
    return frozenset(codes)


def need(*scopes: str) -> frozenset[str]:
    return frozenset(scopes)


def mk_config(c: TestClient, n: N, kind: Kind) -> str:
    body = {"name": "watchlist", "tickers": ["AAPL"]}
    r = c.post("/api/v2/configurations", json=body, headers=user(kind))
    assert r.status_code == 201, r.text
    return str(r.json()["config_id"])


def mk_watch(c: TestClient, n: N, kind: Kind) -> str:
    """A watch session on n.t: created with the kind's own key when it may (so the GET is the
    creator's), else with the full key (so the GET is another key's)."""
    mk_topic(c, n.t)
    headers = kind.headers if "read" in kind.scopes else FULL.headers
    r = c.post("/v0/watch", json={"topics": {n.t: {}}}, headers=headers)
    if r.status_code != 200:  # a prefix key on a foreign name: the full key's session
        r = c.post("/v0/watch", json={"topics": {n.t: {}}}, headers=FULL.headers)
    assert r.status_code == 200, r.text
    return str(r.json()["wid"])


def opened(c: TestClient, method: str, url: str, **kw: Any) -> httpx.Response:
    """An SSE response's status (and headers), closed at once."""
    with c.stream(method, url, **kw) as r:
        return r


V1_SCHEMA = {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
SEARCH_SCHEMA = {
    **V1_SCHEMA,
    "routingKey": {"jsonPointer": "/k", "required": False},
    "search": {
        "primaryTimestampField": "t",
        "fields": {
            "t": {
                "kind": "date",
                "bindings": [{"version": 1, "jsonPointer": "/t"}],
                "column": True,
            },
            "n": {
                "kind": "integer",
                "bindings": [{"version": 1, "jsonPointer": "/n"}],
                "exact": True,
            },
        },
        "rollups": {"r": {"intervals": ["1m"], "measures": {"c": {"kind": "count"}}}},
    },
}


def mk_search_stream(c: TestClient, name: str) -> None:
    """A JSON stream with a schema, routing key and search config, and one entry."""
    mk_stream(c, name)
    got = c.get(stream_url(name, "_schema"), headers=FULL.headers)
    if got.json().get("currentVersion"):
        return  # set up already (a case's setup may run again on the same names)
    r = c.post(
        stream_url(name, "_schema"),
        content=json.dumps(SEARCH_SCHEMA),
        headers={**FULL.headers, "content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    r = c.post(
        stream_url(name),
        content=json.dumps([{"n": 1, "t": 5, "k": "a"}]),
        headers={**FULL.headers, "content-type": "application/json"},
    )
    assert r.status_code == 204, r.text


TEMPLATES = {
    "templates": [{"entity": "public.todos", "fields": [{"name": "status", "encoding": "string"}]}]
}
NOTE = {"identifier": {"name": "x"}}

CASES: list[Case] = [
    # --- probes -------------------------------------------------------------------------------
    *[
        Case(f"health{p}", ("GET", p), lambda c, h, n, p=p: c.get(p, headers=h), None, s(200))
        for p in ("/health", "/healthz", "/v0/health")
    ],
    *[
        Case(f"ready{p}", ("GET", p), lambda c, h, n, p=p: c.get(p, headers=h), None, s(200))
        for p in ("/readyz", "/v0/ready")
    ],
    Case(
        "metrics",
        ("GET", "/v0/metrics"),
        lambda c, h, n: c.get("/v0/metrics", headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_queue(c, n.t),
    ),
    Case(
        "metrics.json",
        ("GET", "/v0/metrics"),
        lambda c, h, n: c.get("/v0/metrics", headers={**h, "accept": "application/json"}),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_queue(c, n.t),
    ),
    # --- the API reference: public, the same for every deployment (no tenant's names) ---------
    Case(
        "openapi",
        ("GET", "/openapi.json"),
        lambda c, h, n: c.get("/openapi.json", headers=h),
        None,
        s(200),
    ),
    Case("docs", ("GET", "/docs"), lambda c, h, n: c.get("/docs", headers=h), None, s(200)),
    Case(
        "docs.asset",
        ("GET", "/docs/{asset}"),
        lambda c, h, n: c.get("/docs/swagger-ui.css", headers=h),
        None,
        s(200),
    ),
    # --- /v0 topics ---------------------------------------------------------------------------
    Case(
        "topic.put",
        ("PUT", "/v0/topics/{topic}"),
        lambda c, h, n: c.put(topic(n.t), json={}, headers=h),
        need("admin"),
        s(200, 201),
        foreign=("t",),
    ),
    Case(
        "topic.put.dead_letter",
        ("PUT", "/v0/topics/{topic}"),
        lambda c, h, n: c.put(
            topic(n.t), json={"type": "queue", "max_deliveries": 1, "dead_letter": n.r}, headers=h
        ),
        need("admin"),
        s(200, 201),
        foreign=("r",),
    ),
    Case(
        "topic.get",
        ("GET", "/v0/topics/{topic}"),
        lambda c, h, n: c.get(topic(n.t), headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_topic(c, n.t),
        foreign=("t",),
    ),
    Case(
        "topic.list",
        ("GET", "/v0/topics"),
        lambda c, h, n: c.get("/v0/topics", headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_topic(c, n.t),
    ),
    Case(
        "topic.delete",
        ("DELETE", "/v0/topics/{topic}"),
        lambda c, h, n: c.delete(topic(n.t), headers=h),
        need("delete"),
        s(200),
        setup=lambda c, n, k: mk_topic(c, n.t),
        foreign=("t",),
    ),
    Case(
        "topic.append",
        ("POST", "/v0/topics/{topic}"),
        lambda c, h, n: c.post(topic(n.t), json={"records": [{"data": 1}]}, headers=h),
        need("write"),
        s(200, 201),
        foreign=("t",),
    ),
    Case(
        "topic.append.config_dead_letter",
        ("POST", "/v0/topics/{topic}"),
        lambda c, h, n: c.post(
            topic(n.t),
            json={"records": [{"data": 1}], "config": {"type": "queue", "dead_letter": n.r}},
            headers=h,
        ),
        need("write"),
        s(201),
        foreign=("r",),
    ),
    Case(
        "topic.diff",
        ("POST", "/v0/topics/{topic}/diff"),
        lambda c, h, n: c.post(topic(n.t, "/diff"), json={}, headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_records(c, n.t),
        foreign=("t",),
    ),
    Case(
        "topic.delete_records",
        ("POST", "/v0/topics/{topic}/delete"),
        lambda c, h, n: c.post(topic(n.t, "/delete"), json={"before_seq": 2}, headers=h),
        need("delete"),
        s(200),
        setup=lambda c, n, k: mk_records(c, n.t),
        foreign=("t",),
    ),
    Case(
        "topic.rollups",
        ("GET", "/v0/topics/{topic}/rollups"),
        lambda c, h, n: c.get(topic(n.t, "/rollups"), headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_records(c, n.t),
        foreign=("t",),
    ),
    # --- /v0 queues ---------------------------------------------------------------------------
    Case(
        "queue.claim",
        ("POST", "/v0/topics/{topic}/claim"),
        lambda c, h, n: c.post(topic(n.t, "/claim"), json={"node": "n"}, headers=h),
        need("read", "write"),
        s(200),
        setup=lambda c, n, k: mk_queue(c, n.t),
        foreign=("t",),
    ),
    *[
        Case(
            f"queue.{verb}",
            ("POST", f"/v0/topics/{{topic}}/{verb}"),
            lambda c, h, n, verb=verb: c.post(
                topic(n.t, f"/{verb}"), json={"node": "n", "seqs": [1], "lease_ms": 1000}, headers=h
            ),
            need("write"),
            s(200),
            setup=lambda c, n, k: mk_queue(c, n.t),
            foreign=("t",),
        )
        for verb in ("ack", "nack", "extend")
    ],
    # Without Accept: text/event-stream: a 406 once credentials and names have passed.
    Case(
        "queue.work",
        ("GET", "/v0/topics/{topic}/work"),
        lambda c, h, n: c.get(topic(n.t, "/work"), params={"node": "n"}, headers=h),
        need("read", "write"),
        s(406),
        setup=lambda c, n, k: mk_queue(c, n.t),
        foreign=("t",),
    ),
    # --- /v0 watch ----------------------------------------------------------------------------
    Case(
        "watch.create",
        ("POST", "/v0/watch"),
        lambda c, h, n: c.post("/v0/watch", json={"topics": {n.t: {}}}, headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_topic(c, n.t),
        foreign=("t",),
    ),
    # The GET of a session: its creator passes (then 406 without Accept); any other key is
    # 401 (spec §7.1), whatever its scopes; so is a prefix key on another tenant's session.
    Case(
        "watch.open",
        ("GET", "/v0/watch/{wid}"),
        lambda c, h, n: c.get(f"/v0/watch/{n.ctx}", headers=h),
        need("read"),
        s(406),
        setup=mk_watch,
        foreign=("t",),
        expect={"write": s(401), "admin": s(401)},
    ),
    # --- /v0 routers --------------------------------------------------------------------------
    # PUT needs admin (spec) + read (of source) + write (to dest), every name in the allowlist.
    Case(
        "router.put",
        ("PUT", "/v0/routers/{name}"),
        lambda c, h, n: c.put(f"/v0/routers/{n.t}", json={"source": n.r, "dest": n.d}, headers=h),
        need("admin", "read", "write"),
        s(201),
        setup=lambda c, n, k: mk_topic(c, n.r),
        foreign=("t", "r", "d"),
    ),
    Case(
        "router.get",
        ("GET", "/v0/routers/{name}"),
        lambda c, h, n: c.get(f"/v0/routers/{n.t}", headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_router(c, n.t, n.r, n.d),
        foreign=("t",),
    ),
    Case(
        "router.list",
        ("GET", "/v0/routers"),
        lambda c, h, n: c.get("/v0/routers", headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_router(c, n.t, n.r, n.d),
    ),
    Case(
        "router.delete",
        ("DELETE", "/v0/routers/{name}"),
        lambda c, h, n: c.delete(f"/v0/routers/{n.t}", headers=h),
        need("delete"),
        s(200),
        setup=lambda c, n, k: mk_router(c, n.t, n.r, n.d),
        foreign=("t",),
    ),
    # --- /v1 Durable Streams ------------------------------------------------------------------
    Case(
        "v1.list",
        ("GET", "/v1/streams"),
        lambda c, h, n: c.get("/v1/streams", headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t, 1),
    ),
    Case(
        "v1.create",
        ("PUT", "/v1/stream/{path:path}"),
        lambda c, h, n: c.put(stream_url(n.t), headers=with_json(h)),
        need("write"),
        s(201),
        foreign=("t",),
    ),
    # A fork reads its source: write on the fork, read on the source, both in the allowlist.
    Case(
        "v1.fork",
        ("PUT", "/v1/stream/{path:path}"),
        lambda c, h, n: c.put(
            stream_url(n.t), headers={**h, "stream-forked-from": stream_url(n.r)}
        ),
        need("write", "read"),
        s(201),
        setup=lambda c, n, k: mk_stream(c, n.r, 1, 2),
        foreign=("t", "r"),
    ),
    Case(
        "v1.append",
        ("POST", "/v1/stream/{path:path}"),
        lambda c, h, n: c.post(stream_url(n.t), content=b"[1]", headers=with_json(h)),
        need("write"),
        s(204),
        setup=lambda c, n, k: mk_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.read",
        ("GET", "/v1/stream/{path:path}"),
        lambda c, h, n: c.get(stream_url(n.t), params={"offset": "-1"}, headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t, 1),
        foreign=("t",),
    ),
    Case(
        "v1.read.since",
        ("GET", "/v1/stream/{path:path}"),
        lambda c, h, n: c.get(stream_url(n.t), params={"since": "0"}, headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t, 1),
        foreign=("t",),
    ),
    Case(
        "v1.read.pk",
        ("GET", "/v1/stream/{path:path}"),
        lambda c, h, n: c.get(stream_url(n.t, "pk/k1"), params={"offset": "-1"}, headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t, 1),
        foreign=("t",),
    ),
    Case(
        "v1.head",
        ("HEAD", "/v1/stream/{path:path}"),
        lambda c, h, n: c.head(stream_url(n.t), headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.delete",
        ("DELETE", "/v1/stream/{path:path}"),
        lambda c, h, n: c.delete(stream_url(n.t), headers=h),
        need("delete"),
        s(204),
        setup=lambda c, n, k: mk_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.schema.get",
        ("GET", "/v1/stream/{path:path}"),
        lambda c, h, n: c.get(stream_url(n.t, "_schema"), headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.schema.post",
        ("POST", "/v1/stream/{path:path}"),
        lambda c, h, n: c.post(
            stream_url(n.t, "_schema"), content=json.dumps(V1_SCHEMA), headers=with_json(h)
        ),
        need("write"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.profile.get",
        ("GET", "/v1/stream/{path:path}"),
        lambda c, h, n: c.get(stream_url(n.t, "_profile"), headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.profile.post",
        ("POST", "/v1/stream/{path:path}"),
        lambda c, h, n: c.post(
            stream_url(n.t, "_profile"),
            content=json.dumps({"profile": {"kind": "generic"}}),
            headers=with_json(h),
        ),
        need("write"),
        s(200),
        setup=lambda c, n, k: mk_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.touch.meta",
        ("GET", "/v1/stream/{path:path}"),
        lambda c, h, n: c.get(stream_url(n.t, "touch/meta"), headers=h),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_touch_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.touch.wait",
        ("POST", "/v1/stream/{path:path}"),
        lambda c, h, n: c.post(
            stream_url(n.t, "touch/wait"),
            content=json.dumps({"cursor": "now", "keys": ["k"], "timeoutMs": 0}),
            headers=with_json(h),
        ),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_touch_stream(c, n.t),
        foreign=("t",),
    ),
    Case(
        "v1.touch.activate",
        ("POST", "/v1/stream/{path:path}"),
        lambda c, h, n: c.post(
            stream_url(n.t, "touch/templates/activate"),
            content=json.dumps(TEMPLATES),
            headers=with_json(h),
        ),
        need("write"),
        s(200),
        setup=lambda c, n, k: mk_touch_stream(c, n.t),
        foreign=("t",),
    ),
    # Search and inspection (§2.4, §7B): reads, POSTs included; the server routes (§2.6)
    # name no stream and need read, as /v0/metrics.
    *[
        Case(
            f"v1.{sub}.{method.lower()}",
            ("GET" if method == "GET" else "POST", "/v1/stream/{path:path}"),
            lambda c, h, n, method=method, sub=sub, body=body, params=params: c.request(
                method,
                stream_url(n.t, sub),
                params=params,
                content=json.dumps(body) if body is not None else None,
                headers=with_json(h),
            ),
            need("read"),
            s(200),
            setup=lambda c, n, k: mk_search_stream(c, n.t),
            foreign=("t",),
        )
        for method, sub, params, body in (
            ("GET", "_search", {"q": "n:1"}, None),
            ("POST", "_search", None, {"q": "n:1"}),
            ("POST", "_aggregate", None, {"rollup": "r", "from": 0, "to": 1, "interval": "1m"}),
            ("GET", "_routing_keys", None, None),
            ("GET", "_index_status", None, None),
            ("GET", "_details", None, None),
        )
    ],
    *[
        Case(
            f"v1.server{p}",
            ("GET", p),
            lambda c, h, n, p=p: c.get(p, headers=h),
            need("read"),
            s(200),
        )
        for p in ("/v1/server/_details", "/v1/server/_mem")
    ],
    # --- /api/v1 notifications (aviso) --------------------------------------------------------
    # t42_alerts needs a key: reads with read (read_roles), writes with write (write_roles);
    # admin keys may always read and write.
    Case(
        "notify.post",
        ("POST", "/api/v1/notification"),
        lambda c, h, n: c.post(
            "/api/v1/notification", json={"event_type": n.t, **NOTE, "payload": 1}, headers=h
        ),
        need("write"),
        s(200),
        foreign=("t",),
        expect={"admin": s(200)},
    ),
    # Both replay starts: a 400, once credentials and the event type's rules have passed.
    Case(
        "notify.watch",
        ("POST", "/api/v1/watch"),
        lambda c, h, n: c.post(
            "/api/v1/watch",
            json={"event_type": n.t, **NOTE, "from_id": "1", "from_date": "1740509903"},
            headers=h,
        ),
        need("read"),
        s(400),
        foreign=("t",),
        expect={"admin": s(400)},
    ),
    Case(
        "notify.replay",
        ("POST", "/api/v1/replay"),
        lambda c, h, n: c.post(
            "/api/v1/replay", json={"event_type": n.t, **NOTE, "from_id": "1"}, headers=h
        ),
        need("read"),
        s(200),
        setup=lambda c, n, k: mk_note(c, n.t),
        foreign=("t",),
        expect={"admin": s(200)},
    ),
    # The schema is public (aviso): event type names are deployment configuration.
    Case(
        "notify.schema",
        ("GET", "/api/v1/schema"),
        lambda c, h, n: c.get("/api/v1/schema", headers=h),
        None,
        s(200),
    ),
    Case(
        "notify.schema.one",
        ("GET", "/api/v1/schema/{event_type}"),
        lambda c, h, n: c.get(f"/api/v1/schema/{n.t}", headers=h),
        None,
        s(200),
    ),
    Case(
        "notify.admin.delete",
        ("DELETE", "/api/v1/admin/notification/{notification_id}"),
        lambda c, h, n: c.delete(f"/api/v1/admin/notification/{n.t}@1", headers=h),
        need("admin"),
        s(200, 404),
        setup=lambda c, n, k: mk_note(c, n.t),
        foreign=("t",),
    ),
    Case(
        "notify.admin.wipe_stream",
        ("DELETE", "/api/v1/admin/wipe/stream"),
        lambda c, h, n: c.request(
            "DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": n.t}, headers=h
        ),
        need("admin"),
        s(200),
        setup=lambda c, n, k: mk_note(c, n.t),
        foreign=("t",),
    ),
    # Every stream at once: an admin key limited to prefixes may not.
    Case(
        "notify.admin.wipe_all",
        ("DELETE", "/api/v1/admin/wipe/all"),
        lambda c, h, n: c.delete("/api/v1/admin/wipe/all", headers=h),
        need("admin"),
        s(200),
        expect={"prefix": s(403)},
    ),
    # --- /api/v1 flags: flag tokens (HEADWATER_FLAG_TOKENS), never API keys -------------------
    Case(
        "flags.publish",
        ("PUT", "/api/v1/tenants/{tenant}/namespaces/{slug}/manifest"),
        lambda c, h, n: c.put(
            ns_path("billing", "/manifest"), json={"files": {"namespace.toml": ""}}, headers=h
        ),
        None,
        s(401),
    ),
    Case(
        "flags.manifest",
        ("GET", "/api/v1/tenants/{tenant}/namespaces/{slug}/manifest"),
        lambda c, h, n: c.get(ns_path("billing", "/manifest"), headers=h),
        None,
        s(401),
    ),
    Case(
        "flags.versions",
        ("GET", "/api/v1/tenants/{tenant}/namespaces/{slug}/manifest/versions"),
        lambda c, h, n: c.get(ns_path("billing", "/manifest/versions"), headers=h),
        None,
        s(401),
    ),
    Case(
        "flags.closure",
        ("GET", "/api/v1/tenants/{tenant}/namespaces/{slug}/closure"),
        lambda c, h, n: c.get(
            ns_path("billing", "/closure"),
            params={"version": "1", "subscription": "Kg"},  # base64url("*")
            headers=h,
        ),
        None,
        s(401),
    ),
    Case(
        "flags.events",
        ("GET", "/api/v1/events"),
        lambda c, h, n: c.get("/api/v1/events", params={"ns": "acme/billing"}, headers=h),
        None,
        s(401),
    ),
    # --- /api/v2 dashboard --------------------------------------------------------------------
    # Ingest takes an API key with write on the dashboard's topic ("sentiment": outside the
    # prefix key's allowlist).
    Case(
        "dashboard.ingest",
        ("POST", "/api/v2/sentiment"),
        lambda c, h, n: c.post("/api/v2/sentiment", json=item(), headers=h),
        need("write"),
        s(201),
        expect={"prefix": s(403)},
    ),
    Case(
        "dashboard.metrics",
        ("GET", "/api/v2/metrics"),
        lambda c, h, n: c.get("/api/v2/metrics", headers=h),
        None,
        s(200),
    ),
    Case(
        "dashboard.status",
        ("GET", "/api/v2/stream/status"),
        lambda c, h, n: c.get("/api/v2/stream/status", headers=h),
        None,
        s(200),
    ),
    Case(
        "dashboard.stream",
        ("GET", "/api/v2/stream"),
        lambda c, h, n: opened(c, "GET", "/api/v2/stream", headers=h),
        None,
        s(200),
        stream=True,
    ),
    # Configurations: X-User-ID identifies the user; API keys are not consulted.
    Case(
        "dashboard.config.create",
        ("POST", "/api/v2/configurations"),
        lambda c, h, n: c.post(
            "/api/v2/configurations",
            json={"name": "w", "tickers": ["MSFT"]},
            headers={**h, **n.ctx},
        ),
        None,
        s(201),
        setup=lambda c, n, k: user(k),
    ),
    Case(
        "dashboard.config.list",
        ("GET", "/api/v2/configurations"),
        lambda c, h, n: c.get("/api/v2/configurations", headers={**h, **n.ctx}),
        None,
        s(200),
        setup=lambda c, n, k: user(k),
    ),
    *[
        Case(
            f"dashboard.config.{method.lower()}",
            (method, "/api/v2/configurations/{config_id}"),
            lambda c, h, n, method=method: c.request(
                method,
                f"/api/v2/configurations/{n.ctx[1]}",
                headers={**h, **n.ctx[0]},
                **({"json": {"name": "renamed"}} if method == "PUT" else {}),
            ),
            None,
            s(200, 204),
            setup=lambda c, n, k: (user(k), mk_config(c, n, k)),
        )
        for method in ("GET", "PUT", "DELETE")
    ],
    Case(
        "dashboard.config.stream",
        ("GET", "/api/v2/configurations/{config_id}/stream"),
        lambda c, h, n: opened(
            c, "GET", f"/api/v2/configurations/{n.ctx[1]}/stream", headers={**h, **n.ctx[0]}
        ),
        None,
        s(200),
        setup=lambda c, n, k: (user(k), mk_config(c, n, k)),
        stream=True,
    ),
]
WS_ROUTE = ("WS", "/v0/ws")  # test_websocket_commands


def names(case: Case, kind: str) -> N:
    """A case's own names for one key kind: inside tenant42 (or t42_ for event types)."""
    i = CASES.index(case)
    if case.id.startswith("notify"):
        return N("t42_alerts", "t42_alerts", "t42_alerts")
    if case.id.startswith("router"):
        return N(f"tenant42:r{i}-{kind}", f"tenant42:src{i}-{kind}", f"tenant42:dst{i}-{kind}")
    return N(f"tenant42:c{i}-{kind}", f"tenant42:ref{i}-{kind}", f"tenant42:dst{i}-{kind}")


def foreign_names(case: Case) -> N:
    i = CASES.index(case)
    if case.id.startswith("notify"):
        return N("secret_alerts", "secret_alerts", "secret_alerts")
    return N(f"{FOREIGN}:c{i}", f"{FOREIGN}:ref{i}", f"{FOREIGN}:dst{i}")


def expected(case: Case, kind: Kind) -> frozenset[int]:
    if kind.name in case.expect:
        return case.expect[kind.name]
    if case.needs is None:
        return case.ok
    if not kind.scopes:
        return s(401)
    return case.ok if case.needs <= kind.scopes else s(403)


# --- the app under test ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def schema_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tenant-matrix") / "schema.yaml"
    path.write_text(SCHEMA)
    return str(path)


@pytest.fixture
def app(settings: Settings, aws: AwsClients, schema_path: str) -> Iterator[TestClient]:
    with TestClient(create_app(tenant_settings(settings, schema_path), aws)) as c:
        seed_other_tenant(c)
        yield c


def assert_no_foreign_name(case: Case, r: httpx.Response) -> None:
    if case.stream or case.needs is None:
        return  # public by design (the notification schema), or a body never read
    assert FOREIGN not in r.text, (case.id, r.status_code, r.text[:2000])
    assert FOREIGN not in json.dumps(dict(r.headers)), (case.id, r.headers)


# --- the matrix -----------------------------------------------------------------------------
def app_routes(routes: list[BaseRoute]) -> set[tuple[str, str]]:
    """(method, path) of every route, walking included routers whatever FastAPI's version
    nests them in; a WebSocket route as ("WS", path)."""
    out: set[tuple[str, str]] = set()
    for r in routes:
        inner = getattr(r, "original_router", None) or getattr(r, "app", None)
        nested = getattr(inner, "routes", None)
        path = getattr(r, "path", None)
        if nested is not None and not isinstance(path, str):
            out |= app_routes(list(nested))
        elif type(r).__name__.endswith("WebSocketRoute"):
            out.add(("WS", str(path)))
        elif isinstance(path, str):
            out |= {(m, path) for m in getattr(r, "methods", None) or ()}
    return out


def test_every_route_has_a_matrix_entry(settings: Settings, aws: AwsClients) -> None:
    app = create_app(settings, aws)
    load_all(app)  # the surfaces' routes are imported on first use
    served = app_routes(list(app.routes))
    assert ("PUT", "/v0/topics/{topic}") in served and WS_ROUTE in served  # the walk works
    covered = {c.route for c in CASES} | {WS_ROUTE}
    assert served - covered == set(), "routes without a tenant-matrix entry"
    assert covered - served == set(), "matrix entries for routes the app does not serve"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_route_by_key_kind(app: TestClient, case: Case) -> None:
    got: dict[str, int] = {}
    want: dict[str, set[int]] = {}
    for kind in KINDS:
        n = names(case, kind.name)
        if case.setup is not None:
            n = dataclasses.replace(n, ctx=case.setup(app, n, kind))
        r = case.call(app, kind.headers, n)
        got[kind.name] = r.status_code
        want[kind.name] = set(expected(case, kind))
        if kind is PREFIX:
            assert_no_foreign_name(case, r)
    assert all(got[k] in want[k] for k in got), {"got": got, "want": want}


FOREIGN_CASES = [c for c in CASES if c.foreign]


@pytest.mark.parametrize("case", FOREIGN_CASES, ids=[c.id for c in FOREIGN_CASES])
def test_prefix_key_outside_its_allowlist_is_403(app: TestClient, case: Case) -> None:
    """Each name the route takes, swapped alone for another tenant's (which exists): 403."""
    own, other = names(case, "foreign-check"), foreign_names(case)
    if case.setup is not None:  # the other tenant's resources too, so a 403 is not a 404
        case.setup(app, other, FULL)
    for fld in case.foreign:
        n = dataclasses.replace(own, **{fld: getattr(other, fld)})
        if case.setup is not None:
            n = dataclasses.replace(n, ctx=case.setup(app, n, PREFIX))
        r = case.call(app, PREFIX.headers, n)
        want = s(401) if case.id == "watch.open" else s(403)  # another key's session
        assert r.status_code in want, (case.id, fld, r.status_code, r.text)


# --- /v0/ws ---------------------------------------------------------------------------------
def test_websocket_commands(app: TestClient) -> None:
    """The upgrade needs a valid key (401 otherwise); then subscribe needs read, publish write
    (and admin with a config), each on names inside the allowlist, a dead_letter included."""
    for kind in KINDS:
        mine = f"tenant42:ws-{kind.name}"
        mk_topic(app, mine)
        if not kind.scopes:
            with pytest.raises(WebSocketDenialResponse) as denied:
                app.websocket_connect("/v0/ws", headers=kind.headers).__enter__()
            assert denied.value.status_code == 401, kind.name
            continue
        with app.websocket_connect("/v0/ws", headers=kind.headers) as ws:
            sub = request(ws, op="subscribe", request_id="s", topic=mine)
            pub = request(ws, op="publish", request_id="p", topic=mine, records=[{"data": 1}])
            cfg = request(
                ws,
                op="publish",
                request_id="c",
                topic=f"{mine}-q",
                create=True,
                records=[{"data": 1}],
                config={"type": "queue"},
            )
            assert sub["op"] == ("subscribed" if "read" in kind.scopes else "error"), sub
            assert pub["op"] == ("ack" if "write" in kind.scopes else "error"), pub
            can_configure = {"write", "admin"} <= kind.scopes
            assert cfg["op"] == ("ack" if can_configure else "error"), cfg
            for frame in (sub, pub, cfg):
                if frame["op"] == "error":
                    assert_ws_error(frame, "forbidden", frame["request_id"])
    # the prefix key, outside its allowlist: topic, body topics, a dead-letter topic
    with app.websocket_connect("/v0/ws", headers=PREFIX.headers) as ws:
        for cmd in (
            {"op": "subscribe", "topic": f"{FOREIGN}:log"},
            {"op": "subscribe", "topics": {"tenant42:ws-prefix": {}, f"{FOREIGN}:log": {}}},
            {"op": "publish", "topic": f"{FOREIGN}:log", "records": [{"data": 1}]},
            {
                "op": "publish",
                "topic": "tenant42:ws-dlq",
                "records": [{"data": 1}],
                "config": {"type": "queue", "dead_letter": f"{FOREIGN}:dlq"},
            },
        ):
            send(ws, request_id="x", **cmd)
            assert_ws_error(recv(ws), "forbidden", "x")
    r = app.get(topic("tenant42:ws-dlq"), headers=FULL.headers)
    assert r.status_code == 404, r.text  # the refused publish created nothing


def test_flag_token_passes_where_api_keys_do_not(app: TestClient) -> None:
    """The 401s above are about the credential: the same flags routes answer a flag token."""
    assert app.get(ns_path("billing", "/manifest"), headers=auth(SVC)).status_code == 404
    assert (
        app.get("/api/v1/events", params={"ns": "acme/billing"}, headers=auth(SVC)).status_code
        == 400
    )


def test_x_user_id_is_required_where_api_keys_are_not(app: TestClient) -> None:
    r = app.get("/api/v2/configurations", headers=FULL.headers)
    assert r.status_code == 401 and r.json() == {"detail": "Missing user identification"}
