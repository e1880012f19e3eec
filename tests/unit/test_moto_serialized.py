"""The embedded emulator's ASGI front (headwater.dev.moto_serialized): the WSGI environ it
builds for moto and how it runs a WSGI app. The served behaviour (keep-alive, S3 keys,
serialized transactions) is in tests/adapters/test_emulator_server.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from headwater.dev import moto_patches
from headwater.dev.moto_serialized import SerializedApp, call_wsgi, wsgi_environ

pytestmark = pytest.mark.unit


def _scope(**over: Any) -> dict[str, Any]:
    scope: dict[str, Any] = {
        "type": "http",
        "http_version": "1.1",
        "method": "PUT",
        "scheme": "http",
        "path": "/bucket/a b/ü",
        "raw_path": b"/bucket/a%20b/%C3%BC",
        "query_string": b"x=1&y=%2F",
        "server": ("127.0.0.1", 5000),
        "client": ("127.0.0.1", 40000),
        "headers": [
            (b"host", b"127.0.0.1:5000"),
            (b"content-type", b"application/x-amz-json-1.0"),
            (b"x-amz-meta-a", b"1"),
            (b"x-amz-meta-a", b"2"),
            (b"x_forged", b"no"),
            (b"transfer-encoding", b"chunked"),
        ],
    }
    scope.update(over)
    return scope


def test_environ_carries_what_moto_reads() -> None:
    env = wsgi_environ(_scope(), b"hello")
    assert env["REQUEST_METHOD"] == "PUT"
    # PEP 3333: the decoded path's UTF-8 bytes as latin-1; the raw target as sent
    assert env["PATH_INFO"] == "/bucket/a b/ü".encode().decode("latin-1")
    assert env["RAW_URI"] == env["REQUEST_URI"] == "/bucket/a%20b/%C3%BC?x=1&y=%2F"
    assert env["QUERY_STRING"] == "x=1&y=%2F"
    assert env["HTTP_HOST"] == "127.0.0.1:5000"
    assert env["CONTENT_TYPE"] == "application/x-amz-json-1.0"
    assert env["HTTP_X_AMZ_META_A"] == "1,2"  # repeated headers joined, as werkzeug does
    assert "HTTP_X_FORGED" not in env  # a header with "_" could pose as another
    # the body is already whole: a chunked request reaches moto as a sized one
    assert "HTTP_TRANSFER_ENCODING" not in env
    assert env["CONTENT_LENGTH"] == "5"
    assert env["wsgi.input"].read() == b"hello"
    assert env["SERVER_NAME"] == "127.0.0.1" and env["SERVER_PORT"] == "5000"


def test_environ_without_body_or_query() -> None:
    env = wsgi_environ(_scope(method="GET", query_string=b"", headers=[]), b"")
    assert "CONTENT_LENGTH" not in env
    assert env["RAW_URI"] == "/bucket/a%20b/%C3%BC"
    assert env["wsgi.input"].read() == b""


def test_environ_stated_length_is_the_body_length() -> None:
    env = wsgi_environ(_scope(headers=[(b"content-length", b"0")]), b"")
    assert env["CONTENT_LENGTH"] == "0"


def test_call_wsgi_collects_written_and_iterated_body_and_closes() -> None:
    closed: list[bool] = []

    class Body:
        def __iter__(self) -> Iterator[bytes]:
            yield b"b"
            yield b""
            yield b"c"

        def close(self) -> None:
            closed.append(True)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        write = start_response("201 Created", [("X-Thing", "1"), ("Content-Type", "text/plain")])
        write(b"a")
        return Body()

    status, headers, body = call_wsgi(app, {})
    assert status == 201
    assert headers == [(b"x-thing", b"1"), (b"content-type", b"text/plain")]
    assert body == b"abc"
    assert closed == [True]


def test_serialized_app_runs_one_request_at_a_time() -> None:
    active = 0
    peak = 0
    lock = threading.Lock()
    threads: set[str] = set()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
            threads.add(threading.current_thread().name)
        threading.Event().wait(0.01)
        with lock:
            active -= 1
        start_response("200 OK", [("Content-Length", "2")])
        return [environ["wsgi.input"].read()]

    served = SerializedApp(app)

    async def one(i: int) -> tuple[int, bytes]:
        chunks = [b"x", str(i % 10).encode()]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            body = chunks.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(chunks)}

        async def send(message: dict[str, Any]) -> None:
            sent.append(dict(message))

        await served(_scope(headers=[]), receive, send)
        assert sent[0]["type"] == "http.response.start"
        return sent[0]["status"], sent[1]["body"]

    async def many() -> list[tuple[int, bytes]]:
        return await asyncio.gather(*(one(i) for i in range(8)))

    results = asyncio.run(many())
    assert results == [(200, b"x" + str(i).encode()) for i in range(8)]
    assert peak == 1  # never two at once
    assert len(threads) == 1  # on the one worker thread


def test_memoized_dispatch_lookups_answer_as_moto_does() -> None:
    from moto import backends
    from moto.core import responses
    from moto.dynamodb.responses import DynamoHandler

    moto_patches.apply()
    modules = list(backends.list_of_moto_modules())
    assert "dynamodb" in modules and "s3" in modules
    assert modules == list(backends.list_of_moto_modules())
    names = responses.method_names_from_class(DynamoHandler)
    assert "transact_write_items" in names and "get_item" in names
    assert "not_a_method" not in names
    assert responses.method_names_from_class(DynamoHandler) is names  # computed once
