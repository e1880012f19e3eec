"""StreamFunction's entry (functions/stream/run.sh) started exactly as the Lambda Web
Adapter starts it: AWS_LWA_PORT set, exec'd as the handler, readiness polled on /v0/health
over loopback, then requests proxied to 127.0.0.1:$AWS_LWA_PORT with the invocation's
x-amzn-lambda-context / x-amzn-request-context headers. AWS is a moto server on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import httpx
import pytest

from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
RUN_SH = REPO / "functions" / "stream" / "run.sh"
KEYS_PARAMETER = "/headwater/test/api-keys"
API_KEY = "hw-stream-key"
DEADLINE_S = 30.0


def _wait_http(url: str, proc: subprocess.Popen[bytes], deadline_s: float) -> httpx.Response:
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < end:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"process exited with {proc.returncode} before {url} answered:\n{out}")
        try:
            return httpx.get(url, timeout=1.0)
        except httpx.TransportError as exc:
            last = exc
            time.sleep(0.1)
    pytest.fail(f"{url} not ready after {deadline_s}s: {last!r}")


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> int | None:
    """SIGTERM, then the exit code; None if it had to be killed (not a clean exit)."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
        return None


@pytest.fixture
def lambda_env(
    moto_server: str,
    fake_aws_env: dict[str, str],
    free_port: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    port = free_port()
    env = {
        **fake_aws_env,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        # what Lambda + template.yaml give the function
        "LAMBDA_TASK_ROOT": str(RUN_SH.parent),
        "AWS_LAMBDA_FUNCTION_NAME": "headwater-test-StreamFunction",
        "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
        "AWS_LWA_INVOKE_MODE": "response_stream",
        "AWS_LWA_READINESS_CHECK_PATH": "/v0/health",
        "AWS_LWA_PORT": str(port),
        # template.yaml's /var/task/logging.json, the task root being functions/stream here
        "UVICORN_LOG_CONFIG": str(RUN_SH.parent / "logging.json"),
        "HEADWATER_RESOURCE_PREFIX": "hw-stream",
        "HEADWATER_BUCKET": "hw-stream-data",
        "HEADWATER_API_KEYS_PARAMETER": KEYS_PARAMETER,
        "HEADWATER_DASHBOARD_TOPIC": "sentiment",
        "HEADWATER_DASHBOARD_POLL_MS": "5000",
        "HEADWATER_DASHBOARD_MAX_CONNECTIONS": "100",
        "POWERTOOLS_SERVICE_NAME": "headwater-test",
        "POWERTOOLS_METRICS_NAMESPACE": "HeadwaterTest",
        # local stand-ins: the layer's /opt/python is the source tree, AWS is moto
        "PYTHONPATH": str(REPO / "layers" / "headwater"),
        "AWS_ENDPOINT_URL": moto_server,
    }
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    settings = Settings.from_env(env)
    ensure_resources(settings, AwsClients.create(settings))
    boto3.client("ssm").put_parameter(
        Name=KEYS_PARAMETER, Value=API_KEY, Type="SecureString", Overwrite=True
    )
    return env


def test_run_sh_serves_like_under_the_web_adapter(lambda_env: dict[str, str]) -> None:
    # GIVEN run.sh started the way /opt/bootstrap execs the handler
    proc = subprocess.Popen(
        [str(RUN_SH)],
        cwd=lambda_env["LAMBDA_TASK_ROOT"],
        env=lambda_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{lambda_env['AWS_LWA_PORT']}"
    try:
        # WHEN the adapter's readiness check polls /v0/health THEN it turns 200
        ready = _wait_http(f"{base}/v0/health", proc, DEADLINE_S)
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ok"

        auth = {"authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=base, headers=auth, timeout=10.0) as client:
            # AND a proxied append + diff work against the shared moto server
            created = client.put("/v0/topics/demo", json={})
            assert created.status_code == 201, created.text
            appended = client.post("/v0/topics/demo", json={"records": [{"data": {"x": 1}}]})
            assert appended.status_code == 200, appended.text
            assert appended.json()["seqs"] == [1]
            diff = client.post("/v0/topics/demo/diff", json={"from_seq": 0})
            assert diff.status_code == 200, diff.text
            assert [(r["$seq"], r["data"]) for r in diff.json()["records"]] == [(1, {"x": 1})]

            # AND the /api/v2 dashboard is served here (its SSE routes need this URL)
            status = client.get("/api/v2/stream/status")
            assert status.status_code == 200, status.text
            assert status.json()["max_connections"] == 100
            assert status.json()["connections"] == 0
            with client.stream("GET", "/api/v2/stream") as sse:
                assert sse.status_code == 200
                assert sse.headers["content-type"] == "text/event-stream"
                assert sse.headers["x-accel-buffering"] == "no"
                lines = sse.iter_lines()
                assert next(lines) == "retry: 3000"
                first = [next(lines) for _ in range(4)]
            assert first[1] == "event: metrics" and first[2].startswith("id: evt_"), first
            assert '"total":0' in first[3], first

            # AND the keys came from SSM: a wrong token is refused
            denied = client.get("/v0/topics", headers={"authorization": "Bearer nope"})
            assert denied.status_code == 401, denied.text

            # AND a request the adapter proxies carries its invocation's ids
            invocation = {
                "x-amzn-lambda-context": json.dumps(
                    {"request_id": "inv-7f3a", "deadline": 1, "invoked_function_arn": "arn"}
                ),
                "x-amzn-request-context": json.dumps({"requestId": "url-req-42"}),
            }
            missing = client.get("/v0/topics/nope", headers=invocation)
            assert missing.status_code == 404, missing.text
    finally:
        # THEN SIGTERM (what Lambda sends at shutdown) stops it cleanly
        code = _stop(proc)
        output = proc.stdout.read().decode() if proc.stdout else ""
    # uvicorn shuts down gracefully, then re-raises the captured SIGTERM: -15 is clean
    assert code in (0, -signal.SIGTERM), output
    assert "Traceback" not in output, output
    # AND whatever the process logged is JSON lines (CloudWatch Logs Insights fields)
    lines = [json.loads(line) for line in filter(str.strip, output.splitlines())]
    assert all(isinstance(line, dict) for line in lines), output
    # AND the proxied invocation logged its request line with its ids (only that one: the
    # readiness checks and the header-less requests above carry none)
    requests = [line for line in lines if line.get("message") == "request"]
    assert len(requests) == 1, output
    assert requests[0]["function_request_id"] == "inv-7f3a", requests
    assert requests[0]["correlation_id"] == "url-req-42", requests
    assert (requests[0]["method"], requests[0]["path"], requests[0]["status"]) == (
        "GET",
        "/v0/topics/nope",
        404,
    )
    # AND emitted its metrics in CloudWatch's embedded metric format
    emf = [line for line in lines if "_aws" in line]
    assert len(emf) == 1, output
    (directive,) = emf[0]["_aws"]["CloudWatchMetrics"]
    assert {m["Name"] for m in directive["Metrics"]} == {"Requests", "ServerErrors", "Duration"}
    assert directive["Dimensions"] == [["function_name"]]
    assert (emf[0]["Requests"], emf[0]["ServerErrors"]) == (1, 0)
    assert emf[0]["function_name"] == "headwater-test-StreamFunction"
