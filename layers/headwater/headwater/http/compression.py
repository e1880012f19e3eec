"""Response compression: gzip for clients that accept it, never for bodies that are
compressed already. Gzipping a tar.gz (a flag closure is served as `application/x-tar`
whose body is tar.gz, per the closures spec) or a /v1 stream of zip or image bytes only
adds a header and CPU, and makes every client decode twice; so such a response goes out
as it is. Already compressed means: a content type that always is (Starlette's list plus
the other common archive and media formats), or a body that starts with the magic bytes of
gzip, zip, zstd, xz or bzip2 whatever its declared type."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.gzip import (
    DEFAULT_EXCLUDED_CONTENT_TYPES,
    GZipMiddleware,
    GZipResponder,
    IdentityResponder,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COMPRESSED_CONTENT_TYPES = (
    *DEFAULT_EXCLUDED_CONTENT_TYPES,
    "application/x-bzip2",
    "application/x-xz",
    "application/zstd",
    "application/x-7z-compressed",
    "application/vnd.rar",
    "application/x-rar-compressed",
    "image/heic",
    "image/jxl",
)
# Leading bytes of compressed formats: gzip, zip (local file header, empty archive), zstd,
# xz, bzip2.
COMPRESSED_MAGIC = (
    b"\x1f\x8b",
    b"PK\x03\x04",
    b"PK\x05\x06",
    b"\x28\xb5\x2f\xfd",
    b"\xfd7zXZ\x00",
    b"BZh",
)


def is_compressed(body: bytes) -> bool:
    return body.startswith(COMPRESSED_MAGIC)


class _SniffingGZipResponder(GZipResponder):
    """Starlette's responder, which decides on the first body chunk whether to compress;
    a chunk that is compressed already is sent as it is, headers untouched."""

    async def send_with_compression(self, message: Message) -> None:
        if (
            message["type"] == "http.response.body"
            and not self.started
            and not (
                self.content_encoding_set or self.partial_response or self.content_type_is_excluded
            )
            and is_compressed(message.get("body", b""))
        ):
            self.content_type_is_excluded = True  # the rest of the body passes through too
            await self.send(self.initial_message)
        await super().send_with_compression(message)


# zlib's default level, not Starlette's 9: on a 1.6 MB `_aggregate` answer level 9 took
# 134 ms of CPU for a body 7% smaller than level 6's (59 ms); level 1 took 18 ms but left it
# 47% larger (data out costs more than the CPU it saves). Measured 2026-11-26, this machine.
COMPRESS_LEVEL = 6


class GZipUnlessCompressed(GZipMiddleware):
    def __init__(self, app: ASGIApp, minimum_size: int = 1024) -> None:
        super().__init__(
            app,
            minimum_size,
            compresslevel=COMPRESS_LEVEL,
            exclude_content_types=COMPRESSED_CONTENT_TYPES,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        responder: IdentityResponder
        if "gzip" in Headers(scope=scope).get("Accept-Encoding", ""):
            responder = _SniffingGZipResponder(
                self.app,
                self.minimum_size,
                compresslevel=self.compresslevel,
                thread_minimum_size=self.thread_minimum_size,
                exclude_content_types=self.exclude_content_types,
            )
        else:
            responder = IdentityResponder(
                self.app, self.minimum_size, exclude_content_types=self.exclude_content_types
            )
        await responder(scope, receive, send)
