// A session's sections: policy, lifetime, a tokens/budget bar, and the items, with each group
// drawn as one unit (groups are evicted whole and never split, docs/sections.md).
//
// Two sources feed the same drawing: the live view (read once, then kept current from the
// stream's records by fold.js, `drawable`) and time travel (GET .../state?at=SEQ, `fromState`).
// Both give a Map of name -> {config, tokens, evictions, count, items}.

import { h, preview } from "./dom.js";

export function fromState(state) {
  const sections = new Map();
  for (const [name, s] of Object.entries(state.sections)) {
    sections.set(name, { ...s, count: s.items.length });
  }
  return sections;
}

// `selection`, in the live view only: {ids: Set of "section/id", onToggle(section, id, on)},
// the items ticked for erasure.
export function renderSections(root, sections, { showEmpty, selection = null }) {
  const cards = [];
  for (const [name, section] of sections) {
    if (!showEmpty && section.items.length === 0 && section.count === 0) continue;
    cards.push(card(name, section, selection));
  }
  if (cards.length === 0) cards.push(h("p", { class: "empty" }, "Every section is empty."));
  root.replaceChildren(...cards);
}

function card(name, section, selection) {
  const c = section.config;
  const budget = c.budget_tokens;
  const used = section.tokens;
  const flags = [];
  if (!c.mutable) flags.push("immutable");
  if (c.searchable) flags.push("searchable");
  return h("article", { class: "section-card", dataset: { section: name } },
    h("header", {},
      h("h3", {}, name),
      h("span", { class: "badge policy", title: "eviction policy" }, c.policy),
      h("span", { class: "badge lifetime", title: "lifetime" }, c.lifetime),
      flags.map((f) => h("span", { class: "badge flag" }, f)),
      section.evictions
        ? h("span", { class: "badge evictions", title: "items evicted so far" },
          `${section.evictions} evicted`)
        : null),
    bar(used, budget),
    section.items.length ? units(section.items, selection) : h("p", { class: "empty" }, "no items"));
}

function bar(used, budget) {
  if (budget === null || budget === undefined) {
    return h("div", { class: "budget unbounded" }, h("span", {}, `${used} tokens · unbounded`));
  }
  const pct = budget > 0 ? Math.min(100, (100 * used) / budget) : 0;
  const level = pct >= 90 ? "high" : pct >= 60 ? "mid" : "low";
  const fill = h("div", { class: `fill ${level}` });
  fill.style.width = `${pct}%`; // a CSSOM property, which the page's CSP allows
  return h("div", { class: "budget" },
    h("div", {
      class: "bar", role: "meter", "aria-valuemin": 0, "aria-valuemax": budget,
      "aria-valuenow": used, "aria-label": "tokens used of the budget",
    }, fill),
    h("span", { class: "budget-text" }, `${used} / ${budget} tokens`));
}

// Items in order, with each group gathered where its first member stands.
function units(items, selection) {
  const row = (item) => itemRow(item, selection);
  const out = [];
  const groups = new Map();
  for (const item of items) {
    if (!item.group) {
      out.push(row(item));
      continue;
    }
    let members = groups.get(item.group);
    if (!members) {
      members = [];
      groups.set(item.group, members);
      out.push(members);
    }
    members.push(item);
  }
  return h("ul", { class: "items" }, out.map((unit) => {
    if (!Array.isArray(unit)) return unit;
    const name = unit[0].group;
    const tokens = unit.reduce((sum, item) => sum + item.tokens, 0);
    return h("li", { class: "group", dataset: { group: name } },
      h("div", { class: "group-head" },
        h("span", { class: "badge group-badge" }, "group"), ` ${name} · ${unit.length} items · ${tokens} tokens`),
      h("ul", { class: "items" }, unit.map(row)));
  }));
}

function itemRow(item, selection) {
  const content = item.content === null && item.content_seq !== undefined
    ? `(large content, in the log at seq ${item.content_seq})`
    : preview(item.content, 300);
  const key = `${item.section}/${item.id}`;
  const pick = selection
    ? h("input", {
      type: "checkbox", class: "pick", "aria-label": `Select item ${item.id} for erasure`,
      checked: selection.ids.has(key),
      onchange: (event) => selection.onToggle(item.section, item.id, event.target.checked),
    })
    : null;
  return h("li", { class: "item", dataset: { itemId: item.id } },
    h("div", { class: "item-head" },
      pick,
      h("span", { class: "item-id" }, `#${item.id}`),
      item.kind ? h("span", { class: "badge" }, item.kind) : null,
      item.role ? h("span", { class: "badge" }, item.role) : null,
      h("span", { class: "badge priority", title: "priority" }, `p${item.priority}`),
      h("span", { class: "badge tokens", title: "tokens" }, `${item.tokens} tok`),
      (item.tags || []).map((tag) => h("span", { class: "tag item-tag" }, tag))),
    h("p", { class: "item-content" }, content));
}
