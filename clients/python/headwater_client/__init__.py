"""Python client and CLI for Headwater (docs/client.md).

`Client` / `AsyncClient` speak the /v0 topics API (topics, append, diff and long-poll, watch
over SSE with resume, queues); `Client.streams` speaks /v1 Durable Streams; `Worker` runs a
queue's jobs; `FlagSubscriber` follows feature-flag namespaces over `/api/v1/events`
(docs/flags.md, "Python client"). Install with `pip install 'headwater[client]'`; the
`headwater` command is `headwater_client.cli`."""

from headwater_client._calls import NewRecord
from headwater_client._version import __version__
from headwater_client.client import DEFAULT_URL, AsyncClient, Client, default_node
from headwater_client.errors import (
    ApiError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    Gone,
    HeadwaterError,
    InvalidRequest,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    ServerError,
    Throttled,
    Unauthorized,
)
from headwater_client.flags import (
    FlagSubscriber,
    NamespaceStats,
    RefreshError,
    SubscriberFatal,
    SubscriberStats,
)
from headwater_client.models import (
    AppendResult,
    ClaimResult,
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    ExtendResult,
    Job,
    LeaseResult,
    PutTopicResult,
    QueueCounters,
    Record,
    SearchHit,
    SearchResult,
    StreamAppendResult,
    StreamChunk,
    StreamInfo,
    Tombstone,
    TopicState,
    TopicSummary,
    WatchEvent,
    WatchSession,
)
from headwater_client.streams import Streams
from headwater_client.watch import AsyncWatchStream, WatchStream
from headwater_client.worker import JobOutcome, Worker, WorkerStats

__all__ = [
    "DEFAULT_URL",
    "ApiError",
    "AppendResult",
    "AsyncClient",
    "AsyncWatchStream",
    "ClaimResult",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "DeleteRecordsResult",
    "DeleteTopicResult",
    "DiffResult",
    "ExtendResult",
    "FlagSubscriber",
    "Forbidden",
    "Gone",
    "HeadwaterError",
    "InvalidRequest",
    "Job",
    "JobOutcome",
    "LeaseResult",
    "NamespaceStats",
    "NewRecord",
    "NotAcceptable",
    "NotFound",
    "PayloadTooLarge",
    "PutTopicResult",
    "QueueCounters",
    "Record",
    "RefreshError",
    "SearchHit",
    "SearchResult",
    "ServerError",
    "StreamAppendResult",
    "StreamChunk",
    "StreamInfo",
    "Streams",
    "SubscriberFatal",
    "SubscriberStats",
    "Throttled",
    "Tombstone",
    "TopicState",
    "TopicSummary",
    "Unauthorized",
    "WatchEvent",
    "WatchSession",
    "WatchStream",
    "Worker",
    "WorkerStats",
    "__version__",
    "default_node",
]
