"""Topic configuration (spec §0.10): defaults, validation, clamps, and durability resolution."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from headwater.errors import InvalidRequest
from headwater.names import is_valid_topic_name

DURABILITY_CLASSES = ("ephemeral", "memory", "disk", "fsync")

DEFAULTS: dict[str, Any] = {
    "type": "log",
    "ttl_ms": 0,
    "cap_records": 0,
    "cap_bytes": 0,
    "discard": "old",
    "durable": False,
    "durability": "disk",
    "priority": None,
    "auto_priority": True,
    "auto_create": True,
    "idempotency_window_ms": 120_000,
    "dedupe_node": True,
    "lease_ms": 30_000,
    "claim_jitter_ms": 0,
    "max_deliveries": 0,
    "dead_letter": None,
    "leases_durable": False,
}


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's resolved config as a typed value, decoded once per head (``Head.cfg``) from
    the stored dict (``Head.config``, what the API shows and what storage keeps). Fields and
    defaults are exactly DEFAULTS'; a stored config missing a field (written by an older
    version) gets its default; keys that are not config fields are ignored here."""

    type: str = "log"
    ttl_ms: int = 0
    cap_records: int = 0
    cap_bytes: int = 0
    discard: str = "old"
    durable: bool = False
    durability: str = "disk"
    priority: int | None = None
    auto_priority: bool = True
    auto_create: bool = True
    idempotency_window_ms: int = 120_000
    dedupe_node: bool = True
    lease_ms: int = 30_000
    claim_jitter_ms: int = 0
    max_deliveries: int = 0
    dead_letter: str | None = None
    leases_durable: bool = False

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> TopicConfig:
        if not raw:
            return _DEFAULT_CONFIG
        return cls(**{k: raw[k] for k in _FIELDS if k in raw})

    @property
    def is_queue(self) -> bool:
        return self.type == "queue"

    @property
    def rejects_over_cap(self) -> bool:
        """discard:"reject" with a cap: appends that would pass a cap are refused."""
        return self.discard == "reject" and (self.cap_records > 0 or self.cap_bytes > 0)

    def over_cap(self, count: int, nbytes: int) -> bool:
        """`count` records of `nbytes` pass a cap (whatever discard says)."""
        return (self.cap_records > 0 and count > self.cap_records) or (
            self.cap_bytes > 0 and nbytes > self.cap_bytes
        )


_FIELDS: Final = tuple(f.name for f in fields(TopicConfig))
_DEFAULT_CONFIG: Final = TopicConfig()

_U64_MAX = (1 << 64) - 1
_UINT_FIELDS = (
    "ttl_ms",
    "cap_records",
    "cap_bytes",
    "idempotency_window_ms",
    "lease_ms",
    "claim_jitter_ms",
    "max_deliveries",
)
_BOOL_FIELDS = ("durable", "auto_priority", "auto_create", "dedupe_node", "leases_durable")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _field_error(name: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"config.{name} {why}", detail={"field": name})


def validate_config_patch(raw: object, topic: str | None = None) -> dict[str, Any]:
    """Validate a (partial) config object from a request; returns only the fields given,
    type-checked and clamped. Unknown fields are rejected so typos don't pass silently."""
    if not isinstance(raw, dict):
        raise InvalidRequest("config must be a JSON object")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in DEFAULTS:
            raise _field_error(name, "is not a known config field")
        if name == "type":
            if value not in ("log", "queue"):
                raise _field_error(name, 'must be "log" or "queue"')
        elif name == "discard":
            if value not in ("old", "reject"):
                raise _field_error(name, 'must be "old" or "reject"')
        elif name == "durability":
            if value not in DURABILITY_CLASSES:
                raise _field_error(name, f"must be one of {', '.join(DURABILITY_CLASSES)}")
        elif name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise _field_error(name, "must be a boolean")
        elif name in _UINT_FIELDS:
            if not _is_int(value) or not 0 <= value <= _U64_MAX:
                raise _field_error(name, "must be a non-negative integer")
            if name == "lease_ms":
                value = min(max(value, 100), 86_400_000)
            elif name == "claim_jitter_ms":
                value = min(value, 5000)
        elif name == "priority":
            if value is not None:
                if not _is_int(value):
                    raise _field_error(name, "must be an integer or null")
                value = min(max(value, -1000), 1000)
        elif name == "dead_letter" and value is not None:
            if not isinstance(value, str) or not is_valid_topic_name(value):
                raise _field_error(name, "must be a valid topic name or null")
            if topic is not None and value == topic:
                raise _field_error(name, "must differ from the topic itself")
        out[name] = value
    return out


def resolve(patch: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge a validated patch over a base config (defaults when None) and resolve the
    durability class: an explicit `durability` wins, else it follows `durable`."""
    cfg = dict(DEFAULTS if base is None else base)
    cfg.update({k: v for k, v in patch.items() if k not in ("durable", "durability")})
    if "durability" in patch:
        cfg["durability"] = patch["durability"]
    elif "durable" in patch:
        cfg["durability"] = "fsync" if patch["durable"] else "disk"
    elif base is None:
        cfg["durability"] = "disk"
    cfg["durable"] = cfg["durability"] == "fsync"
    return cfg
