"""Response compression (issue 23): the app gzips responses for clients that accept it, but
never a body that is compressed already (a flag closure's tar.gz, a /v1 stream of gzip or
zip bytes); those go out byte for byte, with no Content-Encoding."""

from __future__ import annotations

import gzip
import io
import json as jsonlib
import random
import zipfile
from typing import Any

import httpx
import pytest
from api_helpers import MakeClient, append, diff, path, put_topic
from flags_helpers import RO, auth, b64sub, flags_client, ns_path, publish_ok, untar
from starlette.testclient import TestClient
from test_tiering import services

pytestmark = pytest.mark.api

GZIP = {"Accept-Encoding": "gzip"}


def raw_get(
    client: TestClient, url: str, method: str = "GET", json: Any = None, **headers: str
) -> tuple[httpx.Response, bytes]:
    """The response and its body as sent, before any Content-Encoding is undone."""
    with client.stream(method, url, json=json, headers={**GZIP, **headers}) as resp:
        return resp, b"".join(resp.iter_raw())


def noise(n: int, seed: int = 7) -> str:
    """n hex characters that gzip cannot shrink much: a tarball well over the 1 KiB floor."""
    return random.Random(seed).randbytes(n // 2).hex()


def test_a_closure_tarball_is_sent_as_stored_not_gzipped_again(make_client: MakeClient) -> None:
    # GIVEN a namespace whose closure tar.gz is several KiB
    fc = flags_client(make_client)
    tree = {
        "namespace.toml": "name = 'billing'\n",
        "flags/big.toml": f"enabled = true\nblob = '{noise(8000)}'\n",
        "flags/small.toml": "enabled = false\n",
    }
    publish_ok(fc, "billing", tree)
    url = ns_path("billing", "/closure") + f"?version=1&subscription={b64sub('*')}"
    # WHEN a client that accepts gzip fetches it
    resp, raw = raw_get(fc, url, **auth(RO))
    # THEN the bytes on the wire are the stored tarball itself, with no Content-Encoding
    assert resp.status_code == 200, raw
    assert "content-encoding" not in resp.headers, resp.headers
    assert resp.headers["content-type"] == "application/x-tar"
    assert int(resp.headers["content-length"]) == len(raw) > 1024
    svc = services(fc)
    listed = svc.clients.s3.list_objects_v2(
        Bucket=svc.settings.bucket_name, Prefix="flags/acme/billing/closures/"
    )
    (key,) = [o["Key"] for o in listed["Contents"]]
    stored = svc.clients.s3.get_object(Bucket=svc.settings.bucket_name, Key=key)["Body"].read()
    assert raw == stored
    assert untar(raw) == {k: v.encode() for k, v in tree.items()}


def zipped(text: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("noise.txt", text)
    return buf.getvalue()


# Not in Starlette's list of compressed types, nor compressed by the look of the body: the
# first two are recognised by their bytes, the last by its type.
@pytest.mark.parametrize(
    ("ctype", "body"),
    [
        ("application/octet-stream", gzip.compress(noise(4000).encode())),
        ("application/octet-stream", zipped(noise(4000))),
        ("application/x-7z-compressed", b"7z\xbc\xaf\x27\x1c" + noise(4000).encode()),
    ],
    ids=["gzip-bytes", "zip-bytes", "7z-type"],
)
def test_compressed_stream_bytes_are_never_gzipped_again(
    client: TestClient, ctype: str, body: bytes
) -> None:
    # GIVEN a /v1 stream holding one compressed blob
    assert client.put("/v1/stream/blob", headers={"Content-Type": ctype}).status_code == 201
    r = client.post("/v1/stream/blob", content=body, headers={"Content-Type": ctype})
    assert r.status_code == 204, r.text
    # WHEN a client that accepts gzip reads it
    resp, raw = raw_get(client, "/v1/stream/blob?offset=-1")
    # THEN it gets the blob as stored, while JSON of the same size is still gzipped
    assert resp.status_code == 200
    assert "content-encoding" not in resp.headers, resp.headers
    assert raw == body
    put_topic(client, "t")
    append(client, "t", [{"data": {"i": i, "text": "lorem ipsum " * 20}} for i in range(20)])
    resp, raw = raw_get(client, path("t", "/diff"), "POST", {"from_seq": 0})
    assert resp.status_code == 200
    assert resp.headers["content-encoding"] == "gzip"
    # at zlib's default level: the gzip header's XFL byte is 2 at level 9, 4 at level 1
    assert raw[:2] == b"\x1f\x8b" and raw[8] == 0
    records = diff(client, "t", from_seq=0)["records"]
    assert jsonlib.loads(gzip.decompress(raw))["records"] == records
    resp, raw = raw_get(client, "/healthz")  # under 1 KiB: never worth it
    assert resp.status_code == 200 and "content-encoding" not in resp.headers
    assert jsonlib.loads(raw)
