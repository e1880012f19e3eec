"""/v0 request and response bodies (spec topics-api-v0 §0-§10), for /openapi.json.

Documentation only: the handlers parse bodies by hand (v0/parse.py, queue, watch, routers), which
is what produces the spec's exact 400s; these models describe what those parsers accept and
what the handlers answer. Imported by api_docs when the document is first built, never at app
import (cold start). Names are component names: each is unique across the models modules.

Response models allow extra fields (spec §0: clients tolerate additive fields); a field that
may be absent (not null) has `absent()` as its default. Request models forbid unknown fields
only where the parser rejects them (a topic config)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from headwater.http.models_common import absent

U64_MAX = (1 << 64) - 1
TOPIC_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$"
ROUTER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}$"

U64 = Annotated[int, Field(ge=0, le=U64_MAX)]
TopicName = Annotated[str, Field(pattern=TOPIC_NAME, description="A topic name")]


# --- shared ---------------------------------------------------------------------------------
class Performance(BaseModel):
    """Timings of this request (spec §0.9): best-effort, additive; any subset may appear."""

    server_total_ms: float = Field(description="Time spent in the server")
    wal_append_ms: float = absent("Time the append's commit took")
    fsync_ms: float = absent("0.0: a write is durable when DynamoDB acknowledges it")
    records_scanned: int = absent("Records the read examined")


class V0ErrorBody(BaseModel):
    code: str = Field(description="Stable snake_case code clients branch on (spec §0.5)")
    message: str = Field(description="Human-readable; may change between versions")
    detail: dict[str, Any] = absent("Structured context (a field name, a limit, ...)")


class V0Error(BaseModel):
    """Every /v0 error (and the probes'): `{"error": {code, message, detail?}, performance}`."""

    error: V0ErrorBody
    performance: Performance


# --- topics ---------------------------------------------------------------------------------
class TopicConfig(BaseModel):
    """A topic's config (spec §0.10). Every field is optional; unknown fields are refused."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"ttl_ms": 60000, "cap_records": 1000000, "durable": True},
                {"type": "queue", "max_deliveries": 5, "dead_letter": "jobs.dlq"},
            ]
        },
    )

    type: Literal["log", "queue"] = Field("log", description="Immutable once set")
    ttl_ms: U64 = Field(0, description="Records older than this are not delivered; 0 = off")
    cap_records: U64 = Field(0, description="Max retained records; 0 = unbounded")
    cap_bytes: U64 = Field(0, description="Max retained payload bytes; 0 = unbounded")
    discard: Literal["old", "reject"] = Field("old", description="Full-topic policy")
    durable: bool = Field(False, description="Alias: true => durability fsync")
    durability: Literal["ephemeral", "memory", "disk", "fsync"] = Field(
        "disk", description="Commit class (resolved from durable when absent)"
    )
    priority: int | None = Field(None, description="Manual priority, clamped to [-1000, 1000]")
    auto_priority: bool = True
    auto_create: bool = Field(True, description="A write may create the topic")
    idempotency_window_ms: U64 = 120_000
    dedupe_node: bool = True
    lease_ms: U64 = Field(30_000, description="Queue: default lease, clamped [100, 86400000]")
    claim_jitter_ms: U64 = Field(0, description="Queue: coalescing window, clamped to 5000")
    max_deliveries: U64 = Field(0, description="Queue: dead-letter after this many; 0 = off")
    dead_letter: TopicName | None = Field(None, description="Queue: dead-letter topic")
    leases_durable: bool = False


class TopicConfigState(BaseModel):
    """The full resolved config, echoed on every topic answer."""

    type: Literal["log", "queue"]
    ttl_ms: int
    cap_records: int
    cap_bytes: int
    discard: Literal["old", "reject"]
    durable: bool
    durability: Literal["ephemeral", "memory", "disk", "fsync"]
    priority: int | None
    auto_priority: bool
    auto_create: bool
    idempotency_window_ms: int
    dedupe_node: bool
    lease_ms: int
    claim_jitter_ms: int
    max_deliveries: int
    dead_letter: str | None
    leases_durable: bool


class TopicPut(BaseModel):
    """PUT /v0/topics/{topic}: 201 when this call created the topic, else 200."""

    topic: str
    created: bool
    config: TopicConfigState
    performance: Performance


class QueueCounters(BaseModel):
    ready: int = Field(description="Claimable jobs now")
    in_flight: int = Field(description="Jobs under an active lease")
    dead_lettered: int = Field(description="Jobs moved to the dead-letter topic (cumulative)")


class TopicState(BaseModel):
    """GET /v0/topics/{topic} (spec §1.2)."""

    topic: str
    type: Literal["log", "queue"]
    head_seq: int = Field(description="Highest assigned seq; 0 for a fresh topic")
    earliest_seq: int = Field(description="First live seq (head_seq + 1 when empty)")
    next_seq: int = Field(description="head_seq + 1")
    count: int
    bytes: int
    config: TopicConfigState
    effective_priority: int
    last_write_ts: int | None
    last_read_ts: int | None
    sealed_through: int = Field(description="Seqs up to this one live in S3 segments")
    queue: QueueCounters = absent("Queue topics only")
    performance: Performance


class TopicSummary(BaseModel):
    topic: str
    head_seq: int
    earliest_seq: int
    count: int
    bytes: int
    durable: bool
    effective_priority: int


class TopicList(BaseModel):
    """GET /v0/topics: one page, filtered to the key's allowlist."""

    topics: list[TopicSummary]
    next_cursor: str = absent("Opaque; present only when more pages exist")
    performance: Performance


class TopicDeleted(BaseModel):
    topic: str
    deleted: bool = Field(description="False when the topic did not exist")
    routers_removed: list[str] = Field(description="Cascade (only names the key may see)")
    performance: Performance


# --- append ---------------------------------------------------------------------------------
class NewRecord(BaseModel):
    """One record to append. Fields starting with `$` are server-assigned (400)."""

    data: Any = Field(description="Opaque JSON payload (may be null)")
    tag: str | None = Field(None, description="Deletion-match key, at most 256 bytes")
    node: str | None = Field(None, description="Origin node (overrides the batch node)")
    meta: dict[str, Any] | None = Field(None, description="At most 64 keys and 16 KiB")


class AppendRequest(BaseModel):
    """POST /v0/topics/{topic} (spec §2)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "records": [
                        {"data": {"url": "s3://b/a.png", "w": 256}, "tag": "tenant42:job-9001"},
                        {"data": "raw", "meta": {"trace": "abc123"}},
                    ],
                    "node": "worker-eu-1",
                    "idempotency_key": "client-batch-7f3a",
                }
            ]
        }
    )

    records: list[NewRecord] = Field(min_length=1, description="1..10000 records")
    node: str | None = Field(None, description="Batch-level origin node, at most 128 bytes")
    idempotency_key: str | None = Field(
        None, min_length=1, max_length=256, description="Wins over the Idempotency-Key header"
    )
    create: bool | None = Field(None, description="Overrides the topic's auto_create")
    config: TopicConfig | None = Field(None, description="Applied only if this write creates")
    disable_backpressure: bool | None = None


class AppendResult(BaseModel):
    """200, or 201 when the write created the topic."""

    topic: str
    first_seq: int
    last_seq: int
    seqs: list[int] = absent("Omitted with ?return_seqs=false")
    head_seq: int
    count: int
    created: bool
    deduped: bool = Field(description="An idempotency_key matched an earlier write")
    performance: Performance


# --- reads ----------------------------------------------------------------------------------
class DiffRequest(BaseModel):
    """POST /v0/topics/{topic}/diff (spec §3): every field optional (an empty body is {})."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"from_seq": 479100, "limit": 500, "node": "worker-eu-1"}]}
    )

    from_seq: U64 = Field(0, description="Exclusive lower bound")
    limit: U64 = Field(0, description="0 = 256; clamped to 1000")
    node: str | list[str] | None = Field(None, description="Own node ids to filter out")
    include_tags: bool | None = False
    include_meta: bool | None = True
    wait_ms: U64 = Field(0, description="Long-poll; clamped to the server's maximum")


class Record(BaseModel):
    """A stored record as read: `$`-metadata, data, meta (absent fields are left out)."""

    seq: int = Field(alias="$seq", description="Server-assigned sequence number")
    ts: int = Field(alias="$ts", description="Commit time (epoch ms)")
    node: str = absent("Origin node, when the writer gave one", alias="$node")
    tag: str = absent("The record's tag (when asked for, and set)", alias="$tag")
    data: Any = Field(description="The payload as appended")
    meta: dict[str, Any] = absent("Present when the record has meta and include_meta")


class Tombstone(BaseModel):
    """Explicit loss below the cursor (cap/TTL eviction, recreation): an in-band signal."""

    gap_from: int
    gap_to: int
    reason: str = Field(description="cap, ttl, mixed, recreated or source_trim")
    missed_estimate: int
    earliest_seq: int
    head_seq: int


class DiffResult(BaseModel):
    topic: str
    records: list[Record]
    next_from_seq: int
    head_seq: int
    earliest_seq: int
    caught_up: bool
    tombstone: Tombstone | None
    lag: int
    performance: Performance


TagMatch = (
    str | tuple[Literal["tag"], Literal["Eq", "Glob"], str]
)  # a bare tag is shorthand for ["tag", "Eq", tag]


class DeleteRecordsRequest(BaseModel):
    """POST /v0/topics/{topic}/delete (spec §5): before_seq and/or match (at least one)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"before_seq": 480001}, {"match": ["tag", "Glob", "chat-42:*"]}]
        }
    )

    before_seq: U64 | None = Field(None, description="Delete every record with $seq < this")
    match: TagMatch | None = Field(
        None, description='A tag, ["tag", "Eq", tag] or ["tag", "Glob", "prefix*"]'
    )


class DeleteRecordsResult(BaseModel):
    topic: str
    deleted: int
    earliest_seq: int
    head_seq: int
    count: int
    bytes: int
    performance: Performance


class Rollups(BaseModel):
    """GET /v0/topics/{topic}/rollups: windows computed by the rollup job from sealed data."""

    topic: str
    granularity: Literal["minute", "hour"]
    epoch: int
    through_seq: int = Field(description="How far the rollups reach (0: none yet)")
    generated_at: int | None = Field(description="When the job last ran (epoch ms)")
    rollups: list[dict[str, Any]]
    performance: Performance


# --- queues ---------------------------------------------------------------------------------
Node = Annotated[str, Field(min_length=1, description="Worker identity, at most 128 bytes")]
Seqs = Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1, max_length=1000)]


class ClaimRequest(BaseModel):
    """POST /v0/topics/{q}/claim (spec §10.2)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"node": "worker-eu-1", "max": 16, "lease_ms": 30000}]}
    )

    node: Node
    max: U64 = Field(1, description="Jobs to lease, clamped to 1000")
    lease_ms: U64 | None = Field(None, description="Lease length (default: the topic's)")


class ClaimedJob(BaseModel):
    seq: int = Field(alias="$seq", description="Server-assigned sequence number")
    ts: int = Field(alias="$ts", description="Commit time (epoch ms)")
    node: str = absent("Origin node, when the writer gave one", alias="$node")
    tag: str = absent("The record's tag (when asked for, and set)", alias="$tag")
    data: Any = Field(description="The payload as appended")
    meta: dict[str, Any] = absent("Present when the job has meta")
    lease_id: str
    deadline: int = Field(description="Epoch ms the lease expires at")
    deliveries: int


class ClaimResult(BaseModel):
    topic: str
    claimed: list[ClaimedJob]
    count: int
    ready: int
    performance: Performance


class LeaseRequest(BaseModel):
    node: Node
    seqs: Seqs
    lease_ids: list[str] | None = Field(
        None, description="lease_<hex> tokens from the claim, one per seq (a fence)"
    )


class AckRequest(LeaseRequest):
    """POST /v0/topics/{q}/ack (spec §10.4)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"node": "worker-eu-1", "seqs": [480101, 480104]}]}
    )


class NackRequest(LeaseRequest):
    """POST /v0/topics/{q}/nack (spec §10.5)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"node": "worker-eu-1", "seqs": [480104], "delay_ms": 5000}]
        }
    )

    delay_ms: U64 = Field(0, description="Hold the job invisible this long")


class ExtendRequest(LeaseRequest):
    """POST /v0/topics/{q}/extend (spec §10.6)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"node": "worker-eu-1", "seqs": [480101], "lease_ms": 30000}]
        }
    )

    lease_ms: U64 = Field(description="New lease from now, clamped [100, 86400000]")


class AckResult(BaseModel):
    topic: str
    acked: int
    skipped: list[int]
    ready: int
    in_flight: int
    performance: Performance


class NackResult(BaseModel):
    topic: str
    nacked: int
    skipped: list[int]
    ready: int
    in_flight: int
    performance: Performance


class ExtendResult(BaseModel):
    topic: str
    extended: int
    skipped: list[int]
    deadlines: dict[str, int] = Field(description="seq -> new deadline (epoch ms)")
    performance: Performance


# --- watch ----------------------------------------------------------------------------------
class WatchTopic(BaseModel):
    from_seq: U64 = 0
    tail: bool | None = False


class WatchRequest(BaseModel):
    """POST /v0/watch (spec §7.1)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"topics": {"jobs": {"from_seq": 4096}, "events": {"tail": True}}, "node": "n1"}
            ]
        }
    )

    topics: dict[str, WatchTopic | None] = Field(
        min_length=1, description="topic -> {from_seq, tail}"
    )
    node: str | None = Field(None, description="Own node id (filtered out), at most 128 bytes")
    limit: U64 = 256
    max_batch_bytes: U64 = Field(262_144, description="0 = 1 MiB; clamped to 8 MiB")
    heartbeat_ms: U64 = Field(15_000, description="Clamped to [1000, 60000]")
    consistency: Literal["eventual", "strong"] = "eventual"
    include_meta: bool | None = True
    include_tags: bool | None = False
    include_data: bool | None = True


class WatchTopicState(BaseModel):
    from_seq: int
    head_seq: int
    earliest_seq: int


class WatchCreated(BaseModel):
    wid: str
    stream_url: str
    session_ttl_ms: int
    topics: dict[str, WatchTopicState]
    performance: Performance


# --- routers --------------------------------------------------------------------------------
class RouterRequest(BaseModel):
    """PUT /v0/routers/{router} (spec §6)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"source": "orders", "dest": "audit", "filter": ["tag", "Glob", "public:*"]}
            ]
        }
    )

    source: TopicName
    dest: TopicName
    preserve_node: bool | None = True
    preserve_tag: bool | None = True
    create_dest: bool | None = True
    filter: TagMatch | None = None
    allow_cycle: bool | None = False
    guarantee: Literal["at_least_once", "exactly_once"] = "at_least_once"


class RouterPut(BaseModel):
    router: str
    created: bool
    source: str
    dest: str
    preserve_node: bool
    preserve_tag: bool
    filter: list[str] | None
    allow_cycle: bool
    guarantee: str
    performance: Performance


class RouterState(BaseModel):
    router: str
    source: str
    dest: str
    preserve_node: bool
    preserve_tag: bool
    filter: list[str] | None
    allow_cycle: bool
    guarantee: str
    forwarded_total: int
    performance: Performance


class RouterSummary(BaseModel):
    router: str
    source: str
    dest: str
    guarantee: str
    forwarded_total: int


class RouterList(BaseModel):
    routers: list[RouterSummary]
    next_cursor: str = absent("Present only when more pages exist")
    performance: Performance


class RouterDeleted(BaseModel):
    router: str
    deleted: bool
    performance: Performance


MODELS: tuple[type[BaseModel], ...] = (
    V0Error,
    TopicConfig,
    TopicPut,
    TopicState,
    TopicList,
    TopicDeleted,
    AppendRequest,
    AppendResult,
    DiffRequest,
    DiffResult,
    DeleteRecordsRequest,
    DeleteRecordsResult,
    Rollups,
    ClaimRequest,
    ClaimResult,
    AckRequest,
    NackRequest,
    ExtendRequest,
    AckResult,
    NackResult,
    ExtendResult,
    WatchRequest,
    WatchCreated,
    RouterRequest,
    RouterPut,
    RouterState,
    RouterList,
    RouterDeleted,
)
