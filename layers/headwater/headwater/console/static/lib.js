// Shared helpers: credentials, same-origin API calls, SSE readers, DOM building, formatting.
// Nothing here talks to another origin: every URL is built on the page's own base.

// --- credentials ----------------------------------------------------------------------------
const KEYS = { apiKey: "hw.apiKey", flagToken: "hw.flagToken", userId: "hw.userId" };
const REMEMBER = "hw.remember";
const CONNECTED = "hw.connected";

function storage() {
  return localStorage.getItem(REMEMBER) === "1" ? localStorage : sessionStorage;
}

export const creds = {
  get apiKey() { return storage().getItem(KEYS.apiKey) || ""; },
  get flagToken() { return storage().getItem(KEYS.flagToken) || ""; },
  get userId() { return storage().getItem(KEYS.userId) || ""; },
  get remember() { return localStorage.getItem(REMEMBER) === "1"; },
  get connected() { return storage().getItem(CONNECTED) === "1"; },
  save({ apiKey, flagToken, userId, remember }) {
    this.forget();
    if (remember) localStorage.setItem(REMEMBER, "1");
    const s = remember ? localStorage : sessionStorage;
    s.setItem(KEYS.apiKey, apiKey || "");
    s.setItem(KEYS.flagToken, flagToken || "");
    s.setItem(KEYS.userId, userId || "");
    s.setItem(CONNECTED, "1");
  },
  forget() {
    for (const s of [localStorage, sessionStorage]) {
      for (const k of [...Object.values(KEYS), CONNECTED, REMEMBER]) s.removeItem(k);
    }
  },
};

// Small preferences (flag namespaces followed, last event type...) live in localStorage.
export const prefs = {
  get(name, fallback) {
    try {
      const raw = localStorage.getItem("hw.pref." + name);
      return raw === null ? fallback : JSON.parse(raw);
    } catch {
      return fallback;
    }
  },
  set(name, value) { localStorage.setItem("hw.pref." + name, JSON.stringify(value)); },
};

// --- URLs -----------------------------------------------------------------------------------
// The page lives at <root>/console/; the API at <root>/.
export const API_BASE = new URL("..", document.baseURI);

export function apiUrl(path, query) {
  const url = new URL(path.replace(/^\//, ""), API_BASE);
  if (query) {
    for (const [k, v] of Object.entries(query)) {
      if (v === undefined || v === null || v === "") continue;
      if (Array.isArray(v)) v.forEach((x) => url.searchParams.append(k, x));
      else url.searchParams.set(k, String(v));
    }
  }
  return url.toString();
}

export const enc = encodeURIComponent;
// A Durable Streams name may hold "/": each segment is encoded, the slashes stay.
export const encPath = (name) => name.split("/").map(encodeURIComponent).join("/");

// --- API calls ------------------------------------------------------------------------------
export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

function errorMessage(status, body, text) {
  if (body && typeof body === "object") {
    const e = body.error;
    if (e && typeof e === "object" && e.message) return `${e.code || status}: ${e.message}`;
    if (typeof e === "string" && body.message) return `${e}: ${body.message}`;
    if (body.message) return body.details ? `${body.message} (${body.details})` : body.message;
    if (body.detail) return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  }
  return text ? `${status}: ${text.slice(0, 200)}` : `HTTP ${status}`;
}

export function authHeaders(auth) {
  const token = auth === "flag" ? creds.flagToken : auth === "key" ? creds.apiKey : "";
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** fetch() on this origin. `auth`: "key" (the API key), "flag" (the flag token) or "none".
 * Resolves to parsed JSON (or text, or the Response with raw: true); rejects with ApiError. */
export async function api(path, opts = {}) {
  const { method = "GET", json, body, query, headers = {}, auth = "key", signal, raw = false } = opts;
  const init = { method, headers: { ...authHeaders(auth), ...headers }, signal, cache: "no-store" };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  } else if (body !== undefined) {
    init.body = body;
  }
  const response = await fetch(apiUrl(path, query), init);
  if (raw && (response.ok || response.status === 304)) return response;
  const type = response.headers.get("content-type") || "";
  let parsed = null;
  let text = "";
  if (response.status !== 204 && response.status !== 304) {
    text = await response.text();
    if (type.includes("json") && text) {
      try { parsed = JSON.parse(text); } catch { parsed = null; }
    }
  }
  if (!response.ok && response.status !== 304) {
    throw new ApiError(response.status, errorMessage(response.status, parsed, text), parsed);
  }
  return parsed !== null ? parsed : text;
}

export const isAbort = (err) => err && (err.name === "AbortError" || err.name === "TimeoutError");

/** Runs `fn` over `items` with at most `limit` in flight. */
export async function pool(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  });
  await Promise.all(workers);
  return out;
}

// --- server-sent events over fetch() ----------------------------------------------------------
// EventSource can send no headers and only GET: the routes that take a bearer header only, or
// a POST body (/api/v1/watch, /api/v1/events), are read with fetch() and this parser.
export async function readEventStream(response, onEvent, onComment) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = "";
  let data = [];
  let id = null;
  const line = (l) => {
    if (l === "") {
      if (data.length) onEvent({ event: event || "message", data: data.join("\n"), id });
      event = "";
      data = [];
      return;
    }
    if (l.startsWith(":")) { if (onComment) onComment(l.slice(1).trim()); return; }
    const at = l.indexOf(":");
    const field = at < 0 ? l : l.slice(0, at);
    let value = at < 0 ? "" : l.slice(at + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let nl;
    while ((nl = buffer.search(/\r\n|\n|\r/)) >= 0) {
      const width = buffer.startsWith("\r\n", nl) ? 2 : 1;
      line(buffer.slice(0, nl));
      buffer = buffer.slice(nl + width);
    }
  }
}

/** A fetch()-based event stream that reconnects with backoff until stopped.
 * opts.request() -> {path, method, json, query, auth, headers} for each attempt (so a resume
 * position can move); onEvent({event, data, id}); onState(state, detail).
 * A 4xx other than 408/429 stops it (the request itself is wrong). */
export class LiveFetch {
  constructor(opts) {
    this.opts = opts;
    this.stopped = false;
    this.ctrl = null;
    this.delay = 1000;
    this.timer = null;
  }
  start() { this.stopped = false; this._run(); return this; }
  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.ctrl) this.ctrl.abort();
  }
  async _run() {
    const { request, onEvent, onState = () => {}, onComment } = this.opts;
    while (!this.stopped) {
      this.ctrl = new AbortController();
      onState("connecting");
      try {
        const r = request();
        const response = await api(r.path, { ...r, raw: true, signal: this.ctrl.signal });
        onState("open");
        this.delay = 1000;
        await readEventStream(response, onEvent, onComment);
        if (this.stopped) return;
        onState("reconnecting", "stream ended");
      } catch (err) {
        if (this.stopped || isAbort(err)) return;
        const status = err instanceof ApiError ? err.status : 0;
        if (status >= 400 && status < 500 && status !== 408 && status !== 429) {
          onState("failed", err.message);
          return;
        }
        onState("reconnecting", err.message);
      }
      await new Promise((resolve) => { this.timer = setTimeout(resolve, this.delay); });
      this.delay = Math.min(this.delay * 2, 15000);
    }
  }
}

// --- DOM ----------------------------------------------------------------------------------------
const SVG_NS = "http://www.w3.org/2000/svg";

function build(node, attrs, children) {
  let value;
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.setAttribute("class", Array.isArray(v) ? v.filter(Boolean).join(" ") : v);
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "value" && "value" in node && !(node instanceof SVGElement)) value = v;
    else if (k === "checked" || k === "selected" || k === "disabled") node[k] = Boolean(v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of (children || []).flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  if (value !== undefined) node.value = value; // after the children: a <select>'s options
  return node;
}

/** h("div", {class, text, onclick, ...}, ...children): an HTML element (text is never HTML). */
export function h(tag, attrs, ...children) { return build(document.createElement(tag), attrs, children); }
/** s("rect", {...}): an SVG element. */
export function s(tag, attrs, ...children) { return build(document.createElementNS(SVG_NS, tag), attrs, children); }

export function clear(node) { while (node.firstChild) node.firstChild.remove(); return node; }
export function replace(node, ...children) { clear(node); build(node, null, children); return node; }

export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  const t = h("div", { class: ["toast", kind] }, message);
  box.append(t);
  setTimeout(() => t.remove(), kind === "bad" ? 7000 : 3500);
}

/** A labelled field: field("Name", input) */
export function field(label, control, extra = {}) {
  return h("label", { class: ["field", extra.wide && "wide", extra.check && "check"] },
    extra.check ? [control, h("span", { text: label })] : [h("span", { text: label }), control]);
}

/** A form whose submit (Enter, or Ctrl+Enter in a textarea) runs `onsubmit(form)` with the
 * submit buttons disabled meanwhile; a thrown error is shown in its message line. */
export function form(attrs, children, onsubmit) {
  const msg = h("div", { class: "form-msg", role: "status", "aria-live": "polite" });
  const f = h("form", { novalidate: true, ...attrs }, children, msg);
  f.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && e.target.tagName === "TEXTAREA") {
      e.preventDefault();
      f.requestSubmit();
    }
  });
  f.addEventListener("submit", async (e) => {
    e.preventDefault();
    const buttons = [...f.querySelectorAll("button[type=submit]")];
    buttons.forEach((b) => { b.disabled = true; });
    msg.className = "form-msg";
    msg.textContent = "";
    try {
      const result = await onsubmit(f, e.submitter);
      if (typeof result === "string") { msg.className = "form-msg ok"; msg.textContent = result; }
    } catch (err) {
      if (!isAbort(err)) { msg.className = "form-msg bad"; msg.textContent = err.message; }
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  });
  f.message = msg;
  return f;
}

/** A view's heading: title, subtitle, breadcrumbs (nodes) and actions on the right. */
export function viewHead(title, subtitle, crumbs, ...actions) {
  return h("div", { class: "view-head" },
    h("div", null,
      crumbs ? h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, crumbs) : null,
      h("h1", null, title),
      subtitle ? h("p", { class: "muted" }, subtitle) : null),
    actions.length ? h("div", { class: "row" }, actions) : null);
}

export function notice(text, kind = "") { return h("div", { class: ["notice", kind], role: kind === "error" ? "alert" : "note" }, text); }

export function pill(text, kind = "") { return h("span", { class: ["pill", kind] }, text); }

export function table(columns, rows, opts = {}) {
  const head = h("tr", null, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.label)));
  const body = h("tbody");
  const t = h("table", { class: "data", "aria-label": opts.label }, h("thead", null, head), body);
  const fill = (list) => {
    clear(body);
    if (!list.length) {
      body.append(h("tr", null, h("td", { colspan: columns.length, class: "empty" }, opts.empty || "Nothing here yet.")));
      return;
    }
    for (const row of list) {
      const tr = h("tr", opts.rowAttrs ? opts.rowAttrs(row) : null,
        columns.map((c) => h("td", { class: [c.num && "num", c.cls] }, c.cell(row))));
      body.append(tr);
    }
  };
  fill(rows || []);
  t.fill = fill;
  t.tbody = body;
  return h("div", { class: "table-wrap" }, t);
}

export function kv(pairs) {
  return h("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
}

export function stat(label, value, kind = "") {
  const v = h("div", { class: "value", text: String(value) });
  const node = h("div", { class: ["stat", kind] }, h("div", { class: "label", text: label }), v);
  node.set = (x) => { v.textContent = String(x); };
  return node;
}

export function jsonBlock(value) { return h("pre", { class: "json", tabindex: "0" }, JSON.stringify(value, null, 2)); }

/** A sparkline of the last values (an inline SVG). */
export function sparkline(values, width = 90, height = 22) {
  const svg = s("svg", { class: "spark", width, height, viewBox: `0 0 ${width} ${height}`, "aria-hidden": "true" });
  if (values.length < 2) return svg;
  const max = Math.max(1, ...values);
  const step = width / (values.length - 1);
  const pts = values.map((v, i) => [i * step, height - 1 - (v / max) * (height - 3)]);
  const line = pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  svg.append(s("path", { d: `M0,${height} L${line.replace(/ /g, " L")} L${width},${height} Z` }));
  svg.append(s("polyline", { points: line }));
  return svg;
}

// --- formatting ---------------------------------------------------------------------------------
const nf = new Intl.NumberFormat();
export const fmtNum = (n) => (n === null || n === undefined || n === "" ? "–" : nf.format(Number(n)));

export function fmtBytes(n) {
  n = Number(n);
  if (!Number.isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(n < 10 ? 1 : 0) : n} ${units[i]}`;
}

export function fmtRate(r) {
  if (!Number.isFinite(r)) return "–";
  if (r === 0) return "0/s";
  return r < 10 ? `${r.toFixed(1)}/s` : `${Math.round(r)}/s`;
}

export function fmtTime(ms) {
  if (ms === null || ms === undefined || ms === "" || Number(ms) <= 0) return "–";
  const d = new Date(typeof ms === "string" && !/^\d+$/.test(ms) ? ms : Number(ms));
  if (Number.isNaN(d.getTime())) return String(ms);
  const pad = (x, w = 2) => String(x).padStart(w, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtAgo(ms) {
  if (!ms) return "–";
  const s = Math.round((Date.now() - Number(ms)) / 1000);
  if (s < 1) return "now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

export function preview(value, max = 160) {
  const text = typeof value === "string" ? JSON.stringify(value) : JSON.stringify(value ?? null);
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}

/** JSON if it parses, else the text as a string ("hello" and hello both give "hello"). */
export function parseLoose(text) {
  const t = text.trim();
  if (t === "") return null;
  try { return JSON.parse(t); } catch { return text; }
}

export function parseJson(text, what) {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`${what} is not valid JSON: ${err.message}`);
  }
}
