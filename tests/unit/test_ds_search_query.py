"""The _search q= language (durable/filter.py parse_query): random queries over random
documents agree with a straightforward reference evaluator written from the documented
semantics, q= accepts every filter= text with the same meaning, and filter= still refuses
the search-only forms."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.durable.fields import fields_from_config
from headwater.durable.filter import FilterError, analyze, parse_filter, parse_query

CONFIG: dict[str, Any] = {
    "primaryTimestampField": "ts",
    "fields": {
        "ts": {"kind": "date", "bindings": [{"version": 1, "jsonPointer": "/ts"}], "column": True},
        "svc": {
            "kind": "keyword",
            "bindings": [{"version": 1, "jsonPointer": "/svc"}],
            "normalizer": "lowercase_v1",
            "exact": True,
            "prefix": True,
        },
        "tag": {
            "kind": "keyword",
            "bindings": [{"version": 1, "jsonPointer": "/tag"}],
            "exact": True,
        },
        "msg": {
            "kind": "text",
            "bindings": [{"version": 1, "jsonPointer": "/msg"}],
            "analyzer": "unicode_word_v1",
            "positions": True,
        },
        "n": {"kind": "integer", "bindings": [{"version": 1, "jsonPointer": "/n"}], "column": True},
    },
    "aliases": {"service": "svc"},
    "defaultFields": [{"field": "msg"}],
}
FIELDS = fields_from_config(CONFIG)
WORDS = ["alpha", "beta", "Gamma", "delta", "émile", "x1"]
SVCS = ["api", "API-2", "web", "apex"]

docs_st = st.fixed_dictionaries(
    {},
    optional={
        "svc": st.one_of(st.sampled_from(SVCS), st.lists(st.sampled_from(SVCS), max_size=2)),
        "tag": st.sampled_from(["a", "B", "c"]),
        "msg": st.lists(st.sampled_from(WORDS), max_size=5).map(
            lambda ws: ", ".join(ws) if len(ws) % 2 else " ".join(ws)
        ),
        "n": st.integers(-3, 3),
        "ts": st.sampled_from(["2024-01-01T00:00:00Z", "2024-06-01", 1_700_000_000_000]),
    },
)


# ---- the reference: queries as (text, fn(doc) -> bool) built together ------------------
def _svc_values(d: dict[str, Any]) -> list[str]:
    v = d.get("svc")
    items = v if isinstance(v, list) else ([] if v is None else [v])
    return [s.lower() for s in items if isinstance(s, str)]


def _tokens(d: dict[str, Any]) -> list[str]:
    m = d.get("msg")
    return re.findall(r"[^\W_]+", m.lower()) if isinstance(m, str) else []


def _atoms() -> st.SearchStrategy[tuple[str, Any]]:
    svc_eq = st.sampled_from(SVCS).map(
        lambda v: (
            f"{'service' if len(v) % 2 else 'svc'}:{v}",
            lambda d, v=v: v.lower() in _svc_values(d),
        )
    )
    svc_prefix = st.sampled_from(["ap", "w", "API"]).map(
        lambda p: (f"svc:{p}*", lambda d, p=p: any(s.startswith(p.lower()) for s in _svc_values(d)))
    )
    tag_eq = st.sampled_from(["a", "B"]).map(
        lambda v: (f"tag:{v}", lambda d, v=v: d.get("tag") == v)
    )
    n_cmp = st.tuples(st.sampled_from([">", ">=", "<", "<=", ""]), st.integers(-3, 3)).map(
        lambda t: (
            f"n:{t[0]}{t[1]}",
            lambda d, t=t: (
                isinstance(d.get("n"), int)
                and {
                    ">": d["n"] > t[1],
                    ">=": d["n"] >= t[1],
                    "<": d["n"] < t[1],
                    "<=": d["n"] <= t[1],
                    "": d["n"] == t[1],
                }[t[0]]
            ),
        )
    )
    has = st.sampled_from(["svc", "n", "msg"]).map(
        lambda f: (
            f"has:{f}",
            lambda d, f=f: (
                bool(_svc_values(d))
                if f == "svc"
                else (isinstance(d.get("n"), int) if f == "n" else isinstance(d.get("msg"), str))
            ),
        )
    )
    word = st.sampled_from(WORDS).map(lambda w: (w, lambda d, w=w: w.lower() in _tokens(d)))
    fielded = st.sampled_from(WORDS).map(
        lambda w: (f"msg:{w}", lambda d, w=w: w.lower() in _tokens(d))
    )
    wprefix = st.sampled_from(["al", "gam", "x"]).map(
        lambda p: (f"{p}*", lambda d, p=p: any(t.startswith(p) for t in _tokens(d)))
    )
    phrase = st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(
        lambda ab: (
            f'"{ab[0]} {ab[1]}"',
            lambda d, ab=ab: any(
                _tokens(d)[i : i + 2] == [ab[0].lower(), ab[1].lower()]
                for i in range(len(_tokens(d)))
            ),
        )
    )
    return st.one_of(svc_eq, svc_prefix, tag_eq, n_cmp, has, word, fielded, wprefix, phrase)


def _combine(children: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[tuple[str, Any]]:
    both = st.tuples(children, children)
    return st.one_of(
        both.map(
            lambda p: (f"({p[0][0]} AND {p[1][0]})", lambda d, p=p: p[0][1](d) and p[1][1](d))
        ),
        both.map(lambda p: (f"({p[0][0]} {p[1][0]})", lambda d, p=p: p[0][1](d) and p[1][1](d))),
        both.map(lambda p: (f"({p[0][0]} OR {p[1][0]})", lambda d, p=p: p[0][1](d) or p[1][1](d))),
        children.map(lambda c: (f"-{c[0]}", lambda d, c=c: not c[1](d))),
        children.map(lambda c: (f"NOT {c[0]}", lambda d, c=c: not c[1](d))),
    )


queries = st.recursive(_atoms(), _combine, max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(queries, st.lists(docs_st, min_size=1, max_size=8))
def test_query_agrees_with_the_reference(q: tuple[str, Any], docs: list[dict[str, Any]]) -> None:
    text, ref = q
    pred = parse_query(text, FIELDS, CONFIG)
    for d in docs:
        assert pred.matches(d) == ref(d), (text, d)
        ok, score = pred.evaluate(d)
        assert ok == ref(d) and score >= 0


FILTER_ONLY = st.recursive(
    st.sampled_from(["svc:api", "tag:B", "n:>=1", "n:-2", "has:n", "has:svc", "ts:<2024-03-01"]),
    lambda c: st.one_of(
        st.tuples(c, c).map(lambda p: f"({p[0]} OR {p[1]})"),
        st.tuples(c, c).map(lambda p: f"{p[0]} AND {p[1]}"),
        c.map(lambda x: f"-{x}"),
    ),
    max_leaves=5,
)


@settings(max_examples=200, deadline=None)
@given(FILTER_ONLY, st.lists(docs_st, min_size=1, max_size=8))
def test_filter_text_means_the_same_in_q(text: str, docs: list[dict[str, Any]]) -> None:
    f, q = parse_filter(text, FIELDS), parse_query(text, FIELDS, CONFIG)
    assert str(f) == str(q)
    for d in docs:
        assert f.matches(d) == q.matches(d)


@pytest.mark.parametrize("text", ["alpha", '"alpha beta"', "msg:alpha"])
def test_filter_still_refuses_search_only_forms(text: str) -> None:
    with pytest.raises(FilterError):
        parse_filter(text, FIELDS)


def test_a_trailing_star_is_still_literal_in_filter() -> None:
    f = parse_filter("svc:ap*", FIELDS)
    assert f.matches({"svc": "AP*"}) and not f.matches({"svc": "api"})
    assert parse_query("svc:ap*", FIELDS, CONFIG).matches({"svc": "api"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tag:a*", "prefix"),  # tag has no prefix capability
        ("msg:>alpha", "comparisons"),
        ("n:abc", "integer"),
        ("nope:1", "unknown"),
        ('"..."', "no searchable words"),
        ("", "empty"),
    ],
)
def test_bad_queries(text: str, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        parse_query(text, FIELDS, CONFIG)


def test_phrase_needs_positions() -> None:
    cfg = {
        **CONFIG,
        "fields": {**CONFIG["fields"], "msg": {**CONFIG["fields"]["msg"], "positions": False}},
    }
    fields = fields_from_config(cfg)
    with pytest.raises(FilterError, match="positions"):
        parse_query('"alpha beta"', fields, cfg)
    assert parse_query('"alpha"', fields, cfg).matches({"msg": "Alpha!"})


def test_analyzer_and_scores() -> None:
    assert analyze("Émile_x1, foo-bar 42") == ["émile", "x1", "foo", "bar", "42"]
    p = parse_query('"alpha beta"', FIELDS, CONFIG)
    # 2 token hits + 2 per phrase token
    assert p.evaluate({"msg": "alpha beta gamma"}) == (True, 6.0)
    assert parse_query("alpha OR svc:api", FIELDS, CONFIG).evaluate(
        {"msg": "alpha alpha", "svc": "api"}
    ) == (True, 2.0)
