// The console's shell: hash routing, navigation, keyboard shortcuts, the connection form and
// the overview. Each view lives in its own module and is mounted into <main>.
import {
  api, creds, h, field, form, notice, replace, stat, kv, toast, fmtNum, fmtBytes, isAbort, ApiError, viewHead,
} from "./lib.js";
import * as topics from "./topics.js";
import * as queues from "./queues.js";
import * as routers from "./routers.js";
import * as streams from "./streams.js";
import * as notifications from "./notifications.js";
import * as flags from "./flags.js";
import * as dashboard from "./dashboard.js";

const VIEWS = {
  overview: { title: "Overview", mount: mountOverview },
  settings: { title: "Connection", mount: mountSettings },
  topics: { title: "Topics", mount: topics.mount },
  queues: { title: "Queues", mount: queues.mount },
  routers: { title: "Routers", mount: routers.mount },
  streams: { title: "Durable Streams", mount: streams.mount },
  notifications: { title: "Notifications", mount: notifications.mount },
  flags: { title: "Flags", mount: flags.mount },
  dashboard: { title: "Dashboard", mount: dashboard.mount },
};
const SHORTCUTS = { o: "#/", t: "#/topics", q: "#/queues", r: "#/routers", s: "#/streams", n: "#/notifications", f: "#/flags", d: "#/dashboard", k: "#/settings" };

const main = document.getElementById("main");
let current = null; // {ctrl, cleanups}

// --- routing ------------------------------------------------------------------------------------
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const parts = raw ? raw.split("/").map((p) => { try { return decodeURIComponent(p); } catch { return p; } }) : [];
  const view = parts[0] && VIEWS[parts[0]] ? parts[0] : "overview";
  return { view, args: parts.slice(1) };
}

function unmount() {
  if (!current) return;
  current.ctrl.abort();
  for (const fn of current.cleanups) {
    try { fn(); } catch (err) { console.warn("cleanup failed", err); }
  }
  current = null;
}

// A server without API keys says so in the page (meta headwater-auth=none): nothing to ask.
const OPEN_SERVER = document.querySelector('meta[name="headwater-auth"]')?.content === "none";

function route() {
  const { view, args } = parseHash();
  if (!creds.connected && !OPEN_SERVER && view !== "settings") {
    sessionStorage.setItem("hw.returnTo", location.hash || "#/");
    location.replace("#/settings");
    return;
  }
  unmount();
  const ctrl = new AbortController();
  const cleanups = [];
  current = { ctrl, cleanups };
  const ctx = {
    signal: ctrl.signal,
    args,
    onCleanup: (fn) => cleanups.push(fn),
    every(ms, fn, immediate = true) {
      let busy = false;
      const tick = async () => {
        if (busy || ctrl.signal.aborted) return;
        busy = true;
        try { await fn(); } catch (err) { if (!isAbort(err)) console.warn(err); } finally { busy = false; }
      };
      const id = setInterval(tick, ms);
      cleanups.push(() => clearInterval(id));
      if (immediate) tick();
    },
    /** Swallow aborts of this view's own requests (the view was left). */
    guard(promise) { return promise.catch((err) => { if (!isAbort(err)) throw err; }); },
  };
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${VIEWS[view].title} · Headwater console`;
  replace(main);
  main.dataset.view = view;
  try {
    VIEWS[view].mount(main, args, ctx);
  } catch (err) {
    main.append(notice(`This view failed to load: ${err.message}`, "error"));
  }
  updateConn();
  if (focusAfterRoute) { focusAfterRoute = false; focusHeading(); }
}

// Set by keyboard and nav navigation: the new view's heading takes focus once mounted.
let focusAfterRoute = false;
function navigate(hash) {
  focusAfterRoute = true;
  if (location.hash === hash || (hash === "#/" && location.hash === "")) route();
  else location.hash = hash;
}

function focusHeading() {
  const h1 = main.querySelector("h1");
  if (h1) { h1.setAttribute("tabindex", "-1"); h1.focus({ preventScroll: true }); }
}

// --- connection status --------------------------------------------------------------------------
function updateConn() {
  const el = document.getElementById("conn");
  if (!creds.connected && OPEN_SERVER) { el.className = "pill warn"; el.textContent = "open server (no API keys)"; return; }
  if (!creds.connected) { el.className = "pill"; el.textContent = "not connected"; return; }
  if (creds.apiKey) { el.className = "pill ok"; el.textContent = "API key set"; }
  else { el.className = "pill warn"; el.textContent = "no API key (dev mode)"; }
}

// --- keyboard ------------------------------------------------------------------------------------
let pendingG = 0;
function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}
document.addEventListener("keydown", (e) => {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
  const dialog = document.getElementById("help");
  if (typing(e.target) || dialog.open) return;
  if (pendingG && Date.now() - pendingG < 1500) {
    pendingG = 0;
    const target = SHORTCUTS[e.key.toLowerCase()];
    if (target) {
      e.preventDefault();
      navigate(target);
    }
    return;
  }
  if (e.key === "g") { pendingG = Date.now(); return; }
  if (e.key === "?") { e.preventDefault(); dialog.showModal(); document.getElementById("help-close").focus(); return; }
  if (e.key === "/") {
    const first = main.querySelector("input:not([type=hidden]):not([disabled]), select, textarea");
    if (first) { e.preventDefault(); first.focus(); }
  }
});
document.getElementById("help-open").addEventListener("click", () => {
  document.getElementById("help").showModal();
  document.getElementById("help-close").focus();
});
document.getElementById("help-close").addEventListener("click", () => document.getElementById("help").close());
document.getElementById("skip").addEventListener("click", (e) => { e.preventDefault(); main.focus(); });
document.querySelector("#nav").addEventListener("click", (e) => {
  const a = e.target.closest("a");
  if (!a) return;
  e.preventDefault();
  navigate(a.getAttribute("href"));
});

window.addEventListener("hashchange", route);
window.addEventListener("unhandledrejection", (e) => {
  if (isAbort(e.reason)) { e.preventDefault(); return; }
  if (e.reason instanceof ApiError) { e.preventDefault(); toast(e.reason.message, "bad"); }
});
route();

// --- connection (settings) --------------------------------------------------------------------------
function mountSettings(root) {
  const apiKey = h("input", { type: "password", name: "apiKey", autocomplete: "off", spellcheck: "false", value: creds.apiKey, id: "set-api-key" });
  const flagToken = h("input", { type: "password", name: "flagToken", autocomplete: "off", spellcheck: "false", value: creds.flagToken, id: "set-flag-token" });
  const userId = h("input", { type: "text", name: "userId", autocomplete: "off", value: creds.userId, id: "set-user-id", maxlength: "128" });
  const remember = h("input", { type: "checkbox", name: "remember", checked: creds.remember, id: "set-remember" });
  const f = form({ class: "stacked", "aria-label": "Connection" }, [
    field("API key (TOPICS_API_KEYS): /v0, /v1, /api/v1 notifications, /api/v2 ingest", apiKey),
    field("Flag token (HEADWATER_FLAG_TOKENS): /api/v1 flag manifests and events", flagToken),
    field("Dashboard user id (X-User-ID): /api/v2 configurations", userId),
    field("Remember on this device (localStorage; otherwise this tab only)", remember, { check: true }),
    h("div", { class: "btn-row" },
      h("button", { type: "submit", id: "connect" }, "Connect"),
      h("button", { type: "button", class: "ghost", onclick: () => { creds.forget(); toast("Credentials forgotten"); route(); } }, "Forget credentials")),
  ], async () => {
    creds.save({ apiKey: apiKey.value.trim(), flagToken: flagToken.value.trim(), userId: userId.value.trim(), remember: remember.checked });
    updateConn();
    await api("/v0/topics", { query: { page_size: 1 } }).catch((err) => {
      if (err instanceof ApiError && err.status === 401) throw new Error("Saved, but the server refused the API key (401). Check it, or leave it empty if the server runs without keys.");
      throw err;
    });
    toast("Connected", "ok");
    const back = sessionStorage.getItem("hw.returnTo");
    sessionStorage.removeItem("hw.returnTo");
    location.hash = back && back !== "#/settings" ? back : "#/";
    return "Connected.";
  });
  root.append(
    viewHead("Connection", "Credentials for this console. They are sent only to this server, as Authorization: Bearer (or X-User-ID)."),
    h("div", { class: "grid" },
      h("section", { class: "card", "aria-labelledby": "conn-h" }, h("h2", { id: "conn-h" }, "Keys and tokens"), f),
      h("section", { class: "card", "aria-labelledby": "conn-help" },
        h("h2", { id: "conn-help" }, "Which credential does what"),
        h("p", null, "The API key is the server's TOPICS_API_KEYS entry (or the SSM parameter on AWS). A server started without keys (make run) accepts an empty key."),
        h("p", null, "Live views use the key too: the /v0 watch stream takes it as ?token= (EventSource cannot send headers), the notification and flag streams are read with fetch() so the header is sent."),
        h("p", null, "Flag manifests use their own tokens (HEADWATER_FLAG_TOKENS; make run serves infra/flag_tokens.example.yaml on loopback). The dashboard's configurations are scoped by a user id, not a secret."),
        h("p", { class: "muted small" }, "Nothing is stored on the server. Closing the tab forgets credentials unless \"Remember\" is checked."))),
  );
  setTimeout(() => apiKey.focus(), 0);
}

// --- overview ---------------------------------------------------------------------------------------
function mountOverview(root, _args, ctx) {
  const health = h("div", null, "Loading…");
  const counts = h("div", { class: "stats" });
  const limits = h("div", null);
  const statTopics = stat("Topics", "…");
  const statRecords = stat("Records", "…");
  const statBytes = stat("Bytes", "…");
  const statRouters = stat("Routers", "…");
  const statStreams = stat("Durable Streams", "…");
  const statTypes = stat("Event types", "…");
  counts.append(statTopics, statRecords, statBytes, statRouters, statStreams, statTypes);
  const cards = [
    ["#/topics", "Topics", "Heads, counts, bytes and live append rates; tail a topic live and append to it."],
    ["#/queues", "Queues", "Ready, in-flight and dead-lettered jobs; claim, ack and nack."],
    ["#/routers", "Routers", "The routing graph between topics, with forwarded counts."],
    ["#/streams", "Durable Streams", "Streams on /v1 with their schema, profile, index status and search."],
    ["#/notifications", "Notifications", "Event types of /api/v1 and a live map of their polygons and points."],
    ["#/flags", "Flags", "Flag namespaces, their version history and closure diffs."],
    ["#/dashboard", "Dashboard", "The /api/v2 sentiment feed, live."],
  ];
  root.append(
    viewHead("Overview", "Durable event streams, work queues and live feeds on one server."),
    counts,
    h("div", { class: "grid" },
      h("section", { class: "card", "aria-labelledby": "ov-health" }, h("h2", { id: "ov-health" }, "Server"), health),
      h("section", { class: "card", "aria-labelledby": "ov-limits" }, h("h2", { id: "ov-limits" }, "Configured limits"), limits)),
    h("h2", { class: "muted small" }, "Views"),
    h("div", { class: "grid" }, cards.map(([href, title, text]) =>
      h("a", { class: "card", href, "aria-label": `${title}: ${text}` }, h("h2", null, title), h("p", { class: "muted" }, text)))),
  );
  const fail = (node, err) => { if (!isAbort(err)) replace(node, notice(err.message, "error")); };
  ctx.guard(api("/v0/health", { signal: ctx.signal }).then((b) => {
    replace(health, kv([["Status", b.status], ["Version", b.version], ["Uptime", `${Math.round(b.uptime_ms / 1000)} s`], ["API base", new URL("..", document.baseURI).toString()]]));
  })).catch((err) => fail(health, err));
  ctx.guard(api("/v0/topics", { query: { page_size: 1000 }, signal: ctx.signal }).then((b) => {
    const list = b.topics || [];
    statTopics.set(fmtNum(list.length) + (b.next_cursor ? "+" : ""));
    statRecords.set(fmtNum(list.reduce((a, t) => a + t.count, 0)));
    statBytes.set(fmtBytes(list.reduce((a, t) => a + t.bytes, 0)));
  })).catch(() => { statTopics.set("–"); statRecords.set("–"); statBytes.set("–"); });
  ctx.guard(api("/v0/routers", { query: { page_size: 1000 }, signal: ctx.signal }).then((b) => statRouters.set(fmtNum((b.routers || []).length))))
    .catch(() => statRouters.set("–"));
  ctx.guard(api("/v1/streams", { query: { limit: 10000 }, signal: ctx.signal }).then((b) => statStreams.set(fmtNum(b.length))))
    .catch(() => statStreams.set("–"));
  ctx.guard(api("/api/v1/schema", { auth: "none", signal: ctx.signal }).then((b) => statTypes.set(fmtNum((b.event_types || []).length))))
    .catch(() => statTypes.set("–"));
  ctx.guard(api("/v1/server/_details", { signal: ctx.signal }).then((b) => {
    const c = b.configured_limits || {};
    const ing = c.ingest || {};
    const con = c.concurrency || {};
    const seg = c.segmenting || {};
    replace(limits, kv([
      ["Records per append", fmtNum(ing.max_batch_records)],
      ["Record size", fmtBytes(ing.max_record_bytes)],
      ["Request body", fmtBytes(ing.max_body_bytes)],
      ["Streams (SSE) per process", con.max_sse_connections ? fmtNum(con.max_sse_connections) : "unlimited"],
      ["Seal after", `${fmtNum(seg.seal_records)} records / ${fmtBytes(seg.seal_bytes)}`],
    ]));
  })).catch((err) => fail(limits, err));
}
