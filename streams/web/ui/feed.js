// The live change feed: one EventSource on /v1/stream/sse, filtered on the server by the chips.
//
// Resuming is the browser's: every SSE event carries `id: <seq>`, so when the connection drops
// EventSource reconnects by itself with `Last-Event-ID`, which the service prefers over `after`,
// and gets exactly the records after the last one shown (docs/fanout.md). When the browser gives
// up instead (an HTTP error such as 401 or 503 closes the EventSource for good), the feed opens a
// new one with `after=<last seq shown>`, which means the same. Pause closes the stream and resume
// reopens it the same way, so nothing is buffered while paused and nothing can be lost.
// As a belt-and-braces check, a record at or below the last seq shown is dropped and counted.

import { clock, h, preview } from "./dom.js";

const MAX_ROWS = 300; // the DOM keeps the newest rows only; the log keeps everything
const FOLD_AFTER = 5; // a longer id list shows its first ids and "+N more", expandable
const FIELDS = ["session", "section", "type"];
export const TYPES = [
  "session.created", "section.configured", "item.added", "item.updated", "item.removed",
  "items.read", "context.assembled", "turn.ended", "section.committed", "sections.cleared",
  "session.ended", "session.summarized", "session.deleted", "items.erased", "session.erased",
];

export class Feed {
  constructor({ list, chips, chipInput, conn, pause, onRecord, onReconnect }) {
    this.list = list;
    this.chips = chips;
    this.chipInput = chipInput;
    this.conn = conn;
    this.pauseButton = pause;
    this.onRecord = onRecord || (() => {});
    this.onReconnect = onReconnect || (() => {});
    this.filters = { session: [], section: [], type: [] };
    this.lastSeq = -1;
    this.duplicates = 0;
    this.paused = false;
    this.source = null;
    this.retryTimer = null;
    this.retryDelay = 500;
    pause.addEventListener("click", () => (this.paused ? this.resume() : this.pause()));
  }

  // (Re)starts from `after` with the current filters, clearing the rows shown.
  start(after) {
    this.lastSeq = after;
    this.list.replaceChildren();
    this.list.dataset.duplicates = this.duplicates = 0;
    this.renderChips();
    if (!this.paused) this.connect();
  }

  url() {
    const params = new URLSearchParams({ after: String(this.lastSeq) });
    for (const field of FIELDS) for (const value of this.filters[field]) params.append(field, value);
    return `/v1/stream/sse?${params}`;
  }

  connect() {
    this.disconnect();
    const source = new EventSource(this.url());
    this.source = source;
    this.setConn("connecting…", "connecting");
    source.onopen = () => {
      this.retryDelay = 500;
      this.setConn("live", "live");
    };
    source.onmessage = (event) => this.receive(event);
    source.onerror = () => {
      if (this.source !== source) return;
      if (source.readyState === EventSource.CONNECTING) {
        // The browser retries on its own, with Last-Event-ID.
        this.setConn("reconnecting…", "reconnecting");
        return;
      }
      // Closed for good: an HTTP error. Let the caller check credentials, then reopen.
      this.setConn(`reconnecting in ${(this.retryDelay / 1000).toFixed(1)} s…`, "reconnecting");
      source.close();
      this.retryTimer = setTimeout(async () => {
        this.retryTimer = null;
        await this.onReconnect();
        if (!this.paused && this.source === source) this.connect();
      }, this.retryDelay);
      this.retryDelay = Math.min(this.retryDelay * 2, 8000);
    };
  }

  disconnect() {
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    if (this.source) this.source.close();
    this.source = null;
  }

  pause() {
    this.paused = true;
    this.disconnect();
    this.pauseButton.textContent = "Resume";
    this.pauseButton.setAttribute("aria-pressed", "true");
    this.setConn(`paused after seq ${this.lastSeq}`, "paused");
  }

  resume() {
    this.paused = false;
    this.pauseButton.textContent = "Pause";
    this.pauseButton.setAttribute("aria-pressed", "false");
    this.connect();
  }

  // Shows the records from `seq` on (with the current filters), clearing the rows: a new
  // subscription with `after=seq-1`. A paused feed is resumed by it.
  replayFrom(seq) {
    this.paused = false;
    this.pauseButton.textContent = "Pause";
    this.pauseButton.setAttribute("aria-pressed", "false");
    this.list.dataset.replayFrom = seq;
    this.start(seq - 1);
  }

  setConn(text, state) {
    this.conn.textContent = text;
    this.conn.dataset.state = state;
  }

  receive(event) {
    const record = JSON.parse(event.data);
    if (record.seq <= this.lastSeq) {
      this.list.dataset.duplicates = ++this.duplicates;
      return;
    }
    this.lastSeq = record.seq;
    this.list.dataset.lastSeq = record.seq;
    this.list.prepend(this.row(record));
    while (this.list.childElementCount > MAX_ROWS) this.list.lastElementChild.remove();
    this.onRecord(record);
  }

  // -- filters

  addFilter(field, value) {
    if (!FIELDS.includes(field) || !value || this.filters[field].includes(value)) return;
    this.filters[field].push(value);
    this.changed();
  }

  removeFilter(field, value) {
    this.filters[field] = this.filters[field].filter((v) => v !== value);
    this.changed();
    // The chip that had the keyboard is gone: hand it to the next chip, or the filter input.
    (this.chips.querySelector("button") || this.chipInput).focus();
  }

  changed() {
    // A new filter is a new subscription: start again a little before the last seq seen, so
    // the recent records that match are shown too.
    this.start(Math.max(-1, this.lastSeq - 200));
  }

  renderChips() {
    const chips = [];
    for (const field of FIELDS) {
      for (const value of this.filters[field]) {
        chips.push(
          h("li", {},
            h("button", {
              type: "button", class: "chip", dataset: { field, value },
              "aria-label": `Remove filter ${field} ${value}`,
              onclick: () => this.removeFilter(field, value),
            }, `${field}: ${value}`, h("span", { "aria-hidden": "true" }, " ×"))));
      }
    }
    this.chips.replaceChildren(...chips);
  }

  // -- one row per record

  row(record) {
    const p = record.payload || {};
    const filterButton = (field, value) =>
      h("button", {
        type: "button", class: `tag ${field}`, title: `Show only ${field} ${value}`,
        onclick: () => this.addFilter(field, value),
      }, value);
    const classes = ["rec"];
    const evicted = [...(p.evicted || [])];
    if (evicted.length) classes.push("has-eviction");
    if (record.type === "items.read" || record.type === "context.assembled") classes.push("read");
    if (record.tenant === "_log") classes.push("control");
    const left = leftItems(record, p);
    return h("li", {
      class: classes.join(" "),
      dataset: {
        seq: record.seq, type: record.type, session: record.session || "",
        section: record.section || "",
        evicted: evicted.map((e) => e.id).join(" ") || null,
      },
    },
    h("div", { class: "rec-head" },
      h("span", { class: "seq" }, `#${record.seq}`),
      h("time", {}, clock(record.ts)),
      filterButton("type", record.type),
      record.tenant === "_log" ? null : filterButton("session", record.session),
      record.tenant === "_log" || record.section === "_session"
        ? null : filterButton("section", record.section),
      classes.includes("read")
        ? h("span", { class: "badge read-badge" }, `read · ${p.reader || "?"}`) : null),
    h("p", { class: "rec-body" }, describe(record, p)),
    evicted.length
      ? h("p", { class: "evicted" }, "evicted: ",
        folded(evicted.map((e) => h("span", { class: "evicted-item" }, `${e.id} (${e.reason})`)), " "))
      : null,
    left ? h("p", { class: "left" }, left) : null);
  }
}

// A list of ids (or nodes) as its first FOLD_AFTER and a "+N more" button that shows the rest
// (and folds them again): a read of 2,220 items must not fill the feed.
function folded(parts, separator = ", ") {
  const join = (list) => list.flatMap((part, i) => (i ? [separator, part] : [part]));
  if (parts.length <= FOLD_AFTER + 1) return join(parts);
  const hidden = parts.length - FOLD_AFTER;
  const label = `+${hidden.toLocaleString("en-US")} more`;
  const shown = h("span", { class: "ids" }, join(parts.slice(0, FOLD_AFTER)));
  const more = h("button", {
    type: "button", class: "more", "aria-expanded": "false", dataset: { hidden },
    onclick: () => {
      const open = more.getAttribute("aria-expanded") === "true";
      shown.replaceChildren(...join(open ? parts.slice(0, FOLD_AFTER) : parts));
      more.setAttribute("aria-expanded", String(!open));
      more.textContent = open ? label : "show fewer";
    },
  }, label);
  return [shown, " ", more];
}

function ids(bySection) {
  const out = [];
  for (const [section, list] of Object.entries(bySection || {})) {
    if (out.length) out.push("; ");
    out.push(`${section}: `, folded(list));
  }
  return out;
}

// Items that left without an eviction: removed, cleared at a turn's end or a restart, erased.
function leftItems(record, p) {
  switch (record.type) {
    case "item.removed": return ["removed ", ids(p.items)];
    case "turn.ended": return Object.keys(p.cleared || {}).length ? ["cleared ", ids(p.cleared)] : null;
    case "sections.cleared": return [`cleared at ${p.reason}: `, ids(p.items)];
    case "items.erased": return [`erased (${p.reason}): `, ids(p.items)];
    default: return null;
  }
}

function describe(record, p) {
  if (record.payload === undefined || record.payload === null) return "(payload redacted)";
  switch (record.type) {
    case "session.created":
      return `created · ${preview(p.metadata || {}, 80)}`;
    case "item.added": {
      const items = p.items || [];
      const first = items[0] || {};
      const more = items.length > 1 ? ` (+${items.length - 1} more)` : "";
      return `+ ${preview(first.content, 100)}${more}`;
    }
    case "item.updated":
      return `~ ${p.id}: ${preview(p.set || {}, 100)}`;
    case "items.read":
      return [`${p.purpose || "get"} `, ids(p.items)];
    case "context.assembled":
      return `context of ${(p.manifest || []).length} items, ${p.tokens} / ${p.budget} tokens`;
    case "section.configured":
      return `configured · ${preview(p.config || {}, 100)}`;
    case "turn.ended":
      return `turn ${p.turn} ended`;
    case "section.committed":
      return ["committed ", ids(p.items)];
    case "session.erased":
      return `session erased (${p.reason})`;
    case "session.deleted":  // retention's deletions say why (docs/events.md, "Retention")
      return p.reason ? `session deleted (${p.reason})` : "session deleted";
    case "session.summarized": {
      const s = p.summary || {};
      const first = s.first_user && s.first_user.text !== null ? ` · first: ${preview(s.first_user.text, 60)}` : "";
      return `summary · ${s.messages} messages · ${(s.sections || []).join(", ")}${first}`;
    }
    default:
      return record.tenant === "_log" ? `log · ${preview(p, 80)}` : preview(p, 100);
  }
}
