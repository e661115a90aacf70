"""The dashboard acts, and keeps its view from the stream (docs/dashboard.md, issue 18).

Driven in Debian's headless chromium like tests/test_dashboard.py. The properties, each checked
against the log itself (its JSONL stream) or the API's answer:

- a live view of many writes of every kind reads the session once, at open: the log holds one
  `items.read` by `operator` for it, whatever was written after;
- the view then equals the session as the API reads it at the end: per section, the same items in
  the same order with the same contents, tags, priorities and tokens, and the same token totals,
  evictions and configs (the browser's fold of the records equals the service's projection);
- each action appends exactly its record(s) and the page says so; a cancelled erase or end
  appends nothing; a refusal shows the service's code and appends nothing;
- replay from seq N shows exactly the log's records from N on;
- a read of 2,220 items is one row, folded to its first ids and "+2,215 more".
"""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest
from helpers.chromium import launched_browser

from tests.server import Server

LIVE = 5000  # ms: generous for a loaded machine; a change normally shows within 100 ms


@pytest.fixture(scope="module")
def browser():
    yield from launched_browser()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("dashboard-actions")) as running:
        yield running


@pytest.fixture()
def api(server):
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


@contextlib.contextmanager
def page_of(browser, url: str, path: str):
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    errors: list[str] = []
    requests: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: requests.append(request.url))
        page.goto(url + path)
        page.wait_for_selector("body[data-ready]")
        yield page
        assert errors == []
        assert [r for r in requests if not r.startswith(url.rstrip("/") + "/")] == []
    finally:
        context.close()


def records(url: str, after: int, headers=None, **filters) -> list[dict]:
    params = {"after": after, "follow": 0, **filters}
    response = httpx.get(url + "/v1/stream/jsonl", params=params, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line]


def head(api) -> int:
    return api.get("/v1/log/status").json()["head"]


def operator_reads(url: str, after: int, session: str, headers=None) -> list[dict]:
    found = records(url, after, headers, session=session, type="items.read")
    return [r for r in found if r["payload"]["reader"] == "operator"]


def wait_view_at(page, seq: int) -> None:
    """Until the live view has applied every record of its session up to `seq`."""
    page.wait_for_function(
        f"() => +document.getElementById('sections').dataset.seq >= {seq}", timeout=LIVE
    )
    page.wait_for_timeout(100)  # the drawing follows a burst by 30 ms


def shown_sections(page) -> dict:
    """Each section card the page draws: its config badges, figures and items, in order."""
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#sections .section-card')]
            .map(card => [card.dataset.section, {
                policy: card.querySelector('.policy').textContent,
                lifetime: card.querySelector('.lifetime').textContent,
                budget: card.querySelector('.budget-text, .budget span').textContent,
                evictions: card.querySelector('.evictions')?.textContent ?? null,
                items: [...card.querySelectorAll('li.item')].map(li => ({
                    id: li.dataset.itemId,
                    content: li.querySelector('.item-content').textContent,
                    tags: [...li.querySelectorAll('.item-tag')].map(t => t.textContent),
                    priority: li.querySelector('.priority').textContent,
                    tokens: li.querySelector('.tokens').textContent,
                    group: li.closest('li.group')?.dataset.group ?? null,
                })),
            }]))"""
    )


def expected_sections(api, session: str) -> dict:
    """What the page must show, from the API read at the end (an operator read)."""
    info = api.get(f"/v1/sessions/{session}").json()
    items = api.get(f"/v1/sessions/{session}/items", params={"reader": "operator"}).json()
    out = {}
    for name, s in info["sections"].items():
        budget = s["budget_tokens"]
        out[name] = {
            "policy": s["policy"],
            "lifetime": s["lifetime"],
            "budget": f"{s['tokens']} tokens · unbounded"
            if budget is None
            else f"{s['tokens']} / {budget} tokens",
            "evictions": f"{s['evictions']} evicted" if s["evictions"] else None,
            "items": [],
        }
    for item in items["items"]:
        content = item["content"]
        text = content if isinstance(content, str) else json.dumps(content, separators=(",", ":"))
        out[item["section"]]["items"].append(
            {
                "id": item["id"],
                "content": preview(text),
                "tags": item["tags"],
                "priority": f"p{item['priority']}",
                "tokens": f"{item['tokens']} tok",
                "group": item["group"],
            }
        )
    return out


def preview(text: str, limit: int = 300) -> str:
    """The item's text as the page previews it (dom.js `preview`)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def add(api, session: str, section: str, body: dict) -> dict:
    response = api.post(f"/v1/sessions/{session}/sections/{section}/items", json=body)
    assert response.status_code == 201, response.text
    return response.json()["record"]


# ---- the live view ------------------------------------------------------------------------------


def test_a_live_view_of_many_writes_reads_the_session_once_and_matches_the_api(
    browser, server, api
):
    session = "fold-1"
    api.put(
        f"/v1/sessions/{session}",
        json={"sections": {"messages": {"budget_tokens": 40}, "reflection": {"budget_tokens": 60}}},
    )
    add(api, session, "findings", {"content": "there before the page", "tags": ["old"]})
    start = head(api)
    with page_of(browser, server.url, f"/#session={session}") as page:
        page.locator('#sections[data-mode="live"]').wait_for()
        page.locator("#view-note", has_text="Live from the stream").wait_for(timeout=LIVE)
        page.check("#show-empty")
        writes = []
        for n in range(5):  # fifo past its budget: evictions
            writes.append(add(api, session, "messages", {"content": f"message {n}, padded out"}))
        group = add(
            api,
            session,
            "findings",
            {
                "items": [
                    {"content": "gross margin 40%", "group": "margins", "priority": 3},
                    {"content": "net margin 12%", "group": "margins", "tags": ["fin"]},
                ]
            },
        )
        writes.append(group)
        single = add(api, session, "findings", {"content": "to be changed", "priority": 1})
        writes.append(single)
        patched = api.patch(
            f"/v1/sessions/{session}/sections/findings/items/{single['seq']}",
            json={"content": "changed, and longer than before", "tags": ["new"], "priority": 7},
        )
        assert patched.status_code == 200, patched.text
        removed = api.delete(f"/v1/sessions/{session}/sections/findings/items/{group['seq']}.1")
        assert removed.status_code == 200, removed.text
        add(api, session, "working", {"content": "scratch for this turn"})
        assert api.post(f"/v1/sessions/{session}/turns/end").status_code == 200
        for n in range(3):
            add(api, session, "reflection", {"content": f"reflection number {n} here"})
        configured = api.put(
            f"/v1/sessions/{session}/sections/reflection", json={"budget_tokens": 12}
        )
        assert configured.status_code == 200, configured.text
        assert configured.json()["record"]["payload"].get("evicted")  # shrinking evicts
        observed = api.post(
            "/v1/observations",
            json={"type": "decision", "title": "Engine", "content": "FTS5", "session": session},
        )
        assert observed.status_code == 201, observed.text
        erased = api.post(
            f"/v1/sessions/{session}/erase",
            json={"ids": [str(writes[-3]["seq"])], "reason": "test"},
        )
        assert erased.status_code == 200, erased.text
        add(api, session, "messages", {"content": {"json": ["content", 1]}, "role": "user"})
        large = add(api, session, "documents", {"content": "large " * 1000})  # kept in the log
        patched = api.patch(
            f"/v1/sessions/{session}/sections/documents/items/{large['seq']}",
            json={"content": "larger " * 1000},
        )
        assert patched.status_code == 200, patched.text
        api.get(f"/v1/sessions/{session}/items")  # an agent's read: changes no drawing
        last = head(api)
        wait_view_at(page, last)

        # One read by the page, at open; none for the writes since.
        reads = operator_reads(server.url, start, session)
        assert len(reads) == 1, [r["seq"] for r in reads]
        assert page.locator("#sections").get_attribute("data-reads") == "1"
        assert page.locator("#sections").get_attribute("data-stale") == "false"
        shown = shown_sections(page)
        expected = expected_sections(api, session)
        assert shown == expected


def test_compaction_is_applied_in_the_browser_as_the_service_applies_it(browser, server, api):
    session = "fold-compact"
    settings = {"compact_at_tokens": 120, "compact_tool_chars": 40, "compact_keep_turns": 1}
    api.put(f"/v1/sessions/{session}", json={"sections": {"messages": settings}})
    start = head(api)
    with page_of(browser, server.url, f"/#session={session}") as page:
        page.locator("#view-note", has_text="Live from the stream").wait_for(timeout=LIVE)
        page.check("#show-empty")
        kinds = set()
        for n in range(12):
            role = ["user", "assistant", "tool"][n % 3]
            text = "tool output " * 20 if role == "tool" else f"{role} says {n} " * 3
            record = add(api, session, "messages", {"content": text, "role": role})
            compacted = record["payload"].get("compacted", {})
            kinds |= {key for key in ("replaced", "truncated") if compacted.get(key)}
        assert kinds == {"replaced", "truncated"}  # both kinds of compaction were recorded
        asked = api.post(f"/v1/sessions/{session}/compact", json={"target_bytes": 500})
        assert asked.json()["compaction"]["compacted"] is True, asked.text  # a section.compacted
        wait_view_at(page, head(api))
        assert len(operator_reads(server.url, start, session)) <= 1  # none if it opened empty
        assert page.locator("#sections").get_attribute("data-stale") == "false"
        assert shown_sections(page) == expected_sections(api, session)


def test_refresh_is_the_only_other_read_and_a_gone_session_says_so(browser, server, api):
    session = "fold-2"
    api.put(f"/v1/sessions/{session}")
    add(api, session, "findings", {"content": "one"})
    start = head(api)
    with page_of(browser, server.url, f"/#session={session}") as page:
        page.locator("#view-note", has_text="Live from the stream").wait_for(timeout=LIVE)
        page.get_by_role("button", name="Refresh").click()
        page.wait_for_function("() => document.getElementById('sections').dataset.reads === '2'")
        assert len(operator_reads(server.url, start, session)) == 2
        deleted = api.delete(f"/v1/sessions/{session}")
        assert deleted.status_code == 200, deleted.text
        page.get_by_text(f"session {session} was deleted at seq").wait_for(timeout=LIVE)
        # The same id again: a new session, drawn from its session.created, with no read.
        api.put(f"/v1/sessions/{session}", json={"sections": {"findings": {"budget_tokens": 99}}})
        again = add(api, session, "findings", {"content": "the second life"})
        page.locator(f'li.item[data-item-id="{again["seq"]}"]').wait_for(timeout=LIVE)
        page.check("#show-empty")
        wait_view_at(page, again["seq"])
        assert len(operator_reads(server.url, start, session)) == 2
        assert page.locator("#sections").get_attribute("data-stale") == "false"
        assert shown_sections(page) == expected_sections(api, session)


# ---- actions ----------------------------------------------------------------------------------


def session_records(url: str, after: int, session: str, headers=None) -> list[str]:
    """The types the log holds for `session` after `after`, reads left out."""
    return [
        r["type"]
        for r in records(url, after, headers, session=session)
        if r["type"] != "items.read"
    ]


def test_each_action_appends_exactly_its_record_and_the_page_shows_it(browser, server, api):
    session = "act-1"
    api.put(f"/v1/sessions/{session}")
    keep = add(api, session, "findings", {"content": "keep me"})
    drop = add(api, session, "findings", {"content": "erase me: 555-0100"})
    with page_of(browser, server.url, f"/#session={session}") as page:
        page.locator("#view-note", has_text="Live from the stream").wait_for(timeout=LIVE)
        status = page.locator("#action-status")

        # An observation in this session: one item.added, drawn from the stream.
        before = head(api)
        page.locator("#observe-box summary").click()
        page.select_option("#obs-type", "bugfix")
        page.fill("#obs-title", "Pool size")
        page.fill("#obs-content", "pool=50 after the outage")
        page.fill("#obs-tags", "db, ops")
        page.get_by_role("button", name="Add observation").click()
        status.get_by_text("inserted").wait_for(timeout=LIVE)
        assert session_records(server.url, before, session) == ["item.added"]
        added = records(server.url, before, session=session, type="item.added")[0]
        item = page.locator(
            f'.section-card[data-section="observations"] li.item[data-item-id="{added["seq"]}"]'
        )
        item.wait_for(timeout=LIVE)
        assert "pool=50 after the outage" in item.inner_text()

        # Erase without confirming: nothing appended.
        page.locator("#erase-box summary").click()
        page.get_by_role("checkbox", name=f"Select item {drop['seq']} for erasure").check()
        page.fill("#erase-reason", "GDPR request 7")
        before = head(api)
        page.get_by_role("button", name="Erase selected items…").click()
        dialog = page.locator("#confirm-dialog")
        dialog.wait_for(state="visible")
        assert f"#{drop['seq']}" in dialog.inner_text()
        assert "GDPR request 7" in dialog.inner_text()
        page.get_by_role("button", name="Cancel").click()
        status.get_by_text("Nothing erased").wait_for()
        assert not page.locator("#confirm-dialog").is_visible()
        assert session_records(server.url, before, session) == []

        # Confirmed: one items.erased, the item leaves the view, the page names the record.
        page.get_by_role("button", name="Erase selected items…").click()
        dialog.wait_for(state="visible")
        page.locator("#confirm-ok").click()
        status.get_by_text("Erased: items.erased at seq").wait_for(timeout=LIVE)
        assert session_records(server.url, before, session) == ["items.erased"]
        erase = records(server.url, before, session=session, type="items.erased")[0]
        assert erase["payload"]["items"] == {"findings": [str(drop["seq"])]}
        assert erase["payload"]["reason"] == "GDPR request 7"
        assert status.get_attribute("data-seq") == str(erase["seq"])
        page.locator(f'li.item[data-item-id="{drop["seq"]}"]').wait_for(
            state="detached", timeout=LIVE
        )
        assert page.locator(f'li.item[data-item-id="{keep["seq"]}"]').count() == 1
        page.locator(f'#feed-list > li[data-seq="{erase["seq"]}"]').wait_for(timeout=LIVE)

        # A tenant-wide observation: one item.added in `_tenant`, none in this session.
        before = head(api)
        page.fill("#obs-title", "Tone")
        page.fill("#obs-content", "brief answers")
        page.select_option("#obs-scope", "tenant")
        page.get_by_role("button", name="Add observation").click()
        status.get_by_text("in _tenant: inserted").wait_for(timeout=LIVE)
        assert session_records(server.url, before, "_tenant") == ["item.added"]
        assert session_records(server.url, before, session) == []
        page.select_option("#obs-scope", "session")

        # End: asked first; cancelled appends nothing, confirmed appends session.ended (and the
        # summary the service appends with it, docs/search.md).
        before = head(api)
        page.get_by_role("button", name="End session…").click()
        dialog.wait_for(state="visible")
        page.get_by_role("button", name="Cancel").click()
        status.get_by_text("Not ended").wait_for()
        assert session_records(server.url, before, session) == []
        page.get_by_role("button", name="End session…").click()
        page.locator("#confirm-ok").click()
        status.get_by_text("Ended: session.ended at seq").wait_for(timeout=LIVE)
        assert session_records(server.url, before, session) == [
            "session.ended",
            "session.summarized",
        ]
        page.locator("#end-session", has_text="Ended at seq").wait_for(timeout=LIVE)
        assert page.locator("#end-session").is_disabled()

        # A refusal: the ended session takes no observation. The service's 409 is shown.
        before = head(api)
        page.fill("#obs-title", "Too late")
        page.fill("#obs-content", "after the end")
        page.get_by_role("button", name="Add observation").click()
        status.get_by_text("Refused: 409 session_ended").wait_for(timeout=LIVE)
        assert status.get_attribute("data-state") == "error"
        assert session_records(server.url, before, session) == []

        # The whole session, confirmed: one session.erased, and the view says it is gone.
        page.fill("#erase-reason", "closing the account")
        page.get_by_role("button", name="Erase the whole session…").click()
        dialog.wait_for(state="visible")
        page.locator("#confirm-ok").click()
        status.get_by_text("Erased: session.erased at seq").wait_for(timeout=LIVE)
        assert session_records(server.url, before, session) == ["session.erased"]
        page.get_by_text(f"session {session} was erased at seq").wait_for(timeout=LIVE)


def test_erasure_needs_the_admin_scope_and_the_refusal_is_shown(browser, tmp_path):
    token = "writer-t0ken"
    env = {"LEDGERMEM_TOKENS": f"{token}:default:read+write"}
    bearer = {"authorization": f"Bearer {token}"}
    with Server(tmp_path, env=env) as running:
        client = httpx.Client(base_url=running.url, headers=bearer, timeout=10)
        client.put("/v1/sessions/scoped-1")
        item = add(client, "scoped-1", "findings", {"content": "not yours to erase"})
        context = browser.new_context()
        try:
            context.add_cookies([{"name": "ledgermem_token", "value": token, "url": running.url}])
            page = context.new_page()
            page.goto(running.url + "/#session=scoped-1")
            page.wait_for_selector("body[data-ready]")
            page.locator("#view-note", has_text="Live from the stream").wait_for(timeout=LIVE)
            before = head(client)
            page.locator("#erase-box summary").click()
            page.get_by_role("checkbox", name=f"Select item {item['seq']} for erasure").check()
            page.fill("#erase-reason", "no admin here")
            page.get_by_role("button", name="Erase selected items…").click()
            page.locator("#confirm-ok").click()
            status = page.locator("#action-status")
            status.get_by_text("Refused: 403").wait_for(timeout=LIVE)
            assert session_records(running.url, before, "scoped-1", bearer) == []
            assert page.locator(f'li.item[data-item-id="{item["seq"]}"]').count() == 1
        finally:
            context.close()


# ---- the feed -----------------------------------------------------------------------------------


def test_replay_from_a_seq_shows_exactly_the_records_from_it(browser, server, api):
    api.put("/v1/sessions/replay-1")
    first = add(api, "replay-1", "findings", {"content": "replay me"})
    for n in range(4):
        add(api, "replay-1", "findings", {"content": f"and me {n}"})
    with page_of(browser, server.url, "/") as page:
        page.locator('#feed-conn[data-state="live"]').wait_for()
        page.get_by_role("button", name="Pause").click()
        page.fill("#replay-seq", str(first["seq"]))
        page.press("#replay-seq", "Enter")
        page.locator('#feed-conn[data-state="live"]').wait_for()
        last = add(api, "replay-1", "findings", {"content": "written after the replay"})
        page.locator(f'#feed-list > li[data-seq="{last["seq"]}"]').wait_for(timeout=LIVE)
        shown = page.locator("#feed-list > li").evaluate_all(
            "rows => rows.map(row => Number(row.dataset.seq))"
        )[::-1]
        logged = [r["seq"] for r in records(server.url, first["seq"] - 1)]
        shown = [seq for seq in shown if seq <= last["seq"]]
        assert shown == [seq for seq in logged if seq <= last["seq"]]
        assert shown[0] == first["seq"]
        assert page.locator("#feed-list").get_attribute("data-duplicates") == "0"


def test_a_read_of_2220_items_is_one_folded_row(browser, server, api):
    session = "big-1"
    api.put(f"/v1/sessions/{session}")
    for start, count in ((0, 1000), (1000, 1000), (2000, 220)):
        items = [{"content": f"doc {n}"} for n in range(start, start + count)]
        add(api, session, "documents", {"items": items})
    before = head(api)
    with page_of(browser, server.url, f"/#session={session}") as page:
        page.locator("#view-note", has_text="Live from the stream").wait_for(timeout=20_000)
        (read,) = operator_reads(server.url, before, session)
        assert sum(len(ids) for ids in read["payload"]["items"].values()) == 2220
        row = page.locator(f'#feed-list > li[data-seq="{read["seq"]}"]')
        row.wait_for(timeout=LIVE)
        more = row.get_by_role("button", name="+2,215 more")
        assert more.get_attribute("aria-expanded") == "false"
        assert len(row.inner_text()) < 400  # the row stays one short line
        more.click()
        ids = row.locator(".ids").inner_text().split(", ")
        assert ids == read["payload"]["items"]["documents"]
        row.get_by_role("button", name="show fewer").click()
        assert len(row.locator(".ids").inner_text().split(", ")) == 5
        assert page.locator("li.item").count() == 2220
