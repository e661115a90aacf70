"""The dashboard (docs/dashboard.md), driven in Debian's headless chromium through Playwright.

Each test runs a real `ledgermem serve` (tests/server.py), writes through the HTTP API like an
agent would, and reads what the page shows from its DOM: feed rows carry `data-seq`, items
`data-item-id`, so the properties (no gap, no duplicate, the right item evicted) are checked
against the log's own records, not just "something appeared".

Playwright drives the system chromium by `executable_path`; no browser is ever downloaded. Without
/usr/bin/chromium or the playwright package the tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from helpers.chromium import launched_browser

from tests.server import Server

SCREENSHOT = Path(__file__).parent.parent / "docs" / "dashboard.png"
LIVE = 2000  # ms: how soon a change must show on the page (issue 7)


@pytest.fixture(scope="module")
def browser():
    yield from launched_browser()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("dashboard")) as running:
        yield running


@pytest.fixture()
def api(server):
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


class Dashboard:
    """One page in a fresh browser context (no cookies), with the requests it made."""

    def __init__(self, page, url: str) -> None:
        self.page = page
        self.url = url
        self.requests: list = []
        self.errors: list[str] = []
        page.on("request", lambda request: self.requests.append(request))
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def open(self, path: str = "/", ready: bool = True) -> Dashboard:
        self.page.goto(self.url + path)
        if ready:
            self.page.wait_for_selector("body[data-ready]")
        return self

    def feed_seqs(self) -> list[int]:
        """The seqs of the feed's rows, oldest first (the page shows the newest on top)."""
        shown = self.page.locator("#feed-list > li").evaluate_all(
            "rows => rows.map(row => Number(row.dataset.seq))"
        )
        return shown[::-1]

    def wait_for_feed_seq(self, seq: int, timeout: float = LIVE) -> None:
        self.page.locator(f'#feed-list > li[data-seq="{seq}"]').wait_for(timeout=timeout)

    def item(self, section: str, item_id: str):
        return self.page.locator(
            f'#sections .section-card[data-section="{section}"] li.item[data-item-id="{item_id}"]'
        )


@contextlib.contextmanager
def dashboard(browser, url: str, viewport: dict | None = None):
    context = browser.new_context(viewport=viewport or {"width": 1440, "height": 1000})
    try:
        board = Dashboard(context.new_page(), url)
        yield board
        # Every request the page made went to the service itself (issue 7: no external requests).
        origin = url.rstrip("/")
        foreign = [r.url for r in board.requests if not r.url.startswith(origin + "/")]
        assert foreign == []
        assert board.errors == []
    finally:
        context.close()


def add(api: httpx.Client, session: str, section: str, body: dict, headers=None) -> dict:
    response = api.post(
        f"/v1/sessions/{session}/sections/{section}/items", json=body, headers=headers
    )
    assert response.status_code == 201, response.text
    return response.json()["record"]


def log_seqs(url: str, after: int, headers=None, **filters: str) -> list[int]:
    """The seqs the log holds after `after` that match the filters, up to the head."""
    params = {"after": after, "follow": 0, **filters}
    response = httpx.get(url + "/v1/stream/jsonl", params=params, headers=headers, timeout=10)
    return [json.loads(line)["seq"] for line in response.text.splitlines() if line]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raw_get(url: str, path: str) -> tuple[int, bytes, str]:
    """A GET with the path sent byte for byte (no client normalizes `..` away)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read(), response.getheader("content-type", "")
    finally:
        connection.close()


# ---- serving --------------------------------------------------------------------------------


def test_the_page_is_served_at_the_root_and_at_ui_with_a_same_origin_policy(server):
    bodies = set()
    for path in ("/", "/ui", "/ui/"):
        status, body, media_type = raw_get(server.url, path)
        assert (status, media_type) == (200, "text/html; charset=utf-8")
        bodies.add(body)
    assert len(bodies) == 1
    headers = httpx.get(server.url + "/").headers
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "connect-src 'self'" in headers["content-security-policy"]


@pytest.mark.parametrize(
    "path",
    [
        "/ui/nothing.js",
        "/ui/../streams/routes/api.py",
        "/ui/..%2Fui.py",
        "/ui/%2E%2E%2F%2E%2E%2Fpyproject.toml",
        "/ui/%2Fetc%2Fpasswd",
        "/ui/app.js%00.css",
        "/ui/sub/app.js",
        "/ui/__init__.py",
    ],
)
def test_unknown_assets_and_path_traversal_are_a_json_404(server, path):
    status, body, media_type = raw_get(server.url, path)
    assert (status, media_type) == (404, "application/json")
    assert json.loads(body)["error"]["code"] == "not_found"


def test_writing_to_an_asset_is_a_json_405(server):
    response = httpx.post(server.url + "/ui/app.js", content=b"x")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


# ---- in the browser ---------------------------------------------------------------------------


def test_the_page_loads_every_asset_from_the_service_and_shows_log_health(browser, server, api):
    api.put("/v1/sessions/health-1")  # at least one fsync to report
    with dashboard(browser, server.url) as board:
        board.open()
        page = board.page
        head = api.get("/v1/log/status").json()["head"]
        page.locator("#h-head").wait_for()
        # Waited for, not read once: the page's own stream appends its trace (issue 13, item 14)
        # after the page's first status poll.
        page.wait_for_function(f"() => +document.getElementById('h-head').dataset.head >= {head}")
        page.locator('#h-verifier[data-state="ok"]').wait_for(timeout=5000)
        assert "records" in page.locator("#h-checkpoint").inner_text()
        page.wait_for_function(  # the page's own feed, once a poll comes after it connected
            "() => /sse [1-9]/.test(document.getElementById('h-subscribers').textContent)"
        )
        assert "mean" in page.locator("#h-fsync").inner_text()
        loaded = {urlsplit(r.url).path for r in board.requests}
        assert {"/ui/app.js", "/ui/app.css", "/ui/feed.js", "/v1/stream/sse"} <= loaded


def test_items_added_through_the_api_show_in_the_feed_and_the_section_view_within_2_s(
    browser, server, api
):
    api.put("/v1/sessions/live-1", json={"metadata": {"app": "crm", "user": "ana"}})
    with dashboard(browser, server.url) as board:
        page = board.open("/#session=live-1").page
        page.locator('#feed-conn[data-state="live"]').wait_for()
        page.locator('#sections[data-mode="live"]').wait_for()

        one = add(
            api,
            "live-1",
            "findings",
            {"content": "margin is 40%", "tags": ["fin", "q3"], "priority": 5},
        )
        board.wait_for_feed_seq(one["seq"])
        item = board.item("findings", str(one["seq"]))
        item.wait_for(timeout=LIVE)
        assert "margin is 40%" in item.inner_text()
        assert [t.inner_text() for t in item.locator(".item-tag").all()] == ["fin", "q3"]
        assert item.locator(".priority").inner_text() == "p5"
        tokens = one["payload"]["items"][0]["tokens"]
        assert item.locator(".tokens").inner_text() == f"{tokens} tok"

        batch = add(
            api,
            "live-1",
            "findings",
            {
                "items": [
                    {"content": "net margin 12%", "group": "margins"},
                    {"content": "gross margin 40%", "group": "margins"},
                ]
            },
        )
        board.wait_for_feed_seq(batch["seq"])
        group = page.locator(
            '.section-card[data-section="findings"] li.group[data-group="margins"]'
        )
        group.wait_for(timeout=LIVE)
        members = group.locator("li.item").evaluate_all("els => els.map(e => e.dataset.itemId)")
        assert members == [str(batch["seq"]), f"{batch['seq']}.1"]

        used = api.get("/v1/sessions/live-1").json()["sections"]["findings"]["tokens"]
        card = page.locator('.section-card[data-section="findings"]')
        assert card.locator(".budget-text").inner_text() == f"{used} / 16000 tokens"
        assert card.locator(".policy").inner_text() == "priority"
        assert card.locator(".lifetime").inner_text() == "durable"


def test_the_dashboard_reads_as_operator_and_never_as_agent(browser, server, api):
    api.put("/v1/sessions/reader-1")
    add(api, "reader-1", "working", {"content": "scratch"})  # an lru section
    start = api.get("/v1/log/status").json()["head"]
    with dashboard(browser, server.url) as board:
        board.open("/#session=reader-1").page.locator("li.item[data-item-id]").wait_for()
    response = httpx.get(
        server.url + "/v1/stream/jsonl",
        params={"after": start, "follow": 0, "session": "reader-1", "type": "items.read"},
    )
    readers = [json.loads(line)["payload"]["reader"] for line in response.text.splitlines()]
    assert readers and set(readers) == {"operator"}


def test_filling_a_fifo_section_past_its_budget_shows_the_eviction(browser, server, api):
    api.put(  # the sizes below are worked out at four characters a token
        "/v1/sessions/evict-1",
        json={
            "sections": {"messages": {"budget_tokens": 30}},
            "token_counter": "approx-chars-per-4",
        },
    )
    with dashboard(browser, server.url) as board:
        page = board.open("/#session=evict-1").page
        page.locator('#feed-conn[data-state="live"]').wait_for()
        added = []
        for n in range(3):
            record = add(
                api, "evict-1", "messages", {"content": f"message {n} of the chat, padded"}
            )
            assert "evicted" not in record["payload"]
            added.append(str(record["seq"]))
        board.item("messages", added[-1]).wait_for(timeout=LIVE)

        overflow = add(api, "evict-1", "messages", {"content": "one message too many, padded"})
        evicted = [e["id"] for e in overflow["payload"]["evicted"]]
        assert evicted and evicted[0] == added[0]  # fifo: the oldest goes

        row = page.locator(f'#feed-list > li[data-seq="{overflow["seq"]}"]')
        row.wait_for(timeout=LIVE)
        assert row.get_attribute("data-evicted") == " ".join(evicted)
        assert f"{added[0]} (fifo)" in row.locator(".evicted").inner_text()
        assert "has-eviction" in row.get_attribute("class")
        board.item("messages", str(overflow["seq"])).wait_for(timeout=LIVE)
        for gone in evicted:
            board.item("messages", gone).wait_for(state="detached", timeout=LIVE)
        card = page.locator('.section-card[data-section="messages"]')
        assert card.locator(".evictions").inner_text() == f"{len(evicted)} evicted"
        used = api.get("/v1/sessions/evict-1").json()["sections"]["messages"]["tokens"]
        assert card.locator(".budget-text").inner_text() == f"{used} / 30 tokens"


def test_sessions_are_searched_by_id_and_by_app_and_user_metadata(browser, server, api):
    api.put("/v1/sessions/search-alpha", json={"metadata": {"app": "crm", "user": "ana"}})
    api.put("/v1/sessions/search-beta", json={"metadata": {"app": "crm", "user": "bo"}})
    api.put("/v1/sessions/search-gamma", json={"metadata": {"app": "wiki", "user": "ana"}})

    def shown() -> set[str]:
        names = page.locator(".session-button").evaluate_all("b => b.map(x => x.dataset.session)")
        return {n for n in names if n.startswith("search-")}

    def gone(name: str) -> None:
        page.locator(f'.session-button[data-session="{name}"]').wait_for(state="detached")

    with dashboard(browser, server.url) as board:
        page = board.open().page
        assert shown() == {"search-alpha", "search-beta", "search-gamma"}
        page.fill("#search-meta", "app=crm")
        gone("search-gamma")
        assert shown() == {"search-alpha", "search-beta"}
        page.fill("#search-meta", "app=crm user=ana")
        gone("search-beta")
        assert shown() == {"search-alpha"}
        page.fill("#search-meta", "")
        page.fill("#search-id", "GAMMA")
        gone("search-alpha")
        assert shown() == {"search-gamma"}


def test_filter_chips_and_pause_show_every_matching_record_once(browser, server, api):
    api.put("/v1/sessions/chips-1")
    api.put("/v1/sessions/chips-2")
    with dashboard(browser, server.url) as board:
        page = board.open("/#session=chips-1").page
        page.select_option("#chip-field", "type")
        page.fill("#chip-value", "item.added")
        page.press("#chip-value", "Enter")
        page.get_by_role("button", name="Filter the feed to this session").click()
        chips = page.locator("#chips .chip").evaluate_all(
            "cs => cs.map(c => c.dataset.field + '=' + c.dataset.value)"
        )
        assert chips == ["session=chips-1", "type=item.added"]
        page.locator('#feed-conn[data-state="live"]').wait_for()
        first = add(api, "chips-1", "findings", {"content": "before the pause"})
        add(api, "chips-2", "findings", {"content": "another session"})
        board.wait_for_feed_seq(first["seq"])

        page.get_by_role("button", name="Pause").click()
        assert page.locator("#feed-conn").get_attribute("data-state") == "paused"
        during = [
            add(api, "chips-1", "findings", {"content": f"while paused {n}"}) for n in range(3)
        ]
        page.wait_for_timeout(500)
        assert page.locator(f'#feed-list > li[data-seq="{during[0]["seq"]}"]').count() == 0

        page.get_by_role("button", name="Resume").click()
        board.wait_for_feed_seq(during[-1]["seq"])
        shown = board.feed_seqs()
        expected = log_seqs(server.url, shown[0] - 1, session="chips-1", type="item.added")
        assert shown == expected  # no gap, no duplicate, in order, nothing else
        assert page.locator("#feed-list").get_attribute("data-duplicates") == "0"

        page.get_by_role("button", name="Remove filter type item.added").click()
        # The keyboard is not lost with the chip: it moves to the chip that is left.
        assert page.evaluate("document.activeElement.dataset.value") == "chips-1"
        # Other types of the session show again (the page's own view appends no read per write).
        page.locator('#feed-list > li[data-type="session.created"]').first.wait_for(timeout=LIVE)
        assert set(
            page.locator("#feed-list > li").evaluate_all("r => r.map(x => x.dataset.session)")
        ) == {"chips-1"}


def test_the_feed_resumes_after_a_server_restart_with_no_duplicate_and_no_gap(browser, tmp_path):
    port = free_port()
    first = Server(tmp_path, "--port", str(port)).start()
    url = first.url
    try:
        with dashboard(browser, url) as everything, dashboard(browser, url) as one_session:
            api = httpx.Client(base_url=url, timeout=10)
            api.put("/v1/sessions/resume-1")
            api.put("/v1/sessions/resume-2")
            everything.open()
            one_session.open("/?session=resume-1")
            for board in (everything, one_session):
                board.page.locator('#feed-conn[data-state="live"]').wait_for()
            before = [
                add(api, f"resume-{1 + n % 2}", "findings", {"content": f"before {n}"})
                for n in range(4)
            ]
            everything.wait_for_feed_seq(before[-1]["seq"])
            one_session.wait_for_feed_seq(before[-2]["seq"])

            assert first.stop() == 0  # graceful: the streams end, log.close is appended
            second = Server(tmp_path, "--port", str(port)).start()
            first = second
            assert second.url == url
            api = httpx.Client(base_url=url, timeout=10)
            # Written before the browser is back: it must get these from the log.
            after = [
                add(api, f"resume-{1 + n % 2}", "findings", {"content": f"after {n}"})
                for n in range(4)
            ]
            everything.wait_for_feed_seq(after[-1]["seq"], timeout=20_000)
            one_session.wait_for_feed_seq(after[-2]["seq"], timeout=20_000)

            # Up to the last write: the boards' reconnections append their stream traces after
            # it (issue 13, item 14), and the unfiltered feed shows them too.
            last = after[-1]["seq"]
            shown = [seq for seq in everything.feed_seqs() if seq <= last]
            assert shown == list(range(shown[0], last + 1))  # every record, once
            assert shown == [seq for seq in log_seqs(url, shown[0] - 1) if seq <= last]
            filtered = one_session.feed_seqs()
            assert filtered == log_seqs(url, filtered[0] - 1, session="resume-1")
            for board in (everything, one_session):
                assert board.page.locator("#feed-list").get_attribute("data-duplicates") == "0"
            # The restart is in the unfiltered feed: log.close, then the new process's log.resume.
            types = everything.page.locator("#feed-list > li").evaluate_all(
                "rows => rows.map(row => row.dataset.type)"
            )
            assert "log.close" in types and "log.resume" in types
            # It was the browser's own EventSource that resumed, with Last-Event-ID.
            resumed = [
                r.all_headers().get("last-event-id")
                for r in everything.requests
                if urlsplit(r.url).path == "/v1/stream/sse"
            ]
            assert any(resumed[1:]), resumed
    finally:
        first.kill()


def test_time_travel_shows_a_session_as_it_was_at_a_seq(browser, server, api):
    api.put("/v1/sessions/travel-1")
    early = add(api, "travel-1", "findings", {"content": "the early finding"})
    late = add(api, "travel-1", "findings", {"content": "the late finding"})
    removed = api.delete(f"/v1/sessions/travel-1/sections/findings/items/{early['seq']}")
    assert removed.status_code == 200
    with dashboard(browser, server.url) as board:
        page = board.open("/#session=travel-1").page
        board.item("findings", str(late["seq"])).wait_for(timeout=LIVE)
        assert board.item("findings", str(early["seq"])).count() == 0

        page.fill("#travel-seq", str(early["seq"]))
        page.press("#travel-seq", "Enter")
        page.locator(f'#sections[data-mode="travel"][data-at="{early["seq"]}"]').wait_for()
        assert board.item("findings", str(early["seq"])).count() == 1
        assert board.item("findings", str(late["seq"])).count() == 0
        assert f"as of seq {early['seq']}" in page.locator("#travel-note").inner_text()

        # The slider moves by keyboard too: one step on is the state with both findings.
        page.focus("#travel-range")
        page.keyboard.press("ArrowRight")
        page.locator(f'#sections[data-mode="travel"][data-at="{late["seq"]}"]').wait_for()
        assert board.item("findings", str(early["seq"])).count() == 1
        assert board.item("findings", str(late["seq"])).count() == 1

        page.get_by_role("button", name="Live", exact=True).click()
        page.locator('#sections[data-mode="live"]').wait_for()
        assert board.item("findings", str(early["seq"])).count() == 0
        assert board.item("findings", str(late["seq"])).count() == 1


def test_with_tokens_the_page_asks_once_and_keeps_the_token_in_a_cookie(browser, tmp_path):
    token = "dash-s3cret"
    env = {"LEDGERMEM_TOKENS": f"{token}:default:read+write"}
    bearer = {"authorization": f"Bearer {token}"}
    with Server(tmp_path, env=env) as running, dashboard(browser, running.url) as board:
        assert httpx.get(running.url + "/v1/log/status").status_code == 401
        page = board.open(ready=False).page
        dialog = page.locator("#token-dialog")
        dialog.wait_for(state="visible")
        page.fill("#token-input", "wrong-token")
        page.press("#token-input", "Enter")
        page.get_by_text("The service refused that token").wait_for()
        page.fill("#token-input", token)
        page.press("#token-input", "Enter")
        page.wait_for_selector("body[data-ready]")
        assert not dialog.is_visible()
        cookies = {c["name"]: c for c in page.context.cookies()}
        assert cookies["ledgermem_token"]["value"] == token
        assert cookies["ledgermem_token"]["sameSite"] == "Strict"

        # EventSource cannot send headers: the live feed works through the cookie alone.
        page.locator('#feed-conn[data-state="live"]').wait_for()
        httpx.put(running.url + "/v1/sessions/secret-1", headers=bearer)
        record = add(
            httpx.Client(base_url=running.url), "secret-1", "findings", {"content": "x"}, bearer
        )
        board.wait_for_feed_seq(record["seq"])

        page.reload()
        page.wait_for_selector("body[data-ready]")
        assert not dialog.is_visible()  # asked once


def test_a_phone_width_needs_no_sideways_scrolling_and_every_control_is_labelled(
    browser, server, api
):
    api.put(
        "/v1/sessions/phone-with-a-rather-long-session-identifier-1",
        json={"metadata": {"app": "crm"}},
    )
    add(api, "phone-with-a-rather-long-session-identifier-1", "findings", {"content": "w" * 300})
    with dashboard(browser, server.url, viewport={"width": 390, "height": 844}) as board:
        page = board.open().page
        # Keyboard only: tab to the session and open it with Enter.
        button = page.locator('.session-button[data-session^="phone-"]')
        button.focus()
        page.keyboard.press("Enter")
        page.locator('#sections[data-mode="live"] li.item').first.wait_for()
        assert button.get_attribute("aria-current") == "true"
        outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert outline == "solid"  # the focus ring (:focus-visible after a key press)
        width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1]
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll('input, select, button')]
                .filter(el => !el.closest('[hidden]') && !(el.labels && el.labels.length)
                        && !el.getAttribute('aria-label') && !el.textContent.trim())
                .map(el => el.id || el.outerHTML)"""
        )
        assert unlabelled == []


def test_a_screenshot_of_the_populated_dashboard(browser, server, api, tmp_path):
    """Writes docs/dashboard.png when LEDGERMEM_UPDATE_SCREENSHOT=1, else a copy under tmp."""
    session = "acme-buyside-2026"
    api.put("/v1/sessions/support-ticket-4711", json={"metadata": {"app": "support", "user": "bo"}})
    api.put(
        f"/v1/sessions/{session}",
        json={
            "metadata": {"app": "research", "user": "ana"},
            "sections": {"messages": {"budget_tokens": 40}},
        },
    )
    with dashboard(browser, server.url) as board:
        page = board.open(f"/#session={session}").page
        page.locator('#feed-conn[data-state="live"]').wait_for()
        chat = [
            "User: what is the target's gross margin?",
            "Assistant: checking the FY25 filings",
            "Tool: gross margin 40% in FY25",
            "User: and the net margin?",
            "Assistant: 12%, after one-off charges",
        ]
        for n, line in enumerate(chat):
            record = add(
                api, session, "messages", {"content": line, "tags": ["chat"], "priority": n}
            )
        add(
            api,
            session,
            "findings",
            {
                "items": [
                    {
                        "content": "Gross margin is 40% (FY25)",
                        "group": "margins",
                        "priority": 5,
                        "tags": ["fin"],
                    },
                    {
                        "content": "Net margin is 12% (FY25)",
                        "group": "margins",
                        "priority": 4,
                        "tags": ["fin"],
                    },
                ]
            },
        )
        last = add(
            api,
            session,
            "findings",
            {"content": "CEO changed in 2024", "priority": 2, "tags": ["people"]},
        )
        api.get(f"/v1/sessions/{session}/sections/findings/items")  # an agent's read
        board.wait_for_feed_seq(last["seq"])
        board.item("findings", str(last["seq"])).wait_for(timeout=LIVE)
        assert (
            "evicted" in page.locator(f'#feed-list > li[data-seq="{record["seq"]}"]').inner_text()
        )
        page.wait_for_timeout(2200)  # one more health poll, so its figures include the writes
        path = tmp_path / "dashboard.png"
        if os.environ.get("LEDGERMEM_UPDATE_SCREENSHOT") == "1":
            path = SCREENSHOT
        page.screenshot(path=str(path), full_page=True)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
