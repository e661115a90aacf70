// The dashboard's wiring: sessions list, the selected session's sections (live or as of a seq),
// the live feed and log health. Each part lives in its own module; this one connects them.

import { $, h } from "./dom.js";
import { ApiError, forgetToken, getJSON, getVersioned, hasTokenCookie, postJSON, sessionPath } from "./api.js";
import { Feed, TYPES } from "./feed.js";
import { applyRecord, drawable, fromRead } from "./fold.js";
import { Health } from "./health.js";
import { fromState, renderSections } from "./sections.js";

const FEED_BACKLOG = 200; // records before the head that a fresh feed starts from
const SESSIONS_EVERY_MS = 5000;
// Records that change no section: reads, and the control records of the log.
const NO_CHANGE = new Set(["items.read", "context.assembled", "session.summarized"]);

const view = {
  head: -1,
  selected: null, // {tenant, session, created_seq}
  travelAt: null, // a seq while time travelling, null when live
  live: null, // the live view (fold.js): read once, then kept current from the stream
  sessionStream: null,
  reads: 0, // reads of the session this page made (one per open or Refresh)
  picked: new Set(), // "section/id" of the items ticked for erasure
};

// ---- sessions list ------------------------------------------------------------------------

function metadataQuery() {
  const params = new URLSearchParams();
  for (const pair of $("search-meta").value.split(/\s+/).filter(Boolean)) {
    const at = pair.indexOf("=");
    // metadata.KEY: a key named like a paging parameter (limit, offset...) is still metadata
    if (at > 0) params.append(`metadata.${pair.slice(0, at)}`, pair.slice(at + 1));
  }
  return params;
}

let sessionsTimer = null;
let sessionsRequest = 0;

async function loadSessions() {
  clearTimeout(sessionsTimer);
  sessionsTimer = setTimeout(loadSessions, SESSIONS_EVERY_MS);
  const request = ++sessionsRequest; // answers can arrive out of order: draw the newest only
  const query = metadataQuery();
  let sessions;
  try {
    sessions = (await getJSON(`/v1/sessions?${query}`)).sessions;
  } catch (error) {
    if (request === sessionsRequest) {
      $("session-count").textContent = `could not list sessions: ${error.message}`;
    }
    return;
  }
  if (request !== sessionsRequest) return;
  const needle = $("search-id").value.trim().toLowerCase();
  const shown = sessions.filter((s) => s.session.toLowerCase().includes(needle));
  $("session-count").textContent =
    `${shown.length} of ${sessions.length} session${sessions.length === 1 ? "" : "s"}`;
  // Redrawing replaces the buttons: keep the keyboard on the session it was on.
  const focused = document.activeElement?.closest(".session-button")?.dataset.session;
  $("session-list").replaceChildren(...shown.map(sessionButton));
  if (focused !== undefined) {
    const again = [...document.querySelectorAll(".session-button")]
      .find((button) => button.dataset.session === focused);
    again?.focus({ preventScroll: true });
  }
}

function sessionButton(s) {
  const meta = Object.entries(s.metadata || {})
    .map(([k, v]) => h("span", { class: "tag meta" }, `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`));
  const current = view.selected && view.selected.session === s.session;
  return h("li", {},
    h("button", {
      type: "button", class: "session-button", dataset: { session: s.session },
      "aria-current": current ? "true" : null,
      onclick: () => selectSession(s),
    },
    h("span", { class: "session-id" }, s.session),
    h("span", { class: "session-info" }, `${s.items} items · v${s.version}${s.ended ? " · ended" : ""}`),
    meta.length ? h("span", { class: "session-tags" }, meta) : null));
}

// ---- the selected session -------------------------------------------------------------------
//
// The live view is read once, when it opens or the operator presses Refresh (one `items.read`
// by `operator`), and kept current from then on by applying the session's records from its own
// SSE subscription (fold.js): a change on screen costs no read, so the view never writes to the
// log it watches.

function selectSession(s) {
  view.selected = { tenant: s.tenant, session: s.session, created_seq: s.created_seq };
  view.travelAt = null;
  view.live = null;
  view.picked = new Set();
  history.replaceState(null, "", `#session=${encodeURIComponent(s.session)}`);
  for (const button of document.querySelectorAll(".session-button")) {
    if (button.dataset.session === s.session) button.setAttribute("aria-current", "true");
    else button.removeAttribute("aria-current");
  }
  $("session-title").textContent = s.session;
  $("session-meta").replaceChildren(
    h("span", {}, `tenant ${s.tenant} · created at seq ${s.created_seq} `),
    h("button", {
      type: "button", class: "link", onclick: () => feed.addFilter("session", s.session),
    }, "Filter the feed to this session"));
  $("travel").hidden = false;
  $("empty-toggle").hidden = false;
  $("actions").hidden = false;
  showStatus(null);
  showPicked();
  updateTravelRange();
  showTravelState();
  readSession();
}

async function readSession() {
  const s = view.selected;
  if (view.sessionStream) view.sessionStream.close();
  view.sessionStream = null;
  $("view-note").textContent = "reading…";
  try {
    let session;
    let items;
    for (let attempt = 1; ; attempt++) {
      session = (await getVersioned(sessionPath(s.session))).body;
      // An operator read: traced in the log like every read, but it moves no lru/lfu order.
      const read = await getVersioned(sessionPath(s.session, "/items?reader=operator"));
      items = read.body.items;
      // Two calls: a change between them would start the view from two versions. Its ETag
      // says which version the items are of; read again when they differ (rarely).
      if (read.version === null || read.version === session.version || attempt === 3) break;
    }
    if (view.selected !== s) return;
    view.reads += 1;
    view.live = fromRead(session, items);
    view.selected.created_seq = session.created_seq;
    drawLive();
    followSession();
  } catch (error) {
    if (view.selected === s) showProblem(error);
  }
}

// The session's own stream, after the last record the view holds, whatever the feed's chips or
// pause say. The browser resumes it with Last-Event-ID after a drop; after an HTTP error the page
// opens a new one from the last record applied.
function followSession() {
  if (view.sessionStream) view.sessionStream.close();
  const s = view.selected;
  if (!s || !view.live) return;
  const params = new URLSearchParams({ after: String(view.live.seq), session: s.session, tenant: s.tenant });
  const source = new EventSource(`/v1/stream/sse?${params}`);
  view.sessionStream = source;
  const live = view.live;
  source.onmessage = (event) => {
    if (view.live !== live) return;
    const outcome = applyRecord(live, JSON.parse(event.data));
    $("sections").dataset.seq = live.seq;
    if (outcome !== "ignored") scheduleDraw();
  };
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED && view.sessionStream === source) {
      setTimeout(() => view.sessionStream === source && followSession(), 1000);
    }
  };
}

let drawTimer = null;

function scheduleDraw() {
  if (drawTimer === null) drawTimer = setTimeout(drawLive, 30); // one drawing per burst
}

function drawLive() {
  clearTimeout(drawTimer);
  drawTimer = null;
  const live = view.live;
  if (!live) return;
  const root = $("sections");
  root.dataset.seq = live.seq;
  root.dataset.version = live.version;
  root.dataset.reads = view.reads;
  root.dataset.stale = live.stale ? "true" : "false";
  const note = $("view-note");
  note.textContent = live.stale
    ? `The view may be behind (${live.stale}): press Refresh.`
    : `Live from the stream: ${live.applied} change${live.applied === 1 ? "" : "s"} applied since the last read.`;
  note.classList.toggle("warn", Boolean(live.stale));
  $("end-session").disabled = live.ended || Boolean(live.gone);
  if (live.ended) $("end-session").textContent = `Ended${live.ended_seq ? ` at seq ${live.ended_seq}` : ""}`;
  else $("end-session").textContent = "End session…";
  // Ticked items that left (evicted, removed, erased) are no longer erasable.
  for (const key of view.picked) {
    const [section, ...rest] = key.split("/");
    if (!live.sections.get(section)?.items.has(rest.join("/"))) view.picked.delete(key);
  }
  showPicked();
  if (view.travelAt !== null) return;
  if (live.gone) {
    root.dataset.mode = "live";
    root.replaceChildren(h("p", { class: "problem", role: "alert" },
      `session ${live.session} was ${live.gone.type === "session.erased" ? "erased" : "deleted"} at seq ${live.gone.seq}` +
      (live.gone.payload?.reason ? ` (${live.gone.payload.reason})` : "")));
    return;
  }
  draw(drawable(live));
}

function draw(sections) {
  const root = $("sections");
  const travelling = view.travelAt !== null;
  root.dataset.mode = travelling ? "travel" : "live";
  root.dataset.at = view.travelAt ?? "";
  const selection = travelling ? null : {
    ids: view.picked,
    onToggle: (section, id, on) => {
      const key = `${section}/${id}`;
      if (on) view.picked.add(key);
      else view.picked.delete(key);
      showPicked();
    },
  };
  renderSections(root, sections, { showEmpty: $("show-empty").checked, selection });
}

function showProblem(error) {
  const text = error instanceof ApiError && error.status === 404
    ? `session ${view.selected.session} is gone (${error.message})`
    : `could not load the session: ${error.message}`;
  $("view-note").textContent = "";
  $("sections").replaceChildren(h("p", { class: "problem", role: "alert" }, text));
}

// ---- actions: observe, end, erase -----------------------------------------------------------
//
// Each is one call of the public API (docs/service.md), so each appends exactly its record; the
// record then reaches the view through the stream like anyone else's. End and erase ask first.
// A refusal (4xx JSON) is shown as the service worded it.

function showStatus(text, state = "ok", record = null) {
  const status = $("action-status");
  status.textContent = text || "";
  status.dataset.state = text ? state : "";
  status.dataset.seq = record ? record.seq : "";
  status.dataset.type = record ? record.type : "";
}

function refused(error) {
  const where = error instanceof ApiError ? `${error.status} ${error.code}: ` : "";
  showStatus(`Refused: ${where}${error.message}`, "error");
  if (error instanceof ApiError) $("action-status").dataset.code = error.code;
}

function confirmAction(title, text, ok) {
  const dialog = $("confirm-dialog");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = ok;
  return new Promise((resolve) => {
    const done = (answer) => {
      $("confirm-ok").onclick = $("confirm-cancel").onclick = dialog.onclose = null;
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    $("confirm-ok").onclick = () => done(true);
    $("confirm-cancel").onclick = () => done(false);
    dialog.onclose = () => done(false); // Escape
    dialog.showModal();
    $("confirm-cancel").focus(); // the safe answer has the keyboard
  });
}

function pickedIds() {
  return [...view.picked].map((key) => key.slice(key.indexOf("/") + 1));
}

function showPicked() {
  const ids = pickedIds();
  $("erase-picked").textContent = ids.length
    ? `${ids.length} selected: ${ids.slice(0, 8).map((id) => `#${id}`).join(", ")}${ids.length > 8 ? " …" : ""}`
    : "Tick the items to erase in the sections below.";
  $("erase-items").disabled = ids.length === 0;
}

async function act(run) {
  showStatus("Sending…", "busy");
  try {
    await run();
  } catch (error) {
    refused(error);
  }
}

function wireActions() {
  $("refresh").addEventListener("click", () => {
    if (view.selected) readSession();
  });
  $("end-session").addEventListener("click", async () => {
    const s = view.selected;
    const yes = await confirmAction(`End session ${s.session}?`,
      "This appends session.ended (and its summary). Later writes to the session are refused.",
      "End session");
    if (!yes) return showStatus("Not ended: cancelled.", "cancelled");
    await act(async () => {
      const { record } = await postJSON(sessionPath(s.session, "/end"));
      showStatus(`Ended: session.ended at seq ${record.seq}.`, "ok", record);
    });
  });
  $("observe-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const s = view.selected;
    const body = {
      type: $("obs-type").value,
      title: $("obs-title").value,
      content: $("obs-content").value,
      tags: $("obs-tags").value.split(",").map((t) => t.trim()).filter(Boolean),
    };
    const topic = $("obs-topic").value.trim();
    if (topic) body.topic_key = topic;
    if ($("obs-scope").value === "session") body.session = s.session;
    act(async () => {
      const answer = await postJSON("/v1/observations", body);
      showStatus(`Observation ${answer.id} in ${answer.session ?? "the tenant"}: ${answer.tier}` +
        (answer.tier === "inserted" ? "." : ` (revision ${answer.revision}, duplicates ${answer.duplicates}).`));
      $("obs-title").value = $("obs-content").value = "";
    });
  });
  const erase = async (all) => {
    const s = view.selected;
    const reason = $("erase-reason").value.trim();
    if (!reason) {
      showStatus("Give a reason first: it is kept in the erase record.", "error");
      $("erase-reason").focus();
      return;
    }
    const ids = pickedIds();
    if (!all && ids.length === 0) return showStatus("Tick the items to erase first.", "error");
    const what = all
      ? `the whole session ${s.session}, every record of it`
      : `${ids.length} item${ids.length === 1 ? "" : "s"} of ${s.session} (${ids.map((id) => `#${id}`).join(", ")})`;
    const yes = await confirmAction(all ? `Erase session ${s.session}?` : `Erase ${ids.length} item${ids.length === 1 ? "" : "s"}?`,
      `Erase ${what}, for the reason "${reason}". Their contents are redacted from the log for good: this cannot be undone.`,
      "Erase");
    if (!yes) return showStatus("Nothing erased: cancelled.", "cancelled");
    await act(async () => {
      const answer = await postJSON(sessionPath(s.session, "/erase"), all ? { all: true, reason } : { ids, reason });
      view.picked.clear();
      showPicked();
      showStatus(`Erased: ${answer.record.type} at seq ${answer.record.seq}.`, "ok", answer.record);
    });
  };
  $("erase-form").addEventListener("submit", (event) => {
    event.preventDefault();
    erase(false);
  });
  $("erase-session").addEventListener("click", () => erase(true));
  // The tick boxes show while the erase box is open.
  $("erase-box").addEventListener("toggle", () => {
    $("sections").classList.toggle("picking", $("erase-box").open);
  });
}

// ---- time travel ----------------------------------------------------------------------------

function updateTravelRange() {
  const s = view.selected;
  if (!s) return;
  const range = $("travel-range");
  range.min = s.created_seq;
  range.max = Math.max(s.created_seq, view.head);
  $("travel-seq").min = range.min;
  $("travel-seq").max = range.max;
  if (view.travelAt === null) {
    range.value = range.max;
    $("travel-seq").value = range.max;
  }
}

function showTravelState() {
  const note = $("travel-note");
  const live = view.travelAt === null;
  $("travel-live").disabled = live;
  $("session").classList.toggle("travelling", !live);
  note.textContent = live ? "Showing live state." : `Showing the state as of seq ${view.travelAt} (not live).`;
}

let travelTimer = null;
let travelRequest = 0;

function travelTo(value) {
  const seq = Number.parseInt(value, 10);
  const range = $("travel-range");
  if (!Number.isInteger(seq) || seq < +range.min || seq > +range.max) {
    $("travel-note").textContent = `Give a seq from ${range.min} to ${range.max}.`;
    return;
  }
  clearTimeout(travelTimer);
  travelTimer = setTimeout(async () => {
    const request = ++travelRequest; // only the newest answer is drawn
    const s = view.selected;
    try {
      const state = await getJSON(sessionPath(s.session, `/state?at=${seq}`));
      if (request !== travelRequest || view.selected !== s) return;
      view.travelAt = seq;
      range.value = seq;
      $("travel-seq").value = seq;
      showTravelState();
      draw(fromState(state.sessions[0]));
    } catch (error) {
      if (request === travelRequest) $("travel-note").textContent = error.message;
    }
  }, 120);
}

function backToLive() {
  view.travelAt = null;
  travelRequest++;
  updateTravelRange();
  showTravelState();
  drawLive(); // the live view was kept current meanwhile: nothing to read again
}

// ---- start ------------------------------------------------------------------------------------

const feed = new Feed({
  list: $("feed-list"),
  chips: $("chips"),
  chipInput: $("chip-value"),
  conn: $("feed-conn"),
  pause: $("feed-pause"),
  onRecord: (record) => {
    // Item counts and versions change with every write: one list refresh per burst.
    if (record.tenant !== "_log" && !NO_CHANGE.has(record.type)) {
      clearTimeout(sessionsTimer);
      sessionsTimer = setTimeout(loadSessions, 300);
    }
  },
  // The stream was refused: a status call asks for a token when that was the reason.
  onReconnect: () => getJSON("/v1/log/status").catch(() => {}),
});

function wire() {
  $("session-search").addEventListener("submit", (event) => event.preventDefault());
  $("search-id").addEventListener("input", loadSessions);
  $("search-meta").addEventListener("input", loadSessions);
  $("travel-range").addEventListener("input", (event) => travelTo(event.target.value));
  $("travel-seq").addEventListener("change", (event) => travelTo(event.target.value));
  $("travel-live").addEventListener("click", backToLive);
  $("show-empty").addEventListener("change", () => {
    if (view.travelAt === null) drawLive();
    else travelTo(view.travelAt);
  });
  $("replay-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const seq = Number.parseInt($("replay-seq").value, 10);
    if (Number.isInteger(seq) && seq >= 0) feed.replayFrom(seq);
  });
  wireActions();
  $("chip-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("chip-value").value.trim();
    if (value) feed.addFilter($("chip-field").value, value);
    $("chip-value").value = "";
  });
  $("type-names").replaceChildren(...TYPES.map((t) => h("option", { value: t })));
  $("sign-out").addEventListener("click", () => {
    forgetToken();
    location.reload();
  });
}

async function main() {
  wire();
  // The first call asks for a token if the service wants one; everything after reuses it.
  const status = await getJSON("/v1/log/status");
  $("origin").textContent = status.origin;
  $("sign-out").hidden = !hasTokenCookie();
  view.head = status.head;
  const health = new Health({
    onStatus: (s) => {
      view.head = s.head;
      updateTravelRange();
    },
  });
  health.start();
  const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
  const filters = new URLSearchParams(location.search);
  for (const field of ["session", "section", "type"]) {
    for (const value of filters.getAll(field)) feed.filters[field].push(value);
  }
  feed.start(Math.max(-1, status.head - FEED_BACKLOG));
  await loadSessions();
  if (wanted) {
    try {
      selectSession(await getJSON(sessionPath(wanted)));
    } catch (error) {
      $("session-meta").textContent = `session ${wanted}: ${error.message}`;
    }
  }
  document.body.dataset.ready = "true";
}

main();
