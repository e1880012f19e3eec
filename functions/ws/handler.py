"""WsFunction entry point: /v0/ws on an API Gateway WebSocket API (routes $connect,
$disconnect and $default; requestContext.routeKey says which).

Lambda function URLs cannot upgrade a connection, so on AWS API Gateway holds the sockets
and calls this function once per event:

- $connect: the bearer (Authorization header, or ?token=) is checked exactly as the
  uvicorn socket checks it; a missing or wrong key answers 401 (API Gateway refuses the
  upgrade). The connection takes a slot of the deployment-wide stream cap
  (TOPICS_MAX_SSE_CONNECTIONS; 429 when full) and is stored with its principal and the
  management endpoint derived from the request (domain + stage), so nothing else needs
  configuring to post to it.
- $default: one command, run by http/ws_commands.Commands (the uvicorn socket's parser,
  authorization, publish and subscribe logic) over stored subscriptions; frames go out
  with post_to_connection. After `subscribed`, the backlog up to the head is delivered in
  the same invocation; later frames come from the forwarder (functions/forwarder).
- $disconnect: the connection and its subscriptions are removed.

Thin by design: no AWS client at import; everything is built on the first invocation that
needs it and kept for the execution environment's life. $connect and $disconnect need the
keys, the connection store and the cap (`Gate`: ws/gate.py, no engine); the log engine
and the command code are imported on the first $default message (`Runtime`)."""

from __future__ import annotations

import gc

# INIT, the cold start every environment pays: no cyclic garbage collection while the imports
# and module-level objects below allocate; at the end of the module they are frozen out of
# every later collection and collection resumes (docs/operations.md "Cold start").
gc.disable()

import base64
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from headwater import jsoncodec
from headwater.access.keys import KeyStore
from headwater.engine.quotas import WS_CONNECTIONS, Quotas
from headwater.errors import HeadwaterError, error_body
from headwater.obs import function_logger, traced
from headwater.parameters import load_api_keys
from headwater.settings import ENV_API_KEYS_PARAMETER, Settings
from headwater.storage.clients import AwsClients
from headwater.storage.quota import DynamoQuotaStore
from headwater.storage.ws_connections import DynamoWsStore
from headwater.ws.gate import drop_connection, new_connection, now_s

# $default runs the /v0 commands over the log engine: that code is imported on the first
# message, not at INIT ($connect and $disconnect need none of it; docs/operations.md).
if TYPE_CHECKING:
    from headwater.services import Services
    from headwater.ws.gateway import Delivery

logger = function_logger()  # the core's loggers write through it too

# Leave this much of the invocation for the cursor write after the last backlog frame.
SAFETY_MARGIN_S = 5.0


@dataclass(slots=True)
class Gate:
    """What $connect and $disconnect need: the API keys, the connection store and the
    deployment-wide stream cap (its counter item is the one the engines' quotas use)."""

    settings: Settings
    clients: AwsClients
    keys: KeyStore
    store: DynamoWsStore
    quotas: Quotas


@dataclass(slots=True)
class Runtime:
    """What $default needs besides the gate: the services (the engine) and delivery."""

    svc: Services
    store: DynamoWsStore
    delivery: Delivery


_gate: Gate | None = None
_runtime: Runtime | None = None


def gate() -> Gate:
    global _gate
    if _gate is None:
        settings = Settings.from_env()
        clients = AwsClients.create(settings)
        keys = KeyStore.parse(
            load_api_keys(settings, os.environ.get(ENV_API_KEYS_PARAMETER) or None)
        )
        store = DynamoWsStore(clients.dynamodb, settings)
        quotas = Quotas(
            DynamoQuotaStore(clients.dynamodb, settings),
            settings.caps,
            {WS_CONNECTIONS: lambda: store.count_connections(now_s())},
        )
        _gate = Gate(settings, clients, keys, store, quotas)
    return _gate


def runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        from headwater.services import LazyServices
        from headwater.storage.ws_connections import ApiGatewayPoster
        from headwater.ws.gateway import Delivery

        g = gate()
        svc = LazyServices(g.settings, g.clients, g.keys, None).get()
        poster = ApiGatewayPoster(g.settings.region)
        _runtime = Runtime(svc, g.store, Delivery(svc.engine, g.store, poster, svc.quotas))
    return _runtime


def management_endpoint(request_context: dict[str, Any], region: str) -> str:
    """Where post_to_connection goes for this API stage. A custom domain name is not the
    management API's host: use the API's own execute-api host then."""
    domain = str(request_context.get("domainName", ""))
    stage = request_context.get("stage", "")
    if not domain.endswith(".amazonaws.com"):
        domain = f"{request_context.get('apiId')}.execute-api.{region}.amazonaws.com"
    return f"https://{domain}/{stage}"


def _refusal(exc: HeadwaterError) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", **exc.headers}
    if exc.status in (429, 503):
        headers.setdefault("Retry-After", "1")
    body = jsoncodec.dumps(error_body(exc)).decode()
    return {"statusCode": exc.status, "headers": headers, "body": body}


def _bearer_inputs(event: dict[str, Any]) -> tuple[str | None, str | None]:
    headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
    multi = event.get("multiValueQueryStringParameters") or {}
    single = event.get("queryStringParameters") or {}
    tokens = multi.get("token") or ([single["token"]] if single.get("token") else [])
    return headers.get("authorization"), (tokens[0] if tokens else None)


def on_connect(g: Gate, event: dict[str, Any]) -> dict[str, Any]:
    ctx = event["requestContext"]
    try:
        principal = g.keys.authenticate(*_bearer_inputs(event))
        g.quotas.reserve(WS_CONNECTIONS)
    except HeadwaterError as exc:
        logger.info("websocket refused", status=exc.status, code=exc.code)
        return _refusal(exc)
    endpoint = management_endpoint(ctx, g.settings.region)
    conn = new_connection(principal, ctx["connectionId"], endpoint, int(time.time() * 1000))
    try:
        g.store.put_connection(conn)
    except HeadwaterError as exc:
        g.quotas.release(WS_CONNECTIONS)
        return _refusal(exc)
    logger.info("websocket connected", connection_id=conn.connection_id, key_id=conn.key_id)
    return {"statusCode": 200}


def on_disconnect(g: Gate, event: dict[str, Any]) -> dict[str, Any]:
    cid = event["requestContext"]["connectionId"]
    conn = drop_connection(g.store, g.quotas, cid)
    logger.info("websocket disconnected", connection_id=cid, known=conn is not None)
    return {"statusCode": 200}


def _raw(event: dict[str, Any]) -> str | bytes:
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        return base64.b64decode(body)  # a binary frame: Commands answers it with an error
    return str(body)


async def on_message(rt: Runtime, event: dict[str, Any], deadline: float) -> None:
    import asyncio

    from headwater.engine.ports.ws import ConnectionGone
    from headwater.errors import Unauthorized
    from headwater.ws.commands import Commands
    from headwater.ws.frames import error_frame
    from headwater.ws.gateway import StoredSubscriptions, principal_of

    ctx = event["requestContext"]
    cid = ctx["connectionId"]
    delivery = rt.delivery
    conn = await asyncio.to_thread(rt.store.get_connection, cid, now_s())
    if conn is None:
        # Not registered (expired, or cleaned up after a failed post): say so and close.
        endpoint = management_endpoint(ctx, rt.svc.settings.region)
        frame = error_frame(None, Unauthorized("connection is not registered; reconnect"))
        try:
            await delivery.post(endpoint, cid, frame)
            await asyncio.to_thread(delivery.poster.close, endpoint, cid)
        except ConnectionGone:
            pass
        return
    gone = False

    async def send(frame: bytes) -> None:
        nonlocal gone
        if not gone:
            try:
                await delivery.post(conn.endpoint, cid, frame)
            except ConnectionGone:
                gone = True

    subs = StoredSubscriptions(rt.store, conn)
    await Commands(rt.svc, principal_of(conn), subs, send).prepare(_raw(event)).run()
    for sub in subs.added:  # the backlog of what was just subscribed, up to the head
        if gone:
            break
        try:
            result = await delivery.deliver(sub, deadline)
        except HeadwaterError as exc:
            # The subscription stays; the forwarder continues from its cursor on the
            # topic's next append (or the client subscribes again from its last to_seq).
            logger.warning("websocket backlog delivery failed", topic=sub.topic, code=exc.code)
            await send(error_frame(None, exc))
            continue
        gone = gone or result.gone
    if gone:
        await asyncio.to_thread(delivery.drop_connection, cid)


# API Gateway's requestContext.requestId (the same path for WebSocket events).
@traced  # EnableTracing: Powertools Tracer around the rest (obs.traced)
@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True
)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    route = event.get("requestContext", {}).get("routeKey")
    if route == "$connect":
        return on_connect(gate(), event)
    if route == "$disconnect":
        return on_disconnect(gate(), event)
    import asyncio

    rt = runtime()
    remaining_s = context.get_remaining_time_in_millis() / 1000
    deadline = time.monotonic() + max(remaining_s - SAFETY_MARGIN_S, 1.0)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(on_message(rt, event, deadline))
    finally:
        loop.close()
    return {"statusCode": 200}


gc.freeze()
gc.enable()
