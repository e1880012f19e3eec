"""Typed settings, read and validated once at start. Every env var name lives here."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from headwater.errors import ConfigurationError
from headwater.names import is_valid_topic_name

# --- env var names (the only place they are spelled) ---
ENV_HOST = "TOPICS_HOST"
ENV_PORT = "TOPICS_PORT"
ENV_API_KEYS = "TOPICS_API_KEYS"
ENV_API_KEYS_PARAMETER = "HEADWATER_API_KEYS_PARAMETER"  # SSM/Secrets Manager name on Lambda
ENV_ALLOW_INSECURE = "TOPICS_ALLOW_INSECURE_NO_AUTH"
ENV_PROBE_AUTH = "TOPICS_PROBE_AUTH"
ENV_MAX_BATCH_RECORDS = "TOPICS_MAX_BATCH_RECORDS"
ENV_MAX_RECORD_BYTES = "TOPICS_MAX_RECORD_BYTES"
ENV_MAX_BODY_BYTES = "TOPICS_MAX_BODY_BYTES"
ENV_MAX_META_BYTES = "TOPICS_MAX_META_BYTES"
ENV_MAX_TAG_BYTES = "TOPICS_MAX_TAG_BYTES"
ENV_MAX_NODE_BYTES = "TOPICS_MAX_NODE_BYTES"
ENV_MAX_LIMIT = "TOPICS_MAX_LIMIT"
ENV_MAX_CLAIM = "TOPICS_MAX_CLAIM"
ENV_RESOURCE_PREFIX = "HEADWATER_RESOURCE_PREFIX"
ENV_BUCKET = "HEADWATER_BUCKET"
ENV_REGION = "AWS_REGION"
ENV_POLL_MS = "HEADWATER_POLL_INTERVAL_MS"
ENV_GROUP_MAX_RECORDS = "HEADWATER_GROUP_COMMIT_MAX_RECORDS"
# The sequencer (docs/storage.md): how many partition keys a new topic incarnation spreads
# its frames over, and how long a reader waits for a reserved slot before filling it.
ENV_LOG_PARTITIONS = "HEADWATER_LOG_PARTITIONS"
ENV_HOLE_TIMEOUT_MS = "HEADWATER_HOLE_TIMEOUT_MS"
ENV_FRAME_CACHE_BYTES = "HEADWATER_FRAME_CACHE_BYTES"
ENV_HEAD_CACHE_BYTES = "HEADWATER_HEAD_CACHE_BYTES"
ENV_MALLOC_ARENA_MAX = "HEADWATER_MALLOC_ARENA_MAX"  # a serving process's glibc arenas (0: default)
ENV_MALLOC_TRIM_MS = "HEADWATER_MALLOC_TRIM_MS"  # malloc_trim every this often (0: never)
ENV_MALLOC_MMAP_THRESHOLD = "HEADWATER_MALLOC_MMAP_THRESHOLD"  # fixed mmap threshold (0: glibc's)
ENV_SPILL_BYTES = "HEADWATER_SPILL_THRESHOLD_BYTES"
ENV_GROUP_SPILL_BYTES = "HEADWATER_GROUP_SPILL_THRESHOLD_BYTES"
ENV_MAX_WATCH_TOPICS = "TOPICS_MAX_WATCH_TOPICS"
ENV_WATCH_SESSION_TTL_MS = "HEADWATER_WATCH_SESSION_TTL_MS"
ENV_WATCH_MAX_STREAM_SEC = "HEADWATER_WATCH_MAX_STREAM_SEC"
ENV_MAX_TOPICS = "TOPICS_MAX_TOPICS"
ENV_MAX_ROUTERS = "TOPICS_MAX_ROUTERS"
ENV_MAX_WATCH_SESSIONS = "TOPICS_MAX_WATCH_SESSIONS"
ENV_MAX_SSE_CONNECTIONS = "TOPICS_MAX_SSE_CONNECTIONS"
ENV_MAX_SSE_CONNECTIONS_PER_KEY = "TOPICS_MAX_SSE_CONNECTIONS_PER_KEY"
ENV_MAX_INFLIGHT_PER_KEY = "TOPICS_MAX_INFLIGHT_PER_KEY"
ENV_MAX_TOTAL_BYTES = "TOPICS_MAX_TOTAL_BYTES"
ENV_BUFFER_GRACE_MS = "HEADWATER_SSE_BUFFER_GRACE_MS"
ENV_SLOW_CONSUMER_TIMEOUT_MS = "HEADWATER_SLOW_CONSUMER_TIMEOUT_MS"
ENV_STREAM_BUFFER_BYTES = "HEADWATER_STREAM_BUFFER_BYTES"
ENV_SOCKET_BUFFER_BYTES = "HEADWATER_SOCKET_BUFFER_BYTES"
ENV_HEADER_TIMEOUT_MS = "HEADWATER_HEADER_TIMEOUT_MS"
ENV_SEAL_RECORDS = "HEADWATER_SEAL_RECORDS"
ENV_SEAL_BYTES = "HEADWATER_SEAL_BYTES"
ENV_SEAL_AGE_MS = "HEADWATER_SEAL_AGE_MS"
ENV_SEAL_GRACE_MS = "HEADWATER_SEAL_GRACE_MS"
ENV_SEAL_CONCURRENCY = "HEADWATER_SEAL_CONCURRENCY"
ENV_TAIL_TTL_MS = "HEADWATER_TAIL_TTL_MS"
ENV_SEGMENT_BLOCK_BYTES = "HEADWATER_SEGMENT_BLOCK_BYTES"
ENV_TIERING_INTERVAL_MS = "HEADWATER_TIERING_INTERVAL_MS"
ENV_TIERING_INLINE = "HEADWATER_TIERING_INLINE"
ENV_FULL_SWEEP_MS = "HEADWATER_FULL_SWEEP_MS"
ENV_EPHEMERAL_RETENTION_MS = "HEADWATER_EPHEMERAL_RETENTION_MS"
ENV_MEMORY_RETENTION_MS = "HEADWATER_MEMORY_RETENTION_MS"
ENV_AWS_READ_TIMEOUT_MS = "HEADWATER_AWS_READ_TIMEOUT_MS"  # botocore read timeout per attempt
ENV_AWS_MAX_ATTEMPTS = "HEADWATER_AWS_MAX_ATTEMPTS"  # botocore attempts per call (1 + retries)
ENV_EMULATOR_PORT = "HEADWATER_EMULATOR_PORT"  # `make run`: fixed port for the embedded moto
# /api/v1 notifications (aviso-compatible): the schema, and aviso's `watch_endpoint` settings
ENV_NOTIFICATION_SCHEMA = "HEADWATER_NOTIFICATION_SCHEMA"  # a file path or s3://bucket/key
ENV_NOTIFY_BASE_URL = "HEADWATER_NOTIFY_BASE_URL"  # aviso's application.base_url (CloudEvents)
ENV_SSE_HEARTBEAT_INTERVAL_SEC = "HEADWATER_SSE_HEARTBEAT_INTERVAL_SEC"
ENV_CONNECTION_MAX_DURATION_SEC = "HEADWATER_CONNECTION_MAX_DURATION_SEC"
ENV_REPLAY_BATCH_SIZE = "HEADWATER_REPLAY_BATCH_SIZE"
ENV_MAX_HISTORICAL_NOTIFICATIONS = "HEADWATER_MAX_HISTORICAL_NOTIFICATIONS"
ENV_REPLAY_BATCH_DELAY_MS = "HEADWATER_REPLAY_BATCH_DELAY_MS"
# /api/v1 feature-flag manifests (docs/flags.md)
ENV_FLAG_TOKENS = "HEADWATER_FLAG_TOKENS"  # inline JSON, or a YAML/JSON file path
ENV_FLAG_TOKENS_PARAMETER = "HEADWATER_FLAG_TOKENS_PARAMETER"  # SSM/Secrets name on Lambda
ENV_SIGNING_KEY = "HEADWATER_SIGNING_KEY"  # HMAC key of snapshot tokens (>= 32 bytes)
ENV_SIGNING_KEY_PARAMETER = "HEADWATER_SIGNING_KEY_PARAMETER"  # SSM/Secrets name on Lambda
ENV_FLAGS_BASE_URL = "HEADWATER_FLAGS_BASE_URL"  # scheme://host of snapshot URLs ("" = request's)
ENV_FLAGS_KEEPALIVE_SEC = "HEADWATER_FLAGS_KEEPALIVE_SEC"
ENV_FLAGS_MAX_CONNECTION_SEC = "HEADWATER_FLAGS_MAX_CONNECTION_SEC"
ENV_FLAGS_MAX_CONNECTIONS_PER_TOKEN = "HEADWATER_FLAGS_MAX_CONNECTIONS_PER_TOKEN"
ENV_FLAGS_RETAIN_VERSIONS = "HEADWATER_FLAGS_RETAIN_VERSIONS"
ENV_FLAGS_RETAIN_SEC = "HEADWATER_FLAGS_RETAIN_SEC"
ENV_FLAGS_INLINE_MAX_BYTES = "HEADWATER_FLAGS_INLINE_MAX_BYTES"
ENV_FLAGS_CHURN_MAX_ENTRIES = "HEADWATER_FLAGS_CHURN_MAX_ENTRIES"
# /api/v2 dashboard feed (docs/dashboard.md).
ENV_DASHBOARD_TOPIC = "HEADWATER_DASHBOARD_TOPIC"
ENV_DASHBOARD_MAX_CONNECTIONS = "HEADWATER_DASHBOARD_MAX_CONNECTIONS"
ENV_DASHBOARD_HEARTBEAT_MS = "HEADWATER_DASHBOARD_HEARTBEAT_MS"
ENV_DASHBOARD_METRICS_INTERVAL_MS = "HEADWATER_DASHBOARD_METRICS_INTERVAL_MS"
ENV_DASHBOARD_METRICS_MIN_INTERVAL_MS = "HEADWATER_DASHBOARD_METRICS_MIN_INTERVAL_MS"
ENV_DASHBOARD_POLL_MS = "HEADWATER_DASHBOARD_POLL_MS"
ENV_DASHBOARD_CONFIG_POLL_MS = "HEADWATER_DASHBOARD_CONFIG_POLL_MS"
ENV_DASHBOARD_BUFFER_EVENTS = "HEADWATER_DASHBOARD_BUFFER_EVENTS"
ENV_DASHBOARD_MAX_CONNECTION_SEC = "HEADWATER_DASHBOARD_MAX_CONNECTION_SEC"
ENV_DASHBOARD_MAX_CONFIGS_PER_USER = "HEADWATER_DASHBOARD_MAX_CONFIGS_PER_USER"
ENV_DASHBOARD_ROLLUP_PREFIX = "HEADWATER_DASHBOARD_ROLLUP_PREFIX"
# On Lambda: the function's timeout (template.yaml passes StreamTimeoutSeconds), which bounds
# how long one watch may stay open. AWS_LAMBDA_FUNCTION_NAME is set by the Lambda runtime.
ENV_LAMBDA_TIMEOUT_SEC = "HEADWATER_LAMBDA_TIMEOUT_SEC"
ENV_LAMBDA_FUNCTION_NAME = "AWS_LAMBDA_FUNCTION_NAME"

TRUE_WORDS = {"1", "true", "yes", "on"}

# The largest frame kept inline in a DynamoDB item (items are capped at 400 KB; the adapter
# contract tests prove this size commits on DynamoDB Local). Larger frames go to S3.
MAX_INLINE_FRAME_BYTES = 300_000
# Lambda's hard ceiling on one invocation (so on one streamed response).
LAMBDA_MAX_TIMEOUT_SEC = 900

# Default spill point: above ~64 KB a transactional DynamoDB write (2 WRU per KB) costs far
# more than one S3 PUT, and batches that large are throughput-, not latency-sensitive.
DEFAULT_SPILL_BYTES = 64 * 1024


def _int(env: Mapping[str, str], name: str, default: int, lo: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from exc
    if value < lo:
        raise ConfigurationError(f"{name} must be >= {lo}, got {value}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in TRUE_WORDS


def _spill(env: Mapping[str, str], name: str, default: int) -> int:
    """A spill threshold in bytes: 1024 up to what fits in an item, or 0 (off) when that is
    its default."""
    value = _int(env, name, default, 0)
    if value > MAX_INLINE_FRAME_BYTES:
        raise ConfigurationError(
            f"{name} must be <= {MAX_INLINE_FRAME_BYTES} (DynamoDB's item limit)"
        )
    off_allowed = default == 0
    if value < 1024 and not (value == 0 and off_allowed):
        raise ConfigurationError(
            f"{name} must be >= 1024" + (" (or 0: off)" if off_allowed else "")
        )
    return value


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-request input limits: records per batch, bytes per record, body,
    meta, tag, node and idempotency key sizes."""

    max_batch_records: int = 10_000
    max_record_bytes: int = 1 << 20
    max_body_bytes: int = 64 << 20
    max_meta_bytes: int = 16 << 10
    max_meta_keys: int = 64
    max_tag_bytes: int = 256
    max_node_bytes: int = 128
    max_idempotency_key_chars: int = 256
    max_limit: int = 1000
    max_claim: int = 1000  # queue claim max and ack/nack/extend seqs length (spec §10, §11)
    default_limit: int = 256
    max_wait_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class Caps:
    """Resource caps (spec §11). 0 disables a cap. Topics, routers, watch sessions and total
    bytes are deployment-wide (counters in DynamoDB); connection and in-flight caps are per
    serving process (one Lambda execution environment, or one uvicorn process)."""

    max_topics: int = 100_000
    max_routers: int = 10_000
    max_watch_sessions: int = 10_000
    max_sse_connections: int = 10_000
    max_sse_connections_per_key: int = 1_000
    max_inflight_per_key: int = 1_000
    max_total_bytes: int = 0
    buffer_grace_ms: int = 5_000
    # Stalled clients (docs/v0-topics.md, "Stalled clients"). A stream connection (SSE or
    # WebSocket) holds at most stream_buffer_bytes of frames (the one being produced too)
    # waiting for its socket; every connection of the uvicorn server holds at most
    # socket_buffer_bytes unsent in the transport and as many unsent in the kernel
    # (TCP_NOTSENT_LOWAT). A write the client does not take within slow_consumer_timeout_ms
    # closes the stream; a request head not complete within header_timeout_ms of the
    # connection opening (or of its first byte, on a kept-alive connection) closes it.
    slow_consumer_timeout_ms: int = 30_000
    stream_buffer_bytes: int = 64 << 10
    socket_buffer_bytes: int = 64 << 10
    header_timeout_ms: int = 10_000


@dataclass(frozen=True, slots=True)
class Tiering:
    """When the tail is sealed into S3 segments, and what the lossy durability classes keep
    (docs/storage.md, "Tiering")."""

    seal_records: int = 4096  # seal once this many records are unsealed...
    seal_bytes: int = 4 << 20  # ...or this many bytes...
    seal_age_ms: int = 600_000  # ...or the oldest unsealed record is this old
    grace_ms: int = 60_000  # sealed frames stay in DynamoDB this long for in-flight readers
    block_bytes: int = 64 << 10  # segment block size (before compression)
    # Segments one process builds at once (the others wait): each is a few MB of records
    # and buffers on a pool thread, and all of a process's busy topics reach their threshold
    # together under steady load (issue 42's soak: four at once, +100 MB RSS for seconds).
    seal_concurrency: int = 2
    interval_ms: int = 10_000  # the in-process sweep (0: off; on AWS a schedule runs it)
    # ...which reads every live topic only this often; between, the topics this process
    # changed and those whose time rule came due (engine/sweeps.py)
    full_sweep_ms: int = 300_000
    inline: bool = True  # an append past a threshold or a cap starts upkeep in-process
    ephemeral_retention_ms: int = 300_000
    memory_retention_ms: int = 86_400_000
    # Frames of single-write appends carry a DynamoDB TTL this far past their append: it
    # deletes them for free once sealed (trimming only moves trimmed_through). Sealing must
    # happen well within it; the sealer's failure alarm fires long before.
    tail_ttl_ms: int = 7 * 86_400_000


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """aviso's `watch_endpoint` settings for /api/v1/watch and /api/v1/replay (same names,
    same defaults)."""

    sse_heartbeat_interval_sec: float = 30
    connection_max_duration_sec: float = 3600
    replay_batch_size: int = 100
    max_historical_notifications: int = 10_000
    replay_batch_delay_ms: int = 100


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """/api/v1 notifications: where the schema comes from ("" = none configured: every
    event type is unknown), the CloudEvents base URL, and the watch/replay settings."""

    schema: str = ""
    base_url: str = "http://localhost"
    stream: StreamSettings = field(default_factory=StreamSettings)


def lambda_stream_limit_sec(timeout_sec: int) -> int:
    """The longest a watch may stay open inside a Lambda invocation of `timeout_sec`: the
    timeout less a margin (10%, 5..60 s) in which the stream still sends its closing frame.
    900 s (the most Lambda allows) gives 840 s."""
    timeout = min(timeout_sec, LAMBDA_MAX_TIMEOUT_SEC)
    return max(1, timeout - min(60, max(5, timeout // 10)))


ENV_CORS_ORIGINS = "HEADWATER_CORS_ORIGINS"
_ORIGIN = re.compile(r"^(\*|https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?)$")


def _cors_origins(env: Mapping[str, str]) -> tuple[str, ...]:
    """HEADWATER_CORS_ORIGINS: comma-separated origins (`*`, or scheme://host[:port], which
    is what a browser sends: no path); unset or empty admits any origin."""
    raw = [o.strip() for o in env.get(ENV_CORS_ORIGINS, "").split(",") if o.strip()]
    for origin in raw:
        if not _ORIGIN.match(origin):
            raise ConfigurationError(
                f"{ENV_CORS_ORIGINS}: {origin!r} is not an origin (`*` or scheme://host[:port])"
            )
    return tuple(dict.fromkeys(raw)) or ("*",)


def _watch_max_stream(env: Mapping[str, str]) -> int:
    limit = _int(env, ENV_WATCH_MAX_STREAM_SEC, 0, 0)
    if env.get(ENV_LAMBDA_FUNCTION_NAME):
        # The invocation ends at its timeout: the stream ends first (its cursors saved), and
        # the client's EventSource resumes it on the next one.
        timeout = _int(env, ENV_LAMBDA_TIMEOUT_SEC, LAMBDA_MAX_TIMEOUT_SEC, 1)
        cap = lambda_stream_limit_sec(timeout)
        limit = min(limit, cap) if limit else cap
    return limit


def _notify(env: Mapping[str, str]) -> NotifySettings:
    max_duration = _int(env, ENV_CONNECTION_MAX_DURATION_SEC, 3600, 1)
    if env.get(ENV_LAMBDA_FUNCTION_NAME):
        # A Lambda invocation ends at its timeout (at most 15 minutes): a watch must close
        # with `max_duration_reached` before that, or the client sees a cut connection.
        timeout = _int(env, ENV_LAMBDA_TIMEOUT_SEC, LAMBDA_MAX_TIMEOUT_SEC, 1)
        max_duration = min(max_duration, lambda_stream_limit_sec(timeout))
    return NotifySettings(
        schema=env.get(ENV_NOTIFICATION_SCHEMA, "").strip(),
        base_url=env.get(ENV_NOTIFY_BASE_URL, "") or "http://localhost",
        stream=StreamSettings(
            sse_heartbeat_interval_sec=_int(env, ENV_SSE_HEARTBEAT_INTERVAL_SEC, 30, 1),
            connection_max_duration_sec=max_duration,
            replay_batch_size=_int(env, ENV_REPLAY_BATCH_SIZE, 100, 1),
            max_historical_notifications=_int(env, ENV_MAX_HISTORICAL_NOTIFICATIONS, 10_000, 1),
            replay_batch_delay_ms=_int(env, ENV_REPLAY_BATCH_DELAY_MS, 100, 0),
        ),
    )


@dataclass(frozen=True, slots=True)
class FlagSettings:
    """/api/v1 feature-flag manifests: tokens and signing key (raw; parsed by the service),
    the event stream's timing and caps, retention and the delivery budgets."""

    tokens_raw: str = field(default="", repr=False)
    signing_key: str = field(default="", repr=False)
    base_url: str = ""
    keepalive_sec: float = 30
    max_connection_sec: float = 86_400  # the spec's 24 h idle close; clamped on Lambda
    max_connections_per_token: int = 16
    retain_versions: int = 100
    retain_sec: int = 30 * 86_400
    inline_max_bytes: int = 64 * 1024
    churn_max_entries: int = 32


def _flags(env: Mapping[str, str]) -> FlagSettings:
    max_connection = _int(env, ENV_FLAGS_MAX_CONNECTION_SEC, 86_400, 1)
    if env.get(ENV_LAMBDA_FUNCTION_NAME):
        # One streamed response ends with the invocation (at most 15 minutes): the stream
        # closes itself first and the client reconnects (its next first event is a snapshot).
        timeout = _int(env, ENV_LAMBDA_TIMEOUT_SEC, LAMBDA_MAX_TIMEOUT_SEC, 1)
        max_connection = min(max_connection, lambda_stream_limit_sec(timeout))
    keepalive = _int(env, ENV_FLAGS_KEEPALIVE_SEC, 30, 1)
    if keepalive > 30:
        raise ConfigurationError(f"{ENV_FLAGS_KEEPALIVE_SEC} must be at most 30 (the spec's bound)")
    return FlagSettings(
        tokens_raw=env.get(ENV_FLAG_TOKENS, ""),
        signing_key=env.get(ENV_SIGNING_KEY, ""),
        base_url=env.get(ENV_FLAGS_BASE_URL, "").strip().rstrip("/"),
        keepalive_sec=keepalive,
        max_connection_sec=max_connection,
        max_connections_per_token=_int(env, ENV_FLAGS_MAX_CONNECTIONS_PER_TOKEN, 16, 1),
        retain_versions=_int(env, ENV_FLAGS_RETAIN_VERSIONS, 100, 1),
        retain_sec=_int(env, ENV_FLAGS_RETAIN_SEC, 30 * 86_400, 0),
        inline_max_bytes=_int(env, ENV_FLAGS_INLINE_MAX_BYTES, 64 * 1024, 1),
        churn_max_entries=_int(env, ENV_FLAGS_CHURN_MAX_ENTRIES, 32, 0),
    )


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """/api/v2: the sentiment topic, the per-instance stream cap, event intervals, how
    often the feed and configuration edits are polled (5 s on Lambda, the contract's
    clarification; locally the engine's poll interval, and appends in this process wake
    streams at once), the Last-Event-ID resume buffer and the longest a stream stays open."""

    topic: str = "sentiment"
    max_connections: int = 100
    heartbeat_ms: int = 30_000
    metrics_interval_ms: int = 60_000
    metrics_min_interval_ms: int = 1_000
    poll_ms: int = 200
    config_poll_ms: int = 1_000
    buffer_events: int = 1_000
    max_connection_sec: int = 3_600
    max_configs_per_user: int = 50
    rollup_prefix: str = "rollups/v1/"


def _dashboard(env: Mapping[str, str], poll_interval_ms: int) -> DashboardSettings:
    on_lambda = bool(env.get(ENV_LAMBDA_FUNCTION_NAME))
    max_connection = _int(env, ENV_DASHBOARD_MAX_CONNECTION_SEC, 3_600, 1)
    if on_lambda:
        timeout = _int(env, ENV_LAMBDA_TIMEOUT_SEC, LAMBDA_MAX_TIMEOUT_SEC, 1)
        max_connection = min(max_connection, lambda_stream_limit_sec(timeout))
    poll = _int(env, ENV_DASHBOARD_POLL_MS, 5_000 if on_lambda else poll_interval_ms, 10)
    topic = env.get(ENV_DASHBOARD_TOPIC, "").strip() or "sentiment"
    if not is_valid_topic_name(topic):
        raise ConfigurationError(f"{ENV_DASHBOARD_TOPIC} is not a valid topic name: {topic!r}")
    return DashboardSettings(
        topic=topic,
        max_connections=_int(env, ENV_DASHBOARD_MAX_CONNECTIONS, 100, 0),
        heartbeat_ms=_int(env, ENV_DASHBOARD_HEARTBEAT_MS, 30_000, 10),
        metrics_interval_ms=_int(env, ENV_DASHBOARD_METRICS_INTERVAL_MS, 60_000, 10),
        metrics_min_interval_ms=_int(env, ENV_DASHBOARD_METRICS_MIN_INTERVAL_MS, 1_000, 0),
        poll_ms=poll,
        config_poll_ms=_int(env, ENV_DASHBOARD_CONFIG_POLL_MS, max(poll, 1_000), 10),
        buffer_events=_int(env, ENV_DASHBOARD_BUFFER_EVENTS, 1_000, 0),
        max_connection_sec=max_connection,
        max_configs_per_user=_int(env, ENV_DASHBOARD_MAX_CONFIGS_PER_USER, 50, 1),
        rollup_prefix=env.get(ENV_DASHBOARD_ROLLUP_PREFIX, "").strip() or "rollups/v1/",
    )


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the process is configured with: from the environment (from_env) or
    given whole by tests and tools."""

    host: str = "127.0.0.1"
    port: int = 4000
    api_keys_raw: str = field(default="", repr=False)
    allow_insecure_no_auth: bool = False
    probe_auth: bool = False
    resource_prefix: str = "headwater-dev"
    bucket: str = ""
    region: str = "us-east-1"
    poll_interval_ms: int = 200
    group_commit_max_records: int = 10_000
    # Frames of a new topic incarnation spread over this many partition keys, so one topic's
    # frame bytes never bind before its counter does (1,000 writes/s on one key; a 1 KB
    # record's frame is 2 WRU): docs/storage.md "The sequencer".
    log_partitions: int = 4
    # A slot reserved and not written this long after a reader first waited on it is filled
    # as a hole (its writer died, or its reservation was applied twice): the longest a
    # reader ever waits on one.
    hole_timeout_ms: int = 1_000
    frame_cache_bytes: int = 32 << 20
    head_cache_bytes: int = 8 << 20  # each of the two per-topic head maps (engine/heads.py)
    # A serving process's C allocator (headwater/allocator.py): glibc arenas, and how often
    # the free memory they keep goes back to the OS.
    malloc_arena_max: int = 2
    malloc_trim_ms: int = 60_000
    # >0: every allocation this large or larger gets its own mmap, returned to the OS when
    # freed (0: glibc's threshold, which rises with each large block freed, up to 32 MiB).
    # Off by default: in the soak it moved RSS's steps earlier, not lower (docs/benchmarks.md)
    malloc_mmap_threshold: int = 0
    spill_threshold_bytes: int = DEFAULT_SPILL_BYTES
    # A frame that folds several concurrent requests (group commit) spills above this
    # instead (0: the same threshold); docs/storage.md "Spilled frames".
    group_spill_threshold_bytes: int = 0
    max_watch_topics: int = 256
    watch_session_ttl_ms: int = 300_000
    # The longest one GET /v0/watch/:wid stream stays open (0: no limit); the client's
    # EventSource reconnects and resumes from the saved cursors. Clamped on Lambda.
    watch_max_stream_sec: int = 0
    tiering: Tiering = field(default_factory=Tiering)
    limits: Limits = field(default_factory=Limits)
    caps: Caps = field(default_factory=Caps)
    notify: NotifySettings = field(default_factory=NotifySettings)
    flags: FlagSettings = field(default_factory=FlagSettings)
    dashboard: DashboardSettings = field(default_factory=DashboardSettings)
    aws_read_timeout_ms: int = 30_000
    aws_max_attempts: int = 8
    # Browser origins CORS admits. The app is CORS's one source (locally and behind both
    # function URLs, which carry no CORS configuration): template.yaml passes CorsAllowOrigin
    # and DashboardOrigin.
    cors_origins: tuple[str, ...] = ("*",)

    @property
    def bucket_name(self) -> str:
        return self.bucket or f"{self.resource_prefix}-data"

    def table_name(self, logical: str) -> str:
        return f"{self.resource_prefix}-{logical}"

    def bind_is_loopback(self) -> bool:
        if self.host in {"localhost", "ip6-localhost"}:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        limits = Limits(
            max_batch_records=_int(e, ENV_MAX_BATCH_RECORDS, 10_000, 1),
            max_record_bytes=_int(e, ENV_MAX_RECORD_BYTES, 1 << 20, 1),
            max_body_bytes=_int(e, ENV_MAX_BODY_BYTES, 64 << 20, 1),
            max_meta_bytes=_int(e, ENV_MAX_META_BYTES, 16 << 10, 1),
            max_tag_bytes=_int(e, ENV_MAX_TAG_BYTES, 256, 1),
            max_node_bytes=_int(e, ENV_MAX_NODE_BYTES, 128, 1),
            max_limit=_int(e, ENV_MAX_LIMIT, 1000, 1),
            max_claim=_int(e, ENV_MAX_CLAIM, 1000, 1),
        )
        caps = Caps(
            max_topics=_int(e, ENV_MAX_TOPICS, 100_000),
            max_routers=_int(e, ENV_MAX_ROUTERS, 10_000),
            max_watch_sessions=_int(e, ENV_MAX_WATCH_SESSIONS, 10_000),
            max_sse_connections=_int(e, ENV_MAX_SSE_CONNECTIONS, 10_000),
            max_sse_connections_per_key=_int(e, ENV_MAX_SSE_CONNECTIONS_PER_KEY, 1_000),
            max_inflight_per_key=_int(e, ENV_MAX_INFLIGHT_PER_KEY, 1_000),
            max_total_bytes=_int(e, ENV_MAX_TOTAL_BYTES, 0),
            buffer_grace_ms=_int(e, ENV_BUFFER_GRACE_MS, 5_000, 10),
            slow_consumer_timeout_ms=_int(e, ENV_SLOW_CONSUMER_TIMEOUT_MS, 30_000, 100),
            stream_buffer_bytes=_int(e, ENV_STREAM_BUFFER_BYTES, 64 << 10, 1024),
            socket_buffer_bytes=_int(e, ENV_SOCKET_BUFFER_BYTES, 64 << 10, 1024),
            header_timeout_ms=_int(e, ENV_HEADER_TIMEOUT_MS, 10_000, 100),
        )
        return cls(
            host=e.get(ENV_HOST, "127.0.0.1") or "127.0.0.1",
            port=_int(e, ENV_PORT, 4000, 0),
            api_keys_raw=e.get(ENV_API_KEYS, ""),
            allow_insecure_no_auth=_bool(e, ENV_ALLOW_INSECURE),
            probe_auth=_bool(e, ENV_PROBE_AUTH),
            resource_prefix=e.get(ENV_RESOURCE_PREFIX, "headwater-dev") or "headwater-dev",
            bucket=e.get(ENV_BUCKET, ""),
            region=e.get(ENV_REGION, e.get("AWS_DEFAULT_REGION", "us-east-1")) or "us-east-1",
            poll_interval_ms=_int(e, ENV_POLL_MS, 200, 10),
            group_commit_max_records=_int(e, ENV_GROUP_MAX_RECORDS, 10_000, 1),
            log_partitions=min(64, _int(e, ENV_LOG_PARTITIONS, 4, 1)),
            hole_timeout_ms=_int(e, ENV_HOLE_TIMEOUT_MS, 1_000, 50),
            frame_cache_bytes=_int(e, ENV_FRAME_CACHE_BYTES, 32 << 20, 0),
            head_cache_bytes=_int(e, ENV_HEAD_CACHE_BYTES, 8 << 20, 0),
            malloc_arena_max=_int(e, ENV_MALLOC_ARENA_MAX, 2, 0),
            malloc_trim_ms=_int(e, ENV_MALLOC_TRIM_MS, 60_000, 0),
            malloc_mmap_threshold=_int(e, ENV_MALLOC_MMAP_THRESHOLD, 0, 0),
            spill_threshold_bytes=_spill(e, ENV_SPILL_BYTES, DEFAULT_SPILL_BYTES),
            group_spill_threshold_bytes=_spill(e, ENV_GROUP_SPILL_BYTES, 0),
            max_watch_topics=_int(e, ENV_MAX_WATCH_TOPICS, 256, 1),
            watch_session_ttl_ms=_int(e, ENV_WATCH_SESSION_TTL_MS, 300_000, 1000),
            watch_max_stream_sec=_watch_max_stream(e),
            limits=limits,
            caps=caps,
            notify=_notify(e),
            flags=_flags(e),
            dashboard=_dashboard(e, _int(e, ENV_POLL_MS, 200, 10)),
            aws_read_timeout_ms=_int(e, ENV_AWS_READ_TIMEOUT_MS, 30_000, 100),
            aws_max_attempts=_int(e, ENV_AWS_MAX_ATTEMPTS, 8, 1),
            cors_origins=_cors_origins(e),
            tiering=Tiering(
                seal_records=_int(e, ENV_SEAL_RECORDS, 4096, 1),
                seal_bytes=_int(e, ENV_SEAL_BYTES, 4 << 20, 1),
                seal_age_ms=_int(e, ENV_SEAL_AGE_MS, 600_000, 0),
                grace_ms=_int(e, ENV_SEAL_GRACE_MS, 60_000, 0),
                seal_concurrency=_int(e, ENV_SEAL_CONCURRENCY, 2, 1),
                block_bytes=_int(e, ENV_SEGMENT_BLOCK_BYTES, 64 << 10, 256),
                interval_ms=_int(e, ENV_TIERING_INTERVAL_MS, 10_000, 0),
                inline=_bool(e, ENV_TIERING_INLINE, True),
                full_sweep_ms=_int(e, ENV_FULL_SWEEP_MS, 300_000, 0),
                ephemeral_retention_ms=_int(e, ENV_EPHEMERAL_RETENTION_MS, 300_000, 1),
                memory_retention_ms=_int(e, ENV_MEMORY_RETENTION_MS, 86_400_000, 1),
                tail_ttl_ms=_int(e, ENV_TAIL_TTL_MS, 7 * 86_400_000, 3_600_000),
            ),
        )

    def check_bind(self, has_keys: bool) -> None:
        """Refuse a public, unauthenticated bind (spec §0.2)."""
        if not has_keys and not self.bind_is_loopback() and not self.allow_insecure_no_auth:
            raise ConfigurationError(
                f"refusing to serve on non-loopback {self.host} without {ENV_API_KEYS}; "
                f"set {ENV_ALLOW_INSECURE}=1 to override"
            )
