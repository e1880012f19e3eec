"""The benchmark harness's pure parts (statistics, DynamoDB unit estimates, the price
model, summaries); the botocore call-counting hooks are tested in
tests/adapters/test_callcount_hooks.py."""

from __future__ import annotations

import math

import pytest
from bench.harness import (
    PRICES,
    RunResult,
    Target,
    Workload,
    cost_per_op,
    format_table,
    idle_ceiling,
    merge_snapshots,
    per_million_events,
    percentile,
    summarize,
)

from headwater.storage import callcount


@pytest.mark.unit
def test_percentile_interpolates_like_numpy() -> None:
    # GIVEN 1..100 WHEN taking percentiles THEN linear interpolation between ranks
    values = [float(v) for v in range(100, 0, -1)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(values, 101)


@pytest.mark.unit
def test_item_size_follows_dynamodb_rules() -> None:
    # strings and binary by length, numbers ~1 byte per 2 significant digits + 1, names count
    assert callcount.item_size({"pk": {"S": "abc"}}) == 2 + 3
    assert callcount.item_size({"n": {"N": "12345"}}) == 1 + 4
    assert callcount.item_size({"n": {"N": "-1200.00"}}) == 1 + 2
    assert callcount.item_size({"b": {"B": b"x" * 1000}}) == 1 + 1000
    assert callcount.item_size({"ok": {"BOOL": True}}) == 2 + 1
    # maps and lists: 3 bytes + 1 per element + the elements
    assert callcount.item_size({"m": {"M": {"a": {"S": "xy"}}}}) == 1 + 3 + (1 + 2 + 1)
    assert callcount.item_size({"l": {"L": [{"S": "a"}, {"S": "b"}]}}) == 1 + 3 + 2 * (1 + 1)
    assert callcount.item_size(None) == 0


@pytest.mark.unit
def test_write_units_double_inside_transactions() -> None:
    big = {"pk": {"S": "t#1"}, "rb": {"B": b"x" * 1500}}  # ~1.5 KB -> 2 KB units
    params = {
        "TransactItems": [
            {"Put": {"TableName": "log", "Item": big}},
            {
                "Update": {
                    "TableName": "heads",
                    "Key": {"pk": {"S": "t"}},
                    "UpdateExpression": "SET hs = :h",
                    "ExpressionAttributeValues": {":h": {"N": "7"}},
                }
            },
        ]
    }
    callcount._sizes.clear()
    assert callcount._write_units("TransactWriteItems", params) == [
        ("log", 2, 2, True),
        ("heads", 1, 2, False),  # an item never seen: sized from key and values
    ]
    assert callcount._write_units("PutItem", {"TableName": "log", "Item": big}) == [
        ("log", 2, 1, True)
    ]
    assert callcount._write_units("DeleteItem", {"TableName": "x", "Key": {"pk": {"S": "a"}}}) == [
        ("x", 1, 1, False)
    ]
    # the Put above taught its size: deleting that item is billed on it
    key = {"TableName": "log", "Key": {"pk": {"S": "t#1"}}}
    assert callcount._write_units("DeleteItem", key) == [("log", 2, 1, True)]
    assert callcount._write_units("GetItem", {"TableName": "x"}) == []


@pytest.mark.unit
def test_read_units_by_consistency_and_page_size() -> None:
    items = [{"pk": {"S": "p"}, "b": {"B": b"x" * 3000}}] * 3  # ~9 KB -> 3 x 4 KB units
    page = {"Items": items}
    assert callcount._read_units("Query", {"ConsistentRead": True}, page) == 3.0
    assert callcount._read_units("Query", {}, page) == 1.5
    assert callcount._read_units("Query", {"ConsistentRead": True}, {"Items": []}) == 1.0
    assert callcount._read_units("GetItem", {"ConsistentRead": True}, {}) == 1.0
    batch = {"RequestItems": {"t": {"ConsistentRead": True}}}
    assert callcount._read_units("BatchGetItem", batch, {"Responses": {"t": items}}) == 3.0


@pytest.mark.unit
def test_cost_per_op_prices_units_requests_and_lambda() -> None:
    # GIVEN 10 appends that made 10 transactions (6 WRU each, one 1 KB head write each on a
    # table with one GSI) and 10 S3 PUTs
    snap = {
        "calls": {
            "DynamoDB.TransactWriteItems": {"calls": 10.0, "wru": 60.0, "rru": 0.0},
            "S3.PutObject": {"calls": 10.0},
            "S3.DeleteObjects": {"calls": 10.0},
            "S3.GetObject": {"calls": 5.0},
        },
        "tables": {"p-heads": {"items": 10.0, "kb_units": 10.0}, "p-log": {"kb_units": 20.0}},
    }
    # WHEN priced per op, with a 10 ms Lambda duration per op
    c = cost_per_op(snap, 10, gsi_count={"p-heads": 1}, lambda_ms_per_op=10.0)
    # THEN GSI replication adds 1 WRU per KB written to the indexed table
    assert c["wru"] == pytest.approx(7.0) and c["gsi_wru"] == pytest.approx(1.0)
    assert c["usd_dynamodb"] == pytest.approx(7 * 0.625e-6)
    assert c["s3_put"] == 1.0 and c["s3_get"] == 0.5  # deletes are free
    assert c["usd_s3"] == pytest.approx(0.005 / 1000 + 0.5 * 0.0004 / 1000)
    assert c["usd_lambda"] == pytest.approx(0.20e-6 + 0.010 * 1.0 * 0.0000166667)
    assert c["usd_total"] == pytest.approx(c["usd_dynamodb"] + c["usd_s3"] + c["usd_lambda"])
    # AND per million events divides by records per op
    m = per_million_events(c, 100)
    assert m["usd_dynamodb"] == pytest.approx(7 * 0.625e-6 * 1e6 / 100)
    assert PRICES["as_of"] and PRICES["dynamodb_wru_per_million"] == 0.625


@pytest.mark.unit
def test_idle_ceiling_serial_vs_concurrent() -> None:
    ms = {"server": 2.0, "moto": 3.0, "clients": 0.5}
    # one client in a request/response chain: everything is serial
    assert idle_ceiling(ms, 1000, clients=1)["ops_per_s"] == pytest.approx(1000 / 5.5)
    # many clients: bounded by total CPU over the cores, and the server's single core
    assert idle_ceiling(ms, 1, clients=8, cores=2)["ops_per_s"] == pytest.approx(2000 / 5.5)
    assert idle_ceiling({"server": 4.0}, 1, clients=8, cores=2)["ops_per_s"] == 250.0


@pytest.mark.unit
def test_summarize_takes_medians_and_checks_the_target() -> None:
    wl = Workload(
        "w", "d", "op", 10, 1024, 4, target=Target("records_per_s", 1500, ">= 1,500 rec/s")
    )
    runs = [
        RunResult(
            ops=n,
            records=10 * n,
            elapsed_s=1.0,
            latencies_ms=[1.0, 2.0, 3.0],
            cpu_s={"server": n / 1000, "machine": 1.0},
        )
        for n in (100, 300, 200)
    ]
    s = summarize(wl, runs)
    assert s["records_per_s"] == 2000.0 and s["ops_per_s"] == 200.0
    assert s["p50_ms"] == 2.0 and s["runs"] == 3
    assert s["target"]["met"] is True
    assert s["cpu_ms_per_op"]["server"] == pytest.approx(1.0)
    assert s["cpu_cores"]["other"] == pytest.approx(1.0 - 0.2)


@pytest.mark.unit
def test_merge_snapshots_and_table_format() -> None:
    a = {"calls": {"DynamoDB.GetItem": {"calls": 1.0, "rru": 1.0}}, "tables": {}}
    b = {"calls": {"DynamoDB.GetItem": {"calls": 2.0, "rru": 0.5}}, "tables": {"t": {"items": 1}}}
    m = merge_snapshots([a, b])
    assert m["calls"]["DynamoDB.GetItem"] == {"calls": 3.0, "rru": 1.5}
    assert m["tables"]["t"] == {"items": 1}
    text = format_table(["name", "n"], [["a", 1], ["bb", 22]])
    assert text.splitlines()[0] == "name   n" and text.splitlines()[3] == "bb    22"
