// A tiny element builder. Text always goes in as text nodes, never as HTML, so content from the
// log (item texts, ids, metadata) can never become markup or script.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function $(id) {
  return document.getElementById(id);
}

// Content may be any JSON value; previews show strings as they are and the rest as compact JSON.
export function preview(content, max = 120) {
  if (content === null || content === undefined) return "";
  const text = typeof content === "string" ? content : JSON.stringify(content);
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? flat.slice(0, max - 1) + "…" : flat;
}

export function ago(seconds) {
  if (seconds === null || seconds === undefined) return "?";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  return `${Math.round(seconds / 60)} min`;
}

// Record timestamps are microseconds since the epoch.
export function clock(ts) {
  return new Date(ts / 1000).toLocaleTimeString([], { hour12: false });
}
