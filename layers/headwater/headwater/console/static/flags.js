// Flags (/api/v1 manifests, with the flag token): namespaces the user follows, their version
// history, closure diffs between two versions (the closure tarballs, unpacked in the browser)
// and the live closure events (GET /api/v1/events, read with fetch(): it needs the bearer).
import {
  api, apiUrl, authHeaders, creds, enc, h, field, form, notice, pill, replace, clear, kv, viewHead,
  prefs, LiveFetch, ApiError, fmtTime, fmtBytes, parseJson, isAbort,
} from "./lib.js";

const ALL = "Kg"; // URL-safe base64 of "*": the whole namespace's closure

export function mount(root, _args, ctx) {
  root.append(viewHead("Flags", "Feature-flag namespaces: every published version, what changed between two of them, and the live closure events."));
  if (!creds.flagToken) {
    root.append(notice(h("span", null, "Flag manifests need a flag token (HEADWATER_FLAG_TOKENS). ", h("a", { href: "#/settings" }, "Set one on the Connection page"), "."), "info"));
    return;
  }
  let namespaces = prefs.get("flagNamespaces", []);
  let selected = null;
  let stopDetail = () => {};
  const list = h("ul", { class: "btn-row plain-list", id: "flag-namespaces", "aria-label": "Followed namespaces" });
  const detail = h("div");
  const tenantInput = h("input", { type: "text", name: "tenant", id: "ns-tenant", placeholder: "acme", value: prefs.get("flagTenant", "") });
  const slugInput = h("input", { type: "text", name: "slug", id: "ns-slug", placeholder: "billing" });
  const add = form({ class: "inline", "aria-label": "Follow a namespace" }, [
    field("Tenant", tenantInput), field("Namespace", slugInput), h("button", { type: "submit", id: "ns-add" }, "Open"),
  ], async () => {
    const tenant = tenantInput.value.trim();
    const slug = slugInput.value.trim();
    if (!tenant || !slug) throw new Error("Give a tenant and a namespace.");
    const label = `${tenant}/${slug}`;
    prefs.set("flagTenant", tenant);
    if (!namespaces.includes(label)) { namespaces = [...namespaces, label]; prefs.set("flagNamespaces", namespaces); }
    slugInput.value = "";
    renderList();
    choose(label);
  });

  function renderList() {
    clear(list);
    list.classList.toggle("hidden", !namespaces.length);
    for (const label of namespaces) {
      const b = h("button", { type: "button", class: label === selected ? null : "ghost", "aria-pressed": String(label === selected), onclick: () => choose(label) }, label);
      const x = h("button", { type: "button", class: "ghost small", "aria-label": `Stop following ${label}`, onclick: () => {
        namespaces = namespaces.filter((n) => n !== label);
        prefs.set("flagNamespaces", namespaces);
        if (selected === label) { stopDetail(); selected = null; clear(detail); }
        renderList();
      } }, "×");
      list.append(h("li", { class: "row" }, b, x));
    }
  }
  function choose(label) {
    stopDetail();
    selected = label;
    renderList();
    const [tenant, slug] = label.split("/");
    stopDetail = mountNamespace(detail, tenant, slug, ctx);
  }
  ctx.onCleanup(() => stopDetail());
  root.append(
    h("section", { class: "card", "aria-labelledby": "ns-h" },
      h("h2", { id: "ns-h" }, "Namespaces"),
      h("p", { class: "muted small" }, "There is no listing of namespaces: open one by its tenant and name (the console remembers it on this device)."),
      add, list),
    detail);
  renderList();
  if (namespaces.length) choose(namespaces[namespaces.length - 1]);
}

function mountNamespace(box, tenant, slug, ctx) {
  const base = `/api/v1/tenants/${enc(tenant)}/namespaces/${enc(slug)}`;
  const ctrl = new AbortController();
  const signal = AbortSignal.any([ctrl.signal, ctx.signal]);
  const versionsBody = h("tbody");
  const files = h("div", { id: "flag-files" });
  const diffBox = h("div", { id: "flag-diff" });
  const eventsBody = h("tbody");
  const status = pill("connecting", "warn");
  status.id = "flag-events-status";
  const fromSel = h("select", { name: "from", id: "diff-from" });
  const toSel = h("select", { name: "to", id: "diff-to" });
  const problem = h("div");
  let versions = [];
  let currentFiles = {};

  const compare = form({ class: "inline", "aria-label": "Compare two versions" }, [
    field("From version", fromSel), field("To version", toSel), h("button", { type: "submit", id: "diff-submit" }, "Show diff"),
  ], async () => { await showDiff(Number(fromSel.value), Number(toSel.value)); });

  const editor = h("textarea", { name: "files", id: "flag-editor", rows: "10", spellcheck: "false", "aria-label": "Manifest files (JSON)" });
  const publish = form({ class: "stacked", "aria-label": "Publish a new version" }, [
    field('{"files": {"path": "text"}}: namespace.toml, flags/<key>.toml, segments/<name>.toml (Ctrl+Enter publishes)', editor),
    h("div", null, h("button", { type: "submit", id: "flag-publish" }, "Publish version")),
  ], async () => {
    const body = parseJson(editor.value, "The manifest");
    const r = await api(`${base}/manifest`, { method: "PUT", json: body, auth: "flag" }).catch((err) => {
      if (err instanceof ApiError && err.status === 422 && err.body && err.body.error) {
        const findings = err.body.error.details || [];
        throw new Error(`lint failed: ${findings.map((f) => `${f.path}: ${f.message}`).join("; ")}`);
      }
      throw err;
    });
    if (await load()) startFeed();
    return r.prev_version === r.version ? `Unchanged: still version ${r.version}.` : `Published version ${r.version}.`;
  });

  replace(box,
    problem,
    h("div", { class: "split" },
      h("div", { class: "stack" },
        h("section", { class: "card", "aria-labelledby": "versions-h" },
          h("h2", { id: "versions-h" }, `${tenant}/${slug}: versions`),
          h("div", { class: "log" }, h("table", { class: "data", id: "flag-versions", "aria-labelledby": "versions-h" },
            h("thead", null, h("tr", null, [["Version", 1], ["Published"], ["Closure hash"], [""]].map(([c, n]) => h("th", { scope: "col", class: n ? "num" : null }, c)))),
            versionsBody))),
        h("section", { class: "card", "aria-labelledby": "diff-h" },
          h("h2", { id: "diff-h" }, "Closure diff"),
          h("p", { class: "muted small" }, "The whole namespace's closure (every flag and segment) at each version, compared file by file."),
          compare, diffBox)),
      h("div", { class: "stack" },
        h("section", { class: "card", "aria-labelledby": "fevents-h" },
          h("h2", { id: "fevents-h" }, "Live events", status),
          h("div", { class: "log" }, h("table", { class: "data", id: "flag-events" },
            h("thead", null, h("tr", null, ["Event", "Delivery", "Changes"].map((c) => h("th", { scope: "col" }, c)))),
            eventsBody))),
        h("section", { class: "card", "aria-labelledby": "files-h" }, h("h2", { id: "files-h" }, "Current manifest"), files),
        h("section", { class: "card", "aria-labelledby": "publish-h" }, h("h2", { id: "publish-h" }, "Publish"), publish))));

  // Each event starts a load and a diff; their answers can come back out of order, and an
  // older one must not overwrite a newer one: only the latest started is shown.
  let loads = 0;
  let diffs = 0;

  /** true when loaded and shown, false on an error, null when a later load superseded it. */
  async function load() {
    const mine = ++loads;
    try {
      const [v, m] = await Promise.all([
        api(`${base}/manifest/versions`, { auth: "flag", signal }),
        api(`${base}/manifest`, { auth: "flag", signal }),
      ]);
      if (mine !== loads) return null;
      versions = (v.versions || []).slice().sort((a, b) => b.version - a.version);
      currentFiles = m.files || {};
      clear(versionsBody);
      for (const x of versions) {
        versionsBody.append(h("tr", { dataset: { version: String(x.version) } },
          h("td", { class: "num" }, String(x.version)),
          h("td", { class: "nowrap" }, fmtTime(x.created_at)),
          h("td", { class: "mono small", title: x.closure_hash }, x.closure_hash.slice(0, 16) + "…"),
          h("td", null, x.version > 1 ? h("button", { type: "button", class: "small ghost", onclick: () => { setPair(x.version - 1, x.version); showDiff(x.version - 1, x.version).catch(showErr); } }, `diff ${x.version - 1} → ${x.version}`) : "")));
      }
      if (!versions.length) versionsBody.append(h("tr", null, h("td", { colspan: 4, class: "empty" }, "No versions yet: publish one.")));
      for (const sel of [fromSel, toSel]) {
        const keep = sel.value;
        replace(sel, versions.map((x) => h("option", { value: String(x.version) }, `v${x.version}`)));
        if (keep && versions.some((x) => String(x.version) === keep)) sel.value = keep;
      }
      const paths = Object.keys(currentFiles).sort();
      replace(files,
        kv([["Version", String(m.version)], ["Files", String(paths.length)]]),
        h("ul", { class: "small mono" }, paths.map((p) => h("li", null, p, h("span", { class: "muted" }, ` ${fmtBytes(new TextEncoder().encode(currentFiles[p]).length)}`)))));
      if (!editor.value) editor.value = JSON.stringify({ files: currentFiles }, null, 2);
      replace(problem);
      return true;
    } catch (err) {
      if (mine !== loads) return null;
      if (!isAbort(err)) replace(problem, notice(err.status === 404 ? `${tenant}/${slug} does not exist yet: publish its first version below.` : err.message, err.status === 404 ? "info" : "error"));
      if (err.status === 404 && !editor.value) editor.value = JSON.stringify({ files: { "namespace.toml": `name = "${slug}"\n` } }, null, 2);
      return false;
    }
  }

  function setPair(from, to) { fromSel.value = String(from); toSel.value = String(to); }
  const showErr = (err) => { if (!isAbort(err)) replace(diffBox, notice(err.message, "error")); };

  async function closure(version) {
    const response = await fetch(apiUrl(`${base}/closure`, { version, subscription: ALL }), { headers: authHeaders("flag"), signal });
    if (!response.ok) {
      let message = `HTTP ${response.status}`;
      try { const b = await response.json(); message = b.error ? `${b.error.code}: ${b.error.message}` : message; } catch { /* keep */ }
      throw new ApiError(response.status, `version ${version}: ${message}`);
    }
    const raw = await response.arrayBuffer();
    return untar(await gunzip(raw));
  }

  async function showDiff(from, to) {
    if (!from || !to) throw new Error("Pick two versions.");
    const mine = ++diffs;
    replace(diffBox, h("p", { class: "muted" }, `Comparing v${from} and v${to}…`));
    let a, b;
    try {
      [a, b] = await Promise.all([closure(from), closure(to)]);
    } catch (err) {
      if (mine !== diffs) return;
      throw err;
    }
    if (mine !== diffs) return;
    const paths = [...new Set([...a.keys(), ...b.keys()])].sort();
    const changes = [];
    for (const p of paths) {
      const x = a.get(p);
      const y = b.get(p);
      if (x === undefined) changes.push({ path: p, op: "added", before: "", after: y });
      else if (y === undefined) changes.push({ path: p, op: "removed", before: x, after: "" });
      else if (x !== y) changes.push({ path: p, op: "modified", before: x, after: y });
    }
    replace(diffBox,
      h("p", { class: "small", id: "diff-summary" }, changes.length ? `v${from} → v${to}: ${changes.length} file${changes.length > 1 ? "s" : ""} changed (${paths.length} in the closures).` : `v${from} and v${to} have the same closure.`),
      changes.map((c) => h("div", { class: "diff-file", dataset: { path: c.path, op: c.op } },
        h("h3", null, h("span", { class: ["tag", `op-${c.op}`] }, c.op), " ", h("code", null, c.path)),
        renderDiff(c.before, c.after))));
  }

  let live = false;
  const startFeed = () => { if (!live && !signal.aborted) { live = true; feed.start(); } };
  const feed = new LiveFetch({
    request: () => ({ path: "/api/v1/events", query: { ns: `${tenant}/${slug}:*` }, auth: "flag" }),
    onState: (state, detail) => {
      const kind = { open: "ok", connecting: "warn", reconnecting: "warn", failed: "bad" }[state] || "";
      status.className = `pill ${kind}`;
      status.textContent = detail ? `${state}: ${detail}` : state === "open" ? "live" : state;
    },
    onEvent: ({ event, data, id }) => {
      let d;
      try { d = JSON.parse(data); } catch { return; }
      const changes = d.files
        ? d.files.map((f) => [h("span", { class: ["tag", `op-${f.op}`] }, `${f.op} ${f.path}`), " "])
        : d.delivery === "snapshot" ? h("span", { class: "muted" }, `snapshot, ${fmtBytes(d.snapshot_size_bytes)}`) : h("span", { class: "muted" }, d.reason || "");
      eventsBody.prepend(h("tr", { class: "fresh", dataset: { event: id || "" } },
        h("td", { class: "mono small nowrap" }, `${event} ${id || ""}`),
        h("td", null, d.delivery || event),
        h("td", null, changes)));
      load().then((ok) => {
        if (ok !== true) return;  // failed, or a later event's load is the one shown
        const v = d.version ?? d.current_version;
        if (d.prev_version && v) { setPair(d.prev_version, v); showDiff(d.prev_version, v).catch(showErr); }
      });
    },
  });
  load().then((ok) => {
    if (signal.aborted) return;
    if (ok) {
      startFeed();
      if (versions.length > 1) { setPair(versions[1].version, versions[0].version); showDiff(versions[1].version, versions[0].version).catch(showErr); }
    } else {
      status.className = "pill";
      status.textContent = "no namespace yet";
    }
  });
  return () => { feed.stop(); ctrl.abort(); };
}

// --- closures: gzip + ustar, unpacked in the browser ------------------------------------------------
async function gunzip(buffer) {
  const stream = new Blob([buffer]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** path -> text of each regular file of a ustar archive. */
export function untar(bytes) {
  const out = new Map();
  const dec = new TextDecoder();
  const str = (at, len) => { const b = bytes.subarray(at, at + len); const z = b.indexOf(0); return dec.decode(z < 0 ? b : b.subarray(0, z)); };
  let at = 0;
  while (at + 512 <= bytes.length) {
    if (bytes.subarray(at, at + 512).every((b) => b === 0)) break;
    const name = str(at, 100);
    const size = parseInt(str(at + 124, 12).trim() || "0", 8);
    const type = String.fromCharCode(bytes[at + 156] || 48);
    const prefix = str(at + 345, 155);
    const path = prefix ? `${prefix}/${name}` : name;
    if (type === "0" || type === "\0") out.set(path, dec.decode(bytes.subarray(at + 512, at + 512 + size)));
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}

/** A unified line diff (LCS; big files are summarized instead). */
function renderDiff(before, after) {
  const lines = (text) => (text ? text.replace(/\n$/, "").split("\n") : []);
  const a = lines(before);
  const b = lines(after);
  if (a.length * b.length > 2_000_000) return h("p", { class: "muted small" }, `${a.length} → ${b.length} lines (too big to diff here).`);
  const n = a.length; const m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const ops = [];
  let i = 0; let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { ops.push([" ", a[i]]); i++; j++; }
    else if (i < n && (j >= m || lcs[i + 1][j] >= lcs[i][j + 1])) { ops.push(["-", a[i]]); i++; }
    else { ops.push(["+", b[j]]); j++; }
  }
  const keep = new Array(ops.length).fill(false);
  ops.forEach(([op], k) => { if (op !== " ") for (let x = Math.max(0, k - 3); x <= Math.min(ops.length - 1, k + 3); x++) keep[x] = true; });
  const out = [];
  let skipped = false;
  ops.forEach(([op, text], k) => {
    if (!keep[k]) { if (!skipped) { out.push(h("div", { class: "hunk" }, "…")); skipped = true; } return; }
    skipped = false;
    out.push(h("div", { class: op === "+" ? "add" : op === "-" ? "del" : null }, `${op} ${text}`));
  });
  return h("div", { class: "diff", tabindex: "0", role: "region", "aria-label": "Line changes" }, out);
}
