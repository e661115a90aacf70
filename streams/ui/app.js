// The dashboard's wiring: sessions list, the selected session's sections (live or as of a seq),
// the live feed and log health. Each part lives in its own module; this one connects them.

import { $, h } from "./dom.js";
import { ApiError, forgetToken, getJSON, hasTokenCookie, sessionPath } from "./api.js";
import { Feed, TYPES } from "./feed.js";
import { Health } from "./health.js";
import { fromLive, fromState, renderSections } from "./sections.js";

const FEED_BACKLOG = 200; // records before the head that a fresh feed starts from
const SESSIONS_EVERY_MS = 5000;
// Records that change no section: reads, and the control records of the log.
const NO_CHANGE = new Set(["items.read", "context.assembled", "session.summarized"]);

const view = {
  head: -1,
  selected: null, // {tenant, session, created_seq}
  travelAt: null, // a seq while time travelling, null when live
  lastSections: null,
  sessionStream: null,
  refetching: null, // the running live refetch
  dirty: false, // something changed while a refetch ran
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

function selectSession(s) {
  view.selected = { tenant: s.tenant, session: s.session, created_seq: s.created_seq };
  view.travelAt = null;
  view.lastVersion = null;
  view.lastSections = null;
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
  updateTravelRange();
  showTravelState();
  refetchLive().then(() => followSession());
}

// A stream of the selected session only, to refresh the live view whatever the feed's chips
// or pause say. It starts after the version just drawn, so no change in between is missed.
function followSession() {
  if (view.sessionStream) view.sessionStream.close();
  const s = view.selected;
  if (!s) return;
  const after = view.lastVersion ?? s.created_seq;
  const params = new URLSearchParams({ after: String(after), session: s.session, tenant: s.tenant });
  const source = new EventSource(`/v1/stream/sse?${params}`);
  view.sessionStream = source;
  source.onmessage = (event) => {
    const record = JSON.parse(event.data);
    if (!NO_CHANGE.has(record.type)) scheduleRefetch();
  };
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED && view.sessionStream === source) {
      // An HTTP error (401, 503 at shutdown): try again from the version drawn last.
      setTimeout(() => view.sessionStream === source && followSession(), 1000);
    }
  };
}

let refetchTimer = null;

function scheduleRefetch() {
  clearTimeout(refetchTimer);
  refetchTimer = setTimeout(refetchLive, 50); // one refetch for a burst of records
}

async function refetchLive() {
  if (view.refetching) {
    view.dirty = true;
    return view.refetching;
  }
  const s = view.selected;
  view.refetching = (async () => {
    try {
      do {
        view.dirty = false;
        const session = await getJSON(sessionPath(s.session));
        // An operator read: traced in the log like every read, but it moves no lru/lfu order.
        const { items } = await getJSON(sessionPath(s.session, "/items?reader=operator"));
        if (view.selected !== s) return;
        view.lastVersion = session.version;
        view.lastSections = fromLive(session, items);
        if (view.travelAt === null) draw(view.lastSections);
      } while (view.dirty && view.selected === s);
    } catch (error) {
      if (view.selected === s) showProblem(error);
    } finally {
      view.refetching = null;
    }
  })();
  return view.refetching;
}

function draw(sections) {
  const root = $("sections");
  root.dataset.mode = view.travelAt === null ? "live" : "travel";
  root.dataset.at = view.travelAt ?? "";
  renderSections(root, sections, { showEmpty: $("show-empty").checked });
}

function showProblem(error) {
  const text = error instanceof ApiError && error.status === 404
    ? `session ${view.selected.session} is gone (${error.message})`
    : `could not load the session: ${error.message}`;
  $("sections").replaceChildren(h("p", { class: "problem", role: "alert" }, text));
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
  if (view.lastSections) draw(view.lastSections);
  refetchLive();
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
    if (view.travelAt === null && view.lastSections) draw(view.lastSections);
    else if (view.travelAt !== null) travelTo(view.travelAt);
  });
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
