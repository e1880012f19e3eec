#!/bin/bash
# StreamFunction entry, run by the Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap).
# LWA proxies the function URL's response stream to 127.0.0.1:$AWS_LWA_PORT and waits for
# GET $AWS_LWA_READINESS_CHECK_PATH (/v0/health) before the first invoke. uvicorn streams
# (SSE, long-poll) through the protocol with the stalled-client guards (header deadline,
# bounded unsent bytes, reset of sockets that stopped reading; headwater/http/serving.py);
# loopback bind is all LWA needs, and the app enforces bearer keys (from
# HEADWATER_API_KEYS_PARAMETER, fetched lazily by create_app) anyway.
set -euo pipefail
TASK_ROOT="${LAMBDA_TASK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
export PYTHONPATH="${TASK_ROOT}:/opt/python${PYTHONPATH:+:${PYTHONPATH}}"
exec python -m uvicorn --factory headwater.obs:stream_app \
    --http headwater.http.serving:GuardedHttpProtocol \
    --host 127.0.0.1 --port "${AWS_LWA_PORT:-${PORT:-8080}}" \
    --no-access-log --no-server-header --log-level warning \
    --lifespan auto --timeout-keep-alive 75 --timeout-graceful-shutdown 3
