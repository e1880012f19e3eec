"""moto_patches._partition_local_query: a base-table Query reads only the queried partition,
with moto's own answers (ranges, order, limits and pages, filters, projections) unchanged;
index queries still see every item."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Attr, Key
from moto import mock_aws
from moto.dynamodb.models.table import Table

pytestmark = pytest.mark.unit


@pytest.fixture
def table(aws_env: None) -> Iterator[Any]:
    with mock_aws():
        ddb = boto3.resource("dynamodb", region_name="us-east-1")
        t = ddb.create_table(
            TableName="t",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "N"},
                {"AttributeName": "g", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by_g",
                    "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        rng = random.Random(4)
        with t.batch_writer() as w:
            for p in ("a", "b", "c"):
                for sk in rng.sample(range(1000), 60):
                    w.put_item(Item={"pk": p, "sk": sk, "g": rng.choice("xy"), "v": sk % 7})
        yield t


def _all(t: Any, **kw: Any) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    while True:
        got = t.query(**kw)
        out += [(i["pk"], int(i["sk"])) for i in got["Items"]]
        if "LastEvaluatedKey" not in got:
            return out
        kw["ExclusiveStartKey"] = got["LastEvaluatedKey"]


def test_base_table_queries_answer_as_before_from_one_partition(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = {(i["pk"], int(i["sk"])): i for i in table.scan()["Items"]}
    b = sorted(sk for pk, sk in items if pk == "b")
    # every item moto's Query looks at comes from the queried partition
    seen: list[str] = []
    original = Table.all_items

    def spy(self: Any) -> Any:
        got = original(self)
        seen.extend(i.hash_key.value for i in got)
        return got

    monkeypatch.setattr(Table, "all_items", spy)
    assert _all(table, KeyConditionExpression=Key("pk").eq("b"), Limit=7) == [("b", s) for s in b]
    assert set(seen) == {"b"} and len(seen) >= len(b)
    seen.clear()
    got = _all(
        table,
        KeyConditionExpression=Key("pk").eq("b") & Key("sk").between(100, 600),
        ScanIndexForward=False,
        Limit=5,
    )
    assert got == [("b", s) for s in reversed(b) if 100 <= s <= 600]
    got = _all(table, KeyConditionExpression=Key("pk").eq("b"), FilterExpression=Attr("v").eq(3))
    assert got == [("b", s) for s in b if s % 7 == 3]
    assert set(seen) == {"b"}
    assert _all(table, KeyConditionExpression=Key("pk").eq("nope")) == []
    # an index query still reads every partition
    seen.clear()
    xs = _all(table, IndexName="by_g", KeyConditionExpression=Key("g").eq("x"))
    assert sorted(xs) == sorted(k for k, i in items.items() if i["g"] == "x")
    assert set(seen) == {"a", "b", "c"}
