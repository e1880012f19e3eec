"""A fault-injecting HTTP proxy for the DynamoDB wire protocol (tests and benchmarks only).

It sits between Headwater processes and the emulator (AWS_ENDPOINT_URL_DYNAMODB points at it)
and, per request, picks a fault from a seeded plan:

- drop:     forward the request, let it apply, then close the client's connection without
            answering (a response lost in the network: botocore retries it);
- timeout:  the same, but only after holding the connection `hold_s` (the client's read
            timeout fires first);
- error:    answer 500 InternalServerError without forwarding;
- throttle: answer 400 ThrottlingException without forwarding;
- slow:     forward, then answer `slow_ms` late;
- stall:    hold the request without forwarding it, until the client goes away (a writer
            killed while its request is on the way: it never reaches storage).

`drop` and `timeout` apply to writes only (they are what makes a retry find its own earlier
success); the others to every request. A control path, `/__faults__`, answers the counts
(GET) and replaces the plan (POST, JSON). Run it as a process:

    python -m tests.faults.proxy --upstream http://127.0.0.1:PORT --port P --drop 0.1 ...

It speaks just enough HTTP/1.1 for botocore: a request head and a Content-Length body; the
upstream's response is read whole (Content-Length or chunked) before anything is decided."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sys
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

WRITES = frozenset({"TransactWriteItems", "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"})
CONTROL_PATH = b"/__faults__"
_THROTTLE = (
    b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException",'
    b'"message":"Rate of requests exceeds the allowed throughput (injected)"}'
)
_ERROR = (
    b'{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError",'
    b'"message":"Internal server error (injected)"}'
)


@dataclass
class Plan:
    drop: float = 0.0
    timeout: float = 0.0
    error: float = 0.0
    throttle: float = 0.0
    slow: float = 0.0
    slow_ms: int = 200
    stall: float = 0.0
    hold_s: float = 3.0
    seed: int = 1
    only: list[str] = field(default_factory=list)  # API names faulted (empty: all)


@dataclass
class Stats:
    requests: int = 0
    forwarded: int = 0
    drop: int = 0
    timeout: int = 0
    error: int = 0
    throttle: int = 0
    slow: int = 0
    stall: int = 0
    # answers that refused a write's condition (a lost race, a key already taken), seen at
    # the wire, and every forwarded request, per API
    refused: int = 0
    forwarded_by_api: dict[str, int] = field(default_factory=dict)
    by_api: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, api: str, kind: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        per = self.by_api.setdefault(api, {})
        per[kind] = per.get(kind, 0) + 1


class FaultProxy:
    def __init__(self, upstream: str, plan: Plan) -> None:
        parts = urlsplit(upstream)
        self.up_host = parts.hostname or "127.0.0.1"
        self.up_port = parts.port or 80
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.stats = Stats()

    def choose(self, api: str) -> str | None:
        p = self.plan
        if p.only and api not in p.only:
            return None
        r = self.rng.random()
        for kind, prob in (
            ("drop", p.drop if api in WRITES else 0.0),
            ("timeout", p.timeout if api in WRITES else 0.0),
            ("error", p.error),
            ("throttle", p.throttle),
            ("slow", p.slow),
            ("stall", p.stall),
        ):
            if r < prob:
                return kind
            r -= prob
        return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                head, body = request
                if head.split(b" ", 2)[1].startswith(CONTROL_PATH):
                    await self._control(head, body, writer)
                    continue
                api = _api(head)
                self.stats.requests += 1
                kind = self.choose(api)
                if kind == "stall":
                    self.stats.count(api, kind)
                    await reader.read()  # nothing is forwarded; wait for the client to go
                    return
                if kind in ("error", "throttle"):
                    self.stats.count(api, kind)
                    payload = _ERROR if kind == "error" else _THROTTLE
                    status = b"500 Internal Server Error" if kind == "error" else b"400 Bad Request"
                    writer.write(_response(status, payload))
                    await writer.drain()
                    continue
                if upstream is None:
                    upstream = await asyncio.open_connection(self.up_host, self.up_port)
                up_reader, up_writer = upstream
                up_writer.write(head + body)
                await up_writer.drain()
                response = await _read_response(up_reader)
                self.stats.forwarded += 1
                per = self.stats.forwarded_by_api
                per[api] = per.get(api, 0) + 1
                if b"ConditionalCheckFailed" in response:
                    self.stats.count(api, "refused")
                if kind is not None:
                    self.stats.count(api, kind)
                if kind in ("drop", "timeout"):
                    if kind == "timeout":
                        await asyncio.sleep(self.plan.hold_s)
                    writer.transport.abort()  # the write applied; its answer is lost
                    return
                if kind == "slow":
                    await asyncio.sleep(self.plan.slow_ms / 1000)
                writer.write(response)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            if upstream is not None:
                upstream[1].close()
            with contextlib.suppress(Exception):
                writer.close()

    async def _control(self, head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        if head.startswith(b"POST"):
            data = json.loads(body or b"{}")
            self.plan = Plan(**{**asdict(self.plan), **data})
            self.rng = random.Random(self.plan.seed)
        payload = json.dumps({"plan": asdict(self.plan), "stats": asdict(self.stats)}).encode()
        writer.write(_response(b"200 OK", payload))
        await writer.drain()


def _api(head: bytes) -> str:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"x-amz-target":
            return value.strip().decode().rpartition(".")[2]
    return "?"


def _response(status: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None


def _chunked(head: bytes) -> bool:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            return True
    return False


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = _content_length(head) or 0
    body = await reader.readexactly(length) if length else b""
    return head, body


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = _content_length(head)
    if length is not None:
        return head + (await reader.readexactly(length) if length else b"")
    if _chunked(head):
        out = bytearray(head)
        while True:
            size_line = await reader.readuntil(b"\r\n")
            out += size_line
            size = int(size_line.split(b";")[0].strip(), 16)
            chunk = await reader.readexactly(size + 2)
            out += chunk
            if size == 0:
                return bytes(out)
    return head + await reader.read()


async def serve(upstream: str, port: int, plan: Plan, ready: Any = None) -> None:
    proxy = FaultProxy(upstream, plan)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready()
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, required=True)
    for name in ("drop", "timeout", "error", "throttle", "slow", "stall"):
        ap.add_argument(f"--{name}", type=float, default=0.0)
    ap.add_argument("--slow-ms", type=int, default=200)
    ap.add_argument("--hold-s", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    plan = Plan(
        drop=args.drop,
        timeout=args.timeout,
        error=args.error,
        throttle=args.throttle,
        slow=args.slow,
        stall=args.stall,
        slow_ms=args.slow_ms,
        hold_s=args.hold_s,
        seed=args.seed,
    )
    asyncio.run(serve(args.upstream, args.port, plan, lambda: print("ready", flush=True)))


if __name__ == "__main__":
    main(sys.argv[1:])
