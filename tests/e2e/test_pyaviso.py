"""ECMWF's own aviso client (PyPI `pyaviso` 2.4.2: the Rust client behind PyO3) against a
real Headwater server process started as `make run` starts it (`python -m
headwater.dev.server`, serving infra/notification_schema.example.yaml by default): schema
discovery, notify, replay from an id, a live listen receiving a notify (with a spatial
filter), the admin calls, API keys as bearer tokens, and SIGTERM closing open streams with
`server_shutdown`."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pyaviso
import pytest

from headwater.dev.emulator import MotoServer
from headwater.settings import ENV_NOTIFICATION_SCHEMA, Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from tests.e2e.conftest import Cluster, ServerProcess, _session

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

INSIDE = "(52.5,13.4,52.6,13.5,52.5,13.6,52.4,13.5,52.5,13.4)"
OUTSIDE = "(10.0,10.0,10.2,10.0,10.2,10.2,10.0,10.2,10.0,10.0)"
EXAMPLE_EVENT_TYPES = ["dissemination", "extreme", "mars", "test_polygon"]


def _start(
    emulator: MotoServer, tmp: str, monkeypatch: pytest.MonkeyPatch, **env: str
) -> ServerProcess:
    prefix = f"e2e-{uuid.uuid4().hex[:8]}"
    ensure_resources(
        Settings(resource_prefix=prefix), AwsClients.create(Settings(), session=_session(emulator))
    )
    monkeypatch.delenv(ENV_NOTIFICATION_SCHEMA, raising=False)  # make run's default schema
    return Cluster(emulator, prefix).start_server(tmp, **env)


@pytest.fixture(scope="module")
def server(emulator: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:
        proc = _start(emulator, str(tmp_path_factory.mktemp("pyaviso")), mp)
    try:
        yield proc.url
    finally:
        proc.stop()


@pytest.fixture
def client(server: str) -> pyaviso.AvisoClient:
    return pyaviso.AvisoClient(base_url=server, auth=pyaviso.Anonymous(), timeout=10)


def mars(stream: str, step: str = "1") -> dict[str, str]:
    return {
        "class": "od",
        "expver": "0001",
        "domain": "g",
        "date": "20250706",
        "time": "1200",
        "stream": stream,
        "step": step,
    }


def replay_all(
    client: pyaviso.AvisoClient, event_type: str, filter: dict[str, Any], start_from: int = 0
) -> list[pyaviso.Notification]:
    it = client.listen(event_type, filter=filter, start_from=start_from, mode="replay_only")
    return list(it)


class Listener:
    """A live `listen()` on a thread, collecting what it receives."""

    def __init__(self, client: pyaviso.AvisoClient, event_type: str, filter: dict[str, Any]):
        self.received: list[pyaviso.Notification] = []
        self.errors: list[BaseException] = []
        self.iterator = client.listen(event_type, filter=filter)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for n in self.iterator:
                self.received.append(n)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def wait_for(self, count: int, timeout_s: float = 15.0) -> list[pyaviso.Notification]:
        deadline = time.monotonic() + timeout_s
        while len(self.received) < count and time.monotonic() < deadline and not self.errors:
            time.sleep(0.05)
        assert not self.errors, self.errors
        return list(self.received)


def test_schema_discovery(client: pyaviso.AvisoClient) -> None:
    catalog = client.schema()
    assert catalog.status == "success" and catalog.event_types == EXAMPLE_EVENT_TYPES
    assert catalog.total_schemas == 4
    one = client.schema_for("test_polygon")
    assert one.event_type == "test_polygon"
    assert one.schema["identifier"]["polygon"]["type"] == "PolygonHandler"
    with pytest.raises(pyaviso.AvisoError):
        client.schema_for("nope")


def test_notify_then_replay_from_an_id(client: pyaviso.AvisoClient) -> None:
    stream = f"ens.member.{uuid.uuid4().hex[:8]}"
    payloads: list[Any] = [{"note": "first", "values": [1.0, 2]}, "second", None]
    for i, payload in enumerate(payloads):
        response = client.notify(
            event_type="mars", identifier=mars(stream, step=str(i)), payload=payload
        )
        assert response.status == "success" and response.request_id
    everything = replay_all(client, "mars", {"class": "od", "stream": stream})
    assert [n.payload for n in everything] == payloads
    seqs = [n.sequence for n in everything]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    first = everything[0]
    assert first.event_type == "mars" and first.identifier["stream"] == stream
    assert first.cloudevent is not None and first.cloudevent["id"] == f"mars@{seqs[0]}"
    assert first.cloudevent["type"] == "int.ecmwf.aviso.mars"
    # start_from is the last sequence the caller saw: the replay resumes after it
    rest = replay_all(client, "mars", {"class": "od", "stream": stream}, start_from=seqs[0])
    assert [n.sequence for n in rest] == seqs[1:]
    # a constraint filter, sent as aviso's constraint object
    late = replay_all(client, "mars", {"class": "od", "stream": stream, "step": {"gte": 1}})
    assert [n.payload for n in late] == ["second", None]


def test_live_listen_receives_a_notify(client: pyaviso.AvisoClient) -> None:
    stream = f"live.{uuid.uuid4().hex[:8]}"
    listener = Listener(client, "mars", {"class": "od", "stream": stream})
    try:
        # live only: keep notifying until the listener is connected and receives one
        sent: list[str] = []
        deadline = time.monotonic() + 15
        while not listener.received and time.monotonic() < deadline:
            note = f"live-{len(sent)}"
            client.notify(event_type="mars", identifier=mars(stream), payload=note)
            sent.append(note)
            time.sleep(0.3)
        client.notify(event_type="mars", identifier=mars(stream), payload="after")
        got = listener.wait_for(2)
    finally:
        listener.iterator.close()
    assert got and got[0].payload in sent
    # once connected, every notification arrives, in order: a contiguous run of what was sent
    everything = [*sent, "after"]
    first = everything.index(got[0].payload)
    payloads = [n.payload for n in got]
    assert payloads == everything[first : first + len(payloads)]
    seqs = [n.sequence for n in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_live_listen_with_a_point_filter(client: pyaviso.AvisoClient) -> None:
    tag = uuid.uuid4().hex[:8]
    listener = Listener(client, "test_polygon", {"time": "1200", "point": "52.55,13.5"})
    try:
        deadline = time.monotonic() + 15
        n = 0
        while not listener.received and time.monotonic() < deadline:
            for polygon, where in ((OUTSIDE, "outside"), (INSIDE, "inside")):
                client.notify(
                    event_type="test_polygon",
                    identifier={"date": "20250706", "time": "1200", "polygon": polygon},
                    payload={"where": where, "tag": tag, "n": n},
                )
            n += 1
            time.sleep(0.3)
        got = listener.wait_for(1)
    finally:
        listener.iterator.close()
    assert got and all(x.payload["where"] == "inside" for x in got)


def test_admin_calls(client: pyaviso.AvisoClient) -> None:
    stream = f"admin.{uuid.uuid4().hex[:8]}"
    for note in ("keep", "drop"):
        client.notify(event_type="mars", identifier=mars(stream), payload=note)
    seqs = [n.sequence for n in replay_all(client, "mars", {"class": "od", "stream": stream})]
    client.delete_notification(f"mars@{seqs[1]}")
    left = replay_all(client, "mars", {"class": "od", "stream": stream})
    assert [n.payload for n in left] == ["keep"]
    with pytest.raises(pyaviso.AvisoError):
        client.delete_notification(f"mars@{seqs[1]}")  # 404 now
    client.wipe_stream("MARS")
    assert replay_all(client, "mars", {"class": "od", "stream": stream}) == []
    client.notify(event_type="mars", identifier=mars(stream), payload="after-wipe")
    (again,) = replay_all(client, "mars", {"class": "od", "stream": stream})
    assert again.sequence > seqs[1]  # seqs are never reused
    client.wipe_all()
    assert replay_all(client, "mars", {"class": "od", "stream": stream}) == []


def test_api_keys_are_bearer_tokens(
    emulator: MotoServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = _start(
        emulator, str(tmp_path), monkeypatch, TOPICS_API_KEYS="writer-key:read+write,adm:admin"
    )
    try:
        writer = pyaviso.AvisoClient(base_url=proc.url, auth=pyaviso.Bearer("writer-key"))
        anonymous = pyaviso.AvisoClient(base_url=proc.url, auth=pyaviso.Anonymous())
        stream = f"auth.{uuid.uuid4().hex[:6]}"
        writer.notify(event_type="mars", identifier=mars(stream), payload="ok")
        # mars says auth: required: no key, no notify and no replay
        with pytest.raises(pyaviso.AvisoError):
            anonymous.notify(event_type="mars", identifier=mars(stream), payload="no")
        with pytest.raises(pyaviso.AvisoError):
            replay_all(anonymous, "mars", {"class": "od", "stream": stream})
        assert [
            n.payload for n in replay_all(writer, "mars", {"class": "od", "stream": stream})
        ] == ["ok"]
        with pytest.raises(pyaviso.AvisoError):
            writer.wipe_all()  # the admin routes need the admin scope
        pyaviso.AvisoClient(base_url=proc.url, auth=pyaviso.Bearer("adm")).wipe_all()
    finally:
        proc.stop()


def test_sigterm_closes_open_streams_with_server_shutdown(
    emulator: MotoServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = _start(emulator, str(tmp_path), monkeypatch)
    frames: list[tuple[str, dict[str, Any]]] = []
    try:
        body = {"event_type": "extreme", "identifier": {}}
        with httpx.stream("POST", f"{proc.url}/api/v1/watch", json=body, timeout=10) as resp:
            assert resp.status_code == 200
            event = None
            for line in resp.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event:
                    frames.append((event, json.loads(line[6:])))
                    if len(frames) == 1:
                        proc.proc.send_signal(signal.SIGTERM)
        # a clean stop: uvicorn ends by re-raising the signal it handled
        assert proc.proc.wait(timeout=15) in (0, -signal.SIGTERM)
    finally:
        proc.stop()
    assert frames[0][1]["type"] == "connection_established"
    assert frames[-1][0] == "connection-closing"
    assert frames[-1][1]["reason"] == "server_shutdown"


def test_make_run_refuses_a_bad_schema(
    emulator: MotoServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "schema.yaml"
    bad.write_text("notification_schema:\n  mars:\n    identifier:\n      class: {type: Nope}\n")
    with pytest.raises(RuntimeError, match="server exited early") as exited:
        _start(emulator, str(tmp_path), monkeypatch, HEADWATER_NOTIFICATION_SCHEMA=str(bad))
    log = str(exited.value)
    assert "refusing to start" in log and str(bad) in log and "mars" in log
