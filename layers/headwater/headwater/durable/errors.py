"""Durable Streams errors (protocol §11). The /v1 envelope is {"error": {"code", "message"}};
headers the protocol attaches to an error (Stream-Closed, Producer-*) ride on the error."""

from __future__ import annotations

from headwater.errors import HeadwaterError


class StreamNotFound(HeadwaterError):
    status, code = 404, "stream_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"stream {name!r} does not exist")


class StreamGone(HeadwaterError):
    """A deleted stream kept for the forks that still read its entries (soft-deleted)."""

    status, code = 410, "stream_gone"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"stream {name!r} was deleted; it is kept only while forks still read from it"
        )


class OffsetGone(HeadwaterError):
    """An offset of an earlier incarnation of the stream (deleted and created again)."""

    status, code = 410, "offset_gone"


class StreamConflict(HeadwaterError):
    status, code = 409, "stream_conflict"


class StreamExists(StreamConflict):
    code = "stream_exists"


class StreamHeld(StreamConflict):
    """A deleted stream's name is still held by forks that read from it."""

    code = "stream_held_by_forks"


class ForkSourceGone(StreamConflict):
    """A fork of a stream that was deleted (kept only for the forks it already has)."""

    code = "fork_source_deleted"


class StreamClosed(StreamConflict):
    code = "stream_closed"


class ContentTypeMismatch(StreamConflict):
    code = "content_type_mismatch"


class SeqConflict(StreamConflict):
    code = "stream_seq_conflict"


class ProducerSeqGap(StreamConflict):
    code = "producer_seq_gap"


class ProducerFenced(HeadwaterError):
    status, code = 403, "producer_fenced"


class RequestTimeout(HeadwaterError):
    status, code = 408, "request_timeout"

    def __init__(self) -> None:
        super().__init__("request timed out")


class AppendTimeout(HeadwaterError):
    status, code = 408, "append_timeout"

    def __init__(self) -> None:
        super().__init__(
            "append timed out; append outcome is unknown, check Stream-Next-Offset before retrying"
        )


class InvalidSchema(HeadwaterError):
    """A /_schema update, or an append the schema refuses (protocol §11: invalid schema/lens)."""

    status, code = 400, "invalid_schema"


class SchemaVersionConflict(StreamConflict):
    code = "schema_version_conflict"


class PromotionFailed(StreamConflict):
    """A stored entry the lens chain cannot bring to the current schema version."""

    code = "schema_promotion_failed"


class ConfMoved(HeadwaterError):
    """Internal: the stream's schema registry or profile changed under a prepared append."""

    status, code = 409, "stream_conf_moved"

    def __init__(self, conf: tuple[str, str]) -> None:
        super().__init__("the stream's schema or profile changed; prepare the append again")
        self.conf = conf
