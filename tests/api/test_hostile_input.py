"""Zero 5xx on hostile input (issue 23, item 3), on every route of every surface.

The routes come from the app itself (hostile_routes.app_routes), so a new route is fuzzed
without touching this file: its path parameters, headers, query and a generic body; give it a
hostile_routes.ROUTES entry (a valid request) and its body fields are fuzzed too. Most
handlers read a raw Request, so /openapi.json knows no bodies: the fields are found by
walking each valid body, written from the parsers (v0/parse.py, queue, watch, routers,
notify.requests, dashboard.items and service, flags.manifest, durable).

test_corpus_never_answers_5xx mutates one part of the valid request at a time: each JSON
field gets every value of hostile_corpus.VALUES (types, huge and tiny numbers, NaN,
surrogates, control characters, invalid UTF-8, deep nesting), and the whole body,
Content-Type, Content-Encoding, each header, each query parameter and each path parameter
get theirs. test_random_hostile_requests_never_answer_5xx combines mutations at random
(hypothesis, derandomized: the run is repeatable). Every answer must be < 500 and, when an
error, in its surface's envelope; rejected requests must leave storage (every table item,
every S3 object) as it was. Requests go straight into the ASGI app (hostile_corpus's bare
client: an opened event stream is hung up at once) against moto.

HEADWATER_HOSTILE_EXAMPLES (hypothesis examples per route, default 8) makes a longer run."""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from dashboard_helpers import fast
from flags_helpers import flag_settings
from hostile_corpus import (
    BODIES,
    CONTENT_TYPES,
    GZIP_BODIES,
    HEADER_VALUES,
    QUERY_VALUES,
    SEGMENTS,
    VALUES,
    Answer,
    Raw,
    asgi_request,
    encode,
    envelope_problem,
)
from hostile_routes import JSON, Route, all_routes, seed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from test_notify_http import SCHEMA, notify_settings

from headwater.http.app import create_app
from headwater.settings import ENV_API_KEYS_PARAMETER, Settings, Tiering
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from headwater.storage.schema import TABLES

pytestmark = pytest.mark.api

EXAMPLES = int(os.environ.get("HEADWATER_HOSTILE_EXAMPLES", "8"))
SENT: list[int] = []  # requests sent, for the record
CHUNK = 12  # requests between two storage fingerprints


# --- requests --------------------------------------------------------------------------------
OPAQUE = ("data", "meta", "payload")  # payloads: mutated, not descended into


@dataclass
class Req:
    method: str
    template: str
    params: dict[str, str]  # percent-encoded path segments
    query: dict[str, str]  # percent-encoded values
    headers: dict[str, str]  # latin-1 text, as a server decodes header bytes
    body: bytes | None
    label: str = ""
    raw_query: str | None = None  # instead of `query`

    @property
    def path(self) -> str:
        out = self.template
        for name, value in self.params.items():
            out = out.replace("{" + name + "}", value).replace("{" + name + ":path}", value)
        return out

    @property
    def query_string(self) -> str:
        if self.raw_query is not None:
            return self.raw_query
        return "&".join(f"{k}={v}" for k, v in self.query.items())

    def where(self) -> str:
        q = "?" + self.query_string if self.query_string else ""
        return f"{self.method} {(self.path + q)[:100]} [{self.label[:80]}]"


def base_request(method: str, template: str, route: Route) -> Req:
    params = {name: route.params.get(name, "fz") for name in _param_names(template)}
    headers = dict(route.headers)
    body: bytes | None = None
    if route.raw_body is not None:
        body = route.raw_body
    elif route.body is not None:
        body = encode(route.body)
    if body is not None and route.content_type is not None:
        headers["content-type"] = route.content_type
    return Req(method, template, params, dict(route.query), headers, body)


def _param_names(template: str) -> list[str]:
    return [p.split("}")[0].split(":")[0] for p in template.split("{")[1:]]


def positions(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every position in a JSON template (object fields, list elements), nested; a payload
    (OPAQUE) is one position."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for k, v in items:
        yield (*at, k)
        if isinstance(v, dict | list) and k not in OPAQUE:
            yield from positions(v, (*at, k))


def replace_at(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replace_at(value[head], rest, new)}
    out = list(value)
    out[head] = replace_at(value[head], rest, new)
    return out


def mutations(req: Req, route: Route) -> Iterator[Req]:
    """The deterministic corpus for one route: one hostile part at a time."""
    r = dataclasses.replace
    template = route.body
    if isinstance(template, dict | list):
        for path in [(), *positions(template)]:
            for v in VALUES:
                body = encode(replace_at(template, path, v))
                yield r(req, body=body, label=f"{'.'.join(map(str, path))}={v.label}")
        if isinstance(template, dict):  # an unknown field, and a lone-surrogate key
            yield r(req, body=encode({**template, "zz_unknown": 1}), label="unknown field")
            body = encode({**template, "zz": Raw("", b"1")}).replace(b'"zz"', b'"\\ud800"')
            yield r(req, body=body, label="surrogate key")
    ctype = {"content-type": req.headers.get("content-type", JSON)}
    for b in BODIES:
        yield r(req, body=b.text, headers={**req.headers, **ctype}, label=f"body {b.label}")
    for b in GZIP_BODIES:
        headers = {**req.headers, **ctype, "content-encoding": "gzip"}
        yield r(req, body=b.text, headers=headers, label=f"gzip {b.label}")
    yield r(req, headers={**req.headers, "content-encoding": "br"}, label="content-encoding br")
    for ct in CONTENT_TYPES:
        headers = {k: v for k, v in req.headers.items() if k != "content-type"}
        if ct is not None:
            headers["content-type"] = ct
        yield r(req, headers=headers, body=req.body or b"{}", label=f"content-type {ct!r:.20}")
    for name in req.headers:
        for hv in HEADER_VALUES:
            yield r(req, headers={**req.headers, name: hv}, label=f"header {name}={hv!r:.12}")
    yield r(req, headers={**req.headers, "authorization": "Bearer \xff"}, label="odd bearer")
    yield r(req, headers={**req.headers, "x-huge": "h" * 200_000}, label="huge header")
    for name in req.query:
        for qv in QUERY_VALUES:
            yield r(req, query={**req.query, name: qv}, label=f"query {name}={qv:.12}")
    repeated = "&".join([req.query_string or "x=1"] * 2)
    yield r(req, raw_query=repeated, label="every query parameter twice")
    for name in req.params:
        for seg in SEGMENTS:
            yield r(req, params={**req.params, name: seg}, label=f"path {name}={seg:.12}")


def send(client: TestClient, req: Req) -> Answer:
    SENT.append(1)
    headers = [(k.lower().encode(), v.encode("latin-1")) for k, v in req.headers.items()]
    query = req.query_string
    portal = client.portal
    assert portal is not None
    return portal.call(asgi_request, client.app, req.method, req.path, query, headers, req.body)


def check(client: TestClient, req: Req, problems: list[str]) -> int:
    """Sends `req`; a 5xx or an error outside its surface's envelope is added to `problems`."""
    a = send(client, req)
    if a.status >= 500 or a.status == 0 or a.crashed:
        problems.append(f"{req.where()}: {a.status} crashed={a.crashed} {a.body[:200]!r}")
    elif a.status >= 400:
        problem = envelope_problem(req.method, req.path, a.status, a.headers, a.body)
        if problem is not None:
            problems.append(f"{req.where()}: {a.status} {problem}: {a.body[:200]!r}")
    return a.status


# --- the app and its storage -----------------------------------------------------------------
@dataclass
class Fuzz:
    client: TestClient
    aws: AwsClients
    settings: Settings

    def fingerprint(self) -> list[Any]:
        """Every item of every table, every S3 object's key and ETag: read from moto's
        in-memory backends (a scan through boto3 costs a hundred times more)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends
        from moto.s3.models import s3_backends

        ddb = dynamodb_backends[DEFAULT_ACCOUNT_ID][self.settings.region]
        out: list[Any] = []
        for table in TABLES:
            items = []
            for item in ddb.get_table(self.settings.table_name(table.logical)).all_items():
                attrs = item.to_json()["Attributes"]
                attrs.pop("lr", None)  # a head's last read time: reads move it, by design
                items.append(json.dumps(attrs, sort_keys=True, default=str))
            out.append(sorted(items))
        bucket = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[self.settings.bucket_name]
        out.append(sorted((k, v.etag) for k, v in bucket.keys.items()))
        return out

    def settled(self) -> list[Any]:
        """The fingerprint once background work an accepted request started (a flag
        closure's upload, a dashboard feed write) has finished: two equal in a row."""
        last = self.fingerprint()
        for _ in range(100):
            time.sleep(0.02)
            now = self.fingerprint()
            if now == last:
                return now
            last = now
        raise AssertionError("storage never settled")


@pytest.fixture(scope="module")
def fuzz(aws: AwsClients, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzz]:
    schema = tmp_path_factory.mktemp("hostile") / "schema.yaml"
    schema.write_text(SCHEMA)
    cfg = Settings(
        resource_prefix=f"hw-{uuid.uuid4().hex[:8]}",
        tiering=Tiering(inline=False, interval_ms=0),
        notify=notify_settings(str(schema)),
        flags=flag_settings(),
        dashboard=fast(),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(ENV_API_KEYS_PARAMETER, raising=False)
        ensure_resources(cfg, aws)
        app = create_app(cfg, aws)
        with TestClient(app, raise_server_exceptions=False) as client:
            seed(client)
            yield Fuzz(client, aws, cfg)
    print(f"\nhostile input: {len(SENT)} requests")


CASES = all_routes()


def _case_id(method: str, template: str, route: Route) -> str:
    path = route.params.get("path")  # a Durable Streams extra: its concrete path
    return f"{method} {template.replace('{path:path}', path) if path else template}"


IDS = [_case_id(*case) for case in CASES]


@pytest.mark.parametrize(("method", "template", "route"), CASES, ids=IDS)
def test_corpus_never_answers_5xx(fuzz: Fuzz, method: str, template: str, route: Route) -> None:
    base = base_request(method, template, route)
    problems: list[str] = []
    run(fuzz, method, list(mutations(base, route)), problems)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


def _diff(before: list[Any] | None, after: list[Any]) -> str:
    assert before is not None
    names = [t.logical for t in TABLES] + ["s3"]
    out = []
    for name, b, a in zip(names, before, after, strict=True):
        if a != b:
            gone, new = (
                sorted(set(map(str, b)) - set(map(str, a))),
                sorted(set(map(str, a)) - set(map(str, b))),
            )
            if len(gone) == len(new) == 1 and name != "s3":
                ga, na = json.loads(gone[0]), json.loads(new[0])
                changed = {
                    k: (ga.get(k), na.get(k)) for k in set(ga) | set(na) if ga.get(k) != na.get(k)
                }
                out.append(f"{name} {ga.get('pk') or ga.get('topic')}: {str(changed)[:400]}")
                continue
            out.append(f"{name}: -{[g[:300] for g in gone[:2]]} +{[n[:300] for n in new[:2]]}")
    return "; ".join(out)


def run(fuzz: Fuzz, method: str, reqs: list[Req], problems: list[str]) -> None:
    """Sends every request; on a mutating route, every CHUNK requests rejected in a row must
    leave storage as it was (an accepted request starts a new baseline)."""
    mutating = method in ("POST", "PUT", "DELETE")
    baseline = fuzz.fingerprint() if mutating else None
    rejected: list[str] = []
    for req in reqs:
        status = check(fuzz.client, req, problems)
        if not mutating:
            continue
        if status < 400:
            baseline, rejected = fuzz.settled(), []
            continue
        rejected.append(req.label)
        if len(rejected) == CHUNK or req is reqs[-1]:
            now = fuzz.fingerprint()
            if now != baseline:
                problems.append(f"one of {rejected} changed storage: {_diff(baseline, now)}")
            baseline, rejected = now, []


# --- random combinations (hypothesis) ---------------------------------------------------------
# Header and query names the parsers read (a mutation may add any of them to any route).
HEADER_NAMES = [
    "accept",
    "authorization",
    "content-encoding",
    "content-type",
    "idempotency-key",
    "if-none-match",
    "last-event-id",
    "producer-epoch",
    "producer-id",
    "producer-seq",
    "stream-closed",
    "stream-expires-at",
    "stream-fork-offset",
    "stream-fork-sub-offset",
    "stream-forked-from",
    "stream-key",
    "stream-seq",
    "stream-timestamp",
    "stream-ttl",
    "x-forwarded-proto",
    "x-request-id",
    "x-user-id",
]
QUERY_NAMES = [
    "after",
    "cursor",
    "filter",
    "format",
    "from_ms",
    "granularity",
    "if_empty",
    "key",
    "lease_ms",
    "lenient",
    "limit",
    "max",
    "node",
    "ns",
    "offset",
    "page_size",
    "prefix",
    "return_seqs",
    "settle",
    "since",
    "subscription",
    "timeout",
    "to_ms",
    "token",
    "touch",
    "user_id",
    "version",
]
ODD_CHARS = ["\ud800", "\udfff", "\x00", "\x1f", "\u2028", "\ufeff", "\U0001f642", '"', "\\"]
texts = st.lists(st.characters() | st.sampled_from(ODD_CHARS), max_size=12).map("".join)
numbers = (
    st.integers(min_value=-(10**450), max_value=10**450).map(str)
    | st.tuples(st.integers(-9, 9), st.integers(-500, 500)).map(lambda t: f"{t[0]}.5e{t[1]}")
    | st.sampled_from(["NaN", "Infinity", "-Infinity", "-0", "-0.0", "1E+2", "0e0"])
)
leaves = (
    st.sampled_from(VALUES)
    | texts.map(lambda t: Raw("text", json.dumps(t).encode()))
    | numbers.map(lambda n: Raw("number", n.encode()))
    | st.sampled_from([None, True, False])
)
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
latin1 = st.text(st.characters(max_codepoint=0xFF), max_size=40)
encoded = st.binary(max_size=24).map(lambda b: "".join(f"%{x:02X}" for x in b)) | st.sampled_from(
    QUERY_VALUES
)


@st.composite
def hostile(draw: st.DrawFn, req: Req, route: Route) -> Req:
    """`req` with one to four random parts made hostile."""
    r = dataclasses.replace
    for _ in range(draw(st.integers(1, 4))):
        part = draw(st.sampled_from(["field", "body", "bytes", "header", "query", "path"]))
        template = route.body
        if part == "field" and isinstance(template, dict | list) and template:
            path = draw(st.sampled_from(list(positions(template))))
            value = draw(json_values)
            req = r(req, body=encode(replace_at(template, path, value)), label=f"{path}")
        elif part in ("field", "body"):
            req = r(req, body=encode(draw(json_values)), label="random body")
        elif part == "bytes" and req.body:
            body = bytearray(req.body)
            cut = draw(st.integers(0, len(body)))
            body[cut:] = draw(st.binary(max_size=8))
            req = r(req, body=bytes(body), label="damaged body")
        elif part == "header":
            name = draw(st.sampled_from(sorted({*req.headers, *HEADER_NAMES})))
            req = r(req, headers={**req.headers, name: draw(latin1)}, label=f"header {name}")
        elif part == "query":
            name = draw(st.sampled_from(sorted({*req.query, *QUERY_NAMES})))
            req = r(req, query={**req.query, name: draw(encoded)}, label=f"query {name}")
        elif part == "path" and req.params:
            name = draw(st.sampled_from(sorted(req.params)))
            seg = draw(encoded.filter(lambda s: bool(s) and "%2F" not in s.upper()))
            req = r(req, params={**req.params, name: seg}, label=f"path {name}")
    return req


@pytest.mark.parametrize(("method", "template", "route"), CASES, ids=IDS)
def test_random_hostile_requests_never_answer_5xx(
    fuzz: Fuzz, method: str, template: str, route: Route
) -> None:
    base = base_request(method, template, route)
    mutating = method in ("POST", "PUT", "DELETE")

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(req=hostile(base, route))
    def one(req: Req) -> None:
        before = fuzz.fingerprint() if mutating else None
        problems: list[str] = []
        status = check(fuzz.client, req, problems)
        assert not problems, problems[0]
        if before is not None and status >= 400:
            now = fuzz.fingerprint()
            assert now == before, f"{req.where()} changed storage: {_diff(before, now)}"
        elif before is not None:
            fuzz.settled()

    one()
