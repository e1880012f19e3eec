"""/v1/stream/{name}/touch/* (state-protocol live invalidation) over HTTP: the routes exist only
with touch enabled; waits are touched by later matching appends (table, watch, membership and
projected-field keys) and only by those; activation is idempotent, not retroactive, rate-limited,
and survives racing activations; cursors of an earlier incarnation are stale; a wait parked in one
app instance is woken by an append through another one (no shared memory between them), and
one parked in a server process by an append through another server process (marked e2e)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient

from headwater.durable import touch
from headwater.services import Services

pytestmark = pytest.mark.api

JSON = {"Content-Type": "application/json"}
TODOS = "public.todos"
FIELDS = [{"name": "tenantId", "encoding": "string"}, {"name": "status", "encoding": "string"}]
TID = touch.template_id(TODOS, ["status", "tenantId"])


def url(name: str, sub: str = "") -> str:
    return f"/v1/stream/{name}" + (f"/{sub}" if sub else "")


def services(client: TestClient) -> Services:
    return client.app.state.services.get()  # type: ignore[attr-defined,no-any-return]


def touch_key(client: TestClient, name: str) -> str:
    """The S3 key of the stream's current touch templates revision (read from its head)."""
    streams = services(client).streams
    _, state = client.portal.call(streams.lookup, name)  # type: ignore[union-attr]
    return state.touch_key


def make_stream(client: TestClient, name: str, **touch_opts: Any) -> None:
    assert client.put(url(name), headers=JSON).status_code == 201
    profile = {"kind": "state-protocol", "touch": {"enabled": True, **touch_opts}}
    r = client.post(url(name, "_profile"), content=json.dumps({"profile": profile}), headers=JSON)
    assert r.status_code == 200, r.text


def change(
    op: str, value: Any = None, old: Any = None, entity: str = TODOS, key: str = "1"
) -> dict[str, Any]:
    rec: dict[str, Any] = {"type": entity, "key": key, "headers": {"operation": op}}
    if value is not None:
        rec["value"] = value
    if old is not None:
        rec["old_value"] = old
    return rec


def append(client: TestClient, name: str, *records: dict[str, Any]) -> None:
    r = client.post(url(name), content=json.dumps(list(records)), headers=JSON)
    assert r.status_code == 204, r.text


def meta(client: TestClient, name: str) -> dict[str, Any]:
    r = client.get(url(name, "touch/meta"))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def wait(client: TestClient, name: str, **body: Any) -> dict[str, Any]:
    body.setdefault("timeoutMs", 0)
    r = client.post(url(name, "touch/wait"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def activate(
    client: TestClient, name: str, templates: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    body = {"templates": templates, **extra}
    r = client.post(url(name, "touch/templates/activate"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def assert_envelope(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]  # type: ignore[no-any-return]


def todo(tenant: str, status: str, title: str = "t") -> dict[str, Any]:
    return {"id": "1", "tenantId": tenant, "status": status, "title": title}


def test_routes_are_404_unless_the_profile_is_state_protocol_with_touch_enabled(
    client: TestClient,
) -> None:
    # GIVEN a generic stream, a state-protocol stream without touch, and one with touch off
    assert client.put(url("g"), headers=JSON).status_code == 201
    assert client.put(url("sp"), headers=JSON).status_code == 201
    body: dict[str, Any] = {"profile": {"kind": "state-protocol"}}
    assert client.post(url("sp", "_profile"), content=json.dumps(body), headers=JSON).is_success
    make_stream(client, "off")
    body = {"profile": {"kind": "state-protocol", "touch": {"enabled": False}}}
    assert client.post(url("off", "_profile"), content=json.dumps(body), headers=JSON).is_success
    wait_body = json.dumps({"cursor": "now", "keys": ["a"]})
    for name in ("g", "sp", "off", "missing"):
        # THEN every touch route is a 404 in the /v1 envelope
        assert_envelope(client.get(url(name, "touch/meta")), 404)
        assert_envelope(client.post(url(name, "touch/wait"), content=wait_body), 404)
        r = client.post(url(name, "touch/templates/activate"), content=json.dumps({}))
        assert_envelope(r, 404)
    # AND with touch enabled they exist
    make_stream(client, "on")
    assert meta(client, "on")["settled"] is True


def test_table_key_wait_is_touched_only_by_a_later_change_of_that_table(
    client: TestClient,
) -> None:
    make_stream(client, "tbl")
    start = meta(client, "tbl")
    assert start["cursor"] == f"{start['epoch']}:0" and start["generation"] == 0
    keys = [touch.table_key(TODOS)]
    # WHEN only another table and control messages change
    append(
        client,
        "tbl",
        change("insert", {"id": "1"}, entity="public.users"),
        {"headers": {"control": "snapshot-start"}},
    )
    # THEN a wait from the earlier cursor times out, with the cursor moved past them
    got = wait(client, "tbl", cursor=start["cursor"], keys=keys, interestMode="coarse")
    assert got["touched"] is False and got["effectiveWaitKind"] == "tableKey"
    assert got["cursor"] == f"{start['epoch']}:2" == meta(client, "tbl")["cursor"]
    # WHEN the table changes
    append(client, "tbl", change("delete", old=todo("t1", "open")))
    # THEN the old cursor and the advanced one are both touched (keyIds work as keys do)
    for cursor in (start["cursor"], got["cursor"]):
        hit = wait(client, "tbl", cursor=cursor, keyIds=[touch.key_id(keys[0])])
        assert hit["touched"] is True and hit["bucketMaxSourceOffsetSeq"] == "3", hit
        assert hit["cursor"] == f"{start['epoch']}:3"
    # AND from the tail nothing has happened yet
    assert wait(client, "tbl", cursor="now", keys=keys)["touched"] is False


def test_fine_keys_watch_membership_and_projected_fields(client: TestClient) -> None:
    make_stream(client, "fine")
    act = activate(client, "fine", [{"entity": TODOS, "fields": FIELDS}])
    assert act["activated"] == [
        {
            "templateId": TID,
            "state": "active",
            "activeFromTouchOffset": meta(client, "fine")["cursor"],
        }
    ]
    assert act["denied"] == [] and act["limits"] == {
        "maxActiveTemplatesPerStream": 2048,
        "maxActiveTemplatesPerEntity": 256,
    }
    open_t1 = ["open", "t1"]  # argument order: the sorted field names (status, tenantId)
    watch = touch.watch_key(TID, open_t1)
    member = touch.membership_key(TID, open_t1)
    title = touch.projected_field_key(TID, "title", open_t1)

    def touched_by(*records: dict[str, Any], key: str) -> bool:
        cursor = meta(client, "fine")["cursor"]
        append(client, "fine", *records)
        got = wait(client, "fine", cursor=cursor, keys=[key], templateIdsUsed=[TID])
        assert got["effectiveWaitKind"] == "fineKey"
        if not got["touched"]:
            assert got["cursor"] == meta(client, "fine")["cursor"]  # advanced at the timeout
        return bool(got["touched"])

    # another tenant's rows touch none of t1's keys; t1's insert touches its watch key
    assert not touched_by(change("insert", todo("t2", "open")), key=watch)
    assert touched_by(change("insert", todo("t1", "open")), key=watch)
    assert touched_by(change("insert", todo("t1", "open")), key=member)
    # a title change inside the tuple: the projected field key, not membership
    upd = change("update", todo("t1", "open", "new"), todo("t1", "open", "old"))
    assert touched_by(upd, key=title)
    assert not touched_by(upd, key=member)
    # moving out of the partition: membership of the old tuple (from old_value)
    moved = change("update", todo("t1", "done"), todo("t1", "open"))
    assert touched_by(moved, key=member)
    # an update without old_value (onMissingBefore=coarse): no fine keys at all
    assert not touched_by(change("update", todo("t1", "open")), key=watch)
    # exact keys match the 64-bit key itself
    cursor = meta(client, "fine")["cursor"]
    append(client, "fine", change("insert", todo("t1", "open")))
    assert wait(client, "fine", cursor=cursor, keys=[watch], exact=True)["touched"] is True
    other = touch.watch_key(TID, ["open", "t9"])
    assert wait(client, "fine", cursor=cursor, keys=[other], exact=True)["touched"] is False
    # coarse waits with templateIdsUsed wait on the templates' table keys
    got = wait(
        client, "fine", cursor=cursor, keys=[other], interestMode="coarse", templateIdsUsed=[TID]
    )
    assert got["touched"] is True and got["effectiveWaitKind"] == "tableKey"


def test_activation_is_idempotent_and_not_retroactive(client: TestClient) -> None:
    make_stream(client, "retro")
    before = meta(client, "retro")["cursor"]
    append(client, "retro", change("insert", todo("t1", "open")))
    first = activate(client, "retro", [{"entity": TODOS, "fields": FIELDS}])["activated"][0]
    ref = touch_key(client, "retro")
    # THEN the template starts after the entry appended before it
    assert first["activeFromTouchOffset"] == meta(client, "retro")["cursor"] != before
    watch = touch.watch_key(TID, ["open", "t1"])
    assert wait(client, "retro", cursor=before, keys=[watch])["touched"] is False
    # AND activating again (fields in another order) is the same template, with no write
    again = activate(client, "retro", [{"entity": TODOS, "fields": FIELDS[::-1]}])
    assert again["activated"] == [first]
    assert touch_key(client, "retro") == ref
    # AND a later matching change touches the wait from the old cursor
    append(client, "retro", change("insert", todo("t1", "open")))
    assert wait(client, "retro", cursor=before, keys=[watch])["touched"] is True
    assert meta(client, "retro")["activeTemplates"] == 1


def test_denials_rate_limit_and_caps(client: TestClient) -> None:
    make_stream(
        client,
        "deny",
        templates={"activationRateLimitPerMinute": 2, "maxActiveTemplatesPerEntity": 2},
    )
    fields = [[{"name": f"f{i}", "encoding": "int64"}] for i in range(3)]
    got = activate(
        client,
        "deny",
        [
            {"entity": "e", "fields": [{"name": "a", "encoding": "uuid"}]},
            {"entity": "e", "fields": [{"name": "a", "encoding": "string"}] * 2},
            {"entity": "e", "fields": fields[0]},
            {"entity": "e", "fields": fields[1]},
            {"entity": "e", "fields": fields[2]},
        ],
    )
    zero = {"templateId": "0000000000000000", "reason": "invalid"}
    third = touch.template_id("e", ["f2"])
    assert got["denied"] == [zero, zero, {"templateId": third, "reason": "rate_limited"}]
    assert [a["templateId"] for a in got["activated"]] == [
        touch.template_id("e", ["f0"]),
        touch.template_id("e", ["f1"]),
    ]
    # the bucket is stored with the templates: another app instance sees it empty too
    streams = services(client).streams
    real = streams.clock
    try:
        streams.clock = lambda: real() + 60_000  # the bucket refills; the entity cap evicts LRU
        got = activate(client, "deny", [{"entity": "e", "fields": fields[2]}])
        assert [a["templateId"] for a in got["activated"]] == [third]
        assert meta(client, "deny")["activeTemplates"] == 2
    finally:
        streams.clock = real


def test_rate_limit_is_shared_by_app_instances(client: TestClient, make_client: MakeClient) -> None:
    make_stream(client, "rl", templates={"activationRateLimitPerMinute": 1})
    activate(client, "rl", [{"entity": "e", "fields": [{"name": "a", "encoding": "string"}]}])
    got = activate(
        make_client(), "rl", [{"entity": "e", "fields": [{"name": "b", "encoding": "string"}]}]
    )
    assert got["denied"] == [
        {"templateId": touch.template_id("e", ["b"]), "reason": "rate_limited"}
    ]


def test_ttl_expiry_and_heartbeats_write_only_when_due(client: TestClient) -> None:
    make_stream(client, "ttl", templates={"lastSeenPersistIntervalMs": 10_000})
    activate(client, "ttl", [{"entity": TODOS, "fields": FIELDS}], inactivityTtlMs=60_000)
    streams = services(client).streams
    real = streams.clock

    def ref() -> str:
        return touch_key(client, "ttl")

    first = ref()
    watch = touch.watch_key(TID, ["open", "t1"])
    try:
        # a heartbeat soon after activation writes nothing
        wait(client, "ttl", cursor="now", keys=[watch], templateIdsUsed=[TID])
        assert ref() == first
        # one past the persist interval writes last_seen
        streams.clock = lambda: real() + 20_000
        wait(client, "ttl", cursor="now", keys=[watch], templateIdsUsed=[TID])
        assert ref() != first
        # 70 s later the template is alive (seen at +20 s); 90 s later it is not
        streams.clock = lambda: real() + 70_000
        assert meta(client, "ttl")["activeTemplates"] == 1
        streams.clock = lambda: real() + 90_000
        assert meta(client, "ttl")["activeTemplates"] == 0
        cursor = meta(client, "ttl")["cursor"]
        append(client, "ttl", change("insert", todo("t1", "open")))
        assert wait(client, "ttl", cursor=cursor, keys=[watch])["touched"] is False
    finally:
        streams.clock = real


def test_stale_after_delete_and_recreate(client: TestClient) -> None:
    make_stream(client, "st")
    append(client, "st", change("insert", todo("t1", "open")))
    old = meta(client, "st")
    assert client.delete(url("st")).status_code == 204
    make_stream(client, "st")
    new = meta(client, "st")
    assert new["epoch"] != old["epoch"] and new["cursor"] == f"{new['epoch']}:0"
    got = wait(client, "st", cursor=old["cursor"], keys=[touch.table_key(TODOS)])
    assert got["stale"] is True and got["cursor"] == new["cursor"]
    assert got["error"] == {"code": "stale", "message": touch.STALE_MESSAGE}
    # a cursor of another stream is stale too
    make_stream(client, "st2")
    got = wait(client, "st2", cursor=new["cursor"], keys=["k"])
    assert got["stale"] is True
    # a seq past the tail (same incarnation) is read as the tail, as the reference does
    got = wait(client, "st", cursor=f"{new['epoch']}:99", keys=["k"])
    assert got["touched"] is False and got["cursor"] == new["cursor"]


def test_a_parked_wait_is_woken_by_an_append_through_another_app_instance(
    client: TestClient, make_client: MakeClient
) -> None:
    other = make_client()  # its own engine, notifier and caches: it shares only the tables
    make_stream(client, "park")
    activate(other, "park", [{"entity": TODOS, "fields": FIELDS}])
    cursor = meta(client, "park")["cursor"]
    watch = touch.watch_key(TID, ["open", "t1"])
    result: dict[str, Any] = {}

    def park() -> None:
        t0 = time.monotonic()
        result["body"] = wait(client, "park", cursor=cursor, keys=[watch], timeoutMs=4_000)
        result["s"] = time.monotonic() - t0

    waiter = threading.Thread(target=park)
    waiter.start()
    time.sleep(0.5)
    append(other, "park", change("insert", todo("t2", "open")))  # not for this wait
    time.sleep(0.5)
    assert waiter.is_alive()
    append(other, "park", change("insert", todo("t1", "open")))
    waiter.join(10)
    assert not waiter.is_alive()
    assert result["body"]["touched"] is True, result
    assert result["body"]["bucketMaxSourceOffsetSeq"] == "2"
    assert result["s"] < 3.5, result


def test_concurrent_activations_from_two_instances_both_survive(
    client: TestClient, make_client: MakeClient
) -> None:
    other = make_client()
    make_stream(client, "race")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(c: TestClient, prefix: str) -> None:
        try:
            barrier.wait()
            for i in range(4):
                activate(
                    c,
                    "race",
                    [{"entity": "e", "fields": [{"name": f"{prefix}{i}", "encoding": "string"}]}],
                )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c, p)) for c, p in ((client, "a"), (other, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert meta(client, "race")["activeTemplates"] == 8
    # and every one of them derives fine keys
    cursor = meta(other, "race")["cursor"]
    append(
        client,
        "race",
        change("insert", {f"{p}{i}": "v" for p in "ab" for i in range(4)}, entity="e"),
    )
    for p in "ab":
        for i in range(4):
            key = touch.watch_key(touch.template_id("e", [f"{p}{i}"]), ["v"])
            assert wait(other, "race", cursor=cursor, keys=[key], exact=True)["touched"] is True


def test_an_activation_that_loses_the_race_is_planned_again(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_stream(client, "lose")
    streams = services(client).streams
    stale = client.portal.call(touch.open_stream, streams, "lose")  # type: ignore[union-attr]
    activate(client, "lose", [{"entity": "e", "fields": [{"name": "a", "encoding": "string"}]}])
    outcomes: list[bool] = []
    commit = streams.commit_conf_blob

    async def spy(*args: Any) -> bool:
        ok = await commit(*args)
        outcomes.append(ok)
        return ok

    monkeypatch.setattr(streams, "commit_conf_blob", spy)
    decl = [touch.Decl("e", (("b", "string"),))]

    async def late() -> dict[str, Any]:
        return await touch.activate(streams, "lose", decl, 60_000, stale)

    client.portal.call(late)  # type: ignore[union-attr]
    assert outcomes == [False, True]
    assert meta(client, "lose")["activeTemplates"] == 2


def test_validation_errors_are_400_in_the_envelope(client: TestClient) -> None:
    make_stream(client, "v")
    tpl: dict[str, Any] = {"entity": "e", "fields": [{"name": "a", "encoding": "string"}]}
    bad_activations: list[Any] = [
        "not json",
        {"templates": []},
        {"templates": [tpl] * 257},
        {"templates": [{"entity": " ", "fields": tpl["fields"]}]},
        {"templates": [{"entity": "e", "fields": tpl["fields"] * 4}]},
        {"templates": [{"entity": "e", "fields": [{"name": "", "encoding": "string"}]}]},
        {"templates": [tpl], "inactivityTtlMs": -1},
    ]
    for body in bad_activations:
        content = body if isinstance(body, str) else json.dumps(body)
        err = assert_envelope(
            client.post(url("v", "touch/templates/activate"), content=content), 400
        )
        assert err["code"] == "invalid_request"
    cursor = meta(client, "v")["cursor"]
    bad_waits: list[Any] = [
        "{",
        {"cursor": cursor},
        {"cursor": cursor, "keys": ["k"] * 1 + [f"k{i}" for i in range(1024)]},
        {"cursor": cursor, "keyIds": [2**32]},
        {"cursor": cursor, "keys": [""]},
        {"cursor": "", "keys": ["k"]},
        {"cursor": "abc", "keys": ["k"]},
        {"cursor": "12:3", "keys": ["k"]},
        {"cursor": cursor, "keys": ["k"], "timeoutMs": "1"},
        {"cursor": cursor, "keys": ["k"], "interestMode": "broad"},
        {"cursor": cursor, "keys": ["k"], "exact": "yes"},
        {"cursor": cursor, "keys": ["k"], "exact": True},
        {"cursor": cursor, "keys": [f"{i:016x}" for i in range(17)], "exact": True},
        {"cursor": cursor, "keys": ["0" * 16], "exact": True, "interestMode": "coarse"},
        {"cursor": cursor, "keys": ["k"], "templateIdsUsed": [1]},
        {"cursor": cursor, "keys": ["k"], "declareTemplates": [{"entity": "e"}]},
    ]
    for body in bad_waits:
        content = body if isinstance(body, str) else json.dumps(body)
        r = client.post(url("v", "touch/wait"), content=content)
        assert assert_envelope(r, 400)["code"] == "invalid_request", body
    assert_envelope(client.get(url("v", "touch/meta"), params={"settle": "now"}), 400)
    assert_envelope(client.get(url("v", "touch/meta"), params={"timeoutMs": "x"}), 400)
    assert_envelope(client.get(url("v", "touch/wait")), 400)  # the reference: unsupported method
    # settle=flush answers at once with a settled cursor
    r = client.get(url("v", "touch/meta"), params={"settle": "flush", "timeoutMs": "30000"})
    assert r.status_code == 200 and r.json()["settled"] is True and r.json()["cursor"] == cursor


def test_declare_templates_inline_and_heartbeat(client: TestClient) -> None:
    make_stream(client, "decl")
    watch = touch.watch_key(TID, ["open", "t1"])
    cursor = meta(client, "decl")["cursor"]
    got = wait(
        client,
        "decl",
        cursor=cursor,
        keys=[watch],
        templateIdsUsed=[TID],
        declareTemplates=[{"entity": TODOS, "fields": FIELDS}],
    )
    assert got["touched"] is False
    assert meta(client, "decl")["activeTemplates"] == 1
    append(client, "decl", change("insert", todo("t1", "open")))
    assert (
        wait(client, "decl", cursor=cursor, keys=[watch], templateIdsUsed=[TID])["touched"] is True
    )
