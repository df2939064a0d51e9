// sparkindex progress page: plain JavaScript, no dependencies, no build step.
// Live data comes from /ws (every 2 s); the job list and one-off reads from /api.
// Every value from the store is inserted as text, never as HTML.
"use strict";

const STATES = ["PENDING", "PROCESSING", "COMPLETED", "CLOSED", "FAILED"];
const $ = (id) => document.getElementById(id);
const page = { view: "jobs", jobId: null, current: null, ws: null, retry: 500, live: null, dlClass: "" };

// ---------------------------------------------------------------------------------------------
// small helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k === "style") {
      // through the CSSOM: the page's Content-Security-Policy refuses inline style attributes
      for (const decl of String(v).split(";")) {
        const at = decl.indexOf(":");
        if (at > 0) node.style.setProperty(decl.slice(0, at).trim(), decl.slice(at + 1).trim());
      }
    }
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return node;
}

const nf = new Intl.NumberFormat();
const num = (n) => (n === null || n === undefined ? "–" : nf.format(Math.round(n)));
function duration(s) {
  if (s === null || s === undefined || !isFinite(s)) return "–";
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : String(m)) + ":" + String(sec).padStart(2, "0");
}
function when(t) {
  if (!t) return "–";
  const d = new Date(t * 1000);
  return d.toLocaleString();
}
const pct = (done, total) => (total > 0 ? Math.min(100, (100 * done) / total) : 0);
function badge(status) { return el("span", { class: "badge " + status, text: status }); }

function toast(text, bad) {
  const t = $("toast");
  t.textContent = text;
  t.className = bad ? "bad" : "";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, bad ? 9000 : 5000);
}

// ---------------------------------------------------------------------------------------------
// the token (state changes only) and HTTP

function token() { return sessionStorage.getItem("sparkindex-token"); }
function askToken() {
  const value = window.prompt("The server's token (SPARKINDEX_TOKEN, or the one `sparkindex serve` printed):");
  if (value) sessionStorage.setItem("sparkindex-token", value.trim());
  return value ? value.trim() : null;
}

async function getJSON(path) {
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const res = await fetch(path, { headers });
  if (!res.ok) throw new Error((await res.json().catch(() => ({}))).error || res.statusText);
  return res.json();
}

async function act(path, body, what) {
  let tok = token() || askToken();
  if (!tok) return null;
  for (let attempt = 0; attempt < 2; attempt++) {
    const res = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + tok },
      body: JSON.stringify(body || {}),
    });
    const data = await res.json().catch(() => ({}));
    if (res.status === 401 && attempt === 0) {
      sessionStorage.removeItem("sparkindex-token");
      toast(data.error || "token refused", true);
      tok = askToken();
      if (!tok) return null;
      continue;
    }
    if (!res.ok) { toast(what + ": " + (data.error || res.statusText), true); return null; }
    toast(what + ": " + (data.action ? "started (" + data.action.command + ")" : "done"));
    refreshJobs();
    return data;
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// the WebSocket

function connect() {
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
  page.ws = ws;
  ws.onopen = () => {
    page.retry = 500;
    $("conn").textContent = "live";
    $("conn").className = "conn on";
    if (page.jobId) ws.send(JSON.stringify({ watch: page.jobId }));
  };
  ws.onmessage = (ev) => onMessage(JSON.parse(ev.data));
  ws.onclose = () => {
    $("conn").textContent = "offline";
    $("conn").className = "conn off";
    setTimeout(connect, page.retry);
    page.retry = Math.min(page.retry * 2, 5000);
  };
}

function onMessage(m) {
  if (m.type === "error") { $("conn").textContent = "store unreachable"; $("conn").className = "conn off"; return; }
  $("conn").textContent = "live";
  $("conn").className = "conn on";
  page.live = m;
  renderSync(m.sync || []);
  renderVerify(m.verify);
  renderHealth(m);
  if (m.watch && m.watch.job && m.watch.job.jobId === page.jobId) renderJob(m.watch);
  if (page.view === "jobs") refreshJobs();
}

// ---------------------------------------------------------------------------------------------
// the job list

async function refreshJobs() {
  if (page.view !== "jobs") return;
  try {
    const [{ jobs }, { actions }] = await Promise.all([getJSON("/api/jobs?limit=50"), getJSON("/api/actions")]);
    renderJobs(jobs);
    renderActions(actions);
  } catch (e) {
    toast("could not read the jobs: " + e.message, true);
  }
}

function renderJobs(jobs) {
  const live = new Map(((page.live && page.live.jobs) || []).map((j) => [j.jobId, j]));
  const body = $("jobs").querySelector("tbody");
  body.replaceChildren(...jobs.map((j) => {
    const l = live.get(j.id);
    const processed = l ? l.stats.jobStats.processedRecords : j.processed;
    const total = l ? l.stats.jobStats.totalRecords : j.total;
    const p = pct(processed, total);
    return el("tr", { class: "link", "data-job": j.id, onclick: () => { location.hash = "#/jobs/" + j.id; } },
      el("td", {}, el("code", { text: j.id.slice(0, 8) })),
      el("td", { text: j.aliases.join(", ") }),
      el("td", {}, badge(j.status)),
      el("td", {}, el("span", { class: "mini" }, el("div", { style: "width:" + p.toFixed(1) + "%" })), " " + p.toFixed(0) + "%"),
      el("td", { class: "num", text: num(processed) + " / " + num(total) }),
      el("td", { class: "num", text: num(j.failed) }),
      el("td", { text: when(j.started_at || j.created_at) }),
      el("td", { text: duration(j.seconds) }));
  }));
  $("jobs-empty").hidden = jobs.length > 0;
  $("jobs").dataset.loaded = "1";
}

function renderActions(actions) {
  const body = $("actions").querySelector("tbody");
  body.replaceChildren(...actions.slice(0, 20).map((a) => {
    let result = a.outcome || "running…";
    if (a.result && typeof a.result === "object") {
      const r = a.result;
      if ("missing" in r) result += ` · missing ${num(r.missing)}, extra ${num(r.extra)}, stale ${num(r.stale)}, duplicates ${num(r.duplicates)}`;
      else if ("indexed" in r) result += ` · ${r.status}: ${num(r.indexed)} indexed, ${num(r.failed)} failed`;
    } else if (a.state === "finished" && a.stderr_tail) {
      result += " · " + a.stderr_tail.trim().split("\n").slice(-1)[0];
    }
    return el("tr", {},
      el("td", {}, el("code", { text: a.command })),
      el("td", { text: a.state }),
      el("td", { class: "wrap", text: result }),
      el("td", { text: when(a.started_at) }));
  }));
  $("actions-empty").hidden = actions.length > 0;
}

function renderSync(consumers) {
  const body = $("sync").querySelector("tbody");
  body.replaceChildren(...consumers.map((c) => el("tr", {},
    el("td", { text: c.group }),
    el("td", { text: c.alias || "–" }),
    el("td", {}, el("code", { text: c.position || "–" })),
    el("td", { class: "num", text: c.lag_s === null ? "–" : duration(c.lag_s) }),
    el("td", { text: when(c.updated_at) }))));
  $("sync-empty").hidden = consumers.length > 0;
}

function renderVerify(v) {
  // each alias's last run is in the "Last verified" table (health.js); here only a verify this
  // server started that could not run at all (exit 2 or 3), which recorded no result to show
  if (!v) return;
  const a = v.lastAction;
  const rows = [];
  if (a && a.exit_code !== null && a.exit_code > 1) {
    const why = a.stderr_tail ? a.stderr_tail.trim().split("\n").slice(-1)[0] : "";
    rows.push(el("div", { class: "error-box" }, `${a.kind} started here ${when(a.started_at)}: ${a.outcome}${why ? " · " + why : ""}`));
  }
  $("verify-last").replaceChildren(...rows);
}

// ---------------------------------------------------------------------------------------------
// one job's live view

function renderJob(w) {
  const j = w.job;
  page.current = j;
  $("job-id").textContent = j.jobId;
  const status = $("job-status");
  status.textContent = j.status;
  status.className = "badge " + j.status;
  $("stop").disabled = !["READY", "RUNNING"].includes(j.status);
  $("redrive").disabled = !j.deadLetters;
  const idx = Object.entries(j.indexes || {}).map(([a, i]) => a + " → " + i).join(", ");
  $("job-meta").textContent = `${j.aliases.join(", ")}${idx ? " (" + idx + ")" : ""} · created ${when(j.createdAt)}` +
    (j.startedAt ? ` · started ${when(j.startedAt)}` : "") + (j.completedAt ? ` · ended ${when(j.completedAt)}` : "") +
    (j.elapsedSeconds !== null ? ` · ${duration(j.elapsedSeconds)}` : "");
  $("job-error").hidden = !j.error;
  $("job-error").textContent = j.error || "";
  renderEntities(j);
  renderGrid(w.partitions, w.partitionsTotal);
  drawChart(w.history);
  renderDeadLetters(w.deadLetters, j.deadLetters);
}

function renderEntities(j) {
  const box = $("entities");
  const entries = Object.entries(j.stats.entityStats);
  box.replaceChildren(...entries.map(([name, s]) => {
    const done = pct(s.processedRecords, s.totalRecords);
    const failed = pct(s.failedRecords, s.totalRecords);
    const parts = STATES.filter((k) => s.partitions[k]).map((k) => k.toLowerCase() + " " + s.partitions[k]).join(", ");
    return el("div", { class: "entity", "data-entity": name, "data-processed": s.processedRecords, "data-total": s.totalRecords },
      el("div", { class: "head" }, el("span", { class: "name", text: name }),
        el("span", { class: "muted", text: `${num(s.processedRecords)} / ${num(s.totalRecords)} (${done.toFixed(1)} %)` })),
      el("div", { class: "bar", role: "progressbar", "aria-valuenow": done.toFixed(1), "aria-valuemin": "0", "aria-valuemax": "100" },
        el("div", { class: "fill", style: "width:" + done.toFixed(2) + "%" }),
        el("div", { class: "fill failed", style: "left:" + (done - failed).toFixed(2) + "%;width:" + failed.toFixed(2) + "%" })),
      el("div", { class: "figures" },
        el("span", { class: "rate", text: (s.docsPerSecond === null ? "–" : num(s.docsPerSecond)) + " docs/s" }),
        el("span", { class: "eta", text: "ETA " + duration(s.etaSeconds) }),
        el("span", { text: num(s.successRecords) + " indexed" }),
        el("span", { text: num(s.failedRecords) + " failed" }),
        el("span", { text: "partitions: " + (parts || "none yet") })));
  }));
  if (!entries.length) box.replaceChildren(el("p", { class: "empty", text: "Planning partitions…" }));
}

function renderGrid(parts, total) {
  const grid = $("grid");
  grid.replaceChildren(...parts.map((p) => {
    const lines = [`${p.entity} #${p.index}: ${p.status}`, `${num(p.processed)} of ~${num(p.estimated)} rows` + (p.failed ? `, ${num(p.failed)} failed` : "")];
    if (p.owner) lines.push("owner: " + p.owner);
    lines.push(`claims ${p.claims}, retries ${p.retries}` + (p.closed_count ? `, closed ${p.closed_count}×` : ""));
    if (p.cursor) lines.push("cursor: " + JSON.stringify(p.cursor));
    if (p.last_error) lines.push("last error: " + p.last_error);
    return el("div", { class: "cell " + p.status + (p.last_error ? " has-error" : ""), title: lines.join("\n"), "data-partition": p.id, "data-state": p.status });
  }));
  $("grid-count").textContent = total > parts.length ? `(${parts.length} of ${total} shown)` : `(${total})`;
  const counts = {};
  for (const p of parts) counts[p.status] = (counts[p.status] || 0) + 1;
  const failing = parts.filter((p) => p.last_error);
  $("partition-errors").replaceChildren(...failing.slice(0, 20).map((p) =>
    el("li", { text: `${p.entity} #${p.index} (${p.status.toLowerCase()}, retries ${p.retries}): ${p.last_error}` })),
  ...(failing.length > 20 ? [el("li", { text: `… and ${failing.length - 20} more (hover the grid)` })] : []));
  $("legend").replaceChildren(...STATES.map((s) =>
    el("span", { style: "--sw: var(--" + s.toLowerCase() + ")", text: s.toLowerCase() + " " + (counts[s] || 0) })));
}

function drawChart(history) {
  const canvas = $("chart");
  const points = (history && history.points) || [];
  $("chart-source").textContent = history && history.source !== "observed" ? "(" + history.source + ")" : "";
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 640, h = canvas.clientHeight || 200;
  canvas.width = w * ratio; canvas.height = h * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, w, h);
  const pad = { l: 56, r: 12, t: 12, b: 24 };
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#66707c";
  if (points.length < 2) { g.fillText("waiting for data…", pad.l, h / 2); return; }
  const t0 = points[0][0], t1 = points[points.length - 1][0];
  const max = Math.max(1, ...points.map((p) => p[1])) * 1.1;
  const x = (t) => pad.l + ((t - t0) / Math.max(1e-9, t1 - t0)) * (w - pad.l - pad.r);
  const y = (v) => h - pad.b - (v / max) * (h - pad.t - pad.b);
  g.strokeStyle = "#e1e5ea";
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    g.beginPath(); g.moveTo(pad.l, y(v)); g.lineTo(w - pad.r, y(v)); g.stroke();
    g.fillText(num(v), 4, y(v) + 4);
  }
  g.fillText(duration(t1 - t0), w - pad.r - 40, h - 6);
  g.fillText("0:00", pad.l, h - 6);
  g.beginPath();
  points.forEach(([t, v], i) => (i ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v))));
  g.strokeStyle = "#2f6fde"; g.lineWidth = 2; g.stroke();
  g.lineTo(x(t1), y(0)); g.lineTo(x(t0), y(0)); g.closePath();
  g.fillStyle = "rgba(47,111,222,.12)"; g.fill();
  canvas.dataset.points = String(points.length);
}

async function renderDeadLetters(letters, total) {
  const select = $("dl-class");
  if (page.dlClass) {
    try {
      const q = new URLSearchParams({ job_id: page.jobId, error_class: page.dlClass, limit: "200" });
      letters = (await getJSON("/api/dead-letters?" + q)).dead_letters;
    } catch (e) { toast("dead letters: " + e.message, true); }
  } else {
    const classes = [...new Set(letters.map((d) => d.error_class))].sort();
    const have = [...select.options].map((o) => o.value);
    for (const c of classes) if (!have.includes(c)) select.append(el("option", { value: c, text: c }));
  }
  $("dl-count").textContent = total ? "(" + num(total) + ")" : "";
  $("dead-letters").querySelector("tbody").replaceChildren(...letters.map((d) => el("tr", {},
    el("td", { text: d.alias }),
    el("td", {}, el("code", { text: d.doc_id })),
    el("td", { text: d.error_class }),
    el("td", { class: "wrap", text: d.error_message }),
    el("td", { class: "num", text: num(d.attempts) }),
    el("td", { text: when(d.last_seen) }))));
  $("dl-empty").hidden = letters.length > 0;
}

// ---------------------------------------------------------------------------------------------
// routing and buttons

async function loadJob() {
  try { renderJob(await getJSON("/api/jobs/" + page.jobId + "/live")); } catch (e) { toast(e.message, true); }
}

async function route() {
  const m = location.hash.match(/^#\/jobs\/([\w-]+)$/);
  page.jobId = m ? m[1] : null;
  page.view = m ? "job" : "jobs";
  $("jobs-view").hidden = !!m;
  $("job-view").hidden = !m;
  if (page.ws && page.ws.readyState === WebSocket.OPEN) page.ws.send(JSON.stringify({ watch: page.jobId }));
  if (m) {
    page.dlClass = "";
    page.current = null;
    $("dl-class").replaceChildren(el("option", { value: "", text: "all" }));
    await loadJob();
  } else {
    refreshJobs();
  }
}

async function init() {
  try {
    const p = await getJSON("/api/pipeline");
    $("pipeline").textContent = p.aliases.join(", ") + " · " + p.source + " → " + p.target;
  } catch (e) { toast("could not read the pipeline: " + e.message, true); }
  $("token-btn").onclick = () => { sessionStorage.removeItem("sparkindex-token"); askToken(); };
  $("start-reindex").onclick = () => act("/api/reindex", { new: $("reindex-new").checked }, "reindex");
  $("verify-all").onclick = () => act("/api/verify", {}, "verify");
  $("repair-all").onclick = () => act("/api/verify", { repair: true }, "verify & repair");
  $("stop").onclick = () => {
    if (window.confirm("Stop this job? Its tasks hand their partitions back; a reindex resumes it.")) {
      act("/api/jobs/" + page.jobId + "/stop", {}, "stop");
    }
  };
  $("redrive").onclick = () => {
    const aliases = page.current ? page.current.aliases : [];
    const body = page.dlClass ? { error_class: page.dlClass } : {};
    if (aliases.length === 1) body.alias = aliases[0];
    act("/api/dead-letters/redrive", body, "re-drive");
  };
  $("verify").onclick = () => act("/api/verify", page.current ? { index: page.current.aliases } : {}, "verify");
  $("dl-class").onchange = (ev) => { page.dlClass = ev.target.value; loadJob(); };
  window.addEventListener("hashchange", route);
  await route();
  connect();
}

document.addEventListener("DOMContentLoaded", init);
