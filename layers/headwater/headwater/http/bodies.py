"""Request-body handling shared by the JSON routes: size cap before parsing (413), gzip,
Content-Type (415), and strict JSON (400)."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

from starlette.requests import Request

from headwater import jsoncodec
from headwater.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType


def loads_strict(raw: bytes | str) -> Any:
    return jsoncodec.loads(raw.encode() if isinstance(raw, str) else raw)


def _declared_over(declared: str, max_bytes: int) -> bool:
    """A Content-Length over the cap (ASCII digits only: `int()` also reads other scripts'
    digits, and refuses 4300 or more of them)."""
    digits = declared.strip()
    if not (digits.isascii() and digits.isdigit()):
        return False  # not a length: the server or the body read decides
    return len(digits) > 18 or int(digits) > max_bytes


async def read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and _declared_over(declared, max_bytes):
        raise PayloadTooLarge(
            f"request body exceeds {max_bytes} bytes", detail={"max_bytes": max_bytes}
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(
                f"request body exceeds {max_bytes} bytes", detail={"max_bytes": max_bytes}
            )
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding == "gzip":
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            body = d.decompress(body, max_bytes + 1)
            if len(body) > max_bytes or d.unconsumed_tail:
                raise PayloadTooLarge(
                    f"decompressed body exceeds {max_bytes} bytes",
                    detail={"max_bytes": max_bytes},
                )
            if not d.eof:  # truncated: the CRC/length trailer never arrived
                raise InvalidRequest("gzip body is truncated")
        except (OSError, zlib.error, gzip.BadGzipFile) as exc:
            raise InvalidRequest("body is not valid gzip") from exc
    elif encoding not in ("identity", ""):
        raise UnsupportedMediaType(f"unsupported Content-Encoding {encoding!r}")
    return body


async def read_json(request: Request, max_bytes: int, *, required: bool = True) -> Any:
    body = await read_body(request, max_bytes)
    # Content-Type is required only on a request with a body; a missing body is a 400.
    if not body:
        if not required:
            return {}
        raise InvalidRequest("request body is empty; expected a JSON object")
    ctype = request.headers.get("content-type", "")
    if ctype.split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaType(
            "Content-Type must be application/json", detail={"content_type": ctype}
        )
    try:
        return loads_strict(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"malformed JSON: {exc}") from exc
