"""Event ids: `evt_<uuid>`, where the UUID (RFC 9562 version 8, "custom") carries the feed
position the event reflects, so any instance can resume a stream from a Last-Event-ID
another instance issued.

Layout of the 128 bits, most significant first:
  seq (48) | version 8 (4) | topic check (12) | variant 0b10 (2) | epoch (20) | random (42)

`seq` is the last log seq the event reflects (a `sentiment_update`: its record's seq),
`epoch` the topic incarnation (low 20 bits), the topic check 12 bits of a hash of the
topic name. An id that is not of this shape, or of another topic, is unknown: the stream
starts from the current state (the contract's reconnection rule 3)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

PREFIX = "evt_"
SEQ_BITS = 48
EPOCH_MASK = (1 << 20) - 1
SEQ_MASK = (1 << SEQ_BITS) - 1


def topic_check(topic: str) -> int:
    return int.from_bytes(hashlib.sha256(topic.encode()).digest()[:2], "big") & 0xFFF


@dataclass(frozen=True, slots=True)
class Position:
    epoch: int  # low 20 bits
    seq: int


def event_id(check: int, epoch: int, seq: int) -> str:
    value = (
        (seq & SEQ_MASK) << 80
        | 8 << 76
        | (check & 0xFFF) << 64
        | 0b10 << 62
        | (epoch & EPOCH_MASK) << 42
        | secrets.randbits(42)
    )
    return PREFIX + str(uuid.UUID(int=value))


def parse_event_id(raw: str | None, check: int) -> Position | None:
    """The position an id of this topic carries, or None (absent, malformed, foreign)."""
    if not raw or not raw.startswith(PREFIX) or len(raw) > 64:
        return None
    try:
        value = uuid.UUID(raw[len(PREFIX) :].strip()).int
    except ValueError:
        return None
    if (value >> 76) & 0xF != 8 or (value >> 62) & 0b11 != 0b10:
        return None
    if (value >> 64) & 0xFFF != check:
        return None
    return Position(epoch=(value >> 42) & EPOCH_MASK, seq=value >> 80)
