// The portal dashboard: a fleet view with one compact summary per check (registered, or with
// a result the caller may see), per-Node states with text as well as colour, and the
// technical evidence of one result in a dialog opened on demand. Reads only /api/v1 with the
// caller's bearer token (from the token field or ?token=, kept in sessionStorage); polls.
// An ES module (strict): portal/static/dom.js builds elements, portal/static/detail.js the
// detail view.

import { STATES, ago, badge, brief, el, known, span, when } from "./dom.js";
import { detailBody } from "./detail.js";

const TOKEN_KEY = "signal-portal-token";
const PAGE_LIMIT = 1000;
const MAX_PAGES = 50;
const MAX_ROWS = 200;
const params = new URLSearchParams(window.location.search);
const refreshSeconds = Math.max(1, Number(params.get("refresh")) || 5);
let lastSignature = null;
let timer = null;

// --- token and requests ------------------------------------------------------------------
function token() {
  return window.sessionStorage.getItem(TOKEN_KEY) || "";
}

function adoptQueryToken() {
  const given = params.get("token");
  if (given === null) return;
  if (given) window.sessionStorage.setItem(TOKEN_KEY, given);
  params.delete("token");
  const rest = params.toString();
  window.history.replaceState(null, "", window.location.pathname + (rest ? `?${rest}` : ""));
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

async function allResults() {
  const items = [];
  let next = null;
  for (let page = 0; page < MAX_PAGES; page += 1) {
    const query = new URLSearchParams({ limit: String(PAGE_LIMIT) });
    if (next) query.set("continue", next);
    const body = await api(`api/v1/results?${query}`);
    items.push(...body.items);
    next = body.continue;
    if (!next) return { items, complete: true };
  }
  return { items, complete: false };
}

// --- the fleet model (pure) --------------------------------------------------------------
function newer(a, b) {
  const ka = [a.run.created || "", a.run.uid];
  const kb = [b.run.created || "", b.run.uid];
  return ka[0] > kb[0] || (ka[0] === kb[0] && ka[1] > kb[1]);
}

function fleet(checks, results) {
  // One entry per check the API lists (registered, or with visible results) and per check
  // type that has a result; per Node the newest result (as the API's Node summary does).
  const byId = new Map();
  for (const check of checks) byId.set(check.id, { check, nodes: new Map(), total: 0 });
  for (const result of results) {
    const id = `${result.check.profile}/${result.check.name}`;
    if (!byId.has(id)) {
      const check = { id, profile: result.check.profile, name: result.check.name, registered: false };
      byId.set(id, { check, nodes: new Map(), total: 0 });
    }
    const entry = byId.get(id);
    entry.total += 1;
    const held = entry.nodes.get(result.target.name);
    if (!held || newer(result, held)) entry.nodes.set(result.target.name, result);
  }
  return [...byId.values()].sort((a, b) => (a.check.id < b.check.id ? -1 : 1));
}

function counts(entry) {
  const tally = Object.fromEntries(STATES.map((s) => [s, 0]));
  for (const result of entry.nodes.values()) tally[known(result.state)] += 1;
  return tally;
}

// --- rendering ---------------------------------------------------------------------------
function nodeRows(entry) {
  const rank = (state) => STATES.indexOf(known(state));
  const rows = [...entry.nodes.values()].sort(
    (a, b) => rank(a.state) - rank(b.state) || (a.target.name < b.target.name ? -1 : 1),
  );
  return rows.slice(0, MAX_ROWS).map((result) =>
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
      el("td", {}, result.scope.workspace),
    ),
  );
}

function card(entry) {
  const { check } = entry;
  const tally = counts(entry);
  const facts = [];
  if (check.backend) facts.push(`${check.backend} backend`);
  if (check.freshnessSeconds) facts.push(`fresh for ${span(check.freshnessSeconds)}`);
  facts.push(`${entry.nodes.size} Node${entry.nodes.size === 1 ? "" : "s"}`);
  const body = entry.nodes.size
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
            ["Node", "State", "Reason", "Finished", "Workspace"].map((h) => el("th", { scope: "col" }, h)),
          ),
        ),
        el("tbody", {}, nodeRows(entry)),
      )
    : el("p", { class: "none" }, "No results yet.");
  const more = entry.nodes.size > MAX_ROWS ? el("p", { class: "none" }, `… and ${entry.nodes.size - MAX_ROWS} more Nodes`) : null;
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

function render(entries) {
  const section = document.getElementById("fleet");
  section.replaceChildren(...entries.map(card));
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
    const [checks, results] = await Promise.all([api("api/v1/checks"), allResults()]);
    const signature = JSON.stringify([checks.items, results.items.map((r) => [r.id, r.state, r.reason, r.message])]);
    if (signature !== lastSignature) {
      render(fleet(checks.items, results.items));
      lastSignature = signature;
    }
    showProblem(results.complete ? "" : `Showing the first ${results.items.length} results only.`);
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
  adoptQueryToken();
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
