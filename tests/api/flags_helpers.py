"""Helpers for the /api/v1 feature-flag API tests: tokens, an app factory, and an
independent model of the spec (closures, closure hash, tarballs) written from the spec text
only, so the tests never check the product against itself."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import struct
import tarfile
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from api_helpers import MakeClient
from starlette.testclient import TestClient

from headwater.settings import FlagSettings

SIGNING_KEY = "k" * 32

SVC = "svc-token-0123456789abcdefghij"  # acme, read + write, every namespace
RO = "ro-token-0123456789abcdefghijk"  # acme, read only
WO = "wo-token-0123456789abcdefghijk"  # acme, write only
LIMITED = "lim-token-0123456789abcdefghij"  # acme, read + write, only `billing`
OTHER = "other-token-0123456789abcdefgh"  # globex, read + write
NSCLIENT = "nsc-token-0123456789abcdefghij"  # acme, namespace-client (no permissions)
ADMIN = "admin-token-0123456789abcdefgh"  # superadmin, read + write
UNKNOWN = "nobody-token-0123456789abcdefg"  # not configured

RW = ["manifest.read", "manifest.write"]
TOKENS = json.dumps(
    [
        {"token": SVC, "tenant": "acme", "kind": "service", "permissions": RW, "namespaces": ["*"]},
        {
            "token": RO,
            "tenant": "acme",
            "kind": "service",
            "permissions": ["manifest.read"],
            "namespaces": ["*"],
        },
        {
            "token": WO,
            "tenant": "acme",
            "kind": "service",
            "permissions": ["manifest.write"],
            "namespaces": ["*"],
        },
        {
            "token": LIMITED,
            "tenant": "acme",
            "kind": "service",
            "permissions": RW,
            "namespaces": ["billing"],
        },
        {
            "token": OTHER,
            "tenant": "globex",
            "kind": "service",
            "permissions": RW,
            "namespaces": ["*"],
        },
        {
            "token": NSCLIENT,
            "tenant": "acme",
            "kind": "namespace-client",
            "permissions": [],
            "namespaces": ["*"],
        },
        {
            "token": ADMIN,
            "tenant": "*",
            "kind": "superadmin",
            "permissions": RW,
            "namespaces": ["*"],
        },
    ]
)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def flag_settings(**overrides: Any) -> FlagSettings:
    cfg: dict[str, Any] = {"tokens_raw": TOKENS, "signing_key": SIGNING_KEY, "keepalive_sec": 1}
    cfg.update(overrides)
    return FlagSettings(**cfg)


def flags_client(make_client: MakeClient, **overrides: Any) -> TestClient:
    return make_client(flags=flag_settings(**overrides))


def ns_path(slug: str, suffix: str = "", tenant: str = "acme") -> str:
    return f"/api/v1/tenants/{tenant}/namespaces/{slug}{suffix}"


def publish(
    client: TestClient, slug: str, files: Mapping[str, str], token: str = SVC, tenant: str = "acme"
) -> httpx.Response:
    return client.put(
        ns_path(slug, "/manifest", tenant), json={"files": dict(files)}, headers=auth(token)
    )


def publish_ok(
    client: TestClient, slug: str, files: Mapping[str, str], tenant: str = "acme", token: str = SVC
) -> dict[str, Any]:
    resp = publish(client, slug, files, token=token, tenant=tenant)
    assert resp.status_code in (200, 201), resp.text
    body: dict[str, Any] = resp.json()
    return body


def versions(client: TestClient, slug: str, token: str = SVC) -> list[dict[str, Any]]:
    resp = client.get(ns_path(slug, "/manifest/versions"), headers=auth(token))
    assert resp.status_code == 200, resp.text
    out: list[dict[str, Any]] = resp.json()["versions"]
    return out


def flag_error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The flag surface's envelope: {"error": {"code", "message", "details"?}}."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    err: dict[str, Any] = body["error"]
    assert err["code"] == code, body
    assert isinstance(err["message"], str) and err["message"], body
    assert set(err) <= {"code", "message", "details"}, body
    return err


def relative(url: str) -> str:
    """An absolute snapshot URL as a path + query for the TestClient."""
    parts = urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.netloc, url
    return f"{parts.path}?{parts.query}"


def b64sub(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# --- an independent model of the spec ---------------------------------------------------------
def enc(files: Mapping[str, str]) -> dict[str, bytes]:
    return {p: c.encode("utf-8") for p, c in files.items()}


def closure_hash(files: Mapping[str, bytes]) -> str:
    """Spec, 'Closure hash canonicalization': sort by path bytes; u32 BE length, path,
    raw sha256 of the content; sha256 of that buffer."""
    buf = bytearray()
    for path in sorted(files, key=lambda p: p.encode("utf-8")):
        raw = path.encode("utf-8")
        buf += struct.pack(">I", len(raw)) + raw + hashlib.sha256(files[path]).digest()
    return "sha256:" + hashlib.sha256(bytes(buf)).hexdigest()


def _refs(value: Any) -> set[str]:
    """Issue 8: any key `segment` (string) or `segments` (array of strings) at any depth."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "segment" and isinstance(v, str):
                out.add(v)
            elif k == "segments" and isinstance(v, list):
                out.update(x for x in v if isinstance(x, str))
            out |= _refs(v)
    elif isinstance(value, list):
        for v in value:
            out |= _refs(v)
    return out


def closure_files(tree: Mapping[str, bytes], flags: str) -> dict[str, bytes]:
    """Spec, 'Closure model': namespace.toml, the subscribed flags that exist, and every
    segment reachable from them transitively; `*` is every flag and every segment."""
    out = {p: c for p, c in tree.items() if p == "namespace.toml"}
    if flags == "*":
        return {**out, **{p: c for p, c in tree.items() if p != "namespace.toml"}}
    todo: list[str] = []
    for key in flags.split(","):
        path = f"flags/{key}.toml"
        if path in tree:
            out[path] = tree[path]
            todo.append(path)
    while todo:
        path = todo.pop()
        for seg in _refs(tomllib.loads(tree[path].decode("utf-8"))):
            seg_path = f"segments/{seg}.toml"
            if seg_path in tree and seg_path not in out:
                out[seg_path] = tree[seg_path]
                todo.append(seg_path)
    return out


def make_tar(files: Mapping[str, bytes], gz: bool = True, **extra: tarfile.TarInfo) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tar:
        for path, content in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for info in extra.values():
            tar.addfile(info, io.BytesIO(b"") if info.isreg() else None)
    return buf.getvalue()


def untar(body: bytes) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        for member in tar.getmembers():
            assert member.isfile(), member
            f = tar.extractfile(member)
            assert f is not None
            assert member.name not in out
            out[member.name] = f.read()
    return out


# --- SSE ------------------------------------------------------------------------------------
@dataclass
class Frame:
    event: str | None = None  # None: a comment-only frame
    id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)

    @property
    def is_keepalive(self) -> bool:
        return self.event is None and "keepalive" in self.comments


class Sse:
    """Frames of an open /api/v1/events response. With keepalive_sec=1 a frame arrives at
    least every second, so reads are bounded by the deadlines below."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines: Iterator[str] = response.iter_lines()

    def frame(self) -> Frame:
        fr = Frame()
        got = False
        for line in self._lines:
            if line == "":
                if got:
                    return fr
                continue
            got = True
            if line.startswith(":"):
                fr.comments.append(line[1:])
            elif line.startswith("event: "):
                fr.event = line[7:]
            elif line.startswith("id: "):
                fr.id = line[4:]
            elif line.startswith("data: "):
                fr.data = json.loads(line[6:])
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        raise EOFError("stream ended")

    def event(self, timeout_s: float = 10.0) -> Frame:
        """The next non-comment frame."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fr = self.frame()
            if fr.event is not None:
                return fr
        raise AssertionError(f"no event within {timeout_s}s")

    def quiet_for(self, keepalives: int = 2) -> None:
        """Assert that the next `keepalives` frames are keepalives (no event in between)."""
        for _ in range(keepalives):
            fr = self.frame()
            assert fr.is_keepalive, fr


def apply_inline(tracked: dict[str, bytes], data: dict[str, Any]) -> dict[str, bytes]:
    """The client's three checks (spec: Hash-and-integrity contract), by hand."""
    assert data["delivery"] == "inline" and data["protocol"] == "v2"
    assert closure_hash(tracked) == data["prev_closure_hash"]
    assert data["files"], data
    new = dict(tracked)
    for entry in data["files"]:
        path, op = entry["path"], entry["op"]
        if op in ("added", "modified", "enter"):
            content = base64.b64decode(entry["content_b64"], validate=True)
            assert hashlib.sha256(content).hexdigest() == entry["sha256"], entry
            assert set(entry) == {"path", "op", "sha256", "content_b64"}, entry
            if op == "modified":
                assert path in tracked and tracked[path] != content, entry
            else:
                assert path not in tracked, entry
            new[path] = content
        else:
            assert op in ("removed", "leave"), entry
            assert set(entry) == {"path", "op"}, entry
            assert path in tracked, entry
            del new[path]
    assert closure_hash(new) == data["closure_hash"]
    return new


def expected_ops(
    old_tree: Mapping[str, bytes], new_tree: Mapping[str, bytes], flags: str
) -> list[tuple[str, str]]:
    """Spec, 'Per-file op values', from the two whole trees: (path, op) sorted by path."""
    old, new = closure_files(old_tree, flags), closure_files(new_tree, flags)
    ops: list[tuple[str, str]] = []
    for path in set(old) | set(new):
        if path in old and path in new:
            if old[path] != new[path]:
                ops.append((path, "modified"))
        elif path in new:
            ops.append((path, "enter" if path in old_tree else "added"))
        else:
            ops.append((path, "leave" if path in new_tree else "removed"))
    return sorted(ops, key=lambda item: item[0].encode("utf-8"))
