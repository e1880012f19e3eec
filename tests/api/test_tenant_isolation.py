"""Tenant isolation through indirect references (issue 23 item 5): what a prefix-limited key
(`t42::tenant42:|t42_`, every scope) must not reach or see through a second name — a fork
source, a router's source and dest (and the routers and topics its refusals would name), a
dead-letter topic, a watch session of another key, the listings and metrics, the /api/v1
admin routes — and that /v1 asks for credentials before it looks at anything.
test_tenant_matrix covers every route with every key kind; this file covers the scenarios."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import unquote

import httpx
import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient
from tenant_helpers import (
    FOREIGN,
    FULL,
    KINDS,
    PREFIX,
    SCHEMA,
    mk_note,
    mk_queue,
    mk_records,
    mk_router,
    mk_stream,
    mk_topic,
    seed_other_tenant,
    stream_url,
    tenant_settings,
    topic,
)

from headwater.http.app import create_app
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = [pytest.mark.api, pytest.mark.timeout(120)]

F = FULL.headers
P = PREFIX.headers
READER = KINDS[1].headers
WRITER = KINDS[2].headers
SSE = {"accept": "text/event-stream"}


@pytest.fixture(scope="module")
def schema_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tenant-isolation") / "schema.yaml"
    path.write_text(SCHEMA)
    return str(path)


@pytest.fixture
def app(settings: Settings, aws: AwsClients, schema_path: str) -> Iterator[TestClient]:
    with TestClient(create_app(tenant_settings(settings, schema_path), aws)) as c:
        seed_other_tenant(c)
        yield c


def forbidden(r: httpx.Response) -> None:
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "forbidden", r.text


def unauthorized(r: httpx.Response) -> None:
    assert r.status_code == 401, r.text


# --- forks ------------------------------------------------------------------------------------
def test_fork_of_another_tenants_stream_is_refused_before_anything_is_created(
    app: TestClient,
) -> None:
    # GIVEN another tenant's stream "secret" (the hostile tester's case)
    mk_stream(app, "secret", {"card": "4111"})
    fork = stream_url("tenant42:fork")
    # WHEN the prefix key forks it, by path or URL, at the tail or an offset, with a body
    for src in ("/v1/stream/secret", "http://testserver/v1/stream/secret"):
        for extra in (
            {},
            {"stream-fork-offset": "0000000000000000_0000000000000000"},
        ):
            forbidden(app.put(fork, headers={**P, "stream-forked-from": src, **extra}))
        forbidden(app.put(fork, headers={**P, "stream-forked-from": src}, content=b"[1]"))
    # THEN nothing was created, so there is nothing to read
    assert app.get(fork, params={"offset": "-1"}, headers=F).status_code == 404
    assert app.get(fork, params={"offset": "-1"}, headers=P).status_code == 404
    # AND a key with write but not read on the source may not fork it either
    mk_stream(app, "tenant42:src", {"n": 1})
    own = {"stream-forked-from": stream_url("tenant42:src")}
    forbidden(app.put(stream_url("tenant42:w-fork"), headers={**WRITER, **own}))
    forbidden(app.put(stream_url("tenant42:r-fork"), headers={**READER, **own}))
    # WHILE a fork of its own stream works and serves the source's entries
    assert app.put(fork, headers={**P, **own}).status_code == 201
    r = app.get(fork, params={"offset": "-1"}, headers=P)
    assert r.status_code == 200 and r.json() == [{"n": 1}], r.text


def test_stream_listing_is_filtered_to_the_allowlist_and_pages(app: TestClient) -> None:
    for name in ("tenant42:a", "tenant42:b", "tenant42:c", f"{FOREIGN}:x", "t42_s", "u"):
        mk_stream(app, name)
    everything = [s["name"] for s in app.get("/v1/streams", headers=F).json()]
    assert f"{FOREIGN}:x" in everything and "u" in everything
    for after in (None, f"{FOREIGN}:x"):
        seen: list[str] = []
        while True:
            params = {"limit": "2", **({"after": after} if after is not None else {})}
            r = app.get("/v1/streams", params=params, headers=P)
            assert r.status_code == 200 and FOREIGN not in r.text, r.text
            seen += [s["name"] for s in r.json()]
            nxt = r.headers.get("stream-list-next-after")
            if nxt is None:
                break
            after = unquote(nxt)
        assert seen == ["t42_s", "tenant42:a", "tenant42:b", "tenant42:c"]


# --- metrics ----------------------------------------------------------------------------------
def test_metrics_show_a_prefix_key_its_own_topics_only(app: TestClient) -> None:
    mk_records(app, "tenant42:m", 3)
    mk_queue(app, "tenant42:q")
    own = {"tenant42:inbox", "tenant42:m", "tenant42:q"}  # inbox: fed by the other tenant
    text = app.get("/v0/metrics", headers=P).text
    assert FOREIGN not in text, text
    assert set(re.findall(r'topic="([^"]*)"', text)) == own
    gauges = {
        name: float(value)
        for name, value in (
            line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
        )
    }
    assert gauges["topics_topics"] == 3 and gauges["topics_records_live"] == 5
    assert gauges["topics_queue_topics"] == 1 and gauges["topics_routers"] == 0
    body = app.get("/v0/metrics", headers={**P, "accept": "application/json"}).json()
    assert set(body["topics"]) == own and body["gauges"]["topics_topics"] == 3
    # the full key sees every topic and router
    everything = app.get("/v0/metrics", headers=F).text
    assert f'topic="{FOREIGN}:log"' in everything and "topics_routers 2" in everything


# --- routers ----------------------------------------------------------------------------------
def test_a_router_in_the_keys_namespace_moving_foreign_data_is_not_the_keys(
    app: TestClient,
) -> None:
    # GIVEN an operator's router named inside tenant42 that reads the other tenant's topic
    mk_router(app, "tenant42:tap", f"{FOREIGN}:log", "tenant42:tapped")
    # THEN the prefix key can neither see it nor remove it
    forbidden(app.get("/v0/routers/tenant42:tap", headers=P))
    assert FOREIGN not in app.get("/v0/routers", headers=P).text
    forbidden(app.delete("/v0/routers/tenant42:tap", headers=P))
    assert app.get("/v0/routers/tenant42:tap", headers=F).status_code == 200


def test_router_refusals_do_not_name_other_tenants_routers_or_topics(app: TestClient) -> None:
    # fan-in: the other tenant's router "secret:bridge" already feeds tenant42:inbox
    mk_topic(app, "tenant42:src")
    body = {"source": "tenant42:src", "dest": "tenant42:inbox"}
    r = app.put("/v0/routers/tenant42:mine", json=body, headers=P)
    assert r.status_code == 409 and FOREIGN not in r.text, r.text
    assert r.json()["error"]["code"] == "topic_exists_incompatible"
    assert f"{FOREIGN}:bridge" in app.put("/v0/routers/tenant42:mine", json=body, headers=F).text
    # a cycle through the other tenant's topic: tenant42:a -> secret:mid -> tenant42:b
    mk_router(app, f"{FOREIGN}:c1", "tenant42:a", f"{FOREIGN}:mid")
    mk_router(app, f"{FOREIGN}:c2", f"{FOREIGN}:mid", "tenant42:b")
    back = {"source": "tenant42:b", "dest": "tenant42:a"}
    r = app.put("/v0/routers/tenant42:back", json=back, headers=P)
    assert r.status_code == 409 and FOREIGN not in r.text, r.text
    assert r.json()["error"]["code"] == "router_cycle"
    r = app.put("/v0/routers/tenant42:back", json=back, headers=F)
    assert r.status_code == 409 and f"{FOREIGN}:mid" in r.json()["error"]["detail"]["cycle"]


def test_deleting_a_topic_reports_only_the_routers_the_key_may_see(app: TestClient) -> None:
    # secret:bridge feeds tenant42:inbox; deleting the topic cascades it (spec §1.4)
    r = app.delete(topic("tenant42:inbox"), headers=P)
    assert r.status_code == 200 and FOREIGN not in r.text, r.text
    assert r.json()["routers_removed"] == []
    assert app.get(f"/v0/routers/{FOREIGN}:bridge", headers=F).status_code == 404


# --- dead letters -----------------------------------------------------------------------------
def test_a_dead_letter_topic_outside_the_allowlist_is_refused(app: TestClient) -> None:
    cfg = {"type": "queue", "max_deliveries": 1, "dead_letter": f"{FOREIGN}:dlq"}
    forbidden(app.put(topic("tenant42:q"), json=cfg, headers=P))
    forbidden(
        app.post(topic("tenant42:q"), json={"records": [{"data": 1}], "config": cfg}, headers=P)
    )
    assert app.get(topic("tenant42:q"), headers=F).status_code == 404  # nothing created
    mk_topic(app, "tenant42:q2")
    forbidden(app.put(topic("tenant42:q2"), json=cfg, headers=P))  # nor reconfigured
    assert app.get(topic("tenant42:q2"), headers=F).json()["config"]["dead_letter"] is None
    ok = {**cfg, "dead_letter": "tenant42:dlq"}
    assert app.put(topic("tenant42:q"), json=ok, headers=P).status_code == 201


# --- watch sessions ---------------------------------------------------------------------------
def test_a_watch_session_opens_only_for_its_creator(app: TestClient) -> None:
    mk_topic(app, "tenant42:w")
    wid = app.post("/v0/watch", json={"topics": {"tenant42:w": {}}}, headers=F).json()["wid"]
    url = f"/v0/watch/{wid}"
    for other in (P, READER, WRITER):
        unauthorized(app.get(url, headers={**SSE, **other}))
        unauthorized(app.get(url, headers=other))  # 401 whatever the Accept
    token = PREFIX.headers["authorization"].split()[1]
    unauthorized(app.get(url, params={"token": token}, headers=SSE))
    unauthorized(app.get(url))


def test_a_narrowed_allowlist_closes_the_keys_older_sessions(
    settings: Settings, aws: AwsClients, schema_path: str
) -> None:
    wide = tenant_settings(settings, schema_path, keys="full-key,t42::tenant42:|shared.")
    narrow = tenant_settings(settings, schema_path, keys="full-key,t42::tenant42:")
    with TestClient(create_app(wide, aws)) as c:
        mk_topic(c, "shared.news")
        r = c.post("/v0/watch", json={"topics": {"shared.news": {}}}, headers=P)
        wid = r.json()["wid"]
    # WHEN the same key comes back after a restart with a narrower allowlist
    with TestClient(create_app(narrow, aws)) as c:
        forbidden(c.get(f"/v0/watch/{wid}", headers={**SSE, **P}))


# --- credentials first ------------------------------------------------------------------------
def test_v1_asks_for_credentials_before_looking_at_the_path(app: TestClient) -> None:
    """Without a valid key every /v1 request is 401: a subresource this server lacks, a
    stream that does not exist, a name that is not valid."""
    for headers in ({}, {"authorization": "Bearer not-a-key"}):
        for method, path in (
            ("GET", "/v1/stream/nope/_search"),
            ("POST", "/v1/stream/nope/_aggregate"),
            ("GET", "/v1/stream/nope/_details"),
            ("GET", "/v1/stream/nope/touch/meta"),
            ("POST", "/v1/stream/nope/_schema"),
            ("HEAD", "/v1/stream/nope"),
            ("GET", "/v1/stream/bad%01name"),
            ("PUT", f"/v1/stream/{FOREIGN}:stream/_search"),
        ):
            unauthorized(app.request(method, path, headers=headers))
    # and a key outside its allowlist is 403 before any lookup (not 404)
    forbidden(app.get(f"/v1/stream/{FOREIGN}:nope/_search", headers=P))
    forbidden(app.get(f"/v1/stream/{FOREIGN}:nope/touch/meta", headers=P))


def test_v0_streams_ask_for_credentials_before_accept(app: TestClient) -> None:
    mk_queue(app, "tenant42:jobs")
    unauthorized(app.get(topic("tenant42:jobs", "/work"), params={"node": "n"}))
    unauthorized(app.get("/v0/watch/wid_whatever"))


# --- /api/v1 notifications admin --------------------------------------------------------------
def replayed(c: TestClient, event_type: str) -> int:
    body = {"event_type": event_type, "identifier": {"name": "x"}, "from_id": "1"}
    r = c.post("/api/v1/replay", json=body, headers=F)
    assert r.status_code == 200, r.text
    return r.text.count("event: replay\n")


def test_a_prefix_limited_admin_key_administers_its_own_streams_only(app: TestClient) -> None:
    mk_note(app, "t42_alerts")
    assert replayed(app, "secret_alerts") == 1
    # every stream at once, or another tenant's (by name, alias or unknown name): 403
    assert app.delete("/api/v1/admin/wipe/all", headers=P).status_code == 403
    for name in ("secret_alerts", "SECRET_ALERTS", "secret_nothing"):
        r = app.request(
            "DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": name}, headers=P
        )
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", r.text
    assert app.delete("/api/v1/admin/notification/secret_alerts@1", headers=P).status_code == 403
    assert replayed(app, "secret_alerts") == 1  # untouched
    # its own: allowed
    r = app.request(
        "DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": "t42_alerts"}, headers=P
    )
    assert r.status_code == 200, r.text
    assert replayed(app, "t42_alerts") == 0
    # an unrestricted admin key may wipe everything
    assert app.delete("/api/v1/admin/wipe/all", headers=F).status_code == 200
    assert replayed(app, "secret_alerts") == 0


def test_overlapping_prefixes_list_each_name_once(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="full-key,ov::tenant42:|tenant42:a")
    ov = {"authorization": "Bearer ov"}
    for name in ("tenant42:a1", "tenant42:b", f"{FOREIGN}:c"):
        mk_topic(c, name)
        mk_stream(c, name)
    listed = [t["topic"] for t in c.get("/v0/topics", headers=ov).json()["topics"]]
    assert listed == ["tenant42:a1", "tenant42:b"]
    assert [s["name"] for s in c.get("/v1/streams", headers=ov).json()] == listed
