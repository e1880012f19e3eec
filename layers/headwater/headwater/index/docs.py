"""The builder's input: a sealed segment's records as documents (``SegmentDoc``), decoded
exactly as ``durable.scan`` decodes them (value, schema version by boundary) and keyed like
``_routing_keys`` (the record tag). Both builders (the Glue job and the in-process indexer)
call ``docs_from_records`` on one segment's records and pass the result to
``writer.build_companion``.

Pure: durable.offsets, engine.records and jsoncodec (orjson), so the Glue job can import it
and Spark can pickle its values to executors."""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from headwater import jsoncodec
from headwater.durable.offsets import Offset, decode_offset
from headwater.engine import StoredRecord


class _Undecodable:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDECODABLE"

    def __reduce__(self) -> str:
        return "UNDECODABLE"  # unpickles (e.g. on a Spark executor) as the same singleton


UNDECODABLE: Final = _Undecodable()
"""A record whose data is not JSON: it has no field values (like ``scan.scan``'s None)."""


class SegmentDoc(NamedTuple):
    """One record of the segment as the builder sees it."""

    seq: int
    ts_ms: int  # the record's append time
    routing_key: str | None
    value: object  # the decoded JSON value, or UNDECODABLE
    version: int | None  # schema version of the stored value (None/0: newest bindings)


def _boundary_seq(offset: str) -> int:
    off = decode_offset(offset)
    return off.seq if isinstance(off, Offset) else 0


class _Versions:
    """``version_at`` for many seqs: the boundaries' seqs decoded once."""

    def __init__(self, registry: Mapping[str, Any]) -> None:
        boundaries: list[Mapping[str, Any]] = list(registry.get("boundaries", []))
        self.seqs = [_boundary_seq(b["offset"]) for b in boundaries]
        self.versions = [int(b["version"]) for b in boundaries]

    def at(self, seq: int) -> int:
        index = bisect.bisect_left(self.seqs, seq)
        return 0 if index == 0 else self.versions[index - 1]


def version_at(registry: Mapping[str, Any], seq: int) -> int:
    """``schema.version_at(registry, seq, key=<offset -> seq>)`` without importing
    durable.schema: the version of the last boundary whose offset's seq is < `seq` (0 when
    none); with equal offsets the later boundary wins."""
    return _Versions(registry).at(seq)


def docs_from_records(
    records: Iterable[StoredRecord], registry: Mapping[str, Any]
) -> list[SegmentDoc]:
    """Builder input from stored records, decoded exactly as ``scan.scan`` decodes them
    (value, schema version by boundary) and keyed like ``_routing_keys`` (the record tag)."""
    out: list[SegmentDoc] = []
    versions = _Versions(registry) if registry else None
    for rec in records:
        try:
            value: object = jsoncodec.loads(rec.data_raw)
        except ValueError:
            value = UNDECODABLE
        version = versions.at(rec.seq) if versions is not None else 0
        key = None
        tag_json = rec.tag_json
        if tag_json is not None:
            if tag_json[:1] == b'"' and b"\\" not in tag_json:  # a string without escapes
                key = tag_json[1:-1].decode()
            else:
                tag = json.loads(tag_json)
                key = tag if isinstance(tag, str) else None
        out.append(SegmentDoc(rec.seq, rec.ts, key, value, version or None))
    return out
