"""The botocore call-counting hooks the benchmarks use (headwater.storage.callcount), on real
boto3 clients against moto's in-process mock: calls, bytes and capacity units per API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from headwater.storage import callcount

pytestmark = pytest.mark.adapters


# --- the hooks, on real boto3 clients against moto's in-process mock ----------------------
@pytest.fixture
def counted(moto: None) -> Iterator[None]:
    callcount.reset()
    yield
    callcount.reset()


def test_hooks_count_calls_bytes_and_units_per_api(counted: None) -> None:
    import boto3

    # GIVEN a hooked session (clients made afterwards inherit the hooks)
    session = boto3.Session(region_name="us-east-1")
    callcount.install(session)
    callcount.install(session)  # idempotent
    ddb = session.client("dynamodb")
    s3 = session.client("s3")
    ddb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    s3.create_bucket(Bucket="bench-bucket")
    callcount.reset()
    # WHEN making calls of several kinds
    item = {"pk": {"S": "a"}, "b": {"B": b"x" * 3000}}
    ddb.transact_write_items(TransactItems=[{"Put": {"TableName": "t", "Item": item}}])
    ddb.get_item(TableName="t", Key={"pk": {"S": "a"}}, ConsistentRead=True)
    ddb.get_item(TableName="t", Key={"pk": {"S": "a"}})
    s3.put_object(Bucket="bench-bucket", Key="k", Body=b"y" * 5000)
    assert s3.get_object(Bucket="bench-bucket", Key="k")["Body"].read() == b"y" * 5000
    with pytest.raises(ddb.exceptions.ResourceNotFoundException):
        ddb.get_item(TableName="missing", Key={"pk": {"S": "a"}})
    # THEN each API is counted once per call, with bytes and capacity units
    calls = callcount.snapshot()["calls"]
    tx = calls["DynamoDB.TransactWriteItems"]
    assert tx["calls"] == 1 and tx["wru"] == 2 * 3 and tx["req_bytes"] > 4000
    get = calls["DynamoDB.GetItem"]
    assert get["calls"] == 3 and get["errors"] == 1 and get["rru"] == 1.0 + 0.5
    assert calls["S3.PutObject"]["calls"] == 1 and calls["S3.PutObject"]["req_bytes"] == 5000
    assert calls["S3.GetObject"]["resp_bytes"] == 5000
    assert callcount.snapshot()["tables"]["t"] == {"items": 1.0, "kb_units": 3.0}
    # AND each answered call's wall time is sampled, by API
    wall = callcount.snapshot()["wall_ms"]
    assert {api: len(v) for api, v in wall.items()} == {
        api: int(f["calls"]) for api, f in calls.items()
    }
    assert all(0 < ms < 10_000 for v in wall.values() for ms in v)
    # AND reset zeroes everything
    callcount.reset()
    assert callcount.snapshot() == {"calls": {}, "tables": {}, "wall_ms": {}}


def test_hooks_install_on_a_single_client(counted: None) -> None:
    import boto3

    hooked = boto3.client("s3", region_name="us-east-1")
    plain = boto3.client("s3", region_name="us-east-1")
    callcount.install(hooked)
    hooked.list_buckets()
    plain.list_buckets()
    assert callcount.snapshot()["calls"]["S3.ListBuckets"]["calls"] == 1


def test_updates_and_deletes_are_billed_on_the_item_they_change(counted: None) -> None:
    """DynamoDB bills an Update on the larger of the item before and after it and a Delete on
    the item it removes: sized from what this process wrote or read whole before."""
    import boto3

    session = boto3.Session(region_name="us-east-1")
    callcount.install(session)
    ddb = session.client("dynamodb")
    ddb.create_table(
        TableName="l",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for sk in range(4):  # items of ~2.9 KB: 3 WRU each
        item = {"pk": {"S": "t#1"}, "sk": {"N": str(sk)}, "rb": {"B": b"x" * 2900}}
        ddb.put_item(TableName="l", Item=item)
    callcount.reset()

    def wru(api: str) -> float:
        return float(callcount.snapshot()["calls"][api]["wru"])

    def unsized(api: str) -> float:
        return float(callcount.snapshot()["calls"][api]["unsized"])

    key0 = {"pk": {"S": "t#1"}, "sk": {"N": "0"}}
    # an Update that sets one small attribute still rewrites the whole ~2.9 KB item
    ddb.update_item(
        TableName="l",
        Key=key0,
        UpdateExpression="SET dn = :n",
        ExpressionAttributeValues={":n": {"N": "1"}},
    )
    assert wru("DynamoDB.UpdateItem") == 3 and unsized("DynamoDB.UpdateItem") == 0
    ddb.delete_item(TableName="l", Key=key0)
    assert wru("DynamoDB.DeleteItem") == 3
    # a batch delete: each item on its own size; one the process never saw is a lower bound
    ddb.batch_write_item(
        RequestItems={
            "l": [
                {"DeleteRequest": {"Key": {"pk": {"S": "t#1"}, "sk": {"N": "1"}}}},
                {"DeleteRequest": {"Key": {"pk": {"S": "t#1"}, "sk": {"N": "99"}}}},
            ]
        }
    )
    assert wru("DynamoDB.BatchWriteItem") == 3 + 1
    assert unsized("DynamoDB.BatchWriteItem") == 1
    # a transaction doubles the item's size units
    ddb.transact_write_items(
        TransactItems=[
            {"Delete": {"TableName": "l", "Key": {"pk": {"S": "t#1"}, "sk": {"N": "2"}}}}
        ]
    )
    assert wru("DynamoDB.TransactWriteItems") == 2 * 3
    # sizes learnt from a whole-item read (another process wrote the item), not a projected one
    callcount._sizes.clear()
    ddb.query(
        TableName="l",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "t#1"}},
        ProjectionExpression="pk, sk",
    )
    ddb.delete_item(TableName="l", Key={"pk": {"S": "t#1"}, "sk": {"N": "3"}})
    assert unsized("DynamoDB.DeleteItem") == 1  # the projected read taught nothing
    ddb.put_item(
        TableName="l", Item={"pk": {"S": "t#2"}, "sk": {"N": "0"}, "rb": {"B": b"y" * 2900}}
    )
    callcount._sizes.clear()
    ddb.query(
        TableName="l",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "t#2"}},
    )
    ddb.delete_item(TableName="l", Key={"pk": {"S": "t#2"}, "sk": {"N": "0"}})
    assert wru("DynamoDB.DeleteItem") == 3 + 1 + 3 and unsized("DynamoDB.DeleteItem") == 1


# --- bounded memory: a soak makes millions of calls in the process it measures ------------
def test_wall_samples_stay_bounded_and_uniform_over_the_whole_run(
    monkeypatch: pytest.MonkeyPatch, counted: None
) -> None:
    monkeypatch.setattr(callcount, "MAX_WALL_SAMPLES", 1_000)
    # a run whose calls get slower: the first half 1 ms, the second 3 ms
    for i in range(20_000):
        callcount._sample_wall("DynamoDB.GetItem", 1.0 if i < 10_000 else 3.0)
    got = callcount.snapshot()["wall_ms"]["DynamoDB.GetItem"]
    assert len(got) == 1_000
    # keeping only the first calls (the old cap) would hold no 3 ms sample at all
    late = sum(1 for ms in got if ms == 3.0)
    assert 400 <= late <= 600


def test_item_sizes_keep_the_most_recent_within_the_limit(counted: None) -> None:
    sizes = callcount.Sizes(limit=3)

    def key(n: int) -> dict[str, dict[str, str]]:
        return {"pk": {"S": f"t#{n}"}}

    for n in range(5):
        sizes.put("l", key(n), 100 + n)
    assert [sizes.get("l", key(n)) for n in range(5)] == [None, None, 102, 103, 104]
    sizes.put("l", key(2), 202)  # written again: the most recent
    sizes.limit(2)
    assert [sizes.get("l", key(n)) for n in (2, 3, 4)] == [202, None, 104]
