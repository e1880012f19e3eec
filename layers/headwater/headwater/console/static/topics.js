// Topics (/v0): the list with live rates, and one topic's state, live tail and append form.
import {
  api, apiUrl, creds, enc, h, field, form, notice, pill, replace, clear, stat, kv, jsonBlock,
  sparkline, toast, viewHead, fmtNum, fmtBytes, fmtRate, fmtTime, fmtAgo, preview, parseLoose,
  isAbort,
} from "./lib.js";

const REFRESH_MS = 2000;
const TAIL_BACKLOG = 50;
const TAIL_MAX_ROWS = 500;

export function mount(root, args, ctx) {
  if (args[0]) mountTopic(root, args[0], ctx);
  else mountList(root, ctx);
}

// --- the list ------------------------------------------------------------------------------------
function mountList(root, ctx) {
  let prefix = "";
  const history = new Map(); // topic -> {head, t, rates: []}
  const rows = new Map(); // topic -> {tr, cells}
  const tbody = h("tbody");
  const more = h("p", { class: "muted small" });
  const updated = h("span", { class: "muted small", "aria-live": "off" });
  const totals = { topics: stat("Topics", "…"), records: stat("Records", "…"), bytes: stat("Bytes", "…"), rate: stat("Appends", "…") };
  const prefixInput = h("input", { type: "text", name: "prefix", placeholder: "prefix…", "aria-label": "Topic name prefix", id: "topic-prefix" });
  const filter = form({ class: "inline", role: "search", "aria-label": "Filter topics" },
    [field("Name prefix", prefixInput), h("button", { type: "submit", class: "ghost" }, "Filter")],
    async () => { prefix = prefixInput.value.trim(); clear(tbody); rows.clear(); await refresh(); });

  const nameInput = h("input", { type: "text", name: "name", required: true, id: "new-topic-name", placeholder: "orders" });
  const typeSelect = h("select", { name: "type", id: "new-topic-type" }, h("option", { value: "log" }, "log"), h("option", { value: "queue" }, "queue"));
  const create = form({ class: "inline", "aria-label": "Create a topic" },
    [field("Name", nameInput), field("Type", typeSelect), h("button", { type: "submit" }, "Create")],
    async () => {
      const name = nameInput.value.trim();
      if (!name) throw new Error("A topic needs a name.");
      const r = await api(`/v0/topics/${enc(name)}`, { method: "PUT", json: { type: typeSelect.value } });
      nameInput.value = "";
      await refresh();
      return r.created ? `Created ${name}.` : `${name} already exists (configuration updated).`;
    });

  const columns = [["Topic"], ["Head", true], ["Earliest", true], ["Count", true], ["Bytes", true], ["Rate", true], ["Trend"], ["Priority", true]];
  root.append(
    viewHead("Topics", "Every /v0 topic with its head, earliest live seq, record count, bytes and append rate (sampled every 2 s)."),
    h("div", { class: "stats" }, Object.values(totals)),
    h("section", { class: "card", "aria-labelledby": "topics-h" },
      h("h2", { id: "topics-h" }, "All topics", updated),
      filter,
      h("div", { class: "table-wrap" },
        h("table", { class: "data", id: "topics-table", "aria-labelledby": "topics-h" },
          h("thead", null, h("tr", null, columns.map(([label, num]) => h("th", { scope: "col", class: num ? "num" : null }, label)))),
          tbody)),
      more),
    h("section", { class: "card", "aria-labelledby": "new-topic-h" }, h("h2", { id: "new-topic-h" }, "Create a topic"), create),
  );

  async function refresh() {
    const body = await api("/v0/topics", { query: { prefix, page_size: 1000 }, signal: ctx.signal });
    const now = performance.now();
    const list = body.topics || [];
    let sumRate = 0;
    const seen = new Set();
    for (const t of list) {
      seen.add(t.topic);
      const prev = history.get(t.topic);
      let rate = NaN;
      const entry = prev || { rates: [] };
      if (prev) {
        const dt = (now - prev.t) / 1000;
        rate = dt > 0 ? Math.max(0, t.head_seq - prev.head) / dt : 0;
        entry.rates.push(rate);
        if (entry.rates.length > 30) entry.rates.shift();
        sumRate += rate;
      }
      entry.head = t.head_seq;
      entry.t = now;
      history.set(t.topic, entry);
      let row = rows.get(t.topic);
      if (!row) {
        const cells = Array.from({ length: 8 }, (_, i) => h("td", { class: i > 0 && i !== 6 ? "num" : null }));
        const link = h("a", { href: `#/topics/${enc(t.topic)}` }, t.topic);
        cells[0].append(link);
        row = { tr: h("tr", { dataset: { topic: t.topic } }, cells), cells };
        rows.set(t.topic, row);
      }
      const c = row.cells;
      c[1].textContent = fmtNum(t.head_seq);
      c[2].textContent = fmtNum(t.earliest_seq);
      c[3].textContent = fmtNum(t.count);
      c[4].textContent = fmtBytes(t.bytes);
      c[5].textContent = prev ? fmtRate(rate) : "…";
      replace(c[6], sparkline(entry.rates));
      c[7].textContent = fmtNum(t.effective_priority);
    }
    for (const [name, row] of rows) {
      if (!seen.has(name)) { row.tr.remove(); rows.delete(name); history.delete(name); }
    }
    // keep the DOM order = the API's (by name); move nothing that is already in place
    let cursor = tbody.firstElementChild;
    for (const t of list) {
      const tr = rows.get(t.topic).tr;
      if (tr === cursor) cursor = cursor.nextElementSibling;
      else tbody.insertBefore(tr, cursor);
    }
    for (const el of [...tbody.children]) if (!el.dataset.topic) el.remove();
    if (!list.length) tbody.append(h("tr", null, h("td", { colspan: 8, class: "empty" }, prefix ? `No topic starts with "${prefix}".` : "No topics yet: append to one, or create one below.")));
    more.textContent = body.next_cursor ? "Showing the first 1,000 topics: narrow the list with a prefix." : "";
    totals.topics.set(fmtNum(list.length) + (body.next_cursor ? "+" : ""));
    totals.records.set(fmtNum(list.reduce((a, t) => a + t.count, 0)));
    totals.bytes.set(fmtBytes(list.reduce((a, t) => a + t.bytes, 0)));
    totals.rate.set(history.size && [...history.values()].some((x) => x.rates.length) ? fmtRate(sumRate) : "…");
    updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
  }
  ctx.every(REFRESH_MS, () => refresh().catch((err) => {
    if (isAbort(err)) return;
    replace(more, notice(`Could not list topics: ${err.message}`, "error"));
  }));
}

// --- one topic --------------------------------------------------------------------------------------
function mountTopic(root, name, ctx) {
  const stats = {
    head: stat("Head seq", "…"), earliest: stat("Earliest", "…"), count: stat("Records", "…"),
    bytes: stat("Bytes", "…"), sealed: stat("Sealed through", "…"), written: stat("Last write", "…"),
  };
  const config = h("div");
  const queueLink = h("span");
  const problem = h("div");
  root.append(
    viewHead(name, null, [h("a", { href: "#/topics" }, "Topics"), " / "], queueLink),
    problem,
    h("div", { class: "stats" }, Object.values(stats)),
  );

  // append
  const dataInput = h("input", { type: "text", name: "data", id: "append-data", placeholder: '{"hello": "world"} or plain text', autocomplete: "off" });
  const tagInput = h("input", { type: "text", name: "tag", id: "append-tag", placeholder: "optional" });
  const nodeInput = h("input", { type: "text", name: "node", id: "append-node", placeholder: "optional" });
  const appendForm = form({ class: "inline", "aria-label": `Append to ${name}`, id: "append-form" }, [
    field("Data (JSON, or text)", dataInput, { wide: true }), field("Tag", tagInput), field("Node", nodeInput),
    h("button", { type: "submit", id: "append-submit" }, "Append"),
  ], async () => {
    const record = { data: parseLoose(dataInput.value) };
    if (tagInput.value.trim()) record.tag = tagInput.value.trim();
    const body = { records: [record] };
    if (nodeInput.value.trim()) body.node = nodeInput.value.trim();
    const r = await api(`/v0/topics/${enc(name)}`, { method: "POST", json: body });
    dataInput.value = "";
    refreshState();
    return `Appended seq ${r.first_seq}${r.created ? " (topic created)" : ""}.`;
  });

  // tail
  const status = pill("connecting", "warn");
  status.id = "tail-status";
  const tbody = h("tbody");
  const log = h("div", { class: "log", id: "tail-log", tabindex: "0", role: "region", "aria-label": `Live records of ${name}` },
    h("table", { class: "data" },
      h("thead", null, h("tr", null, ["Seq", "Time", "Tag", "Node", "Data"].map((c, i) => h("th", { scope: "col", class: i === 0 ? "num" : null }, c)))),
      tbody));
  const toggle = h("button", { type: "button", class: "ghost", id: "tail-toggle", "aria-pressed": "false" }, "Pause");
  const clearBtn = h("button", { type: "button", class: "ghost", onclick: () => clear(tbody) }, "Clear");
  const position = h("span", { class: "muted small", id: "tail-position" });
  root.append(
    h("div", { class: "split" },
      h("section", { class: "card", "aria-labelledby": "tail-h" },
        h("h2", { id: "tail-h" }, "Live tail", h("span", { class: "row" }, status, toggle, clearBtn)),
        h("p", { class: "muted small" }, "Records arrive over the /v0 watch stream (SSE). Pausing closes it; resuming opens a new session from the last seq received, so nothing is missed or repeated. ", position),
        log),
      h("div", { class: "stack" },
        h("section", { class: "card", "aria-labelledby": "append-h" }, h("h2", { id: "append-h" }, "Append a record"), appendForm),
        h("section", { class: "card", "aria-labelledby": "cfg-h" }, h("h2", { id: "cfg-h" }, "Configuration"), config))),
  );

  async function refreshState() {
    try {
      const t = await api(`/v0/topics/${enc(name)}`, { query: { touch: "false" }, signal: ctx.signal });
      stats.head.set(fmtNum(t.head_seq));
      stats.earliest.set(fmtNum(t.earliest_seq));
      stats.count.set(fmtNum(t.count));
      stats.bytes.set(fmtBytes(t.bytes));
      stats.sealed.set(fmtNum(t.sealed_through));
      stats.written.set(fmtAgo(t.last_write_ts));
      replace(problem);
      if (!config.firstChild || config.dataset.cfg !== JSON.stringify(t.config)) {
        config.dataset.cfg = JSON.stringify(t.config);
        replace(config,
          kv([
            ["Type", t.type], ["Durability", `${t.config.durability}${t.config.durable ? " (durable)" : ""}`],
            ["Retention", [t.config.cap_records ? `${fmtNum(t.config.cap_records)} records` : "", t.config.cap_bytes ? fmtBytes(t.config.cap_bytes) : "", t.config.ttl_ms ? `TTL ${fmtNum(t.config.ttl_ms)} ms` : ""].filter(Boolean).join(", ") || "unbounded"],
            ["Priority", fmtNum(t.effective_priority)], ["Last read", fmtTime(t.last_read_ts)],
          ]),
          h("details", null, h("summary", null, "Full configuration"), jsonBlock(t.config)));
      }
      if (t.type === "queue" && !queueLink.firstChild) queueLink.append(h("a", { href: `#/queues/${enc(name)}` }, "Open as a queue →"));
      return t;
    } catch (err) {
      if (err.status === 404 && status.textContent === "connecting") status.textContent = "waiting for the topic";
      if (!isAbort(err)) replace(problem, notice(err.status === 404 ? `Topic ${name} does not exist (yet): appending creates it.` : err.message, err.status === 404 ? "info" : "error"));
      return null;
    }
  }

  const tail = new Tail(name, {
    onRecords(records) {
      for (const r of records) {
        const tr = h("tr", { class: "fresh", dataset: { seq: String(r.$seq) } },
          h("td", { class: "num mono" }, String(r.$seq)),
          h("td", { class: "nowrap" }, fmtTime(r.$ts)),
          h("td", null, r.$tag ? h("span", { class: "tag" }, r.$tag) : ""),
          h("td", null, r.$node || ""),
          h("td", null, h("div", { class: "preview", title: preview(r.data, 2000) }, preview(r.data))));
        tbody.append(tr);
      }
      while (tbody.children.length > TAIL_MAX_ROWS) tbody.firstElementChild.remove();
      log.scrollTop = log.scrollHeight;
    },
    onNote(text) {
      tbody.append(h("tr", null, h("td", { colspan: 5, class: "muted small" }, text)));
    },
    onState(state, detail) {
      const kinds = { live: "ok", "caught up": "ok", connecting: "warn", reconnecting: "warn", paused: "", closed: "bad", failed: "bad" };
      status.className = `pill ${kinds[state] ?? ""}`;
      status.textContent = detail ? `${state}: ${detail}` : state;
      position.textContent = tail && tail.lastSeq !== null ? `Last seq received: ${tail.lastSeq}.` : "";
    },
  });
  toggle.addEventListener("click", () => {
    if (tail.running) { tail.stop(); toggle.textContent = "Resume"; toggle.setAttribute("aria-pressed", "true"); }
    else { tail.start(); toggle.textContent = "Pause"; toggle.setAttribute("aria-pressed", "false"); }
  });
  ctx.onCleanup(() => tail.stop());
  let started = false;
  ctx.every(REFRESH_MS, async () => {
    const t = await refreshState();
    if (t && !started && !ctx.signal.aborted) {
      // the tail opens on the last few records, then follows the head
      started = true;
      tail.lastSeq = Math.max(0, t.head_seq - TAIL_BACKLOG);
      tail.start();
    }
  });
}

/** A resumable tail of one topic over /v0/watch. The API key rides as ?token= (EventSource
 * cannot send headers; the server accepts it there). EventSource reconnects by itself with
 * Last-Event-ID; when the session is gone (410) or the stream failed for good, a new session
 * starts from the last seq received. Records at or below it are dropped (never shown twice). */
export class Tail {
  constructor(topic, handlers) {
    this.topic = topic;
    this.handlers = handlers;
    this.lastSeq = null;
    this.es = null;
    this.running = false;
    this.retry = null;
    this.delay = 1000;
  }

  start() {
    this.running = true;
    this._open();
  }

  stop() {
    this.running = false;
    clearTimeout(this.retry);
    if (this.es) { this.es.close(); this.es = null; }
    this.handlers.onState("paused");
  }

  _again(why) {
    if (this.es) { this.es.close(); this.es = null; }
    if (!this.running) return;
    this.handlers.onState("reconnecting", why);
    clearTimeout(this.retry);
    this.retry = setTimeout(() => this._open(), this.delay);
    this.delay = Math.min(this.delay * 2, 15000);
  }

  async _open() {
    if (!this.running) return;
    this.handlers.onState("connecting");
    let session;
    try {
      session = await api("/v0/watch", {
        method: "POST",
        json: { topics: { [this.topic]: { from_seq: this.lastSeq ?? 0 } }, include_tags: true, heartbeat_ms: 15000 },
      });
    } catch (err) {
      if (err.status === 401 || err.status === 403) { this.running = false; this.handlers.onState("failed", err.message); return; }
      this._again(err.message);
      return;
    }
    if (!this.running) return;
    const url = new URL(apiUrl(session.stream_url));
    if (creds.apiKey) url.searchParams.set("token", creds.apiKey);
    const es = new EventSource(url.toString());
    this.es = es;
    es.onopen = () => { this.delay = 1000; this.handlers.onState("live"); };
    es.addEventListener("record", (e) => {
      const d = JSON.parse(e.data);
      const fresh = (d.records || []).filter((r) => this.lastSeq === null || r.$seq > this.lastSeq);
      if (typeof d.to_seq === "number") this.lastSeq = Math.max(this.lastSeq ?? 0, d.to_seq);
      if (fresh.length) this.handlers.onRecords(fresh);
      this.handlers.onState("live");
    });
    es.addEventListener("caught-up", () => this.handlers.onState("caught up"));
    es.addEventListener("tombstone", (e) => {
      const d = JSON.parse(e.data);
      this.handlers.onNote(`Gap: seqs ${d.gap_from}–${d.gap_to} are gone (${d.reason}).`);
      if (typeof d.gap_to === "number") this.lastSeq = Math.max(this.lastSeq ?? 0, d.gap_to);
    });
    es.addEventListener("topic-deleted", () => {
      this.handlers.onNote("The topic was deleted.");
      this.lastSeq = 0;
      this._again("topic deleted");
    });
    es.addEventListener("error", (e) => {
      if (e.data) { // the server's own `error` frame
        let d = {};
        try { d = JSON.parse(e.data); } catch { /* keep {} */ }
        if (d.code === 410 || d.terminal) this._again(d.error || "session ended");
        else this.handlers.onState("live", d.error || "server advisory");
        return;
      }
      if (es.readyState === EventSource.CLOSED) this._again("stream failed");
      else this.handlers.onState("reconnecting");
    });
  }
}
