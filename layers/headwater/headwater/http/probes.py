"""Probes (spec §8): liveness, readiness, and metrics in Prometheus text or JSON."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater import __version__
from headwater.engine.ports import Head
from headwater.engine.quotas import WATCH_SESSIONS
from headwater.errors import HeadwaterError, NotReady
from headwater.http.auth import Principal
from headwater.http.common import authorize, services
from headwater.http.responses import json_response
from headwater.services import LazyServices, Services

router = APIRouter()
PER_TOPIC_LIMIT = 1000  # per-topic gauge block is bounded (topics_topic_metrics_truncated)
AGGREGATE_LIMIT = 10_000  # aggregates sum over at most this many topics per scrape


def _probe_auth(request: Request) -> None:
    # Liveness must not depend on building services (on Lambda that fetches the keys from
    # SSM): only an explicitly authenticated probe builds them.
    lazy: LazyServices = request.app.state.services
    if lazy.settings.probe_auth:
        svc = services(request)
        authorize(request, svc)


@router.get("/v0/health")
@router.get("/healthz")
@router.get("/health")
async def health(request: Request) -> Response:
    _probe_auth(request)
    lazy: LazyServices = request.app.state.services
    return json_response(
        request, {"status": "ok", "version": __version__, "uptime_ms": lazy.uptime_ms()}
    )


@router.get("/v0/ready")
@router.get("/readyz")
async def ready(request: Request) -> Response:
    _probe_auth(request)
    svc = services(request)
    if svc.shutting_down:
        raise HeadwaterError(
            "shutting down", status=503, code="shutting_down", headers={"Retry-After": "5"}
        )
    try:
        topics = await svc.engine.count_topics()
    except HeadwaterError as exc:
        raise NotReady(
            "storage is not reachable",
            detail={"replay_progress": 0.0},
            headers={"Retry-After": "5"},
        ) from exc
    return json_response(
        request, {"status": "ready", "wal_replay_complete": True, "topics": topics}
    )


async def _heads(svc: Services, principal: Principal) -> tuple[list[Head], bool]:
    """The topics the scrape covers (at most AGGREGATE_LIMIT), and whether more exist: every
    topic, or for a prefix-limited key the ones its allowlist covers."""
    if not principal.restricted:
        return await svc.engine.all_topics(AGGREGATE_LIMIT)
    prefixes = principal.listing_prefixes()
    heads: list[Head] = []
    after: str | None = None
    while prefixes and len(heads) < AGGREGATE_LIMIT:
        page = await svc.engine.list_topics(
            prefixes, after, min(1000, AGGREGATE_LIMIT - len(heads))
        )
        heads.extend(page.heads)
        if page.next_after is None:
            return heads, False
        after = page.next_after
    return heads, bool(prefixes)


async def _snapshot(
    svc: Services, principal: Principal
) -> tuple[dict[str, float], list[tuple[str, dict[str, int]]], bool]:
    """Gauges and per-topic series as `principal` may see them. A prefix-limited key gets the
    topic and router figures of its allowlist only (no other tenant's names, nor its sizes);
    the process figures (connections, sessions, readiness, uptime) are the process's."""
    heads, more = await _heads(svc, principal)
    routers = [
        r for r in await svc.routers.list_all() if principal.allows_names(r.name, r.source, r.dest)
    ]
    by_class: dict[str, int] = {}
    for h in heads:
        cls = h.cfg.durability
        by_class[cls] = by_class.get(cls, 0) + 1
    truncated = more or len(heads) > PER_TOPIC_LIMIT
    gauges: dict[str, float] = {
        "topics_topics": (
            await svc.engine.count_topics() if more and not principal.restricted else len(heads)
        ),
        "topics_routers": len(routers),
        "topics_records_live": sum(h.count for h in heads),
        "topics_bytes_live": sum(h.bytes for h in heads),
        "topics_queue_topics": sum(1 for h in heads if h.cfg.is_queue),
        "topics_queue_leases_in_flight": 0,  # filled below
        "topics_sse_connections": svc.limits.streams,  # this process (§11 scope)
        "topics_watch_sessions": await asyncio.to_thread(svc.quotas.current, WATCH_SESSIONS),
        "topics_ready": 0 if svc.shutting_down else 1,
        "topics_recovery_progress": 1.0,
        "topics_uptime_ms": svc.uptime_ms(),
        "topics_topic_metrics_truncated": 1 if truncated else 0,
    }
    for cls, n in sorted(by_class.items()):
        gauges[f'topics_topics_by_class{{class="{cls}"}}'] = n
    per_topic = [
        (
            h.topic,
            {
                "head_seq": h.head_seq,
                "earliest_seq": h.first_live_seq,
                "records_live": h.count,
                "bytes_live": h.bytes,
            },
        )
        for h in heads[:PER_TOPIC_LIMIT]
    ]
    # Queue counters are evaluated from the lease items (one query per queue topic).
    in_flight = 0
    for name, vals in per_topic:
        head = next(h for h in heads if h.topic == name)
        if head.cfg.is_queue:
            c = await svc.queues.counters(head)
            vals["queue_ready"] = c.ready
            vals["queue_in_flight"] = c.in_flight
            in_flight += c.in_flight
    gauges["topics_queue_leases_in_flight"] = in_flight
    return gauges, per_topic, truncated


def _escape(label: str) -> str:
    return label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@router.get("/v0/metrics")
async def metrics(request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "read")  # ANONYMOUS (open) without keys
    gauges, per_topic, truncated = await _snapshot(svc, principal)
    if "application/json" in request.headers.get("accept", ""):
        body: dict[str, Any] = {
            "gauges": gauges,
            "topics": {name: vals for name, vals in per_topic},
            "truncated": truncated,
        }
        return json_response(request, body)
    lines: list[str] = []
    for name, value in gauges.items():
        base = name.split("{")[0]
        if not any(line.startswith(f"# TYPE {base} ") for line in lines):
            lines.append(f"# TYPE {base} gauge")
        lines.append(f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}")
    for field, help_text in (
        ("head_seq", "Highest assigned seq per topic."),
        ("earliest_seq", "First live seq per topic."),
        ("records_live", "Live records per topic."),
        ("bytes_live", "Live payload bytes per topic."),
        ("queue_ready", "Claimable jobs per queue topic."),
        ("queue_in_flight", "Jobs under an active lease per queue topic."),
    ):
        lines.append(f"# HELP topics_topic_{field} {help_text}")
        lines.append(f"# TYPE topics_topic_{field} gauge")
        for name, vals in per_topic:
            if field in vals:
                lines.append(f'topics_topic_{field}{{topic="{_escape(name)}"}} {vals[field]}')
    return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8")
