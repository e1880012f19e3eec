"""/api/v1 feature-flag manifests over HTTP: publish (JSON and tar.gz), lint, auth, read,
versions and the closure endpoint (spec: flag-closure-events.txt; issue 8; docs/flags.md).
Expected hashes and closures come from flags_helpers' independent model of the spec."""

from __future__ import annotations

import gzip
import io
import re
import tarfile
import time
from typing import Any

import pytest
from api_helpers import MakeClient
from flags_helpers import (
    ADMIN,
    LIMITED,
    NSCLIENT,
    OTHER,
    RO,
    SIGNING_KEY,
    SVC,
    UNKNOWN,
    WO,
    Sse,
    auth,
    b64sub,
    closure_files,
    closure_hash,
    enc,
    flag_error,
    flags_client,
    make_tar,
    ns_path,
    publish,
    publish_ok,
    relative,
    untar,
    versions,
)
from starlette.testclient import TestClient

from headwater.flags.tokens import SnapshotScope, SnapshotSigner

pytestmark = pytest.mark.api

TREE = {
    "namespace.toml": "name = 'billing'\n",
    "flags/checkout.toml": "enabled = true\n[[rules]]\nsegment = 'employees'\n",
    "flags/banner.toml": "enabled = false\n",
    "flags/quiz.toml": "[targeting]\nsegments = ['beta', 'employees']\n",
    "segments/employees.toml": "emails = ['a@acme.test']\nsegment = 'staff'\n",
    "segments/staff.toml": "x = 1\n",
    "segments/beta.toml": "y = 'é'\n",
    "segments/orphan.toml": "z = 3\n",
}
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def fc(make_client: MakeClient) -> TestClient:
    return flags_client(make_client)


# --- publish -----------------------------------------------------------------------------
def test_first_publish_is_version_1_with_the_whole_tree_hash(fc: TestClient) -> None:
    resp = publish(fc, "billing", TREE)
    assert resp.status_code == 201, resp.text
    assert resp.json() == {
        "version": 1,
        "prev_version": None,
        "closure_hash": closure_hash(enc(TREE)),
    }


def test_json_and_tarball_bodies_give_the_same_version_and_hash(fc: TestClient) -> None:
    tar_body = make_tar(enc(TREE))
    resp = fc.put(
        ns_path("viatar", "/manifest"),
        content=tar_body,
        headers={**auth(SVC), "Content-Type": "application/gzip"},
    )
    assert resp.status_code == 201, resp.text
    via_tar = resp.json()
    via_json = publish_ok(fc, "viajson", TREE)
    assert via_tar == via_json
    assert via_tar["closure_hash"] == closure_hash(enc(TREE))
    # The same tree as JSON onto the tar-created namespace: nothing new.
    again = publish(fc, "viatar", TREE)
    assert again.status_code == 200, again.text
    assert again.json()["version"] == 1
    # `tar czf x.tgz -C dir .` style members with a leading ./ and directory members.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for d in ("./", "./flags", "./segments"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for p, c in enc(TREE).items():
            info = tarfile.TarInfo("./" + p)
            info.size = len(c)
            tar.addfile(info, io.BytesIO(c))
    resp = fc.put(
        ns_path("viatar", "/manifest"),
        content=buf.getvalue(),
        headers={**auth(SVC), "Content-Type": "application/gzip"},
    )
    assert resp.status_code == 200 and resp.json()["version"] == 1, resp.text
    assert [v["version"] for v in versions(fc, "viatar")] == [1]


def test_identical_tree_creates_nothing_and_a_change_is_a_new_version(fc: TestClient) -> None:
    publish_ok(fc, "billing", TREE)
    before = versions(fc, "billing")
    same = publish(fc, "billing", TREE)
    assert same.status_code == 200, same.text
    assert same.json()["version"] == 1
    assert same.json()["closure_hash"] == closure_hash(enc(TREE))
    assert versions(fc, "billing") == before

    tree2 = {**TREE, "flags/banner.toml": "enabled = true\n"}
    resp = publish(fc, "billing", tree2)
    assert resp.status_code == 201, resp.text
    assert resp.json() == {
        "version": 2,
        "prev_version": 1,
        "closure_hash": closure_hash(enc(tree2)),
    }
    tree3 = {k: v for k, v in tree2.items() if k != "segments/orphan.toml"}
    assert publish(fc, "billing", tree3).json() == {
        "version": 3,
        "prev_version": 2,
        "closure_hash": closure_hash(enc(tree3)),
    }
    # Going back to an earlier tree is still a change: a new version.
    back = publish(fc, "billing", TREE)
    assert back.status_code == 201
    assert back.json() == {"version": 4, "prev_version": 3, "closure_hash": closure_hash(enc(TREE))}
    assert [v["version"] for v in versions(fc, "billing")] == [1, 2, 3, 4]


def test_unsupported_content_type_is_400(fc: TestClient) -> None:
    for ctype in ("text/plain", "application/octet-stream", "multipart/form-data"):
        resp = fc.put(
            ns_path("billing", "/manifest"),
            content=b'{"files": {}}',
            headers={**auth(SVC), "Content-Type": ctype},
        )
        flag_error(resp, 400, "invalid_request")
    resp = fc.put(ns_path("billing", "/manifest"), content=b"{}", headers=auth(SVC))
    flag_error(resp, 400, "invalid_request")
    assert fc.get(ns_path("billing", "/manifest"), headers=auth(SVC)).status_code == 404


def test_lint_failures_are_422_with_every_finding(fc: TestClient) -> None:
    bad = {
        # no namespace.toml
        "flags/a.toml": "segment = 'nosuch'\n",  # unknown segment
        "flags/b.toml": "this is = not toml [\n",  # invalid TOML
        "flags/c.toml": "segments = ['loop1']\n",
        "segments/loop1.toml": "segment = 'loop2'\n",  # cycle loop1 -> loop2 -> loop1
        "segments/loop2.toml": "segment = 'loop1'\n",
        "other/x.toml": "a = 1\n",  # bad path
        "flags/Upper.toml": "a = 1\n",  # bad path (upper case)
        "flags/d.txt": "a = 1\n",  # bad path (suffix)
    }
    resp = publish(fc, "billing", bad)
    err = flag_error(resp, 422, "lint_failed")
    details = err["details"]
    assert isinstance(details, list)
    for d in details:
        assert set(d) == {"path", "code", "message"} and d["message"], d
    found = {(d["path"], d["code"]) for d in details}
    expected = {
        ("namespace.toml", "missing_namespace"),
        ("flags/a.toml", "unknown_segment"),
        ("flags/b.toml", "invalid_toml"),
        ("other/x.toml", "invalid_path"),
        ("flags/Upper.toml", "invalid_path"),
        ("flags/d.txt", "invalid_path"),
    }
    assert expected <= found, details
    cycles = [d for d in details if d["code"] == "segment_cycle"]
    assert len(cycles) == 1, details
    assert cycles[0]["path"] == "segments/loop1.toml"
    assert "loop1" in cycles[0]["message"] and "loop2" in cycles[0]["message"]
    assert len(details) == len(expected) + 1, details
    # A rejected publish creates nothing.
    flag_error(
        fc.get(ns_path("billing", "/manifest"), headers=auth(SVC)), 404, "namespace_not_found"
    )


def test_rejected_publishes_leave_the_versions_unchanged(fc: TestClient) -> None:
    publish_ok(fc, "billing", TREE)
    before = versions(fc, "billing")
    flag_error(
        publish(fc, "billing", {**TREE, "flags/z.toml": "segment='gone'\n"}), 422, "lint_failed"
    )
    flag_error(publish(fc, "billing", {**TREE, "flags/y.toml": "x"}, token=RO), 403, "forbidden")
    bad_tar = make_tar({**enc(TREE), "../escape.toml": b"x=1\n"})
    resp = fc.put(
        ns_path("billing", "/manifest"),
        content=bad_tar,
        headers={**auth(SVC), "Content-Type": "application/gzip"},
    )
    flag_error(resp, 400, "invalid_request")
    assert versions(fc, "billing") == before
    got = fc.get(ns_path("billing", "/manifest"), headers=auth(SVC)).json()
    assert got == {"version": 1, "files": TREE}


@pytest.mark.parametrize(
    "member",
    ["absolute", "dotdot", "symlink", "hardlink", "fifo", "duplicate", "not_gzip", "not_tar"],
)
def test_unsafe_or_broken_tarballs_are_400(fc: TestClient, member: str) -> None:
    files = enc(TREE)
    if member == "absolute":
        body = make_tar({**files, "/etc/flags.toml": b"a=1\n"})
    elif member == "dotdot":
        body = make_tar({**files, "flags/../../x.toml": b"a=1\n"})
    elif member in ("symlink", "hardlink", "fifo"):
        info = tarfile.TarInfo("flags/link.toml")
        info.type = {
            "symlink": tarfile.SYMTYPE,
            "hardlink": tarfile.LNKTYPE,
            "fifo": tarfile.FIFOTYPE,
        }[member]
        info.linkname = "/etc/passwd" if member != "fifo" else ""
        body = make_tar(files, link=info)
    elif member == "duplicate":
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for p, c in [*files.items(), ("./namespace.toml", b"name='x'\n")]:
                info = tarfile.TarInfo(p)
                info.size = len(c)
                tar.addfile(info, io.BytesIO(c))
        body = buf.getvalue()
    elif member == "not_gzip":
        body = make_tar(files, gz=False)
    else:
        body = gzip.compress(b"this is not a tar archive" * 40)
    resp = fc.put(
        ns_path("billing", "/manifest"),
        content=body,
        headers={**auth(SVC), "Content-Type": "application/gzip"},
    )
    flag_error(resp, 400, "invalid_request")
    assert fc.get(ns_path("billing", "/manifest"), headers=auth(SVC)).status_code == 404


def test_oversized_bodies_are_413(fc: TestClient) -> None:
    # One file over the 1 MiB per-file cap (docs/flags.md TreeLimits).
    big = {**TREE, "flags/big.toml": "x = '" + "a" * (1024 * 1024) + "'\n"}
    resp = publish(fc, "billing", big)
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"]["code"] == "payload_too_large"
    # A body over the 32 MiB archive cap is refused before it is parsed.
    resp = fc.put(
        ns_path("billing", "/manifest"),
        content=b"\0" * (32 * 1024 * 1024 + 1),
        headers={**auth(SVC), "Content-Type": "application/gzip"},
    )
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"]["code"] == "payload_too_large"
    assert fc.get(ns_path("billing", "/manifest"), headers=auth(SVC)).status_code == 404


def test_publish_auth(fc: TestClient) -> None:
    url = ns_path("billing", "/manifest")
    flag_error(fc.put(url, json={"files": TREE}), 401, "unauthorized")
    flag_error(fc.put(url, json={"files": TREE}, headers=auth(UNKNOWN)), 401, "unauthorized")
    flag_error(
        fc.put(url, json={"files": TREE}, headers={"Authorization": f"Basic {SVC}"}),
        401,
        "unauthorized",
    )
    flag_error(publish(fc, "billing", TREE, token=RO), 403, "forbidden")  # no manifest.write
    flag_error(publish(fc, "billing", TREE, token=OTHER), 403, "forbidden")  # another tenant
    flag_error(publish(fc, "growth", TREE, token=LIMITED), 403, "forbidden")  # not its ns
    flag_error(publish(fc, "billing", TREE, token=NSCLIENT), 403, "forbidden")
    # The 403 comes before the body is looked at: even a broken body is 403, not 400.
    resp = fc.put(url, content=b"garbage", headers={**auth(RO), "Content-Type": "text/plain"})
    flag_error(resp, 403, "forbidden")
    assert fc.get(ns_path("billing", "/manifest"), headers=auth(SVC)).status_code == 404
    assert fc.get(ns_path("growth", "/manifest"), headers=auth(SVC)).status_code == 404

    assert publish(fc, "billing", TREE, token=LIMITED).status_code == 201
    assert publish(fc, "growth", TREE, token=WO).status_code == 201
    # A write-only token may publish but not read.
    flag_error(fc.get(ns_path("growth", "/manifest"), headers=auth(WO)), 403, "forbidden")


def test_superadmin_publishes_and_reads_in_any_tenant(fc: TestClient) -> None:
    resp = publish(fc, "billing", TREE, token=ADMIN, tenant="globex")
    assert resp.status_code == 201, resp.text
    assert resp.json()["closure_hash"] == closure_hash(enc(TREE))
    assert publish(fc, "billing", TREE, token=ADMIN, tenant="acme").status_code == 201
    got = fc.get(ns_path("billing", "/manifest", "globex"), headers=auth(OTHER))
    assert got.status_code == 200 and got.json()["files"] == TREE
    flag_error(
        fc.get(ns_path("billing", "/manifest", "globex"), headers=auth(SVC)), 403, "forbidden"
    )
    got = fc.get(ns_path("billing", "/manifest", "acme"), headers=auth(ADMIN))
    assert got.status_code == 200 and got.json()["version"] == 1


# --- read ----------------------------------------------------------------------------------
def test_read_manifest_with_etag_and_304(fc: TestClient) -> None:
    publish_ok(fc, "billing", TREE)
    resp = fc.get(ns_path("billing", "/manifest"), headers=auth(RO))
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"version": 1, "files": TREE}
    assert resp.headers["etag"] == '"v1"'
    resp = fc.get(ns_path("billing", "/manifest"), headers={**auth(RO), "If-None-Match": '"v1"'})
    assert resp.status_code == 304 and resp.content == b""
    assert resp.headers["etag"] == '"v1"'

    tree2 = {**TREE, "segments/beta.toml": "y = 'ü'\n"}
    publish_ok(fc, "billing", tree2)
    resp = fc.get(ns_path("billing", "/manifest"), headers={**auth(RO), "If-None-Match": '"v1"'})
    assert resp.status_code == 200
    assert resp.json() == {"version": 2, "files": tree2}
    assert resp.headers["etag"] == '"v2"'


def test_read_errors(fc: TestClient) -> None:
    flag_error(
        fc.get(ns_path("nosuch", "/manifest"), headers=auth(SVC)), 404, "namespace_not_found"
    )
    flag_error(
        fc.get(ns_path("nosuch", "/manifest/versions"), headers=auth(SVC)),
        404,
        "namespace_not_found",
    )
    publish_ok(fc, "billing", TREE)
    flag_error(fc.get(ns_path("billing", "/manifest"), headers=auth(WO)), 403, "forbidden")
    flag_error(fc.get(ns_path("billing", "/manifest"), headers=auth(NSCLIENT)), 403, "forbidden")
    flag_error(fc.get(ns_path("billing", "/manifest"), headers=auth(OTHER)), 403, "forbidden")
    flag_error(fc.get(ns_path("billing", "/manifest/versions"), headers=auth(WO)), 403, "forbidden")
    flag_error(fc.get(ns_path("billing", "/manifest")), 401, "unauthorized")
    # Existence is checked after authorization: a foreign token learns nothing.
    flag_error(fc.get(ns_path("nosuch", "/manifest"), headers=auth(OTHER)), 403, "forbidden")


def test_versions_list(fc: TestClient) -> None:
    trees = [TREE]
    for i in range(3):
        trees.append({**trees[-1], "flags/banner.toml": f"n = {i}\n"})
    started = time.time()
    for t in trees:
        publish_ok(fc, "billing", t)
    publish_ok(fc, "billing", trees[-1])  # identical: no new version
    got = versions(fc, "billing", token=RO)
    assert [v["version"] for v in got] == [1, 2, 3, 4]
    assert [v["closure_hash"] for v in got] == [closure_hash(enc(t)) for t in trees]
    stamps = [v["created_at"] for v in got]
    for s in stamps:
        assert RFC3339_MS.match(s), s
        assert set(got[0]) == {"version", "created_at", "closure_hash"}
    assert stamps == sorted(stamps)
    first = time.mktime(time.strptime(stamps[0][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert abs(first - started) < 120, (stamps[0], started)


# --- closure endpoint ----------------------------------------------------------------------
def closure_url(
    slug: str = "billing", version: Any = 1, sub: str | None = "checkout", **extra: str
) -> str:
    params = []
    if version is not None:
        params.append(f"version={version}")
    if sub is not None:
        params.append(f"subscription={b64sub(sub)}")
    params += [f"{k}={v}" for k, v in extra.items()]
    return ns_path(slug, "/closure") + "?" + "&".join(params)


def first_snapshot_url(client: TestClient, query: str, token: str = SVC) -> dict[str, Any]:
    with client.stream("GET", f"/api/v1/events?{query}", headers=auth(token)) as resp:
        assert resp.status_code == 200, resp.read()
        fr = Sse(resp).event()
    assert fr.data["delivery"] == "snapshot"
    return fr.data


def s3_keys(fc: TestClient, prefix: str) -> list[str]:
    from test_tiering import services

    svc = services(fc)
    bucket = svc.settings.bucket_name
    listed = svc.clients.s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


@pytest.mark.parametrize(
    "sub", ["checkout", "quiz", "banner", "checkout,quiz", "quiz,checkout", "nosuch", "*"]
)
def test_closure_by_bearer_is_the_expected_deterministic_tarball(fc: TestClient, sub: str) -> None:
    publish_ok(fc, "billing", TREE)
    canon = ",".join(sorted(sub.split(","))) if sub != "*" else "*"
    expected = closure_files(enc(TREE), canon)
    want_hash = closure_hash(expected)
    r1 = fc.get(closure_url(sub=sub), headers=auth(RO))
    assert r1.status_code == 200, r1.text
    r2 = fc.get(closure_url(sub=sub), headers=auth(SVC))
    assert r2.status_code == 200
    assert r1.content == r2.content
    assert untar(r1.content) == expected
    assert r1.headers["etag"] == f'"v1-{want_hash}"'
    assert r1.headers["cache-control"] == "private, max-age=60"
    assert r1.headers["content-type"] == "application/x-tar"
    assert int(r1.headers["content-length"]) == len(r1.content)
    resp = fc.get(closure_url(sub=sub), headers={**auth(RO), "If-None-Match": r1.headers["etag"]})
    assert resp.status_code == 304 and resp.content == b""
    assert resp.headers["etag"] == r1.headers["etag"]


def test_closure_expected_files_by_hand() -> None:
    """The independent model itself, pinned by hand for the TREE above."""
    assert set(closure_files(enc(TREE), "checkout")) == {
        "namespace.toml",
        "flags/checkout.toml",
        "segments/employees.toml",
        "segments/staff.toml",
    }
    assert set(closure_files(enc(TREE), "quiz")) == {
        "namespace.toml",
        "flags/quiz.toml",
        "segments/beta.toml",
        "segments/employees.toml",
        "segments/staff.toml",
    }
    assert set(closure_files(enc(TREE), "banner,nosuch")) == {
        "namespace.toml",
        "flags/banner.toml",
    }
    assert set(closure_files(enc(TREE), "*")) == set(TREE)
    # sha256 of the empty buffer (spec: the empty closure).
    assert closure_hash({}) == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_closure_tarball_is_stored_in_s3(fc: TestClient) -> None:
    publish_ok(fc, "billing", TREE)
    want = closure_hash(closure_files(enc(TREE), "checkout"))
    prefix = "flags/acme/billing/closures/"
    resp = fc.get(closure_url(), headers=auth(RO))
    assert resp.status_code == 200
    keys = s3_keys(fc, prefix)
    assert any(want.removeprefix("sha256:") in k for k in keys), keys
    from test_tiering import services

    svc = services(fc)
    (key,) = [k for k in keys if want.removeprefix("sha256:") in k]
    stored = svc.clients.s3.get_object(Bucket=svc.settings.bucket_name, Key=key)["Body"].read()
    assert stored == resp.content


def test_closure_with_the_signed_snapshot_url_needs_no_bearer(fc: TestClient) -> None:
    publish_ok(fc, "billing", TREE)
    data = first_snapshot_url(fc, "ns=billing:quiz,checkout")
    url = relative(data["snapshot_url"])
    resp = fc.get(url)
    assert resp.status_code == 200, resp.text
    expected = closure_files(enc(TREE), "checkout,quiz")
    assert untar(resp.content) == expected
    assert data["closure_hash"] == closure_hash(expected)
    assert resp.headers["etag"] == f'"v1-{data["closure_hash"]}"'
    assert fc.get(url).content == resp.content
    # With the bearer of the same principal too.
    assert fc.get(url, headers=auth(SVC)).content == resp.content
    # With the bearer of another principal: the token was not issued to it.
    err = flag_error(fc.get(url, headers=auth(RO)), 401, "closure_token_invalid")
    assert err["details"]["reason"] == "principal_mismatch"
    resp = fc.get(url, headers={"If-None-Match": f'"v1-{data["closure_hash"]}"'})
    assert resp.status_code == 304


def test_closure_query_errors(fc: TestClient) -> None:
    publish_ok(fc, "billing", TREE)
    h = auth(RO)
    for version in (None, "0", "-1", "01", "abc", "1.0", "", str(2**63)):
        flag_error(fc.get(closure_url(version=version), headers=h), 400, "invalid_request")
    base = ns_path("billing", "/closure") + "?version=1"
    for sub in (
        None,
        "",
        "Y2hlY2tvdXQ=",  # padded
        "Y2hlY2tvdXQ==",
        "Y2hlY2t*dXQ",  # not base64url
        "Y2hlY2tvdXR",  # stray bits: does not re-encode to itself
        b64sub("Bad Key"),
        b64sub("a,,b"),
        b64sub("*,a"),
        b64sub(",".join(f"f{i}" for i in range(65))),
    ):
        url = base if sub is None else f"{base}&subscription={sub}"
        flag_error(fc.get(url, headers=h), 400, "invalid_request")


def test_closure_signed_token_errors(fc: TestClient) -> None:
    publish_ok(fc, "billing", TREE)
    publish_ok(fc, "growth", TREE)
    publish_ok(fc, "billing", TREE, tenant="globex", token=OTHER)
    publish_ok(fc, "billing", {**TREE, "flags/banner.toml": "v = 2\n"})  # version 2
    data = first_snapshot_url(fc, "ns=billing:checkout")
    assert data["version"] == 2
    url = relative(data["snapshot_url"])
    assert fc.get(url).status_code == 200
    token = re.search(r"token=([^&]+)", url)
    assert token is not None
    tok = token.group(1)

    def reason(u: str) -> str:
        r: str = flag_error(fc.get(u), 401, "closure_token_invalid")["details"]["reason"]
        return r

    # Tampered: one hex digit of the MAC flipped, and a forged expiry.
    flipped = tok[:-1] + ("0" if tok[-1] != "0" else "1")
    assert reason(url.replace(tok, flipped)) == "tampered"
    exp, rest = tok.split(".", 1)
    assert reason(url.replace(tok, f"{int(exp) + 3600}.{rest}")) == "tampered"
    assert reason(url.replace(tok, "garbage")) == "malformed"
    # Used for another version, subscription, namespace or tenant.
    assert reason(closure_url(version=1, sub="checkout", token=tok)) == "tampered"
    assert reason(closure_url(version=2, sub="quiz", token=tok)) == "tampered"
    assert reason(closure_url(slug="growth", version=1, sub="checkout", token=tok)) == "tampered"
    other = closure_url(version=1, sub="checkout", token=tok).replace("/acme/", "/globex/")
    assert reason(other) == "tampered"

    # Expired: the same key and scope, signed by a clock 61 s in the past.
    from test_tiering import services

    principal = services(fc).flags.tokens.authenticate(SVC)
    assert principal is not None
    old = SnapshotSigner(SIGNING_KEY.encode(), clock=lambda: time.time() - 61)
    stale = old.issue(SnapshotScope(principal.id, "acme", "billing", 2, "checkout"))
    assert reason(closure_url(version=2, sub="checkout", token=stale)) == "expired"
    # ... and one minted now with that signer is fine (so the test above can fail).
    fresh = SnapshotSigner(SIGNING_KEY.encode()).issue(
        SnapshotScope(principal.id, "acme", "billing", 2, "checkout")
    )
    assert fc.get(closure_url(version=2, sub="checkout", token=fresh)).status_code == 200
    # A token signed with another key.
    forged = SnapshotSigner(b"x" * 32).issue(
        SnapshotScope(principal.id, "acme", "billing", 2, "checkout")
    )
    assert reason(closure_url(version=2, sub="checkout", token=forged)) == "tampered"


def test_closure_auth_and_existence_errors(make_client: MakeClient) -> None:
    fc = flags_client(make_client, retain_versions=2, retain_sec=0)
    flag_error(fc.get(closure_url(), headers=auth(RO)), 404, "namespace_not_found")
    trees = [TREE]
    for i in range(3):
        trees.append({**trees[-1], "flags/checkout.toml": f"n = {i}\nsegment = 'staff'\n"})
    for t in trees:
        publish_ok(fc, "billing", t)
    flag_error(fc.get(closure_url()), 401, "unauthorized")
    flag_error(fc.get(closure_url(), headers=auth(UNKNOWN)), 401, "unauthorized")
    flag_error(fc.get(closure_url(version=4), headers=auth(OTHER)), 403, "forbidden")
    flag_error(fc.get(closure_url(version=4), headers=auth(WO)), 403, "forbidden")
    flag_error(fc.get(closure_url(version=4), headers=auth(NSCLIENT)), 403, "forbidden")
    flag_error(fc.get(closure_url(version=5), headers=auth(RO)), 404, "namespace_not_found")
    flag_error(
        fc.get(closure_url(slug="nosuch", version=1), headers=auth(RO)), 404, "namespace_not_found"
    )
    # retain_versions=2: versions 3 and 4 are reconstructable, 1 and 2 are gone.
    for v in (1, 2):
        flag_error(fc.get(closure_url(version=v), headers=auth(RO)), 410, "closure_unavailable")
    for v in (3, 4):
        resp = fc.get(closure_url(version=v), headers=auth(RO))
        assert resp.status_code == 200, resp.text
        assert untar(resp.content) == closure_files(enc(trees[v - 1]), "checkout")
    # The versions list still shows every version.
    assert [v["version"] for v in versions(fc, "billing")] == [1, 2, 3, 4]
    # The superadmin may read any tenant's closure by bearer.
    resp = fc.get(closure_url(version=4), headers=auth(ADMIN))
    assert resp.status_code == 200


def test_identical_files_in_two_namespaces_are_stored_for_each(make_client: MakeClient) -> None:
    """Files are content-addressed per namespace (flags/<tenant>/<slug>/files/...): a file
    another namespace already holds must still be stored for this one, so a fresh process
    (empty caches) can read it."""
    fc = flags_client(make_client)
    publish_ok(fc, "billing", TREE)
    publish_ok(fc, "growth", TREE)
    publish_ok(fc, "billing", TREE, tenant="globex", token=OTHER)
    fresh = flags_client(make_client)
    for tenant, slug, token in (("acme", "growth", RO), ("globex", "billing", OTHER)):
        resp = fresh.get(ns_path(slug, "/manifest", tenant), headers=auth(token))
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"version": 1, "files": TREE}
        resp = fresh.get(
            ns_path(slug, "/closure", tenant) + "?version=1&subscription=Kg", headers=auth(token)
        )
        assert resp.status_code == 200, resp.text
        assert untar(resp.content) == enc(TREE)
    keys = s3_keys(fc, "flags/acme/growth/files/")
    assert len(keys) == len({c for c in TREE.values()}), keys
