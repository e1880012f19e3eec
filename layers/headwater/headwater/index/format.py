"""The companion object's framing (``docs/index-format.md``): an 80-byte header, a section
table with each section's offset, length and CRC-32, the table's own CRC-32, then the
sections' canonical JSON bodies in ``SECTION_ORDER``. ``encode`` writes it (index/writer.py);
``read_table`` reads and verifies it and ``Sections`` holds the sections read, each parsed on
first use (index/companion.py). What the sections hold is the families' business
(index/writer.py, index/query.py, index/agg.py).

Pure: struct, zlib, json and orjson, so the Glue job can import it."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Set
from typing import Any, Final, NamedTuple

import orjson

from headwater.index.plan import FORMAT_VERSION, canonical_json

MAGIC: Final = b"HWCIX\x00"
_HEADER: Final = struct.Struct("<6sH32sQQIqqHH")  # 80 bytes
_ENTRY: Final = struct.Struct("<8sQQI")  # 28 bytes per section
_CRC: Final = struct.Struct("<I")
SECTION_ORDER: Final = ("seq", "rk", "exact", "col", "fts", "agg")


class CompanionError(ValueError):
    """Bytes that are not a valid companion object (truncated, corrupt, wrong format)."""


class SectionNotLoaded(LookupError):
    """A companion read from a prefix of its object (`Companion.from_prefix`) needs a section
    it does not hold yet: bytes [offset, offset + length) of the object; `Companion.load` it
    and call again."""

    def __init__(self, name: str, offset: int, length: int) -> None:
        super().__init__(name)
        self.name, self.offset, self.length = name, offset, length


def _section_json(value: object) -> bytes:
    """A section's canonical JSON, by orjson (sorted keys, no whitespace, UTF-8; the stdlib's
    encoder took a third of a build's CPU). What orjson cannot write exactly (an integer past
    64 bits, a lone surrogate) falls back to the stdlib's ASCII form: the choice depends only
    on the value, so the bytes stay a pure function of the inputs. orjson would write a
    non-finite float as null: the only ones a build makes are overflowed rollup sums, and the
    caller sends that section to the stdlib (`Infinity`)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return canonical_json(value)


def encode(
    generation: bytes,
    first: int,
    last: int,
    count: int,
    min_ts: int,
    max_ts: int,
    sections: Mapping[str, Any],
    stdlib: Set[str] = frozenset(),
) -> bytes:
    """The object: header, section table and the `sections` present, in SECTION_ORDER, each
    as canonical JSON (those named in `stdlib` by the stdlib's encoder)."""
    names = [n for n in SECTION_ORDER if n in sections]
    bodies = [
        canonical_json(sections[n]) if n in stdlib else _section_json(sections[n]) for n in names
    ]
    table_end = _HEADER.size + _ENTRY.size * len(names) + _CRC.size
    head = _HEADER.pack(
        MAGIC, FORMAT_VERSION, generation, first, last, count, min_ts, max_ts, len(names), 0
    )
    entries = b""
    offset = table_end
    for name, body in zip(names, bodies, strict=True):
        entries += _ENTRY.pack(name.encode("ascii"), offset, len(body), zlib.crc32(body))
        offset += len(body)
    prefix = head + entries
    return prefix + _CRC.pack(zlib.crc32(prefix)) + b"".join(bodies)


class Table(NamedTuple):
    """A companion object's header and section table, verified by ``read_table``."""

    generation: str  # hex
    first_seq: int
    last_seq: int
    doc_count: int
    min_ts: int
    max_ts: int
    sections: dict[str, bytes]  # sections lying wholly inside the bytes read, verified
    unloaded: dict[str, tuple[int, int, int]]  # the others: name -> (offset, length, crc32)


def read_table(data: bytes, size: int | None = None) -> Table:
    """The header and section table of the first bytes of a companion object (of `size`
    bytes, when known), verified, with every section lying wholly inside `data` (checksums
    verified); the others are listed as unloaded. Raises CompanionError."""
    if len(data) < _HEADER.size + _CRC.size:
        raise CompanionError("companion object is truncated (shorter than its header)")
    magic, version, gen, first, last, count, min_ts, max_ts, n, _ = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CompanionError("not a companion object (bad magic)")
    if version != FORMAT_VERSION:
        raise CompanionError(f"unsupported companion format version {version}")
    table_end = _HEADER.size + _ENTRY.size * n
    if len(data) < table_end + _CRC.size:
        raise CompanionError("companion object is truncated (section table)")
    (crc,) = _CRC.unpack_from(data, table_end)
    if crc != zlib.crc32(data[:table_end]):
        raise CompanionError("companion header checksum mismatch (corrupt object)")
    raw: dict[str, bytes] = {}
    unloaded: dict[str, tuple[int, int, int]] = {}
    for i in range(n):
        name_b, off, length, body_crc = _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
        name = name_b.rstrip(b"\x00").decode("ascii", "replace")
        end = off + length
        if off < table_end + _CRC.size or (size is not None and end > size):
            raise CompanionError(f"companion section {name!r} lies outside the object")
        if end > len(data):
            unloaded[name] = (off, length, body_crc)
            continue
        body = data[off:end]
        verify_section(name, body, length, body_crc)
        raw[name] = body
    if "seq" not in raw and "seq" not in unloaded:
        raise CompanionError("companion object has no seq section")
    return Table(gen.hex(), first, last, count, min_ts, max_ts, raw, unloaded)


def verify_section(name: str, body: bytes, length: int, crc: int) -> None:
    """A section's bytes against its table entry; raises CompanionError."""
    if len(body) != length or zlib.crc32(body) != crc:
        raise CompanionError(f"companion section {name!r} checksum mismatch (corrupt)")


class Sections:
    """A companion object's sections as read: the verified bodies held, each parsed (JSON)
    on first use, and those lying outside the bytes read (a companion read from a prefix of
    its object), which raise SectionNotLoaded until they are `load`ed."""

    __slots__ = ("parsed", "raw", "unloaded")

    def __init__(
        self,
        raw: Mapping[str, bytes],
        unloaded: Mapping[str, tuple[int, int, int]] | None = None,
    ) -> None:
        self.raw = dict(raw)
        self.parsed: dict[str, Any] = {}
        # sections in the object but not read yet: name -> (offset, length, crc32)
        self.unloaded: dict[str, tuple[int, int, int]] = dict(unloaded or {})

    def names(self) -> tuple[str, ...]:
        """The sections the object has (held or not), in SECTION_ORDER."""
        return tuple(n for n in SECTION_ORDER if n in self.raw or n in self.unloaded)

    def missing(self, name: str) -> SectionNotLoaded | None:
        where = self.unloaded.get(name)
        return SectionNotLoaded(name, where[0], where[1]) if where is not None else None

    def load(self, name: str, body: bytes) -> bool:
        """Add a section read later (the bytes SectionNotLoaded named), verified against the
        section table; False when it was not one waiting to be read (a no-op)."""
        where = self.unloaded.get(name)
        if where is None:
            return False
        _off, length, crc = where
        verify_section(name, body, length, crc)
        self.raw[name] = bytes(body)
        del self.unloaded[name]
        return True

    def get(self, name: str) -> Any:
        """The parsed section (None: the object has no such section). Raises
        SectionNotLoaded for one not read yet, CompanionError for one that is not valid."""
        if name not in self.parsed:
            raw = self.raw.get(name)
            if raw is None:
                missing = self.missing(name)
                if missing is not None:
                    raise missing
                self.parsed[name] = None
            else:
                try:
                    value = json.loads(raw)
                except ValueError as exc:
                    raise CompanionError(
                        f"companion section {name!r} is not valid: {exc}"
                    ) from None
                if not isinstance(value, dict | list):
                    raise CompanionError(f"companion section {name!r} has the wrong shape")
                self.parsed[name] = value
        return self.parsed[name]
