"""The routes the hostile-input fuzz test (test_hostile_input.py) sends to: a valid request
for each (method, path template), the Durable Streams subresources that share one template,
the app's own route list, and the storage the valid requests need (seed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from flags_helpers import SVC
from starlette.routing import BaseRoute
from starlette.testclient import TestClient

from headwater.dashboard.items import FIELDS as ITEM_FIELDS
from headwater.engine.config import DEFAULTS as TOPIC_CONFIG
from headwater.http.app import create_app
from headwater.http.lazy_routes import load_all
from headwater.notify.requests import REQUEST_FIELDS
from headwater.settings import Settings

JSON = "application/json"


@dataclass
class Route:
    """A valid request for one route, the starting point of every mutation."""

    params: dict[str, str] = field(default_factory=dict)
    body: Any = None  # a JSON body (None: no body)
    content_type: str | None = JSON
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None  # a non-JSON body


TOPIC = {"topic": "fz"}
QUEUE = {"topic": "fq"}
STREAM = {"path": "fzs"}
NS = {"tenant": "acme", "slug": "billing"}
FLAG_AUTH = {"authorization": f"Bearer {SVC}"}
USER = {"x-user-id": "u1"}
RECORD = {"data": {"k": [1, "v"]}, "tag": "t1", "node": "n1", "meta": {"m": 1}}
NOTE = {
    "event_type": "extreme",
    "identifier": {"region": "north", "run_time": "1200", "severity": "3", "anomaly": "12.5"},
    "payload": {"note": "x"},
}
SEEN_FROM = {**NOTE, "from_id": "1", "from_date": None}
ITEM = {
    "ticker": "AAPL",
    "score": 0.5,
    "label": "positive",
    "confidence": 0.9,
    "source": "tiingo",
    "timestamp": "2025-12-02T10:30:00.000Z",
}
assert set(ITEM) == set(ITEM_FIELDS)
assert set(REQUEST_FIELDS) <= set(SEEN_FROM)
V0_QUERY = {"touch": "false"}

# (method, path template) -> a valid request; routes not listed get Route() with each path
# parameter "fz". Body fields follow the parsers (headwater.v0.parse, queue, watch,
# routers; notify.requests; dashboard.items and service; flags.manifest).
ROUTES: dict[tuple[str, str], Route] = {
    ("PUT", "/v0/topics/{topic}"): Route(TOPIC, {k: v for k, v in TOPIC_CONFIG.items()}),
    ("GET", "/v0/topics/{topic}"): Route(TOPIC, query=V0_QUERY),
    ("DELETE", "/v0/topics/{topic}"): Route({"topic": "fz-gone"}, query={"if_empty": "true"}),
    ("POST", "/v0/topics/{topic}"): Route(
        TOPIC,
        {
            "records": [RECORD],
            "node": "n2",
            "idempotency_key": "k-seed",
            "create": True,
            "disable_backpressure": False,
            "config": {"ttl_ms": 0},
        },
        query={"return_seqs": "true"},
        headers={"idempotency-key": "k-seed"},
    ),
    ("GET", "/v0/topics"): Route(
        query={"prefix": "f", "page_size": "10", "cursor": "", "touch": "false"}
    ),
    ("POST", "/v0/topics/{topic}/diff"): Route(
        TOPIC,
        {
            "from_seq": 0,
            "limit": 10,
            "node": ["n1"],
            "include_tags": True,
            "include_meta": True,
            "wait_ms": 0,
        },
    ),
    ("POST", "/v0/topics/{topic}/delete"): Route(
        {"topic": "fz-del"}, {"before_seq": 1, "match": ["tag", "Glob", "t*"]}
    ),
    ("GET", "/v0/topics/{topic}/rollups"): Route(
        TOPIC, query={"granularity": "minute", "from_ms": "0", "to_ms": "1"}
    ),
    ("POST", "/v0/topics/{topic}/claim"): Route(QUEUE, {"node": "w1", "max": 1, "lease_ms": 1000}),
    ("POST", "/v0/topics/{topic}/ack"): Route(
        QUEUE, {"node": "w1", "seqs": [1], "lease_ids": ["lease_00"]}
    ),
    ("POST", "/v0/topics/{topic}/nack"): Route(
        QUEUE, {"node": "w1", "seqs": [1], "lease_ids": ["lease_00"], "delay_ms": 0}
    ),
    ("POST", "/v0/topics/{topic}/extend"): Route(
        QUEUE, {"node": "w1", "seqs": [1], "lease_ids": ["lease_00"], "lease_ms": 1000}
    ),
    ("GET", "/v0/topics/{topic}/work"): Route(
        {"topic": "fq-idle"},  # no job to lease: an abandoned stream leaves nothing to undo
        query={"node": "w1", "max": "1", "lease_ms": "1000"},
        headers={"accept": "text/event-stream"},
    ),
    ("POST", "/v0/watch"): Route(
        body={
            "topics": {"fz": {"from_seq": 0, "tail": False}},
            "node": "n1",
            "limit": 10,
            "max_batch_bytes": 0,
            "heartbeat_ms": 1000,
            "consistency": "eventual",
            "include_meta": True,
            "include_tags": True,
            "include_data": True,
        },
        query={"lenient": "false"},
    ),
    ("GET", "/v0/watch/{wid}"): Route(
        {"wid": "wid_missing"},
        headers={"accept": "text/event-stream", "last-event-id": "e30"},
    ),
    ("PUT", "/v0/routers/{name}"): Route(
        {"name": "fzr"},
        {
            "source": "fz-rsrc",  # no record ever: the forwarder has nothing to copy
            "dest": "fz-rdst",
            "guarantee": "at_least_once",
            "preserve_node": True,
            "preserve_tag": True,
            "create_dest": True,
            "filter": ["tag", "Eq", "t1"],
            "allow_cycle": False,
        },
    ),
    ("GET", "/v0/routers"): Route(
        query={
            "prefix": "f",
            "source": "fz-rsrc",
            "dest": "fz-rdst",
            "page_size": "5",
            "cursor": "",
        }
    ),
    ("GET", "/v0/metrics"): Route(headers={"accept": JSON}),
    # Durable Streams: one catch-all route; its subresources are separate requests below.
    ("PUT", "/v1/stream/{path:path}"): Route(
        {"path": "fzs-new"},
        content_type=JSON,
        raw_body=b'[{"a":1}]',
        headers={"stream-ttl": "3600", "stream-closed": "false", "stream-key": "k"},
    ),
    ("POST", "/v1/stream/{path:path}"): Route(
        STREAM,
        [{"a": 1}, "v"],
        headers={
            "producer-id": "p1",
            "producer-epoch": "0",
            "producer-seq": "0",
            "stream-key": "k",
            "stream-timestamp": "2025-01-01T00:00:00Z",
        },
    ),
    ("GET", "/v1/stream/{path:path}"): Route(
        STREAM,
        query={"offset": "-1", "format": "json", "key": "k", "cursor": "1"},
        headers={"if-none-match": '"x"'},
    ),
    ("HEAD", "/v1/stream/{path:path}"): Route(STREAM),
    ("DELETE", "/v1/stream/{path:path}"): Route({"path": "fzs-gone"}),
    ("GET", "/v1/streams"): Route(query={"limit": "10", "after": "a"}),
    ("POST", "/api/v1/notification"): Route(body=NOTE),
    ("POST", "/api/v1/replay"): Route(body=SEEN_FROM),
    ("POST", "/api/v1/watch"): Route(body=SEEN_FROM),
    ("GET", "/api/v1/schema/{event_type}"): Route({"event_type": "extreme"}),
    ("DELETE", "/api/v1/admin/notification/{notification_id}"): Route(
        {"notification_id": "nope@1"}
    ),
    ("DELETE", "/api/v1/admin/wipe/stream"): Route(body={"stream_name": "nope"}),
    ("DELETE", "/api/v1/admin/wipe/all"): Route(headers={"authorization": "Bearer x"}),
    ("PUT", "/api/v1/tenants/{tenant}/namespaces/{slug}/manifest"): Route(
        NS,
        {"files": {"namespace.toml": 'name = "billing"\n', "flags/f.toml": "enabled = true\n"}},
        headers=FLAG_AUTH,
    ),
    ("GET", "/api/v1/tenants/{tenant}/namespaces/{slug}/manifest"): Route(NS, headers=FLAG_AUTH),
    ("GET", "/api/v1/tenants/{tenant}/namespaces/{slug}/manifest/versions"): Route(
        NS, headers=FLAG_AUTH
    ),
    ("GET", "/api/v1/tenants/{tenant}/namespaces/{slug}/closure"): Route(
        NS, query={"version": "1", "subscription": "Kg"}, headers=FLAG_AUTH
    ),
    ("GET", "/api/v1/events"): Route(
        query={"ns": "nope:*"}, headers={**FLAG_AUTH, "last-event-id": "x"}
    ),
    ("POST", "/api/v2/sentiment"): Route(
        body={"items": [ITEM]}, headers={"idempotency-key": "fz-1"}
    ),
    ("POST", "/api/v2/configurations"): Route(
        body={"name": "mine", "tickers": ["AAPL"]}, headers=USER
    ),
    ("GET", "/api/v2/configurations"): Route(headers=USER),
    ("GET", "/api/v2/configurations/{config_id}"): Route({"config_id": "cfg-x"}, headers=USER),
    ("PUT", "/api/v2/configurations/{config_id}"): Route(
        {"config_id": "cfg-x"}, {"name": "n", "tickers": ["MSFT"]}, headers=USER
    ),
    ("DELETE", "/api/v2/configurations/{config_id}"): Route({"config_id": "cfg-x"}, headers=USER),
    ("GET", "/api/v2/configurations/{config_id}/stream"): Route(
        {"config_id": "cfg-x"}, query={"user_id": "u1"}, headers={"last-event-id": "evt_x"}
    ),
}

# Durable Streams requests that reach other parsers through the one route template: its
# subresources, and appends to streams whose schema or profile derives routing keys.
KEYED = {"schema": {"type": "object"}, "routingKey": {"jsonPointer": "/a", "required": True}}
V1_EXTRA: list[tuple[str, str, Route]] = [
    ("POST", "fzs-schema/_schema", Route(body={**KEYED, "routingKey": {"jsonPointer": "/b"}})),
    ("GET", "fzs/_schema", Route()),
    ("POST", "fzs-profile/_profile", Route(body={"profile": {"kind": "generic"}})),
    ("GET", "fzs/_profile", Route()),
    ("GET", "fzt/touch/meta", Route(query={"settle": "flush"})),
    ("POST", "fzt/touch/wait", Route(body={"keys": ["k"], "cursor": "", "timeoutMs": 0})),
    (
        "POST",
        "fzt/touch/templates/activate",
        Route(body={"templates": [{"entity": "e", "fields": []}], "ttlMs": 1000}),
    ),
    ("POST", "fzk", Route(body=[{"a": "k1"}])),  # routing key: the schema's /a
    ("POST", "fze", Route(body=[{"requestId": "r1"}])),  # evlog profile
]


def _walk(routes: list[BaseRoute]) -> Iterator[BaseRoute]:
    for r in routes:
        inner = getattr(r, "original_router", None)  # an included router (FastAPI >= 0.120)
        yield from _walk(inner.routes) if inner is not None else [r]


def app_routes() -> list[tuple[str, str]]:
    app = create_app(Settings(resource_prefix="hw-routes"))
    load_all(app)  # the surfaces' routes are imported on first use
    out: set[tuple[str, str]] = set()
    for r in _walk(app.routes):
        path = getattr(r, "path", "")
        if path == "/openapi.json":
            continue
        for method in getattr(r, "methods", None) or ["GET"]:  # a WebSocket route: plain GET
            out.add((method, path))
    return sorted(out, key=lambda mp: (mp[1], mp[0]))


def seed(c: TestClient) -> None:
    """A little of everything, so mutated requests reach past the not-found checks."""

    def ok(resp: httpx.Response) -> None:
        assert resp.status_code < 300, resp.text

    ok(c.put("/v0/topics/fz", json={}))
    ok(c.post("/v0/topics/fz", json={"records": [RECORD, {"data": 2, "tag": "t2"}]}))
    ok(c.put("/v0/topics/fq", json={"type": "queue"}))
    ok(c.post("/v0/topics/fq", json={"records": [{"data": {"job": 1}}]}))
    ok(c.put("/v0/topics/fz-del", json={}))
    ok(c.put("/v0/topics/fz-rsrc", json={}))
    ok(c.put("/v0/topics/fq-idle", json={"type": "queue"}))
    ok(c.put("/v1/stream/fzs", headers={"content-type": JSON}))
    ok(c.post("/v1/stream/fzs", content=b'[{"a":1}]', headers={"content-type": JSON}))
    for name in ("fzt", "fzs-schema", "fzs-profile", "fzk", "fze"):
        ok(c.put(f"/v1/stream/{name}", headers={"content-type": JSON}))
    ok(c.post("/v1/stream/fzk/_schema", json=KEYED))
    ok(c.post("/v1/stream/fze/_profile", json={"profile": {"kind": "evlog"}}))
    profile = {"profile": {"kind": "state-protocol", "touch": {"enabled": True}}}
    ok(c.post("/v1/stream/fzt/_profile", json=profile))
    ok(c.post("/api/v1/notification", json=NOTE))
    manifest = ROUTES[("PUT", "/api/v1/tenants/{tenant}/namespaces/{slug}/manifest")]
    ok(
        c.put(
            "/api/v1/tenants/acme/namespaces/billing/manifest",
            json=manifest.body,
            headers=FLAG_AUTH,
        )
    )
    ok(c.post("/api/v2/sentiment", json={"items": [ITEM]}))
    ok(c.post("/api/v2/configurations", json={"name": "a", "tickers": ["AAPL"]}, headers=USER))


def all_routes() -> list[tuple[str, str, Route]]:
    out: list[tuple[str, str, Route]] = []
    for method, template in app_routes():
        out.append((method, template, ROUTES.get((method, template), Route())))
    for method, stream_path, route in V1_EXTRA:
        params = {"path": stream_path}
        out.append((method, "/v1/stream/{path:path}", dataclasses.replace(route, params=params)))
    return out
