"""A page from another origin, in Debian's headless chromium, can neither write to nor read the
memory of a service in its default no-token mode (issue 13, item 5).

The page is served by a second real HTTP server on another port and host name (another origin,
another site); its script tries what any web page may: fetch with a `text/plain` body (a "simple"
request, sent without asking), fetch with `application/json` (preflighted), a no-cors fetch, a
form POST whose text/plain body is valid JSON, an `<img>`, and an EventSource. Afterwards the
log has not grown and the page saw nothing of what the service holds.
"""

from __future__ import annotations

import http.server
import json
import threading

import httpx
import pytest
from helpers.chromium import launched_browser
from server import Server

SECRET = "the launch code is 0000"

ATTACK = """<!doctype html>
<html><body>
<iframe name="sink" id="sink"></iframe>
<form id="form" method="POST" enctype="text/plain" target="sink"
      action="TARGET/v1/sessions/demo/erase">
  <input name='{"reason":"x","all":true,"pad":"' value='"}'>
</form>
<img id="img" src="TARGET/v1/sessions/demo/items">
<script type="module">
const target = "TARGET";
const results = {};
async function attempt(name, run) {
  try { results[name] = "read: " + (await run()); }
  catch (error) { results[name] = "rejected: " + error; }
}
const erase = JSON.stringify({ reason: "x", all: true });
await attempt("fetch text/plain", () =>
  fetch(`${target}/v1/sessions/demo/erase`,
        { method: "POST", headers: { "Content-Type": "text/plain" }, body: erase })
    .then((r) => r.text()));
await attempt("fetch no-cors", () =>
  fetch(`${target}/v1/sessions/demo/erase`,
        { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" },
          body: erase })
    .then((r) => r.text()));
await attempt("fetch json", () =>
  fetch(`${target}/v1/sessions/demo/sections/findings/items`,
        { method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ content: "planted by a page" }) })
    .then((r) => r.text()));
await attempt("fetch read", () =>
  fetch(`${target}/v1/sessions/demo/sections/findings/items`).then((r) => r.text()));
await attempt("eventsource", () => new Promise((resolve, reject) => {
  const source = new EventSource(`${target}/v1/stream/sse?after=0`);
  source.onmessage = (event) => { source.close(); resolve(event.data); };
  source.onerror = () => { source.close(); reject(new Error("EventSource error")); };
}));
document.getElementById("form").submit();
await new Promise((resolve) => document.getElementById("sink").onload = resolve);
try { results["form frame"] = "read: " + frames["sink"].document.body.innerText; }
catch (error) { results["form frame"] = "rejected: " + error; }
window.results = results;
</script>
</body></html>
"""


@pytest.fixture(scope="module")
def browser():
    yield from launched_browser()


class AttackerSite:
    """A second real HTTP server: the page another site would serve."""

    def __init__(self, page: str) -> None:
        body = page.encode()
        self.requests: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805 - the handler's own self
                self.requests.append(handler.path)
                handler.send_response(200)
                handler.send_header("Content-Type", "text/html; charset=utf-8")
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(handler, *args) -> None:  # noqa: N805
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # "localhost" while the service is "127.0.0.1": another origin and another site.
        self.url = f"http://localhost:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_page_from_another_origin_writes_nothing_and_reads_nothing(browser, tmp_path):
    with Server(tmp_path / "data") as service, httpx.Client(base_url=service.url) as api:
        api.put("/v1/sessions/demo", json={}).raise_for_status()
        api.post(
            "/v1/sessions/demo/sections/findings/items", json={"content": SECRET}
        ).raise_for_status()
        head = api.get("/v1/log/status").json()["head"]
        site = AttackerSite(ATTACK.replace("TARGET", service.url))
        try:
            page = browser.new_page()
            page.goto(site.url + "/attack.html")
            page.wait_for_function("window.results !== undefined", timeout=20_000)
            results = page.evaluate("window.results")
            page.close()
        finally:
            site.close()
        assert site.requests[0] == "/attack.html"
        # Nothing was written: not an erase, not an item, not even a read record.
        assert api.get("/v1/log/status").json()["head"] == head, results
        info = api.get("/v1/sessions/demo").json()
        assert info["items"] == 1 and not info["ended"]
        # And the page could read nothing.
        assert set(results) == {
            "fetch text/plain",
            "fetch no-cors",
            "fetch json",
            "fetch read",
            "eventsource",
            "form frame",
        }
        for name in ("fetch text/plain", "fetch json", "fetch read", "eventsource", "form frame"):
            assert results[name].startswith("rejected: "), (name, results[name])
        assert results["fetch no-cors"] == "read: ", results  # an opaque answer: empty
        assert SECRET not in json.dumps(results)
