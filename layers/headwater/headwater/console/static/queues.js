// Queues (/v0 topics of type "queue"): counters, and claim / ack / nack / extend by hand.
import {
  api, enc, h, field, form, notice, replace, stat, kv, viewHead, pool,
  fmtNum, fmtTime, preview, parseLoose, isAbort,
} from "./lib.js";

const REFRESH_MS = 3000;
const DISCOVER_EVERY = 5; // refreshes between looks for new queues

export function mount(root, args, ctx) {
  if (args[0]) mountQueue(root, args[0], ctx);
  else mountList(root, ctx);
}

// --- every queue ---------------------------------------------------------------------------------
function mountList(root, ctx) {
  const types = new Map(); // topic -> "queue" | "log"
  const rows = new Map();
  const tbody = h("tbody");
  const note = h("div");
  const totals = { queues: stat("Queues", "…"), ready: stat("Ready", "…"), inflight: stat("In flight", "…", "warn"), dead: stat("Dead-lettered", "…", "bad") };

  const nameInput = h("input", { type: "text", name: "name", id: "new-queue-name", placeholder: "jobs" });
  const leaseInput = h("input", { type: "number", name: "lease_ms", min: "1", placeholder: "30000", id: "new-queue-lease" });
  const maxInput = h("input", { type: "number", name: "max_deliveries", min: "0", placeholder: "0 = unlimited", id: "new-queue-max" });
  const dlInput = h("input", { type: "text", name: "dead_letter", placeholder: "optional topic", id: "new-queue-dl" });
  const create = form({ class: "inline", "aria-label": "Create a queue" }, [
    field("Name", nameInput), field("Lease (ms)", leaseInput), field("Max deliveries", maxInput), field("Dead-letter topic", dlInput),
    h("button", { type: "submit" }, "Create queue"),
  ], async () => {
    const name = nameInput.value.trim();
    if (!name) throw new Error("A queue needs a name.");
    const cfg = { type: "queue" };
    if (leaseInput.value) cfg.lease_ms = Number(leaseInput.value);
    if (maxInput.value) cfg.max_deliveries = Number(maxInput.value);
    if (dlInput.value.trim()) cfg.dead_letter = dlInput.value.trim();
    const r = await api(`/v0/topics/${enc(name)}`, { method: "PUT", json: cfg });
    types.set(name, "queue");
    nameInput.value = "";
    await refresh(true);
    return r.created ? `Created queue ${name}.` : `Updated ${name}.`;
  });

  root.append(
    viewHead("Queues", "Topics of type queue: jobs ready to claim, leased (in flight), and moved to a dead-letter topic."),
    h("div", { class: "stats" }, Object.values(totals)),
    h("section", { class: "card", "aria-labelledby": "queues-h" },
      h("h2", { id: "queues-h" }, "Work queues"),
      note,
      h("div", { class: "table-wrap" },
        h("table", { class: "data", id: "queues-table", "aria-labelledby": "queues-h" },
          h("thead", null, h("tr", null, [["Queue"], ["Ready", 1], ["In flight", 1], ["Dead-lettered", 1], ["Jobs stored", 1], ["Head", 1], ["Dead-letter topic"]]
            .map(([c, n]) => h("th", { scope: "col", class: n ? "num" : null }, c)))),
          tbody))),
    h("section", { class: "card", "aria-labelledby": "new-queue-h" }, h("h2", { id: "new-queue-h" }, "Create a queue"), create),
  );

  let ticks = 0;
  async function refresh(discover) {
    if (discover) {
      const body = await api("/v0/topics", { query: { page_size: 1000 }, signal: ctx.signal });
      const unknown = (body.topics || []).map((t) => t.topic).filter((t) => !types.has(t));
      await pool(unknown, 6, async (t) => {
        try {
          const st = await api(`/v0/topics/${enc(t)}`, { query: { touch: "false" }, signal: ctx.signal });
          types.set(t, st.type);
        } catch (err) {
          if (isAbort(err)) throw err;
        }
      });
      const names = new Set((body.topics || []).map((t) => t.topic));
      for (const t of [...types.keys()]) if (!names.has(t)) types.delete(t);
    }
    const queues = [...types].filter(([, type]) => type === "queue").map(([t]) => t).sort();
    const states = await pool(queues, 6, (t) => api(`/v0/topics/${enc(t)}`, { query: { touch: "false" }, signal: ctx.signal }).catch((err) => {
      if (isAbort(err)) throw err;
      return null;
    }));
    let ready = 0; let inflight = 0; let dead = 0;
    const seen = new Set();
    for (const st of states) {
      if (!st || !st.queue) continue;
      seen.add(st.topic);
      ready += st.queue.ready; inflight += st.queue.in_flight; dead += st.queue.dead_lettered;
      let row = rows.get(st.topic);
      if (!row) {
        const cells = Array.from({ length: 7 }, (_, i) => h("td", { class: i > 0 && i < 6 ? "num" : null }));
        cells[0].append(h("a", { href: `#/queues/${enc(st.topic)}` }, st.topic));
        row = { tr: h("tr", { dataset: { queue: st.topic } }, cells), cells };
        rows.set(st.topic, row);
        tbody.append(row.tr);
      }
      const c = row.cells;
      c[1].textContent = fmtNum(st.queue.ready);
      c[2].textContent = fmtNum(st.queue.in_flight);
      c[3].textContent = fmtNum(st.queue.dead_lettered);
      c[4].textContent = fmtNum(st.count);
      c[5].textContent = fmtNum(st.head_seq);
      const dl = st.config.dead_letter;
      if ((c[6].dataset.dl || "") !== (dl || "")) {
        c[6].dataset.dl = dl || "";
        replace(c[6], dl ? h("a", { href: `#/topics/${enc(dl)}` }, dl) : h("span", { class: "muted" }, "–"));
      }
    }
    for (const [t, row] of rows) if (!seen.has(t)) { row.tr.remove(); rows.delete(t); }
    for (const el of [...tbody.children]) if (!el.dataset.queue) el.remove();
    if (!rows.size) tbody.append(h("tr", null, h("td", { colspan: 7, class: "empty" }, "No queues yet: create one below.")));
    totals.queues.set(fmtNum(rows.size));
    totals.ready.set(fmtNum(ready));
    totals.inflight.set(fmtNum(inflight));
    totals.dead.set(fmtNum(dead));
    replace(note);
  }
  ctx.every(REFRESH_MS, () => refresh(ticks++ % DISCOVER_EVERY === 0).catch((err) => {
    if (!isAbort(err)) replace(note, notice(`Could not read the queues: ${err.message}`, "error"));
  }));
}

// --- one queue ----------------------------------------------------------------------------------------
function mountQueue(root, name, ctx) {
  const stats = { ready: stat("Ready", "…"), inflight: stat("In flight", "…", "warn"), dead: stat("Dead-lettered", "…", "bad"), count: stat("Jobs stored", "…"), head: stat("Head seq", "…") };
  const problem = h("div");
  const info = h("div");
  const held = new Map(); // seq -> {job, tr, lease}

  const dataInput = h("input", { type: "text", name: "data", id: "enqueue-data", placeholder: '{"task": "resize"}', autocomplete: "off" });
  const enqueue = form({ class: "inline", "aria-label": `Enqueue a job on ${name}`, id: "enqueue-form" }, [
    field("Job data (JSON, or text)", dataInput, { wide: true }), h("button", { type: "submit" }, "Enqueue"),
  ], async () => {
    const r = await api(`/v0/topics/${enc(name)}`, { method: "POST", json: { records: [{ data: parseLoose(dataInput.value) }] } });
    dataInput.value = "";
    await refresh();
    return `Enqueued job ${r.first_seq}.`;
  });

  const nodeInput = h("input", { type: "text", name: "node", id: "claim-node", value: "console" });
  const maxInput = h("input", { type: "number", name: "max", id: "claim-max", min: "1", value: "1" });
  const leaseInput = h("input", { type: "number", name: "lease_ms", id: "claim-lease", min: "1", value: "30000" });
  const claim = form({ class: "inline", "aria-label": `Claim jobs from ${name}`, id: "claim-form" }, [
    field("Worker node", nodeInput), field("How many", maxInput), field("Lease (ms)", leaseInput),
    h("button", { type: "submit", id: "claim-submit" }, "Claim"),
  ], async () => {
    const node = nodeInput.value.trim() || "console";
    const r = await api(`/v0/topics/${enc(name)}/claim`, {
      method: "POST",
      json: { node, max: Number(maxInput.value) || 1, lease_ms: Number(leaseInput.value) || 30000 },
    });
    for (const job of r.claimed || []) addJob(job, node);
    await refresh();
    return r.count ? `Claimed ${r.count} job${r.count > 1 ? "s" : ""}.` : "Nothing ready to claim.";
  });

  const jobsBody = h("tbody");
  const jobsMsg = h("div", { class: "form-msg", role: "status", "aria-live": "polite", id: "jobs-msg" });
  root.append(
    viewHead(name, "A work queue: claim leases jobs to a worker node; ack finishes them, nack hands them back, extend keeps them longer.",
      [h("a", { href: "#/queues" }, "Queues"), " / "],
      h("a", { href: `#/topics/${enc(name)}` }, "Open as a topic →")),
    problem,
    h("div", { class: "stats" }, Object.values(stats)),
    h("div", { class: "split" },
      h("section", { class: "card", "aria-labelledby": "held-h" },
        h("h2", { id: "held-h" }, "Claimed by this console"),
        claim,
        h("div", { class: "table-wrap" },
          h("table", { class: "data", id: "jobs-table", "aria-labelledby": "held-h" },
            h("thead", null, h("tr", null, [["Seq", 1], ["Data"], ["Deliveries", 1], ["Lease"], ["Actions"]].map(([c, n]) => h("th", { scope: "col", class: n ? "num" : null }, c)))),
            jobsBody)),
        jobsMsg),
      h("div", { class: "stack" },
        h("section", { class: "card", "aria-labelledby": "enq-h" }, h("h2", { id: "enq-h" }, "Enqueue"), enqueue),
        h("section", { class: "card", "aria-labelledby": "qinfo-h" }, h("h2", { id: "qinfo-h" }, "Queue settings"), info))),
  );
  emptyJobs();

  function emptyJobs() {
    if (!held.size && !jobsBody.querySelector("td.empty")) jobsBody.append(h("tr", null, h("td", { colspan: 5, class: "empty" }, "No jobs held. Claim some above.")));
  }

  function addJob(job, node) {
    const empty = jobsBody.querySelector("td.empty");
    if (empty) empty.parentElement.remove();
    const lease = h("td", { class: "nowrap" });
    const act = (label, verb, extra = {}) => h("button", {
      type: "button", class: ["small", verb === "ack" ? null : "ghost"], "aria-label": `${label} job ${job.$seq}`,
      dataset: { action: verb },
      onclick: () => leaseOp(job, verb, extra),
    }, label);
    const tr = h("tr", { dataset: { seq: String(job.$seq) } },
      h("td", { class: "num mono" }, String(job.$seq)),
      h("td", null, h("div", { class: "preview" }, preview(job.data))),
      h("td", { class: "num" }, String(job.deliveries)),
      lease,
      h("td", null, h("div", { class: "btn-row" }, act("Ack", "ack"), act("Nack", "nack", { delay_ms: 0 }), act("Extend 30 s", "extend", { lease_ms: 30000 }))));
    const existing = held.get(job.$seq);
    if (existing) existing.tr.replaceWith(tr);
    else jobsBody.append(tr);
    held.set(job.$seq, { job: { ...job, node }, tr, lease });
    tickLeases();
  }

  async function leaseOp(job, verb, extra) {
    const entry = held.get(job.$seq);
    if (!entry) return;
    const body = { node: entry.job.node, seqs: [job.$seq], lease_ids: [entry.job.lease_id], ...extra };
    try {
      const r = await api(`/v0/topics/${enc(name)}/${verb}`, { method: "POST", json: body });
      if (verb === "extend") {
        const due = r.deadlines && r.deadlines[String(job.$seq)];
        if (due) { entry.job.deadline = due; tickLeases(); }
        jobsMsg.className = "form-msg ok";
        jobsMsg.textContent = r.extended ? `Extended job ${job.$seq}.` : `Job ${job.$seq} was not extended: its lease is gone.`;
        return;
      }
      const done = r[verb === "ack" ? "acked" : "nacked"];
      entry.tr.remove();
      held.delete(job.$seq);
      emptyJobs();
      jobsMsg.className = done ? "form-msg ok" : "form-msg bad";
      jobsMsg.textContent = done
        ? `${verb === "ack" ? "Acked" : "Nacked"} job ${job.$seq} (ready ${r.ready}, in flight ${r.in_flight}).`
        : `Job ${job.$seq} was skipped: its lease expired and another worker holds it.`;
      await refresh();
    } catch (err) {
      jobsMsg.className = "form-msg bad";
      jobsMsg.textContent = err.message;
    }
  }

  function tickLeases() {
    const now = Date.now();
    for (const { job, lease } of held.values()) {
      const left = Math.round((job.deadline - now) / 1000);
      lease.textContent = left > 0 ? `${left} s left` : "expired";
      lease.className = left > 0 ? "nowrap" : "nowrap muted";
    }
  }

  async function refresh() {
    try {
      const st = await api(`/v0/topics/${enc(name)}`, { query: { touch: "false" }, signal: ctx.signal });
      if (!st.queue) {
        replace(problem, notice(`${name} is a ${st.type} topic, not a queue.`, "error"));
        return;
      }
      stats.ready.set(fmtNum(st.queue.ready));
      stats.inflight.set(fmtNum(st.queue.in_flight));
      stats.dead.set(fmtNum(st.queue.dead_lettered));
      stats.count.set(fmtNum(st.count));
      stats.head.set(fmtNum(st.head_seq));
      const c = st.config;
      if (info.dataset.cfg !== JSON.stringify(c)) {
        info.dataset.cfg = JSON.stringify(c);
        replace(info, kv([
          ["Lease", `${fmtNum(c.lease_ms)} ms`],
          ["Max deliveries", c.max_deliveries ? fmtNum(c.max_deliveries) : "unlimited"],
          ["Dead-letter topic", c.dead_letter ? h("a", { href: `#/topics/${enc(c.dead_letter)}` }, c.dead_letter) : "none"],
          ["Claim jitter", `${fmtNum(c.claim_jitter_ms)} ms`],
          ["Last write", fmtTime(st.last_write_ts)],
        ]));
      }
      replace(problem);
    } catch (err) {
      if (!isAbort(err)) replace(problem, notice(err.status === 404 ? `Queue ${name} does not exist.` : err.message, "error"));
    }
  }
  ctx.every(REFRESH_MS, refresh);
  ctx.every(1000, async () => tickLeases(), false);
}
