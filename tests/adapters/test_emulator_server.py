"""The embedded emulator as served (headwater.dev.moto_serialized in a subprocess, as
`make run`, the e2e tests and the benchmarks start it): connections stay open between
requests, S3 keys and large objects round-trip, and concurrent transactions are isolated."""

from __future__ import annotations

import http.client
import json
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from headwater.dev.emulator import FAKE_CREDENTIALS, MotoServer

pytestmark = pytest.mark.adapters


@pytest.fixture
def clients(moto_server: MotoServer, boto_session: boto3.Session) -> Iterator[dict[str, object]]:
    config = Config(max_pool_connections=16, retries={"max_attempts": 1})
    yield {
        name: boto_session.client(name, endpoint_url=moto_server.url, config=config)
        for name in ("dynamodb", "s3")
    }


def test_connections_are_kept_alive(moto_server: MotoServer) -> None:
    """Werkzeug's development server closed every connection after one response; AWS
    endpoints do not, and neither does the emulator now."""
    netloc = urlsplit(moto_server.url).netloc
    conn = http.client.HTTPConnection(netloc, timeout=10)
    try:
        sockets = []
        for _ in range(3):
            conn.request(
                "POST",
                "/",
                body=b"{}",
                headers={
                    "Content-Type": "application/x-amz-json-1.0",
                    "X-Amz-Target": "DynamoDB_20120810.ListTables",
                    "Authorization": (
                        f"AWS4-HMAC-SHA256 Credential={FAKE_CREDENTIALS['AWS_ACCESS_KEY_ID']}"
                        "/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, "
                        "Signature=0"
                    ),
                },
            )
            resp = conn.getresponse()
            assert resp.status == 200
            assert "TableNames" in json.loads(resp.read())
            assert (resp.getheader("connection") or "").lower() != "close"
            sockets.append(conn.sock)
        assert sockets[0] is not None
        assert sockets[0] is sockets[1] is sockets[2]  # one TCP connection for all three
    finally:
        conn.close()


def test_s3_odd_keys_and_large_objects_round_trip(clients: dict[str, object]) -> None:
    s3 = clients["s3"]
    bucket = f"hw-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    odd = "a b/ü+%2F?x=1&#;=@"
    big = bytes(range(256)) * (24 * 1024)  # 6 MiB: past moto's default 5 MiB spool
    s3.put_object(Bucket=bucket, Key=odd, Body=b"odd")  # type: ignore[attr-defined]
    s3.put_object(Bucket=bucket, Key="big", Body=big)  # type: ignore[attr-defined]
    got = s3.get_object(Bucket=bucket, Key=odd)  # type: ignore[attr-defined]
    assert got["Body"].read() == b"odd"
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == big  # type: ignore[attr-defined]
    ranged = s3.get_object(Bucket=bucket, Key="big", Range="bytes=1000-1009")  # type: ignore[attr-defined]
    assert ranged["Body"].read() == big[1000:1010]
    assert s3.head_object(Bucket=bucket, Key="big")["ContentLength"] == len(big)  # type: ignore[attr-defined]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]  # type: ignore[attr-defined]
    assert sorted(keys) == sorted([odd, "big"])
    with pytest.raises(ClientError) as missing:
        s3.head_object(Bucket=bucket, Key="nope")  # type: ignore[attr-defined]
    assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_concurrent_transactions_are_isolated(clients: dict[str, object]) -> None:
    """8 threads race a compare-and-set counter through TransactWriteItems (the shape of a
    log append: conditional head update + conditional put of the new entry). Every success
    must be a distinct, gap-free counter value: no lost update, no entry written twice."""
    ddb = clients["dynamodb"]
    table = f"hw-{uuid.uuid4().hex[:10]}"
    ddb.create_table(  # type: ignore[attr-defined]
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName=table, Item={"pk": {"S": "head"}, "n": {"N": "0"}})  # type: ignore[attr-defined]
    won: list[int] = []
    lock = threading.Lock()

    def writer(name: str) -> None:
        for _ in range(15):
            while True:
                head = ddb.get_item(  # type: ignore[attr-defined]
                    TableName=table, Key={"pk": {"S": "head"}}, ConsistentRead=True
                )
                n = int(head["Item"]["n"]["N"])
                try:
                    ddb.transact_write_items(  # type: ignore[attr-defined]
                        TransactItems=[
                            {
                                "Update": {
                                    "TableName": table,
                                    "Key": {"pk": {"S": "head"}},
                                    "UpdateExpression": "SET n = :next",
                                    "ConditionExpression": "n = :seen",
                                    "ExpressionAttributeValues": {
                                        ":next": {"N": str(n + 1)},
                                        ":seen": {"N": str(n)},
                                    },
                                }
                            },
                            {
                                "Put": {
                                    "TableName": table,
                                    "Item": {"pk": {"S": f"e{n + 1}"}, "by": {"S": name}},
                                    "ConditionExpression": "attribute_not_exists(pk)",
                                }
                            },
                        ]
                    )
                except ClientError as exc:
                    assert exc.response["Error"]["Code"] == "TransactionCanceledException"
                    continue
                with lock:
                    won.append(n + 1)
                break

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(won) == list(range(1, 8 * 15 + 1))
    head = ddb.get_item(TableName=table, Key={"pk": {"S": "head"}}, ConsistentRead=True)  # type: ignore[attr-defined]
    assert head["Item"]["n"]["N"] == str(8 * 15)
    items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]  # type: ignore[attr-defined]
    assert len(items) == 8 * 15 + 1  # the head and one entry per success, none twice
