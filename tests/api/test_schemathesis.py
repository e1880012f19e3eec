"""schemathesis against the whole app (issue 27): every operation of /openapi.json, with
requests generated from its documented parameters and bodies, must answer without a 5xx, with
a status code the document lists for it, and with a body its schema for that status accepts.
This is what keeps the documentation models (http/models_*.py) true to the wire: the handlers
parse by hand, so only these checks tie the two together.

The app runs against in-process moto with a full-scope API key, flag tokens (a tenant's
service token on the flag routes), the notification test schema and fast dashboard intervals;
the long-poll cap is lowered (a generated `wait_ms` would otherwise hold a diff open for 30 s).
Before each operation's run a few topics, a queue, a router, a stream, a manifest and a
notification are seeded; the path parameters get their names, and the JSON bodies valid
examples, in a copy of the document (the served one has neither), so operations reach past
their 404s and 400s. Requests go straight into the ASGI app (hostile_corpus's bare client: an
event stream that opens is hung up at once, its first events checked).

Bounded: the examples, coverage (boundary values, unexpected methods) and fuzzing phases, with
HEADWATER_SCHEMATHESIS_EXAMPLES (default 8) generated requests per operation, derandomized
(the run is repeatable). HEADWATER_SCHEMATHESIS_MODE=negative or all adds invalid requests
(they must be answered 4xx as documented, never 5xx); HEADWATER_SCHEMATHESIS_COVERAGE=0 skips
the coverage phase."""

from __future__ import annotations

import copy
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import schemathesis
from dashboard_helpers import fast
from flags_helpers import SVC, flag_settings
from hostile_corpus import asgi_request
from hostile_routes import ITEM, NOTE, RECORD
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)
from starlette.testclient import TestClient
from test_notify_http import SCHEMA, notify_settings

from headwater.http.app import create_app
from headwater.settings import ENV_API_KEYS_PARAMETER, Limits, Settings, Tiering
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

pytestmark = [pytest.mark.api, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("HEADWATER_SCHEMATHESIS_EXAMPLES", "8"))
COVERAGE = os.environ.get("HEADWATER_SCHEMATHESIS_COVERAGE", "1") == "1"
MODE = os.environ.get("HEADWATER_SCHEMATHESIS_MODE", "positive")  # or negative, all
KEY = "st-full-key"
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]

# Names the seed creates, offered as examples of the documented path parameters; and valid
# request bodies and query values, so the examples phase reaches the success answers.
SEEDED = {
    "topic": ["st-log", "st-queue"],
    "name": ["st-router"],
    "path": ["st-stream"],
    "tenant": ["acme"],
    "slug": ["billing"],
    "event_type": ["extreme"],
    "notification_id": ["extreme@1"],
}
QUERY = {
    "version": ["1"],
    "subscription": ["Kg"],
    "ns": [["billing"]],
    "node": ["w1"],
}
LEASE = {"node": "w1", "seqs": [1], "lease_ms": 1000}
WATCH = {k: v for k, v in NOTE.items() if k != "payload"}
CONFIG_BODY = {"name": "watchlist", "tickers": ["AAPL"]}
FILES = {"files": {"namespace.toml": 'name = "billing"\n', "flags/f.toml": "enabled = true\n"}}
BODIES: dict[tuple[str, str], list[Any]] = {
    ("/v0/topics/{topic}", "post"): [{"records": [RECORD]}],
    ("/v0/topics/{topic}", "put"): [{"ttl_ms": 60000}],
    ("/v0/topics/{topic}/diff", "post"): [{"from_seq": 0, "include_tags": True}],
    ("/v0/topics/{topic}/delete", "post"): [{"match": ["tag", "Glob", "zz*"]}],
    ("/v0/topics/{topic}/claim", "post"): [{"node": "w1", "max": 2}],
    ("/v0/topics/{topic}/ack", "post"): [LEASE],
    ("/v0/topics/{topic}/nack", "post"): [LEASE],
    ("/v0/topics/{topic}/extend", "post"): [LEASE],
    ("/v0/watch", "post"): [{"topics": {"st-log": {"from_seq": 0}}}],
    ("/v0/routers/{name}", "put"): [{"source": "st-log", "dest": "st-copy"}],
    ("/api/v1/notification", "post"): [NOTE],
    ("/api/v1/watch", "post"): [WATCH],
    ("/api/v1/replay", "post"): [{**WATCH, "from_id": "1"}],
    ("/api/v1/admin/wipe/stream", "delete"): [{"stream_name": "extreme"}],
    ("/api/v1/tenants/{tenant}/namespaces/{slug}/manifest", "put"): [FILES],
    ("/api/v2/sentiment", "post"): [{"items": [ITEM]}, ITEM],
    ("/api/v2/configurations", "post"): [CONFIG_BODY],
    ("/api/v2/configurations/{config_id}", "put"): [CONFIG_BODY],
}


def _document() -> dict[str, Any]:
    """/openapi.json, with the seeded names as examples of the path parameters and valid
    bodies as examples of the JSON request bodies (for schemathesis only)."""
    app = create_app(Settings(resource_prefix="hw-st-doc"))
    document = copy.deepcopy(app.openapi())
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                where = SEEDED if parameter["in"] == "path" else QUERY
                values = where.get(parameter["name"], [])
                if values:
                    parameter["examples"] = {f"e{i}": {"value": v} for i, v in enumerate(values)}
            bodies = BODIES.get((path, method), [])
            if bodies:
                media = operation["requestBody"]["content"]["application/json"]
                media["examples"] = {f"e{i}": {"value": b} for i, b in enumerate(bodies)}
    return document


CONFIG = schemathesis.Config.from_dict(
    {
        "cache": {"enabled": False},
        "generation": {
            "mode": MODE,
            "max-examples": EXAMPLES,
            "deterministic": True,
        },
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": COVERAGE},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
    }
)
# A manifest's tar.gz body: sent as the generated bytes (the server answers 400, not a tree)
schemathesis.serializer.alias("application/gzip", "application/octet-stream")
schema = schemathesis.openapi.from_dict(_document(), config=CONFIG)


@dataclass
class Target:
    client: TestClient
    statuses: dict[str, set[int]]


@pytest.fixture(scope="module")
def target(aws: AwsClients, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    schema_file = tmp_path_factory.mktemp("schemathesis") / "schema.yaml"
    schema_file.write_text(SCHEMA)
    cfg = Settings(
        resource_prefix=f"hw-{uuid.uuid4().hex[:8]}",
        api_keys_raw=KEY,
        limits=Limits(max_wait_ms=50),
        tiering=Tiering(inline=False, interval_ms=0),
        notify=notify_settings(str(schema_file)),
        flags=flag_settings(),
        dashboard=fast(),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(ENV_API_KEYS_PARAMETER, raising=False)
        ensure_resources(cfg, aws)
        with TestClient(create_app(cfg, aws), raise_server_exceptions=False) as client:
            target = Target(client, {})
            yield target
    seen = sorted(f"{op}: {sorted(codes)}" for op, codes in target.statuses.items())
    print("\nschemathesis answers:\n" + "\n".join(seen))


@pytest.fixture
def seeded(target: Target) -> Target:
    """The seed again before each operation's run (an earlier one may have deleted it)."""
    _seed(target.client)
    return target


def _seed(c: TestClient) -> None:
    key = {"authorization": f"Bearer {KEY}"}

    def ok(r: Any) -> None:
        assert r.status_code < 300, r.text

    ok(c.post("/v0/topics/st-log", json={"records": [{"data": 1, "tag": "a"}]}, headers=key))
    c.delete("/v0/topics/st-queue", headers=key)  # a generated PUT may have reconfigured it
    ok(c.put("/v0/topics/st-queue", json={"type": "queue"}, headers=key))
    ok(c.post("/v0/topics/st-queue", json={"records": [{"data": {"job": 1}}]}, headers=key))
    body = {"source": "st-log", "dest": "st-copy"}
    ok(c.put("/v0/routers/st-router", json=body, headers=key))
    c.delete("/v1/stream/st-stream", headers=key)
    ok(c.put("/v1/stream/st-stream", headers={**key, "content-type": "application/json"}))
    ok(
        c.post(
            "/v1/stream/st-stream",
            content=b'[{"a": 1}]',
            headers={**key, "content-type": "application/json"},
        )
    )
    flags = {"authorization": f"Bearer {SVC}"}
    ok(c.put("/api/v1/tenants/acme/namespaces/billing/manifest", json=FILES, headers=flags))
    ok(c.post("/api/v1/notification", json=NOTE, headers=key))


def _headers(case: schemathesis.Case) -> dict[str, str]:
    """The credential of the route's surface (a flag token on the flag routes), and Accept
    for an event stream."""
    path = case.path
    flags = path == "/api/v1/events" or path.startswith("/api/v1/tenants/")
    headers = {"authorization": f"Bearer {SVC if flags else KEY}"}
    ok = case.operation.definition.raw.get("responses", {}).get("200", {})
    if "text/event-stream" in ok.get("content", {}):
        headers["accept"] = "text/event-stream"
    return headers


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_operation_answers_as_documented(case: schemathesis.Case, seeded: Target) -> None:
    target = seeded
    kwargs = case.as_transport_kwargs(base_url="http://testserver", headers=_headers(case))
    allowed = {"method", "url", "headers", "params", "data", "json", "files", "cookies"}
    prepared = requests.Request(**{k: v for k, v in kwargs.items() if k in allowed}).prepare()
    url = urlsplit(prepared.url)
    body = prepared.body.encode() if isinstance(prepared.body, str) else prepared.body
    headers = [(k.lower().encode(), v.encode("latin-1")) for k, v in prepared.headers.items()]
    # asgi_request sets content-length; answers are checked as sent, not gzip-encoded
    headers = [(k, v) for k, v in headers if k not in (b"content-length", b"accept-encoding")]
    portal = target.client.portal
    assert portal is not None
    method = prepared.method or case.method
    answer = portal.call(
        asgi_request, target.client.app, method, url.path, url.query, headers, body
    )
    assert not answer.crashed, (case.method, case.path, answer.status, answer.body[:300])
    target.statuses.setdefault(f"{case.method} {case.path}", set()).add(answer.status)
    response = schemathesis.Response(
        status_code=answer.status,
        headers={k: [v] for k, v in answer.headers.items()},
        content=answer.body,
        request=prepared,
        elapsed=0.0,
        verify=True,
    )
    case.validate_response(response, checks=CHECKS)
