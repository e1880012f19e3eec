// Notifications (/api/v1, aviso-compatible): event types from /api/v1/schema, a live watch
// (POST /api/v1/watch, read with fetch() since EventSource cannot POST) drawn on a lon/lat map
// (an equirectangular projection in SVG, no tiles), and a publish form.
import {
  api, h, s, field, form, notice, pill, replace, clear, kv, viewHead, prefs, LiveFetch,
  fmtTime, preview, parseJson, isAbort,
} from "./lib.js";

const WORLD = "(-90,-180,-90,180,90,180,90,-180,-90,-180)";
const MAX_SHAPES = 200;
const MAX_LOG = 200;

export function mount(root, _args, ctx) {
  const body = h("div");
  root.append(
    viewHead("Notifications", "Event types of the aviso-compatible /api/v1 surface. Watch one live: its polygons and points are drawn on the map as they arrive."),
    body);
  ctx.guard(api("/api/v1/schema", { auth: "none", signal: ctx.signal })).then((schema) => {
    if (!schema) return;
    const types = schema.event_types || [];
    if (!types.length) {
      replace(body, notice(schema.message || "No event types are configured (HEADWATER_NOTIFICATION_SCHEMA).", "info"));
      return;
    }
    const chosen = types.includes(prefs.get("notifyType")) ? prefs.get("notifyType") : types.find((t) => hasPolygon(schema.schema[t])) || types[0];
    const picker = h("select", { id: "event-type", name: "event_type", "aria-label": "Event type" }, types.map((t) => h("option", { value: t }, t)));
    picker.value = chosen;
    const typeBox = h("div");
    const stop = { fn: () => {} };
    const show = (t) => {
      stop.fn();
      prefs.set("notifyType", t);
      stop.fn = mountType(typeBox, t, schema.schema[t], ctx);
    };
    picker.addEventListener("change", () => show(picker.value));
    ctx.onCleanup(() => stop.fn());
    replace(body,
      h("section", { class: "card", "aria-labelledby": "types-h" },
        h("h2", { id: "types-h" }, "Event types"),
        h("div", { class: "table-wrap" }, h("table", { class: "data", id: "event-types" },
          h("thead", null, h("tr", null, ["Event type", "Identifier fields", "Payload"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", null, types.map((t) => {
            const ev = schema.schema[t];
            const fieldsList = Object.entries(ev.identifier || {}).map(([f, spec]) => [h("span", { class: "tag", title: spec.description || spec.type }, `${f}${spec.required ? "*" : ""}: ${spec.type.replace("Handler", "")}`), " "]);
            return h("tr", { dataset: { type: t } },
              h("td", null, h("button", { type: "button", class: "linkish", onclick: () => { picker.value = t; show(t); picker.focus(); } }, t)),
              h("td", null, fieldsList),
              h("td", null, ev.payload ? (ev.payload.required ? "required" : "optional") : "optional"));
          })))),
        h("p", { class: "muted small" }, "* required. Identifier fields are what watches filter on."),
        h("div", { class: "row" }, field("Watch and publish", picker))),
      typeBox);
    show(chosen);
  }).catch((err) => { if (!isAbort(err)) replace(body, notice(err.message, "error")); });
}

function hasPolygon(ev) { return Object.values((ev && ev.identifier) || {}).some((f) => f.type === "PolygonHandler"); }

/** Default watch filter value for a required field (a wildcard where the handler has one). */
function defaultFilter(spec) {
  switch (spec.type) {
    case "StringHandler": case "ExpverHandler": return "*";
    case "EnumHandler": return JSON.stringify({ in: spec.values });
    case "IntHandler": case "FloatHandler": return spec.range ? JSON.stringify({ between: spec.range }) : "";
    default: return "";
  }
}

/** (lat, lon) pairs of aviso's polygon text "lat,lon,lat,lon,..." (outer parentheses optional). */
export function parsePolygon(text) {
  if (typeof text !== "string") return null;
  const nums = text.replace(/[()\s]/g, "").split(",").filter(Boolean).map(Number);
  if (nums.length < 6 || nums.length % 2 || nums.some((n) => !Number.isFinite(n))) return null;
  const pts = [];
  for (let i = 0; i < nums.length; i += 2) pts.push([nums[i], nums[i + 1]]);
  return pts;
}

function centroid(pts) {
  const open = pts.length > 1 && pts[0][0] === pts.at(-1)[0] && pts[0][1] === pts.at(-1)[1] ? pts.slice(0, -1) : pts;
  const lat = open.reduce((a, p) => a + p[0], 0) / open.length;
  const lon = open.reduce((a, p) => a + p[1], 0) / open.length;
  return [lat, lon];
}

// Coarse, hand-drawn land outlines ([lon, lat] rings): a backdrop to find one's way, not
// geography (the console loads no map data and no tiles).
const LAND = [
  [[-168, 66], [-162, 70], [-140, 70], [-125, 70], [-95, 72], [-80, 73], [-62, 66], [-55, 52], [-66, 45], [-70, 42], [-76, 35], [-81, 31], [-80, 25], [-82, 28], [-90, 30], [-97, 27], [-97, 22], [-87, 21], [-88, 16], [-83, 10], [-79, 9], [-85, 12], [-92, 15], [-105, 20], [-110, 24], [-115, 31], [-118, 34], [-124, 40], [-124, 48], [-132, 55], [-140, 60], [-152, 59], [-165, 60]],
  [[-73, 78], [-60, 82], [-30, 83], [-20, 78], [-22, 70], [-42, 60], [-50, 64], [-56, 72], [-68, 76]],
  [[-80, 9], [-72, 12], [-60, 10], [-50, 0], [-35, -5], [-39, -14], [-48, -26], [-58, -35], [-65, -42], [-68, -52], [-72, -54], [-75, -45], [-73, -35], [-71, -18], [-77, -10], [-81, -4], [-78, 2]],
  [[-10, 36], [-9, 43], [-2, 47], [-5, 48], [5, 52], [8, 57], [12, 55], [20, 55], [22, 60], [18, 62], [22, 66], [16, 69], [26, 71], [40, 67], [60, 69], [70, 73], [90, 76], [110, 74], [140, 72], [160, 70], [180, 68], [180, 64], [172, 60], [163, 58], [156, 51], [142, 47], [135, 43], [128, 35], [121, 31], [122, 25], [110, 20], [108, 12], [105, 9], [100, 13], [98, 8], [103, 1], [98, 16], [94, 17], [92, 22], [80, 15], [77, 8], [72, 20], [67, 24], [58, 25], [56, 27], [48, 30], [52, 24], [59, 22], [55, 17], [44, 12], [42, 16], [35, 28], [33, 31], [35, 36], [27, 37], [26, 41], [23, 37], [20, 40], [14, 45], [12, 42], [16, 38], [9, 44], [3, 43], [0, 39], [-5, 36]],
  [[-17, 21], [-10, 30], [-6, 36], [10, 37], [20, 32], [32, 31], [34, 27], [43, 12], [51, 12], [42, -1], [40, -15], [35, -24], [27, -34], [18, -35], [12, -17], [13, -5], [9, 4], [-3, 5], [-8, 4], [-15, 11], [-17, 15]],
  [[114, -22], [122, -18], [130, -12], [137, -12], [142, -11], [146, -19], [153, -26], [150, -37], [141, -38], [131, -31], [115, -34]],
  [[-180, -78], [-150, -76], [-120, -73], [-90, -72], [-60, -64], [-30, -75], [0, -70], [30, -69], [60, -67], [90, -66], [120, -66], [150, -69], [180, -78], [180, -90], [-180, -90]],
  [[-5, 50], [1, 51], [0, 54], [-2, 58], [-5, 58], [-5, 54], [-3, 53]],
  [[130, 31], [135, 34], [140, 36], [142, 40], [141, 45], [139, 40], [133, 35]],
  [[44, -25], [47, -25], [50, -15], [49, -12], [44, -16]],
  [[109, 2], [118, 7], [119, 1], [116, -4], [110, -3]],
  [[95, 5], [106, -6], [103, -5], [98, 1]],
  [[131, -1], [141, -3], [150, -10], [141, -9], [137, -5]],
  [[172, -34], [178, -38], [174, -41], [168, -46], [167, -45], [173, -40]],
  [[-24, 65], [-14, 66], [-14, 64], [-22, 63]],
];

// The projection: x = lon, y = -lat, in a viewBox of -180..180 by -90..90.
const proj = ([lat, lon]) => `${lon.toFixed(3)},${(-lat).toFixed(3)}`;

function buildMap() {
  const svg = s("svg", { class: "map", viewBox: "-180 -90 360 180", role: "img", "aria-label": "Map of notifications", id: "notify-map", preserveAspectRatio: "xMidYMid meet" });
  const grat = s("g", { "aria-hidden": "true" });
  grat.append(s("rect", { class: "sea", x: -180, y: -90, width: 360, height: 180 }));
  for (const ring of LAND) grat.append(s("polygon", { class: "land", points: ring.map(([lon, lat]) => `${lon},${-lat}`).join(" ") }));
  for (let lon = -150; lon <= 150; lon += 30) grat.append(s("line", { class: ["grat", lon === 0 && "major"], x1: lon, y1: -90, x2: lon, y2: 90 }));
  for (let lat = -60; lat <= 60; lat += 30) grat.append(s("line", { class: ["grat", lat === 0 && "major"], x1: -180, y1: -lat, x2: 180, y2: -lat }));
  for (let lon = -120; lon <= 120; lon += 60) grat.append(s("text", { x: lon + 1, y: 88 }, `${lon}°`));
  for (let lat = -60; lat <= 60; lat += 30) if (lat) grat.append(s("text", { x: -179, y: -lat - 1 }, `${lat}°`));
  const shapes = s("g", { class: "shapes" });
  const overlay = s("g", { class: "overlay" });
  svg.append(grat, shapes, overlay);
  return { svg, shapes, overlay };
}

function mountType(box, eventType, schema, ctx) {
  const fields = Object.entries(schema.identifier || {});
  const polygonField = (fields.find(([, f]) => f.type === "PolygonHandler") || [])[0] || null;
  const map = buildMap();
  const status = pill("idle");
  status.id = "notify-status";
  const counter = h("span", { class: "muted small", id: "notify-count" }, "0 received");
  const logBody = h("tbody");
  let received = 0;
  let lastSeq = null;
  let feed = null;
  let startAt = null; // the first request's from_id / from_date

  // watch filter
  const filterInputs = new Map();
  for (const [f, spec] of fields) {
    if (f === polygonField) continue;
    filterInputs.set(f, h("input", { type: "text", name: f, id: `watch-${f}`, placeholder: spec.required ? "required" : "any", value: spec.required ? defaultFilter(spec) : "" }));
  }
  const pointInput = h("input", { type: "text", name: "point", id: "watch-point", placeholder: "lat,lon (or click the map)" });
  const history = h("select", { name: "history", id: "watch-history" },
    h("option", { value: "hour" }, "last hour, then live"), h("option", { value: "day" }, "last 24 hours, then live"),
    h("option", { value: "all" }, "everything stored, then live"), h("option", { value: "live" }, "live only"));
  const watchForm = form({ class: "inline", "aria-label": `Watch ${eventType}`, id: "watch-form" }, [
    [...filterInputs].map(([f, input]) => field(`${f}${schema.identifier[f].required ? " *" : ""}`, input)),
    polygonField ? field("Point filter", pointInput) : null,
    field("Start with", history),
    h("button", { type: "submit", id: "watch-submit" }, "Watch"),
  ], async () => { restart(); return "Watching."; });

  function identifierFilter() {
    const out = {};
    for (const [f, input] of filterInputs) {
      const v = input.value.trim();
      if (!v) continue;
      out[f] = v.startsWith("{") ? parseJson(v, `The ${f} filter`) : v;
    }
    if (polygonField) {
      const p = pointInput.value.trim();
      if (p) out.point = p;
      else out[polygonField] = WORLD;
    }
    return out;
  }

  function request() {
    const body = { event_type: eventType, identifier: identifierFilter() };
    if (lastSeq !== null) body.from_id = String(lastSeq + 1); // resume after the last one shown
    else if (startAt) Object.assign(body, startAt);
    return { path: "/api/v1/watch", method: "POST", json: body };
  }

  function restart() {
    if (feed) feed.stop();
    clear(map.shapes);
    clear(logBody);
    received = 0;
    lastSeq = null;
    counter.textContent = "0 received";
    const choice = history.value;
    const hours = choice === "hour" ? 1 : choice === "day" ? 24 : 0;
    startAt = choice === "all" ? { from_id: "1" } : hours ? { from_date: new Date(Date.now() - hours * 3600e3).toISOString().replace(/\.\d+Z$/, "Z") } : null;
    drawFilter();
    request(); // a bad filter fails here, in the form, not in the stream
    feed = new LiveFetch({
      request,
      onState: (state, detail) => {
        const kind = { open: "ok", connecting: "warn", reconnecting: "warn", failed: "bad" }[state] || "";
        status.className = `pill ${kind}`;
        status.textContent = detail ? `${state}: ${detail}` : state === "open" ? "live" : state;
      },
      onEvent: onFrame,
    }).start();
  }

  function onFrame({ event, data }) {
    let d;
    try { d = JSON.parse(data); } catch { return; }
    if (event === "replay" || (event === "live-notification" && d.id)) addNotification(d, event === "replay");
    else if (event === "replay-control" && d.type === "replay_completed") status.textContent = "live (replay done)";
    else if (event === "connection-closing") status.textContent = `closing: ${d.reason}`;
    else if (event === "error") logBody.prepend(h("tr", null, h("td", { colspan: 4, class: "muted small" }, `Stream error: ${d.message || d.error}`)));
  }

  function addNotification(ce, replayed) {
    const seq = Number(String(ce.id).split("@").pop());
    if (Number.isFinite(seq)) {
      if (lastSeq !== null && seq <= lastSeq) return; // already shown (a resumed stream)
      lastSeq = seq;
    }
    received++;
    counter.textContent = `${received} received`;
    const ident = (ce.data && ce.data.identifier) || {};
    const payload = ce.data ? ce.data.payload : null;
    const pts = polygonField ? parsePolygon(ident[polygonField]) : null;
    if (pts) {
      for (const old of map.shapes.querySelectorAll(".newest")) old.classList.remove("newest");
      const c = centroid(pts);
      map.shapes.append(s("g", { class: "shape", "data-id": ce.id },
        s("title", null, `${ce.id} ${fmtTime(ce.time)}`),
        s("polygon", { class: "poly newest", points: pts.map(proj).join(" ") }),
        s("circle", { class: "pt", cx: c[1], cy: -c[0], r: 1.6 })));
      while (map.shapes.children.length > MAX_SHAPES) map.shapes.firstElementChild.remove();
    }
    const others = Object.fromEntries(Object.entries(ident).filter(([k]) => k !== polygonField));
    logBody.prepend(h("tr", { class: "fresh", dataset: { id: ce.id } },
      h("td", { class: "mono small nowrap" }, ce.id, replayed ? h("span", { class: "muted" }, " (replay)") : ""),
      h("td", { class: "nowrap" }, fmtTime(ce.time)),
      h("td", null, h("div", { class: "preview" }, preview(others, 120)), pts ? h("div", { class: "muted small" }, `polygon, ${pts.length - 1} vertices`) : ""),
      h("td", null, h("div", { class: "preview" }, preview(payload, 120)))));
    while (logBody.children.length > MAX_LOG) logBody.lastElementChild.remove();
    map.svg.setAttribute("aria-label", `Map of ${eventType} notifications: ${map.shapes.children.length} shown`);
  }

  function drawFilter() {
    clear(map.overlay);
    const p = parsePoint(pointInput.value);
    if (p) map.overlay.append(s("circle", { class: "filter-pt", cx: p[1], cy: -p[0], r: 2.4 }, s("title", null, `Point filter ${p[0]},${p[1]}`)));
  }

  map.svg.addEventListener("click", (e) => {
    if (!polygonField) return;
    const pt = map.svg.createSVGPoint();
    pt.x = e.clientX; pt.y = e.clientY;
    const at = pt.matrixTransform(map.svg.getScreenCTM().inverse());
    const lat = Math.max(-90, Math.min(90, -at.y));
    const lon = Math.max(-180, Math.min(180, at.x));
    pointInput.value = `${lat.toFixed(2)},${lon.toFixed(2)}`;
    restart();
  });

  // publish
  const pubInputs = new Map(fields.map(([f, spec]) => [f, h("input", {
    type: "text", name: f, id: `publish-${f}`,
    placeholder: spec.type === "PolygonHandler" ? "(10,0,10,20,30,20,30,0,10,0)" : spec.type.replace("Handler", "").toLowerCase(),
  })]));
  const payloadInput = h("textarea", { name: "payload", id: "publish-payload", rows: "3", spellcheck: "false", "aria-label": "Payload (JSON)" }, '{"note": "from the console"}');
  const publish = form({ class: "stacked", "aria-label": `Publish a ${eventType} notification`, id: "publish-form" }, [
    h("p", { class: "muted small" }, "A notification gives every identifier field (watches may leave some out)."),
    h("div", { class: "row" }, [...pubInputs].map(([f, input]) => field(f, input))),
    field(`Payload (JSON${schema.payload && schema.payload.required ? ", required" : ""}; Ctrl+Enter sends)`, payloadInput),
    h("div", null, h("button", { type: "submit", id: "publish-submit" }, "Publish")),
  ], async () => {
    const identifier = {};
    for (const [f, input] of pubInputs) if (input.value.trim()) identifier[f] = input.value.trim();
    const msg = { event_type: eventType, identifier };
    if (payloadInput.value.trim()) msg.payload = parseJson(payloadInput.value, "The payload");
    const r = await api("/api/v1/notification", { method: "POST", json: msg });
    return `Published (${r.processed_at}).`;
  });

  replace(box,
    h("div", { class: "split" },
      h("section", { class: "card", "aria-labelledby": "map-h" },
        h("h2", { id: "map-h" }, `Live: ${eventType}`, h("span", { class: "row" }, counter, status)),
        watchForm,
        polygonField ? null : h("p", { class: "muted small" }, "This event type has no polygon field: notifications are listed below, with nothing to draw."),
        map.svg,
        h("p", { class: "muted small" }, polygonField
          ? "Polygons of matching notifications (the newest darker) with their centres; the orange dot is the point filter. Click the map to watch a point."
          : "")),
      h("div", { class: "stack" },
        h("section", { class: "card", "aria-labelledby": "fields-h" },
          h("h2", { id: "fields-h" }, "Identifier fields"),
          kv(fields.map(([f, spec]) => [f, `${spec.type}${spec.required ? ", required" : ""}${spec.values ? ": " + spec.values.slice(0, 8).join(" ") + (spec.values.length > 8 ? " …" : "") : ""}${spec.range ? ` [${spec.range.join(", ")}]` : ""}`]))),
        h("section", { class: "card", "aria-labelledby": "publish-h" }, h("h2", { id: "publish-h" }, "Publish"), publish))),
    h("section", { class: "card", "aria-labelledby": "nlog-h" },
      h("h2", { id: "nlog-h" }, "Received"),
      h("div", { class: "log", tabindex: "0", role: "region", "aria-label": "Received notifications" },
        h("table", { class: "data", id: "notify-log" },
          h("thead", null, h("tr", null, ["Id", "Time", "Identifier", "Payload"].map((c) => h("th", { scope: "col" }, c)))),
          logBody))));

  // Watch at once when the default filter is complete (every required field has a value).
  const ready = fields.every(([f, spec]) => !spec.required || f === polygonField || (filterInputs.get(f) && filterInputs.get(f).value));
  if (ready) restart();
  else status.textContent = "fill the required fields, then Watch";
  return () => { if (feed) feed.stop(); };
}

function parsePoint(text) {
  const nums = String(text || "").replace(/[()\s]/g, "").split(",").map(Number);
  return nums.length === 2 && nums.every(Number.isFinite) ? nums : null;
}
