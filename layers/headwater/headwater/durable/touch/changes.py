"""State Protocol changes and what each touches: the canonical change of an entry, the
templates active at it, and the keys it touches (its table key; each template's watch,
membership and projected-field keys from ``value``/``old_value``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from headwater.durable.touch.keys import (
    ABSENT,
    encode_arg,
    membership_key,
    projected_field_key,
    table_key,
    watch_key,
)


@dataclass(frozen=True, slots=True)
class Change:
    entity: str
    key: str
    op: str  # insert | update | delete
    before: object = ABSENT  # old_value
    after: object = ABSENT  # value


def canonical_change(record: object) -> Change | None:
    """The change a State Protocol record describes; None for control messages and anything
    that is not a change (reference ``deriveStateProtocolChanges``)."""
    if not isinstance(record, Mapping):
        return None
    headers = record.get("headers")
    if not isinstance(headers, Mapping) or isinstance(headers.get("control"), str):
        return None
    op = headers.get("operation")
    entity, key = record.get("type"), record.get("key")
    if op not in ("insert", "update", "delete"):
        return None
    if not isinstance(entity, str) or not entity.strip():
        return None
    if not isinstance(key, str) or not key.strip():
        return None
    return Change(entity, key, op, record.get("old_value", ABSENT), record.get("value", ABSENT))


@dataclass(frozen=True, slots=True)
class Template:
    id: str
    entity: str
    fields: tuple[str, ...]  # sorted by name
    encodings: tuple[str, ...]
    active_from: int  # covers entries with seq > active_from
    created_ms: int
    last_seen_ms: int
    ttl_ms: int

    def live(self, now_ms: int) -> bool:
        return self.last_seen_ms + self.ttl_ms >= now_ms

    def dump(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "entity": self.entity,
            "fields": list(self.fields),
            "encodings": list(self.encodings),
            "from": self.active_from,
            "created": self.created_ms,
            "seen": self.last_seen_ms,
            "ttl": self.ttl_ms,
        }

    @staticmethod
    def load(raw: Mapping[str, Any]) -> Template:
        return Template(
            str(raw["id"]),
            str(raw["entity"]),
            tuple(map(str, raw["fields"])),
            tuple(map(str, raw["encodings"])),
            int(raw["from"]),
            int(raw["created"]),
            int(raw["seen"]),
            int(raw["ttl"]),
        )


@dataclass(frozen=True, slots=True)
class Touch:
    """What one entry touches: routing keys, or everything (a before image the profile's
    ``onMissingBefore: error`` requires is missing: every wait wakes, none misses it)."""

    keys: frozenset[str] = frozenset()
    everything: bool = False


def _projected(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is ABSENT or value is None or isinstance(value, str | bool | int)


def _same(a: object, b: object) -> bool:
    """JavaScript ``===`` on projected values (undefined, null, strings, booleans, numbers)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is b


def _changed_fields(
    before: Mapping[str, Any], after: Mapping[str, Any], skip: set[str]
) -> list[str]:
    out = []
    for name in dict.fromkeys([*before, *after]):
        if name in skip:
            continue
        b, a = before.get(name, ABSENT), after.get(name, ABSENT)
        if _projected(b) and _projected(a) and not _same(b, a):
            out.append(name)
    return out


def _template_args(obj: object, tpl: Template) -> list[str] | None:
    if not isinstance(obj, Mapping):
        return None
    out = []
    for name, enc in zip(tpl.fields, tpl.encodings, strict=True):
        encoded = encode_arg(obj.get(name, ABSENT), enc)
        if encoded is None:
            return None
        out.append(encoded)
    return out


def touched(change: Change, templates: Sequence[Template], on_missing_before: str) -> Touch:
    """The keys `change` touches given the templates active at its entry (reference
    ``processor_worker.ts``, fine-key granularity: this server never degrades)."""
    keys = {table_key(change.entity)}
    for tpl in templates:
        after, before = _template_args(change.after, tpl), _template_args(change.before, tpl)
        skip = set(tpl.fields)
        if change.op == "insert":
            if after is not None:
                keys |= {watch_key(tpl.id, after), membership_key(tpl.id, after)}
        elif change.op == "delete":
            if before is not None:
                keys |= {watch_key(tpl.id, before), membership_key(tpl.id, before)}
        elif before is not None:
            keys.add(watch_key(tpl.id, before))
            if after is None:
                keys.add(membership_key(tpl.id, before))
                continue
            keys.add(watch_key(tpl.id, after))
            mb, ma = membership_key(tpl.id, before), membership_key(tpl.id, after)
            if mb != ma:
                keys |= {mb, ma}
            elif isinstance(change.before, Mapping) and isinstance(change.after, Mapping):
                for name in _changed_fields(change.before, change.after, skip):
                    keys.add(projected_field_key(tpl.id, name, after))
        elif on_missing_before == "error":
            return Touch(frozenset(keys), everything=True)
        elif on_missing_before == "skipBefore" and after is not None:
            keys |= {watch_key(tpl.id, after), membership_key(tpl.id, after)}
            if isinstance(change.after, Mapping):
                for name, value in change.after.items():
                    if name not in skip and _projected(value):
                        keys.add(projected_field_key(tpl.id, name, after))
        # onMissingBefore "coarse": the table key only
    return Touch(frozenset(keys))
