"""The uvicorn connection protocol every Headwater server process uses (`make run`,
bench/server.py, and StreamFunction behind the Lambda Web Adapter: `--http
headwater.http.serving:GuardedHttpProtocol`): uvicorn's httptools protocol plus the
stalled-client guards uvicorn lacks (docs/v0-topics.md, "Stalled clients").

- Header deadline (slowloris). A request head not complete within `header_timeout_ms` of
  the connection opening, or of the first byte after the previous response on a kept-alive
  connection, closes the connection (after a 408 if part of a head arrived). An idle
  kept-alive connection stays uvicorn's `timeout_keep_alive` business: KEEP_ALIVE_S, longer
  than the clients' own pool expiry (httpx and Node drop idle connections after 4-5 s, the
  Lambda Web Adapter and load balancers after 60 s). A server that closes an idle
  connection at the same moment as its client reuses it makes the request fail with a
  reset the client cannot safely retry (uvicorn's 5 s default equals httpx's).
- Bounded unsent bytes. The transport pauses the app's writes above `socket_buffer_bytes`
  and the kernel keeps at most about as many bytes not yet sent (TCP_NOTSENT_LOWAT), so a
  client that stops reading blocks the app's next send after a few hundred KB rather than
  after megabytes of autotuned kernel buffers; the app's write deadline
  (`slow_consumer_timeout_ms`, http/sse.py and http/ws.py) then ends the stream.
- Closing closes. An asyncio transport closes only once its buffer has drained: for a
  client that never reads, never (the socket, its buffer and the protocol stay, and the
  client sees nothing). A close that leaves unsent bytes aborts the socket with a reset
  once the buffer has made no progress for CLOSE_GRACE_S (at once if writes have been
  paused that long already), and a transport whose writes stay paused past the write
  deadline plus FINAL_WRITE_S and that grace is aborted too (a response whose app does not
  bound its own writes). Aborted means released: uvicorn reports the disconnect to the
  app, whose streams then free their slots, tasks and buffers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from headwater.http.sse import FINAL_WRITE_S
from headwater.settings import Caps, Settings

log = logging.getLogger(__name__)

KEEP_ALIVE_S = 75  # uvicorn's timeout_keep_alive here and in functions/stream/run.sh
CLOSE_GRACE_S = 2.0  # a closed socket whose unsent bytes make no progress this long is reset
TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 30\r\nconnection: close\r\n\r\nrequest head not sent in time\n"
)


@dataclass(frozen=True, slots=True)
class Guards:
    header_timeout_s: float
    socket_buffer_bytes: int
    stall_timeout_s: float  # writes paused this long: the socket is aborted

    @classmethod
    def from_caps(cls, caps: Caps) -> Guards:
        return cls(
            header_timeout_s=caps.header_timeout_ms / 1000,
            socket_buffer_bytes=caps.socket_buffer_bytes,
            stall_timeout_s=caps.slow_consumer_timeout_ms / 1000 + FINAL_WRITE_S + CLOSE_GRACE_S,
        )


@functools.cache
def _guards_from_env() -> Guards:
    return Guards.from_caps(Settings.from_env().caps)


def _reset(transport: asyncio.Transport) -> None:
    """Close now, with a reset: SO_LINGER 0 drops the unsent bytes (a plain close leaves
    them to the kernel, which keeps the peer's connection up while it never reads)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class ClosingTransport:
    """The connection's transport as uvicorn's protocols see it (also the WebSocket one
    after an upgrade): the same, but a close that leaves unsent bytes ends in a reset
    unless the bytes keep draining."""

    def __init__(self, transport: asyncio.Transport, paused_for: Any) -> None:
        self._transport = transport
        self._paused_for = paused_for  # () -> seconds the protocol's writes have been paused
        self._watch: asyncio.TimerHandle | None = None
        self._left = 0

    def close(self) -> None:
        transport = self._transport
        transport.close()
        if self._watch is not None or transport.get_write_buffer_size() == 0:
            return
        if self._paused_for() >= CLOSE_GRACE_S:
            _reset(transport)
            return
        self._left = transport.get_write_buffer_size()
        self._watch = asyncio.get_running_loop().call_later(CLOSE_GRACE_S, self._check)

    def _check(self) -> None:
        left = self._transport.get_write_buffer_size()
        if left == 0:
            self._watch = None
        elif left >= self._left:
            log.info("resetting a closed connection whose client stopped reading")
            self._watch = None
            _reset(self._transport)
        else:
            self._left = left
            self._watch = asyncio.get_running_loop().call_later(CLOSE_GRACE_S, self._check)

    def reset(self) -> None:
        _reset(self._transport)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the guards above. `guards` None: from the
    environment (Settings), as under the uvicorn command line."""

    guards: ClassVar[Guards | None] = None

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._guards = self.guards or _guards_from_env()
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_begun = False
        self._stall_timer: asyncio.TimerHandle | None = None
        self._paused_at: float | None = None

    # --- connection ---
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        limit = self._guards.socket_buffer_bytes
        sock = transport.get_extra_info("socket")
        notsent = getattr(socket, "TCP_NOTSENT_LOWAT", None)
        if sock is not None and notsent is not None:
            with contextlib.suppress(OSError):  # not TCP (a Unix socket)
                sock.setsockopt(socket.IPPROTO_TCP, notsent, limit)
        transport.set_write_buffer_limits(high=limit)
        super().connection_made(ClosingTransport(transport, self._paused_for))  # type: ignore[arg-type]
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_stall_timer()
        super().connection_lost(exc)

    # --- header deadline ---
    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:
            self._head_begun = True
            if self._head_timer is None:
                self._arm_head_timer()
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self._head_begun = False
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head_begun = False

    def handle_websocket_upgrade(self) -> None:
        self._cancel_head_timer()
        self._cancel_stall_timer()
        super().handle_websocket_upgrade()

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self._guards.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_begun:
            self.transport.write(TIMEOUT_RESPONSE)
        self.transport.close()

    # --- write stalls ---
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._paused_at is None:
            self._paused_at = self.loop.time()
            self._stall_timer = self.loop.call_later(self._guards.stall_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._paused_at = None
        self._cancel_stall_timer()

    def _paused_for(self) -> float:
        return 0.0 if self._paused_at is None else self.loop.time() - self._paused_at

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _stalled(self) -> None:
        self._stall_timer = None
        log.warning(
            "resetting a connection whose client read nothing for %.0f s",
            self._guards.stall_timeout_s,
        )
        self.transport.reset()  # type: ignore[attr-defined]


def http_protocol(settings: Settings) -> type[GuardedHttpProtocol]:
    """GuardedHttpProtocol with the guards of `settings` (uvicorn.Config(http=...))."""

    class Configured(GuardedHttpProtocol):
        guards = Guards.from_caps(settings.caps)

    return Configured
