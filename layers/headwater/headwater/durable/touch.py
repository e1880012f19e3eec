"""State-protocol live invalidation (``/touch/*``), after the reference server (``prisma/streams``:
``docs/live.md``, ``src/touch/live_keys.ts``, ``src/touch/processor_worker.ts``,
``src/touch/live_templates.ts``, ``src/profiles/stateProtocol/routes.ts``).

No process keeps anything the answer depends on. The reference derives touches into an in-memory
journal per process; here a wait derives them from the stream's own log, so any process (Lambda
instance) answers any wait:

* **Cursor** ``<epoch>:<seq>``: ``seq`` is a position in the stream's log, ``epoch`` 16 hex
  digits naming the stream's incarnation (a hash of its topic, epoch and creation time). Another
  epoch (deleted and created again, another stream) is ``stale``.
* **Wait** reads the entries after the cursor, derives the keys each State Protocol change
  touches (its table key; for the templates active at that entry, its watch, membership and
  projected-field keys from ``value``/``old_value``) and intersects them with the wait's keys;
  at the tail it parks on the stream's head (``DurableStreams.wait``) until more is appended.
  A wait examines at most ``SCAN_RECORDS`` entries / ``SCAN_BYTES`` payload bytes.
* **Templates** are one immutable S3 object per revision (``TemplateSet``), named by the
  stream's state (``StreamState.touch_key``) and made current by the conditional head
  write that also guards appends. A template activated by that write covers exactly the
  entries after the tail the write proves (``active_from``), so every process derives the
  same keys for every entry. Inactivity TTLs are evaluated when read (no collector);
  heartbeats write only when the stored ``last_seen`` is older than ``heartbeat_every``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Any, Final

import xxhash

from headwater import jsoncodec
from headwater.durable import profiles
from headwater.durable.errors import StreamNotFound
from headwater.durable.offsets import encode_offset
from headwater.durable.service import DurableStreams
from headwater.durable.state import StreamState
from headwater.engine.ports import REGISTRY_PREFIX, Head
from headwater.errors import InvalidRequest, NotFound, StorageUnavailable
from headwater.names import object_key_component

ENCODINGS: Final = ("string", "int64", "bool", "datetime", "bytes")
MAX_TEMPLATES_PER_CALL: Final = 256
MAX_TEMPLATE_FIELDS: Final = 3
MAX_WAIT_KEYS: Final = 1024
MAX_EXACT_KEYS: Final = 16
MAX_TIMEOUT_MS: Final = 120_000
DEFAULT_TIMEOUT_MS: Final = 30_000
SCAN_RECORDS: Final = 20_000  # entries one wait examines at most
SCAN_BYTES: Final = 32 << 20  # payload bytes one wait examines at most
SCAN_SECONDS: Final = 3.0  # and for at most this long
PAGE_RECORDS: Final = 2_000
PAGE_BYTES: Final = 4 << 20
MIN_HEARTBEAT_MS: Final = 1_000
COMMIT_ATTEMPTS: Final = 16
DOC_CACHE: Final = 256
ZERO_ID: Final = "0000000000000000"
STALE_MESSAGE: Final = "cursor epoch mismatch; rerun/re-subscribe and start from cursor"
_HEX16 = re.compile(r"[0-9a-f]{16}")
_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_CURSOR = re.compile(r"([0-9a-fA-F]{16}):([0-9]+)")
_RETRY = {"Retry-After": "1"}
log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------ keys


def _hash(parts: Iterable[bytes]) -> str:
    return f"{xxhash.xxh3_64_intdigest(b''.join(parts)):016x}"


def _tpl(template_id: str) -> bytes:
    return int(template_id, 16).to_bytes(8, "big")


def _args(args: Sequence[str]) -> list[bytes]:
    out: list[bytes] = []
    for a in args:
        out += (b"\0", a.encode())
    return out


def table_key(entity: str) -> str:
    return _hash((b"tbl\0", entity.encode()))


def template_id(entity: str, fields_sorted: Sequence[str]) -> str:
    return _hash((b"tpl\0", entity.encode(), b"\0", b"\0".join(f.encode() for f in fields_sorted)))


def template_key(template: str) -> str:
    return _hash((b"tpl\0", _tpl(template)))


def membership_key(template: str, args: Sequence[str]) -> str:
    return _hash((b"mem\0", _tpl(template), *_args(args)))


def projected_field_key(template: str, field: str, args: Sequence[str]) -> str:
    return _hash((b"fld\0", _tpl(template), b"\0", field.encode(), *_args(args)))


def watch_key(template: str, args: Sequence[str]) -> str:
    return _hash((b"key\0", _tpl(template), *_args(args)))


def key_id(key: str) -> int:
    """The uint32 id of a routing key: the low 32 bits of a 16-hex-digit key, else xxh32."""
    s = key.strip().lower()
    if _HEX16.fullmatch(s):
        return int(s[8:], 16)
    return int(xxhash.xxh32_intdigest(s.encode()))


# ------------------------------------------------------------------- template arguments


def js_number(value: int | float) -> str | None:
    """ECMAScript ``String(number)`` (JSON numbers are doubles there); None if not finite."""
    try:
        x = float(value)
    except OverflowError:
        return None  # JavaScript reads such a literal as Infinity
    if not math.isfinite(x):
        return None
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    t = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, t.digits))
    exp = int(t.exponent)
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits = stripped
    k, n = len(digits), exp + len(digits)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        e = f"e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
        text = digits + e if k == 1 else f"{digits[0]}.{digits[1:]}{e}"
    return ("-" if x < 0 else "") + text


_ISO = re.compile(
    r"([+-]\d{6}|\d{4})(?:-(\d{2})(?:-(\d{2}))?)?"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?\s*([Zz]|[+-]\d{2}:?\d{2})?"
)


def iso_datetime(text: str) -> str | None:
    """``new Date(text).toISOString()`` for ISO 8601 and RFC 2822 dates (None: not a date).
    A date-time without an offset is read as UTC (JavaScript reads it in the server's zone)."""
    m = _ISO.fullmatch(text.strip())
    try:
        if m is not None:
            year, month, day, hh, mm, ss, frac, zone = m.groups()
            tz = UTC
            if zone and zone not in "Zz":
                sign = -1 if zone[0] == "-" else 1
                digits = zone[1:].replace(":", "")
                tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
            ms = int((frac or "0")[:3].ljust(3, "0"))
            dt = datetime(
                int(year),
                int(month or 1),
                int(day or 1),
                int(hh or 0),
                int(mm or 0),
                int(ss or 0),
                ms * 1000,
                tzinfo=tz,
            )
        else:
            dt = parsedate_to_datetime(text)
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
        dt = dt.astimezone(UTC)
    except (ValueError, TypeError, OverflowError, IndexError):
        return None
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:"
        f"{dt.second:02d}.{dt.microsecond // 1000:03d}Z"
    )


def encode_arg(value: object, encoding: str) -> str | None:
    """A template argument as the reference encodes it (``encodeTemplateArg``); None when the
    value cannot be encoded (no fine key for it)."""
    if value is None or value is ABSENT:
        return None
    if encoding == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        return js_number(value) if isinstance(value, int | float) else None
    if encoding == "int64":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return js_number(value)
        if isinstance(value, float):
            return js_number(value) if value.is_integer() else None
        if isinstance(value, str) and _INT.fullmatch(value.strip()):
            return value.strip()
        return None
    if encoding == "bool":
        return ("1" if value else "0") if isinstance(value, bool) else None
    if encoding == "datetime":
        return iso_datetime(value) if isinstance(value, str) else None
    if encoding == "bytes":
        return value if isinstance(value, str) else None
    return None


# --------------------------------------------------------------------- changes, touches


class _Absent:
    """A field the record does not have (JavaScript ``undefined``), unlike JSON ``null``."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


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


# ------------------------------------------------------------------------- template sets


@dataclass(frozen=True, slots=True)
class TemplateSet:
    """A stream's templates, with the activation rate limiter's bucket (None: full)."""

    templates: tuple[Template, ...] = ()
    tokens: float | None = None
    refill_ms: int = 0

    def live(self, now_ms: int) -> list[Template]:
        return [t for t in self.templates if t.live(now_ms)]

    def dump(self) -> bytes:
        body: dict[str, Any] = {"v": 1, "templates": [t.dump() for t in self.templates]}
        if self.tokens is not None:
            body["rate"] = [self.tokens, self.refill_ms]
        return jsoncodec.dumps(body)

    @staticmethod
    def load(raw: bytes) -> TemplateSet:
        body = jsoncodec.loads(raw)
        rate = body.get("rate")
        return TemplateSet(
            tuple(Template.load(t) for t in body.get("templates", ())),
            float(rate[0]) if rate else None,
            int(rate[1]) if rate else 0,
        )


@dataclass(frozen=True, slots=True)
class Decl:
    entity: str
    fields: tuple[tuple[str, object], ...]  # (name, encoding as given)


@dataclass(frozen=True, slots=True)
class Limits:
    per_stream: int | float
    per_entity: int | float
    per_minute: int | float

    @staticmethod
    def of(cfg: Mapping[str, Any]) -> Limits:
        t = cfg.get("templates") or {}
        return Limits(
            t.get("maxActiveTemplatesPerStream", 2048),
            t.get("maxActiveTemplatesPerEntity", 256),
            t.get("activationRateLimitPerMinute", 100),
        )


@dataclass(frozen=True, slots=True)
class Activation:
    doc: TemplateSet | None  # the set to store (None: nothing changed that must be stored)
    activated: list[Template]
    denied: list[dict[str, str]]


def heartbeat_every(cfg: Mapping[str, Any], ttl_ms: int) -> int:
    """How stale a stored last_seen may get before a heartbeat or activation writes it."""
    persist = (cfg.get("templates") or {}).get("lastSeenPersistIntervalMs", 300_000)
    return int(max(MIN_HEARTBEAT_MS, min(persist, ttl_ms / 2)))


def _utf16(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")  # JavaScript's string order


def _take_token(doc: TemplateSet, now: int, per_minute: float) -> tuple[bool, TemplateSet]:
    if per_minute <= 0:
        return True, doc
    tokens = per_minute if doc.tokens is None else doc.tokens
    since = now if doc.tokens is None else doc.refill_ms
    tokens = min(per_minute, tokens + max(0, now - since) * per_minute / 60_000)
    if tokens < 1:
        return False, replace(doc, tokens=tokens, refill_ms=now)
    return True, replace(doc, tokens=tokens - 1, refill_ms=now)


def plan_activation(
    doc: TemplateSet,
    decls: Sequence[Decl],
    *,
    ttl_ms: int,
    now_ms: int,
    tail: int,
    limits: Limits,
    cfg: Mapping[str, Any],
) -> Activation:
    """Activate `decls` on `doc` at tail `tail` (reference ``LiveTemplateRegistry.activate``):
    idempotent, not retroactive, rate-limited, evicting least recently seen templates past
    the caps. Expired templates are dropped."""
    live = {t.id: t for t in doc.live(now_ms)}
    changed = len(live) != len(doc.templates)
    bucket = doc
    activated: list[Template] = []
    denied: list[dict[str, str]] = []
    for d in decls:
        names = [n for n, _ in d.fields]
        if any(e not in ENCODINGS for _, e in d.fields) or len(set(names)) != len(names):
            denied.append({"templateId": ZERO_ID, "reason": "invalid"})
            continue
        ordered = sorted(d.fields, key=lambda f: _utf16(f[0]))
        fields = tuple(n for n, _ in ordered)
        encodings = tuple(str(e) for _, e in ordered)
        tid = template_id(d.entity, fields)
        existing = live.get(tid)
        if existing is None:
            ok, bucket = _take_token(bucket, now_ms, limits.per_minute)
            if not ok:
                denied.append({"templateId": tid, "reason": "rate_limited"})
                continue
            new = Template(tid, d.entity, fields, encodings, tail, now_ms, now_ms, ttl_ms)
            changed = True
        elif (existing.entity, existing.fields, existing.encodings) != (
            d.entity,
            fields,
            encodings,
        ):
            denied.append({"templateId": tid, "reason": "invalid"})
            continue
        else:
            new = replace(existing, last_seen_ms=now_ms, ttl_ms=ttl_ms)
            if ttl_ms != existing.ttl_ms or now_ms - existing.last_seen_ms >= heartbeat_every(
                cfg, ttl_ms
            ):
                changed = True
            else:
                new = existing
        live[tid] = new
        activated.append(new)
    protected = {t.id for t in activated}
    kept = _evict(list(live.values()), limits, protected)
    changed = changed or len(kept) != len(live)
    out = TemplateSet(tuple(kept), bucket.tokens, bucket.refill_ms) if changed else None
    return Activation(out, activated, denied)


def _evict(templates: list[Template], limits: Limits, protected: set[str]) -> list[Template]:
    """Retire the least recently seen templates past the per-entity, then per-stream caps
    (templates activated by this call last)."""

    def order(t: Template) -> tuple[bool, int, str]:
        return (t.id in protected, t.last_seen_ms, t.id)

    cap_entity, cap_stream = math.floor(limits.per_entity), math.floor(limits.per_stream)
    gone: set[str] = set()
    for entity in dict.fromkeys(t.entity for t in templates):
        group = [t for t in templates if t.entity == entity]
        if len(group) > cap_entity:
            gone |= {t.id for t in sorted(group, key=order)[: len(group) - cap_entity]}
    rest = [t for t in templates if t.id not in gone]
    if len(rest) > cap_stream:
        gone |= {t.id for t in sorted(rest, key=order)[: len(rest) - cap_stream]}
    return [t for t in templates if t.id not in gone]


def plan_heartbeat(
    doc: TemplateSet, ids: Iterable[str], now_ms: int, cfg: Mapping[str, Any]
) -> TemplateSet | None:
    """`doc` with the used templates' last_seen renewed, or None when no stored last_seen is
    stale enough to be worth a write (expired templates are not revived)."""
    used = set(ids)
    due = {
        t.id
        for t in doc.templates
        if t.id in used
        and t.live(now_ms)
        and now_ms - t.last_seen_ms >= heartbeat_every(cfg, t.ttl_ms)
    }
    if not due:
        return None
    kept = [
        replace(t, last_seen_ms=now_ms) if t.id in due else t
        for t in doc.templates
        if t.live(now_ms)
    ]
    return replace(doc, templates=tuple(kept))


# --------------------------------------------------------------------------- requests


def _bad(message: str) -> InvalidRequest:
    return InvalidRequest(message)


def _number(value: object) -> float | None:
    """A JSON number (not a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _uint32(value: object) -> bool:
    x = _number(value)
    return x is not None and x.is_integer() and 0 <= x <= 0xFFFFFFFF


def parse_ttl(raw: object, default: int | float, where: str) -> int:
    """An inactivity TTL in ms (``ABSENT``: the default)."""
    if raw is ABSENT:
        return math.floor(default)
    x = _number(raw)
    if x is None or x < 0:
        raise _bad(f"{where} must be a non-negative number (ms)")
    return math.floor(x)


def parse_decls(raw: object, where: str) -> list[Decl]:
    """Template declarations (reference ``parseTemplateDeclsResult``); encodings are checked by
    the activation (an unknown one is denied as ``invalid``, not refused)."""
    if not isinstance(raw, list) or not raw:
        raise _bad(f"{where} must be a non-empty array")
    if len(raw) > MAX_TEMPLATES_PER_CALL:
        raise _bad(f"{where} too large (max {MAX_TEMPLATES_PER_CALL})")
    invalid = _bad(f"{where} contains invalid template definitions")
    out = []
    for t in raw:
        if not isinstance(t, Mapping):
            raise invalid
        entity = t.get("entity")
        entity = entity.strip() if isinstance(entity, str) else ""
        fields = t.get("fields")
        if (
            not entity
            or not isinstance(fields, list)
            or not 1 <= len(fields) <= MAX_TEMPLATE_FIELDS
        ):
            raise invalid
        parsed = []
        for f in fields:
            name = f.get("name") if isinstance(f, Mapping) else None
            name = name.strip() if isinstance(name, str) else ""
            if not name:
                raise invalid
            parsed.append((name, f.get("encoding")))
        out.append(Decl(entity, tuple(parsed)))
    return out


@dataclass(frozen=True, slots=True)
class WaitRequest:
    cursor: str
    timeout_ms: float = DEFAULT_TIMEOUT_MS
    keys: tuple[str, ...] = ()
    key_ids: tuple[int, ...] = ()
    exact: bool = False
    template_ids_used: tuple[str, ...] = ()
    interest: str = "fine"
    declare: tuple[Decl, ...] = ()
    declare_ttl_ms: int = 0


def _unique(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(items))


def parse_wait(body: object, cfg: Mapping[str, Any]) -> WaitRequest:
    """A ``/touch/wait`` body, validated as the reference does (messages included)."""
    if not isinstance(body, Mapping):
        raise _bad("wait body must be a JSON object")
    keys_raw = body.get("keys", ABSENT)
    if keys_raw is not ABSENT and (
        not isinstance(keys_raw, list)
        or not all(isinstance(k, str) and k.strip() for k in keys_raw)
    ):
        raise _bad("wait.keys must be a non-empty string array when provided")
    keys = _unique(k.strip() for k in keys_raw) if isinstance(keys_raw, list) else ()
    if len(keys) > MAX_WAIT_KEYS:
        raise _bad(f"wait.keys too large (max {MAX_WAIT_KEYS})")
    ids_raw = body.get("keyIds", ABSENT)
    if ids_raw is not ABSENT and (
        not isinstance(ids_raw, list) or not all(_uint32(x) for x in ids_raw)
    ):
        raise _bad("wait.keyIds must be a non-empty uint32 array when provided")
    key_ids = _unique(int(x) for x in ids_raw) if isinstance(ids_raw, list) else ()
    if not keys and not key_ids:
        raise _bad("wait requires keys or keyIds")
    if len(key_ids) > MAX_WAIT_KEYS:
        raise _bad(f"wait.keyIds too large (max {MAX_WAIT_KEYS})")
    exact = body.get("exact", False)
    if not isinstance(exact, bool):
        raise _bad("wait.exact must be a boolean when provided")
    cursor = body.get("cursor")
    if not isinstance(cursor, str) or not cursor.strip():
        raise _bad("wait.cursor must be a non-empty string")
    timeout = _number(body.get("timeoutMs", DEFAULT_TIMEOUT_MS))
    if timeout is None:
        raise _bad("wait.timeoutMs must be a number (ms)")
    used_raw = body.get("templateIdsUsed")
    if isinstance(used_raw, list) and not all(isinstance(x, str) and x.strip() for x in used_raw):
        raise _bad("wait.templateIdsUsed must be a string array")
    used = _unique(x.strip() for x in used_raw) if isinstance(used_raw, list) else ()
    interest = body.get("interestMode", "fine")
    if interest not in ("fine", "coarse"):
        raise _bad("wait.interestMode must be 'fine' or 'coarse'")
    declare: tuple[Decl, ...] = ()
    ttl = 0
    raw_declare = body.get("declareTemplates")
    if isinstance(raw_declare, list) and raw_declare:
        declare = tuple(parse_decls(raw_declare, "wait.declareTemplates"))
        default = (cfg.get("templates") or {}).get("defaultInactivityTtlMs", 3_600_000)
        ttl = parse_ttl(body.get("inactivityTtlMs", ABSENT), default, "wait.inactivityTtlMs")
    return WaitRequest(
        cursor=cursor.strip(),
        timeout_ms=max(0, min(MAX_TIMEOUT_MS, timeout)),
        keys=keys,
        key_ids=key_ids,
        exact=exact,
        template_ids_used=used,
        interest=str(interest),
        declare=declare,
        declare_ttl_ms=ttl,
    )


@dataclass(frozen=True, slots=True)
class WaitPlan:
    """What a wait wakes on (reference: effective wait key translation)."""

    kind: str  # fineKey | tableKey (templateKey needs a degraded mode this server never enters)
    key_ids: frozenset[int]
    exact_keys: frozenset[str] = frozenset()
    fallback_ids: frozenset[int] = frozenset()

    def matches(self, touch: Touch) -> bool:
        if touch.everything:
            return True
        if self.exact_keys:
            return bool(self.exact_keys & touch.keys) or any(
                key_id(k) in self.fallback_ids for k in touch.keys
            )
        return any(key_id(k) in self.key_ids for k in touch.keys)


def plan_wait(req: WaitRequest, live: Sequence[Template]) -> WaitPlan:
    raw = set(req.key_ids) | {key_id(k) for k in req.keys}
    used = [t for t in req.template_ids_used if _HEX16.fullmatch(t)]
    tpl_ids = {key_id(template_key(t)) for t in used}
    kind, ids = "fineKey", set(raw)
    if req.interest == "coarse":
        kind = "tableKey"
        if used:
            entities = {t.entity for t in live if t.id in set(used)}
            ids = {key_id(table_key(e)) for e in entities}
    if req.exact and kind != "fineKey":
        raise _bad("wait.exact requires fine interest while runtime is in fine-key mode")
    exact: frozenset[str] = frozenset()
    if req.exact:
        normal = {k.lower() for k in req.keys}
        if not 1 <= len(normal) <= MAX_EXACT_KEYS or not all(_HEX16.fullmatch(k) for k in normal):
            raise _bad(f"wait.exact requires 1 to {MAX_EXACT_KEYS} literal 64-bit routing keys")
        exact = frozenset(normal)
    if kind == "fineKey" and not exact:
        ids |= tpl_ids  # template-key fallbacks (only a degraded reference emits them)
    if not ids:
        kind, ids = "fineKey", raw
    fallback = frozenset(tpl_ids) if kind == "fineKey" else frozenset()
    return WaitPlan(kind, frozenset(ids), exact, fallback)


# ------------------------------------------------------------------------------ storage

_docs: OrderedDict[str, TemplateSet] = OrderedDict()  # immutable revisions, by S3 key


@dataclass(frozen=True, slots=True)
class Live:
    """A touch-enabled stream as read: its head, state, touch config and templates."""

    head: Head
    state: StreamState
    cfg: dict[str, Any]
    templates: TemplateSet

    @property
    def epoch(self) -> str:
        return epoch_token(self.head, self.state)

    def cursor(self, seq: int | None = None) -> str:
        return f"{self.epoch}:{self.head.head_seq if seq is None else seq}"


def epoch_token(head: Head, state: StreamState) -> str:
    """16 hex digits naming this incarnation of this stream."""
    return _hash(
        (
            head.topic.encode(),
            b"\0",
            str(head.epoch).encode(),
            b"\0",
            str(state.created_ms).encode(),
        )
    )


def parse_cursor(raw: str) -> tuple[str, int] | None:
    m = _CURSOR.fullmatch(raw.strip())
    return None if m is None else (m.group(1).lower(), int(m.group(2)))


def touch_config(state: StreamState) -> dict[str, Any] | None:
    return profiles.touch_config(state.profile) if state.profile else None


async def _load_doc(streams: DurableStreams, state: StreamState) -> TemplateSet:
    key = state.touch_key
    if not key:
        return TemplateSet()
    doc = _docs.get(key)
    if doc is None:
        doc = TemplateSet.load(await streams.engine.get_blob(key))
        _docs[key] = doc
        while len(_docs) > DOC_CACHE:
            _docs.popitem(last=False)
    else:
        _docs.move_to_end(key)
    return doc


async def _live(
    streams: DurableStreams, name: str, head: Head | None = None, state: StreamState | None = None
) -> Live:
    """The stream (as given, else read strongly) with its templates. 404 unless touch is on.
    A revision superseded (and deleted) meanwhile is read again from the current head."""
    for attempt in range(3):
        if head is None or state is None or attempt:
            head, state = await streams.lookup(name)
        cfg = touch_config(state)
        if cfg is None:
            raise NotFound("touch not enabled")
        try:
            return Live(head, state, cfg, await _load_doc(streams, state))
        except StorageUnavailable:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def open_stream(streams: DurableStreams, name: str) -> Live:
    return await _live(streams, name)


async def _commit(streams: DurableStreams, name: str, live: Live, doc: TemplateSet) -> bool:
    head, state = live.head, live.state
    key = (
        f"{REGISTRY_PREFIX}{object_key_component(head.topic)}/{head.epoch}/"
        f"touch-{uuid.uuid4().hex}.json"
    )
    old = state.touch_key
    if not await streams.commit_conf_blob(
        name, head, replace(state, touch_key=key), key, doc.dump()
    ):
        return False
    _docs[key] = doc
    if old:
        # Superseded: readers that still hold its key read the head again (_live).
        try:
            await streams.engine.delete_blobs([old])
        except StorageUnavailable:
            log.warning("superseded touch templates %s not deleted", old)
    return True


async def _backoff(attempt: int) -> None:
    await asyncio.sleep(random.uniform(0, min(0.1, 0.002 * 2**attempt)))


async def activate(
    streams: DurableStreams,
    name: str,
    decls: Sequence[Decl],
    ttl_ms: int,
    live: Live | None = None,
) -> dict[str, Any]:
    """``POST /touch/templates/activate``: the reference's response body. Each attempt plans
    on the stream as read and commits iff its head has not moved (so two activations racing in
    two processes both survive, and ``active_from`` is the tail the commit proves)."""
    for attempt in range(COMMIT_ATTEMPTS):
        live = live if live is not None and attempt == 0 else await open_stream(streams, name)
        limits = Limits.of(live.cfg)
        plan = plan_activation(
            live.templates,
            decls,
            ttl_ms=ttl_ms,
            now_ms=streams.clock(),
            tail=live.head.head_seq,
            limits=limits,
            cfg=live.cfg,
        )
        if plan.doc is None or await _commit(streams, name, live, plan.doc):
            return {
                "activated": [
                    {
                        "templateId": t.id,
                        "state": "active",
                        "activeFromTouchOffset": live.cursor(t.active_from),
                    }
                    for t in plan.activated
                ],
                "denied": plan.denied,
                "limits": {
                    "maxActiveTemplatesPerStream": limits.per_stream,
                    "maxActiveTemplatesPerEntity": limits.per_entity,
                },
            }
        await _backoff(attempt)
    raise StorageUnavailable("template activation kept conflicting; retry", headers=_RETRY)


async def heartbeat(streams: DurableStreams, name: str, live: Live, ids: Sequence[str]) -> Live:
    """Renew the used templates' last_seen when it is due (best effort: a heartbeat that keeps
    losing races is dropped; the next wait tries again)."""
    for attempt in range(4):
        doc = plan_heartbeat(live.templates, ids, streams.clock(), live.cfg)
        if doc is None:
            return live
        if await _commit(streams, name, live, doc):
            return await open_stream(streams, name)
        await _backoff(attempt)
        live = await open_stream(streams, name)
    return live


def meta(live: Live, now_ms: int) -> dict[str, Any]:
    """``GET /touch/meta``. Touches are derived from the log when a wait reads it, so nothing
    is pending or lagging: ``settled`` is always true and ``lagSourceOffsets`` 0."""
    cfg, head = live.cfg, live.head
    memory = cfg.get("memory") or {}
    return {
        "mode": "log",
        "cursor": live.cursor(),
        "epoch": live.epoch,
        "generation": head.head_seq,
        "settled": True,
        "touchMode": "fine",
        "lagSourceOffsets": 0,
        "pendingKeys": 0,
        "overflowBuckets": 0,
        "bucketMs": memory.get("bucketMs", 100),
        "coalesceMs": cfg.get("touchCoalesceWindowMs", 100),
        "coarseIntervalMs": cfg.get("coarseIntervalMs", 100),
        "touchCoalesceWindowMs": cfg.get("touchCoalesceWindowMs", 100),
        "activeTemplates": len(live.templates.live(now_ms)),
        "walScannedThrough": encode_offset(head.epoch, head.head_seq),
        "bucketMaxSourceOffsetSeq": str(head.head_seq),
        "lastFlushAtMs": head.last_write_ts or 0,
    }


def _answer(plan: WaitPlan, *, touched_: bool, seq: int, at_ms: int, cursor: str) -> dict[str, Any]:
    return {
        "touched": touched_,
        "cursor": cursor,
        "effectiveWaitKind": plan.kind,
        "bucketMaxSourceOffsetSeq": str(seq),
        "flushAtMs": at_ms,
        "bucketStartMs": at_ms,
    }


def _stale(live: Live, plan: WaitPlan, now_ms: int) -> dict[str, Any]:
    return {
        "stale": True,
        "cursor": live.cursor(),
        "epoch": live.epoch,
        "generation": live.head.head_seq,
        "effectiveWaitKind": plan.kind,
        "bucketMaxSourceOffsetSeq": str(live.head.head_seq),
        "flushAtMs": now_ms,
        "bucketStartMs": now_ms,
        "error": {"code": "stale", "message": STALE_MESSAGE},
    }


def _by_entity(templates: Iterable[Template]) -> dict[str, list[Template]]:
    out: dict[str, list[Template]] = {}
    for t in templates:
        out.setdefault(t.entity, []).append(t)
    return out


async def wait(
    streams: DurableStreams, name: str, live: Live, req: WaitRequest, *, cap_ms: int
) -> dict[str, Any]:
    """``POST /touch/wait``: touched (an entry after the cursor touched a wanted key; the cursor
    returned is the tail then), not touched at the timeout (the cursor is where the wait read
    to) or stale."""
    started = time.monotonic()
    await streams.touch(live.head, live.state)  # a wait is a read: it renews a TTL stream
    if req.interest == "fine" and req.template_ids_used:
        live = await heartbeat(streams, name, live, req.template_ids_used)
    if req.declare:
        await activate(streams, name, req.declare, req.declare_ttl_ms, live)
        live = await open_stream(streams, name)
    plan = plan_wait(req, live.templates.live(streams.clock()))
    if req.cursor == "now":
        seq = live.head.head_seq
    else:
        parsed = parse_cursor(req.cursor)
        if parsed is None:
            raise _bad("wait.cursor must be in the form <epochHex>:<generation> or 'now'")
        if parsed[0] != live.epoch:
            return _stale(live, plan, streams.clock())
        seq = min(parsed[1], live.head.head_seq)
    deadline = started + min(req.timeout_ms, cap_ms) / 1000
    scan_until = started + SCAN_SECONDS
    records = nbytes = 0
    on_missing = str(live.cfg.get("onMissingBefore", "coarse"))
    while True:
        head = live.head
        templates = _by_entity(live.templates.live(streams.clock()))
        while seq < head.head_seq:
            if records >= SCAN_RECORDS or nbytes >= SCAN_BYTES or time.monotonic() >= scan_until:
                # Bounded work: the client waits again from here.
                return _answer(
                    plan, touched_=False, seq=seq, at_ms=streams.clock(), cursor=live.cursor(seq)
                )
            rr = await streams.read(head, seq, PAGE_RECORDS, PAGE_BYTES)
            for rec in rr.records:
                records += 1
                nbytes += len(rec.data_raw)
                try:
                    change = canonical_change(jsoncodec.loads(rec.data_raw))
                except ValueError:
                    change = None
                if change is None:
                    continue
                active = [t for t in templates.get(change.entity, ()) if t.active_from < rec.seq]
                if plan.matches(touched(change, active, on_missing)):
                    return _answer(
                        plan, touched_=True, seq=rec.seq, at_ms=rec.ts, cursor=live.cursor()
                    )
            if rr.next_seq <= seq:
                break
            seq = rr.next_seq
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _answer(
                plan, touched_=False, seq=seq, at_ms=streams.clock(), cursor=live.cursor(seq)
            )
        try:
            moved = await streams.wait(head, remaining)
        except StreamNotFound:
            now = await open_stream(streams, name)  # 404 when it is gone for good
            return _stale(now, plan, streams.clock())
        if moved is None:
            return _answer(
                plan, touched_=False, seq=seq, at_ms=streams.clock(), cursor=live.cursor(seq)
            )
        live = await _live(streams, name, *moved)
