// Durable Streams (/v1): the list, and one stream's details, schema, profile, index status,
// search and append (the /_details, /_schema, /_profile, /_index_status, /_search routes).
import {
  api, enc, encPath, h, field, form, notice, replace, clear, stat, kv, jsonBlock, viewHead, pill,
  fmtNum, fmtBytes, fmtTime, preview, parseJson, isAbort, ApiError,
} from "./lib.js";

const PROFILES = ["generic", "evlog", "metrics", "state-protocol"];
const JSON_TYPE = "application/json";

export function mount(root, args, ctx) {
  if (args[0]) mountStream(root, args[0], ctx);
  else mountList(root, ctx);
}

const streamPath = (name, sub) => `/v1/stream/${encPath(name)}${sub ? "/" + sub : ""}`;

// --- the list ------------------------------------------------------------------------------------
function mountList(root, ctx) {
  const tbody = h("tbody");
  const note = h("div");
  const more = h("p", { class: "muted small" });
  const nameInput = h("input", { type: "text", name: "name", id: "new-stream-name", placeholder: "events/app" });
  const typeSelect = h("select", { name: "content_type", id: "new-stream-type" },
    [JSON_TYPE, "text/plain", "application/octet-stream"].map((t) => h("option", { value: t }, t)));
  const create = form({ class: "inline", "aria-label": "Create a stream" }, [
    field("Name", nameInput), field("Content type", typeSelect), h("button", { type: "submit" }, "Create stream"),
  ], async () => {
    const name = nameInput.value.trim();
    if (!name) throw new Error("A stream needs a name.");
    await api(streamPath(name), { method: "PUT", headers: { "Content-Type": typeSelect.value } });
    nameInput.value = "";
    await refresh();
    return `Created ${name}.`;
  });
  root.append(
    viewHead("Durable Streams", "Append-only streams on /v1 (the Durable Streams protocol), with schemas, profiles, indexes and search."),
    note,
    h("section", { class: "card", "aria-labelledby": "streams-h" },
      h("h2", { id: "streams-h" }, "Streams"),
      h("div", { class: "table-wrap" },
        h("table", { class: "data", id: "streams-table", "aria-labelledby": "streams-h" },
          h("thead", null, h("tr", null, ["Stream", "Content type", "Profile", "Created", "TTL", "State", "Next offset"].map((c) => h("th", { scope: "col" }, c)))),
          tbody)),
      more),
    h("section", { class: "card", "aria-labelledby": "new-stream-h" }, h("h2", { id: "new-stream-h" }, "Create a stream"), create),
  );
  async function refresh() {
    const response = await api("/v1/streams", { query: { limit: 1000 }, signal: ctx.signal, raw: true });
    const list = await response.json();
    clear(tbody);
    for (const d of list) {
      tbody.append(h("tr", { dataset: { stream: d.name } },
        h("td", null, h("a", { href: `#/streams/${enc(d.name)}` }, d.name)),
        h("td", { class: "mono small" }, d.content_type),
        h("td", null, h("span", { class: "tag" }, d.profile)),
        h("td", { class: "nowrap" }, fmtTime(d.created_at)),
        h("td", null, d.ttl_seconds ? `${fmtNum(d.ttl_seconds)} s` : d.expires_at || "–"),
        h("td", null, d.closed ? pill("closed", "warn") : pill("open", "ok")),
        h("td", { class: "mono small" }, d.next_offset)));
    }
    if (!list.length) tbody.append(h("tr", null, h("td", { colspan: 7, class: "empty" }, "No streams yet: create one below.")));
    more.textContent = response.headers.get("Stream-List-Next-After") ? "Showing the first 1,000 streams." : "";
    replace(note);
  }
  ctx.every(5000, () => refresh().catch((err) => {
    if (!isAbort(err)) replace(note, notice(`Could not list streams: ${err.message}`, "error"));
  }));
}

// --- one stream ------------------------------------------------------------------------------------
function mountStream(root, name, ctx) {
  const stats = {
    entries: stat("Entries", "…"), bytes: stat("Size", "…"), profile: stat("Profile", "…"),
    version: stat("Schema version", "…"), segments: stat("Sealed segments", "…"), state: stat("State", "…"),
  };
  const problem = h("div");
  let contentType = JSON_TYPE;
  let etag = null;
  const panels = {};
  const tabs = [
    ["details", "Details"], ["schema", "Schema"], ["profile", "Profile"], ["index", "Index status"], ["search", "Search"], ["append", "Append"],
  ];
  const tablist = h("div", { class: "tabs", role: "tablist", "aria-label": "Stream sections" });
  const panelBox = h("div");
  for (const [id, label] of tabs) {
    const tab = h("button", { type: "button", role: "tab", id: `tab-${id}`, "aria-controls": `panel-${id}`, "aria-selected": "false", tabindex: "-1" }, label);
    tab.addEventListener("click", () => select(id));
    tab.addEventListener("keydown", (e) => {
      const i = tabs.findIndex(([t]) => t === id);
      let j = null;
      if (e.key === "ArrowRight") j = (i + 1) % tabs.length;
      else if (e.key === "ArrowLeft") j = (i - 1 + tabs.length) % tabs.length;
      else if (e.key === "Home") j = 0;
      else if (e.key === "End") j = tabs.length - 1;
      if (j !== null) { e.preventDefault(); select(tabs[j][0]); document.getElementById(`tab-${tabs[j][0]}`).focus(); }
    });
    tablist.append(tab);
    panels[id] = h("div", { role: "tabpanel", id: `panel-${id}`, "aria-labelledby": `tab-${id}`, tabindex: "0", class: "hidden" });
    panelBox.append(panels[id]);
  }
  const loaded = new Set();
  function select(id) {
    for (const [t] of tabs) {
      const tab = document.getElementById(`tab-${t}`);
      const on = t === id;
      tab.setAttribute("aria-selected", String(on));
      tab.tabIndex = on ? 0 : -1;
      panels[t].classList.toggle("hidden", !on);
    }
    if (!loaded.has(id)) { loaded.add(id); loaders[id](); }
  }

  root.append(
    viewHead(name, null, [h("a", { href: "#/streams" }, "Durable Streams"), " / "]),
    problem,
    h("div", { class: "stats" }, Object.values(stats)),
    h("section", { class: "card" }, tablist, panelBox),
  );

  const fail = (panel) => (err) => { if (!isAbort(err)) replace(panel, notice(err.message, "error")); };

  // details, refreshed with If-None-Match (a 304 costs nothing)
  async function details() {
    const response = await api(streamPath(name, "_details"), { signal: ctx.signal, raw: true, headers: etag ? { "If-None-Match": etag } : {} });
    if (response.status === 304) return;
    etag = response.headers.get("ETag");
    const d = await response.json();
    const st = d.stream;
    contentType = st.content_type;
    stats.entries.set(fmtNum(st.entries));
    stats.bytes.set(fmtBytes(st.total_size_bytes));
    stats.profile.set(st.profile);
    stats.version.set(st.schema_version ?? 0);
    stats.segments.set(fmtNum(d.index_status.segments.total_count));
    stats.state.set(st.closed ? "closed" : "open");
    const storage = d.storage.object_storage;
    replace(panels.details,
      h("div", { class: "grid" },
        h("div", null, h("h3", null, "Stream"), kv([
          ["Content type", st.content_type], ["Created", fmtTime(st.created_at)], ["Epoch", String(st.epoch)],
          ["Next offset", h("code", null, st.next_offset)], ["Sealed through", h("code", null, st.sealed_through)],
          ["TTL", st.ttl_seconds ? `${fmtNum(st.ttl_seconds)} s` : "none"], ["Expires", st.expires_at || "never"],
          ["Forked from", st.forked_from || "–"],
        ])),
        h("div", null, h("h3", null, "Storage"), kv([
          ["Segments in S3", `${fmtNum(storage.segment_objects)} (${fmtBytes(storage.segments_bytes)})`],
          ["Index companions", `${fmtNum(storage.index_objects)} (${fmtBytes(storage.indexes_bytes)})`],
          ["Unsealed (DynamoDB tail)", fmtBytes(d.storage.local_storage.wal_bytes)],
          ["S3 requests (this process)", d.object_store_requests ? `${fmtNum(d.object_store_requests.reads)} reads, ${fmtNum(d.object_store_requests.puts)} puts` : "–"],
        ]))),
      h("details", null, h("summary", null, "Raw _details"), jsonBlock(d)));
    replace(problem);
    if (contentType !== JSON_TYPE && loaded.has("search")) renderSearchState();
  }

  const loaders = {
    details: () => {},
    schema: () => loadSchema().catch(fail(panels.schema)),
    profile: () => loadProfile().catch(fail(panels.profile)),
    index: () => loadIndex().catch(fail(panels.index)),
    search: () => renderSearch(),
    append: () => renderAppend(),
  };

  async function loadSchema() {
    const reg = await api(streamPath(name, "_schema"), { signal: ctx.signal });
    const fields = Object.entries((reg.search && reg.search.fields) || {});
    const input = h("textarea", { name: "schema", id: "schema-update", rows: "8", "aria-label": "Schema update (JSON)", spellcheck: "false" },
      JSON.stringify(reg.currentVersion ? { search: reg.search ?? null } : { schema: { type: "object" } }, null, 2));
    const update = form({ class: "stacked", "aria-label": "Update the schema" }, [
      field("Update (POST /_schema body: schema, lens, routingKey, search)", input),
      h("div", null, h("button", { type: "submit" }, "Apply update")),
    ], async () => {
      await api(streamPath(name, "_schema"), { method: "POST", json: parseJson(input.value, "The update") });
      etag = null;
      await Promise.all([loadSchema(), details()]);
      return "Applied.";
    });
    replace(panels.schema,
      h("div", { class: "grid" },
        h("div", null,
          h("h3", null, "Registry"),
          kv([
            ["Current version", String(reg.currentVersion)],
            ["Versions", Object.keys(reg.schemas || {}).join(", ") || "none"],
            ["Routing key", reg.routingKey ? `${reg.routingKey.jsonPointer}${reg.routingKey.required ? " (required)" : ""}` : "none"],
            ["Primary timestamp", (reg.search && reg.search.primaryTimestampField) || "–"],
          ]),
          h("h3", null, "Search fields"),
          fields.length
            ? h("div", { class: "table-wrap" }, h("table", { class: "data", id: "search-fields" },
              h("thead", null, h("tr", null, ["Field", "Kind", "Capabilities"].map((c) => h("th", { scope: "col" }, c)))),
              h("tbody", null, fields.map(([f, spec]) => h("tr", null,
                h("td", { class: "mono" }, f), h("td", null, spec.kind),
                h("td", null, ["exact", "prefix", "column", "sortable", "positions", "aggregatable", "exists"].filter((c) => spec[c]).map((c) => [h("span", { class: "tag" }, c), " "])))))))
            : h("p", { class: "muted" }, "No search configuration: _search and filter= need one.")),
        h("div", null, h("h3", null, "Raw registry"), jsonBlock(reg))),
      h("h3", null, "Update"), update);
  }

  async function loadProfile() {
    const p = await api(streamPath(name, "_profile"), { signal: ctx.signal });
    const kind = (p.profile && p.profile.kind) || "generic";
    const choice = h("select", { name: "kind", id: "profile-kind", value: kind }, PROFILES.map((k) => h("option", { value: k }, k)));
    const set = form({ class: "inline", "aria-label": "Set the profile" }, [field("Profile", choice), h("button", { type: "submit" }, "Set profile")], async () => {
      await api(streamPath(name, "_profile"), { method: "POST", json: { profile: { kind: choice.value } } });
      etag = null;
      await Promise.all([loadProfile(), details()]);
      loaded.delete("schema");
      return `Profile is now ${choice.value}.`;
    });
    replace(panels.profile,
      h("p", { class: "muted" }, "evlog and metrics install their own schema and search configuration, and must be set before anything is appended."),
      set, h("h3", null, "Profile resource"), jsonBlock(p));
  }

  async function loadIndex() {
    const st = await api(streamPath(name, "_index_status"), { signal: ctx.signal });
    const fam = st.search_families || [];
    const exact = st.exact_indexes || [];
    const famRow = (label, f, extra) => h("tr", null,
      h("td", null, label), h("td", null, extra ?? ""),
      h("td", { class: "num" }, fmtNum(f.indexed_segment_count ?? f.contiguous_covered_segment_count)),
      h("td", { class: "num" }, fmtNum(f.lag_segments)),
      h("td", { class: "num" }, f.lag_ms ? `${Math.round(f.lag_ms / 1000)} s` : "0"),
      h("td", { class: "num" }, fmtBytes(f.bytes_at_rest)));
    const rows = [
      ...fam.map((f) => famRow(h("span", { class: "tag" }, f.family), f, "search family")),
      ...exact.map((f) => famRow(h("span", { class: "tag" }, `exact:${f.name}`), f, f.stale_configuration ? "stale configuration" : "exact index")),
    ];
    if (st.routing_key_index && st.routing_key_index.configured) rows.push(famRow(h("span", { class: "tag" }, "routing keys"), st.routing_key_index, "routing key index"));
    replace(panels.index,
      kv([
        ["Sealed segments", `${fmtNum(st.segments.total_count)} (${fmtBytes(st.segments.bytes)})`],
        ["Sealed through", h("code", null, st.segments.sealed_through)],
        ["Desired families", (st.bundled_companions.desired_families || []).join(", ") || "none (no search configuration)"],
        ["Covered segments", fmtNum(st.bundled_companions.covered_segment_count)],
        ["Lagging segments", fmtNum(st.bundled_companions.lag_segments)],
      ]),
      h("h3", null, "Families"),
      rows.length
        ? h("div", { class: "table-wrap" }, h("table", { class: "data", id: "index-families" },
          h("thead", null, h("tr", null, [["Family"], ["What"], ["Covered", 1], ["Lag (segments)", 1], ["Lag (age)", 1], ["At rest", 1]].map(([c, n]) => h("th", { scope: "col", class: n ? "num" : null }, c)))),
          h("tbody", null, rows)))
        : h("p", { class: "muted" }, "No index families: the stream has no search configuration or routing key."),
      h("details", null, h("summary", null, "Raw _index_status"), jsonBlock(st)));
  }

  // search
  const q = h("input", { type: "text", name: "q", id: "search-q", placeholder: 'svc:api "connection reset" -has:ms', autocomplete: "off" });
  const size = h("input", { type: "number", name: "size", id: "search-size", min: "1", max: "500", value: "20" });
  const sort = h("input", { type: "text", name: "sort", id: "search-sort", placeholder: "offset:desc" });
  const results = h("div", { id: "search-results" });
  let after = null;
  const searchForm = form({ class: "inline", role: "search", "aria-label": `Search ${name}` }, [
    field("Query", q, { wide: true }), field("Size", size), field("Sort", sort),
    h("button", { type: "submit", id: "search-submit" }, "Search"),
  ], async () => { after = null; await runSearch(false); });

  function renderSearchState() {
    if (contentType !== JSON_TYPE) {
      replace(panels.search, notice(`_search needs an application/json stream; this one is ${contentType}.`, "info"));
    }
  }
  function renderSearch() {
    replace(panels.search, searchForm, results);
    renderSearchState();
  }
  async function runSearch(append) {
    const query = { q: q.value.trim() || undefined, size: size.value || undefined, sort: sort.value.trim() || undefined };
    if (append && after) query.search_after = JSON.stringify(after);
    let body;
    try {
      body = await api(streamPath(name, "_search"), { query, signal: ctx.signal });
    } catch (err) {
      if (err instanceof ApiError && err.status === 408 && err.body) body = err.body; // partial answer
      else throw err;
    }
    after = body.next_search_after;
    const cov = body.coverage || {};
    const rows = (body.hits || []).map((hit) => h("tr", { dataset: { offset: hit.offset } },
      h("td", { class: "mono small" }, hit.offset),
      h("td", { class: "num" }, String(hit.score)),
      h("td", null, h("div", { class: "preview", title: preview(hit.source, 4000) }, preview(hit.source, 220)))));
    const tbody = append ? results.querySelector("tbody") : null;
    if (tbody) { tbody.append(...rows); } else {
      replace(results,
        h("p", { class: "small", id: "search-summary" },
          `${fmtNum(body.total.value)}${body.total.relation === "gte" ? "+" : ""} match${body.total.value === 1 ? "" : "es"} in ${fmtNum(body.took_ms)} ms`,
          body.timed_out ? " (timed out: partial)" : "",
          h("span", { class: "muted" }, ` · indexed segments ${fmtNum(cov.indexed_segments)}, scanned segments ${fmtNum(cov.scanned_segments)}, tail entries scanned ${fmtNum(cov.scanned_tail_docs)}`)),
        h("div", { class: "table-wrap" }, h("table", { class: "data", id: "search-hits" },
          h("thead", null, h("tr", null, [["Offset"], ["Score", 1], ["Entry"]].map(([c, n]) => h("th", { scope: "col", class: n ? "num" : null }, c)))),
          h("tbody", null, rows.length ? rows : h("tr", null, h("td", { colspan: 3, class: "empty" }, "No matches."))))));
    }
    const old = results.querySelector("button.more");
    if (old) old.remove();
    if (after) results.append(h("button", { type: "button", class: "ghost more", onclick: () => runSearch(true).catch(fail(results)) }, "More results"));
  }

  // append
  function renderAppend() {
    const isJson = contentType === JSON_TYPE;
    const body = h("textarea", { name: "body", id: "stream-append-body", rows: "5", spellcheck: "false", "aria-label": "Entries to append" },
      isJson ? '[{"msg": "hello"}]' : "hello");
    const f = form({ class: "stacked", "aria-label": `Append to ${name}` }, [
      field(isJson ? "JSON: an array appends one entry per element (Ctrl+Enter to send)" : `Body (${contentType})`, body),
      h("div", null, h("button", { type: "submit", id: "stream-append-submit" }, "Append")),
    ], async () => {
      const text = body.value;
      if (isJson) parseJson(text, "The body");
      const response = await api(streamPath(name), { method: "POST", body: text, headers: { "Content-Type": contentType }, raw: true });
      etag = null;
      await details();
      return `Appended: next offset ${response.headers.get("Stream-Next-Offset")}.`;
    });
    replace(panels.append, f);
  }

  select("details");
  ctx.every(5000, () => details().catch((err) => {
    if (isAbort(err)) return;
    replace(problem, notice(err.status === 404 ? `Stream ${name} does not exist.` : err.message, "error"));
  }));
}
