// The detail view of one result: the technical evidence (target, Run, verification, digests,
// cleanup, participants and their measurements), built only when a result is opened.

import { badge, code, el, when } from "./dom.js";

function definitions(pairs) {
  return el(
    "dl",
    { class: "facts-list" },
    pairs.filter(([, v]) => v !== undefined).map(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "—")]),
  );
}

function participantsTable(details) {
  const participants = (details && details.results && details.results.participants) || [];
  if (!participants.length) return el("p", { class: "none" }, "The evidence names no participants.");
  return el(
    "table",
    { class: "participants" },
    el(
      "thead",
      {},
      el("tr", {}, ["#", "Node", "Node uid", "Verdict", "Reason", "Exit", "Measurements"].map((h) => el("th", { scope: "col" }, h))),
    ),
    el(
      "tbody",
      {},
      participants.map((p) =>
        el(
          "tr",
          { dataset: { node: p.nodeName } },
          el("td", {}, p.index),
          el("th", { scope: "row" }, p.nodeName),
          el("td", {}, code(p.nodeUid)),
          el("td", {}, p.verdict),
          el("td", {}, p.reason),
          el("td", {}, p.exitCode ?? p.signal ?? "—"),
          el("td", { class: "measurements" }, measurements(p.measurements)),
        ),
      ),
    ),
  );
}

function measurements(values) {
  const entries = Object.entries(values || {});
  if (!entries.length) return "none";
  return el("ul", {}, entries.map(([k, v]) => el("li", {}, el("code", {}, k), " = ", String(v))));
}

function workloads(list) {
  if (!list || !list.length) return "none";
  return el("ul", {}, list.map((w) => el("li", {}, `${w.kind} ${w.name}`, w.nodeName ? ` on ${w.nodeName}` : "")));
}

export function detailBody(result) {
  const details = result.details || null;
  const cleanup = (details && details.cleanup) || {};
  return [
    el(
      "p",
      { class: "verdict" },
      badge(result.state),
      " ",
      el("strong", {}, result.reason),
      result.message ? ` — ${result.message}` : "",
    ),
    el("h3", {}, "Target and Run"),
    definitions([
      ["Node", result.target.name],
      ["Node uid", code(result.target.uid)],
      ["Workspace", result.scope.workspace],
      ["Cluster", result.scope.cluster],
      ["Run", `${result.run.namespace}/${result.run.name} (attempt ${result.run.attempt}, ${result.run.phase})`],
      ["Run uid", code(result.run.uid)],
      ["Check", `${result.check.profile} / ${result.check.name} (#${result.check.index})`],
      ["Profile generation", result.version.profileGeneration],
      ["Started", when(result.startedAt)],
      ["Finished", when(result.finishedAt)],
      ["Observed", when(result.observedAt)],
      ["Verdict", result.verdict || "none (unverified)"],
    ]),
    el("h3", {}, "Verification"),
    definitions([
      ["Evidence chain", result.verification.state],
      ["Message", result.verification.message || "—"],
    ]),
    el("h3", {}, "Evidence digests"),
    definitions([
      ["Script source", code(result.version.sourceDigest)],
      ["Evidence ConfigMap", code(result.evidence.configMap)],
      ["Run evidence", code(result.evidence.runDigest)],
      ["Check evidence", code(result.evidence.checkDigest)],
      ["Check results", code(details && details.resultsDigest)],
    ]),
    el("h3", {}, "Cleanup"),
    definitions([
      ["State", el("span", { class: "cleanup", dataset: { cleanup: result.cleanup } }, result.cleanup)],
      ["Message", cleanup.message || "—"],
      ["Finished", when(cleanup.finishedAt)],
      ["Deleted", workloads(cleanup.deleted)],
      ["Retained", workloads(cleanup.retained)],
    ]),
    el("h3", {}, "Participants and measurements"),
    participantsTable(details),
    el("p", { class: "schema" }, "Details schema: ", code(result.detailsSchema)),
  ];
}
