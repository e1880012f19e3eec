"""/api/v2 REST (docs/dashboard.md): ingest (shapes, canonical form, every bad field, all or
nothing, idempotency, auth, the configured topic), GET /api/v2/metrics against a brute-force
recount (invalid /v0 records, ticker case, record deletes, rates by append time on a set
clock, the rollup base), and the configurations CRUD with its scoping and limits."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from api_helpers import MakeClient
from dashboard_helpers import (
    CONFIGS,
    HOUR,
    METRICS,
    MINUTE,
    SENTIMENT,
    STREAM,
    TS_RE,
    Clock,
    assert_metrics,
    canonical,
    create_config,
    detail,
    fast,
    item,
    open_stream,
    parse_iso_ms,
    post_items,
    read_log,
    recount,
    set_clock,
    user,
)
from starlette.testclient import TestClient
from test_tiering import services

from headwater.names import object_key_component
from headwater.settings import DashboardSettings, Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api

ITEM_ERROR = "invalid sentiment item"


@pytest.fixture
def dc(make_client: MakeClient) -> TestClient:
    return make_client(dashboard=fast())


def metrics_now(client: TestClient) -> dict[str, Any]:
    resp = client.get(METRICS)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    out: dict[str, Any] = resp.json()
    return out


def data_of(client: TestClient, topic: str = "sentiment") -> list[dict[str, Any]]:
    return [r["data"] for r in read_log(client, topic)]


# --- ingest: shapes and canonical form ------------------------------------------------------
def test_ingest_single_array_and_items_object(dc: TestClient) -> None:
    a, b, c, d = (item(t, source=f"s{i}") for i, t in enumerate(["AAPL", "MSFT", "TSLA", "NVDA"]))
    r1 = post_items(dc, a)
    assert r1 == {
        "topic": "sentiment",
        "accepted": 1,
        "first_seq": 1,
        "last_seq": 1,
        "deduped": False,
    }
    r2 = post_items(dc, [b, c])
    assert r2 == {
        "topic": "sentiment",
        "accepted": 2,
        "first_seq": 2,
        "last_seq": 3,
        "deduped": False,
    }
    r3 = post_items(dc, {"items": [d]})
    assert (r3["accepted"], r3["first_seq"], r3["last_seq"]) == (1, 4, 4)
    assert data_of(dc) == [canonical(x) for x in (a, b, c, d)]


def test_ingest_stores_the_canonical_form_with_the_ticker_as_tag(dc: TestClient) -> None:
    clock = Clock(1_764_671_400_000 + 250)  # 2025-12-02T10:30:00.250Z
    services(dc)  # built
    set_clock(dc, clock)
    post_items(
        dc,
        [
            item("brk.b", timestamp="2025-12-02T12:30:00.5+02:00", extra=1, nested={"x": 1}),
            item("msft", label="negative", score=-1, confidence=0, timestamp=None),
            item(
                "Ab-1_x",
                label="neutral",
                score=1,
                confidence=1,
                timestamp="2025-12-02T05:00:00-05:30",
            ),
        ],
    )
    recs = read_log(dc)
    assert [r["data"] for r in recs] == [
        {
            "ticker": "BRK.B",
            "score": 0.5,
            "label": "positive",
            "confidence": 0.9,
            "source": "tiingo",
            "timestamp": "2025-12-02T10:30:00.500Z",
        },
        {
            "ticker": "MSFT",
            "score": -1,
            "label": "negative",
            "confidence": 0,
            "source": "tiingo",
            "timestamp": "2025-12-02T10:30:00.250Z",  # absent: the request time
        },
        {
            "ticker": "AB-1_X",
            "score": 1,
            "label": "neutral",
            "confidence": 1,
            "source": "tiingo",
            "timestamp": "2025-12-02T10:30:00.000Z",
        },
    ]
    # The ticker is the record's tag: a tag delete of MSFT removes exactly that record.
    resp = dc.post("/v0/topics/sentiment/delete", json={"match": ["tag", "Eq", "MSFT"]})
    assert resp.status_code == 200 and resp.json()["deleted"] == 1, resp.text
    assert [r["data"]["ticker"] for r in read_log(dc)] == ["BRK.B", "AB-1_X"]


def test_missing_timestamp_is_the_wall_clock_request_time(dc: TestClient) -> None:
    before = int(datetime.now(UTC).timestamp() * 1000)
    post_items(dc, item(timestamp=None))
    after = int(datetime.now(UTC).timestamp() * 1000)
    ts = data_of(dc)[0]["timestamp"]
    assert TS_RE.match(ts), ts
    assert before - 5 <= parse_iso_ms(ts) <= after + 5, (before, ts, after)


BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"ticker": None}, "ticker"),
    ({"ticker": ""}, "ticker"),
    ({"ticker": "A" * 17}, "ticker"),
    ({"ticker": ".AAPL"}, "ticker"),
    ({"ticker": "AA PL"}, "ticker"),
    ({"ticker": "AAPL$"}, "ticker"),
    ({"ticker": 42}, "ticker"),
    ({"score": True}, "score"),
    ({"score": "0.5"}, "score"),
    ({"score": 1.0001}, "score"),
    ({"score": -1.5}, "score"),
    ({"score": None}, "score"),
    ({"label": "Positive"}, "label"),
    ({"label": "bullish"}, "label"),
    ({"label": None}, "label"),
    ({"confidence": -0.01}, "confidence"),
    ({"confidence": 1.01}, "confidence"),
    ({"confidence": False}, "confidence"),
    ({"source": ""}, "source"),
    ({"source": "   "}, "source"),
    ({"source": "x" * 65}, "source"),
    ({"source": 7}, "source"),
    ({"timestamp": "2025-12-02T10:30:00"}, "timestamp"),  # no zone
    ({"timestamp": "2025-12-02"}, "timestamp"),
    ({"timestamp": "yesterday"}, "timestamp"),
    ({"timestamp": 1764671400000}, "timestamp"),
    ({"timestamp": "1969-12-31T23:59:59Z"}, "timestamp"),  # out of range
]


@pytest.mark.parametrize(("override", "field"), BAD_FIELDS)
def test_every_bad_field_is_400_and_nothing_is_written(
    dc: TestClient, override: dict[str, Any], field: str
) -> None:
    good = item("AAPL")
    bad = {**item("MSFT"), **override}
    resp = dc.post(SENTIMENT, json=[good, good, bad, good])
    body = detail(resp, 400, ITEM_ERROR)
    assert set(body) == {"detail", "errors"}, body
    assert len(body["errors"]) == 1, body
    err = body["errors"][0]
    assert set(err) == {"index", "field", "message"}, err
    assert err["index"] == 2 and err["field"] == field, err
    assert isinstance(err["message"], str) and err["message"], err
    # All or nothing: the good items were not written either.
    assert data_of(dc) == []


def test_missing_required_fields_and_non_objects(dc: TestClient) -> None:
    for name in ("ticker", "score", "label", "confidence", "source"):
        it = item()
        del it[name]
        body = detail(dc.post(SENTIMENT, json=it), 400, ITEM_ERROR)
        assert [(e["index"], e["field"]) for e in body["errors"]] == [(0, name)], body
    body = detail(dc.post(SENTIMENT, json=[item(), "AAPL", 3, item(label="x")]), 400, ITEM_ERROR)
    assert [e["index"] for e in body["errors"]] == [1, 2, 3], body
    assert body["errors"][2]["field"] == "label"
    assert data_of(dc) == []


def test_empty_batch_malformed_json_and_content_type(dc: TestClient) -> None:
    for empty in ([], {"items": []}):
        detail(dc.post(SENTIMENT, json=empty), 400)
    body = detail(
        dc.post(SENTIMENT, content=b'{"ticker": ', headers={"content-type": "application/json"}),
        400,
    )
    assert body["detail"].startswith("malformed JSON"), body
    raw = json.dumps(item()).encode()
    for ctype in ("text/plain", "application/x-www-form-urlencoded"):
        detail(dc.post(SENTIMENT, content=raw, headers={"content-type": ctype}), 415)
    assert data_of(dc) == []
    post_items(dc, item())  # the same body as JSON is fine


def test_idempotency_key_dedupes_and_is_not_double_counted(dc: TestClient) -> None:
    batch = [item("AAPL"), item("msft", label="negative")]
    first = post_items(dc, batch, **{"Idempotency-Key": "k-1"})
    again = dc.post(SENTIMENT, json=batch, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 200, again.text
    body = again.json()
    assert body["deduped"] is True and body["topic"] == "sentiment", body
    assert (body["first_seq"], body["last_seq"]) == (first["first_seq"], first["last_seq"])
    assert len(read_log(dc)) == 2
    posted = [(canonical(x), 0) for x in batch]
    m = metrics_now(dc)
    assert {k: m[k] for k in ("total", "positive", "negative", "by_tag")} == {
        k: recount(posted, 0)[k] for k in ("total", "positive", "negative", "by_tag")
    }
    # Another key writes again.
    assert post_items(dc, batch, **{"Idempotency-Key": "k-2"})["deduped"] is False
    assert metrics_now(dc)["total"] == 4


def test_ingest_auth_with_api_keys(make_client: MakeClient) -> None:
    c = make_client(
        dashboard=fast(), api_keys_raw="writer:w,reader:r,news-writer:w:news.,admin-key"
    )
    body = detail(c.post(SENTIMENT, json=item()), 401)
    assert "errors" not in body
    detail(c.post(SENTIMENT, json=item(), headers={"Authorization": "Bearer nope"}), 401)
    detail(c.post(SENTIMENT, json=item(), headers={"Authorization": "Bearer reader"}), 403)
    detail(c.post(SENTIMENT, json=item(), headers={"Authorization": "Bearer news-writer"}), 403)
    ok = post_items(c, item(), Authorization="Bearer writer")
    assert ok["accepted"] == 1
    # Reads of the dashboard stay public.
    assert metrics_now(c)["total"] == 1
    recs = c.post(
        "/v0/topics/sentiment/diff",
        json={"from_seq": 0},
        headers={"Authorization": "Bearer reader"},
    ).json()["records"]
    assert [r["data"] for r in recs] == [canonical(item())]


def test_the_configured_topic_is_used(make_client: MakeClient) -> None:
    c = make_client(dashboard=fast(topic="other"))
    assert post_items(c, [item("AAPL"), item("MSFT")])["topic"] == "other"
    assert data_of(c, "other") == [canonical(item("AAPL")), canonical(item("MSFT"))]
    assert data_of(c, "sentiment") == []
    # Items of the default topic name are not counted by this app.
    c.post("/v0/topics/sentiment", json={"records": [{"data": item("TSLA")}]})
    m = metrics_now(c)
    assert (m["total"], m["by_tag"]) == (2, {"AAPL": 1, "MSFT": 1})


# --- metrics -----------------------------------------------------------------------------------
def test_metrics_are_a_recount(dc: TestClient) -> None:
    assert_metrics(metrics_now(dc), recount([], 0))  # no topic yet: zeros
    items = [
        item("AAPL", "positive"),
        item("aapl", "negative"),
        item("MSFT", "neutral"),
        item("msft", "neutral"),
        item("Msft", "positive"),
        item("TSLA", "negative"),
        item("BRK.B", "positive"),
    ]
    post_items(dc, items)
    # Records appended through /v0: some valid items (lower case), some not items.
    v0 = [
        {"data": item("tsla", "positive")},
        {"data": {**item("NVDA"), "score": 2}},
        {"data": {**item("NVDA"), "label": "POSITIVE"}},
        {"data": "not an object"},
        {"data": {"ticker": "NVDA"}},
        {"data": {**item("NVDA"), "timestamp": "2025-12-02T10:30:00"}},
        {"data": item("nvda", "neutral", source="v0", extra={"a": 1})},
    ]
    resp = dc.post("/v0/topics/sentiment", json={"records": v0})
    assert resp.status_code == 200, resp.text
    valid = [*items, v0[0]["data"], v0[6]["data"]]
    now = parse_iso_ms(metrics_now(dc)["timestamp"])
    expected = recount([(x, now) for x in valid], now)
    assert expected["total"] == 9 and expected["by_tag"]["MSFT"] == 3  # the model, sanity
    m = metrics_now(dc)
    assert_metrics(m, recount([(x, now) for x in valid], parse_iso_ms(m["timestamp"])))
    # The metrics stream's first event says the same.
    with open_stream(dc, STREAM) as sse:
        fr = sse.next_of("metrics")
        assert_metrics(
            fr.data, recount([(x, now) for x in valid], parse_iso_ms(fr.data["timestamp"]))
        )


def test_deleted_records_stop_counting(dc: TestClient) -> None:
    items = [
        item(t, lbl)
        for t, lbl in [
            ("AAPL", "positive"),
            ("MSFT", "negative"),
            ("AAPL", "neutral"),
            ("TSLA", "positive"),
            ("MSFT", "positive"),
        ]
    ]
    post_items(dc, items)
    now = parse_iso_ms(metrics_now(dc)["timestamp"])
    assert_metrics(metrics_now(dc), recount([(x, now) for x in items], now))
    resp = dc.post("/v0/topics/sentiment/delete", json={"before_seq": 3})  # seqs 1, 2
    assert resp.status_code == 200 and resp.json()["deleted"] == 2, resp.text
    assert_metrics(metrics_now(dc), recount([(x, now) for x in items[2:]], now))
    resp = dc.post("/v0/topics/sentiment/delete", json={"match": ["tag", "Eq", "TSLA"]})
    assert resp.status_code == 200 and resp.json()["deleted"] == 1, resp.text
    assert_metrics(metrics_now(dc), recount([(items[2], now), (items[4], now)], now))
    # New items after the deletes count on top.
    post_items(dc, item("NVDA", "negative"))
    assert_metrics(
        metrics_now(dc),
        recount([(items[2], now), (items[4], now), (item("NVDA", "negative"), now)], now),
    )
    # The topic deleted: nothing counts.
    assert dc.delete("/v0/topics/sentiment").status_code in (200, 204)
    assert_metrics(metrics_now(dc), recount([], now))


T = 1_764_671_417_123  # 2025-12-02T10:30:17.123Z
T_MIN = T - T % MINUTE


def test_rates_by_append_time_on_a_set_clock(dc: TestClient) -> None:
    clock = Clock(T - 30 * HOUR)
    services(dc)
    set_clock(dc, clock)
    # Append times (oldest first: append time never goes back on a topic).
    times = [
        T - 25 * HOUR,
        T_MIN - 1440 * MINUTE + 59_999,  # 1,440 minutes back: outside the 24 h
        T_MIN - 1439 * MINUTE,  # 1,439 minutes back: inside
        T - 23 * HOUR,
        T - 2 * HOUR,
        T_MIN - 60 * MINUTE + 59_999,  # outside the hour
        T_MIN - 59 * MINUTE,  # inside the hour
        T - 30 * MINUTE,
        T_MIN,
        T,
    ]
    posted: list[tuple[dict[str, Any] | None, int]] = []
    for i, ts in enumerate(times):
        clock.now_ms = ts
        # The item's own timestamp is far from its append time: it must not matter.
        it = item(
            ["AAPL", "MSFT"][i % 2],
            ["positive", "neutral", "negative"][i % 3],
            timestamp="2020-01-01T00:00:00.000Z",
        )
        if i % 2:
            post_items(dc, it)
        else:
            resp = dc.post(
                "/v0/topics/sentiment", json={"records": [{"data": it}, {"data": {"x": i}}]}
            )
            assert resp.status_code in (200, 201), resp.text
        posted.append((it, ts))
    clock.now_ms = T
    m = metrics_now(dc)
    assert m["timestamp"] == "2025-12-02T10:30:17.123Z"
    expected = recount(posted, T)
    assert (expected["rate_last_hour"], expected["rate_last_24h"]) == (4, 8)  # the model, sanity
    assert_metrics(m, expected)
    with open_stream(dc, STREAM) as sse:
        assert_metrics(sse.next_of("metrics").data, expected)
    # One minute later the boundary items fall out; the timestamp follows the clock.
    clock.now_ms = T_MIN + MINUTE
    m = metrics_now(dc)
    assert m["timestamp"] == "2025-12-02T10:31:00.000Z"
    expected = recount(posted, T_MIN + MINUTE)
    assert (expected["rate_last_hour"], expected["rate_last_24h"]) == (3, 7)
    assert_metrics(m, expected)
    # A day later nothing is recent, the totals stay.
    clock.now_ms = T + 25 * HOUR
    assert_metrics(metrics_now(dc), recount(posted, T + 25 * HOUR))
    assert metrics_now(dc)["rate_last_24h"] == 0


# --- metrics from a rollup --------------------------------------------------------------------
def write_rollup(
    settings: Settings,
    aws: AwsClients,
    state: dict[str, int],
    through_seq: int,
    doc: dict[str, Any],
) -> None:
    base = f"rollups/v1/{object_key_component('sentiment')}/"
    aws.s3.put_object(
        Bucket=settings.bucket_name, Key=f"{base}sentiment.json", Body=json.dumps(doc)
    )
    manifest = {
        "version": 1,
        "generated_at": 1_700_000_000_000,
        "segments": 1,
        "topics": {
            "sentiment": {
                "epoch": state["epoch"],
                "through_seq": through_seq,
                "records": through_seq,
                "state": state,
                "sentiment": f"{base}sentiment.json",
            }
        },
    }
    aws.s3.put_object(
        Bucket=settings.bucket_name, Key="rollups/v1/manifest.json", Body=json.dumps(manifest)
    )


def head_state(client: TestClient) -> dict[str, int]:
    head = services(client).engine.heads.get("sentiment", consistent=True)
    assert head is not None
    return {
        "epoch": head.epoch,
        "del_ver": head.del_ver,
        "earliest_seq": head.earliest_seq,
        "evict_floor": head.evict_floor,
    }


def test_metrics_from_a_rollup_plus_the_tail(
    make_client: MakeClient, settings: Settings, aws: AwsClients
) -> None:
    writer = make_client(dashboard=fast())
    items = [
        item(t, lbl)
        for t, lbl in [
            ("AAPL", "positive"),
            ("MSFT", "negative"),
            ("AAPL", "neutral"),
            ("TSLA", "positive"),
            ("MSFT", "positive"),
            ("NVDA", "negative"),
        ]
    ]
    post_items(writer, items[:4])  # seqs 1..4
    post_items(writer, items[4:])  # seqs 5, 6
    state = head_state(writer)
    now = parse_iso_ms(metrics_now(writer)["timestamp"])
    now_min = now - now % MINUTE
    # A rollup through seq 4 that counted something else entirely (1,000 items).
    rollup = {
        "items": 1000,
        "by_label": {"negative": 300, "neutral": 200, "positive": 500},
        "by_ticker": {"AAPL": 600, "ZZZ": 400},
        "minute": [
            {"window_start": now_min - 30 * 60 * MINUTE, "items": 5},  # older than 25 h
            {"window_start": now_min - 3 * 60 * MINUTE, "items": 11},
            {"window_start": now_min - 10 * MINUTE, "items": 7},
        ],
    }
    write_rollup(settings, aws, state, 4, rollup)
    fresh = make_client(dashboard=fast())
    m = metrics_now(fresh)
    tail = recount([(x, now) for x in items[4:]], now)  # seqs 5, 6: appended just now
    by_tag = {"AAPL": 600, "ZZZ": 400}
    for t, n in tail["by_tag"].items():
        by_tag[t] = by_tag.get(t, 0) + n
    expected = {
        "total": 1000 + tail["total"],
        "positive": 500 + tail["positive"],
        "neutral": 200 + tail["neutral"],
        "negative": 300 + tail["negative"],
        "by_tag": dict(sorted(by_tag.items(), key=lambda kv: (-kv[1], kv[0]))),
        "rate_last_hour": 7 + 2,
        "rate_last_24h": 7 + 11 + 2,
    }
    assert_metrics(m, expected)
    # The stream of another fresh app starts from the same.
    with open_stream(make_client(dashboard=fast()), STREAM) as sse:
        assert_metrics(sse.next_of("metrics").data, expected)


@pytest.mark.parametrize("field", ["epoch", "del_ver", "earliest_seq", "evict_floor"])
def test_a_rollup_of_another_history_is_ignored(
    make_client: MakeClient, settings: Settings, aws: AwsClients, field: str
) -> None:
    writer = make_client(dashboard=fast())
    items = [item("AAPL"), item("MSFT", "negative"), item("TSLA", "neutral")]
    post_items(writer, items)
    state = head_state(writer)
    wrong = {**state, field: state[field] + 1}
    write_rollup(
        settings,
        aws,
        wrong,
        2,
        {"items": 1000, "by_label": {"positive": 1000}, "by_ticker": {"AAPL": 1000}, "minute": []},
    )
    m = metrics_now(make_client(dashboard=fast()))
    now = parse_iso_ms(m["timestamp"])
    assert_metrics(m, recount([(x, now) for x in items], now))


def test_a_rollup_past_the_head_is_ignored(
    make_client: MakeClient, settings: Settings, aws: AwsClients
) -> None:
    writer = make_client(dashboard=fast())
    items = [item("AAPL"), item("MSFT", "negative")]
    post_items(writer, items)
    write_rollup(
        settings,
        aws,
        head_state(writer),
        5,
        {"items": 1000, "by_label": {"positive": 1000}, "by_ticker": {"AAPL": 1000}, "minute": []},
    )
    m = metrics_now(make_client(dashboard=fast()))
    now = parse_iso_ms(m["timestamp"])
    assert_metrics(m, recount([(x, now) for x in items], now))


# --- configurations ---------------------------------------------------------------------------
def check_config(body: dict[str, Any], name: str, tickers: list[str]) -> None:
    assert list(body) == ["config_id", "name", "tickers", "created_at", "updated_at"], body
    assert str(uuid.UUID(body["config_id"])) == body["config_id"], body
    assert (body["name"], body["tickers"]) == (name, tickers), body
    assert TS_RE.match(body["created_at"]) and TS_RE.match(body["updated_at"]), body
    assert parse_iso_ms(body["updated_at"]) >= parse_iso_ms(body["created_at"])


def test_configuration_crud(dc: TestClient) -> None:
    u = user("alice")
    resp = dc.post(
        CONFIGS,
        json={"name": "  Tech  ", "tickers": ["aapl", "MSFT", "AAPL", "msft", "brk.b"]},
        headers=u,
    )
    assert resp.status_code == 201, resp.text
    a = resp.json()
    check_config(a, "Tech", ["AAPL", "MSFT", "BRK.B"])
    b = create_config(dc, "alice", [], name="empty")
    check_config(b, "empty", [])
    c = create_config(dc, "alice", ["TSLA", "NVDA", "AMD", "INTC", "tsla", "QCOM"], name="five")
    check_config(c, "five", ["TSLA", "NVDA", "AMD", "INTC", "QCOM"])

    listed = dc.get(CONFIGS, headers=u)
    assert listed.status_code == 200, listed.text
    assert listed.json() == {"configurations": [a, b, c], "count": 3}
    assert dc.get(CONFIGS, headers=user("bob")).json() == {"configurations": [], "count": 0}
    got = dc.get(f"{CONFIGS}/{a['config_id']}", headers=u)
    assert got.status_code == 200 and got.json() == a, got.text

    put = dc.put(f"{CONFIGS}/{a['config_id']}", json={"name": "Renamed"}, headers=u)
    assert put.status_code == 200, put.text
    check_config(put.json(), "Renamed", ["AAPL", "MSFT", "BRK.B"])
    assert put.json()["created_at"] == a["created_at"]
    put = dc.put(f"{CONFIGS}/{a['config_id']}", json={"tickers": ["tsla", "TSLA"]}, headers=u)
    assert put.status_code == 200, put.text
    check_config(put.json(), "Renamed", ["TSLA"])
    put = dc.put(f"{CONFIGS}/{a['config_id']}", json={"name": "Both", "tickers": []}, headers=u)
    check_config(put.json(), "Both", [])
    assert dc.get(f"{CONFIGS}/{a['config_id']}", headers=u).json() == put.json()

    resp = dc.delete(f"{CONFIGS}/{a['config_id']}", headers=u)
    assert resp.status_code == 204 and resp.content == b"", resp.text
    detail(dc.get(f"{CONFIGS}/{a['config_id']}", headers=u), 404, "Configuration not found")
    detail(dc.delete(f"{CONFIGS}/{a['config_id']}", headers=u), 404, "Configuration not found")
    assert dc.get(CONFIGS, headers=u).json() == {"configurations": [b, c], "count": 2}


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "tickers": ["A", "B", "C", "D", "E", "F"]},
        {"name": "x", "tickers": ["AAPL", ".bad"]},
        {"name": "x", "tickers": [1]},
        {"name": "x", "tickers": "AAPL"},
        {"name": "x"},
        {"tickers": ["AAPL"]},
        {"name": "", "tickers": []},
        {"name": "   ", "tickers": []},
        {"name": "x" * 101, "tickers": []},
        {"name": 5, "tickers": []},
        {"name": "x", "tickers": [], "color": "red"},
        ["AAPL"],
    ],
)
def test_invalid_configuration_bodies_are_400(dc: TestClient, body: Any) -> None:
    detail(dc.post(CONFIGS, json=body, headers=user("alice")), 400)
    assert dc.get(CONFIGS, headers=user("alice")).json()["count"] == 0


def test_name_limits_and_put_validation(dc: TestClient) -> None:
    ok = create_config(dc, "alice", [], name="x" * 100)
    check_config(ok, "x" * 100, [])
    url = f"{CONFIGS}/{ok['config_id']}"
    for body in (
        {},
        {"name": ""},
        {"name": "y" * 101},
        {"tickers": ["A", "B", "C", "D", "E", "F"]},
        {"owner": "bob"},
        {"name": "ok", "extra": 1},
    ):
        detail(dc.put(url, json=body, headers=user("alice")), 400)
    assert dc.get(url, headers=user("alice")).json() == ok
    detail(
        dc.post(
            CONFIGS, content=b"{", headers={**user("alice"), "content-type": "application/json"}
        ),
        400,
    )


def test_user_identification(dc: TestClient) -> None:
    cfg = create_config(dc, "alice", ["AAPL"])
    one = f"{CONFIGS}/{cfg['config_id']}"
    calls = [
        lambda h: dc.post(CONFIGS, json={"name": "n", "tickers": []}, headers=h),
        lambda h: dc.get(CONFIGS, headers=h),
        lambda h: dc.get(one, headers=h),
        lambda h: dc.put(one, json={"name": "n"}, headers=h),
        lambda h: dc.delete(one, headers=h),
    ]
    for call in calls:
        for headers in ({}, {"X-User-ID": ""}, {"X-User-ID": "   "}):
            resp = call(headers)
            assert resp.status_code == 401, resp.text
            assert resp.json() == {"detail": "Missing user identification"}
        resp = call({"X-User-ID": "u" * 129})
        assert resp.status_code == 401 and resp.json() == {"detail": "Invalid user identification"}
    assert dc.get(one, headers=user("alice")).json() == cfg  # untouched
    assert dc.get(CONFIGS, headers=user("u" * 128)).json()["count"] == 0  # 128 is fine


def test_another_users_configuration_is_404(dc: TestClient) -> None:
    cfg = create_config(dc, "alice", ["AAPL"])
    one = f"{CONFIGS}/{cfg['config_id']}"
    for uid in ("bob", "Alice", "alice "):  # "alice " is trimmed: alice herself
        h = user(uid)
        resps = [
            dc.get(one, headers=h),
            dc.put(one, json={"name": "mine"}, headers=h),
            dc.delete(one, headers=h),
        ]
        for resp in resps:
            if uid == "alice ":
                assert resp.status_code in (200, 204), resp.text
            else:
                assert resp.status_code == 404, resp.text
                assert resp.json() == {"detail": "Configuration not found"}
        if uid == "alice ":
            break
    for unknown in (str(uuid.uuid4()), "not-a-uuid"):
        resp = dc.get(f"{CONFIGS}/{unknown}", headers=user("alice"))
        assert resp.status_code == 404 and resp.json() == {"detail": "Configuration not found"}


def test_per_user_limit(make_client: MakeClient) -> None:
    c = make_client(dashboard=DashboardSettings(max_configs_per_user=2))
    a = create_config(c, "alice", ["AAPL"])
    create_config(c, "alice", ["MSFT"])
    resp = c.post(CONFIGS, json={"name": "third", "tickers": []}, headers=user("alice"))
    assert resp.status_code == 409, resp.text
    assert resp.json() == {
        "detail": "Configuration limit reached (2 per user)",
        "max_configurations": 2,
    }
    assert c.get(CONFIGS, headers=user("alice")).json()["count"] == 2
    create_config(c, "bob", [])  # per user
    assert c.delete(f"{CONFIGS}/{a['config_id']}", headers=user("alice")).status_code == 204
    create_config(c, "alice", ["TSLA"], name="third")
    assert (
        c.post(CONFIGS, json={"name": "4", "tickers": []}, headers=user("alice")).status_code == 409
    )
    # A refused delete (another user's id) frees nothing.
    third = c.get(CONFIGS, headers=user("alice")).json()["configurations"][-1]
    assert c.delete(f"{CONFIGS}/{third['config_id']}", headers=user("bob")).status_code == 404
    assert (
        c.post(CONFIGS, json={"name": "b2", "tickers": []}, headers=user("bob")).status_code == 201
    )
    assert (
        c.post(CONFIGS, json={"name": "b3", "tickers": []}, headers=user("bob")).status_code == 409
    )
