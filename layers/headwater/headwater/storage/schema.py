"""The one definition of every AWS storage resource: table keys, indexes, TTL attributes,
streams, and the bucket. template.yaml, the local bootstrap and the tests all derive from
this module (tests/infra/test_schema_agrees.py proves template.yaml matches it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

KeyType = Literal["S", "N", "B"]


@dataclass(frozen=True, slots=True)
class Key:
    """A DynamoDB key attribute: its name and type."""

    name: str
    type: KeyType


@dataclass(frozen=True, slots=True)
class Index:
    """A global secondary index: its keys and projection."""

    name: str
    hash_key: Key
    range_key: Key | None = None
    projection: Literal["ALL", "KEYS_ONLY"] = "ALL"


@dataclass(frozen=True, slots=True)
class Table:
    """One DynamoDB table of the deployment: keys, TTL, stream and indexes (the
    bootstrap creates it, template.yaml declares the same; a test keeps them equal)."""

    logical: str  # suffix of the physical name and of the CloudFormation logical id
    hash_key: Key
    range_key: Key | None = None
    ttl_attribute: str | None = None
    stream: Literal["NEW_IMAGE", "NEW_AND_OLD_IMAGES", "KEYS_ONLY"] | None = None
    indexes: tuple[Index, ...] = ()
    purpose: str = ""

    @property
    def cfn_logical_id(self) -> str:
        return f"{self.logical.capitalize()}Table"

    def attribute_definitions(self) -> list[dict[str, str]]:
        keys: dict[str, str] = {}
        for k in (self.hash_key, self.range_key):
            if k is not None:
                keys[k.name] = k.type
        for ix in self.indexes:
            for k in (ix.hash_key, ix.range_key):
                if k is not None:
                    keys[k.name] = k.type
        return [{"AttributeName": n, "AttributeType": t} for n, t in sorted(keys.items())]

    def key_schema(self) -> list[dict[str, str]]:
        out = [{"AttributeName": self.hash_key.name, "KeyType": "HASH"}]
        if self.range_key is not None:
            out.append({"AttributeName": self.range_key.name, "KeyType": "RANGE"})
        return out

    def create_table_kwargs(self, physical_name: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "TableName": physical_name,
            "AttributeDefinitions": self.attribute_definitions(),
            "KeySchema": self.key_schema(),
            "BillingMode": "PAY_PER_REQUEST",
        }
        if self.indexes:
            kwargs["GlobalSecondaryIndexes"] = [
                {
                    "IndexName": ix.name,
                    "KeySchema": [{"AttributeName": ix.hash_key.name, "KeyType": "HASH"}]
                    + (
                        [{"AttributeName": ix.range_key.name, "KeyType": "RANGE"}]
                        if ix.range_key
                        else []
                    ),
                    "Projection": {"ProjectionType": ix.projection},
                }
                for ix in self.indexes
            ]
        if self.stream:
            kwargs["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": self.stream}
        return kwargs


PK_S = Key("pk", "S")
SK_N = Key("sk", "N")
SK_S = Key("sk", "S")

# Topic heads: one item per topic name (live, or a deleted marker that keeps the epoch so a
# recreate gets a new one). The sparse GSI `by_name` holds only live topics, for listing.
HEADS = Table(
    logical="heads",
    hash_key=PK_S,
    # KEYS_ONLY: the index entry never changes on append, so appends pay no GSI write.
    indexes=(Index("by_name", Key("gk", "S"), Key("pk", "S"), projection="KEYS_ONLY"),),
    stream="NEW_AND_OLD_IMAGES",
    purpose="stream heads: seqs, counters, config, epoch",
)

# The hot tail: one item per committed frame, pk = "<topic>#<epoch>", sk = the frame's first
# seq (`ls` holds its last).
LOG = Table(
    logical="log",
    hash_key=PK_S,
    range_key=SK_N,
    ttl_attribute="ttl",  # frames of the lossy durability classes (ephemeral, memory)
    stream="NEW_IMAGE",
    purpose="log tail frames (records packed per commit, S3 pointer when spilled)",
)

# Secondary lookups: per-topic tag index and idempotency keys (with TTL).
INDEX = Table(
    logical="index",
    hash_key=PK_S,
    range_key=SK_S,
    ttl_attribute="ttl",
    purpose="tag index, idempotency keys and sealed segments",
)

LEASES = Table(
    logical="leases",
    hash_key=PK_S,
    range_key=SK_N,
    ttl_attribute="ttl",
    purpose="queue leases (issue: work queues)",
)

SESSIONS = Table(
    logical="sessions",
    hash_key=PK_S,
    range_key=SK_S,
    ttl_attribute="ttl",
    purpose="watch sessions and WebSocket connections (issue: live delivery)",
)

# Dashboard configurations (/api/v2): pk = "u#<user id>", sk = "c#<config id>", plus one
# counter item per user (sk = "#count") that caps how many a user may hold.
DASHBOARD = Table(
    logical="dashboard",
    hash_key=PK_S,
    range_key=SK_S,
    purpose="dashboard configurations per user (issue: dashboard feed)",
)

TABLES: tuple[Table, ...] = (HEADS, LOG, INDEX, LEASES, SESSIONS, DASHBOARD)

BUCKET_LOGICAL_ID = "DataBucket"
# S3 key prefixes inside the one bucket.
