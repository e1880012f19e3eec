"""Per-segment index companions (headwater.index): over random documents and random q=
queries, the companion's candidates contain every match found by the existing evaluator
(and are exactly the matches when every clause is indexed), its rollup windows equal a
brute-force aggregation with durable/aggregate.py's own semantics, its routing keys equal
the brute-force set, builds are byte-identical (also across processes with different hash
seeds), the plan generation moves exactly with the config that shapes the bytes, and
corrupt objects are refused."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from headwater.durable import schema
from headwater.durable.aggregate import Rollup, _Summary
from headwater.durable.filter import FilterError, Has, Predicate, parse_query
from headwater.durable.offsets import encode_offset
from headwater.durable.schema import search_fields
from headwater.engine.records import StoredRecord
from headwater.engine.segment import companion_key
from headwater.index import agg
from headwater.index.agg import full_span
from headwater.index.companion import Companion
from headwater.index.docs import UNDECODABLE, SegmentDoc, docs_from_records, version_at
from headwater.index.format import CompanionError, SectionNotLoaded
from headwater.index.plan import IndexPlan
from headwater.index.writer import build_companion

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _f(kind: str, *pointers: str, **flags: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "bindings": [{"version": i + 1, "jsonPointer": p} for i, p in enumerate(pointers)],
        **flags,
    }


SEARCH: dict[str, Any] = {
    "primaryTimestampField": "ts",
    "fields": {
        # v1 documents keep ts at /ts, v2 at /meta/ts (per-version bindings)
        "ts": _f("date", "/ts", "/meta/ts", column=True, sortable=True),
        "svc": _f(
            "keyword", "/svc", "/service", normalizer="lowercase_v1", exact=True, prefix=True
        ),
        "tag": _f("keyword", "/tag", exact=True),
        "code": _f("integer", "/code", exact=True, column=True),
        "lat": _f("float", "/lat", exact=True, column=True, aggregatable=True),
        "ok": _f("bool", "/ok", exact=True),
        "msg": _f("text", "/msg", analyzer="unicode_word_v1", positions=True),
        "body": _f("text", "/body", analyzer="unicode_word_v1"),
        "note": _f("keyword", "/note", exists=True),  # not indexed by any family
    },
    "aliases": {"service": "svc"},
    "defaultFields": [{"field": "msg"}, {"field": "svc", "boost": 2}],
    "rollups": {
        "r1": {
            "include": "has:svc",
            "dimensions": ["svc", "tag"],
            "intervals": ["1s", "5s"],
            "measures": {
                "n": {"kind": "count"},
                "errors": {"kind": "count", "include": "code:>=500"},
                "lat": {"kind": "summary", "field": "lat"},
            },
        },
        "r3": {  # no filters, one field per measure: the columnar build path
            "dimensions": ["svc", "code"],
            "intervals": ["1s", "5s"],
            "measures": {
                "n": {"kind": "count"},
                "lat": {"kind": "summary", "field": "lat"},
                "codes": {"kind": "summary", "field": "code", "histogram": "log2_v1"},
            },
        },
        "r2": {
            "intervals": ["2s"],
            "measures": {
                "n": {"kind": "count"},
                "parts": {
                    "kind": "summary_parts",
                    "countJsonPointer": "/p/c",
                    "sumJsonPointer": "/p/s",
                    "minJsonPointer": "/p/lo",
                    "maxJsonPointer": "/p/hi",
                    "histogramJsonPointer": "/p/h",
                },
            },
        },
    },
}
REG: dict[str, Any] = {
    "currentVersion": 2,
    "routingKey": {"jsonPointer": "/user", "required": False},
    "search": SEARCH,
}
FIELDS = search_fields(REG)


def _plan(reg: dict[str, Any]) -> IndexPlan:
    plan = IndexPlan.from_registry(reg)
    assert plan is not None
    return plan


PLAN = _plan(REG)

WORDS = ["alpha", "beta", "Gamma", "émile", "x1", "日本", "straße", "İstanbul"]
SVCS = ["api", "API", "apex", "web-1", "Ünï", "a"]
TAGS = ["a", "B", "c"]

# ---------------------------------------------------------------- documents
_text = st.lists(st.sampled_from(WORDS), max_size=5).map(
    lambda ws: ", ".join(ws) if len(ws) % 2 else " ".join(ws)
)
_ts = st.one_of(
    st.integers(-3_000, 12_000),
    st.integers(0, 12).map(lambda s: f"1970-01-01T00:00:{s:02d}Z"),
    st.floats(-100.0, 12_000.0),
    st.just("not a date"),
)
_value = st.fixed_dictionaries(
    {},
    optional={
        "ts": _ts,
        "meta": st.fixed_dictionaries({}, optional={"ts": _ts}),
        "svc": st.one_of(
            st.sampled_from(SVCS), st.lists(st.sampled_from(SVCS), max_size=2), st.integers()
        ),
        "service": st.sampled_from(SVCS),
        "tag": st.one_of(st.sampled_from(TAGS), st.lists(st.sampled_from(TAGS), max_size=2)),
        "code": st.one_of(
            st.sampled_from([200, 404, 500, 503, "500", 500.0, True, "x", [200, 503]]),
            st.integers(-5, 5),
        ),
        "lat": st.one_of(
            st.integers(-400, 400).map(lambda k: k / 4),
            st.integers(-3, 3),
            st.sampled_from(["2.5", [1, 2], "nan", None]),
        ),
        "ok": st.sampled_from([True, False, "true", "FALSE", 1, None]),
        "msg": st.one_of(_text, st.lists(_text, max_size=2)),
        "body": _text,
        "note": st.sampled_from(["n1", "n2"]),
        "p": st.fixed_dictionaries(
            {
                "c": st.integers(1, 5),
                "s": st.integers(-50, 50),
                "lo": st.integers(-9, 0),
                "hi": st.integers(0, 9),
            },
            optional={"h": st.just({"1": 2, "8": 1})},
        ),
    },
)
_doc_value = st.one_of(
    _value,
    _value,
    _value,
    st.sampled_from([UNDECODABLE, None, 3, "str", [1, 2]]),
)


@st.composite
def segments(draw: st.DrawFn) -> list[SegmentDoc]:
    n = draw(st.integers(1, 25))
    seq = draw(st.integers(1, 1000))
    out = []
    for _ in range(n):
        seq += draw(st.sampled_from([1, 1, 1, 3]))  # seqs may skip inside a segment
        out.append(
            SegmentDoc(
                seq=seq,
                ts_ms=draw(st.integers(0, 10**6)),
                routing_key=draw(st.one_of(st.none(), st.sampled_from(["u1", "u2", "ü3", ""]))),
                value=draw(_doc_value),
                version=draw(st.sampled_from([None, 1, 2])),
            )
        )
    return out


def _match_set(q: Predicate, docs: list[SegmentDoc]) -> set[int]:
    """The existing evaluator, fed exactly as scan.scan feeds it."""
    return {
        i
        for i, d in enumerate(docs)
        if q.evaluate(None if d.value is UNDECODABLE else d.value, version=d.version or None)[0]
    }


# ---------------------------------------------------------------- queries
_OPS = ["", ">", ">=", "<", "<=", "="]
_leaf = st.one_of(
    st.sampled_from(SVCS[:-1]).map(lambda v: f"svc:{v}"),
    st.sampled_from(SVCS).map(lambda v: f"service:{v}"),
    st.sampled_from(["ap", "a", "web", "ü", "API"]).map(lambda p: f"svc:{p}*"),
    st.sampled_from(TAGS).map(lambda v: f"tag:{v}"),
    st.tuples(st.sampled_from(_OPS), st.sampled_from(["200", "500", "-1", "503"])).map(
        lambda t: f"code:{t[0]}{t[1]}"
    ),
    st.tuples(st.sampled_from(_OPS), st.sampled_from(["0.5", "-1.25", "3", "1e1"])).map(
        lambda t: f"lat:{t[0]}{t[1]}"
    ),
    st.tuples(st.sampled_from(_OPS), st.sampled_from(["5000", "1970-01-01T00:00:03Z", "-1"])).map(
        lambda t: f"ts:{t[0]}{t[1]}"
    ),
    st.sampled_from(["ok:true", "ok:false"]),
    st.sampled_from(["svc", "tag", "code", "lat", "ok", "msg", "body", "ts", "note"]).map(
        lambda f: f"has:{f}"
    ),
    st.sampled_from(WORDS).map(lambda w: f"msg:{w}"),
    st.sampled_from(["al", "gam", "x", "日", "é"]).map(lambda p: f"msg:{p}*"),
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(
        lambda ab: f'msg:"{ab[0]} {ab[1]}"'
    ),
    st.sampled_from(WORDS).map(lambda w: f"body:{w}"),
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(
        lambda ab: f"msg:{ab[0]},{ab[1]}"  # one clause, two tokens (same value, any order)
    ),
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(lambda ab: f"{ab[0]}-{ab[1]}*"),
    st.sampled_from(WORDS + SVCS[:3]).map(lambda w: w),  # bare term over defaultFields
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(lambda ab: f'"{ab[0]} {ab[1]}"'),
    st.sampled_from(["al*", "ap*", "straß*"]),
)


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    both = st.tuples(children, children)
    return st.one_of(
        both.map(lambda ab: f"({ab[0]}) AND ({ab[1]})"),
        both.map(lambda ab: f"({ab[0]}) OR ({ab[1]})"),
        both.map(lambda ab: f"({ab[0]}) ({ab[1]})"),
        children.map(lambda a: f"NOT ({a})"),
        children.map(lambda a: f"-({a})"),
    )


queries = st.recursive(_leaf, _combine, max_leaves=6)


def _parse(text: str) -> Predicate:
    try:
        return parse_query(text, FIELDS, SEARCH)
    except FilterError:
        assume(False)
        raise


def _fully_indexed(q: Predicate) -> bool:
    return "has:note" not in str(q)


def _rk_plan_companion(docs: list[SegmentDoc]) -> Companion:
    return Companion.from_bytes(build_companion(PLAN, docs))


# ---------------------------------------------------------------- (a) candidates
@SETTINGS
@given(segments(), st.lists(queries, min_size=1, max_size=4))
def test_candidates_contain_every_match_and_are_exact_when_indexed(
    docs: list[SegmentDoc], texts: list[str]
) -> None:
    comp = _rk_plan_companion(docs)
    assert comp.doc_count == len(docs)
    assert comp.seqs() == [d.seq for d in docs]
    for text in texts:
        q = _parse(text)
        truth = _match_set(q, docs)
        got = comp.candidates(q)
        if _fully_indexed(q):
            narrowed = comp.narrow(q)
            assert narrowed is not None, text
            assert narrowed.exact, text
            assert got == truth, text
        elif got is not None:
            assert truth <= got, text


def _corpus(seed: int, n: int) -> list[SegmentDoc]:
    """A larger fixed segment with the same kinds of values as the strategy (arrays,
    multi-valued text, wrong types, both schema versions, undecodable records), so each
    random query meets many documents."""
    rnd = random.Random(seed)

    def text() -> str:
        return rnd.choice([" ", ", ", "-"]).join(rnd.choices(WORDS[:5], k=rnd.randrange(0, 7)))

    def ts() -> Any:
        return rnd.choice(
            [rnd.randrange(-3000, 12_000), f"1970-01-01T00:00:{rnd.randrange(13):02d}Z", "x"]
        )

    options: dict[str, Any] = {
        "ts": ts,
        "meta": lambda: {"ts": ts()},
        "svc": lambda: rnd.choice([rnd.choice(SVCS), rnd.sample(SVCS, 2), 7]),
        "service": lambda: rnd.choice(SVCS),
        "tag": lambda: rnd.choice([rnd.choice(TAGS), rnd.sample(TAGS, rnd.randrange(3))]),
        "code": lambda: rnd.choice([200, 404, 500, 503, "500", 500.0, True, "x", [200, 503], -1]),
        "lat": lambda: rnd.choice([rnd.randrange(-20, 20) / 4, 3, "2.5", [0.5, 3], None]),
        "ok": lambda: rnd.choice([True, False, "true", "FALSE", 1]),
        "msg": lambda: rnd.choice([text(), [text(), text()]]),
        "body": text,
        "note": lambda: "n1",
        "p": lambda: {"c": rnd.randrange(1, 4), "s": rnd.randrange(-9, 9), "lo": -1, "hi": 2},
    }
    out = []
    for i in range(n):
        value: Any = {k: make() for k, make in options.items() if rnd.random() < 0.6}
        if i % 29 == 0:
            value = UNDECODABLE
        out.append(SegmentDoc(i + 1, i, None, value, rnd.choice([None, 1, 2])))
    return out


CORPUS = _corpus(11, 250)
CORPUS_COMPANION = Companion.from_bytes(build_companion(PLAN, CORPUS))


@settings(max_examples=250, deadline=None)
@given(queries)
def test_candidates_over_a_larger_segment(text: str) -> None:
    q = _parse(text)
    truth = _match_set(q, CORPUS)
    got = CORPUS_COMPANION.candidates(q)
    if _fully_indexed(q):
        assert got == truth, text
    elif got is not None:
        assert truth <= got, text


def _scores(q: Predicate, docs: list[SegmentDoc]) -> dict[int, float]:
    """The existing evaluator's (match, score), fed exactly as scan.scan feeds it."""
    out: dict[int, float] = {}
    for i, d in enumerate(docs):
        value = None if d.value is UNDECODABLE else d.value
        ok, score = q.evaluate(value, version=d.version or None)
        if ok:
            out[i] = score
    return out


@settings(max_examples=250, deadline=None)
@given(queries)
def test_scores_from_the_families_equal_the_evaluator(text: str) -> None:
    """A ranked query's matches and scores come from the postings without reading a
    document: exactly what evaluating each document gives, or None (then it is read)."""
    q = _parse(text)
    got = CORPUS_COMPANION.scored(q)
    if got is None:
        # only clauses the families cannot answer exactly, or text without positions
        assert not _fully_indexed(q) or "text[body]" in str(q), text
        return
    assert got == _scores(q, CORPUS), text


def test_scored_queries_cover_text_ranking() -> None:
    for text in ['msg:"alpha beta"', "beta", "msg:gam*", "alpha OR msg:beta", "svc:ap* beta"]:
        q = _parse(text)
        got = CORPUS_COMPANION.scored(q)
        assert got is not None, text
        assert got == _scores(q, CORPUS) and len(set(got.values())) > 1, text
    assert CORPUS_COMPANION.scored(_parse("has:note beta")) is None  # not indexed: read


def test_corpus_queries_are_not_trivial() -> None:
    """The corpus exercises the interesting cases: matches that need per-value units,
    phrases, prefixes and array values, each with some matches and some misses."""
    for text in [
        'msg:"alpha beta"',
        "msg:alpha,beta",
        "msg:gam*",
        'msg:"beta gam*"',
        "lat:>1",
        "code:503",
        "code:<0",
        "svc:ap*",
        "ok:true",
        "beta",
        "ts:<0",
    ]:
        truth = _match_set(_parse(text), CORPUS)
        assert 0 < len(truth) < len(CORPUS), text
        assert CORPUS_COMPANION.candidates(_parse(text)) == truth, text


def test_non_indexed_clauses_do_not_narrow_unsafely() -> None:
    docs = [
        SegmentDoc(1, 0, None, {"note": "n1", "tag": "a"}, None),
        SegmentDoc(2, 0, None, {"tag": "a"}, None),
        SegmentDoc(3, 0, None, {"note": "n2", "tag": "c"}, None),
    ]
    comp = _rk_plan_companion(docs)
    assert comp.candidates(_parse("has:note")) is None
    assert comp.candidates(_parse("-has:note")) is None  # NOT over a non-indexed clause
    assert comp.candidates(_parse("has:note OR tag:c")) is None
    got = comp.narrow(_parse("has:note tag:a"))  # AND: the indexed side narrows
    assert got is not None and not got.exact and set(got.ordinals) == {0, 1}
    assert comp.candidates(_parse("-(has:note tag:a)")) is None  # NOT over an inexact set


@SETTINGS
@given(segments(), st.lists(queries, min_size=1, max_size=3))
def test_companion_built_under_another_spec_never_excludes_a_match(
    docs: list[SegmentDoc], texts: list[str]
) -> None:
    """A stale companion (msg without positions, svc bound elsewhere, no col family on
    lat) is still safe: clauses on fields whose spec differs are not narrowed."""
    reg = copy.deepcopy(REG)
    fields = reg["search"]["fields"]
    fields["msg"]["positions"] = False
    fields["svc"]["bindings"][1]["jsonPointer"] = "/other"
    fields["lat"]["column"] = False
    stale_plan = IndexPlan.from_registry(reg)
    assert stale_plan is not None and stale_plan.generation != PLAN.generation
    comp = Companion.from_bytes(build_companion(stale_plan, docs))
    for text in texts:
        q = _parse(text)
        got = comp.candidates(q)
        if got is not None:
            assert _match_set(q, docs) <= got, text


# ---------------------------------------------------------------- (b) rollups
def _brute(
    docs: list[SegmentDoc], raw: dict[str, Any]
) -> dict[int, dict[str, tuple[dict[str, Any], dict[str, Any]]]]:
    """run_aggregate's accumulation loop over the docs (no q)."""
    r = Rollup(raw, REG)
    buckets: dict[int, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {}
    for d in docs:
        value = None if d.value is UNDECODABLE else d.value
        got = r.contribution(value, d.version or None)
        if got is None:
            continue
        start, dims, measures = got
        key = {g: dims.get(g) for g in r.group_by}
        gk = json.dumps(key, sort_keys=True)
        _, states = buckets.setdefault(start, {}).setdefault(gk, (key, {}))
        for m in r.wanted:
            c, total, lo, hi, hist = measures[m]
            if r.measures[m]["kind"] == "count":
                states[m] = states.get(m, 0) + int(c)
            else:
                states.setdefault(m, _Summary()).add(c, total, lo, hi, hist)
    return buckets


def _windows(
    comp: Companion,
    name: str,
    interval: str,
    lo: int,
    hi: int,
    group_by: list[str],
    measures: list[str] | None,
) -> dict[int, dict[str, tuple[dict[str, Any], dict[str, Any]]]]:
    """The companion's windows lying wholly inside [lo, hi), in _brute's shape; asked twice,
    so the second answer comes from the companion's cache of shared groups and must be
    the same (and must not have been changed by the first caller)."""
    first = comp.rollup_windows(name, interval, group_by, measures)
    again = comp.rollup_windows(name, interval, group_by, measures)
    assert again is first
    step = {"1s": 1000, "2s": 2000, "5s": 5000, "1m": 60_000}[interval]
    out: dict[int, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {}
    for start, groups in again:
        if lo <= start and start + step <= hi:
            assert all(g.shared for g in groups.values())
            out[start] = {gk: (g.key, g.states) for gk, g in groups.items()}
    return out


def _plain(buckets: dict[int, dict[str, tuple[dict[str, Any], dict[str, Any]]]]) -> Any:
    return {
        start: {
            gk: (key, {m: v if isinstance(v, int) else v.body() for m, v in states.items()})
            for gk, (key, states) in groups.items()
        }
        for start, groups in buckets.items()
    }


_rollup_req: st.SearchStrategy[tuple[str, str, list[str], list[str] | None]] = st.one_of(
    st.tuples(
        st.just("r1"),
        st.sampled_from(["1s", "5s"]),
        st.lists(st.sampled_from(["svc", "tag"]), unique=True, max_size=2),
        st.one_of(
            st.none(),
            st.lists(st.sampled_from(["n", "errors", "lat"]), unique=True, min_size=1),
        ),
    ),
    st.tuples(
        st.just("r3"),
        st.sampled_from(["1s", "5s"]),
        st.lists(st.sampled_from(["svc", "code"]), unique=True, max_size=2),
        st.one_of(
            st.none(),
            st.lists(st.sampled_from(["n", "lat", "codes"]), unique=True, min_size=1),
        ),
    ),
    st.tuples(
        st.just("r2"),
        st.just("2s"),
        st.just([]),
        st.one_of(st.none(), st.lists(st.sampled_from(["n", "parts"]), unique=True, min_size=1)),
    ),
)


@SETTINGS
@given(segments(), _rollup_req, st.integers(-4_000, 13_000), st.integers(1, 16_000))
def test_rollup_windows_equal_brute_force_aggregation(
    docs: list[SegmentDoc], req: tuple[str, str, list[str], list[str] | None], lo: int, span: int
) -> None:
    name, interval, group_by, measures = req
    hi = lo + span
    comp = _rk_plan_companion(docs)
    got = _windows(comp, name, interval, lo, hi, group_by, measures)
    raw: dict[str, Any] = {
        "rollup": name,
        "from": lo,
        "to": hi,
        "interval": interval,
        "group_by": group_by,
    }
    if measures is not None:
        raw["measures"] = measures
    want = _brute(docs, raw)
    step = {"1s": 1000, "2s": 2000, "5s": 5000}[interval]
    full = full_span(lo, hi, step)
    want_full = {
        s: g for s, g in want.items() if full is not None and full[0] <= s and s + step <= full[1]
    }
    assert _plain(got) == _plain(want_full)
    # every window the companion leaves out lies on an edge
    for s in want:
        if s not in want_full:
            assert s < lo or s + step > hi


@settings(max_examples=150, deadline=None)
@given(_rollup_req, st.integers(-4_000, 13_000), st.integers(1, 16_000))
def test_rollup_windows_over_a_larger_segment(
    req: tuple[str, str, list[str], list[str] | None], lo: int, span: int
) -> None:
    name, interval, group_by, measures = req
    raw: dict[str, Any] = {"rollup": name, "from": lo, "to": lo + span, "interval": interval}
    raw["group_by"] = group_by
    if measures is not None:
        raw["measures"] = measures
    step = {"1s": 1000, "2s": 2000, "5s": 5000}[interval]
    full = full_span(lo, lo + span, step)
    want = {
        s: g
        for s, g in _brute(CORPUS, raw).items()
        if full is not None and full[0] <= s and s + step <= full[1]
    }
    got = _windows(CORPUS_COMPANION, name, interval, lo, lo + span, group_by, measures)
    assert _plain(got) == _plain(want)


def test_rollup_windows_known_values() -> None:
    docs = [
        SegmentDoc(1, 0, None, {"ts": 100, "svc": "API", "tag": "a", "lat": 1.5, "code": 500}, 1),
        SegmentDoc(2, 0, None, {"ts": 900, "svc": "api", "tag": "c", "lat": 3, "code": 200}, 1),
        SegmentDoc(3, 0, None, {"meta": {"ts": 1500}, "service": "web-1", "lat": 10}, 2),
        SegmentDoc(4, 0, None, {"ts": 2500, "svc": "api", "lat": 2}, 1),  # partial window
    ]
    comp = _rk_plan_companion(docs)
    got = _plain(_windows(comp, "r1", "1s", 0, 2400, ["svc"], ["errors", "lat", "n"]))
    assert sorted(got) == [0, 1000]
    (key, states) = got[0]['{"svc": "api"}']
    assert key == {"svc": "api"}
    assert states["n"] == 2 and states["errors"] == 1
    assert states["lat"]["sum"] == 4.5 and states["lat"]["min"] == 1.5
    assert states["lat"]["histogram"] == {"1": 1, "2": 1}
    assert got[1000]['{"svc": "web-1"}'][1]["n"] == 1
    with pytest.raises(KeyError):
        comp.rollup_windows("r1", "1m", [], None)
    with pytest.raises(KeyError):
        comp.rollup_windows("r1", "1s", ["ok"], None)


@contextlib.contextmanager
def _per_document_rollups() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agg, "_columnar", lambda r: False)
        yield


@SETTINGS
@given(segments())
def test_the_columnar_rollup_path_writes_what_the_per_document_path_writes(
    docs: list[SegmentDoc],
) -> None:
    """r3 takes the columnar path; forced through Rollup.contribution document by document,
    the companion's bytes (float sums, histograms, window and group order) are the same."""
    plan = _plan(REG)
    assert agg._columnar(agg._rollup_evaluator(REG, "r3", "1s"))
    assert not agg._columnar(agg._rollup_evaluator(REG, "r1", "1s"))
    columnar = build_companion(plan, docs)
    with _per_document_rollups():
        by_doc = build_companion(plan, docs)
    assert columnar == by_doc


def test_values_orjson_cannot_write_exactly_take_the_stdlib_path() -> None:
    """Sections are written by orjson, except what it cannot write exactly: an integer past
    64 bits or a lone surrogate (it refuses; the stdlib writes the section) and a rollup sum
    that overflowed (it would write null; the stdlib writes Infinity). Each answer stays
    exact, and the build stays byte-identical run to run."""
    big = 2**70
    docs = [
        SegmentDoc(1, 0, None, {"ts": 100, "code": big, "svc": "api", "lat": 1e308}, 1),
        SegmentDoc(2, 0, None, {"ts": 200, "code": 7, "svc": "api", "lat": 1e308}, 1),
        SegmentDoc(3, 0, None, {"ts": 300, "tag": "a\ud800", "svc": "日本", "lat": 2.5}, 1),
    ]
    body = build_companion(PLAN, docs)
    assert body == build_companion(PLAN, list(reversed(docs)))
    comp = Companion.from_bytes(body)
    assert comp.candidates(_parse(f"code:{big}")) == {0}
    assert comp.candidates(_parse("code:7")) == {1}
    assert comp.candidates(_parse("svc:日本")) == {2}
    assert comp.candidates(_parse("tag:a")) == set()
    assert b"\\ud800" in body  # that section went through the stdlib (ASCII escapes)

    def lat(c: Companion) -> dict[str, Any]:
        (window,) = _plain(_windows(c, "r1", "5s", 0, 5000, [], ["lat"])).values()
        ((_key, states),) = window.values()
        return dict(states["lat"])

    got = lat(comp)
    assert got["sum"] == float("inf")  # 1e308 + 1e308 + 2.5, as a scan adds them
    assert got["max"] == 1e308 and got["count"] == 3
    assert b"Infinity" in body
    # without an overflow every section is orjson's: UTF-8, no Infinity
    small = build_companion(PLAN, docs[1:2])
    assert b"Infinity" not in small and lat(Companion.from_bytes(small))["sum"] == 1e308


def test_full_span() -> None:
    assert full_span(0, 1000, 1000) == (0, 1000)
    assert full_span(1, 1999, 1000) is None
    assert full_span(-1500, 2500, 1000) == (-1000, 2000)


# ---------------------------------------------------------------- (c) routing keys
@SETTINGS
@given(segments())
def test_routing_keys_equal_brute_force(docs: list[SegmentDoc]) -> None:
    comp = _rk_plan_companion(docs)
    keys = {d.routing_key for d in docs if d.routing_key is not None}
    assert comp.routing_keys() == sorted(keys)
    for k in [*keys, "absent"]:
        assert comp.docs_with_key(k) == [i for i, d in enumerate(docs) if d.routing_key == k]


def test_no_routing_key_config_means_no_rk_section() -> None:
    reg = copy.deepcopy(REG)
    del reg["routingKey"]
    plan = IndexPlan.from_registry(reg)
    assert plan is not None
    comp = Companion.from_bytes(build_companion(plan, [SegmentDoc(1, 0, "k", {}, None)]))
    assert "rk" not in comp.families and comp.routing_keys() == []
    assert IndexPlan.from_registry({"currentVersion": 0}) is None


# ---------------------------------------------------------------- (d) determinism
@SETTINGS
@given(segments(), st.randoms(use_true_random=False))
def test_build_is_deterministic_and_order_independent(
    docs: list[SegmentDoc], rnd: random.Random
) -> None:
    once = build_companion(PLAN, docs)
    assert build_companion(PLAN, list(docs)) == once
    shuffled = list(docs)
    rnd.shuffle(shuffled)
    assert build_companion(PLAN, shuffled) == once
    assert build_companion(PLAN, sorted(shuffled, key=lambda d: d.seq)) == once
    # a dict built in another key order is the same document
    reordered = [
        d._replace(value=dict(reversed(list(d.value.items())))) if isinstance(d.value, dict) else d
        for d in docs
    ]
    assert build_companion(PLAN, reordered) == once


_SUBPROCESS = """
import json, sys
from headwater.index.docs import SegmentDoc, UNDECODABLE
from headwater.index.plan import IndexPlan
from headwater.index.writer import build_companion
reg, docs = json.load(sys.stdin)
plan = IndexPlan.from_registry(reg)
docs = [SegmentDoc(s, t, k, UNDECODABLE if u else v, ver) for s, t, k, v, u, ver in docs]
sys.stdout.write(build_companion(plan, docs).hex())
"""


def _fixed_docs() -> list[SegmentDoc]:
    rnd = random.Random(7)
    out = []
    for i in range(300):
        value: Any = {
            "ts": rnd.randrange(0, 20_000),
            "svc": rnd.choice(SVCS),
            "tag": rnd.sample(TAGS, rnd.randrange(0, 3)),
            "code": rnd.choice([200, 500, 503, "404"]),
            "lat": rnd.randrange(-40, 40) / 8,
            "msg": " ".join(rnd.choices(WORDS, k=rnd.randrange(0, 6))),
            "p": {"c": 2, "s": 3, "lo": 1, "hi": 2},
        }
        out.append(
            SegmentDoc(
                10 + i,
                i,
                rnd.choice([None, "u1", "ü2"]),
                UNDECODABLE if i % 37 == 0 else value,
                rnd.choice([None, 1, 2]),
            )
        )
    return out


def test_other_processes_write_identical_bytes() -> None:
    """Stands in for the Glue job: fresh interpreters with different string-hash seeds
    (set/dict iteration orders differ) build the same segment to the same bytes."""
    docs = _fixed_docs()
    local = build_companion(PLAN, docs)
    payload = json.dumps(
        [
            REG,
            [
                [
                    d.seq,
                    d.ts_ms,
                    d.routing_key,
                    None if d.value is UNDECODABLE else d.value,
                    d.value is UNDECODABLE,
                    d.version,
                ]
                for d in docs
            ],
        ]
    )
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{root / 'layers' / 'headwater'}{os.pathsep}{root}"
    for seed in ("1", "2"):
        env["PYTHONHASHSEED"] = seed
        out = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS],
            input=payload,
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=120,
        )
        assert bytes.fromhex(out.stdout) == local


# ---------------------------------------------------------------- (e) generation
def _gen(mutate: Any) -> str:
    reg = copy.deepcopy(REG)
    mutate(reg)
    plan = IndexPlan.from_registry(reg)
    assert plan is not None
    return plan.generation


def _set(path: str, value: Any) -> Any:
    def go(reg: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = reg
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if value is KeyError:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return go


F = "search.fields"
R1 = "search.rollups.r1"
RELEVANT = {
    "exact field pointer": _set(f"{F}.tag.bindings.0.jsonPointer", "/tag2"),
    "exact field new binding": _set(
        f"{F}.tag.bindings",
        [{"version": 1, "jsonPointer": "/tag"}, {"version": 2, "jsonPointer": "/t"}],
    ),
    "normalizer": _set(f"{F}.tag.normalizer", "lowercase_v1"),
    "exact off": _set(f"{F}.ok.exact", False),
    "column on": _set(f"{F}.ok.column", True),
    "positions": _set(f"{F}.msg.positions", False),
    "new text field": _set(f"{F}.t2", _f("text", "/t2", analyzer="unicode_word_v1")),
    "prefix makes keyword exact-indexed": _set(f"{F}.note.prefix", True),
    "routingKey removed": _set("routingKey", None),
    "interval added": _set(f"{R1}.intervals", ["1s", "5s", "1m"]),
    "include changed": _set(f"{R1}.include", "has:tag"),
    "measure include": _set(f"{R1}.measures.n.include", "ok:true"),
    "dimension dropped": _set(f"{R1}.dimensions", ["svc"]),
    "dimension order": _set(f"{R1}.dimensions", ["tag", "svc"]),
    "summary field": _set(f"{R1}.measures.lat.field", "code"),
    "rollup removed": _set("search.rollups.r2", KeyError),
    "summary_parts pointer": _set("search.rollups.r2.measures.parts.sumJsonPointer", "/p/x"),
    "timestamp field binding": _set(f"{F}.ts.bindings.0.jsonPointer", "/time"),
}
IRRELEVANT = {
    "sortable": _set(f"{F}.code.sortable", True),
    "aggregatable": _set(f"{F}.code.aggregatable", True),
    "exists": _set(f"{F}.tag.exists", True),
    "non-indexed field pointer": _set(f"{F}.note.bindings.0.jsonPointer", "/n2"),
    "new non-indexed field": _set(f"{F}.host", _f("keyword", "/host", exists=True)),
    "boost": _set("search.defaultFields", [{"field": "msg", "boost": 3}, {"field": "svc"}]),
    "alias": _set("search.aliases", {"service": "svc", "s": "svc"}),
    "profile": _set("search.profile", "logs"),
    "routingKey pointer": _set("routingKey", {"jsonPointer": "/u", "required": True}),
    "interval order": _set(f"{R1}.intervals", ["5s", "1s"]),
    "field order": lambda reg: reg["search"].update(
        fields=dict(reversed(list(reg["search"]["fields"].items())))
    ),
    "schema version": _set("currentVersion", 3),
}


@pytest.mark.parametrize("change", sorted(RELEVANT))
def test_generation_changes_with_relevant_config(change: str) -> None:
    assert _gen(RELEVANT[change]) != PLAN.generation


@pytest.mark.parametrize("change", sorted(IRRELEVANT))
def test_generation_ignores_irrelevant_config(change: str) -> None:
    assert _gen(IRRELEVANT[change]) == PLAN.generation


def test_generation_is_in_the_header() -> None:
    comp = _rk_plan_companion([SegmentDoc(5, 1, None, {}, None)])
    assert comp.generation == PLAN.generation
    assert (comp.first_seq, comp.last_seq, comp.doc_count) == (5, 5, 1)


# ---------------------------------------------------------------- (e2) partial reads
_CORPUS_BYTES = build_companion(PLAN, CORPUS)


def _answer_from_prefix(raw: bytes, prefix: int, fn: Any) -> tuple[Any, list[str]]:
    """`fn(companion)` on a companion read from the first `prefix` bytes, loading each
    section it asks for from `raw`, as the reader does with ranged GETs; and the sections
    it had to load."""
    comp = Companion.from_prefix(raw[:prefix], len(raw))
    loaded: list[str] = []
    for _ in range(8):
        try:
            return fn(comp), loaded
        except SectionNotLoaded as need:
            comp.load(need.name, raw[need.offset : need.offset + need.length])
            loaded.append(need.name)
    raise AssertionError("never finished")


@settings(max_examples=120, deadline=None)
@given(queries, st.integers(0, 3000))
def test_a_companion_read_in_parts_answers_like_the_whole_object(text: str, extra: int) -> None:
    q = _parse(text)
    prefix = 80 + 28 * 6 + 4 + extra  # at least the header and the section table
    want = (CORPUS_COMPANION.candidates(q), CORPUS_COMPANION.scored(q))
    got, loaded = _answer_from_prefix(
        _CORPUS_BYTES, prefix, lambda c: (c.candidates(q), c.scored(q))
    )
    assert got == want, text
    assert len(loaded) == len(set(loaded))  # each section read once
    assert "agg" not in loaded and "rk" not in loaded  # a query never reads those


def test_each_operation_reads_only_its_sections() -> None:
    header = 80 + 28 * 6 + 4
    keys, loaded = _answer_from_prefix(_CORPUS_BYTES, header, lambda c: c.routing_keys())
    assert (keys == CORPUS_COMPANION.routing_keys() and loaded == ["seq", "rk"]) or loaded == ["rk"]
    windows, loaded = _answer_from_prefix(
        _CORPUS_BYTES, header, lambda c: _plain(_windows(c, "r1", "1s", 0, 10**6, ["svc"], None))
    )
    assert windows == _plain(_windows(CORPUS_COMPANION, "r1", "1s", 0, 10**6, ["svc"], None))
    assert set(loaded) <= {"seq", "agg"}
    # a corrupt section is refused when it arrives
    comp = Companion.from_prefix(_CORPUS_BYTES[:header], len(_CORPUS_BYTES))
    need = comp.missing("rk")
    assert need is not None
    body = bytearray(_CORPUS_BYTES[need.offset : need.offset + need.length])
    body[0] ^= 1
    with pytest.raises(CompanionError, match="checksum"):
        comp.load("rk", bytes(body))
    # ...as is a table that points past the object's end
    with pytest.raises(CompanionError, match="outside the object"):
        Companion.from_prefix(_CORPUS_BYTES[:header], len(_CORPUS_BYTES) - 1)


# ---------------------------------------------------------------- (f) corrupt objects
def test_every_single_byte_corruption_is_refused() -> None:
    docs = _fixed_docs()[:20]
    good = build_companion(PLAN, docs)
    Companion.from_bytes(good)
    step = max(1, len(good) // 400)
    for i in range(0, len(good), step):
        bad = bytearray(good)
        bad[i] ^= 0x41
        with pytest.raises(CompanionError):
            Companion.from_bytes(bytes(bad))


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: b"", "truncated"),
        (lambda b: b[:50], "truncated"),
        (lambda b: b[:-1], "outside the object"),
        (lambda b: b"XXXXXX" + b[6:], "bad magic"),
        (lambda b: b[:6] + b"\x09\x00" + b[8:], "unsupported companion format version 9"),
        (lambda b: b[:-3] + b"zzz", "checksum mismatch"),
    ],
)
def test_bad_bytes_raise_clear_errors(mangle: Any, message: str) -> None:
    good = build_companion(PLAN, _fixed_docs()[:5])
    with pytest.raises(CompanionError, match=message):
        Companion.from_bytes(mangle(good))


def test_builder_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one"):
        build_companion(PLAN, [])
    with pytest.raises(ValueError, match="twice"):
        build_companion(PLAN, [SegmentDoc(1, 0, None, {}, None)] * 2)


# ---------------------------------------------------------------- glue to stored records
def test_docs_from_records_decodes_like_the_scan() -> None:
    reg = copy.deepcopy(REG)
    reg["boundaries"] = [
        {"offset": encode_offset(0, 0), "version": 1},
        {"offset": encode_offset(0, 11), "version": 2},
    ]

    def rec(seq: int, data: bytes, tag: bytes | None) -> StoredRecord:
        return StoredRecord(seq, 1000 + seq, data, None, tag, None, len(data))

    docs = docs_from_records(
        [
            rec(11, b'{"svc":"API","ts":5}', b'"u1"'),
            rec(12, b'{"service":"web-1","meta":{"ts":7}}', None),
            rec(13, b"not json", b"7"),
        ],
        reg,
    )
    assert [d.version for d in docs] == [1, 2, 2]
    assert [d.routing_key for d in docs] == ["u1", None, None]
    assert docs[2].value is UNDECODABLE
    comp = Companion.from_bytes(build_companion(PLAN, docs))
    assert comp.candidates(_parse("svc:api OR svc:web-1")) == {0, 1}
    assert comp.candidates(_parse("ts:>=6")) == {1}
    assert comp.candidates(_parse("-has:svc")) == {2}
    assert (comp.min_ts, comp.max_ts) == (1011, 1013)
    assert companion_key("streams/x/segments/0001.seg") == "streams/x/segments/0001.seg.cix"
    assert isinstance(_parse("has:note"), Has)


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 5)), max_size=6).map(sorted),
    st.integers(0, 40),
)
def test_version_at_is_schema_version_at(bounds: list[tuple[int, int]], seq: int) -> None:
    reg = {"boundaries": [{"offset": encode_offset(0, s), "version": v} for s, v in bounds]}
    want = schema.version_at(reg, seq, key=schema_seq)
    assert version_at(reg, seq) == want


def schema_seq(offset: str) -> int:
    from headwater.durable.offsets import Offset, decode_offset

    off = decode_offset(offset)
    return off.seq if isinstance(off, Offset) else 0


def test_index_imports_only_pure_modules() -> None:
    """The Glue job has orjson but not jsonschema: importing the index package must not pull
    in durable.schema (nor the request path)."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=f"{root / 'layers' / 'headwater'}{os.pathsep}{root}")
    code = (
        "import sys, headwater.index.companion, headwater.index.writer, headwater.index.plan\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jsonschema', 'boto3',"
        " 'botocore', 'aioboto3') or m in ('headwater.durable.schema',"
        " 'headwater.durable.search', 'headwater.durable.aggregate') or"
        " m.startswith('headwater.http'))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == ""


def test_builder_inputs_survive_pickling() -> None:
    """Spark ships the plan and the docs to executors by pickling them."""
    import pickle

    docs = _fixed_docs()[:40]
    plan = pickle.loads(pickle.dumps(PLAN))
    moved = pickle.loads(pickle.dumps(docs))
    assert moved[0].value is UNDECODABLE
    assert plan == PLAN and plan.generation == PLAN.generation
    assert build_companion(plan, moved) == build_companion(PLAN, docs)


# ---------------------------------------------------------------- per-field columns
_digits = st.text("0123456789", min_size=1, max_size=1)
_fast_shaped_date = st.builds(
    lambda y, mo, d, h, mi, s, ms, sep, z: (
        f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}.{ms:03d}{z}"
    ),
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
    st.integers(0, 999),
    st.sampled_from(["T", "T", "t", " "]),
    st.sampled_from(["Z", "Z", "z", "+"]),
)
_column_value = st.one_of(
    _fast_shaped_date,
    _fast_shaped_date.map(lambda t: f" {t[:-1]}"),  # same length, shifted
    _fast_shaped_date.map(lambda t: t[:17] + "٣" + t[18:]),  # a non-ASCII digit
    st.sampled_from(SVCS + WORDS + ["", "500", " 7 ", "1e1", "true", "nan", "2024-02-29"]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.lists(st.one_of(st.integers(-3, 3), st.sampled_from(SVCS), _fast_shaped_date), max_size=3),
    st.fixed_dictionaries({"x": st.integers()}),
)
_column_doc = st.one_of(
    st.fixed_dictionaries({}, optional={"a": _column_value, "b": _column_value}),
    st.sampled_from([None, 3, "str", [1, 2]]),
)
_COLUMN_FIELDS = search_fields(
    {
        "currentVersion": 2,
        "search": {
            "primaryTimestampField": "date0",
            "fields": {
                f"{kind}{norm}{n}": _f(
                    kind,
                    *ptrs,
                    **({"normalizer": norm} if norm else {}),
                    **({"analyzer": "unicode_word_v1"} if kind == "text" else {}),
                )
                for kind in ("keyword", "text", "integer", "float", "date", "bool")
                for norm in (["", "lowercase_v1"] if kind == "keyword" else [""])
                for n, ptrs in enumerate([("/a",), ("/a", "/b"), ("/x/y",)])
            },
        },
    }
)


@SETTINGS
@given(
    st.lists(st.tuples(_column_doc, st.sampled_from([None, 1, 2])), min_size=1, max_size=30),
    st.booleans(),
)
def test_field_columns_equal_each_docs_values(
    docs: list[tuple[Any, int | None]], one: bool
) -> None:
    """The builder reads a field a column at a time (one schema version, a one-token
    pointer), with the common `...T00:00:00.000Z` date shape parsed per minute: every doc's
    values are what the evaluator reads (FieldSpec.values), whatever the docs hold."""
    from headwater.index.columns import PerDoc

    versions = [docs[0][1]] * len(docs) if one else [v for _, v in docs]
    values = [d for d, _ in docs]
    per_doc = PerDoc(values, versions)
    for spec in _COLUMN_FIELDS.values():
        got = [list(x) for x in per_doc.of(spec)]
        want = [spec.values(d, v) for d, v in zip(values, versions, strict=True)]
        assert got == want, spec.name
        assert [[type(x) for x in g] for g in got] == [[type(x) for x in w] for w in want]


def test_date_column_parses_the_common_shape_exactly() -> None:
    from headwater.index.columns import PerDoc

    spec = _COLUMN_FIELDS["date0"]
    texts = [
        "2026-01-01T00:00:00.000Z",
        "2026-01-01T00:00:59.999Z",
        "1969-12-31T23:59:59.999Z",
        "2024-02-29T12:34:56.789Z",
        "2023-02-29T12:34:56.789Z",  # no such day
        "2026-01-01T24:00:00.000Z",  # no such hour
        "2026-01-01T00:00:60.000Z",  # no such second
    ]
    got = PerDoc([{"a": t} for t in texts], [None] * len(texts)).of(spec)
    assert [list(g) for g in got] == [
        [1767225600000],
        [1767225659999],
        [-1],
        [1709210096789],
        [],
        [],
        [],
    ]


def test_routing_keys_are_read_from_plain_and_escaped_tags() -> None:
    def rec(seq: int, tag: bytes | None) -> StoredRecord:
        return StoredRecord(seq, 1, b"{}", None, tag, None, 2)

    tags = [b'"plain"', b'"a\\"b"', b'"\\u00e9t\\u00e9"', '"été"'.encode(), b"7", b'["x"]', None]
    docs = docs_from_records([rec(i + 1, t) for i, t in enumerate(tags)], {})
    assert [d.routing_key for d in docs] == ["plain", 'a"b', "été", "été", None, None, None]


def test_a_segment_build_pauses_cycle_collection_only_while_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc

    from headwater.engine.segment import encode_segment
    from headwater.index import build

    seen: list[bool] = []
    real = build.build_companion

    def spy(plan: IndexPlan, docs: Any) -> bytes:
        seen.append(gc.isenabled())
        return real(plan, docs)

    monkeypatch.setattr(build, "build_companion", spy)
    recs = [StoredRecord(s, 1000 + s, b'{"svc":"api"}', None, b'"u1"', None, 13) for s in (1, 2)]
    blob, _info = encode_segment("t", 1, recs)
    assert gc.isenabled()
    once = build.build_segment(PLAN, REG, blob)
    assert seen == [False] and gc.isenabled()  # paused during, resumed after
    gc.disable()
    try:
        assert build.build_segment(PLAN, REG, blob) == once
        assert seen == [False, False] and not gc.isenabled()  # not resumed by the build
    finally:
        gc.enable()
    monkeypatch.setattr(build, "decode_segment", lambda _b: (_ for _ in ()).throw(ValueError("x")))
    with pytest.raises(ValueError):
        build.build_segment(PLAN, REG, blob)
    assert gc.isenabled()  # resumed after a failed build too
