"""A synchronous subscriber for `GET /api/v1/events` (protocol v2; docs/flags.md, "Python
client").

`FlagSubscriber` holds one SSE connection (a background thread) for a set of flag
namespaces and keeps, per namespace, the last *verified* closure tree. Every state change is
checked as the spec's hash-and-integrity contract demands:

- `version` inline: `apply.apply_inline` (protocol, pre-apply, per-file and post-apply
  checks). Any `ApplyMismatch` is recorded as the namespace's last error and the client falls
  back to the closure at the event's version, fetched with the bearer from the closure
  endpoint and verified against the event's `closure_hash`.
- `version` snapshot and `resync`: the (signed) `snapshot_url` is fetched, un-tarred with
  `tarball.read_snapshot` and checked with `apply.verify_snapshot` (the fourth check); a
  mismatch is re-fetched with backoff a bounded number of times. A resync carries no closure
  hash, so its snapshot is checked against the hash in the response's ETag
  (`"v<version>-<closure_hash>"`).

Nothing but a verified tree ever replaces the tracked state, so `tree()` always answers the
last good closure. When a fallback or snapshot cannot be obtained the client drops the
connection; the reconnect's first event is a snapshot that reseats the state.

Tenants: subscription keys are what `ns=` carries, so a bare `slug` for tenant-bound tokens
and `tenant/slug` for superadmin tokens. The bearer closure URL (the inline fallback) needs
the tenant; it is taken from a `tenant/slug` key, else from the `tenant=` argument, else
learned from the path of the namespace's last server-issued snapshot URL (every connection
starts with one, so an explicit `tenant=` is rarely needed).

The stream is read with httpx-sse's public API (`connect_sse`, `EventSource.iter_sse`);
`read_timeout_s` bounds the wait for a byte, so a connection whose keepalives stop is dropped
and reopened, and `stop()` shuts the open connection's socket down to end a blocked read.

The checks are the server's own pure modules (`headwater.flags.apply`, `closure`, `delta`,
`errors`, `manifest`, `snapshot`, `subscription`, `tarball`), installed with the client from
the same distribution; they need nothing beyond the standard library (`.importlinter` keeps
it so), and the Lambda layer ships no client.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

import httpx
from httpx_sse import ServerSentEvent, connect_sse

from headwater.flags.apply import ApplyMismatch, apply_inline, verify_snapshot
from headwater.flags.closure import HASH_PREFIX, FlagSelection
from headwater.flags.delta import PROTOCOL
from headwater.flags.errors import FlagError
from headwater.flags.manifest import DEFAULT_LIMITS
from headwater.flags.snapshot import closure_path, encode_subscription
from headwater.flags.subscription import parse_flag_list
from headwater.flags.tarball import read_snapshot

log = logging.getLogger(__name__)

EVENTS_PATH = "/api/v1/events"
FATAL_STATUSES = frozenset({400, 401, 403, 404, 405, 410, 414})
_CLOSURE_PATH_RE = re.compile(r"^/api/v1/tenants/([^/]+)/namespaces/([^/]+)/closure$")
_ETAG_RE = re.compile(r'^(?:W/)?"v([0-9]+)-(sha256:[0-9a-f]{64})"$')


# --- state ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RefreshError:
    """One failure. `point` is where it happened: the apply checks (`protocol`, `pre_apply`,
    `per_file`, `post_apply`, `snapshot` = the fourth check), `order` (a version not newer
    than the tracked one, ignored), `fetch` (a snapshot/closure request failed), `http` (the
    events request was answered with an error status), `connection` (transport failure or
    stream error) or `fatal` (the subscriber stopped: 400/401/403, protocol_downgrade)."""

    point: str
    message: str
    at: float  # time.time()
    label: str | None = None  # None: the connection, not one namespace
    version: int | None = None
    status: int | None = None  # HTTP status, when one was involved


@dataclass(frozen=True, slots=True)
class NamespaceStats:
    inline_applied: int = 0
    snapshots_applied: int = 0  # verified trees installed from a tarball (any cause)
    not_modified: int = 0  # 304: the tracked tree was confirmed without a download
    fallbacks: int = 0  # inline mismatches that fell back to the closure endpoint
    resyncs: int = 0
    snapshot_retries: int = 0  # fourth-check failures or failed fetches that were retried
    ignored: int = 0  # out-of-order version events
    errors: int = 0


@dataclass(frozen=True, slots=True)
class SubscriberStats:
    connections: int  # successful (200) events connections
    connect_failures: int
    namespaces: dict[str, NamespaceStats]


@dataclass(slots=True)
class _Namespace:
    label: str  # the subscription key (what ns= carries)
    slug: str
    tenant: str | None  # from `tenant/slug` or tenant=
    selection: FlagSelection
    lock: threading.Lock = field(default_factory=threading.Lock)  # the per-slug apply mutex
    learned_tenant: str | None = None  # from a server-issued snapshot URL
    tree: dict[str, bytes] | None = None
    closure_hash: str | None = None
    version: int = 0
    etag: str | None = None  # the ETag of the tracked tree, when it came from a tarball
    last_error: RefreshError | None = None
    stats: NamespaceStats = field(default_factory=NamespaceStats)

    def bump(self, **counts: int) -> None:
        self.stats = replace(
            self.stats, **{k: getattr(self.stats, k) + v for k, v in counts.items()}
        )


class SubscriberFatal(Exception):
    """`run_once()` was refused for good (400/401/403/404/405/410/414): the subscriber has
    stopped and `fatal_error` says why."""


class _SnapshotFailed(Exception):
    pass


def _selection(flags: str | Iterable[str]) -> FlagSelection:
    if isinstance(flags, str):
        parsed = parse_flag_list(flags)
        if parsed is None:
            raise ValueError(f"bad flag list {flags!r}: '*' or comma-separated flag keys")
        return parsed
    keys = list(flags)
    if not keys:
        raise ValueError("a flag list needs at least one key (or '*')")
    parsed = parse_flag_list(",".join(keys))
    if parsed is None or parsed.wildcard:
        raise ValueError(f"bad flag keys {keys!r}")
    return parsed


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
        err = body["error"]
        return f"{response.status_code} {err['code']}: {err['message']}"
    except Exception:
        return f"HTTP {response.status_code}"


class FlagSubscriber:
    """Follows flag namespaces over `/api/v1/events` and keeps each one's last verified
    closure tree. Thread-safe readers; one background thread (`start()`/`stop()`, or use it
    as a context manager); `handle_event()` is the seam for feeding events without a
    network."""

    def __init__(
        self,
        base_url: str,
        token: str,
        subscriptions: Mapping[str, str | Iterable[str]],
        *,
        tenant: str | None = None,
        http: httpx.Client | None = None,
        reconnect_min_s: float = 0.5,
        reconnect_max_s: float = 30.0,
        read_timeout_s: float = 90.0,
        snapshot_attempts: int = 3,
        snapshot_retry_s: float = 0.2,
        on_update: Callable[[str, int], None] | None = None,
    ) -> None:
        if not subscriptions:
            raise ValueError("subscribe to at least one namespace")
        if snapshot_attempts < 1:
            raise ValueError("snapshot_attempts must be at least 1")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.reconnect_min_s = reconnect_min_s
        self.reconnect_max_s = reconnect_max_s
        self.read_timeout_s = read_timeout_s
        self.snapshot_attempts = snapshot_attempts
        self.snapshot_retry_s = snapshot_retry_s
        self.on_update = on_update
        self._own_http = http is None
        self._http = http if http is not None else httpx.Client()
        self._timeout = httpx.Timeout(10.0, read=read_timeout_s)
        self._states: dict[str, _Namespace] = {}
        for label, flags in subscriptions.items():
            owner, slash, slug = label.partition("/")
            if not slash:
                owner, slug = "", label
            if not slug or "/" in slug or ":" in label:
                raise ValueError(f"bad namespace {label!r}: 'slug' or 'tenant/slug'")
            self._states[label] = _Namespace(label, slug, owner or tenant, _selection(flags))
        # The server labels a non-superadmin's `tenant/slug` subscription by its bare slug.
        self._aliases: dict[str, str] = {}
        for label, st in self._states.items():
            if label != st.slug and st.slug not in self._states:
                same = [s for s in self._states.values() if s.slug == st.slug]
                if len(same) == 1:
                    self._aliases[st.slug] = label
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._reconnect = threading.Event()
        self._thread: threading.Thread | None = None
        self._fatal: RefreshError | None = None
        self._last_error: RefreshError | None = None
        self._seen_on_connection: set[str] = set()
        self._last_applied_id: str | None = None
        self._connections = 0
        self._connect_failures = 0
        self._active: httpx.Response | None = None
        self._server_retry_ms: int | None = None

    # --- readers ----------------------------------------------------------------------------
    @property
    def labels(self) -> list[str]:
        return list(self._states)

    def _state(self, label: str) -> _Namespace:
        try:
            return self._states[label]
        except KeyError:
            raise KeyError(f"not subscribed to {label!r}") from None

    def tree(self, label: str) -> dict[str, bytes] | None:
        """A copy of the last verified closure tree (path -> bytes); None before the first."""
        with self._cond:
            tree = self._state(label).tree
            return dict(tree) if tree is not None else None

    def closure_hash(self, label: str) -> str | None:
        with self._cond:
            return self._state(label).closure_hash

    def version(self, label: str) -> int | None:
        with self._cond:
            st = self._state(label)
            return st.version if st.tree is not None else None

    def last_error(self, label: str) -> RefreshError | None:
        """The namespace's most recent failure (kept after later successes; compare `at`)."""
        with self._cond:
            return self._state(label).last_error

    def last_refresh_error(self) -> RefreshError | None:
        """The most recent failure of any namespace or of the connection."""
        with self._cond:
            return self._last_error

    @property
    def fatal_error(self) -> RefreshError | None:
        """Set when the subscriber stopped for good (400/401/403, protocol_downgrade)."""
        with self._cond:
            return self._fatal

    def stats(self) -> SubscriberStats:
        with self._cond:
            return SubscriberStats(
                self._connections,
                self._connect_failures,
                {label: st.stats for label, st in self._states.items()},
            )

    def wait_for_version(self, label: str, version: int, timeout: float | None = None) -> bool:
        """Block until `label` holds a verified tree at `version` or newer (True), the
        timeout passes or the subscriber stops fatally (False)."""
        st = self._state(label)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not (st.tree is not None and st.version >= version):
                if self._fatal is not None:
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> FlagSubscriber:
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="flag-subscriber", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._interrupt()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None
        if self._own_http:
            self._http.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> FlagSubscriber:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _interrupt(self) -> None:
        """End the blocking read of the open stream (shut its socket down)."""
        response = self._active
        if response is None:
            return
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # --- the connection loop ----------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                healthy, retry_after = self.run_once()
            except SubscriberFatal:
                return
            except Exception as exc:  # a bug must not kill the thread silently
                log.exception("flag subscriber connection failed")
                self._record(None, "connection", f"{type(exc).__name__}: {exc}")
                healthy, retry_after = False, None
            if self._stop.is_set():
                return
            failures = 0 if healthy else failures + 1
            delay = self._backoff(failures)
            if retry_after is not None:
                delay = max(delay, retry_after)
            self._stop.wait(delay)

    def _backoff(self, failures: int) -> float:
        """Exponential with jitter in [d/2, d]; after a healthy connection, d = the minimum
        (or the server's `retry:`, if larger)."""
        base = self.reconnect_min_s
        if self._server_retry_ms is not None:
            base = max(base, self._server_retry_ms / 1000)
        ceiling = min(self.reconnect_max_s, base * (2 ** min(failures, 30)))
        return random.uniform(ceiling / 2, ceiling)

    def events_request(self) -> tuple[str, dict[str, str]]:
        """URL and headers of the next events request (resume hints included)."""
        params = [
            ("ns", f"{label}:{st.selection.canonical()}") for label, st in self._states.items()
        ]
        with self._cond:
            since = [
                f"{label}:{st.version}" for label, st in self._states.items() if st.tree is not None
            ]
            last_id = self._last_applied_id
        if since:
            params.append(("since", ",".join(since)))
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "text/event-stream"}
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        return f"{self.base_url}{EVENTS_PATH}?{urlencode(params, safe=':,/*')}", headers

    def run_once(self) -> tuple[bool, float | None]:
        """One events connection, until the stream ends, `stop()` or a reconnect is needed.
        Returns (healthy: at least one event was applied, Retry-After seconds or None).
        Raises `SubscriberFatal` (after stopping) on 400/401/403 and other permanent statuses."""
        url, headers = self.events_request()
        self._reconnect.clear()
        healthy = False
        try:
            with connect_sse(
                self._http, "GET", url, headers=headers, timeout=self._timeout
            ) as source:
                response = source.response
                if response.status_code != 200:
                    response.read()
                    return False, self._refused(response)
                with self._cond:
                    self._connections += 1
                    self._seen_on_connection = set()
                # An event stream is UTF-8 whatever its charset says, and a leading BOM is
                # not part of it (HTML, "Server-sent events"): utf-8-sig decodes it so.
                response.encoding = "utf-8-sig"
                self._active = response
                try:
                    for sse in source.iter_sse():
                        if self._dispatch(sse):
                            healthy = True
                        if self._stop.is_set() or self._reconnect.is_set():
                            break
                finally:
                    self._active = None
        except httpx.HTTPError as exc:  # transport errors, read timeouts, SSEError
            if not self._stop.is_set():
                self._record(None, "connection", f"{type(exc).__name__}: {exc}")
        return healthy, None

    def _dispatch(self, sse: ServerSentEvent) -> bool:
        """One event of httpx-sse's parser (lines split at CR, LF or CRLF, comments, `data`
        lines joined, the last event ID kept across events, an unfinished event at the end
        dropped). On top of it, as the standard has it: the reconnection time (`retry:`)
        holds until the server sends another, and only a non-negative one counts; an event
        without data is not handled (httpx-sse yields one for an `id:`- or `retry:`-only
        block, and for the blank line after a `:keepalive` once an id was seen; it cannot
        tell an empty `data:` from none, and neither is a version or resync payload)."""
        if sse.retry is not None and sse.retry >= 0:
            self._server_retry_ms = sse.retry
        if not sse.data:
            return False
        return self.handle_event(sse.event, sse.id or None, sse.data)

    def _refused(self, response: httpx.Response) -> float | None:
        status = response.status_code
        message = _error_message(response)
        with self._cond:
            self._connect_failures += 1
        if status in FATAL_STATUSES:
            err = self._record(None, "fatal", message, status=status)
            with self._cond:
                self._fatal = err
                self._cond.notify_all()
            self._stop.set()
            raise SubscriberFatal(message)
        self._record(None, "http", message, status=status)
        return _retry_after(response.headers.get("retry-after"))

    # --- events -----------------------------------------------------------------------------
    def handle_event(self, event: str, id: str | None, data: str) -> bool:
        """Apply one SSE event; True when it changed (or confirmed) a namespace's verified
        tree. Never raises for bad input: failures are recorded (`last_error`)."""
        if event not in ("version", "resync"):
            return False
        try:
            payload = json.loads(data)
        except ValueError as exc:
            self._record(None, "protocol", f"{event} data is not JSON: {exc}")
            return False
        if not isinstance(payload, dict):
            self._record(None, "protocol", f"{event} data is not an object")
            return False
        label = payload.get("namespace")
        st = self._lookup(label)
        if st is None:
            self._record(None, "protocol", f"{event} for a namespace not subscribed: {label!r}")
            return False
        with st.lock:
            with self._cond:
                first = st.label not in self._seen_on_connection
                self._seen_on_connection.add(st.label)
            if event == "resync":
                ok = self._on_resync(st, payload)
            else:
                ok = self._on_version(st, payload, first)
        if ok and id is not None:
            with self._cond:
                if st.tree is not None and id == f"{label}:{st.version}":
                    self._last_applied_id = id
        return ok

    def _lookup(self, label: Any) -> _Namespace | None:
        if not isinstance(label, str):
            return None
        st = self._states.get(label)
        if st is None and label in self._aliases:
            st = self._states[self._aliases[label]]
        return st

    def _on_version(self, st: _Namespace, data: dict[str, Any], first: bool) -> bool:
        version = _int_or_none(data.get("version"))
        expected = data.get("closure_hash")
        if version is None or version < 1 or not isinstance(expected, str):
            self._record(st, "protocol", "version event without a version or closure_hash")
            return False
        if data.get("protocol") != PROTOCOL:
            self._record(st, "protocol", f"unknown protocol {data.get('protocol')!r}", version)
            return False
        # Monotonic per namespace on one connection. The first event of a connection is a
        # snapshot baseline and may repeat (or, after a server restore, precede) the tracked
        # version.
        if not first and st.tree is not None and version <= st.version:
            st.bump(ignored=1)
            self._record(
                st, "order", f"version {version} is not newer than {st.version}; ignored", version
            )
            return False
        delivery = data.get("delivery")
        if delivery == "snapshot":
            url = data.get("snapshot_url")
            if not isinstance(url, str):
                self._record(st, "protocol", "snapshot event without snapshot_url", version)
                return False
            self._learn_tenant(st, url)
            return self._install(st, version, expected, url, signed=True)
        if delivery != "inline":
            self._record(st, "protocol", f"unknown delivery {delivery!r}", version)
            return False
        with self._cond:
            tree, tracked = st.tree or {}, st.closure_hash
        try:
            new_tree, new_hash = apply_inline(tree, tracked, data)
        except ApplyMismatch as exc:
            st.bump(fallbacks=1)
            self._record(st, exc.point, str(exc), version)
            url = self._closure_url(st, version)
            if url is None:
                self._record(st, "fetch", "no tenant known for the closure endpoint", version)
                self._reconnect.set()
                return False
            return self._install(st, version, expected, url, signed=False)
        self._commit(st, new_tree, new_hash, version, etag=None)
        st.bump(inline_applied=1)
        return True

    def _on_resync(self, st: _Namespace, data: dict[str, Any]) -> bool:
        st.bump(resyncs=1)
        version = _int_or_none(data.get("current_version"))
        url = data.get("snapshot_url")
        reason = data.get("reason")
        if reason == "protocol_downgrade" or data.get("protocol") != PROTOCOL:
            err = self._record(st, "fatal", f"resync {reason!r}: the server cannot serve v2")
            with self._cond:
                self._fatal = err
                self._cond.notify_all()
            self._stop.set()
            self._reconnect.set()
            return False
        if version is None or version < 1 or not isinstance(url, str):
            self._record(st, "protocol", "resync without current_version or snapshot_url")
            return False
        self._learn_tenant(st, url)
        log.info("flag namespace %s: resync (%s) to version %d", st.label, reason, version)
        return self._install(st, version, None, url, signed=True)

    # --- snapshots --------------------------------------------------------------------------
    def _learn_tenant(self, st: _Namespace, url: str) -> None:
        match = _CLOSURE_PATH_RE.match(urlsplit(url).path)
        if match and unquote(match.group(2)) == st.slug:
            st.learned_tenant = unquote(match.group(1))

    def _closure_url(self, st: _Namespace, version: int) -> str | None:
        tenant = st.tenant or st.learned_tenant
        if tenant is None:
            return None
        subscription = encode_subscription(st.selection.canonical())
        return (
            f"{self.base_url}{closure_path(tenant, st.slug)}"
            f"?version={version}&subscription={subscription}"
        )

    def _install(
        self, st: _Namespace, version: int, expected: str | None, url: str, *, signed: bool
    ) -> bool:
        """Fetch, un-tar and verify the closure at `version`; install it only if it verifies.
        `expected` None (resync): the hash in the response's ETag is the expectation."""
        try:
            tree, got, etag = self._fetch_verified(st, version, expected, url, signed=signed)
        except _SnapshotFailed:
            self._reconnect.set()  # the next connection starts with a fresh snapshot
            return False
        if tree is None:  # 304: the tracked tree is this version's closure
            st.bump(not_modified=1)
            with self._cond:
                st.version = version
                self._cond.notify_all()
            return True
        self._commit(st, tree, got, version, etag)
        st.bump(snapshots_applied=1)
        return True

    def _fetch_verified(
        self, st: _Namespace, version: int, expected: str | None, url: str, *, signed: bool
    ) -> tuple[dict[str, bytes] | None, str, str | None]:
        last = ""
        for attempt in range(self.snapshot_attempts):
            if attempt:
                st.bump(snapshot_retries=1)
                delay = self.snapshot_retry_s * 2 ** (attempt - 1)
                if self._stop.wait(random.uniform(delay / 2, delay)):
                    break
            headers = {"Authorization": f"Bearer {self._token}"}
            with self._cond:
                conditional = st.tree is not None and st.version == version and st.etag
                if conditional and st.etag is not None:
                    headers["If-None-Match"] = st.etag
                tracked_hash = st.closure_hash
            try:
                response = self._http.get(url, headers=headers, timeout=self._timeout)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                self._record(st, "fetch", f"closure fetch failed: {last}", version)
                continue
            etag = response.headers.get("etag")
            etag_hash = _etag_hash(etag, version)
            want = expected if expected is not None else etag_hash
            if response.status_code == 304:
                if want is not None and tracked_hash == want and etag_hash == want:
                    return None, want, etag
                last = f"304 for {etag!r} does not confirm the tracked tree"
                self._record(st, "snapshot", last, version, status=304)
                with self._cond:
                    st.etag = None  # ask unconditionally next time
                continue
            if response.status_code != 200:
                last = _error_message(response)
                self._record(st, "fetch", f"closure fetch: {last}", version, response.status_code)
                if signed and response.status_code in (401, 403):
                    # An expired or refused signed URL: the bearer closure endpoint instead.
                    bearer = self._closure_url(st, version)
                    if bearer is not None:
                        url, signed = bearer, False
                        continue
                if response.status_code in (404, 410) or response.status_code in (401, 403):
                    break  # permanent for this version: let a reconnect pick the current one
                continue
            if want is None or not want.startswith(HASH_PREFIX):
                last = "resync snapshot without a usable ETag to verify against"
                self._record(st, "snapshot", last, version)
                continue
            try:
                if len(response.content) > DEFAULT_LIMITS.max_archive_bytes:
                    raise ApplyMismatch("snapshot", "snapshot body is too large")
                tree = read_snapshot_tree(response.content)
                got = verify_snapshot(tree, want)
            except ApplyMismatch as exc:
                last = str(exc)
                self._record(st, "snapshot", last, version)
                continue
            return tree, got, etag if etag_hash == got else None
        raise _SnapshotFailed(last)

    # --- bookkeeping ------------------------------------------------------------------------
    def _commit(
        self, st: _Namespace, tree: dict[str, bytes], digest: str, version: int, etag: str | None
    ) -> None:
        with self._cond:
            st.tree, st.closure_hash, st.version, st.etag = tree, digest, version, etag
            self._cond.notify_all()
        if self.on_update is not None:
            try:
                self.on_update(st.label, version)
            except Exception:
                log.exception("flag subscriber on_update callback failed")

    def _record(
        self,
        st: _Namespace | None,
        point: str,
        message: str,
        version: int | None = None,
        status: int | None = None,
    ) -> RefreshError:
        err = RefreshError(point, message, time.time(), st.label if st else None, version, status)
        log.warning(
            "flag subscriber: %s%s: %s", f"{err.label} " if err.label else "", point, message
        )
        with self._cond:
            if st is not None:
                st.last_error = err
                st.bump(errors=1)
            self._last_error = err
        return err


def _etag_hash(etag: str | None, version: int) -> str | None:
    """The closure hash in `"v<version>-<hash>"`, if the ETag is for `version`."""
    match = _ETAG_RE.match(etag.strip()) if etag else None
    if match is None or int(match.group(1)) != version:
        return None
    return match.group(2)


def read_snapshot_tree(body: bytes) -> dict[str, bytes]:
    """`tarball.read_snapshot`, with its refusals as a snapshot mismatch."""
    try:
        return read_snapshot(body)
    except FlagError as exc:
        raise ApplyMismatch("snapshot", f"snapshot is not a closure tarball: {exc}") from exc
