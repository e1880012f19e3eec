"""The web console (/console, docs/console.md) end to end: one real server process (with API
keys, the example flag tokens and notification schema) and one headless Chromium (Debian's
/usr/bin/chromium, driven by Playwright) for the whole module.

Every page the tests open must log no console error and raise no page error (a failed
request counts: Chromium logs it as a console error). What is checked:
- connecting with the key by keyboard (the form submits with Enter), the main navigation
  by keyboard (g-shortcuts, Tab + Enter on the nav, the help dialog), a form submitted with
  Enter that creates a topic;
- every view loads (and is saved as a screenshot under test-artifacts/console/);
- live updates: a record appended over HTTP shows up in the topic's tail; the tail pauses
  and resumes from the last seq (nothing missed, nothing twice); the dashboard's metrics
  move when items are ingested; a notification polygon lands on the map; a flag version
  published over HTTP shows up in the live events with its closure diff;
- actions: an append from the console is in the topic; claim, ack and nack of queue jobs
  change the queue's counters as the server reports them; a /v1 search returns hits."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Error,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from headwater.dev.emulator import MotoServer
from tests.e2e.conftest import Cluster, ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEY = "console-e2e-key-" + uuid.uuid4().hex[:12]
FLAG_TOKEN = "dev-acme-flags-rw-0000000000000000"  # infra/flag_tokens.example.yaml
USER = "console-e2e-user"
NAMESPACE = "console-e2e"
STREAM = "console/logs"
POLYGON = "(40,-10,40,20,60,20,60,-10,40,-10)"
SEARCH_SCHEMA: dict[str, Any] = {
    "schema": {
        "type": "object",
        "properties": {
            "ts": {"type": "integer"},
            "svc": {"type": "string"},
            "msg": {"type": "string"},
        },
    },
    "search": {
        "primaryTimestampField": "ts",
        "fields": {
            "ts": {
                "kind": "date",
                "bindings": [{"version": 1, "jsonPointer": "/ts"}],
                "column": True,
                "sortable": True,
            },
            "svc": {
                "kind": "keyword",
                "bindings": [{"version": 1, "jsonPointer": "/svc"}],
                "exact": True,
                "prefix": True,
            },
            "msg": {
                "kind": "text",
                "bindings": [{"version": 1, "jsonPointer": "/msg"}],
                "analyzer": "unicode_word_v1",
                "positions": True,
            },
        },
    },
}

expect.set_options(timeout=10_000)


def flag_files(enabled: bool, staff: bool) -> dict[str, Any]:
    files = {
        "namespace.toml": f'name = "{NAMESPACE}"\n',
        "flags/checkout.toml": f"enabled = {'true' if enabled else 'false'}\n",
    }
    if staff:
        files["flags/checkout.toml"] += 'segments = ["staff"]\n'
        files["segments/staff.toml"] = 'emails = ["ops@example.com"]\n'
    return {"files": files}


# --- fixtures: one server, one browser ------------------------------------------------------
@dataclass
class Server:
    url: str
    http: httpx.Client

    def ok(self, response: httpx.Response) -> Any:
        assert response.status_code < 300, (response.status_code, response.text)
        return response.json() if response.content else None


@pytest.fixture(scope="module")
def server(emulator: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    cluster = Cluster(emulator, f"e2e-console-{uuid.uuid4().hex[:8]}")
    process: ServerProcess = cluster.start_server(
        str(tmp_path_factory.mktemp("console")),
        TOPICS_API_KEYS=KEY,
        HEADWATER_FLAG_TOKENS=str(ROOT / "infra" / "flag_tokens.example.yaml"),
        HEADWATER_NOTIFICATION_SCHEMA=str(ROOT / "infra" / "notification_schema.example.yaml"),
    )
    http = httpx.Client(
        base_url=process.url, headers={"authorization": f"Bearer {KEY}"}, timeout=15
    )
    s = Server(process.url, http)
    seed(s)
    try:
        yield s
    finally:
        http.close()
        process.stop()


def seed(s: Server) -> None:
    """A little of every surface, so each view has something to show."""
    s.ok(
        s.http.post(
            "/v0/topics/orders",
            json={"records": [{"data": {"n": i}, "tag": f"t{i}"} for i in range(3)]},
        )
    )
    s.ok(s.http.put("/v0/topics/jobs", json={"type": "queue", "max_deliveries": 3}))
    s.ok(s.http.post("/v0/topics/jobs", json={"records": [{"data": {"job": i}} for i in range(2)]}))
    s.ok(s.http.put("/v0/routers/orders-audit", json={"source": "orders", "dest": "audit"}))
    s.ok(s.http.put("/v0/routers/audit-archive", json={"source": "audit", "dest": "archive"}))
    json_type = {"content-type": "application/json"}
    s.ok(s.http.put(f"/v1/stream/{STREAM}", headers=json_type))
    s.ok(s.http.post(f"/v1/stream/{STREAM}/_schema", json=SEARCH_SCHEMA))
    entries = [
        {"ts": 1_700_000_000_000 + i, "svc": ["api", "web"][i % 2], "msg": f"connection reset {i}"}
        for i in range(6)
    ]
    s.ok(s.http.post(f"/v1/stream/{STREAM}", content=json.dumps(entries), headers=json_type))
    note = {
        "event_type": "test_polygon",
        "identifier": {"date": "20260101", "time": "1200", "polygon": POLYGON},
        "payload": {"n": 0},
    }
    s.ok(s.http.post("/api/v1/notification", json=note))
    flag = {"authorization": f"Bearer {FLAG_TOKEN}"}
    base = f"/api/v1/tenants/acme/namespaces/{NAMESPACE}/manifest"
    s.ok(s.http.put(base, json=flag_files(False, False), headers=flag))
    s.ok(s.http.put(base, json=flag_files(True, True), headers=flag))
    item = {
        "ticker": "AAPL",
        "score": 0.4,
        "label": "positive",
        "confidence": 0.9,
        "source": "seed",
    }
    s.ok(s.http.post("/api/v2/sentiment", json=item))


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    assert os.path.exists(CHROMIUM), (
        f"{CHROMIUM} is missing: `make deps` installs Debian's chromium"
    )
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    b = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def artifacts() -> Path:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    print(f"\nconsole screenshots: {ARTIFACTS}")
    return ARTIFACTS


@dataclass
class Console:
    page: Page
    url: str
    shots: Path
    problems: list[str] = field(default_factory=list)

    def open(self, hash_: str, ready: str) -> None:
        """Goes to a view and waits until `ready` (a selector) is visible."""
        self.page.goto(f"{self.url}/console/#/{hash_}")
        expect(self.page.locator(ready).first).to_be_visible()

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def view(self) -> str:
        return self.page.locator("main").get_attribute("data-view") or ""


@pytest.fixture
def console(browser: Browser, server: Server, artifacts: Path) -> Iterator[Callable[..., Console]]:
    contexts = []
    consoles: list[Console] = []

    def make(*, signed_in: bool = True, dark: bool = False) -> Console:
        ctx = browser.new_context(
            viewport={"width": 1400, "height": 900}, color_scheme="dark" if dark else "light"
        )
        contexts.append(ctx)
        ctx.add_init_script(
            "localStorage.setItem('hw.pref.flagNamespaces', JSON.stringify(['acme/"
            + NAMESPACE
            + "']));"
        )
        if signed_in:
            creds = {
                "hw.apiKey": KEY,
                "hw.flagToken": FLAG_TOKEN,
                "hw.userId": USER,
                "hw.connected": "1",
            }
            ctx.add_init_script(
                "for (const [k, v] of Object.entries("
                + json.dumps(creds)
                + ")) sessionStorage.setItem(k, v);"
            )
        page = ctx.new_page()
        c = Console(page, server.url, artifacts)

        def on_console(msg: ConsoleMessage) -> None:
            if msg.type == "error":
                c.problems.append(f"console error: {msg.text} at {msg.location}")

        def on_error(err: Error) -> None:
            c.problems.append(f"page error: {err}")

        page.on("console", on_console)
        page.on("pageerror", on_error)
        consoles.append(c)
        return c

    yield make
    problems = [p for c in consoles for p in c.problems]
    for ctx in contexts:
        ctx.close()
    assert not problems, "\n".join(problems)


# --- tests -------------------------------------------------------------------------------------
def blur(page: Page) -> None:
    page.evaluate("document.activeElement && document.activeElement.blur()")


def test_connect_and_navigate_by_keyboard(console: Callable[..., Console], server: Server) -> None:
    c = console(signed_in=False)
    page = c.page
    page.goto(f"{c.url}/console")  # the bare path serves the page too (no redirect)
    expect(page.locator("main")).to_have_attribute("data-view", "settings")
    expect(page.locator("#set-api-key")).to_be_focused()
    c.shot("connection")
    page.keyboard.type(KEY)
    page.keyboard.press("Tab")
    page.keyboard.type(FLAG_TOKEN)
    page.keyboard.press("Tab")
    page.keyboard.type(USER)
    page.keyboard.press("Enter")  # submits the connection form
    expect(page.locator("main")).to_have_attribute("data-view", "overview")
    expect(page.locator("#conn")).to_have_text("API key set")

    # g-shortcuts
    for keys, view in (
        ("gt", "topics"),
        ("gq", "queues"),
        ("gr", "routers"),
        ("gs", "streams"),
        ("go", "overview"),
    ):
        blur(page)
        page.keyboard.press(keys[0])
        page.keyboard.press(keys[1])
        expect(page.locator("main")).to_have_attribute("data-view", view)
        expect(page.locator(f'#nav a[data-view="{view}"]')).to_have_attribute(
            "aria-current", "page"
        )

    # Tab order from the skip link: brand, shortcuts button, then the nav links in order
    page.locator("#skip").focus()
    focused = []
    for _ in range(12):
        page.keyboard.press("Tab")
        focused.append(
            page.evaluate("document.activeElement.dataset.view || document.activeElement.id || ''")
        )
    views = [
        "overview",
        "topics",
        "queues",
        "routers",
        "streams",
        "notifications",
        "flags",
        "dashboard",
        "settings",
    ]
    assert [v for v in focused if v in views][: len(views)] == views, focused
    page.locator('#nav a[data-view="notifications"]').focus()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_have_attribute("data-view", "notifications")
    expect(page.locator("main h1")).to_be_focused()  # focus moves to the new view's heading

    # help dialog: ? opens it, Escape closes it
    blur(page)
    page.keyboard.press("?")
    expect(page.locator("#help")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#help")).to_be_hidden()

    # a form submitted with Enter: create a topic
    page.keyboard.press("g")
    page.keyboard.press("t")
    expect(page.locator("main")).to_have_attribute("data-view", "topics")
    name = f"kbd-{uuid.uuid4().hex[:6]}"
    page.locator("#new-topic-name").focus()
    page.keyboard.type(name)
    page.keyboard.press("Enter")
    expect(page.locator(f'#topics-table tr[data-topic="{name}"]')).to_be_visible()
    assert server.ok(server.http.get(f"/v0/topics/{name}"))["type"] == "log"


def test_every_view_loads(console: Callable[..., Console]) -> None:
    c = console()
    views = [
        ("", "#main .stats .stat", "overview"),
        ("topics", '#topics-table tr[data-topic="orders"]', "topics"),
        ("topics/orders", '#tail-log tr[data-seq="3"]', "topic"),
        ("queues", '#queues-table tr[data-queue="jobs"]', "queues"),
        ("queues/jobs", "#claim-form", "queue"),
        ("routers", '#router-graph a.node[data-topic="audit"]', "routers"),
        ("streams", f'#streams-table tr[data-stream="{STREAM}"]', "streams"),
        (f"streams/{STREAM.replace('/', '%2F')}", "#panel-details dl", "stream"),
        ("notifications", "#notify-map .shape", "notifications"),
        ("flags", '#flag-versions tr[data-version="2"]', "flags"),
        ("dashboard", "#dash-bars svg", "dashboard"),
        ("settings", "#set-api-key", "connection"),
    ]
    for hash_, ready, name in views:
        c.open(hash_, ready)
        c.shot(name)
    # the graph has both routers as edges, and the stream's other sections load too
    c.open("routers", '#router-graph .edge[data-router="orders-audit"]')
    expect(c.page.locator("#router-graph .edge")).to_have_count(2)
    c.open(f"streams/{STREAM.replace('/', '%2F')}", "#panel-details dl")
    for tab, ready in (
        ("schema", "#search-fields"),
        ("profile", "#profile-kind"),
        ("index", "#panel-index dl"),
    ):
        c.page.locator(f"#tab-{tab}").click()
        expect(c.page.locator(ready)).to_be_visible()
        c.shot(f"stream-{tab}")
    # the dark scheme
    d = console(dark=True)
    d.open("topics/orders", '#tail-log tr[data-seq="3"]')
    d.shot("topic-dark")
    d.open("notifications", "#notify-map .shape")
    d.shot("notifications-dark")


def test_topic_tail_is_live_and_resumes(console: Callable[..., Console], server: Server) -> None:
    topic = f"tail-{uuid.uuid4().hex[:6]}"
    server.ok(
        server.http.post(
            f"/v0/topics/{topic}", json={"records": [{"data": {"i": i}} for i in (1, 2)]}
        )
    )
    c = console()
    c.open(f"topics/{topic}", '#tail-log tr[data-seq="2"]')
    rows = c.page.locator("#tail-log tr[data-seq]")
    expect(c.page.locator("#tail-status")).to_contain_text("caught up")

    # appended over HTTP while the view is open: it appears
    server.ok(
        server.http.post(
            f"/v0/topics/{topic}", json={"records": [{"data": {"i": 3}, "tag": "http"}]}
        )
    )
    expect(c.page.locator('#tail-log tr[data-seq="3"]')).to_contain_text('{"i":3}')

    # paused: the stream is closed; resumed: a new session from the last seq
    c.page.locator("#tail-toggle").click()
    expect(c.page.locator("#tail-status")).to_have_text("paused")
    server.ok(
        server.http.post(
            f"/v0/topics/{topic}", json={"records": [{"data": {"i": 4}}, {"data": {"i": 5}}]}
        )
    )
    c.page.wait_for_timeout(500)
    expect(rows).to_have_count(3)
    c.page.locator("#tail-toggle").click()
    expect(c.page.locator('#tail-log tr[data-seq="5"]')).to_be_visible()
    expect(rows).to_have_count(5)  # nothing twice
    assert rows.evaluate_all("rs => rs.map(r => Number(r.dataset.seq))") == [1, 2, 3, 4, 5]

    # appended from the console (Enter submits): in the topic, and in the tail
    c.page.locator("#append-data").fill('{"from": "console"}')
    c.page.locator("#append-tag").fill("ui")
    c.page.locator("#append-data").press("Enter")
    expect(c.page.locator("#append-form .form-msg")).to_have_text("Appended seq 6.")
    expect(c.page.locator('#tail-log tr[data-seq="6"]')).to_contain_text("console")
    c.shot("topic-tail")
    diff = server.ok(
        server.http.post(f"/v0/topics/{topic}/diff", json={"from_seq": 5, "include_tags": True})
    )
    assert [(r["$seq"], r["data"], r.get("$tag")) for r in diff["records"]] == [
        (6, {"from": "console"}, "ui")
    ]


def test_queue_claim_ack_nack(console: Callable[..., Console], server: Server) -> None:
    queue = f"work-{uuid.uuid4().hex[:6]}"
    server.ok(server.http.put(f"/v0/topics/{queue}", json={"type": "queue"}))
    server.ok(
        server.http.post(
            f"/v0/topics/{queue}", json={"records": [{"data": {"job": i}} for i in (1, 2, 3)]}
        )
    )
    c = console()
    c.open(f"queues/{queue}", "#claim-form")
    stats = c.page.locator("main .stats .stat .value")
    expect(stats.nth(0)).to_have_text("3")  # ready
    c.page.locator("#claim-max").fill("2")
    c.page.locator("#claim-max").press("Enter")
    jobs = c.page.locator("#jobs-table tr[data-seq]")
    expect(jobs).to_have_count(2)
    expect(stats.nth(1)).to_have_text("2")  # in flight
    c.shot("queue-claimed")
    state = server.ok(server.http.get(f"/v0/topics/{queue}"))["queue"]
    assert (state["ready"], state["in_flight"]) == (1, 2)

    c.page.locator('#jobs-table tr[data-seq="1"] button[data-action="ack"]').click()
    expect(c.page.locator("#jobs-msg")).to_contain_text("Acked job 1")
    c.page.locator('#jobs-table tr[data-seq="2"] button[data-action="nack"]').click()
    expect(c.page.locator("#jobs-msg")).to_contain_text("Nacked job 2")
    expect(jobs).to_have_count(0)
    state = server.ok(server.http.get(f"/v0/topics/{queue}"))
    assert (state["queue"]["ready"], state["queue"]["in_flight"], state["count"]) == (2, 0, 2)
    expect(stats.nth(0)).to_have_text("2")
    # the nacked job is claimable again at once
    claimed = server.ok(
        server.http.post(f"/v0/topics/{queue}/claim", json={"node": "other", "max": 1})
    )
    assert [j["$seq"] for j in claimed["claimed"]] == [2]
    c.open("queues", f'#queues-table tr[data-queue="{queue}"]')


def test_dashboard_feed_updates(console: Callable[..., Console], server: Server) -> None:
    c = console()
    c.open("dashboard", "#dash-bars svg")
    total = c.page.locator("#dash-metrics .stat .value").first
    expect(c.page.locator("#dash-status")).to_contain_text("live")
    expect(c.page.locator("#dash-updates")).to_have_text(re.compile(r"^[1-9]\d* updates? "))
    before = int(total.inner_text().replace(",", ""))
    item = {
        "ticker": "MSFT",
        "score": -0.3,
        "label": "negative",
        "confidence": 0.8,
        "source": "e2e",
    }
    server.ok(server.http.post("/api/v2/sentiment", json=item))
    expect(total).to_have_text(str(before + 1))  # pushed by the /api/v2/stream SSE
    # ingest from the console form (Enter submits)
    c.page.locator("#ingest-ticker").fill("NVDA")
    c.page.locator("#ingest-ticker").press("Enter")
    expect(c.page.locator("#ingest-form .form-msg")).to_contain_text("Stored as seq")
    expect(total).to_have_text(str(before + 2))
    expect(c.page.locator("#dash-bars svg")).to_have_attribute(
        "aria-label", re.compile(r"NVDA 1\b")
    )

    # a configuration and its sentiment_update stream (EventSource with ?user_id=)
    c.page.locator("#cfg-name").fill("e2e watchlist")
    c.page.locator("#cfg-tickers").fill("TSLA")
    c.page.locator("#cfg-tickers").press("Enter")
    expect(c.page.locator("main")).to_contain_text("following e2e watchlist")
    server.ok(
        server.http.post(
            "/api/v2/sentiment", json={**item, "ticker": "TSLA", "label": "positive", "score": 0.7}
        )
    )
    expect(c.page.locator("#cfg-updates tbody tr")).to_have_count(1)
    expect(c.page.locator("#cfg-updates tbody tr").first).to_contain_text("TSLA")
    c.shot("dashboard-live")


def test_notifications_map_is_live(console: Callable[..., Console], server: Server) -> None:
    c = console()
    c.open("notifications", "#notify-map .shape")
    expect(c.page.locator("#event-type")).to_have_value("test_polygon")
    expect(c.page.locator("#notify-status")).to_have_text("live (replay done)")
    shapes = c.page.locator("#notify-map .shape")
    before = shapes.count()
    note = {
        "event_type": "test_polygon",
        "identifier": {
            "date": "20260102",
            "time": "0600",
            "polygon": "(-30,110,-30,150,-10,150,-10,110,-30,110)",
        },
        "payload": {"n": 1},
    }
    server.ok(server.http.post("/api/v1/notification", json=note))
    expect(shapes).to_have_count(before + 1)
    expect(c.page.locator("#notify-map .poly.newest")).to_have_count(1)
    # published from the console: on the map too
    c.page.locator("#publish-date").fill("2026-01-03")
    c.page.locator("#publish-time").fill("18:00")
    c.page.locator("#publish-polygon").fill("(0,0,0,30,20,30,20,0,0,0)")
    c.page.locator("#publish-submit").click()
    expect(c.page.locator("#publish-form .form-msg")).to_contain_text("Published")
    expect(shapes).to_have_count(before + 2)
    c.shot("notifications-live")
    # a point filter (as a map click sets it): only polygons holding the point
    c.page.locator("#watch-point").fill("-20,130")
    c.page.locator("#watch-point").press("Enter")
    expect(c.page.locator("#notify-map .filter-pt")).to_have_count(1)
    expect(shapes).to_have_count(1)


def test_flags_history_diff_and_live_events(
    console: Callable[..., Console], server: Server
) -> None:
    c = console()
    c.open("flags", '#flag-versions tr[data-version="2"]')
    expect(c.page.locator("#diff-summary")).to_contain_text("v1 → v2: 2 files changed")
    expect(
        c.page.locator('#flag-diff .diff-file[data-path="segments/staff.toml"]')
    ).to_have_attribute("data-op", "added")
    expect(
        c.page.locator('#flag-diff .diff-file[data-path="flags/checkout.toml"]')
    ).to_have_attribute("data-op", "modified")
    expect(c.page.locator("#flag-events-status")).to_have_text("live")
    expect(c.page.locator("#flag-events tbody tr")).to_have_count(1)  # the first event: a snapshot
    # a new version over HTTP: an inline event, and its diff
    files = flag_files(True, True)
    files["files"]["flags/checkout.toml"] = 'enabled = true\nsegments = ["staff"]\npercent = 25\n'
    flag = {"authorization": f"Bearer {FLAG_TOKEN}"}
    server.ok(
        server.http.put(
            f"/api/v1/tenants/acme/namespaces/{NAMESPACE}/manifest", json=files, headers=flag
        )
    )
    expect(c.page.locator("#flag-events tbody tr")).to_have_count(2)
    expect(c.page.locator("#flag-events tbody tr").first).to_contain_text(
        "modified flags/checkout.toml"
    )
    expect(c.page.locator('#flag-versions tr[data-version="3"]')).to_be_visible()
    expect(c.page.locator("#diff-summary")).to_contain_text("v2 → v3: 1 file changed")
    expect(c.page.locator("#flag-diff .diff .add")).to_contain_text("percent = 25")
    c.shot("flags-live")


# Holds the answers (not the requests) of the next `window.__hold` manifest reads for 1.5 s:
# what a slow network or a busy server does to one event's load while a later one is quick.
HOLD_MANIFEST_READS = """
const send = window.fetch;
window.__hold = 0;
window.fetch = async (input, init) => {
  const url = String((input && input.url) || input);
  const hold = url.includes("/manifest") && !url.includes("/closure") && window.__hold > 0;
  if (hold) window.__hold -= 1;
  const answer = await send(input, init);
  if (hold) await new Promise((done) => setTimeout(done, 1500));
  return answer;
};
"""


def test_flags_view_shows_the_newest_version_when_answers_cross(
    console: Callable[..., Console], server: Server
) -> None:
    # GIVEN the flags view, live
    c = console()
    c.page.add_init_script(HOLD_MANIFEST_READS)
    flag = {"authorization": f"Bearer {FLAG_TOKEN}"}
    url = f"/api/v1/tenants/acme/namespaces/{NAMESPACE}/manifest"
    current = server.ok(server.http.get(url, headers=flag))["version"]
    c.open("flags", f'#flag-versions tr[data-version="{current}"]')
    expect(c.page.locator("#flag-events-status")).to_have_text("live")
    events = c.page.locator("#flag-events tbody tr")
    expect(events).to_have_count(1)
    # WHEN a version is published and its event's load is slow to be answered, and another
    # version is published right after, its load answered at once
    c.page.evaluate("window.__hold = 2")  # the next load: its versions and manifest reads
    for n, percent in ((1, 40), (2, 60)):
        files = flag_files(True, True)
        files["files"]["flags/checkout.toml"] = (
            f'enabled = true\nsegments = ["staff"]\npercent = {percent}\n'
        )
        server.ok(server.http.put(url, json=files, headers=flag))
        expect(events).to_have_count(1 + n)
    newest = current + 2
    expect(c.page.locator(f'#flag-versions tr[data-version="{newest}"]')).to_be_visible()
    # THEN once the slow answer (the older version) arrives it does not replace the newer one
    c.page.wait_for_function("window.__hold === 0")
    c.page.wait_for_timeout(2000)
    expect(c.page.locator(f'#flag-versions tr[data-version="{newest}"]')).to_be_visible()
    expect(c.page.locator("#flag-files dd").first).to_have_text(str(newest))
    expect(c.page.locator("#diff-summary")).to_contain_text(f"v{newest - 1} → v{newest}")


def test_stream_search(console: Callable[..., Console]) -> None:
    c = console()
    c.open(f"streams/{STREAM.replace('/', '%2F')}", "#panel-details dl")
    c.page.locator("#tab-search").click()
    c.page.locator("#search-q").fill("svc:api")
    c.page.locator("#search-q").press("Enter")
    expect(c.page.locator("#search-hits tbody tr")).to_have_count(3)
    expect(c.page.locator("#search-summary")).to_contain_text("3 matches")
    c.shot("stream-search")
    # append from the console, then find it
    c.page.locator("#tab-append").click()
    c.page.locator("#stream-append-body").fill(
        '[{"ts": 1700000009999, "svc": "api", "msg": "disk full"}]'
    )
    c.page.locator("#stream-append-submit").click()
    expect(c.page.locator("#panel-append .form-msg")).to_contain_text("Appended")
    c.page.locator("#tab-search").click()
    c.page.locator("#search-q").fill('msg:"disk full"')
    c.page.locator("#search-q").press("Enter")
    expect(c.page.locator("#search-hits tbody tr")).to_have_count(1)


def test_an_open_server_needs_no_connecting(
    browser: Browser, emulator: MotoServer, tmp_path: Path
) -> None:
    """`make run` has no API keys: the console opens on the overview, not on the Connection
    page, and says the server is open; nothing is stored as credentials."""
    cluster = Cluster(emulator, f"e2e-console-open-{uuid.uuid4().hex[:8]}")
    process = cluster.start_server(str(tmp_path))  # no TOPICS_API_KEYS
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    try:
        page = ctx.new_page()
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(f"{process.url}/console/")
        expect(page.locator("main")).to_have_attribute("data-view", "overview")
        expect(page.locator("#conn")).to_have_text("open server (no API keys)")
        # the overview's counts come from the keyless API
        expect(page.locator("main .stats")).to_contain_text("Topics")
        page.goto(f"{process.url}/console/#/topics")
        expect(page.locator("main")).to_have_attribute("data-view", "topics")
        assert page.evaluate("sessionStorage.getItem('hw.connected')") is None
        assert not problems, problems
    finally:
        ctx.close()
        process.stop()
