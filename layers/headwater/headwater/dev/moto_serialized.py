"""moto's server with every request processed one at a time, on keep-alive connections.

moto's threaded server does not isolate DynamoDB TransactWriteItems: two concurrent
transactions can both pass their conditions and then partially apply, which real DynamoDB
never allows (transactions are serializable). Headwater's correctness rests on that
isolation, so the embedded emulator runs moto's WSGI app on one worker thread: requests are
processed strictly one at a time.

The sockets are served by uvicorn, not werkzeug's development server: werkzeug closes the
connection after every response ("Connection: close"), so every AWS call paid for a new TCP
connection and a new server thread, a cost no AWS endpoint has (measured here: a
ConsistentRead GetItem 2.5 -> 2.0 ms, a two-item TransactWriteItems 6.1 -> 4.1 ms).
uvicorn keeps HTTP/1.1 connections alive and reads each request whole before it reaches the
worker thread, so a slow client never holds the emulator."""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import uvicorn
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from headwater.dev import moto_patches

ENV_KEY_BUFFER = "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"
KEY_BUFFER_BYTES = 64 * 1024 * 1024

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _latin1(s: str) -> str:
    """PEP 3333: environ strings carry the request's bytes as latin-1 code points."""
    return s.encode("utf-8").decode("latin-1")


def wsgi_environ(scope: Scope, body: bytes) -> dict[str, Any]:
    """The environ werkzeug's development server builds for the same request (moto reads
    PATH_INFO, RAW_URI and the HTTP_* headers)."""
    raw_path = scope.get("raw_path")
    target = raw_path.decode("latin-1") if raw_path else quote(scope["path"], safe="/:@!$&'()*+,;=")
    query = scope.get("query_string", b"").decode("latin-1")
    if query:
        target = f"{target}?{query}"
    server = scope.get("server") or ("127.0.0.1", 80)
    client = scope.get("client") or ("127.0.0.1", 0)
    environ: dict[str, Any] = {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "SERVER_SOFTWARE": "headwater-moto",
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": "",
        "PATH_INFO": _latin1(scope["path"]),
        "QUERY_STRING": query,
        "REQUEST_URI": target,
        "RAW_URI": target,
        "REMOTE_ADDR": client[0],
        "REMOTE_PORT": client[1],
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
    }
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1")
        if "_" in name:  # as werkzeug: never let a header pose as another
            continue
        key = name.upper().replace("-", "_")
        if key == "TRANSFER_ENCODING":
            continue  # the body is already whole; its length is given below
        value = raw_value.decode("latin-1")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = f"HTTP_{key}"
            if key in environ:
                value = f"{environ[key]},{value}"
        environ[key] = value
    if body or "CONTENT_LENGTH" in environ:
        environ["CONTENT_LENGTH"] = str(len(body))
    return environ


Headers = list[tuple[bytes, bytes]]


def call_wsgi(app: WsgiApp, environ: dict[str, Any]) -> tuple[int, Headers, bytes]:
    """Run the WSGI app to completion: (status, headers, body)."""
    started: list[tuple[str, list[tuple[str, str]]]] = []
    written: list[bytes] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        if exc_info is not None and started:
            raise exc_info[1].with_traceback(exc_info[2])
        started[:] = [(status, headers)]
        return written.append

    result = app(environ, start_response)
    try:
        for chunk in result:
            if chunk:
                written.append(chunk)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = started[0]
    encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    return int(status.split(" ", 1)[0]), encoded, b"".join(written)


class SerializedApp:
    """ASGI front for a WSGI app: each request is read whole, then the app runs on the one
    worker thread, so requests are processed strictly one at a time."""

    def __init__(self, app: WsgiApp) -> None:
        self._app = app
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="moto")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self._worker.shutdown(wait=False, cancel_futures=True)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        environ = wsgi_environ(scope, b"".join(chunks))
        loop = asyncio.get_running_loop()
        status, headers, body = await loop.run_in_executor(
            self._worker, call_wsgi, self._app, environ
        )
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args(argv)
    # moto keeps an S3 object in memory up to this size and spills larger ones to a temporary
    # file (5 MiB by default): a 6 MB group-commit segment was written to disk on every PUT.
    os.environ.setdefault(ENV_KEY_BUFFER, str(KEY_BUFFER_BYTES))
    moto_patches.apply()
    app = SerializedApp(DomainDispatcherApplication(create_backend_app))
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_keep_alive=60,  # clients reuse their connections; AWS keeps them ~60 s too
    )


if __name__ == "__main__":
    main()
