// Dashboard (/api/v2): the public metrics stream, ingest, and a user's configurations with
// their sentiment_update streams. Both streams are GETs that need no header (the
// configuration stream takes ?user_id=), so a plain EventSource reads them.
import {
  api, apiUrl, creds, enc, h, s, field, form, notice, pill, replace, clear, stat, kv, viewHead,
  fmtNum, fmtTime, isAbort,
} from "./lib.js";

export function mount(root, _args, ctx) {
  const cards = {
    total: stat("Items", "…"), positive: stat("Positive", "…", "ok"), neutral: stat("Neutral", "…"),
    negative: stat("Negative", "…", "bad"), hour: stat("Last hour", "…"), day: stat("Last 24 h", "…"),
  };
  const status = pill("connecting", "warn");
  status.id = "dash-status";
  const updates = h("span", { class: "muted small", id: "dash-updates" }, "0 updates");
  const bars = h("div", { id: "dash-bars" });
  const server = h("div");
  let received = 0;

  root.append(
    viewHead("Dashboard", "The sentiment feed of /api/v2: metrics pushed over SSE as items arrive."),
    h("div", { class: "stats", id: "dash-metrics" }, Object.values(cards)),
    h("div", { class: "split" },
      h("section", { class: "card", "aria-labelledby": "bytag-h" },
        h("h2", { id: "bytag-h" }, "Items per ticker", h("span", { class: "row" }, updates, status)),
        bars),
      h("div", { class: "stack" },
        h("section", { class: "card", "aria-labelledby": "ingest-h" }, h("h2", { id: "ingest-h" }, "Ingest an item"), ingestForm()),
        h("section", { class: "card", "aria-labelledby": "dstatus-h" }, h("h2", { id: "dstatus-h" }, "Streams on this server"), server))),
  );

  // metrics: EventSource reconnects by itself (retry: 3000 from the server)
  const es = new EventSource(apiUrl("/api/v2/stream"));
  ctx.onCleanup(() => es.close());
  es.onopen = () => { status.className = "pill ok"; status.textContent = "live"; };
  es.onerror = () => {
    status.className = "pill warn";
    status.textContent = es.readyState === EventSource.CLOSED ? "closed" : "reconnecting";
  };
  es.addEventListener("metrics", (e) => {
    const m = JSON.parse(e.data);
    received++;
    updates.textContent = `${received} update${received === 1 ? "" : "s"} · ${fmtTime(m.timestamp)}`;
    cards.total.set(fmtNum(m.total));
    cards.positive.set(fmtNum(m.positive));
    cards.neutral.set(fmtNum(m.neutral));
    cards.negative.set(fmtNum(m.negative));
    cards.hour.set(fmtNum(m.rate_last_hour));
    cards.day.set(fmtNum(m.rate_last_24h));
    replace(bars, barChart(m.by_tag || {}));
  });
  es.addEventListener("heartbeat", (e) => {
    const d = JSON.parse(e.data);
    status.textContent = `live · ${d.connections} stream${d.connections === 1 ? "" : "s"}`;
  });
  const refreshStatus = async () => {
    const st = await api("/api/v2/stream/status", { auth: "none", signal: ctx.signal });
    replace(server, kv([["Open /api/v2 streams", `${fmtNum(st.connections)} of ${fmtNum(st.max_connections)}`], ["Uptime", `${fmtNum(st.uptime_seconds)} s`]]));
  };
  ctx.every(10000, refreshStatus);
  es.addEventListener("open", () => ctx.guard(refreshStatus()).catch(() => {}));

  root.append(configurations(ctx));
}

function barChart(byTag) {
  const entries = Object.entries(byTag).slice(0, 12);
  if (!entries.length) return h("p", { class: "empty" }, "No items yet: ingest one.");
  const max = Math.max(...entries.map(([, n]) => n));
  const rowH = 26;
  const width = 560;
  const labelW = 90;
  const svg = s("svg", { class: "bars", width: "100%", viewBox: `0 0 ${width} ${entries.length * rowH + 6}`, role: "img", "aria-label": `Items per ticker: ${entries.map(([t, n]) => `${t} ${n}`).join(", ")}` });
  entries.forEach(([ticker, n], i) => {
    const y = i * rowH + 4;
    const w = Math.max(2, ((width - labelW - 60) * n) / max);
    svg.append(
      s("text", { x: 0, y: y + 15 }, ticker),
      s("rect", { class: "bar", x: labelW, y, width: w, height: rowH - 8, rx: 3 }),
      s("text", { class: "val", x: labelW + w + 6, y: y + 15 }, fmtNum(n)));
  });
  return svg;
}

function ingestForm() {
  const ticker = h("input", { type: "text", name: "ticker", id: "ingest-ticker", placeholder: "AAPL", maxlength: "16" });
  const label = h("select", { name: "label", id: "ingest-label" }, ["positive", "neutral", "negative"].map((l) => h("option", { value: l }, l)));
  const score = h("input", { type: "number", name: "score", id: "ingest-score", min: "-1", max: "1", step: "0.01", value: "0.5" });
  const confidence = h("input", { type: "number", name: "confidence", id: "ingest-confidence", min: "0", max: "1", step: "0.01", value: "0.9" });
  const source = h("input", { type: "text", name: "source", id: "ingest-source", value: "console", maxlength: "64" });
  return form({ class: "inline", "aria-label": "Ingest a sentiment item", id: "ingest-form" }, [
    field("Ticker", ticker), field("Label", label), field("Score", score), field("Confidence", confidence), field("Source", source),
    h("button", { type: "submit", id: "ingest-submit" }, "Ingest"),
  ], async () => {
    const item = { ticker: ticker.value.trim(), label: label.value, score: Number(score.value), confidence: Number(confidence.value), source: source.value.trim() };
    const r = await api("/api/v2/sentiment", { method: "POST", json: item });
    return `Stored as seq ${r.first_seq}.`;
  });
}

function configurations(ctx) {
  const box = h("section", { class: "card", "aria-labelledby": "cfgs-h" }, h("h2", { id: "cfgs-h" }, "Configurations"));
  const user = creds.userId;
  if (!user) {
    box.append(notice(h("span", null, "Configurations belong to a user id (X-User-ID). ", h("a", { href: "#/settings" }, "Set one on the Connection page"), " to list yours and follow their updates."), "info"));
    return box;
  }
  const headers = { "X-User-ID": user };
  const tbody = h("tbody");
  const updatesBody = h("tbody");
  const followStatus = pill("not following");
  let es = null;
  let following = null;
  ctx.onCleanup(() => { if (es) es.close(); });

  const nameInput = h("input", { type: "text", name: "name", id: "cfg-name", placeholder: "Tech watchlist" });
  const tickersInput = h("input", { type: "text", name: "tickers", id: "cfg-tickers", placeholder: "AAPL, MSFT (at most 5)" });
  const create = form({ class: "inline", "aria-label": "Create a configuration" }, [
    field("Name", nameInput), field("Tickers", tickersInput), h("button", { type: "submit" }, "Create"),
  ], async () => {
    const tickers = tickersInput.value.split(/[\s,]+/).filter(Boolean);
    const cfg = await api("/api/v2/configurations", { method: "POST", json: { name: nameInput.value.trim(), tickers }, headers, auth: "none" });
    nameInput.value = ""; tickersInput.value = "";
    await refresh();
    follow(cfg);
    return `Created ${cfg.name}.`;
  });

  function follow(cfg) {
    if (es) es.close();
    following = cfg.config_id;
    clear(updatesBody);
    es = new EventSource(apiUrl(`/api/v2/configurations/${enc(cfg.config_id)}/stream`, { user_id: user }));
    followStatus.className = "pill warn";
    followStatus.textContent = `connecting to ${cfg.name}`;
    es.onopen = () => { followStatus.className = "pill ok"; followStatus.textContent = `following ${cfg.name}`; };
    es.onerror = () => { followStatus.className = "pill warn"; followStatus.textContent = es.readyState === EventSource.CLOSED ? "closed" : "reconnecting"; };
    es.addEventListener("sentiment_update", (e) => {
      const item = JSON.parse(e.data);
      updatesBody.prepend(h("tr", { class: "fresh" },
        h("td", { class: "mono" }, item.ticker), h("td", null, item.label), h("td", { class: "num" }, String(item.score)),
        h("td", { class: "num" }, String(item.confidence)), h("td", null, item.source), h("td", { class: "nowrap" }, fmtTime(item.timestamp))));
      while (updatesBody.children.length > 100) updatesBody.lastElementChild.remove();
    });
    for (const tr of tbody.children) tr.classList.toggle("fresh", tr.dataset.config === following);
  }

  async function refresh() {
    const body = await api("/api/v2/configurations", { headers, auth: "none", signal: ctx.signal });
    clear(tbody);
    for (const cfg of body.configurations) {
      tbody.append(h("tr", { dataset: { config: cfg.config_id } },
        h("td", null, cfg.name),
        h("td", null, cfg.tickers.map((t) => [h("span", { class: "tag" }, t), " "])),
        h("td", { class: "nowrap" }, fmtTime(cfg.updated_at)),
        h("td", null, h("div", { class: "btn-row" },
          h("button", { type: "button", class: "small ghost", onclick: () => follow(cfg) }, "Follow"),
          h("button", { type: "button", class: "small danger", "aria-label": `Delete configuration ${cfg.name}`, onclick: async () => {
            await api(`/api/v2/configurations/${enc(cfg.config_id)}`, { method: "DELETE", headers, auth: "none" });
            if (following === cfg.config_id && es) { es.close(); followStatus.className = "pill"; followStatus.textContent = "not following"; }
            await refresh();
          } }, "Delete")))));
    }
    if (!body.configurations.length) tbody.append(h("tr", null, h("td", { colspan: 4, class: "empty" }, "No configurations yet.")));
  }
  box.append(
    h("p", { class: "muted small" }, `As user ${user}.`),
    h("div", { class: "table-wrap" }, h("table", { class: "data", id: "cfg-table" },
      h("thead", null, h("tr", null, ["Name", "Tickers", "Updated", ""].map((c) => h("th", { scope: "col" }, c)))), tbody)),
    create,
    h("h3", { class: "row" }, "Updates ", followStatus),
    h("div", { class: "log" }, h("table", { class: "data", id: "cfg-updates" },
      h("thead", null, h("tr", null, [["Ticker"], ["Label"], ["Score", 1], ["Confidence", 1], ["Source"], ["Time"]].map(([c, n]) => h("th", { scope: "col", class: n ? "num" : null }, c)))),
      updatesBody)));
  ctx.guard(refresh()).catch((err) => { if (!isAbort(err)) box.append(notice(err.message, "error")); });
  return box;
}
