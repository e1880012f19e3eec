"""Touch (spec §7A, the state-protocol profile's touch routes) across server processes: a
wait parked in one uvicorn process is woken by an append made through another, both on one
emulator (the in-process cases are in tests/api/test_v1_touch.py)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx
import pytest

from headwater.dev.emulator import MotoServer
from headwater.durable import touch
from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e

JSON = {"Content-Type": "application/json"}
TODOS = "public.todos"
FIELDS = [{"name": "tenantId", "encoding": "string"}, {"name": "status", "encoding": "string"}]
TID = touch.template_id(TODOS, ["status", "tenantId"])


def url(name: str, sub: str = "") -> str:
    return f"/v1/stream/{name}" + (f"/{sub}" if sub else "")


def change(op: str, value: Any, entity: str = TODOS, key: str = "1") -> dict[str, Any]:
    return {"type": entity, "key": key, "headers": {"operation": op}, "value": value}


def todo(tenant: str, status: str, title: str = "t") -> dict[str, Any]:
    return {"id": "1", "tenantId": tenant, "status": status, "title": title}


@pytest.mark.timeout(120)
def test_a_wait_parked_in_one_server_process_is_woken_by_an_append_through_another(
    tmp_path: Any,
) -> None:
    """The same through two real server processes (uvicorn) sharing one emulator."""
    with MotoServer() as emulator:
        cluster = Cluster(emulator, f"touch-{uuid.uuid4().hex[:8]}")
        try:
            a, b = (cluster.start_server(str(tmp_path)).url for _ in range(2))
            with httpx.Client(timeout=30) as http:
                assert http.put(f"{a}{url('x')}", headers=JSON).status_code == 201
                profile = {"profile": {"kind": "state-protocol", "touch": {"enabled": True}}}
                r = http.post(f"{b}{url('x', '_profile')}", json=profile)
                assert r.status_code == 200, r.text
                body = {"templates": [{"entity": TODOS, "fields": FIELDS}]}
                r = http.post(f"{b}{url('x', 'touch/templates/activate')}", json=body)
                assert r.status_code == 200, r.text
                cursor = http.get(f"{a}{url('x', 'touch/meta')}").json()["cursor"]
            watch = touch.watch_key(TID, ["open", "t1"])
            result: dict[str, Any] = {}

            def park() -> None:
                t0 = time.monotonic()
                r = httpx.post(
                    f"{a}{url('x', 'touch/wait')}",
                    json={"cursor": cursor, "keys": [watch], "timeoutMs": 4_000},
                    timeout=30,
                )
                result.update(status=r.status_code, body=r.json(), s=time.monotonic() - t0)

            waiter = threading.Thread(target=park)
            waiter.start()
            time.sleep(0.5)
            records = [change("insert", todo("t2", "open")), change("insert", todo("t1", "open"))]
            for rec in records:  # the first is not for this wait
                r = httpx.post(f"{b}{url('x')}", json=[rec], timeout=30)
                assert r.status_code == 204, r.text
            waiter.join(30)
            assert result["status"] == 200 and result["body"]["touched"] is True, result
            assert result["body"]["bucketMaxSourceOffsetSeq"] == "2", result
            assert result["s"] < 3.5, result
        finally:
            for server in cluster.servers:
                server.stop()
