// The portal dashboard: a fleet view with one compact summary per check (registered, or with
// a result the caller may see), per-Node states with text as well as colour, and the
// technical evidence of one result in a dialog opened on demand; beside each Node's result,
// its health and capacity (Ready, GPU and RDMA allocatable, held by Signal, cordoned by an
// operator) when the caller may see Nodes. Reads only /api/v1 with the caller's bearer token,
// typed into the token field and kept in sessionStorage (never taken from or put in a URL);
// polls /api/v1/fleet, which summarises the whole fleet in one answer from one snapshot.
// An ES module (strict): portal/static/dom.js builds elements, portal/static/detail.js the
// detail view.

import { STATES, ago, badge, brief, el, known, span, when } from "./dom.js";
import { detailBody } from "./detail.js";

const TOKEN_KEY = "signal-portal-token";
const MAX_ROWS = 200;
const params = new URLSearchParams(window.location.search);
const refreshSeconds = Math.max(1, Number(params.get("refresh")) || 5);
let lastSignature = null;
let timer = null;

// --- token and requests ------------------------------------------------------------------
function token() {
  return window.sessionStorage.getItem(TOKEN_KEY) || "";
}

class ApiFailure extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(path, { headers, cache: "no-store", credentials: "omit" });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) message = body.error.message;
    } catch (_) {
      // not JSON: keep the status line
    }
    throw new ApiFailure(response.status, message);
  }
  return response.json();
}

// --- rendering ---------------------------------------------------------------------------
function healthCell(health) {
  // Absent: the caller may not see Nodes (or the Node is gone).
  if (!health) return el("td", { class: "health", dataset: { ready: "hidden" } }, "—");
  const ready = health.ready || {};
  const readyText =
    ready.status === "True" ? "Ready" : ready.status === "False" ? `Not ready (${ready.reason})` : "Ready unknown";
  const capacity = [];
  if (health.allocatable && health.allocatable.gpu !== null) capacity.push(`GPU ${health.allocatable.gpu}`);
  for (const [name, amount] of Object.entries((health.allocatable && health.allocatable.rdma) || {})) {
    capacity.push(`${name} ${amount}`);
  }
  const held = health.signal;
  let heldText = null;
  if (held) {
    const run = held.run ? ` by Run ${held.run.namespace}/${held.run.name}` : "";
    heldText = `${held.cordoned ? "Reserved and cordoned" : "Reserved"} by Signal${run}`;
  }
  return el(
    "td",
    {
      class: "health",
      dataset: {
        ready: ready.status || "Unknown",
        held: held ? "true" : "false",
        operatorCordoned: health.operatorCordoned ? "true" : "false",
      },
    },
    el("span", { class: ready.status === "True" ? "ready" : "not-ready" }, readyText),
    capacity.length ? el("small", {}, capacity.join(" · ")) : el("small", {}, "no GPU or RDMA allocatable"),
    heldText ? el("small", { class: "held" }, heldText) : null,
    health.operatorCordoned ? el("small", { class: "cordoned" }, "Cordoned by an operator") : null,
  );
}

function nodeRows(entry, nodes) {
  // The portal sends each Node's newest result, worst state first, then by Node name.
  return entry.rows.map((result) =>
    el(
      "tr",
      { dataset: { node: result.target.name, state: known(result.state) } },
      el("th", { scope: "row" }, result.target.name),
      el(
        "td",
        {},
        badge(result.state, "button", {
          type: "button",
          class: "",
          title: "Show the evidence of this result",
          "aria-label": `${known(result.state)}: show details for ${result.target.name}`,
          dataset: { resultId: result.id },
        }),
      ),
      el("td", { class: "reason" }, result.reason, result.message ? el("small", {}, brief(result.message)) : null),
      el("td", { class: "when" }, when(result.finishedAt), el("small", {}, ago(result.finishedAt))),
      healthCell(nodes[result.target.name]),
      el("td", {}, result.scope.workspace),
    ),
  );
}

function card(entry, nodes) {
  const { check } = entry;
  const tally = Object.fromEntries(STATES.map((s) => [s, entry.counts[s] || 0]));
  const facts = [];
  if (check.backend) facts.push(`${check.backend} backend`);
  if (check.freshnessSeconds) facts.push(`fresh for ${span(check.freshnessSeconds)}`);
  facts.push(`${entry.nodes} Node${entry.nodes === 1 ? "" : "s"}`);
  const body = entry.nodes
    ? el(
        "table",
        { class: "nodes" },
        el("caption", { class: "visually-hidden" }, `Newest result per Node for ${check.id}`),
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            ["Node", "State", "Reason", "Finished", "Node health", "Workspace"].map((h) =>
              el("th", { scope: "col" }, h),
            ),
          ),
        ),
        el("tbody", {}, nodeRows(entry, nodes)),
      )
    : el("p", { class: "none" }, "No results yet.");
  const hidden = entry.nodes - entry.rows.length;
  const more = hidden > 0 ? el("p", { class: "none" }, `… and ${hidden} more Node${hidden === 1 ? "" : "s"}`) : null;
  return el(
    "article",
    { class: "check", dataset: { check: check.id }, "aria-labelledby": `title-${check.id}` },
    el(
      "header",
      {},
      el("h2", { id: `title-${check.id}` }, el("span", { class: "profile" }, `${check.profile} / `), check.name),
      el(
        "span",
        { class: check.registered ? "tag" : "tag tag-orphan" },
        check.registered ? "registered" : "not registered: results only",
      ),
    ),
    el("p", { class: "facts" }, facts.join(" · ")),
    el(
      "ul",
      { class: "counts", "aria-label": `Nodes by state for ${check.id}` },
      STATES.map((state) =>
        el(
          "li",
          { class: tally[state] ? "" : "zero", dataset: { state, count: tally[state] } },
          badge(state),
          el("b", { class: "count" }, tally[state]),
        ),
      ),
    ),
    body,
    more,
  );
}

function render(entries, nodes) {
  const section = document.getElementById("fleet");
  section.replaceChildren(...entries.map((entry) => card(entry, nodes || {})));
  document.getElementById("empty").hidden = entries.length > 0;
}

function showProblem(text) {
  const problem = document.getElementById("problem");
  problem.textContent = text || "";
  problem.hidden = !text;
}

// --- polling -----------------------------------------------------------------------------
async function refresh() {
  const status = document.getElementById("status");
  const began = Date.now();
  let delay = refreshSeconds * 1000;
  if (document.hidden) {
    // Nothing to show: poll again once the tab is visible (see start()).
    window.clearTimeout(timer);
    return;
  }
  try {
    const fleet = await api(`api/v1/fleet?rows=${MAX_ROWS}`);
    const signature = JSON.stringify([fleet.items, fleet.nodes]);
    if (signature !== lastSignature) {
      render(fleet.items, fleet.nodes);
      lastSignature = signature;
    }
    showProblem("");
    status.textContent = `Updated ${new Date().toLocaleTimeString()} · refreshing every ${refreshSeconds}s`;
    document.body.dataset.loaded = "true";
  } catch (error) {
    if (error instanceof ApiFailure && error.status === 401) {
      showProblem("This portal needs a bearer token: paste one into the token field and choose “Use token”.");
      document.getElementById("fleet").replaceChildren();
      lastSignature = null;
    } else {
      showProblem(`Could not refresh: ${error.message}. The view below may be out of date.`);
    }
    status.textContent = `Last attempt ${new Date().toLocaleTimeString()}`;
  } finally {
    // A large fleet takes a while to list: never spend more than half the time polling.
    delay = Math.max(delay, 2 * (Date.now() - began));
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, delay);
  }
}

async function openDetail(resultId) {
  const dialog = document.getElementById("detail");
  const body = document.getElementById("detail-body");
  document.getElementById("detail-title").textContent = "Loading…";
  body.replaceChildren();
  if (!dialog.open) dialog.showModal();
  try {
    const result = await api(`api/v1/results/${encodeURIComponent(resultId)}`);
    document.getElementById("detail-title").textContent = `${result.check.profile} / ${result.check.name} on ${result.target.name}`;
    body.replaceChildren(...detailBody(result));
  } catch (error) {
    document.getElementById("detail-title").textContent = "Result unavailable";
    body.replaceChildren(el("p", { class: "problem", role: "alert" }, error.message));
  }
}

function closeDetail() {
  const dialog = document.getElementById("detail");
  if (dialog.open) dialog.close();
  document.getElementById("detail-body").replaceChildren();
}

// --- wiring ------------------------------------------------------------------------------
function start() {
  document.getElementById("auth").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = document.getElementById("token");
    if (field.value.trim()) window.sessionStorage.setItem(TOKEN_KEY, field.value.trim());
    field.value = "";
    lastSignature = null;
    refresh();
  });
  document.getElementById("forget").addEventListener("click", () => {
    window.sessionStorage.removeItem(TOKEN_KEY);
    lastSignature = null;
    refresh();
  });
  document.getElementById("fleet").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-result-id]");
    if (button) openDetail(button.dataset.resultId);
  });
  document.getElementById("detail-close").addEventListener("click", closeDetail);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });
  document.getElementById("detail").addEventListener("close", () => {
    document.getElementById("detail-body").replaceChildren();
  });
  refresh();
}

start();
