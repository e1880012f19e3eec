// Routers (/v0/routers): the forwarding graph between topics as an inline SVG, and the list.
import {
  api, enc, h, s, field, form, notice, replace, viewHead, fmtNum, isAbort,
} from "./lib.js";

const REFRESH_MS = 4000;
const NODE_W = 176;
const NODE_H = 46;
const COL_GAP = 130;
const ROW_GAP = 30;
const PAD = 28;

export function mount(root, _args, ctx) {
  const graphWrap = h("div", { class: "graph-wrap", id: "router-graph" });
  const tbody = h("tbody");
  const note = h("div");
  let signature = null;
  let labels = new Map(); // router -> <text> of its forwarded count
  let heads = new Map(); // topic -> <text> of its head
  let confirming = null;

  const nameInput = h("input", { type: "text", name: "name", id: "new-router-name", placeholder: "orders->audit" });
  const srcInput = h("input", { type: "text", name: "source", id: "new-router-source", placeholder: "orders" });
  const dstInput = h("input", { type: "text", name: "dest", id: "new-router-dest", placeholder: "audit" });
  const filterInput = h("input", { type: "text", name: "filter", id: "new-router-filter", placeholder: "tag, or prefix*" });
  const guarantee = h("select", { name: "guarantee", id: "new-router-guarantee" },
    h("option", { value: "at_least_once" }, "at least once"), h("option", { value: "exactly_once" }, "exactly once"));
  const create = form({ class: "inline", "aria-label": "Create a router" }, [
    field("Name", nameInput), field("Source topic", srcInput), field("Destination topic", dstInput),
    field("Tag filter", filterInput), field("Guarantee", guarantee), h("button", { type: "submit" }, "Create router"),
  ], async () => {
    const source = srcInput.value.trim();
    const dest = dstInput.value.trim();
    const name = nameInput.value.trim() || `${source}->${dest}`;
    const body = { source, dest, guarantee: guarantee.value };
    const f = filterInput.value.trim();
    if (f) body.filter = f.endsWith("*") ? ["tag", "Glob", f] : f;
    const r = await api(`/v0/routers/${enc(name)}`, { method: "PUT", json: body });
    nameInput.value = ""; srcInput.value = ""; dstInput.value = ""; filterInput.value = "";
    await refresh();
    return r.created ? `Created router ${name}: it forwards what is appended to ${source} from now on.` : `Updated router ${name}.`;
  });

  root.append(
    viewHead("Routers", "Each router copies the records appended to its source topic into its destination topic, from its durable cursor."),
    note,
    h("section", { class: "card", "aria-labelledby": "graph-h" },
      h("h2", { id: "graph-h" }, "Routing graph"),
      h("p", { class: "muted small" }, "Topics are boxes (with their head seq), routers are arrows (with the records they forwarded). Tab to a topic and press Enter to open it."),
      graphWrap),
    h("div", { class: "stack" },
      h("section", { class: "card", "aria-labelledby": "routers-h" },
        h("h2", { id: "routers-h" }, "Routers"),
        h("div", { class: "table-wrap" },
          h("table", { class: "data", id: "routers-table", "aria-labelledby": "routers-h" },
            h("thead", null, h("tr", null, [["Router"], ["Source"], ["Destination"], ["Guarantee"], ["Forwarded", 1], [""]].map(([c, n]) => h("th", { scope: "col", class: n ? "num" : null }, c)))),
            tbody))),
      h("section", { class: "card", "aria-labelledby": "new-router-h" }, h("h2", { id: "new-router-h" }, "Create a router"), create)),
  );

  async function remove(name, button) {
    if (confirming !== name) {
      confirming = name;
      button.textContent = "Confirm delete";
      button.setAttribute("aria-label", `Confirm: delete router ${name}`);
      return;
    }
    confirming = null;
    try {
      await api(`/v0/routers/${enc(name)}`, { method: "DELETE" });
      signature = null;
      await refresh();
    } catch (err) {
      replace(note, notice(err.message, "error"));
    }
  }

  async function refresh() {
    const [body, topics] = await Promise.all([
      api("/v0/routers", { query: { page_size: 1000 }, signal: ctx.signal }),
      api("/v0/topics", { query: { page_size: 1000 }, signal: ctx.signal }).catch((err) => { if (isAbort(err)) throw err; return { topics: [] }; }),
    ]);
    const list = body.routers || [];
    const headOf = new Map((topics.topics || []).map((t) => [t.topic, t.head_seq]));
    const sig = JSON.stringify(list.map((r) => [r.router, r.source, r.dest, r.guarantee]));
    if (sig !== signature) {
      signature = sig;
      const drawn = drawGraph(list, headOf);
      labels = drawn.labels;
      heads = drawn.heads;
      replace(graphWrap, drawn.svg);
      replace(tbody);
      for (const r of list) {
        const del = h("button", { type: "button", class: "small danger", "aria-label": `Delete router ${r.router}` }, "Delete");
        del.addEventListener("click", () => remove(r.router, del));
        tbody.append(h("tr", { dataset: { router: r.router } },
          h("td", { class: "mono nowrap" }, r.router),
          h("td", null, h("a", { href: `#/topics/${enc(r.source)}` }, r.source)),
          h("td", null, h("a", { href: `#/topics/${enc(r.dest)}` }, r.dest)),
          h("td", null, h("span", { class: "tag" }, r.guarantee)),
          h("td", { class: "num forwarded" }, fmtNum(r.forwarded_total)),
          h("td", null, del)));
      }
      if (!list.length) tbody.append(h("tr", null, h("td", { colspan: 6, class: "empty" }, "No routers yet.")));
    } else {
      for (const r of list) {
        const label = labels.get(r.router);
        if (label) label.textContent = `${r.router} · ${fmtNum(r.forwarded_total)}`;
        const cell = tbody.querySelector(`tr[data-router="${CSS.escape(r.router)}"] td.forwarded`);
        if (cell) cell.textContent = fmtNum(r.forwarded_total);
      }
      for (const [topic, text] of heads) text.textContent = headOf.has(topic) ? `head ${fmtNum(headOf.get(topic))}` : "not created yet";
    }
    replace(note);
  }
  ctx.every(REFRESH_MS, () => refresh().catch((err) => {
    if (!isAbort(err)) replace(note, notice(`Could not list routers: ${err.message}`, "error"));
  }));
}

/** Layered layout: a topic's column is its longest path from a topic nothing routes into
 * (cycles, which routers may allow, stop growing after one pass per topic). */
export function layout(routers) {
  const names = [...new Set(routers.flatMap((r) => [r.source, r.dest]))].sort();
  const level = new Map(names.map((n) => [n, 0]));
  for (let pass = 0; pass < names.length; pass++) {
    let moved = false;
    for (const r of routers) {
      const next = level.get(r.source) + 1;
      if (next > level.get(r.dest) && next < names.length) { level.set(r.dest, next); moved = true; }
    }
    if (!moved) break;
  }
  const columns = [];
  for (const n of names) (columns[level.get(n)] ||= []).push(n);
  const pos = new Map();
  const tallest = Math.max(0, ...columns.map((c) => (c ? c.length : 0)));
  columns.forEach((col, ci) => {
    if (!col) return;
    const offset = ((tallest - col.length) * (NODE_H + ROW_GAP)) / 2;
    col.forEach((n, ri) => pos.set(n, { x: PAD + ci * (NODE_W + COL_GAP), y: PAD + offset + ri * (NODE_H + ROW_GAP) }));
  });
  const width = PAD * 2 + Math.max(1, columns.length) * (NODE_W + COL_GAP) - COL_GAP;
  const loops = routers.some((r) => level.get(r.dest) <= level.get(r.source));
  const height = PAD * 2 + Math.max(1, tallest) * (NODE_H + ROW_GAP) - ROW_GAP + (loops ? 50 : 0);
  return { names, pos, width, height };
}

function drawGraph(routers, headOf) {
  const labels = new Map();
  const heads = new Map();
  if (!routers.length) {
    const svg = s("svg", { class: "graph", width: 420, height: 90, viewBox: "0 0 420 90", role: "img", "aria-label": "Routing graph: no routers" },
      s("text", { x: 20, y: 50, class: "muted" }, "No routers: create one to see the graph."));
    svg.querySelector("text").setAttribute("fill", "currentColor");
    return { svg, labels, heads };
  }
  const { names, pos, width, height } = layout(routers);
  const svg = s("svg", {
    class: "graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "group",
    "aria-label": `Routing graph: ${names.length} topics, ${routers.length} routers`,
  });
  svg.append(s("defs", null, s("marker", {
    id: "hw-arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse",
  }, s("path", { d: "M0,0 L10,5 L0,10 z" }))));
  const pairs = new Map();
  routers.forEach((r) => {
    const a = pos.get(r.source);
    const b = pos.get(r.dest);
    const key = [r.source, r.dest].sort().join("\u0000");
    const nth = pairs.get(key) || 0;
    pairs.set(key, nth + 1);
    let d;
    let lx;
    let ly;
    if (b.x > a.x) {
      const x1 = a.x + NODE_W; const y1 = a.y + NODE_H / 2 + nth * 6;
      const x2 = b.x; const y2 = b.y + NODE_H / 2 + nth * 6;
      const mx = (x1 + x2) / 2;
      d = `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 2},${y2}`;
      lx = mx; ly = (y1 + y2) / 2 - 6;
    } else {
      // back edge (a cycle) or same column: a loop under both boxes
      const x1 = a.x + NODE_W / 2 + 14; const y1 = a.y + NODE_H;
      const x2 = b.x + NODE_W / 2 - 14; const y2 = b.y + NODE_H;
      const low = Math.max(y1, y2) + 34 + nth * 10;
      d = `M${x1},${y1} C${x1},${low} ${x2},${low} ${x2},${y2 + 2}`;
      lx = (x1 + x2) / 2; ly = low - 2;
    }
    const label = s("text", { x: lx, y: ly, "text-anchor": "middle", class: "halo" }, `${r.router} · ${fmtNum(r.forwarded_total)}`);
    labels.set(r.router, label);
    svg.append(s("g", { class: ["edge", r.guarantee], "data-router": r.router },
      s("title", null, `${r.router}: ${r.source} → ${r.dest} (${r.guarantee}), ${r.forwarded_total} forwarded`),
      s("path", { d, "marker-end": "url(#hw-arrow)" }),
      label));
  });
  for (const n of names) {
    const p = pos.get(n);
    const shown = n.length > 22 ? n.slice(0, 21) + "…" : n;
    const head = s("text", { x: p.x + 12, y: p.y + 35, class: "sub" }, headOf.has(n) ? `head ${fmtNum(headOf.get(n))}` : "not created yet");
    heads.set(n, head);
    svg.append(s("a", { class: "node", href: `#/topics/${enc(n)}`, "aria-label": `Topic ${n}`, "data-topic": n },
      s("title", null, n),
      s("rect", { x: p.x, y: p.y, width: NODE_W, height: NODE_H, rx: 8 }),
      s("text", { x: p.x + 12, y: p.y + 19 }, shown),
      head));
  }
  return { svg, labels, heads };
}
