"""State-protocol touch (durable/touch.py) without storage: key derivation against the reference's
golden vectors, template argument encodings, canonical changes and the keys they touch,
template activation planning, and wait request validation."""

from __future__ import annotations

from typing import Any

import pytest
import xxhash

from headwater.durable import touch as t
from headwater.errors import InvalidRequest

pytestmark = pytest.mark.unit

TODOS = "public.todos"
CFG: dict[str, Any] = {"templates": {"lastSeenPersistIntervalMs": 300_000}}
LIMITS = t.Limits(per_stream=2048, per_entity=256, per_minute=100)


# --- keys --------------------------------------------------------------------------------------
def test_golden_vectors_of_the_reference() -> None:
    # prisma/streams test/live_keys.test.ts ("cross-language implementations will drift")
    fields = ["status", "tenantId", "userId"]
    tid = t.template_id(TODOS, fields)
    args = ["open", "t1", "u1"]
    assert t.table_key(TODOS) == "feadeb84d447fd63"
    assert tid == "ddd2330fdab379da"
    assert t.watch_key(tid, args) == "39accd125778dc36"
    assert t.membership_key(tid, args) == "eae633979a7ee466"
    assert t.projected_field_key(tid, "title", args) == "1ecc53e76a89f0d5"


def _xxh3(data: bytes) -> str:
    return f"{xxhash.xxh3_64_intdigest(data):016x}"


def test_keys_follow_the_documented_formulas() -> None:
    # docs/live.md: the template key hashes the template id's 8 big-endian bytes
    tid = t.template_id("e", ["a", "b"])
    assert tid == _xxh3(b"tpl\0e\0a\0b")
    assert t.table_key("e") == _xxh3(b"tbl\0e")
    be = bytes.fromhex(tid)
    assert t.template_key(tid) == _xxh3(b"tpl\0" + be) != tid
    assert t.watch_key(tid, ["x", "y"]) == _xxh3(b"key\0" + be + b"\0x\0y")
    assert t.membership_key(tid, ["x"]) == _xxh3(b"mem\0" + be + b"\0x")
    assert t.projected_field_key(tid, "f", ["x"]) == _xxh3(b"fld\0" + be + b"\0f\0x")
    assert t.watch_key(tid, ["x"]) != _xxh3(b"key\0" + be[::-1] + b"\0x")


def test_key_ids_are_the_low_32_bits_of_hex16_keys_else_xxh32() -> None:
    assert t.key_id("feadeb84d447fd63") == 0xD447FD63
    assert t.key_id(" FEADEB84D447FD63 ") == 0xD447FD63  # trimmed, case-insensitive
    assert t.key_id("not-a-hex-key") == xxhash.xxh32_intdigest(b"not-a-hex-key")
    assert t.key_id("ABC") == xxhash.xxh32_intdigest(b"abc")


# --- template arguments -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "encoding", "expected"),
    [
        ("open", "string", "open"),
        (12, "string", "12"),
        (1.0, "string", "1"),
        (1.5, "string", "1.5"),
        (1e21, "string", "1e+21"),
        (1e-7, "string", "1e-7"),
        (0.000001, "string", "0.000001"),
        (True, "string", "true"),
        ({"a": 1}, "string", None),
        (None, "string", None),
        (42, "int64", "42"),
        (-7.0, "int64", "-7"),
        (2**53 + 1, "int64", "9007199254740992"),  # a double in JavaScript
        (" -12 ", "int64", "-12"),
        ("012", "int64", None),
        (1.5, "int64", None),
        (True, "int64", None),
        (True, "bool", "1"),
        (False, "bool", "0"),
        (1, "bool", None),
        ("2026-03-23T10:30:00Z", "datetime", "2026-03-23T10:30:00.000Z"),
        ("2026-03-23T12:30:00.1234+02:00", "datetime", "2026-03-23T10:30:00.123Z"),
        ("2026-03-23", "datetime", "2026-03-23T00:00:00.000Z"),
        ("Mon, 23 Mar 2026 10:30:00 GMT", "datetime", "2026-03-23T10:30:00.000Z"),
        ("2026-02-30", "datetime", None),
        ("soon", "datetime", None),
        (5, "datetime", None),
        ("AAEC", "bytes", "AAEC"),
        (5, "bytes", None),
        ("x", "uuid", None),
    ],
)
def test_template_argument_encodings(value: object, encoding: str, expected: str | None) -> None:
    assert t.encode_arg(value, encoding) == expected


# --- changes and touches ------------------------------------------------------------------------
def test_canonical_change_of_state_protocol_records() -> None:
    rec = {"type": TODOS, "key": "1", "value": {"a": 1}, "headers": {"operation": "insert"}}
    ch = t.canonical_change(rec)
    assert ch == t.Change(TODOS, "1", "insert", t.ABSENT, {"a": 1})
    nulled = t.canonical_change({**rec, "old_value": None})
    assert nulled is not None and nulled.before is None  # null is not absent
    assert t.canonical_change({"headers": {"control": "reset"}}) is None
    assert t.canonical_change({**rec, "type": " "}) is None
    assert t.canonical_change({**rec, "headers": {"operation": "upsert"}}) is None
    assert t.canonical_change([rec]) is None


def _tpl(fields: tuple[str, ...], encodings: tuple[str, ...] | None = None) -> t.Template:
    enc = encodings or ("string",) * len(fields)
    return t.Template(t.template_id(TODOS, fields), TODOS, fields, enc, 0, 0, 0, 60_000)


def _keys(change: t.Change, tpl: t.Template, policy: str = "coarse") -> set[str]:
    return set(t.touched(change, [tpl], policy).keys)


ROW = {"id": "1", "status": "open", "tenantId": "t1", "title": "a"}


def test_insert_and_delete_touch_table_watch_and_membership_keys() -> None:
    tpl = _tpl(("status", "tenantId"))
    args = ["open", "t1"]
    want = {t.table_key(TODOS), t.watch_key(tpl.id, args), t.membership_key(tpl.id, args)}
    assert _keys(t.Change(TODOS, "1", "insert", after=ROW), tpl) == want
    assert _keys(t.Change(TODOS, "1", "delete", before=ROW), tpl) == want
    # a row without the template's fields: the table key only
    assert _keys(t.Change(TODOS, "1", "insert", after={"id": "1"}), tpl) == {t.table_key(TODOS)}


def test_update_inside_the_tuple_touches_projected_fields_that_changed() -> None:
    tpl = _tpl(("status", "tenantId"))
    args = ["open", "t1"]
    after = {**ROW, "title": "b", "done": None, "nested": {"x": 1}}
    before = {**ROW, "nested": {"x": 2}}
    got = _keys(t.Change(TODOS, "1", "update", before=before, after=after), tpl)
    assert got == {
        t.table_key(TODOS),
        t.watch_key(tpl.id, args),
        t.projected_field_key(tpl.id, "title", args),
        t.projected_field_key(tpl.id, "done", args),  # undefined -> null is a change
    }  # objects are not projected values; membership is unchanged


def test_update_across_tuples_touches_both_memberships() -> None:
    tpl = _tpl(("status", "tenantId"))
    moved = t.Change(TODOS, "1", "update", before=ROW, after={**ROW, "status": "done"})
    old, new = ["open", "t1"], ["done", "t1"]
    assert _keys(moved, tpl) == {
        t.table_key(TODOS),
        t.watch_key(tpl.id, old),
        t.watch_key(tpl.id, new),
        t.membership_key(tpl.id, old),
        t.membership_key(tpl.id, new),
    }


@pytest.mark.parametrize("before", [t.ABSENT, None, {"id": "1"}])
def test_missing_before_images_follow_on_missing_before(before: object) -> None:
    tpl = _tpl(("status", "tenantId"))
    ch = t.Change(TODOS, "1", "update", before=before, after=ROW)
    args = ["open", "t1"]
    assert _keys(ch, tpl, "coarse") == {t.table_key(TODOS)}
    assert _keys(ch, tpl, "skipBefore") == {
        t.table_key(TODOS),
        t.watch_key(tpl.id, args),
        t.membership_key(tpl.id, args),
        t.projected_field_key(tpl.id, "id", args),
        t.projected_field_key(tpl.id, "title", args),
    }
    assert t.touched(ch, [tpl], "error").everything is True


def test_number_and_boolean_equality_is_javascripts() -> None:
    tpl = _tpl(("tenantId",))
    before = {"tenantId": "t1", "n": 1, "flag": 1}
    after = {"tenantId": "t1", "n": 1.0, "flag": True}
    got = _keys(t.Change(TODOS, "1", "update", before=before, after=after), tpl)
    assert t.projected_field_key(tpl.id, "n", ["t1"]) not in got  # 1 === 1.0
    assert t.projected_field_key(tpl.id, "flag", ["t1"]) in got  # 1 !== true


# --- activation planning ------------------------------------------------------------------------
def _decl(entity: str, *fields: tuple[str, object]) -> t.Decl:
    return t.Decl(entity, tuple(fields))


def _plan(
    doc: t.TemplateSet, *decls: t.Decl, now: int = 1_000, tail: int = 7, **kw: Any
) -> t.Activation:
    return t.plan_activation(
        doc,
        decls,
        ttl_ms=kw.pop("ttl_ms", 60_000),
        now_ms=now,
        tail=tail,
        limits=kw.pop("limits", LIMITS),
        cfg=CFG,
    )


def test_activation_sorts_fields_starts_at_the_tail_and_is_idempotent() -> None:
    plan = _plan(t.TemplateSet(), _decl(TODOS, ("tenantId", "string"), ("status", "string")))
    assert plan.doc is not None and plan.denied == []
    (tpl,) = plan.activated
    assert tpl.id == t.template_id(TODOS, ["status", "tenantId"])
    assert (tpl.fields, tpl.active_from, tpl.last_seen_ms) == (("status", "tenantId"), 7, 1_000)
    # again, later and at another tail: the same template, and nothing to store yet
    again = _plan(
        plan.doc, _decl(TODOS, ("status", "string"), ("tenantId", "string")), now=2_000, tail=9
    )
    assert again.doc is None and again.activated == [tpl]
    # past the heartbeat interval (min(persist, ttl/2) = 30 s) last_seen is stored
    later = _plan(
        plan.doc, _decl(TODOS, ("status", "string"), ("tenantId", "string")), now=31_000, tail=9
    )
    assert later.doc is not None and later.doc.templates[0].last_seen_ms == 31_000
    assert later.doc.templates[0].active_from == 7  # not moved: not retroactive, not reset


def test_activation_denials() -> None:
    doc = _plan(t.TemplateSet(), _decl("e", ("a", "string"))).doc
    assert doc is not None
    plan = _plan(
        doc,
        _decl("e", ("a", "int64")),  # same id, other encoding
        _decl("e", ("b", "uuid")),
        _decl("e", ("b", "string"), ("b", "int64")),
    )
    assert plan.denied == [
        {"templateId": t.template_id("e", ["a"]), "reason": "invalid"},
        {"templateId": t.ZERO_ID, "reason": "invalid"},
        {"templateId": t.ZERO_ID, "reason": "invalid"},
    ]


def test_rate_limit_is_a_token_bucket_stored_with_the_templates() -> None:
    limits = t.Limits(2048, 256, 2)
    plan = _plan(
        t.TemplateSet(), *(_decl("e", (f"f{i}", "string")) for i in range(3)), limits=limits
    )
    assert [d["reason"] for d in plan.denied] == ["rate_limited"]
    assert plan.doc is not None and plan.doc.tokens == 0
    # 30 s later one token has come back
    later = _plan(
        plan.doc,
        _decl("e", ("g", "string")),
        _decl("e", ("h", "string")),
        now=31_000,
        limits=limits,
    )
    assert [a.fields for a in later.activated] == [("g",)]
    assert [d["reason"] for d in later.denied] == ["rate_limited"]


def test_caps_evict_the_least_recently_seen_and_expired_templates_are_dropped() -> None:
    limits = t.Limits(per_stream=3, per_entity=2, per_minute=0)
    doc = t.TemplateSet()
    for i, entity in enumerate(["a", "a", "b"]):
        plan = _plan(doc, _decl(entity, (f"f{i}", "string")), now=1_000 + i, limits=limits)
        assert plan.doc is not None
        doc = plan.doc
    plan = _plan(doc, _decl("a", ("new", "string")), now=2_000, limits=limits)
    assert plan.doc is not None
    assert sorted(x.fields[0] for x in plan.doc.templates) == ["f1", "f2", "new"]  # f0 was LRU
    # an expired template is gone from what is stored next, and is not live meanwhile
    far = 1_000_000
    assert plan.doc.live(far) == []
    fresh = _plan(plan.doc, _decl("c", ("z", "string")), now=far, limits=limits)
    assert fresh.doc is not None and [x.entity for x in fresh.doc.templates] == ["c"]


def test_heartbeats_are_due_only_after_a_fraction_of_the_ttl() -> None:
    doc = _plan(t.TemplateSet(), _decl("e", ("a", "string")), ttl_ms=10_000).doc
    assert doc is not None
    tid = doc.templates[0].id
    assert t.plan_heartbeat(doc, [tid], 2_000, CFG) is None
    beat = t.plan_heartbeat(doc, [tid], 6_500, CFG)  # ttl/2 = 5 s passed
    assert beat is not None and beat.templates[0].last_seen_ms == 6_500
    assert t.plan_heartbeat(doc, [tid], 20_000, CFG) is None  # expired: not revived
    assert t.plan_heartbeat(doc, ["ffffffffffffffff"], 6_500, CFG) is None


def test_template_sets_round_trip() -> None:
    doc = _plan(t.TemplateSet(), _decl("e", ("a", "bool"), ("b", "datetime"))).doc
    assert doc is not None
    assert t.TemplateSet.load(doc.dump()) == doc


# --- wait requests ------------------------------------------------------------------------------
def test_wait_requests_are_parsed_like_the_reference() -> None:
    req = t.parse_wait(
        {"cursor": " now ", "keys": [" a ", "a", "b"], "keyIds": [1, 1.0], "timeoutMs": 500_000}, {}
    )
    assert (req.cursor, req.keys, req.key_ids, req.timeout_ms) == ("now", ("a", "b"), (1,), 120_000)
    assert req.interest == "fine" and not req.declare
    decl = t.parse_wait(
        {
            "cursor": "now",
            "keys": ["a"],
            "declareTemplates": [{"entity": "e", "fields": [{"name": "x"}]}],
        },
        {"templates": {"defaultInactivityTtlMs": 5}},
    )
    assert decl.declare == (t.Decl("e", (("x", None),)),) and decl.declare_ttl_ms == 5


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"cursor": "now"}, "wait requires keys or keyIds"),
        (
            {"cursor": "now", "keys": None},
            "wait.keys must be a non-empty string array when provided",
        ),
        (
            {"cursor": "now", "keys": [f"k{i}" for i in range(1025)]},
            "wait.keys too large (max 1024)",
        ),
        (
            {"cursor": "now", "keyIds": [-1]},
            "wait.keyIds must be a non-empty uint32 array when provided",
        ),
        (
            {"cursor": "now", "keyIds": [True]},
            "wait.keyIds must be a non-empty uint32 array when provided",
        ),
        ({"cursor": "now", "keyIds": list(range(1025))}, "wait.keyIds too large (max 1024)"),
        ({"cursor": " ", "keys": ["a"]}, "wait.cursor must be a non-empty string"),
        (
            {"cursor": "now", "keys": ["a"], "timeoutMs": None},
            "wait.timeoutMs must be a number (ms)",
        ),
        (
            {"cursor": "now", "keys": ["a"], "exact": 1},
            "wait.exact must be a boolean when provided",
        ),
        (
            {"cursor": "now", "keys": ["a"], "interestMode": "x"},
            "wait.interestMode must be 'fine' or 'coarse'",
        ),
        (
            {"cursor": "now", "keys": ["a"], "templateIdsUsed": [" "]},
            "wait.templateIdsUsed must be a string array",
        ),
        (
            {"cursor": "now", "keys": ["a"], "declareTemplates": [{"entity": "e", "fields": []}]},
            "wait.declareTemplates contains invalid template definitions",
        ),
        (
            {
                "cursor": "now",
                "keys": ["a"],
                "declareTemplates": [{"entity": "e", "fields": [{"name": "x"}]}],
                "inactivityTtlMs": "1",
            },
            "wait.inactivityTtlMs must be a non-negative number (ms)",
        ),
    ],
)
def test_wait_request_errors(body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        t.parse_wait(body, {})
    assert err.value.message == message


def test_template_declarations_limits() -> None:
    ok: dict[str, Any] = {"entity": " e ", "fields": [{"name": " a ", "encoding": "string"}]}
    assert t.parse_decls([ok], "x") == [t.Decl("e", (("a", "string"),))]
    for raw, message in [
        ([], "x must be a non-empty array"),
        ([ok] * 257, "x too large (max 256)"),
        ([{"entity": "e", "fields": ok["fields"] * 4}], "x contains invalid template definitions"),
        ([{"fields": ok["fields"]}], "x contains invalid template definitions"),
    ]:
        with pytest.raises(InvalidRequest) as err:
            t.parse_decls(raw, "x")
        assert err.value.message == message


def test_wait_plans() -> None:
    tpl = _tpl(("status", "tenantId"))
    watch = t.watch_key(tpl.id, ["open", "t1"])
    fine = t.plan_wait(t.WaitRequest("now", keys=(watch,), template_ids_used=(tpl.id,)), [tpl])
    assert fine.kind == "fineKey"
    assert fine.key_ids == {t.key_id(watch), t.key_id(t.template_key(tpl.id))}
    coarse = t.plan_wait(
        t.WaitRequest("now", keys=("ignored",), interest="coarse", template_ids_used=(tpl.id,)),
        [tpl],
    )
    assert coarse.kind == "tableKey" and coarse.key_ids == {t.key_id(t.table_key(TODOS))}
    # coarse with templates that are not active: the keys as given
    unknown = t.plan_wait(
        t.WaitRequest("now", keys=("k",), interest="coarse", template_ids_used=(tpl.id,)), []
    )
    assert unknown.kind == "fineKey" and unknown.key_ids == {t.key_id("k")}
    exact = t.plan_wait(t.WaitRequest("now", keys=(watch.upper(),), exact=True), [tpl])
    assert exact.exact_keys == {watch}
    hit = t.Touch(frozenset({watch}))
    twin = t.Touch(frozenset({"0" * 8 + watch[8:]}))  # another key with the same key id
    assert exact.matches(hit) and not exact.matches(twin)
    assert fine.matches(twin)  # keyId matching, as the reference's journal does
    assert t.WaitPlan("fineKey", frozenset({1})).matches(t.Touch(everything=True))
    with pytest.raises(InvalidRequest):
        t.plan_wait(t.WaitRequest("now", keys=("k",), exact=True), [])


def test_cursors() -> None:
    assert t.parse_cursor("ABCDEF0123456789:42") == ("abcdef0123456789", 42)
    for bad in ("now", "abc:1", "abcdef0123456789:-1", "abcdef0123456789:", ":1"):
        assert t.parse_cursor(bad) is None
