"""FlagSubscriber against the real app under uvicorn (a background thread on a free loopback
port, in-process moto): it follows published versions, its trees and hashes equal closures
computed here from the published files and the spec's rules, it reconnects through a server
restart and recovers with a snapshot, and a 403 stops it. Against a raw socket that goes
silent: the read timeout drops the connection, and stop() ends a blocked read."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import socket
import struct
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import uvicorn

from headwater.dev.server import GracefulServer
from headwater.http.app import create_app
from headwater.settings import FlagSettings, Settings
from headwater.storage.clients import AwsClients
from headwater_client.flags import FlagSubscriber

WRITER = "writer_" + "w" * 30
READER = "reader_" + "r" * 30
STRANGER = "strngr_" + "s" * 30
TOKENS = [
    {
        "token": WRITER,
        "tenant": "acme",
        "kind": "service",
        "permissions": ["manifest.read", "manifest.write"],
        "namespaces": ["*"],
    },
    {
        "token": READER,
        "tenant": "acme",
        "kind": "service",
        "permissions": ["manifest.read"],
        "namespaces": ["billing", "growth"],
    },
    {
        "token": STRANGER,
        "tenant": "acme",
        "kind": "service",
        "permissions": ["manifest.read"],
        "namespaces": ["growth"],
    },
]


# --- the spec's closure and hash, written out independently -------------------------------
def refs(doc: Any) -> set[str]:
    """Segment references: any `segment` (string) or `segments` (strings) key, any depth."""
    out: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "segment" and isinstance(v, str):
                out.add(v)
            elif k == "segments" and isinstance(v, list):
                out |= {s for s in v if isinstance(s, str)}
            else:
                out |= refs(v)
    elif isinstance(doc, list):
        for v in doc:
            out |= refs(v)
    return out


def expected_closure(files: Mapping[str, str], flags: list[str] | None) -> dict[str, bytes]:
    def uses(path: str) -> set[str]:
        return refs(tomllib.loads(files[path])) if path in files else set()

    if flags is None:  # `*`: everything, orphan segments included
        return {p: c.encode() for p, c in files.items()}
    keep = {"namespace.toml"} | {f"flags/{f}.toml" for f in flags if f"flags/{f}.toml" in files}
    todo = [s for p in list(keep) for s in uses(p)]
    while todo:
        seg = f"segments/{todo.pop()}.toml"
        if seg in files and seg not in keep:
            keep.add(seg)
            todo.extend(uses(seg))
    return {p: files[p].encode() for p in keep}


def spec_hash(files: Mapping[str, bytes]) -> str:
    buf = b""
    for path in sorted(files, key=lambda p: p.encode()):
        raw = path.encode()
        buf += struct.pack(">I", len(raw)) + raw + hashlib.sha256(files[path]).digest()
    return "sha256:" + hashlib.sha256(buf).hexdigest()


# --- a real server in a thread ----------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(settings: Settings, aws: AwsClients, port: int) -> Iterator[str]:
    app = create_app(settings, aws)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
        lifespan="on",
    )
    server = GracefulServer(config, app)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        assert not thread.is_alive(), "uvicorn did not stop"


@pytest.fixture
def flag_settings(settings: Settings) -> Settings:
    flags = FlagSettings(tokens_raw=json.dumps(TOKENS), signing_key="k" * 32, keepalive_sec=1)
    return dataclasses.replace(settings, flags=flags)


def publish(base: str, slug: str, files: Mapping[str, str]) -> int:
    resp = httpx.put(
        f"{base}/api/v1/tenants/acme/namespaces/{slug}/manifest",
        json={"files": dict(files)},
        headers={"Authorization": f"Bearer {WRITER}"},
        timeout=10,
    )
    assert resp.status_code in (200, 201), resp.text
    return int(resp.json()["version"])


def evolve(rng: random.Random, files: dict[str, str], step: int) -> dict[str, str]:
    """A new valid tree: rewire a flag's segment, edit a flag, add or drop a segment use."""
    new = dict(files)
    segs = sorted(p[len("segments/") : -5] for p in new if p.startswith("segments/"))
    flag = rng.choice(["a", "b", "c", "d"])
    kind = step % 4
    if kind == 0:
        new[f"flags/{flag}.toml"] = f'segment = "{rng.choice(segs)}"\nstep = {step}\n'
    elif kind == 1:
        new[f"flags/{flag}.toml"] = f"on = {str(step % 2 == 0).lower()}\nstep = {step}\n"
    elif kind == 2:
        name = f"s{step}"
        new[f"segments/{name}.toml"] = f'segments = ["{rng.choice(segs)}"]\n'
        new[f"flags/{flag}.toml"] = f'segments = ["{name}"]\n'
    else:
        new["namespace.toml"] = f'name = "billing"\nrev = {step}\n'
    return new


BASE_TREE = {
    "namespace.toml": 'name = "billing"\n',
    "flags/a.toml": 'segment = "staff"\n',
    "flags/b.toml": "on = true\n",
    "flags/c.toml": 'rules = [{ segments = ["beta"] }]\n',
    "flags/d.toml": "on = false\n",
    "segments/staff.toml": 'segments = ["office"]\n',
    "segments/office.toml": "ips = []\n",
    "segments/beta.toml": "pct = 5\n",
    "segments/orphan.toml": "x = 1\n",
}
NARROW = ["a", "b", "zzz-not-yet"]


def test_follows_versions_and_recovers_after_restart(
    flag_settings: Settings, aws: AwsClients
) -> None:
    port = free_port()
    rng = random.Random(8)
    files = dict(BASE_TREE)
    growth = {"namespace.toml": 'name = "growth"\n', "flags/x.toml": "x = true\n"}
    sub: FlagSubscriber | None = None
    # `other` is a second instance over the same tables: it publishes while `port` is down
    with serving(flag_settings, aws, free_port()) as other:
        with serving(flag_settings, aws, port) as base:
            publish(base, "billing", files)
            publish(base, "growth", growth)
            sub = FlagSubscriber(
                base,
                READER,
                {"billing": NARROW, "growth": "*"},
                reconnect_min_s=0.05,
                reconnect_max_s=0.5,
                read_timeout_s=5,
            ).start()
            assert sub.wait_for_version("billing", 1, 10), sub.last_refresh_error()
            assert sub.wait_for_version("growth", 1, 10), sub.last_refresh_error()
            narrow = expected_closure(files, NARROW)
            assert sub.tree("billing") == narrow
            assert sub.closure_hash("billing") == spec_hash(narrow)
            assert sub.tree("growth") == expected_closure(growth, None)
            assert sub.closure_hash("growth") == spec_hash(expected_closure(growth, None))
            skipped = 0
            for step in range(1, 10):
                files = evolve(rng, files, step)
                version = publish(base, "billing", files)
                assert version == step + 1
                if expected_closure(files, NARROW) == narrow:
                    skipped += 1  # no event: the narrow closure did not change
                    continue
                narrow = expected_closure(files, NARROW)
                assert sub.wait_for_version("billing", version, 10), sub.last_refresh_error()
                assert sub.version("billing") == version
                assert sub.tree("billing") == narrow, step
                assert sub.closure_hash("billing") == spec_hash(narrow)
            assert skipped >= 1  # the sequence exercises the no-event rule too
            stats = sub.stats().namespaces["billing"]
            assert stats.inline_applied >= 3, stats  # deltas, not snapshots, after the first
            assert stats.fallbacks == 0 and stats.errors == 0, sub.last_error("billing")
            assert sub.version("growth") == 1
            connections = sub.stats().connections
            snapshots = stats.snapshots_applied
        # the first server is gone (the subscriber keeps retrying); a version lands elsewhere
        files["flags/a.toml"] = 'segments = ["orphan", "beta"]\n'
        version = publish(other, "billing", files)
        narrow = expected_closure(files, NARROW)
        time.sleep(0.3)  # a few refused reconnects
        with serving(flag_settings, aws, port):
            assert sub.wait_for_version("billing", version, 10), sub.last_refresh_error()
            assert sub.tree("billing") == narrow
            assert sub.closure_hash("billing") == spec_hash(narrow)
            after = sub.stats()
            assert after.connections > connections
            assert after.namespaces["billing"].snapshots_applied == snapshots + 1
            # growth did not move: its reconnect snapshot is a conditional GET answered 304
            deadline = time.monotonic() + 5
            while sub.stats().namespaces["growth"].not_modified < 1:
                assert time.monotonic() < deadline, sub.stats()
                time.sleep(0.02)
            assert after.namespaces["growth"].snapshots_applied == 1
            assert sub.fatal_error is None
            err = sub.last_refresh_error()
            assert err is not None and err.point == "connection"  # the refused reconnects
            sub.stop()
        assert not sub.running


def test_forbidden_token_stops_the_subscriber(flag_settings: Settings, aws: AwsClients) -> None:
    with serving(flag_settings, aws, free_port()) as base:
        publish(base, "billing", BASE_TREE)
        with FlagSubscriber(base, STRANGER, {"billing": "*"}, reconnect_min_s=0.05) as sub:
            assert not sub.wait_for_version("billing", 1, 10)
            fatal = sub.fatal_error
            assert fatal is not None and fatal.status == 403 and "forbidden" in fatal.message
            deadline = time.monotonic() + 5
            while sub.running and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not sub.running
            assert sub.stats().connections == 0 and sub.tree("billing") is None


@contextmanager
def stalling_events() -> Iterator[str]:
    """An events endpoint that answers 200 and one `:keepalive`, then goes silent with the
    connection open (a raw socket server: the app always keeps alive)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            request = b""
            while b"\r\n\r\n" not in request:
                got = conn.recv(4096)
                if not got:
                    break
                request += got
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\nc\r\n:keepalive\n\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        listener.close()
        for conn in held:
            conn.close()
        thread.join(5)


def test_a_silent_stream_is_dropped_after_the_read_timeout() -> None:
    with stalling_events() as base:
        sub = FlagSubscriber(base, READER, {"billing": "*"}, read_timeout_s=0.3)
        started = time.monotonic()
        assert sub.run_once() == (False, None)
        assert time.monotonic() - started < 5
        err = sub.last_refresh_error()
        assert err is not None and err.point == "connection" and "ReadTimeout" in err.message
        assert sub.stats().connections == 1
        sub.stop()


def test_stop_interrupts_a_blocked_read() -> None:
    with stalling_events() as base:
        sub = FlagSubscriber(base, READER, {"billing": "*"}, read_timeout_s=60).start()
        deadline = time.monotonic() + 10
        while sub.stats().connections == 0:
            assert time.monotonic() < deadline, "never connected"
            time.sleep(0.01)
        time.sleep(0.1)  # past the keepalive: blocked reading
        started = time.monotonic()
        sub.stop()
        assert time.monotonic() - started < 3 and not sub.running
        assert sub.last_refresh_error() is None  # a stop is not a connection failure


ADMIN = "admin__" + "a" * 30


def test_superadmin_resync_and_churn_snapshot(settings: Settings, aws: AwsClients) -> None:
    """Superadmin labels (`tenant/slug`); with two versions retained, an event against a
    pruned prior version after an inline one is `resync` `version_too_old`; a change of more
    than 32 files arrives as a snapshot mid-stream."""
    tokens = [
        *TOKENS,
        {
            "token": ADMIN,
            "tenant": "*",
            "kind": "superadmin",
            "permissions": ["manifest.read"],
            "namespaces": ["*"],
        },
    ]
    flags = FlagSettings(
        tokens_raw=json.dumps(tokens),
        signing_key="k" * 32,
        keepalive_sec=1,
        retain_versions=2,
        retain_sec=0,
    )
    live = dataclasses.replace(settings, flags=flags)
    files = dict(BASE_TREE)
    growth = {"namespace.toml": 'name = "growth"\n', "flags/x.toml": "x = true\n"}
    with serving(live, aws, free_port()) as base:
        publish(base, "billing", files)
        publish(base, "growth", growth)
        subs = {"acme/billing": ["a"], "acme/growth": "*"}
        with FlagSubscriber(base, ADMIN, subs, reconnect_min_s=0.05) as sub:
            assert sub.wait_for_version("acme/billing", 1, 10), sub.last_refresh_error()
            assert sub.wait_for_version("acme/growth", 1, 10), sub.last_refresh_error()

            files["flags/a.toml"] = 'segment = "beta"\n'
            assert publish(base, "billing", files) == 2
            assert sub.wait_for_version("acme/billing", 2, 10), sub.last_refresh_error()
            assert sub.stats().namespaces["acme/billing"].inline_applied == 1

            files["flags/d.toml"] = "on = true\n"  # outside the closure: no event
            assert publish(base, "billing", files) == 3
            files["flags/a.toml"] = 'segment = "staff"\n'
            assert publish(base, "billing", files) == 4  # prior delivered (2) is now pruned
            assert sub.wait_for_version("acme/billing", 4, 10), sub.last_refresh_error()
            narrow = expected_closure(files, ["a"])
            assert sub.tree("acme/billing") == narrow
            assert sub.closure_hash("acme/billing") == spec_hash(narrow)
            stats = sub.stats().namespaces["acme/billing"]
            assert (stats.resyncs, stats.inline_applied, stats.snapshots_applied) == (1, 1, 2)

            growth.update({f"flags/f{i:02}.toml": f"n = {i}\n" for i in range(40)})
            assert publish(base, "growth", growth) == 2
            assert sub.wait_for_version("acme/growth", 2, 10), sub.last_refresh_error()
            assert sub.tree("acme/growth") == expected_closure(growth, None)
            gstats = sub.stats().namespaces["acme/growth"]
            assert (gstats.snapshots_applied, gstats.inline_applied) == (2, 0)
            assert sub.last_refresh_error() is None


def test_same_content_in_two_namespaces_survives_a_restart(
    flag_settings: Settings, aws: AwsClients
) -> None:
    shared = "on = true\n"
    port = free_port()
    with serving(flag_settings, aws, port) as base:
        publish(base, "billing", {"namespace.toml": 'name = "b"\n', "flags/a.toml": shared})
        publish(base, "growth", {"namespace.toml": 'name = "g"\n', "flags/x.toml": shared})
    with serving(flag_settings, aws, port) as base:  # a new process: cold caches
        resp = httpx.get(
            f"{base}/api/v1/tenants/acme/namespaces/growth/manifest",
            headers={"Authorization": f"Bearer {READER}"},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["files"]["flags/x.toml"] == shared
