"""Durable Streams errors (protocol §11). The /v1 envelope is {"error": {"code", "message"}};
headers the protocol attaches to an error (Stream-Closed, Producer-*) ride on the error."""

from __future__ import annotations

from headwater.errors import HeadwaterError


class StreamNotFound(HeadwaterError):
    status, code = 404, "stream_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"stream {name!r} does not exist")


class OffsetGone(HeadwaterError):
    """An offset of an earlier incarnation of the stream (deleted and created again)."""

    status, code = 410, "offset_gone"


class StreamConflict(HeadwaterError):
    status, code = 409, "stream_conflict"


class StreamExists(StreamConflict):
    code = "stream_exists"


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
