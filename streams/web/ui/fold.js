// The live session view, kept current from the stream's records instead of re-reading the
// session after every change.
//
// The view is read once (GET /v1/sessions/{s} and its items as `operator`), when it opens or the
// operator asks; from then on each record of the session's SSE subscription is applied here, in
// the browser, with exactly the effect `sections/model/projection.py` gives it: records carry the
// content, the victims and the cleared ids, so nothing is recomputed and nothing is guessed.
// What the view draws is each section's config, items (in (seq, k) order, as the service keeps
// them), token total, item count and evictions so far.
//
// A record the view cannot apply faithfully marks it stale instead (the page then offers a
// refresh): a change whose payload is already redacted, or a gap in the session's `prev_seq`
// chain. Applying a record the read already held is harmless: adds replace, removals of absent
// items do nothing, so the two reads and the stream may overlap.

// Records that describe the memory without changing what the view draws. An agent's read moves
// lru/lfu order (`last_use`, `reads`), which the view does not show.
const DESCRIBES = new Set(["items.read", "context.assembled", "session.summarized"]);

export function itemId(seq, k) {
  return k === 0 ? String(seq) : `${seq}.${k}`;
}

// The view as read: GET /v1/sessions/{s} (config, evictions, version) and its items.
export function fromRead(session, items) {
  const sections = new Map();
  for (const [name, s] of Object.entries(session.sections)) {
    const { tokens, items: count, evictions, ...config } = s;
    sections.set(name, { config, tokens, evictions, items: new Map() });
  }
  for (const item of items) sections.get(item.section)?.items.set(item.id, item);
  for (const section of sections.values()) total(section);
  return {
    tenant: session.tenant,
    session: session.session,
    created_seq: session.created_seq,
    version: session.version,
    seq: session.version, // the last record applied: the session's chain continues from here
    turn: session.turn,
    ended: session.ended,
    ended_seq: null,
    gone: null, // the record that deleted or erased the session
    stale: null, // why the view may no longer match the log, or null
    applied: 0, // records applied since the read
    sections,
  };
}

// Each section as sections.js draws it: {name: {config, tokens, evictions, count, items: [...]}}.
export function drawable(view) {
  const out = new Map();
  for (const [name, s] of view.sections) {
    const items = [...s.items.values()];
    out.set(name, { config: s.config, tokens: s.tokens, evictions: s.evictions, count: items.length, items });
  }
  return out;
}

// Section tokens are the sum of their items' tokens in the projection (every handler adjusts
// both by the same recorded counts), so the view sums them rather than tracking a second figure.
function total(section) {
  let tokens = 0;
  for (const item of section.items.values()) tokens += item.tokens;
  section.tokens = tokens;
}

// An item as the service's item view shows it (sections/retrieval/views.py `ItemView.to_json`).
function makeItem(record, seq, k, data) {
  return {
    id: itemId(seq, k),
    section: record.section,
    content: data.content ?? null,
    tokens: data.tokens,
    kind: data.kind ?? null,
    role: data.role ?? null,
    tags: [...(data.tags || [])],
    priority: data.priority ?? 0,
    metadata: data.metadata ?? {},
    group: data.group ?? null,
    seq,
    h: record.h,
    ts: record.ts,
    ...(data.extra || {}),
  };
}

function evict(section, evicted) {
  for (const victim of evicted || []) {
    if (section.items.delete(victim.id)) section.evictions += 1;
  }
}

function removeBySection(view, bySection) {
  for (const [name, ids] of Object.entries(bySection || {})) {
    const section = view.sections.get(name);
    if (!section) continue;
    for (const id of ids) section.items.delete(id);
    total(section);
  }
}

// `apply_compaction`: cut outputs get their recorded content and tokens; the replaced items
// leave, and the summary takes the place (and the id) of the first of them.
function compact(section, compacted, record) {
  for (const cut of compacted.truncated || []) {
    const item = section.items.get(cut.id);
    if (!item) continue;
    section.items.set(cut.id, { ...item, content: cut.content ?? null, tokens: cut.tokens, h: record.h, ts: record.ts });
  }
  if (compacted.replaced && compacted.replaced.length) {
    const gone = new Set(compacted.replaced);
    const summary = compacted.summary;
    const kept = new Map();
    for (const [id, item] of section.items) {
      if (!gone.has(id)) kept.set(id, item);
      else if (id === summary.id) {
        const [seq, k] = id.split(".").map(Number);
        kept.set(id, makeItem(record, seq, k || 0, summary));
      }
    }
    section.items = kept;
  }
}

const HANDLERS = {
  "session.created": (view, r, p) => {
    // A new session under the same id (after `session.deleted`): start again from its config.
    const order = p.order || Object.keys(p.config).sort();
    view.sections = new Map();
    let k = 0;
    for (const name of order) {
      const section = { config: p.config[name], tokens: 0, evictions: 0, items: new Map() };
      for (const data of (p.seed || {})[name] || []) {
        section.items.set(itemId(r.seq, k), makeItem({ ...r, section: name }, r.seq, k, data));
        k += 1;
      }
      total(section);
      view.sections.set(name, section);
    }
    Object.assign(view, { created_seq: r.seq, turn: 0, ended: false, ended_seq: null, gone: null });
  },
  "section.configured": (view, r, p) => {
    const section = view.sections.get(r.section);
    if (!section) {
      view.sections.set(r.section, { config: p.config, tokens: 0, evictions: 0, items: new Map() });
      return;
    }
    section.config = p.config;
    evict(section, p.evicted);
    total(section);
  },
  "item.added": (view, r, p) => {
    const section = view.sections.get(r.section);
    if (!section) return;
    if (p.compacted) compact(section, p.compacted, r);
    evict(section, p.evicted);
    p.items.forEach((data, k) => section.items.set(itemId(r.seq, k), makeItem(r, r.seq, k, data)));
    total(section);
  },
  "item.updated": (view, r, p) => {
    const section = view.sections.get(r.section);
    if (!section) return;
    evict(section, p.evicted);
    const item = section.items.get(p.id);
    if (item) {
      const set = p.set || {};
      const changed = { ...item };
      if ("content" in set) Object.assign(changed, { content: set.content, tokens: p.tokens, h: r.h, ts: r.ts });
      for (const field of ["tags", "priority", "metadata", "kind", "role"]) {
        if (field in set) changed[field] = set[field];
      }
      section.items.set(p.id, changed); // `set` on a present key keeps its place
    }
    total(section);
  },
  "item.removed": (view, r, p) => removeBySection(view, p.items),
  "items.erased": (view, r, p) => removeBySection(view, p.items),
  "sections.cleared": (view, r, p) => removeBySection(view, p.items),
  "turn.ended": (view, r, p) => {
    removeBySection(view, p.cleared);
    view.turn = p.turn + 1;
  },
  "section.committed": () => {}, // `committed` is not drawn; the version still moves
  "section.compacted": (view, r, p) => {
    const section = view.sections.get(r.section);
    if (!section) return;
    compact(section, p.compacted, r);
    total(section);
  },
  "session.ended": (view, r) => {
    view.ended = true;
    view.ended_seq = r.seq;
  },
  "session.deleted": (view, r) => {
    view.gone = r;
  },
  "session.erased": (view, r, p) => {
    // With `deleted_seq`, retention's erase of an incarnation already deleted: a session created
    // again since under the same id stays (docs/events.md, "Retention").
    if (p.deleted_seq === undefined || p.deleted_seq === null) view.gone = r;
  },
};

// Apply one record of this session. Returns what happened: "applied", "ignored" (a read, or a
// type this projection leaves alone) or "stale".
export function applyRecord(view, record) {
  if (record.seq <= view.seq) return "ignored"; // already in the view (a resumed stream)
  const p = record.payload;
  const chained = p && typeof p.prev_seq === "number" && p.prev_seq !== view.seq;
  view.seq = record.seq;
  if (chained && !view.stale) {
    view.stale = `a record of this session before seq ${record.seq} never reached the page`;
  }
  const handler = HANDLERS[record.type];
  if (!handler || DESCRIBES.has(record.type)) return "ignored";
  if (view.gone && record.type !== "session.created") return "ignored";
  if (p === null || p === undefined) {
    // Redacted before it reached the page: its effect is no longer in the record.
    view.stale = `seq ${record.seq} (${record.type}) arrived redacted`;
    return "stale";
  }
  handler(view, record, p);
  view.version = record.seq;
  view.applied += 1;
  return "applied";
}
