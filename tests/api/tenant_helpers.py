"""Shared by the tenant-isolation tests (test_tenant_matrix, test_tenant_isolation): the key
kinds, the app configured with them (notifications, flags and the dashboard on), the other
tenant's resources, and small creators that must succeed (with the full key)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from dashboard_helpers import fast
from flags_helpers import flag_settings
from starlette.testclient import TestClient

from headwater.settings import NotifySettings, Settings, StreamSettings

KEYS = "full-key,reader:read,writer:write,admin-key:admin,t42::tenant42:|t42_"
ALL = frozenset({"read", "write", "delete", "admin"})
FOREIGN = "secret"  # every name of the other tenant carries it; no tenant42 name does
JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class Kind:
    name: str
    headers: dict[str, str]
    scopes: frozenset[str]  # empty: the request does not authenticate


KINDS = [
    Kind("full", {"authorization": "Bearer full-key"}, ALL),
    Kind("read", {"authorization": "Bearer reader"}, frozenset({"read"})),
    Kind("write", {"authorization": "Bearer writer"}, frozenset({"write"})),
    Kind("admin", {"authorization": "Bearer admin-key"}, frozenset({"admin"})),
    Kind("prefix", {"authorization": "Bearer t42"}, ALL),
    Kind("none", {}, frozenset()),
    Kind("wrong", {"authorization": "Bearer not-a-key"}, frozenset()),
]
FULL = KINDS[0]
PREFIX = KINDS[4]

SCHEMA = """
notification_schema:
  t42_alerts:
    payload: {required: false}
    topic: {base: t42_alerts, key_order: [name]}
    auth: {required: true, read_roles: {realm: ["*"]}, write_roles: {realm: [producer]}}
    identifier:
      name: {type: StringHandler, required: true}
  secret_alerts:
    payload: {required: false}
    topic: {base: secret_alerts, key_order: [name]}
    auth: {required: true, read_roles: {realm: ["*"]}, write_roles: {realm: [producer]}}
    identifier:
      name: {type: StringHandler, required: true}
"""


# --- calls ----------------------------------------------------------------------------------
def topic(name: str, suffix: str = "") -> str:
    return f"/v0/topics/{quote(name, safe='')}{suffix}"


def stream_url(name: str, suffix: str = "") -> str:
    return f"/v1/stream/{quote(name, safe='/')}" + (f"/{suffix}" if suffix else "")


def with_json(h: dict[str, str]) -> dict[str, str]:
    return {**h, **JSON}


def full(c: TestClient, method: str, url: str, **kw: Any) -> httpx.Response:
    r = c.request(method, url, headers={**FULL.headers, **kw.pop("headers", {})}, **kw)
    assert r.status_code < 300, (method, url, r.text)
    return r


def mk_topic(c: TestClient, name: str, config: dict[str, Any] | None = None) -> None:
    full(c, "PUT", topic(name), json=config or {})


def mk_records(c: TestClient, name: str, n: int = 1) -> None:
    full(c, "POST", topic(name), json={"records": [{"data": i} for i in range(n)]})


def mk_queue(c: TestClient, name: str) -> None:
    mk_topic(c, name, {"type": "queue"})
    mk_records(c, name, 2)


def mk_stream(c: TestClient, name: str, *values: Any) -> None:
    full(c, "PUT", stream_url(name), headers=JSON)
    if values:
        full(c, "POST", stream_url(name), headers=JSON, content=json.dumps(list(values)))


def mk_touch_stream(c: TestClient, name: str) -> None:
    mk_stream(c, name)
    profile = {"profile": {"kind": "state-protocol", "touch": {"enabled": True}}}
    full(c, "POST", stream_url(name, "_profile"), headers=JSON, content=json.dumps(profile))


def mk_router(c: TestClient, name: str, source: str, dest: str) -> None:
    mk_topic(c, source)
    full(c, "PUT", f"/v0/routers/{quote(name, safe='')}", json={"source": source, "dest": dest})


def mk_note(c: TestClient, event_type: str) -> None:
    body = {"event_type": event_type, "identifier": {"name": "x"}, "payload": 1}
    full(c, "POST", "/api/v1/notification", json=body)


def user(kind: Kind) -> dict[str, str]:
    return {"x-user-id": f"user-{kind.name}"}


def tenant_settings(settings: Settings, schema_path: str, keys: str = KEYS) -> Settings:
    notify = NotifySettings(
        schema=schema_path,
        base_url="http://aviso.test",
        stream=StreamSettings(replay_batch_delay_ms=0, sse_heartbeat_interval_sec=1),
    )
    return dataclasses.replace(
        settings,
        api_keys_raw=keys,
        notify=notify,
        flags=flag_settings(),
        dashboard=fast(),
    )


def seed_other_tenant(c: TestClient) -> None:
    """The other tenant, alive through every call: a topic with records, a queue, a stream,
    a router between its topics and one feeding a tenant42 topic, notifications."""
    mk_records(c, f"{FOREIGN}:log", 2)
    mk_queue(c, f"{FOREIGN}:jobs")
    mk_stream(c, f"{FOREIGN}:stream", {"card": "4111"})
    mk_router(c, f"{FOREIGN}:r", f"{FOREIGN}:log", f"{FOREIGN}:copy")
    mk_router(c, f"{FOREIGN}:bridge", f"{FOREIGN}:feed", "tenant42:inbox")
    mk_note(c, "secret_alerts")
