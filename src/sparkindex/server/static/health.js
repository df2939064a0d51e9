// sparkindex page, health sections: the pipeline's preflight checks (/api/check, on load and on
// demand: the server keeps a result a minute), each alias's last verify with its drift, and the
// syncs' gaps with how each ended (both pushed by /ws every tick, as /api/verify/aliases and
// /api/sync/gaps return them). Uses app.js's helpers; every value is inserted as text.
"use strict";

const SEVERITY = { FAIL: 0, WARN: 1, OK: 2 };
const health = { showOk: false, checks: null };
const DRIFT = ["missing", "extra", "stale", "duplicates"];

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 90) return Math.round(seconds) + " s ago";
  if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
  if (seconds < 172800) return Math.round(seconds / 3600) + " h ago";
  return Math.round(seconds / 86400) + " days ago";
}

// ---------------------------------------------------------------------------------------------
// preflight checks

async function loadChecks(refresh) {
  const button = $("check-again");
  button.disabled = true;
  $("checks-summary").textContent = refresh ? "checking again…" : "checking…";
  try {
    renderChecks(await getJSON("/api/check" + (refresh ? "?refresh=1" : "")));
  } catch (e) {
    $("checks-summary").textContent = "the checks could not run: " + e.message;
    $("checks").dataset.status = "";
  } finally {
    button.disabled = false;
  }
}

function renderChecks(r) {
  // failures first, then warnings, each in the order check runs them; the passing lines are
  // folded away behind a button (a dozen green lines would push everything else down)
  health.checks = r;
  const rows = r.checks.map((c, i) => [c, i]).sort((a, b) => SEVERITY[a[0].status] - SEVERITY[b[0].status] || a[1] - b[1]);
  $("checks").querySelector("tbody").replaceChildren(...rows.map(([c]) => el("tr", {
    "data-status": c.status, "data-name": c.name, hidden: c.status === "OK" && !health.showOk ? "" : null },
    el("td", {}, badge(c.status)),
    el("td", {}, el("code", { text: c.name })),
    el("td", { class: "wrap", text: c.detail }),
    el("td", { class: "wrap", text: c.status === "OK" ? "" : c.fix || "" }))));
  const n = r.counts;
  const age = r.cached ? `, kept ${ago(r.age_s)}` : "";
  $("checks-summary").textContent = `${r.status}: ${n.FAIL} FAIL, ${n.WARN} WARN, ${n.OK} OK · checked ${when(r.checked_at)} (took ${r.seconds.toFixed(1)} s${age})`;
  $("checks").dataset.status = r.status;
  const toggle = $("checks-ok");
  toggle.hidden = n.OK === 0;
  toggle.textContent = (health.showOk ? "Hide" : "Show") + ` the ${n.OK} passing`;
}

// ---------------------------------------------------------------------------------------------
// last verified, per alias

function driftText(d) {
  const parts = DRIFT.map((k) => `${k} ${num(d[k])}`);
  if (d.unbuildable) parts.push(`unbuildable ${num(d.unbuildable)}`);
  return parts.join(", ");
}

function samplesText(samples) {
  return [...DRIFT, "unbuildable"].filter((k) => samples[k] && samples[k].length)
    .map((k) => `${k}: ${samples[k].join(", ")}`).join(" · ");
}

function renderVerified(rows) {
  $("verified").querySelector("tbody").replaceChildren(...rows.map((a) => {
    if (!a.verified) {
      return el("tr", { "data-alias": a.alias, "data-status": "never" },
        el("td", { text: a.alias }), el("td", {}, badge("never")),
        el("td", { class: "wrap", colspan: "5", text: "never verified: run sparkindex verify, or the Verify button above" }));
    }
    const result = a.status === "failed" ? "failed" : a.status;
    const what = el("td", {}, badge(result));
    if (a.error) what.append(el("div", { class: "small error-text", text: a.error }));
    return el("tr", { "data-alias": a.alias, "data-status": a.status, class: a.drift_total ? "drifted" : "" },
      el("td", { text: a.alias }),
      what,
      el("td", { text: `${when(a.finished_at)} (${ago(a.age_s)})` }),
      el("td", { text: a.status === "failed" ? "–" : driftText(a.drift) }),
      el("td", { class: "wrap", text: samplesText(a.samples) || "–" }),
      el("td", { class: "num", text: `${num(a.checked)} rows, index holds ${num(a.index_docs)}` }),
      el("td", { text: (a.repair ? "repair" : "verify") + " · " + a.trigger }));
  }));
}

// ---------------------------------------------------------------------------------------------
// gaps in the syncs' change logs

function outcomeText(g) {
  if (g.outcome === "reconciled") {
    const found = g.found ? Object.entries(g.found).map(([k, n]) => `${k} ${num(n)}`).join(", ") : "nothing recorded";
    const from = g.position === null ? "the alias was swapped meanwhile" : `streaming from position ${g.position}`;
    return `reconciled ${when(g.ended_at)}: ${found} · ${from}` + (g.detail ? " · " + g.detail : "");
  }
  if (g.outcome === "open") return "open: being reconciled, or its sync stopped first (the next start finds it again)";
  return `${g.outcome} ${when(g.ended_at)}: ${g.detail || ""}`;
}

function renderGaps(groups) {
  const rows = [];
  for (const grp of groups) {
    for (const g of grp.gaps) {
      const stored = g.stored === null ? "no stored position" : `stored position ${g.stored}` +
        (g.available === null ? "" : `, the log serves from ${g.available}`);
      rows.push(el("tr", { "data-group": grp.group, "data-alias": g.alias, "data-outcome": g.outcome },
        el("td", { text: grp.group }),
        el("td", { text: g.alias }),
        el("td", { text: when(g.found_at) }),
        el("td", { class: "wrap", text: `${g.reason} (${stored})` }),
        el("td", { class: "wrap outcome " + g.outcome, text: outcomeText(g) })));
    }
  }
  $("gaps").querySelector("tbody").replaceChildren(...rows);
  $("gaps-empty").hidden = rows.length > 0;
}

// what app.js calls with every /ws message
function renderHealth(m) {
  if (m.verified) renderVerified(m.verified);
  if (m.gaps) renderGaps(m.gaps);
}

document.addEventListener("DOMContentLoaded", () => {
  $("check-again").onclick = () => loadChecks(true);
  $("checks-ok").onclick = () => {
    health.showOk = !health.showOk;
    if (health.checks) renderChecks(health.checks);
  };
  loadChecks(false);
});
