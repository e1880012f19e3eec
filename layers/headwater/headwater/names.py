"""Topic and router name rules (spec §1.1) and the escaping used wherever a name becomes a key."""

from __future__ import annotations

import base64
import re

from headwater.errors import InvalidRequest

TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")
ROUTER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}")


def validate_topic_name(name: str) -> str:
    if not TOPIC_NAME_RE.fullmatch(name):
        raise InvalidRequest(
            f"invalid topic name {name!r}: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{{0,254}}$",
            detail={"topic": name},
        )
    return name


def is_valid_topic_name(name: str) -> bool:
    return TOPIC_NAME_RE.fullmatch(name) is not None


def object_key_component(name: str) -> str:
    """A name as an S3 key component: base32 of its bytes, so no name can traverse a prefix."""
    return base64.b32encode(name.encode()).decode().rstrip("=").lower()
