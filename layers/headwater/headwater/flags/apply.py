"""The client side of a version event: the three-point check of the spec (Hash-and-integrity
contract) and the snapshot check. Any failure raises `ApplyMismatch` and leaves the caller's
tree untouched (a new dict is returned only on success); the caller falls back to the
snapshot."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

from headwater.flags.closure import closure_hash
from headwater.flags.delta import CONTENT_OPS, PROTOCOL, Op


class ApplyMismatch(Exception):
    """`point` is protocol, pre_apply, per_file, post_apply or snapshot."""

    def __init__(self, point: str, message: str) -> None:
        super().__init__(message)
        self.point = point


def apply_inline(
    tree: Mapping[str, bytes], tracked_hash: str | None, data: Mapping[str, Any]
) -> tuple[dict[str, bytes], str]:
    """The tree and closure hash after an inline `version` event's data."""
    if data.get("protocol") != PROTOCOL:
        raise ApplyMismatch("protocol", f"unknown protocol {data.get('protocol')!r}")
    if data.get("delivery") != "inline":
        raise ApplyMismatch("protocol", "not an inline event")
    if tracked_hash is None or data.get("prev_closure_hash") != tracked_hash:
        raise ApplyMismatch("pre_apply", "prev_closure_hash does not match the tracked hash")
    result = dict(tree)
    files = data.get("files")
    if not isinstance(files, list) or not files:
        raise ApplyMismatch("protocol", "files must be a non-empty array")
    for entry in files:
        path, op = entry.get("path"), entry.get("op")
        if not isinstance(path, str) or op not in set(Op):
            raise ApplyMismatch("protocol", f"bad entry {entry!r}")
        if Op(op) in CONTENT_OPS:
            result[path] = _verified_content(entry)
        else:
            result.pop(path, None)
    after = closure_hash(result)
    if after != data.get("closure_hash"):
        raise ApplyMismatch("post_apply", f"closure hash after apply is {after}")
    return result, after


def _verified_content(entry: Mapping[str, Any]) -> bytes:
    try:
        content = base64.b64decode(entry["content_b64"], validate=True)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise ApplyMismatch("per_file", f"{entry.get('path')}: bad content_b64") from exc
    if hashlib.sha256(content).hexdigest() != entry.get("sha256"):
        raise ApplyMismatch("per_file", f"{entry.get('path')}: sha256 does not match content")
    return content


def verify_snapshot(files: Mapping[str, bytes], expected_hash: str) -> str:
    """The fourth check: the un-tarred snapshot hashes to the event's closure_hash."""
    got = closure_hash(files)
    if got != expected_hash:
        raise ApplyMismatch("snapshot", f"snapshot hashes to {got}, event says {expected_hash}")
    return got
