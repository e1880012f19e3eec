"""The filter= predicate language (protocol §4.1, §8.5) and the search.fields config it runs on."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.durable.fields import FieldBinding, FieldSpec, fields_from_config
from headwater.durable.filter import (
    MAX_FILTER_CLAUSES,
    MAX_FILTER_DEPTH,
    MAX_FILTER_LENGTH,
    And,
    Compare,
    FilterError,
    Has,
    Not,
    Or,
    Predicate,
    parse_filter,
)
from headwater.durable.jsonvalue import (
    MISSING,
    JsonPointerError,
    json_pointer_get,
    parse_json_pointer,
)

pytestmark = pytest.mark.unit


def field(kind: str, pointer: str, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "bindings": [{"version": 1, "jsonPointer": pointer}], **extra}


CONFIG: dict[str, Any] = {
    "primaryTimestampField": "ts",
    "fields": {
        "ts": field("date", "/ts", exact=True, column=True, exists=True, sortable=True),
        "service": field("keyword", "/service", normalizer="lowercase_v1", exact=True, exists=True),
        "requestId": field("keyword", "/requestId", exact=True, prefix=True, exists=True),
        "status": field("integer", "/status", exact=True, column=True, exists=True),
        "latency": field("float", "/latency", column=True, exists=True, aggregatable=True),
        "ok": field("bool", "/ok", exact=True, column=True, exists=True),
        "msg": field("text", "/msg", analyzer="unicode_word_v1", exists=True, positions=True),
        "tags": field("keyword", "/tags", exact=True, exists=True),
        "odd": field("keyword", "/a~1b/c~0d", exact=True, exists=True),
        "user.id": field("keyword", "/user/id", exact=True, exists=True),
        "plain": field("keyword", "/plain"),
        "countExact": field("integer", "/count", exact=True),
        "note": field("text", "/note", analyzer="unicode_word_v1"),
        "moved": {
            "kind": "keyword",
            "bindings": [
                {"version": 2, "jsonPointer": "/new"},
                {"version": 1, "jsonPointer": "/old"},
            ],
            "exact": True,
            "exists": True,
        },
    },
    "aliases": {"svc": "service"},
}
FIELDS = fields_from_config(CONFIG)


def p(text: str) -> Predicate:
    return parse_filter(text, FIELDS)


def m(text: str, doc: object) -> bool:
    return p(text).matches(doc)


def filter_error(text: str) -> str:
    with pytest.raises(FilterError) as info:
        p(text)
    return str(info.value)


# ================================================================ JSON pointer

RFC6901_DOC = {
    "foo": ["bar", "baz"],
    "": 0,
    "a/b": 1,
    "c%d": 2,
    "e^f": 3,
    "g|h": 4,
    "i\\j": 5,
    'k"l': 6,
    " ": 7,
    "m~n": 8,
}


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("", RFC6901_DOC),
        ("/foo", ["bar", "baz"]),
        ("/foo/0", "bar"),
        ("/", 0),
        ("/a~1b", 1),
        ("/c%d", 2),
        ("/e^f", 3),
        ("/g|h", 4),
        ("/i\\j", 5),
        ('/k"l', 6),
        ("/ ", 7),
        ("/m~0n", 8),
    ],
)
def test_json_pointer_rfc6901_examples(pointer: str, expected: object) -> None:
    assert json_pointer_get(RFC6901_DOC, pointer) == expected


def test_json_pointer_unescapes_tilde_one_before_tilde_zero() -> None:
    # "~01" is "~1" literally, not "/": ~1 is replaced first, then ~0.
    assert parse_json_pointer("/~01") == ("~1",)
    assert json_pointer_get({"~1": "yes", "/": "no"}, "/~01") == "yes"


@pytest.mark.parametrize(
    ("doc", "pointer"),
    [
        ({"foo": ["bar"]}, "/foo/1"),
        ({"foo": ["bar"]}, "/foo/-"),
        ({"foo": ["bar"]}, "/foo/00"),
        ({"foo": ["bar"]}, "/foo/-0"),
        ({"foo": ["bar"]}, "/foo/x"),
        ({"foo": "bar"}, "/foo/0"),
        ({"foo": 1}, "/foo/bar"),
        ({"foo": None}, "/foo/bar"),
        ({}, "/foo"),
        ([1, 2], "/a"),
        ("text", "/0"),
    ],
)
def test_json_pointer_missing(doc: object, pointer: str) -> None:
    assert json_pointer_get(doc, pointer) is MISSING


def test_json_pointer_distinguishes_null_from_missing() -> None:
    assert json_pointer_get({"a": None}, "/a") is None
    assert json_pointer_get({"a": [None, False, 0]}, "/a/2") == 0
    assert json_pointer_get([[1, [2, 3]]], "/0/1/1") == 3


@pytest.mark.parametrize("pointer", ["a", "a/b", "/~", "/~2", "/a~", "#/a"])
def test_json_pointer_rejects_malformed(pointer: str) -> None:
    with pytest.raises(JsonPointerError):
        json_pointer_get({"a": 1}, pointer)
    assert issubclass(JsonPointerError, ValueError)


# ================================================================ search.fields config


def test_fields_from_config_builds_specs() -> None:
    status = FIELDS["status"]
    assert status == FieldSpec(
        name="status",
        kind="integer",
        bindings=(FieldBinding(1, "/status"),),
        exact=True,
        column=True,
        exists=True,
    )
    assert status.pointer == "/status"
    assert FIELDS["service"].normalizer == "lowercase_v1"
    assert FIELDS["msg"].analyzer == "unicode_word_v1"
    assert FIELDS["msg"].positions is True
    assert FIELDS["latency"].aggregatable is True and FIELDS["latency"].exact is False


def test_aliases_resolve_to_the_target_spec() -> None:
    assert FIELDS["svc"] is FIELDS["service"]
    assert set(FIELDS) == set(CONFIG["fields"]) | {"svc"}
    assert str(p("svc:API")) == "service:api"


def test_newest_binding_wins_and_versions_select_older_bindings() -> None:
    moved = FIELDS["moved"]
    assert moved.pointer == "/new"
    assert moved.pointer_for(None) == "/new"
    assert moved.pointer_for(1) == "/old"
    assert moved.pointer_for(2) == "/new"
    assert moved.pointer_for(7) == "/new"
    assert moved.pointer_for(0) is None


def test_versioned_matching() -> None:
    doc = {"old": "a", "new": "b"}
    assert p("moved:b").matches(doc)
    assert not p("moved:a").matches(doc)
    assert p("moved:a").matches(doc, version=1)
    assert not p("moved:b").matches(doc, version=1)
    assert not p("has:moved").matches(doc, version=0)


def broken(mutate: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    config = copy.deepcopy(CONFIG)
    mutate(config)
    return config


def set_field(name: str, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda c: c["fields"].__setitem__(name, value)


def set_in_status(key: str, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda c: c["fields"]["status"].__setitem__(key, value)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (broken(lambda c: c.__setitem__("indexes", [])), r"search\.indexes is not supported"),
        (broken(lambda c: c.pop("fields")), r"search\.fields must be a non-empty object"),
        (broken(lambda c: c.__setitem__("fields", {})), r"search\.fields must be a non-empty"),
        (broken(lambda c: c.__setitem__("fields", [])), r"search\.fields must be a non-empty"),
        (broken(set_field("bad name", field("keyword", "/x"))), "field name 'bad name' must match"),
        (broken(set_field("-x", field("keyword", "/x"))), "field name '-x' must match"),
        (broken(set_field("", field("keyword", "/x"))), "field name '' must match"),
        (broken(set_field("a" * 65, field("keyword", "/x"))), "is longer than 64"),
        (broken(set_field("x", "keyword")), r"search\.fields\.x must be an object"),
        (broken(set_in_status("weight", 2)), r"search\.fields\.status\.weight is not supported"),
        (broken(set_in_status("kind", "long")), r"status\.kind must be one of bool, date, float"),
        (broken(lambda c: c["fields"]["status"].pop("kind")), r"status\.kind must be one of"),
        (broken(set_in_status("bindings", [])), r"status\.bindings must be a non-empty array"),
        (broken(set_in_status("bindings", "/s")), r"status\.bindings must be a non-empty array"),
        (broken(set_in_status("bindings", ["/s"])), r"status\.bindings\[0\] must be an object"),
        (
            broken(set_in_status("bindings", [{"version": 1, "jsonPointer": "/s", "x": 1}])),
            r"status\.bindings\[0\]\.x is not supported",
        ),
        (
            broken(set_in_status("bindings", [{"version": 0, "jsonPointer": "/s"}])),
            r"bindings\[0\]\.version must be a positive integer",
        ),
        (
            broken(set_in_status("bindings", [{"version": True, "jsonPointer": "/s"}])),
            r"bindings\[0\]\.version must be a positive integer",
        ),
        (
            broken(set_in_status("bindings", [{"version": "1", "jsonPointer": "/s"}])),
            r"bindings\[0\]\.version must be a positive integer",
        ),
        (
            broken(set_in_status("bindings", [{"version": 1, "jsonPointer": 5}])),
            r"bindings\[0\]\.jsonPointer must be a string",
        ),
        (
            broken(set_in_status("bindings", [{"version": 1, "jsonPointer": "status"}])),
            r"bindings\[0\]\.jsonPointer: JSON pointer 'status' must be empty or start with '/'",
        ),
        (
            broken(set_in_status("bindings", [{"version": 1, "jsonPointer": "/a~2"}])),
            r"bindings\[0\]\.jsonPointer: .* '~' not followed by 0 or 1",
        ),
        (
            broken(
                set_in_status(
                    "bindings",
                    [{"version": 1, "jsonPointer": "/a"}, {"version": 1, "jsonPointer": "/b"}],
                )
            ),
            r"bindings\[1\]\.version duplicates 1",
        ),
        (broken(set_in_status("exact", "yes")), r"status\.exact must be a boolean"),
        (broken(set_in_status("column", 1)), r"status\.column must be a boolean"),
        (
            broken(set_field("k", field("keyword", "/k", normalizer="upper"))),
            r"k\.normalizer must be identity_v1 or lowercase_v1, got 'upper'",
        ),
        (
            broken(set_field("k", field("keyword", "/k", normalizer=1))),
            r"k\.normalizer must be a string",
        ),
        (
            broken(set_field("t", field("text", "/t", analyzer="english"))),
            r"t\.analyzer must be unicode_word_v1",
        ),
        (broken(set_field("t", field("text", "/t"))), r"t\.analyzer is required for text fields"),
        (
            broken(set_field("t", field("text", "/t", analyzer="unicode_word_v1", column=True))),
            r"t\.column is not supported for text fields",
        ),
        (
            broken(set_field("k", field("keyword", "/k", positions=True))),
            r"k\.positions is not supported for keyword fields \(text only\)",
        ),
        (
            broken(set_field("k", field("keyword", "/k", analyzer="unicode_word_v1"))),
            r"k\.analyzer is not supported for keyword fields",
        ),
        (
            broken(set_in_status("prefix", True)),
            r"status\.prefix is not supported for typed fields",
        ),
        (
            broken(set_field("d", field("date", "/d", normalizer="lowercase_v1"))),
            r"d\.normalizer is not supported for typed fields",
        ),
        (
            broken(lambda c: c.__setitem__("primaryTimestampField", "nope")),
            r"primaryTimestampField must reference a declared field",
        ),
        (
            broken(lambda c: c.__setitem__("primaryTimestampField", "status")),
            r"primaryTimestampField must reference a date field",
        ),
        (broken(lambda c: c.__setitem__("aliases", [])), r"search\.aliases must be an object"),
        (
            broken(lambda c: c["aliases"].__setitem__("status", "service")),
            r"search\.aliases\.status collides with a declared field",
        ),
        (
            broken(lambda c: c["aliases"].__setitem__("x", "nope")),
            r"search\.aliases\.x must reference a declared field",
        ),
        (
            broken(lambda c: c["aliases"].__setitem__("bad alias", "status")),
            r"search\.aliases: field name 'bad alias' must match",
        ),
    ],
)
def test_fields_from_config_rejections(config: Mapping[str, object], message: str) -> None:
    with pytest.raises(FilterError, match=message):
        fields_from_config(config)


def test_fields_from_config_rejects_non_objects() -> None:
    with pytest.raises(FilterError, match="search must be an object"):
        fields_from_config([])  # type: ignore[arg-type]


def test_fields_from_config_accepts_minimal_and_reference_keys() -> None:
    minimal = fields_from_config({"fields": {"k": field("keyword", "/k")}})
    assert list(minimal) == ["k"]
    assert minimal["k"].exact is False
    full = fields_from_config({**CONFIG, "profile": "x", "defaultFields": [], "rollups": {}})
    assert full == FIELDS


def test_field_spec_validates_when_constructed_directly() -> None:
    with pytest.raises(FilterError, match=r"search\.fields\.x\.bindings must be a non-empty"):
        FieldSpec(name="x", kind="keyword", bindings=())
    with pytest.raises(FilterError, match=r"search\.fields\.x\.kind must be one of"):
        FieldSpec(name="x", kind="long", bindings=(FieldBinding(1, "/x"),))  # type: ignore[arg-type]


# ================================================================ parser: structure and precedence

STRUCTURE = [
    ("has:status", "has:status"),
    ("status:500", "status:500"),
    ("has:status has:ok", "(has:status AND has:ok)"),
    ("has:status AND has:ok", "(has:status AND has:ok)"),
    ("has:status and has:ok", "(has:status AND has:ok)"),
    ("has:status OR has:ok has:msg", "(has:status OR (has:ok AND has:msg))"),
    ("has:status has:ok OR has:msg", "((has:status AND has:ok) OR has:msg)"),
    (
        "has:status AND has:ok or has:msg AND has:ts",
        "((has:status AND has:ok) OR (has:msg AND has:ts))",
    ),
    ("has:status AND (has:ok OR has:msg)", "(has:status AND (has:ok OR has:msg))"),
    ("NOT has:status has:ok", "(NOT has:status AND has:ok)"),
    ("NOT has:status OR has:ok", "(NOT has:status OR has:ok)"),
    ("not (has:status OR has:ok)", "NOT (has:status OR has:ok)"),
    ("-has:status has:ok", "(NOT has:status AND has:ok)"),
    ("- has:status", "NOT has:status"),
    ("-(has:status OR has:ok)", "NOT (has:status OR has:ok)"),
    ("NOT NOT has:status", "NOT NOT has:status"),
    ("--has:status", "NOT NOT has:status"),
    ("NOT -has:status", "NOT NOT has:status"),
    ("(((has:status)))", "has:status"),
    ("(has:status)(has:ok)", "(has:status AND has:ok)"),
    ("has:status OR has:ok OR has:msg", "(has:status OR has:ok OR has:msg)"),
    ("has:status AND (has:ok AND has:msg)", "(has:status AND (has:ok AND has:msg))"),
    ("  has:status\tAND\nhas:ok  ", "(has:status AND has:ok)"),
]


@pytest.mark.parametrize(("text", "canonical"), STRUCTURE)
def test_structure_and_precedence(text: str, canonical: str) -> None:
    assert str(p(text)) == canonical


@pytest.mark.parametrize(("text", "canonical"), STRUCTURE)
def test_canonical_text_reparses_to_the_same_tree(text: str, canonical: str) -> None:
    assert p(canonical) == p(text)


def test_tree_objects() -> None:
    status, ok = FIELDS["status"], FIELDS["ok"]
    assert p("status:>=500 OR -ok:true") == Or(
        (Compare(status, "gte", 500), Not(Compare(ok, "eq", True)))
    )
    assert p("has:status has:ok") == And((Has(status), Has(ok)))


def test_precedence_changes_results() -> None:
    doc = {"status": 200}  # has:status true, has:ok false, has:msg false
    assert m("has:msg has:ok OR has:status", doc)  # (msg AND ok) OR status
    assert not m("has:msg (has:ok OR has:status)", doc)
    assert not m("NOT has:status OR has:ok", doc)  # (NOT status) OR ok
    assert m("NOT (has:ok OR has:msg)", doc)


def test_explicit_equals_operator_is_equality() -> None:
    assert p("status:=500") == p("status:500")


# ---------------------------------------------------------------- random trees vs Python semantics


def has_atom(name: str) -> tuple[str, Callable[[Mapping[str, str]], bool]]:
    return f"has:{name}", lambda d: name in d


def eq_atom(name: str) -> tuple[str, Callable[[Mapping[str, str]], bool]]:
    return f"{name}:x", lambda d: d.get(name) == "x"


ATOMS = [has_atom(f"f{i}") for i in range(4)] + [eq_atom(f"f{i}") for i in range(4)]
TREE_FIELDS = fields_from_config(
    {"fields": {f"f{i}": field("keyword", f"/f{i}", exact=True, exists=True) for i in range(4)}}
)
trees = st.recursive(
    st.integers(0, len(ATOMS) - 1).map(lambda i: ("atom", i)),
    lambda inner: st.one_of(
        inner.map(lambda t: ("not", t)),
        st.lists(inner, min_size=2, max_size=3).map(lambda ts: ("and", ts)),
        st.lists(inner, min_size=2, max_size=3).map(lambda ts: ("or", ts)),
    ),
    max_leaves=10,
)
docs = st.dictionaries(st.sampled_from([f"f{i}" for i in range(4)]), st.sampled_from("xy"))

Tree = tuple[str, Any]
BINDING = {"atom": 3, "not": 2, "and": 1, "or": 0}


def evaluate(tree: Tree, doc: Mapping[str, str]) -> bool:
    kind, arg = tree
    if kind == "atom":
        return ATOMS[arg][1](doc)
    if kind == "not":
        return not evaluate(arg, doc)
    results = [evaluate(t, doc) for t in arg]
    return all(results) if kind == "and" else any(results)


def render(tree: Tree, rnd: random.Random, parent: int = -1) -> str:
    """Render with only the parentheses precedence needs, plus some random extra ones."""
    kind, arg = tree
    if kind == "atom":
        text = ATOMS[arg][0]
    elif kind == "not":
        text = rnd.choice(["NOT ", "not ", "-", "- "]) + render(arg, rnd, BINDING["not"])
    elif kind == "and":
        text = "".join(
            (rnd.choice([" AND ", " ", " and "]) if i else "") + render(t, rnd, BINDING["and"])
            for i, t in enumerate(arg)
        )
    else:
        text = rnd.choice([" OR ", " or "]).join(render(t, rnd, BINDING["or"]) for t in arg)
    needs = BINDING[kind] < parent
    if kind in ("and", "or") and BINDING[kind] == parent:
        needs = needs or rnd.random() < 0.3
    if needs or rnd.random() < 0.15:
        text = "(" + text + ")"
    return text


@settings(max_examples=400)
@given(trees, st.lists(docs, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_random_filters_agree_with_python_semantics(
    tree: Tree, sample: list[dict[str, str]], rnd: random.Random
) -> None:
    text = render(tree, rnd)
    predicate = parse_filter(text, TREE_FIELDS)
    for doc in sample:
        assert predicate.matches(doc) == evaluate(tree, doc), text
    assert parse_filter(str(predicate), TREE_FIELDS) == predicate


# ================================================================ quoting and escaping


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('requestId:"hello world"', "hello world"),
        ('requestId:"a \\"q\\" b"', 'a "q" b'),
        ('requestId:"back\\\\slash"', "back\\slash"),
        ('requestId:"(x)"', "(x)"),
        ('requestId:""', ""),
        ('requestId:">5"', ">5"),
        ('requestId:"AND"', "AND"),
        ("requestId:AND", "AND"),
        ("requestId:OR", "OR"),
        ("requestId:urn:x:1", "urn:x:1"),
        ("requestId:-x", "-x"),
        ("requestId:a-b", "a-b"),
        ("requestId:héllo", "héllo"),
        ('requestId:"tab\there"', "tab\there"),
        ("requestId:back\\slash", "back\\slash"),
    ],
)
def test_quoted_and_bare_values(text: str, value: str) -> None:
    predicate = p(text)
    assert predicate == Compare(FIELDS["requestId"], "eq", value)
    assert predicate.matches({"requestId": value})
    assert not predicate.matches({"requestId": value + "!"})
    assert p(str(predicate)) == predicate  # canonical text re-quotes as needed


def test_bare_value_stops_at_parenthesis() -> None:
    assert p("(requestId:abc)") == Compare(FIELDS["requestId"], "eq", "abc")
    assert p('(requestId:"a b")') == Compare(FIELDS["requestId"], "eq", "a b")


def test_quoted_values_are_normalised_like_bare_ones() -> None:
    assert m('service:"Checkout API"', {"service": "checkout api"})
    assert m("service:API", {"service": "Api"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('requestId:"abc', "unterminated quoted value starting at position 10"),
        ('requestId:"abc\\', r"invalid escape at position 14"),
        ('requestId:"a\\nb"', r"invalid escape at position 12; only \\\" and \\\\ are allowed"),
        ('requestId:"a"b', "expected whitespace or '\\)' after closing quote at position 13"),
        ('requestId:a"b"', "unexpected '\"' at position 11; quote the whole value"),
        ('"hello"', "unexpected quoted text at position 0"),
        ('status:1 "x"', "unexpected quoted text at position 9"),
    ],
)
def test_quoting_errors(text: str, message: str) -> None:
    assert filter_error(text)
    with pytest.raises(FilterError, match=message):
        p(text)


# ================================================================ syntax errors


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "filter must not be empty"),
        ("   \t", "filter must not be empty"),
        ("hello", "got 'hello' \\(bare terms are not supported\\)"),
        ("status:500 oops", "at position 11, got 'oops'"),
        (":500", "missing field name before ':' at position 0"),
        ("status:", "missing value after 'status:' at position 7"),
        ("status:>=", "missing value after 'status:>=' at position 9"),
        ("status: 500", "missing value after 'status:'"),
        ("status:)", "missing value after 'status:'"),
        ("has:", "has: at position 0 requires a field name"),
        ("has: status", "has: at position 0 requires a field name"),
        ("(status:1", "missing '\\)' for '\\(' at position 0"),
        ("((status:1)", "missing '\\)' for '\\(' at position 0"),
        ("status:1)", "unexpected '\\)' at position 8 \\(no matching '\\('\\)"),
        ("()", "empty parentheses at position 0"),
        ("status:1 ()", "empty parentheses at position 9"),
        ("AND status:1", "unexpected AND at position 0; expected a clause"),
        ("OR status:1", "unexpected OR at position 0"),
        ("status:1 AND", "expected a clause after AND at end of filter"),
        ("status:1 OR", "expected a clause after OR at end of filter"),
        ("status:1 AND OR ok:true", "unexpected OR at position 13"),
        ("status:1 OR AND ok:true", "unexpected AND at position 12"),
        ("status:1 AND AND ok:true", "unexpected AND at position 13"),
        ("NOT", "expected a clause after NOT at end of filter"),
        ("-", "expected a clause after NOT at end of filter"),
        ("status:1 (OR ok:true)", "unexpected OR at position 10"),
    ],
)
def test_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        p(text)


def test_filter_error_is_value_error_and_non_strings_rejected() -> None:
    assert issubclass(FilterError, ValueError)
    with pytest.raises(FilterError, match="filter must be a string, got bytes"):
        parse_filter(b"status:1", FIELDS)  # type: ignore[arg-type]


# ================================================================ fields: unknown, capabilities


def test_unknown_field_lists_filterable_fields() -> None:
    message = filter_error("nope:1")
    assert message.startswith("unknown filter field 'nope' at position 0")
    assert "service, status, svc, tags, ts" in message
    assert "unknown filter field 'Status'" in filter_error("Status:1")  # names are case-sensitive
    assert "unknown filter field 'nope' at position 8" in filter_error("has:ok (has:nope)")


def test_no_fields_configured() -> None:
    with pytest.raises(FilterError, match=r"unknown filter field 'a'.*: \(none\)"):
        parse_filter("a:1", {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("has:plain", "field 'plain' does not support has: \\(needs exists, exact or column\\)"),
        ("has:note", "field 'note' does not support has:"),
        ("plain:x", "field 'plain' does not support equality \\(needs exact or column\\)"),
        ("countExact:>1", "field 'countExact' does not support comparisons \\(needs column\\)"),
        ("msg:hello", "field 'msg' is a text field; filters support only has:msg on text fields"),
        ('msg:"hello world"', "field 'msg' is a text field"),
        ("msg:>a", "field 'msg' is a text field"),
        (
            "service:>a",
            "field 'service' is a keyword field; comparisons \\(>, >=, <, <=\\) are only",
        ),
        ("requestId:<=a", "field 'requestId' is a keyword field; comparisons"),
        ("ok:>false", "field 'ok' is a bool field; comparisons"),
    ],
)
def test_capability_and_kind_errors(text: str, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        p(text)


def test_equality_allowed_with_exact_only_or_column_only() -> None:
    assert m("countExact:3", {"count": 3})  # exact without column
    assert m("latency:2.5", {"latency": 2.5})  # column without exact
    assert m("has:countExact", {"count": 3})  # has: via exact


# ================================================================ keyword


def test_keyword_identity_is_case_sensitive() -> None:
    assert m("requestId:Abc", {"requestId": "Abc"})
    assert not m("requestId:Abc", {"requestId": "abc"})


def test_keyword_lowercase_normalizer_applies_to_both_sides() -> None:
    assert m("service:CheckOut", {"service": "CHECKOUT"})
    assert str(p("service:CheckOut")) == "service:checkout"


@pytest.mark.parametrize("value", [5, 5.0, True, None, {"x": "5"}])
def test_keyword_ignores_non_string_values(value: object) -> None:
    assert not m("requestId:5", {"requestId": value})
    assert not m("has:requestId", {"requestId": value})


def test_keyword_field_with_dotted_name_and_escaped_pointer() -> None:
    assert m("user.id:u1", {"user": {"id": "u1"}})
    assert m("odd:v", {"a/b": {"c~d": "v"}})
    assert not m("odd:v", {"a": {"b": {"c~d": "v"}}})


# ================================================================ integer


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("", {499: False, 500: True, 501: False}),
        ("=", {499: False, 500: True, 501: False}),
        (">", {499: False, 500: False, 501: True}),
        (">=", {499: False, 500: True, 501: True}),
        ("<", {499: True, 500: False, 501: False}),
        ("<=", {499: True, 500: True, 501: False}),
    ],
)
def test_integer_operators(op: str, expected: dict[int, bool]) -> None:
    predicate = p(f"status:{op}500")
    assert {v: predicate.matches({"status": v}) for v in expected} == expected


@pytest.mark.parametrize(
    ("value", "hit"),
    [
        (500, True),
        (500.0, True),
        ("500", True),
        (" 500 ", True),
        (500.5, False),
        ("5e2", False),
        ("0500", False),
        (True, False),
        (None, False),
        (float("inf"), False),
        (float("nan"), False),
    ],
)
def test_integer_document_values(value: object, hit: bool) -> None:
    assert m("status:500", {"status": value}) is hit
    assert m("has:status", {"status": value}) is hit


def test_integer_negative_and_big_values() -> None:
    assert m("status:-5", {"status": -5})
    assert m("status:>=-5", {"status": 0})
    assert not m("status:<-5", {"status": -5})
    big = 2**70
    assert m(f"status:{big}", {"status": big})
    assert not m(f"status:{big}", {"status": float(big) + 2**20})
    assert m(f"status:>{big - 1}", {"status": big})


@pytest.mark.parametrize("raw", ["abc", "1.5", "007", "1e3", "+5", '""', "--5", "0x10", "５"])
def test_integer_query_value_errors(raw: str) -> None:
    message = filter_error(f"status:{raw}")
    assert message.startswith("field 'status' is an integer field; expected an integer, got")


# ================================================================ float


@pytest.mark.parametrize(
    ("text", "value", "hit"),
    [
        ("latency:2", 2, True),
        ("latency:2", 2.0, True),
        ("latency:2.0", 2, True),
        ("latency:2.5", "2.5", True),
        ("latency:>1.5", 1.5, False),
        ("latency:>=1.5", 1.5, True),
        ("latency:<1.5", 1.4999, True),
        ("latency:<=1.5", 1.5001, False),
        ("latency:>1e3", 1001, True),
        ("latency:>.5", 0.6, True),
        ("latency:<-0.5", -1, True),
        ("latency:<-0.5", -0.5, False),
        ("latency:2", True, False),
        ("latency:>0", "nan", False),
        ("latency:>0", "abc", False),
        ("latency:>0", [], False),
    ],
)
def test_float_clauses(text: str, value: object, hit: bool) -> None:
    assert m(text, {"latency": value}) is hit


@pytest.mark.parametrize("raw", ["abc", "nan", "inf", "-Infinity", "1e999", "1.2.3", "1e", "."])
def test_float_query_value_errors(raw: str) -> None:
    assert filter_error(f"latency:{raw}").startswith("field 'latency' is a float field")


# ================================================================ date

JAN1_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


@pytest.mark.parametrize(
    "doc_value",
    [
        "2024-01-01T00:00:00Z",
        "2024-01-01t00:00:00z",
        "2024-01-01 00:00:00Z",
        "2024-01-01T01:00:00+01:00",
        "2023-12-31T19:00:00-05:00",
        "2024-01-01T00:00:00.000Z",
        "2024-01-01T00:00:00.0004Z",  # sub-millisecond digits are dropped
        "2024-01-01",
        JAN1_MS,
        float(JAN1_MS) + 0.7,
        str(JAN1_MS),
    ],
)
def test_date_document_values_equal_midnight(doc_value: object) -> None:
    assert m("ts:2024-01-01T00:00:00Z", {"ts": doc_value})
    assert m(f"ts:{JAN1_MS}", {"ts": doc_value})
    assert m("ts:2024-01-01", {"ts": doc_value})


@pytest.mark.parametrize(
    "doc_value",
    ["2024-01-01T00:00:00", "2024-02-30", "Jan 1 2024", "2024-01-01T00:00Z", True, None, "nan"],
)
def test_unusable_date_document_values_are_ignored(doc_value: object) -> None:
    assert not m("has:ts", {"ts": doc_value})
    assert not m("ts:<=9999999999999", {"ts": doc_value})


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("ts:>2024-01-01T00:00:00Z", True),
        ("ts:>=2024-01-01T00:00:00.001Z", True),
        ("ts:>2024-01-01T00:00:00.001Z", False),
        ("ts:<2024-01-01T00:00:00.002Z", True),
        ('ts:<="2024-01-01 00:00:00.001Z"', True),
        (f"ts:{JAN1_MS + 1}", True),
        ("ts:2024-01-01", False),
    ],
)
def test_date_comparisons(text: str, hit: bool) -> None:
    assert m(text, {"ts": "2024-01-01T00:00:00.001Z"}) is hit


def test_date_before_epoch_floors_to_milliseconds() -> None:
    assert m("ts:-1", {"ts": "1969-12-31T23:59:59.9995Z"})
    assert m("ts:-1000", {"ts": "1969-12-31T23:59:59Z"})


@pytest.mark.parametrize(
    "raw", ["2024-01-01T00:00:00", "2024-13-01", "2024-01-01T25:00:00Z", "yesterday", "1.5", "01"]
)
def test_date_query_value_errors(raw: str) -> None:
    message = filter_error(f"ts:{raw}")
    assert message.startswith("field 'ts' is a date field; expected an RFC 3339 timestamp")


# ================================================================ bool


@pytest.mark.parametrize(
    ("text", "value", "hit"),
    [
        ("ok:true", True, True),
        ("ok:TRUE", True, True),
        ("ok:true", False, False),
        ("ok:false", False, True),
        ("ok:False", False, True),
        ("ok:true", "true", True),
        ("ok:true", " True ", True),
        ("ok:true", 1, False),
        ("ok:false", 0, False),
        ("ok:false", None, False),
        ("ok:true", "yes", False),
    ],
)
def test_bool_clauses(text: str, value: object, hit: bool) -> None:
    assert m(text, {"ok": value}) is hit


@pytest.mark.parametrize("raw", ["yes", "1", "t", '""'])
def test_bool_query_value_errors(raw: str) -> None:
    assert filter_error(f"ok:{raw}").startswith(
        "field 'ok' is a bool field; expected true or false"
    )


# ================================================================ has:, missing fields, arrays


@pytest.mark.parametrize(
    ("doc", "hit"),
    [
        ({"status": 1}, True),
        ({"status": 0}, True),
        ({"status": [1]}, True),
        ({"status": [None, "x", 2]}, True),
        ({}, False),
        ({"status": None}, False),
        ({"status": []}, False),
        ({"status": [[]]}, False),
        ({"status": ["x", None]}, False),
        ({"other": 1}, False),
    ],
)
def test_has(doc: dict[str, object], hit: bool) -> None:
    assert m("has:status", doc) is hit
    assert m("-has:status", doc) is not hit


def test_has_on_text_field_needs_a_string() -> None:
    assert m("has:msg", {"msg": "hello"})
    assert m("has:msg", {"msg": ""})
    assert not m("has:msg", {"msg": 5})


def test_missing_fields_never_satisfy_clauses_but_negations_do() -> None:
    for text in ("status:500", "status:>0", "status:<0", "service:x", "ok:false", "ts:>0"):
        assert not m(text, {}), text
        assert m(f"-{text}", {}), text
        assert m(f"NOT {text}", {}), text


@pytest.mark.parametrize("doc", [None, [], ["status"], "status", 5, True])
def test_non_object_documents_have_no_fields(doc: object) -> None:
    assert not m("has:status", doc)
    assert m("NOT has:status", doc)


def test_arrays_match_if_any_element_matches() -> None:
    assert m("tags:b", {"tags": ["a", "b"]})
    assert m("tags:b", {"tags": [["a"], ["b"]]})
    assert not m("tags:c", {"tags": ["a", "b"]})
    assert not m("-tags:b", {"tags": ["a", "b"]})
    assert m("status:>500", {"status": [200, 503]})
    assert not m("status:>500", {"status": [200, 404]})
    # Each clause is checked independently: one element >500 and another <300 satisfies both.
    assert m("status:>500 status:<300", {"status": [200, 503]})


# ================================================================ caps


def test_length_cap() -> None:
    head = "requestId:"
    exact = head + "x" * (MAX_FILTER_LENGTH - len(head))
    assert len(exact) == MAX_FILTER_LENGTH
    assert m(exact, {"requestId": "x" * (MAX_FILTER_LENGTH - len(head))})
    with pytest.raises(FilterError, match=f"longer than {MAX_FILTER_LENGTH} characters"):
        p(exact + "x")


def test_clause_cap() -> None:
    ok = " OR ".join(f"status:{i}" for i in range(MAX_FILTER_CLAUSES))
    assert m(ok, {"status": MAX_FILTER_CLAUSES - 1})
    too_many = ok + " OR has:ok"
    with pytest.raises(FilterError, match=f"more than {MAX_FILTER_CLAUSES} clauses"):
        p(too_many)


@pytest.mark.parametrize(
    ("make", "unit_size"),
    [
        (lambda n: "(" * n + "has:ok" + ")" * n, 1),
        (lambda n: "NOT " * n + "has:ok", 1),
        (lambda n: "-" * n + "has:ok", 1),
        (lambda n: "NOT (" * (n // 2) + "has:ok" + ")" * (n // 2), 2),
    ],
)
def test_depth_cap(make: Callable[[int], str], unit_size: int) -> None:
    deepest = p(make(MAX_FILTER_DEPTH))
    assert deepest.matches({"ok": True}) is (MAX_FILTER_DEPTH % 2 == 0 or unit_size == 1)
    with pytest.raises(FilterError, match=f"deeper than {MAX_FILTER_DEPTH} levels"):
        p(make(MAX_FILTER_DEPTH + unit_size))


def test_depth_cap_counts_nesting_not_total_groups() -> None:
    wide = " ".join(["(has:ok)"] * (MAX_FILTER_DEPTH + 5))
    assert p(wide).matches({"ok": False})


# ================================================================ robustness

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from(["2024-01-01", "500", "true", "2024-01-01T00:00:00Z", "1e3"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "status", "ts", "ok", "tags"]), inner)
    ),
    max_leaves=15,
)
ROBUST_FILTERS = [
    p(text)
    for text in (
        "status:>=500 OR latency:<1.5",
        "-has:ts (ok:true OR tags:x)",
        "ts:>=2024-01-01 service:a has:msg",
        "NOT (status:1 AND latency:1 AND ok:false)",
    )
]


@settings(max_examples=300)
@given(json_values)
def test_matches_never_raises_on_arbitrary_json(doc: object) -> None:
    for predicate in ROBUST_FILTERS:
        assert isinstance(predicate.matches(doc), bool)


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from([*'()":<>=- \\aAnNdDoOrRtT1.s', "has", "status", "ok"])).map("".join)
)
def test_parser_only_raises_filter_error(text: str) -> None:
    try:
        predicate = p(text)
    except FilterError as exc:
        assert str(exc)
    else:
        assert p(str(predicate)) == predicate
