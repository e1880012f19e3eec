"""Probes (spec §8): liveness, readiness, and metrics in Prometheus text, OpenMetrics or
JSON. The text expositions are prometheus_client's: each scrape builds a registry holding one
collector over that scrape's snapshot, and prometheus_client's `choose_encoder` picks the
format from the Accept header (`application/openmetrics-text` gets OpenMetrics, `text/plain;
version=1.0.0` the 1.0.0 text format, anything else the Prometheus text format 0.0.4)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater import __version__, allocator
from headwater.access.keys import Principal
from headwater.engine import WATCH_SESSIONS
from headwater.engine.ports import Head
from headwater.errors import HeadwaterError, NotReady
from headwater.http.common import authorize, services
from headwater.http.lean_route import LeanRoute
from headwater.http.responses import json_response
from headwater.services import LazyServices, Services

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

router = APIRouter(route_class=LeanRoute)
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


GAUGE_HELP = {
    "topics_topics": "Live topics.",
    "topics_routers": "Routers.",
    "topics_records_live": "Live records over all topics.",
    "topics_bytes_live": "Live payload bytes over all topics.",
    "topics_queue_topics": "Topics of type queue.",
    "topics_queue_leases_in_flight": "Jobs under an active lease over all queues.",
    "topics_sse_connections": "Open SSE and WebSocket streams of this process.",
    "topics_watch_sessions": "Watch sessions.",
    "topics_ready": "1 when the process serves, 0 while it shuts down.",
    "topics_recovery_progress": "Recovery progress (always complete: no WAL to replay).",
    "topics_uptime_ms": "Milliseconds since the process started.",
    "topics_topic_metrics_truncated": "1 when the per-topic gauges do not cover every topic.",
    # This process's memory: what each budgeted cache and buffer holds, and its budget
    # (docs/configuration.md "Memory budgets").
    "headwater_memory_rss_bytes": "Resident memory of this process.",
    "headwater_memory_frame_cache_bytes": "Decoded frames cached (HEADWATER_FRAME_CACHE_BYTES).",
    "headwater_memory_frame_cache_budget_bytes": "The frame cache's budget.",
    "headwater_memory_head_cache_bytes": (
        "Heads remembered for appends (HEADWATER_HEAD_CACHE_BYTES)."
    ),
    "headwater_memory_head_cache_budget_bytes": "The head cache's budget.",
    "headwater_memory_known_heads_bytes": "Heads remembered for live readers (the same budget).",
    "headwater_memory_known_heads_budget_bytes": "The known heads' budget.",
    "headwater_memory_stream_buffers_bytes": "Frames queued for SSE and WebSocket sockets.",
    "headwater_memory_stream_buffers_budget_bytes": (
        "Open streams times HEADWATER_STREAM_BUFFER_BYTES (each stream's send budget)."
    ),
}
BY_CLASS_HELP = "Live topics per durability class."
PER_TOPIC = (
    ("head_seq", "Highest assigned seq per topic."),
    ("earliest_seq", "First live seq per topic."),
    ("records_live", "Live records per topic."),
    ("bytes_live", "Live payload bytes per topic."),
    ("queue_ready", "Claimable jobs per queue topic."),
    ("queue_in_flight", "Jobs under an active lease per queue topic."),
)


@dataclass(frozen=True, slots=True)
class _Scrape:
    gauges: dict[str, float]  # unlabelled, by metric name (GAUGE_HELP's order)
    by_class: dict[str, int]  # durability class -> topics
    per_topic: list[tuple[str, dict[str, int]]]
    truncated: bool

    def json_gauges(self) -> dict[str, float]:
        """The JSON snapshot's gauges: the labelled series under their sample names."""
        out = dict(self.gauges)
        for cls, n in sorted(self.by_class.items()):
            out[f'topics_topics_by_class{{class="{cls}"}}'] = n
        return out


def _families(scrape: _Scrape) -> Iterator[Metric]:
    """One scrape's snapshot as prometheus_client metric families."""
    from prometheus_client.core import GaugeMetricFamily

    for name, value in scrape.gauges.items():
        yield GaugeMetricFamily(name, GAUGE_HELP[name], value=value)
    by_class = GaugeMetricFamily("topics_topics_by_class", BY_CLASS_HELP, labels=["class"])
    for cls, n in sorted(scrape.by_class.items()):
        by_class.add_metric([cls], n)
    yield by_class
    for field, help_text in PER_TOPIC:
        family = GaugeMetricFamily(f"topics_topic_{field}", help_text, labels=["topic"])
        for topic, vals in scrape.per_topic:
            if field in vals:
                family.add_metric([topic], vals[field])
        yield family


def exposition(scrape: _Scrape, accept: str) -> tuple[bytes, str]:
    """The scrape in the text format `accept` asks for, and its content type. prometheus_client
    is imported here, at the first scrape: importing it costs a Lambda cold start ~0.1 s."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.registry import Collector

    class ScrapeCollector(Collector):
        def collect(self) -> Iterator[Metric]:
            return _families(scrape)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ScrapeCollector())
    encode, content_type = choose_encoder(accept)
    return encode(registry), content_type


def memory_gauges(svc: Services) -> dict[str, float]:
    """What this process's budgeted caches and buffers hold, and their budgets."""
    from headwater.http.sse import Outbox

    out: dict[str, float] = {"headwater_memory_rss_bytes": allocator.rss_bytes() or 0}
    for pool, (held, budget) in svc.engine.memory().items():
        out[f"headwater_memory_{pool}_bytes"] = held
        out[f"headwater_memory_{pool}_budget_bytes"] = budget
    return {
        **out,
        "headwater_memory_stream_buffers_bytes": Outbox.total_bytes(),
        "headwater_memory_stream_buffers_budget_bytes": (
            svc.limits.streams * svc.settings.caps.stream_buffer_bytes
        ),
    }


async def _snapshot(svc: Services, principal: Principal) -> _Scrape:
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
        **memory_gauges(svc),
    }
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
    return _Scrape(gauges, by_class, per_topic, truncated)


@router.get("/v0/metrics")
async def metrics(request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "read")  # ANONYMOUS (open) without keys
    scrape = await _snapshot(svc, principal)
    accept = request.headers.get("accept", "")
    if "application/json" in accept:
        body: dict[str, Any] = {
            "gauges": scrape.json_gauges(),
            "topics": {name: vals for name, vals in scrape.per_topic},
            "truncated": scrape.truncated,
        }
        return json_response(request, body)
    text, content_type = exposition(scrape, accept)
    return Response(text, headers={"Content-Type": content_type})
