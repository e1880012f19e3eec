"""The closure endpoint's pure parts: its query (`version`, `subscription`, `token`), the
snapshot URL an event carries, and the ETag.

`subscription` is URL-safe base64 without padding of the flag-list text; it must decode
exactly (no `=`, no stray bits: re-encoding gives the same text) to UTF-8 that parses as a
flag list (`*` or comma-separated keys, at most 64). `subscription_text` keeps the decoded
text as sent: a signed token must cover exactly that string. URLs we issue always carry the
canonical text (`FlagSelection.canonical()`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from headwater.flags.closure import FlagSelection
from headwater.flags.errors import InvalidRequest
from headwater.flags.subscription import DEFAULT_LIMITS, parse_flag_list

MAX_VERSION = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ClosureRequest:
    version: int
    selection: FlagSelection
    subscription_text: str
    token: str | None


def encode_subscription(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def decode_subscription(value: str) -> str | None:
    if not value or "=" in value or not value.isascii():
        return None
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text if encode_subscription(text) == value else None


def parse_closure_query(params: Mapping[str, str]) -> ClosureRequest:
    """`version`, `subscription` and the optional `token`, or 400 invalid_request."""
    version_text = params.get("version")
    if (
        version_text is None
        or not (version_text.isascii() and version_text.isdigit())
        or len(version_text) > len(str(MAX_VERSION))  # int() refuses 4300+ digits
    ):
        raise InvalidRequest("version must be a positive integer", details={"param": "version"})
    version = int(version_text)
    if version < 1 or version > MAX_VERSION or version_text.startswith("0"):
        raise InvalidRequest("version must be a positive integer", details={"param": "version"})
    encoded = params.get("subscription")
    text = decode_subscription(encoded) if encoded is not None else None
    selection = parse_flag_list(text) if text is not None else None
    if text is None or selection is None or len(selection.keys) > DEFAULT_LIMITS.max_flags:
        raise InvalidRequest(
            "subscription must be URL-safe base64 (no padding) of '*' or 'flag1,flag2'",
            details={"param": "subscription"},
        )
    token = params.get("token")
    return ClosureRequest(version, selection, text, token or None)


def closure_path(tenant: str, slug: str) -> str:
    return f"/api/v1/tenants/{quote(tenant, safe='')}/namespaces/{quote(slug, safe='')}/closure"


def snapshot_url(
    base_url: str, *, tenant: str, slug: str, version: int, selection: FlagSelection, token: str
) -> str:
    """The absolute snapshot URL for an event (`base_url` is scheme://host of this server)."""
    query = urlencode(
        {
            "version": str(version),
            "subscription": encode_subscription(selection.canonical()),
            "token": token,
        }
    )
    return f"{base_url.rstrip('/')}{closure_path(tenant, slug)}?{query}"


def closure_etag(version: int, closure_hash: str) -> str:
    return f'"v{version}-{closure_hash}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 weak comparison against an If-None-Match list (or `*`)."""
    if if_none_match is None:
        return False
    wanted = etag.removeprefix("W/")
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == wanted:
            return True
    return False
