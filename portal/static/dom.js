// Small DOM helpers and the states as the dashboard shows them (icon + name + colour class).
// Everything is built with textContent: nothing from the API is ever parsed as HTML.

export const STATES = ["Failed", "Unknown", "Stale", "Running", "Passed"];
const ICONS = { Passed: "✓", Failed: "✗", Running: "↻", Stale: "◷", Unknown: "?" };

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function known(state) {
  // Anything the page does not recognise is shown as Unknown: never as healthy.
  return STATES.includes(state) ? state : "Unknown";
}

export function badge(state, tag = "span", attrs = {}) {
  const shown = known(state);
  return el(
    tag,
    { ...attrs, class: `state state-${shown.toLowerCase()}`, dataset: { ...(attrs.dataset || {}), state: shown } },
    el("span", { class: "icon", "aria-hidden": "true" }, ICONS[shown]),
    shown,
  );
}

export function when(value) {
  if (!value) return "—";
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return String(value);
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$|Z$/, " UTC");
}

export function ago(value) {
  if (!value) return "";
  const seconds = Math.round((Date.now() - new Date(value).getTime()) / 1000);
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 90) return `${seconds}s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)}m ago`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)}h ago`;
  return `${Math.round(seconds / 86400)}d ago`;
}

export function brief(text) {
  // The table gives the gist; the whole message is in the detail view.
  return text.length > 120 ? `${text.slice(0, 117)}…` : text;
}

export function span(seconds) {
  if (!seconds) return "";
  if (seconds % 86400 === 0) return `${seconds / 86400}d`;
  if (seconds % 3600 === 0) return `${seconds / 3600}h`;
  if (seconds % 60 === 0) return `${seconds / 60}m`;
  return `${seconds}s`;
}

export function code(value) {
  return value ? el("code", {}, value) : "—";
}
