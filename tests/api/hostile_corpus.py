"""The hostile-input corpus (issue 23, item 3): JSON values, whole bodies, header, query and
path values a hostile client sends, a JSON writer that can splice invalid text into an
otherwise valid body, and each HTTP surface's error envelope as the docs state it."""

from __future__ import annotations

import asyncio
import gzip
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote


@dataclass(frozen=True)
class Raw:
    """JSON text spliced verbatim into a body (it may be invalid: that is the point)."""

    label: str
    text: bytes


def encode(value: Any) -> bytes:
    """A body with Raw values spliced in (everything else as compact JSON)."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = (json.dumps(k).encode() + b":" + encode(v) for k, v in value.items())
        return b"{" + b",".join(items) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(encode(v) for v in value) + b"]"
    return json.dumps(value).encode()


def nested(depth: int, inner: bytes = b"1", obj: bool = False) -> bytes:
    if obj:
        return b'{"a":' * depth + inner + b"}" * depth
    return b"[" * depth + inner + b"]" * depth


# Values for any JSON field. Every one is either valid JSON that some field rejects (wrong
# type, out of range, invalid as a name) or invalid JSON; none may produce a 5xx.
VALUES: list[Raw] = [
    Raw("null", b"null"),
    Raw("true", b"true"),
    Raw("false", b"false"),
    Raw("zero", b"0"),
    Raw("minus-one", b"-1"),
    Raw("minus-zero", b"-0"),
    Raw("minus-zero-float", b"-0.0"),
    Raw("half", b"0.5"),
    Raw("1e400", b"1e400"),
    Raw("-1e400", b"-1e400"),
    Raw("1e-400", b"1e-400"),
    Raw("10**400", b"1" + b"0" * 400),
    Raw("-10**400", b"-1" + b"0" * 400),
    Raw("2**64", b"18446744073709551616"),
    Raw("-(2**63)-1", b"-9223372036854775809"),
    Raw("5000-digits", b"9" * 5000),
    Raw("NaN", b"NaN"),
    Raw("Infinity", b"Infinity"),
    Raw("-Infinity", b"-Infinity"),
    Raw("empty-string", b'""'),
    Raw("lone-high-surrogate", b'"\\ud800"'),
    Raw("lone-low-surrogate", b'"a\\udfffb"'),
    Raw("reversed-pair", b'"\\udc00\\ud800"'),
    Raw("surrogate-utf8-bytes", b'"\xed\xa0\x80"'),
    Raw("invalid-utf8", b'"\xff\xfe"'),
    Raw("truncated-utf8", b'"\xe2\x82"'),
    Raw("nul", b'"\\u0000"'),
    Raw("controls", b'"\\n\\r\\t\\u001b\\u007f"'),
    Raw("raw-control", b'"a\x01b"'),
    Raw("emoji", '"\U0001f642"'.encode()),
    Raw("line-separator", b'"\\u2028"'),
    Raw("slashes", b'"../a/b\\\\c"'),
    Raw("long-string", b'"' + b"x" * 70_000 + b'"'),
    Raw("deep-toml-string", json.dumps("a = " + "[" * 5000 + "]" * 5000).encode()),
    Raw("empty-list", b"[]"),
    Raw("empty-object", b"{}"),
    Raw("list", b'[1,"a",null,{"b":[]}]'),
    Raw("list-of-surrogates", b'["\\ud800"]'),
    Raw("object", b'{"a":1,"\\ud800":2}'),
    Raw("deep-1000", nested(1000)),
    Raw("deep-1025", nested(1025)),
    Raw("deep-objects-1025", nested(1025, obj=True)),
    Raw("deep-10000", nested(10_000)),
    Raw("deep-unclosed", b"[" * 10_000),
    Raw("truncated", b'{"a":[1,'),
]

# Whole request bodies (sent with the route's usual Content-Type).
BODIES: list[Raw] = [
    Raw("empty", b""),
    Raw("space", b"   "),
    Raw("null", b"null"),
    Raw("list", b"[]"),
    Raw("string", b'"x"'),
    Raw("number", b"1e400"),
    Raw("open-brace", b"{"),
    Raw("trailing-garbage", b"{}x"),
    Raw("invalid-utf8", b"\xff\xfe\xfd"),
    Raw("utf8-bom", b"\xef\xbb\xbf{}"),
    Raw("utf16", '{"a": 1}'.encode("utf-16")),
    Raw("nul-bytes", b"\x00" * 64),
    Raw("deep-1025", nested(1025)),
    Raw("deep-10000", nested(10_000)),
    Raw("deep-objects-10000", nested(10_000, obj=True)),
    Raw("surrogate-key", b'{"\\ud800": 1}'),
    Raw("duplicate-keys", b'{"a": 1, "a": 2}'),
    Raw("nan", b'{"a": NaN}'),
    Raw("big-int", b'{"a": ' + b"9" * 5000 + b"}"),
    Raw("huge", b'{"a": "' + b"x" * (7 << 20) + b'"}'),
]

# Raw gzip-related bodies: sent with Content-Encoding: gzip.
GZIP_BODIES: list[Raw] = [
    Raw("not-gzip", b"plainly not gzip"),
    Raw("truncated-gzip", gzip.compress(b'{"a": 1}')[:-6]),
    Raw("gzip-of-deep", gzip.compress(nested(10_000))),
    Raw("gzip-bomb", gzip.compress(b" " * (80 << 20))),
]

CONTENT_TYPES = [
    None,
    "text/plain",
    "application/json; charset=utf-16",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json\t; garbage",
    "\xff\xfe/json",
    "x" * 9000,
]

# Header values: latin-1 text (what a server can receive); empty, oversized, numeric edges.
HEADER_VALUES = [
    "",
    " ",
    "\xff\xfe",
    "\xe9t\xe9",
    "1e400",
    "-1",
    "-0",
    "99999999999999999999999999999999999999",
    "NaN",
    "\t",
    "x" * 65_536,
]

# Query values, percent-encoded as a client would send them.
QUERY_VALUES = [
    "",
    "%00",
    "%ED%A0%80",
    "%FF%FE",
    "-1",
    "-0",
    "1e400",
    "9" * 5000,
    "NaN",
    "%5B%5D",
    "a" * 10_000,
    "%0D%0Ainjected:%20header",
    "%28" * 3000,
    "%5B" * 3000,
]

# Path segments, percent-encoded.
SEGMENTS = [
    "%ED%A0%80",
    "%00",
    "%FF",
    "%2F",
    "%0A",
    "%20",
    "..",
    "%C3%A9",
    "a" * 3000,
]


# --- each surface's error envelope ------------------------------------------------------
def surface(path: str) -> str:
    if path == "/api/v1/events" or path.startswith("/api/v1/tenants/"):
        return "flags"
    if path.startswith("/api/v1/"):
        return "aviso"
    if path.startswith("/api/v2/"):
        return "dashboard"
    if path.startswith("/v1/"):
        return "durable"
    return "v0"


def envelope_problem(
    method: str, path: str, status: int, headers: dict[str, str], body: bytes
) -> str | None:
    """Why an error response is not in its surface's envelope (None: it is)."""
    kind = surface(path)
    if method == "HEAD":
        return None  # the server sends no body (h11 and httptools drop it)
    if kind == "flags" and status == 414:
        return None if not body else "a body on a 414"
    if not headers.get("content-type", "").startswith("application/json"):
        return f"content-type {headers.get('content-type')!r}"
    try:
        doc = json.loads(body)
    except ValueError:
        return "not JSON"
    if not isinstance(doc, dict):
        return "not an object"
    if kind == "v0":
        err = doc.get("error")
        ok = (
            isinstance(err, dict)
            and isinstance(err.get("code"), str)
            and isinstance(err.get("message"), str)
            and set(err) <= {"code", "message", "detail"}
            and isinstance(err.get("detail", {}), dict)
            and isinstance(doc.get("performance"), dict)
        )
    elif kind == "durable":
        err = doc.get("error")
        ok = set(doc) == {"error"} and isinstance(err, dict) and set(err) == {"code", "message"}
    elif kind == "flags":
        err = doc.get("error")
        ok = (
            set(doc) == {"error"}
            and isinstance(err, dict)
            and {"code", "message"} <= set(err) <= {"code", "message", "details"}
        )
    elif kind == "dashboard":
        ok = isinstance(doc.get("detail"), str) and bool(doc["detail"])
    else:  # aviso: an error body, or an admin route's {success: false, message, ...}
        rid = headers.get("x-request-id")
        if "success" in doc:  # the admin routes' answers
            ok = doc["success"] is False and isinstance(doc.get("message"), str)
        elif "status" in doc:  # the schema routes' answers
            ok = doc["status"] == "error" and isinstance(doc.get("message"), str)
        else:
            ok = {"code", "error", "message", "request_id"} <= set(doc) and isinstance(
                doc["code"], str
            )
        ok = ok and doc.get("request_id") == rid
    return None if ok else f"not the {kind} envelope"


# --- a bare ASGI client ----------------------------------------------------------------------
@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    crashed: bool  # the app raised (after or instead of answering)


async def asgi_request(
    app: Any,
    method: str,
    raw_path: str,
    query: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes | None,
    timeout_s: float = 30.0,
) -> Answer:
    """One request straight into the ASGI app, as uvicorn would make it (the path
    percent-decoded with replacement characters, headers as sent). An event stream that
    opens (2xx) is disconnected at once: its status and headers are all this needs."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": unquote(raw_path),
        "raw_path": raw_path.encode("ascii"),
        "root_path": "",
        "query_string": query.encode("ascii"),
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    if body is not None:
        scope["headers"].append((b"content-length", str(len(body)).encode()))
    sent = False
    gone = asyncio.Event()
    done = asyncio.Event()
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body or b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            ctype = dict(message.get("headers", [])).get(b"content-type", b"")
            if message["status"] < 400 and ctype.startswith(b"text/event-stream"):
                done.set()  # a stream opened: hang up
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    task = asyncio.ensure_future(app(scope, receive, send))
    waiter = asyncio.ensure_future(done.wait())
    await asyncio.wait({task, waiter}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    gone.set()
    crashed = False
    try:
        await asyncio.wait_for(task, 5.0)
    except TimeoutError:
        pass  # wait_for cancelled it: a stream that did not notice the disconnect
    except Exception:
        crashed = True
    status = start.get("status", 0)  # 0: no answer at all
    hdrs = {k.decode("latin-1"): v.decode("latin-1") for k, v in start.get("headers", [])}
    return Answer(status, hdrs, b"".join(chunks), crashed)
