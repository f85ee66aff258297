// The BlockX dashboard's page script: a hash-routed single page (fleet, tasks, one
// task) over the dashboard's own /api. Data from workers goes into the DOM as text
// only (textContent), never as markup. Served from the package under a CSP that
// allows this file and nothing inline.
"use strict";

const state = { me: null, streams: [], route: "" };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid instanceof Node ? kid : String(kid));
  return e;
}

function svgEl(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function showError(msg) {
  const box = document.getElementById("error");
  box.textContent = msg || "";
  box.hidden = !msg;
}

function closeStreams() {
  for (const s of state.streams) s.close();
  state.streams = [];
}

function openStream(url, onData) {
  const es = new EventSource(url);
  es.onmessage = (ev) => { try { onData(JSON.parse(ev.data)); } catch (e) { showError("bad event: " + e); } };
  es.addEventListener("logout", () => { es.close(); state.me = null; route(); });
  state.streams.push(es);
  return es;
}

async function api(path, opts) {
  const init = Object.assign({ credentials: "same-origin", headers: {} }, opts || {});
  if (init.body !== undefined) {
    init.method = init.method || "POST";
    init.headers["Content-Type"] = "application/json";
    if (state.me && state.me.csrf) init.headers["X-CSRF-Token"] = state.me.csrf;
    init.body = JSON.stringify(init.body);
  }
  const r = await fetch(path, init);
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (!r.ok) {
    const err = new Error((data && data.error) || ("HTTP " + r.status));
    err.status = r.status;
    throw err;
  }
  return data;
}

function fmt(n, digits) {
  if (n === null || n === undefined) return "-";
  return typeof n === "number" && digits !== undefined ? n.toFixed(digits) : String(n);
}

function fmtTime(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "-";
}

function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) u.set(k, v);
  return u.toString();
}

function routeParams() {
  const h = location.hash.replace(/^#/, "") || "/fleet";
  const [path, query] = h.split("?");
  return { path, params: new URLSearchParams(query || "") };
}

// ---- login ------------------------------------------------------------------------

function loginView(main) {
  const input = el("input", { id: "login-token", type: "password", autocomplete: "off",
                              placeholder: "bearer token", required: true });
  const form = el("form", { class: "login", id: "login-form" },
    el("h2", { text: "Log in" }),
    el("p", { class: "muted", text: "A token the workers accept (their WORKER_AUTH_TOKENS_FILE). " +
                                    "You see what that identity may see: its own tasks, or all with admin." }),
    input, el("button", { id: "login-submit", type: "submit", text: "Log in" }));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      state.me = await api("/api/login", { body: { token: input.value } });
      input.value = "";
      showError("");
      await loadMe();
      if (!location.hash || location.hash === "#/login") location.hash = "#/fleet"; else route();
    } catch (e) { showError(e.message); }
  });
  main.append(form);
  input.focus();
}

async function loadMe() {
  const me = await api("/api/me");
  state.me = me.logged_in === false ? null : me;
  document.getElementById("nav").hidden = !state.me;
  document.getElementById("logout").hidden = !state.me;
  document.getElementById("who").textContent = state.me ? state.me.identity : "";
}

// ---- fleet ------------------------------------------------------------------------

function sparkline(values, cls) {
  const w = 80, h = 18, svg = svgEl("svg", { class: "spark " + cls, width: w, height: h, viewBox: `0 0 ${w} ${h}` });
  if (values && values.length > 1) {
    const max = Math.max(...values, 0.001), step = w / (values.length - 1);
    const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 1 - (v / max) * (h - 2)).toFixed(1)}`);
    svg.append(svgEl("polyline", { points: pts.join(" ") }));
  }
  svg.dataset.points = values ? values.length : 0;
  return svg;
}

function phases(p) {
  if (!p) return "-";
  return ["PREPARING", "BUILDER", "CALLS", "PLUGIN"].map((k) => `${k[0]}${k.slice(1).toLowerCase()} ${p[k] || 0}`).join(" · ");
}

function card(k, v, id) {
  return el("div", { class: "card" }, el("div", { class: "v", id, text: v }), el("div", { class: "k", text: k }));
}

function fleetView(main) {
  main.append(el("h2", { text: "Fleet" }), el("div", { class: "cards", id: "totals" }),
              el("p", { class: "note", id: "fleet-note", hidden: true }),
              el("table", { id: "fleet-table" },
                 el("thead", {}, el("tr", {}, ...["Worker", "State", "Slots used/total", "Running by phase",
                   "Executors ok/total", "Restarts", "Tasks/s", "Calls/s", "TLS", "Auth", "Version"]
                   .map((t) => el("th", { text: t })))),
                 el("tbody", {})),
              el("p", { class: "muted", id: "fleet-updated" }));
  const render = (snap) => {
    const t = snap.totals, box = document.getElementById("totals");
    if (!box) return;
    box.replaceChildren(card("workers ready / listed", `${t.ready} / ${t.workers}`, "total-workers"),
                        card("slots used / total", `${t.slots_used} / ${t.slots_total}`, "total-slots"),
                        card("executors ok / total", `${t.executors_healthy} / ${t.executors_total}`, "total-executors"),
                        card("tasks/s", fmt(t.tasks_per_s, 1), "total-tps"),
                        card("calls/s", fmt(t.calls_per_s, 1), "total-cps"));
    const note = [snap.status_note, snap.etcd].filter(Boolean).join(" · ");
    const noteEl = document.getElementById("fleet-note");
    noteEl.textContent = note; noteEl.hidden = !note;
    const body = document.querySelector("#fleet-table tbody");
    body.replaceChildren(...snap.workers.map((w) => {
      const link = el("a", { href: "#/tasks?" + qs({ worker: w.addr }), text: w.addr });
      const tr = el("tr", { "data-addr": w.addr, "data-state": w.state },
        el("td", {}, link),
        el("td", { class: "state-" + w.state, "data-col": "state", text: w.state + (w.error ? " (" + w.error + ")" : "") }),
        el("td", { class: "num", "data-col": "slots", text: `${fmt(w.slots.used)}/${fmt(w.slots.total)}` }),
        el("td", { "data-col": "phases", text: phases(w.tasks_by_phase) }),
        el("td", { class: "num", "data-col": "executors", text: `${fmt(w.executors_healthy)}/${fmt(w.executors_total)}` }),
        el("td", { class: "num", "data-col": "restarts", text: fmt(w.executor_restarts) }),
        el("td", { class: "num", "data-col": "tps" }, sparkline(w.spark_tasks, "spark-tasks"), " " + fmt(w.tasks_per_s, 1)),
        el("td", { class: "num", "data-col": "cps" }, sparkline(w.spark_calls, "spark-calls"), " " + fmt(w.calls_per_s, 1)),
        el("td", { "data-col": "tls", text: w.tls || "-" }),
        el("td", { "data-col": "auth", text: w.auth || "-" }),
        el("td", { "data-col": "version", text: w.version || "-" }));
      return tr;
    }));
    const up = document.getElementById("fleet-updated");
    up.textContent = "updated " + new Date().toLocaleTimeString();
    up.dataset.updates = String((Number(up.dataset.updates) || 0) + 1);
    document.body.dataset.fleetPainted = "1";
  };
  openStream("/api/fleet/events", render);
}

// ---- tasks ------------------------------------------------------------------------

async function tasksView(main, params) {
  const me = state.me;
  const sel = (id, label, options, value) => el("label", {}, label,
    el("select", { id, name: id }, el("option", { value: "", text: "any" }),
      ...options.map((o) => el("option", { value: o, text: o, selected: o === value }))));
  let workers = [];
  try { workers = (await api("/api/fleet")).workers.filter((w) => w.state !== "gone").map((w) => w.addr); }
  catch (e) { showError(e.message); }
  const form = el("form", { class: "filters", id: "task-filters" },
    el("label", {}, "worker", el("select", { id: "f-worker", name: "worker" }, el("option", { value: "", text: "all" }),
      ...workers.map((a) => el("option", { value: a, text: a, selected: a === params.get("worker") })))),
    sel("f-state", "state", me.states, params.get("state") || ""),
    sel("f-phase", "phase", me.phases, params.get("phase") || ""),
    el("label", {}, "owner", el("input", { id: "f-owner", name: "owner", value: params.get("owner") || "", size: 12 })),
    el("label", {}, "instance", el("input", { id: "f-instance", name: "instance", value: params.get("instance") || "", size: 12 })),
    el("button", { type: "submit", id: "f-apply", text: "Filter" }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = "#/tasks?" + qs({ worker: form.worker.value, state: form["f-state"].value,
      phase: form["f-phase"].value, owner: form.owner.value, instance: form.instance.value });
  });
  const table = el("table", { id: "tasks-table" },
    el("thead", {}, el("tr", {}, ...["Task", "Worker", "State", "Phase", "Calls done/total", "Owner", "Instance",
      "Created", "Failure"].map((t) => el("th", { text: t })))), el("tbody", {}));
  const pager = el("div", { class: "pager" });
  main.append(el("h2", { text: "Tasks" }), form, table, pager);
  const load = async (page) => {
    const q = { worker: params.get("worker") || "", state: params.get("state") || "", phase: params.get("phase") || "",
                owner: params.get("owner") || "", instance: params.get("instance") || "", page: page || "" };
    let data;
    try { data = await api("/api/tasks?" + qs(q)); } catch (e) { showError(e.message); return; }
    const errs = Object.entries(data.errors || {}).map(([a, m]) => a + ": " + m);
    showError(errs.join("; "));
    table.tBodies[0].replaceChildren(...data.tasks.map((t) => el("tr", { "data-task": t.task_id, "data-state": t.state },
      el("td", {}, el("a", { href: "#/task?" + qs({ worker: t.worker, id: t.task_id }), text: t.task_id })),
      el("td", { text: t.worker }), el("td", { class: "state-" + t.state, text: t.state }), el("td", { text: t.phase }),
      el("td", { class: "num", text: `${t.calls_done}/${t.calls_total}` }), el("td", { text: t.owner || "-" }),
      el("td", { text: t.instance_id || "-" }), el("td", { text: fmtTime(t.created_at_ms) }),
      el("td", { text: t.failure_code || "" }))));
    pager.replaceChildren(el("span", { class: "muted", id: "tasks-count", text: `${data.tasks.length} shown` }),
      data.next_page ? el("button", { type: "button", id: "tasks-next", text: "Next page", onclick: () => load(data.next_page) }) : null);
    document.body.dataset.tasksLoaded = String((Number(document.body.dataset.tasksLoaded) || 0) + 1);
  };
  await load("");
}

// ---- one task -----------------------------------------------------------------------

const COLORS = { phase: "#805ad5", call: "#3182ce", subcall: "#38a169", io: "#dd6b20", task: "#cbd5e0" };

function drawTimeline(box, tl) {
  const LANE = 18, labels = el("ol", { id: "lanes" });
  const canvas = el("canvas", { id: "timeline-canvas" });
  box.replaceChildren(labels, canvas);
  for (const lane of tl.lanes) labels.append(el("li", { "data-tid": lane.tid, "data-count": lane.count,
                                                       text: `${lane.name} (${lane.count})` }));
  const width = Math.max(200, canvas.parentElement.clientWidth - labels.clientWidth - 2);
  const height = Math.max(LANE, tl.lanes.length * LANE);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = width * dpr; canvas.height = height * dpr;
  canvas.style.width = width + "px"; canvas.style.height = height + "px";
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  const scale = width / Math.max(1, tl.end_us);
  let drawn = 0;
  tl.lanes.forEach((lane, i) => {
    const y = i * LANE;
    g.fillStyle = i % 2 ? "#f7fafc" : "#ffffff";
    g.fillRect(0, y, width, LANE);
    for (const pass of [true, false]) {
      for (const [ts, dur, cat] of lane.spans) {
        if ((cat === "task") !== pass) continue;
        g.fillStyle = COLORS[cat] || "#718096";
        const inset = cat === "task" ? 1 : (cat === "io" ? 6 : 3);
        g.fillRect(ts * scale, y + inset, Math.max(1, dur * scale), LANE - 2 * inset);
        drawn++;
      }
    }
  });
  const laneIndex = new Map(tl.lanes.map((l, i) => [l.tid, i]));
  g.fillStyle = "#c53030";
  for (const [ts, tid] of tl.instants) {
    const i = laneIndex.has(tid) ? laneIndex.get(tid) : 0;
    g.fillRect(ts * scale, i * LANE, 1, LANE);
  }
  canvas.dataset.spans = String(drawn);
}

function fact(k, id, v) { return [el("dt", { text: k }), el("dd", { id, text: v === undefined ? "-" : v })]; }

async function taskView(main, params) {
  const worker = params.get("worker") || "", id = params.get("id") || "";
  const q = qs({ worker, id });
  const facts = el("dl", { class: "facts" },
    ...fact("task", "task-id", id), ...fact("worker", "task-worker", worker), ...fact("state", "task-state", "..."),
    ...fact("phase", "task-phase", "-"),
    ...fact("progress", "task-progress-text", "-"), ...fact("retries", "task-retries", "-"),
    ...fact("cache hits", "task-cache-hits", "-"), ...fact("duration", "task-duration", "-"),
    ...fact("failure", "task-failure", "-"));
  const bar = el("div", { class: "bar", id: "task-progress" }, el("span", {}));
  const cancel = el("button", { type: "button", class: "danger", id: "cancel-btn", text: "Cancel task", hidden: true });
  const tb = el("pre", { id: "task-traceback", hidden: true });
  const outputs = el("div", { id: "outputs" });
  const timeline = el("div", { class: "timeline", id: "timeline" }, el("p", { class: "muted", text: "timeline: when the task ends (or press Refresh)" }));
  const download = el("a", { id: "trace-download", href: "/api/task/trace.json?" + q, download: `trace-${id}.json`,
                             text: "Download the Perfetto trace (open it in Perfetto or chrome://tracing)" });
  const refresh = el("button", { type: "button", id: "timeline-refresh", text: "Refresh timeline" });
  const tlInfo = el("p", { class: "muted", id: "timeline-info" });
  main.append(el("h2", { text: "Task " + id }), facts, el("p", {}, bar, " ", cancel), tb,
    el("h3", { text: "Timeline" }), el("p", { class: "legend" },
      ...Object.keys(COLORS).map((k) => el("span", {}, el("i", { class: "c-" + (k === "subcall" ? "other" : k) }), k))),
    timeline, tlInfo, el("p", {}, refresh, " ", download),
    el("h3", { text: "Outputs" }), outputs);

  const setProgress = (p) => {
    if (!p) return;
    sawProgress = true;
    const total = p.calls_total, done = p.calls_done;
    document.getElementById("task-progress-text").textContent =
      `${done}/${total || "?"} calls done` + (p.calls_failed ? `, ${p.calls_failed} failed` : "");
    document.getElementById("task-progress").dataset.done = String(done);
    bar.firstChild.style.width = total ? Math.round(100 * done / total) + "%" : "0";
    document.getElementById("task-retries").textContent = String(p.calls_retried);
  };
  // The phase as the updates show it: GetTaskResult and WatchTasks carry no phase
  // field, but progress comes only from the Calls phase on (the tasks list has the
  // worker's own phase column).
  let sawProgress = false;
  const setState = (s) => {
    const e = document.getElementById("task-state");
    e.textContent = s; e.className = "state-" + s;
    document.body.dataset.taskState = s;
    document.getElementById("task-phase").textContent =
      s === "SUCCEEDED" || s === "FAILED" ? "TERMINAL" : s === "ALLOCATED" ? "RESERVED"
        : sawProgress ? "CALLS (or PLUGIN once every call is done)" : "PREPARING or BUILDER (no call progress yet)";
  };
  const loadTimeline = async () => {
    try {
      const tl = await api("/api/task/timeline?" + q);
      drawTimeline(timeline, tl);
      tlInfo.textContent = `${tl.spans_drawn} of ${tl.spans_total} spans drawn` +
        (tl.sampled ? `; sampled by the worker: about 1 call in ${tl.sample_every}` : "") +
        (tl.complete ? "" : "; still running");
      document.body.dataset.timeline = tl.complete ? "complete" : "partial";
    } catch (e) { tlInfo.textContent = "timeline: " + e.message; }
  };
  refresh.addEventListener("click", loadTimeline);
  const loadOutputs = async (offset) => {
    let r;
    try { r = await api("/api/task/outputs?" + qs({ worker, id, offset })); } catch (e) { showError(e.message); return; }
    const n = (r.outputs || []).length;
    outputs.replaceChildren(
      el("p", { class: "muted", id: "outputs-range",
                text: n ? `outputs ${r.outputs_offset + 1} to ${r.outputs_offset + n} of ${r.outputs_total}` : "no outputs" }),
      el("pre", { id: "outputs-list", text: (r.outputs || []).join("\n") }),
      el("div", { class: "pager" },
        r.outputs_offset > 0 ? el("button", { type: "button", id: "outputs-prev", text: "Previous",
          onclick: () => loadOutputs(Math.max(0, r.outputs_offset - 50)) }) : null,
        r.outputs_offset + n < r.outputs_total ? el("button", { type: "button", id: "outputs-next", text: "Next",
          onclick: () => loadOutputs(r.outputs_offset + n) }) : null));
  };
  const showResult = async () => {
    let r;
    try { r = await api("/api/task?" + q); } catch (e) { showError(e.message); return; }
    setState(r.state);
    if (!r.terminal) return;
    cancel.hidden = true;
    const s = r.statistic || {};
    document.getElementById("task-retries").textContent = String(s.call_retries || 0);
    document.getElementById("task-cache-hits").textContent = String(s.cache_hits || 0);
    document.getElementById("task-duration").textContent =
      s.finished_at_ms ? `${s.finished_at_ms - s.accepted_at_ms} ms (builder ${s.builder_ms}, calls ${s.calls_ms}, plugin ${s.plugin_ms})` : "-";
    document.getElementById("task-failure").textContent =
      r.failure_code ? `${r.failure_code}: ${r.failure_message}` + (r.retryable ? " (retryable)" : "") : "none";
    tb.textContent = r.failure_traceback || ""; tb.hidden = !r.failure_traceback;
    await loadOutputs(0);
    await loadTimeline();
  };
  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    try {
      await api("/api/task/cancel", { body: { worker, task_id: id, reason: "cancelled from the dashboard" } });
    } catch (e) { showError(e.message); cancel.disabled = false; }
  });
  await showResult();
  if (document.body.dataset.taskState !== "SUCCEEDED" && document.body.dataset.taskState !== "FAILED") {
    cancel.hidden = false;
    const es = openStream("/api/task/events?" + q, async (f) => {
      if (f.error) { showError(f.error); es.close(); return; }
      setProgress(f.progress);
      setState(f.state);
      if (f.terminal) { es.close(); await showResult(); }
    });
  }
}

// ---- routing ------------------------------------------------------------------------

async function route() {
  closeStreams();
  showError("");
  const main = document.getElementById("main");
  main.replaceChildren();
  if (!state.me) { loginView(main); return; }
  const { path, params } = routeParams();
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.getAttribute("href") === "#" + path);
  document.body.dataset.view = path;
  if (path === "/tasks") await tasksView(main, params);
  else if (path === "/task") await taskView(main, params);
  else fleetView(main);
}

document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("logout").addEventListener("click", async () => {
    try { await api("/api/logout", { body: {} }); } catch (e) { /* the session is gone either way */ }
    state.me = null; await loadMe(); route();
  });
  window.addEventListener("hashchange", route);
  try { await loadMe(); } catch (e) { showError(e.message); }
  route();
});
