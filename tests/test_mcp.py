"""The MCP server end to end, with the SDK's own client over both transports (docs/mcp.md).

- stdio: `ledgermem mcp --data DIR` and `ledgermem mcp --url U --token T`, each a real
  subprocess spawned by the SDK's stdio client;
- streamable HTTP: `/mcp` of a real `ledgermem serve` on 127.0.0.1 (ephemeral port) with two
  tenants' tokens.

Each checks the properties themselves: a save is a record (the SSE stream delivers it), search
returns it, resources read a section, a token's tenant sees only its own memory, and bad
arguments are MCP errors that append nothing (the log's head does not move).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest
from server import ROOT, Server
from stream_clients import sse_records

from tests.helpers.child import readline_within

mcp = pytest.importorskip("mcp")
httpx2 = pytest.importorskip("httpx2")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from sections.runtime.memory import Memory  # noqa: E402

TOOLS = {"mem_save", "mem_search", "mem_context"}
ENV = {"PYTHONPATH": str(ROOT)}
# Guards against a hang, never an assertion about speed.
PATIENCE = 60


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, PATIENCE * 3))


def stdio(*args: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ledgermem_cli", "mcp", *args], env=ENV
    )
    return Client(params)


@contextlib.asynccontextmanager
async def over_http(
    url: str, token: str | None, session: str | None = None, mode="auto", user: str | None = None
):
    named = {k: v for k, v in (("session", session), ("user", user)) if v}
    query = "?" + "&".join(f"{k}={v}" for k, v in named.items()) if named else ""
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=auth, timeout=PATIENCE) as http,
        Client(streamable_http_client(f"{url}/mcp{query}", http_client=http), mode=mode) as client,
    ):
        yield client


def structured(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


def resource_json(result) -> dict:
    (content,) = result.contents
    assert content.mime_type == "application/json"
    return orjson.loads(content.text)


async def refused(client: Client, tool: str, arguments: dict) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    return result.content[0].text


BAD_CALLS = [
    ("mem_save", {"type": "  ", "title": "t", "content": "c"}),  # a blank type
    ("mem_save", {"type": "decision", "title": "", "content": "c"}),  # empty title
    ("mem_save", {"type": "decision", "title": "t", "content": "   "}),  # blank content
    ("mem_save", {"type": "decision", "title": "t", "content": "c", "scope": "world"}),
    ("mem_save", {"type": "decision", "title": "t", "content": "c", "tags": "ops"}),
    ("mem_save", {"type": "decision", "title": "t" * 501, "content": "c"}),
    ("mem_save", {"type": "decision", "title": "t", "content": "c", "topic_key": ""}),
    ("mem_save", {"title": "t", "content": "c"}),  # missing type
    ("mem_search", {"query": ""}),
    ("mem_search", {"query": "pool", "limit": 0}),
    ("mem_search", {"query": "pool", "limit": 1001}),
    ("mem_context", {"limit": 0}),
    ("mem_nothing", {}),  # no such tool
]


async def check_bad_calls(client: Client, head) -> None:
    """Every bad call is an MCP error naming the problem; none appends a record."""
    before = await head()
    texts = [await refused(client, tool, arguments) for tool, arguments in BAD_CALLS]
    assert "type" in texts[0] and "title" in texts[1] and "content" in texts[2]
    assert "scope" in texts[3] or "world" in texts[3]
    assert "non-empty string" in texts[8] and "limit" in texts[9] + texts[10] + texts[11]
    for uri in (
        "ledgermem://sessions/no-such-session/sections/observations",
        "ledgermem://sessions/%20bad%20id/sections/observations",
    ):
        with pytest.raises(MCPError):
            await client.read_resource(uri)
    assert await head() == before


async def first_record(url: str, token: str, after: int, match) -> dict:
    """The first record after `after` the tenant's SSE stream delivers that `match`es."""
    async for raw in sse_records(url, after=after, filters={"token": [token]}):
        record = orjson.loads(raw)
        if match(record):
            return record
    raise AssertionError("the stream ended")


def is_saved(content: str):
    def match(record: dict) -> bool:
        return (
            record["type"] == "item.added"
            and record["section"] == "observations"
            and record["payload"]["items"][0]["content"] == content
        )

    return match


# ---- stdio, on a data directory ------------------------------------------------------------------


def log_lines(data: Path) -> int:
    """Complete lines in the log's segments: the log's size, read from the files."""
    return sum(p.read_bytes().count(b"\n") for p in (data / "log").glob("seg-*.jsonl"))


def test_stdio_on_a_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def scenario() -> dict:
        async with stdio("--data", str(data), "--session", "agent-1") as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            templates = {
                t.uri_template for t in (await client.list_resource_templates()).resource_templates
            }
            assert "ledgermem://sessions/{session}/sections/{section}" in templates

            first = structured(await client.call_tool("mem_save", {
                "type": "decision", "title": "Pool size", "content": "pool=50 for the billing db",
                "tags": ["db"], "scope": "session",
            }))  # fmt: skip
            assert first["tier"] == "inserted" and first["session"] == "agent-1"
            again = structured(await client.call_tool("mem_save", {
                "type": "decision", "title": "Pool size", "content": "POOL=50  for the billing DB",
                "scope": "session",
            }))  # fmt: skip
            assert (again["id"], again["tier"], again["duplicates"]) == (
                first["id"],
                "duplicate",
                1,
            )
            keyed = {"type": "config", "title": "Timeout", "topic_key": "db.timeout",
                     "scope": "session"}  # fmt: skip
            one = structured(await client.call_tool("mem_save", {**keyed, "content": "30 s"}))
            two = structured(await client.call_tool("mem_save", {**keyed, "content": "45 s"}))
            assert (two["id"], two["tier"], two["revision"]) == (one["id"], "revised", 2)
            wide = structured(await client.call_tool("mem_save", {
                "type": "preference", "title": "Tone", "content": "brief answers",
            }))  # fmt: skip
            assert wide["session"] == "_tenant"  # no user: tenant-wide by default

            hits = structured(await client.call_tool("mem_search", {"query": "billing pool"}))
            assert [h["id"] for h in hits["hits"]][:1] == [first["id"]]
            assert hits["hits"][0]["title"] == "Pool size"

            context = structured(await client.call_tool("mem_context", {"limit": 5}))
            assert "Pool size" in context["text"] and "brief answers" in context["text"]
            assert "45 s" in context["text"] and "30 s" not in context["text"]

            section = resource_json(
                await client.read_resource("ledgermem://sessions/agent-1/sections/observations")
            )
            assert {i["id"] for i in section["items"]} == {first["id"], one["id"]}
            info = resource_json(await client.read_resource("ledgermem://sessions/agent-1"))
            assert info["sections"]["observations"]["items"] == 2

            async def head() -> int:
                return log_lines(data)

            await check_bad_calls(client, head)
            return first

    first = run(scenario())
    # The process closed the log; what the tools wrote is in it, for any reader.
    memory = Memory.open(data)
    try:
        items = memory.session("agent-1", create=False).get("observations")
        assert [i.content for i in items if i.id == first["id"]] == ["pool=50 for the billing db"]
    finally:
        memory.close()


def test_the_commands_http_transport(tmp_path: Path) -> None:
    data = tmp_path / "data"
    command = [sys.executable, "-m", "ledgermem_cli", "mcp", "--data", str(data)]
    proc = subprocess.Popen(
        [*command, "--transport", "http", "--port", "0", "--session", "h"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV},
    )
    try:
        line = readline_within(proc.stderr, 60, "ledgermem mcp --transport http")
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split()[-1]

        async def scenario() -> tuple[dict, dict]:
            async with Client(url) as client:
                saved = structured(await client.call_tool("mem_save", {
                    "type": "bugfix", "title": "Flaky login", "content": "clock skew on CI",
                }))  # fmt: skip
                hits = structured(await client.call_tool("mem_search", {"query": "clock skew"}))
                return saved, hits

        saved, hits = run(scenario())
        # no user: tenant-wide by default, from the connection's session
        assert [h["id"] for h in hits["hits"]] == [saved["id"]] and saved["session"] == "_tenant"
        # The SDK's own Host and Origin checks guard the loopback port (DNS rebinding).
        rebound = httpx.post(url, json={}, headers={"Host": "evil.example"})
        assert rebound.status_code == 421
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(PATIENCE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    memory = Memory.open(data)  # closed cleanly: the save is in the log
    try:
        (item,) = memory.session("_tenant", create=False).get("observations")
        assert (item.id, item.metadata["session"]) == (saved["id"], "h")
    finally:
        memory.close()
    refused_host = subprocess.run(
        [*command, "--transport", "http", "--host", "0.0.0.0"],
        env={**os.environ, **ENV}, capture_output=True, text=True, timeout=PATIENCE,
    )  # fmt: skip
    assert refused_host.returncode == 2 and "loopback only" in refused_host.stderr


# ---- a running service: /mcp over streamable HTTP, and stdio with --url --------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A real `ledgermem serve`: tenants acme (tok-a; tok-r reads only) and globex (tok-b)."""
    root = tmp_path_factory.mktemp("mcp")
    config = root / "settings.toml"
    config.write_text(
        '[[tokens]]\ntoken = "tok-a"\ntenant = "acme"\nscopes = ["read", "write"]\n'
        '[[tokens]]\ntoken = "tok-r"\ntenant = "acme"\nscopes = ["read"]\n'
        '[[tokens]]\ntoken = "tok-b"\ntenant = "globex"\nscopes = ["read", "write"]\n'
    )
    server = Server(root / "data", "--config", str(config)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=PATIENCE) as client:
            yield client
    finally:
        code = server.stop()
        server.kill()
    # After MCP calls the service still stops as before: streams ended, log closed, exit 0.
    assert code == 0, server.output[-20:]


def readyz_head(client: httpx.Client):
    async def head() -> int:
        return (await asyncio.to_thread(client.get, "/readyz")).json()["head"]

    return head


def test_streamable_http_in_the_service(service: httpx.Client) -> None:
    url = str(service.base_url).rstrip("/")
    head = readyz_head(service)

    async def scenario() -> None:
        after = await head()
        content = "the export job retries three times, then pages ops"
        delivered = asyncio.create_task(first_record(url, "tok-a", after, is_saved(content)))
        async with over_http(url, "tok-a", session="http-1") as a:
            assert {t.name for t in (await a.list_tools()).tools} == TOOLS
            saved = structured(await a.call_tool("mem_save", {
                "type": "discovery", "title": "Export retries", "content": content,
                "scope": "session",
            }))  # fmt: skip
            record = await asyncio.wait_for(delivered, PATIENCE)
            assert (record["tenant"], record["session"]) == ("acme", "http-1")
            assert saved["session"] == "http-1"

            hits = structured(await a.call_tool("mem_search", {"query": "export retries"}))
            assert [h["id"] for h in hits["hits"]] == [saved["id"]]
            section = resource_json(
                await a.read_resource("ledgermem://sessions/http-1/sections/observations")
            )
            assert [i["content"] for i in section["items"]] == [content]
            context = structured(await a.call_tool("mem_context", {}))
            assert "Export retries" in context["text"]
            await check_bad_calls(a, head)

        # Tenant B: the same URL and session name, its own memory.
        async with over_http(url, "tok-b", session="http-1") as b:
            with pytest.raises(MCPError):  # A's session does not exist for B
                await b.read_resource("ledgermem://sessions/http-1/sections/observations")
            assert structured(await b.call_tool("mem_search", {"query": "export retries"})) == {
                "hits": []
            }
            assert "Export retries" not in structured(await b.call_tool("mem_context", {}))["text"]
            section = resource_json(
                await b.read_resource("ledgermem://sessions/http-1/sections/observations")
            )
            assert section["items"] == []  # B's own session of that name, made by mem_context

        # A read-only token of A's tenant reads A's memory and cannot write to it.
        async with over_http(url, "tok-r", session="http-1") as reader:
            hits = structured(await reader.call_tool("mem_search", {"query": "export retries"}))
            assert [h["id"] for h in hits["hits"]] == [saved["id"]]
            before = await head()
            text = await refused(
                reader, "mem_save", {"type": "bugfix", "title": "t", "content": "c"}
            )
            assert "forbidden: this token lacks the 'write' scope" in text
            assert await head() == before

        # A client of the 2025 protocol (the initialize handshake) gets the same answers.
        async with over_http(url, "tok-a", session="http-1", mode="legacy") as old:
            again = structured(await old.call_tool("mem_save", {
                "type": "discovery", "title": "Export retries", "content": content,
                "scope": "session",
            }))  # fmt: skip
            assert (again["id"], again["tier"]) == (saved["id"], "duplicate")

    run(scenario())


def test_the_http_endpoint_keeps_the_services_gates(service: httpx.Client) -> None:
    url = str(service.base_url).rstrip("/")
    before = service.get("/readyz").json()["head"]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    no_token = httpx.post(f"{url}/mcp", json=call, headers=accept)
    assert no_token.status_code == 401
    assert no_token.json()["error"]["code"] == "unauthorized"
    assert no_token.headers["www-authenticate"] == "Bearer"
    bad = httpx.post(f"{url}/mcp", json=call, headers={**accept, "Authorization": "Bearer nope"})
    assert bad.status_code == 401
    foreign = httpx.post(
        f"{url}/mcp",
        json=call,
        headers={**accept, "Authorization": "Bearer tok-a", "Origin": "https://evil.example"},
    )
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (403, "forbidden_origin")
    text = httpx.post(
        f"{url}/mcp",
        content=b"{}",
        headers={**accept, "Authorization": "Bearer tok-a", "Content-Type": "text/plain"},
    )
    assert text.status_code == 415
    session = httpx.post(f"{url}/mcp?session=_tenant", json=call, headers={**accept, "Authorization": "Bearer tok-a"})  # fmt: skip
    assert (session.status_code, session.json()["error"]["code"]) == (400, "invalid_input")
    listed = httpx.post(  # the first call to /mcp imports the SDK: seconds
        f"{url}/mcp",
        json=call,
        headers={**accept, "Authorization": "Bearer tok-a"},
        timeout=PATIENCE,
    )
    assert listed.status_code == 200, listed.text
    assert {t["name"] for t in listed.json()["result"]["tools"]} == TOOLS
    assert listed.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert listed.headers["x-content-type-options"] == "nosniff"
    # Stateless: no stream to open, no session to end (the spec's 405 for both).
    for method in ("GET", "DELETE"):
        answer = httpx.request(method, f"{url}/mcp", headers={"Authorization": "Bearer tok-a"})
        assert (answer.status_code, answer.headers["allow"]) == (405, "POST")
    assert service.get("/readyz").json()["head"] == before


def test_stdio_against_the_service(service: httpx.Client) -> None:
    url = str(service.base_url).rstrip("/")
    head = readyz_head(service)

    async def scenario() -> dict:
        after = await head()
        content = "staging certificates renew on the first monday"
        delivered = asyncio.create_task(first_record(url, "tok-b", after, is_saved(content)))
        async with stdio("--url", url, "--token", "tok-b", "--session", "cli-1") as b:
            saved = structured(await b.call_tool("mem_save", {
                "type": "learning", "title": "Cert renewal", "content": content,
                "scope": "tenant",
            }))  # fmt: skip
            record = await asyncio.wait_for(delivered, PATIENCE)
            assert (record["tenant"], record["session"]) == ("globex", "_tenant")
            # saved from the connection's session, named as Session.observe names it
            assert record["payload"]["items"][0]["metadata"]["session"] == "cli-1"
            hits = structured(await b.call_tool("mem_search", {"query": "certificates renew"}))
            assert [h["id"] for h in hits["hits"]] == [saved["id"]]
            section = resource_json(
                await b.read_resource("ledgermem://sessions/_tenant/sections/observations")
            )
            assert content in [i["content"] for i in section["items"]]
            await check_bad_calls(b, head)
            return hits

    async def same_over_the_mount() -> dict:
        async with over_http(url, "tok-b") as b:
            return structured(await b.call_tool("mem_search", {"query": "certificates renew"}))

    async def tenant_a() -> dict:
        async with stdio("--url", url, "--token", "tok-a") as a:
            return structured(await a.call_tool("mem_search", {"query": "certificates renew"}))

    async def no_tenant() -> str:
        async with stdio("--url", url, "--token", "nope") as nobody:
            return await refused(nobody, "mem_search", {"query": "certificates"})

    async def others(seen: dict) -> None:
        hits, text, mounted = await asyncio.gather(tenant_a(), no_tenant(), same_over_the_mount())
        assert hits == {"hits": []}
        assert mounted == seen  # the embedded backend answers as the REST one did
        assert text.endswith("unauthorized: a valid API token is required (Bearer header, token "
                             "parameter or cookie)")  # fmt: skip

    run(others(run(scenario())))


def test_a_users_saves_reach_their_next_run_and_no_other_user(service: httpx.Client) -> None:
    """One session per run: what run 1 of a user saves (by default, for the user), run 2 of the
    same user sees in mem_context and mem_search, over /mcp and over stdio with --url (the REST
    backend); another user of the same tenant never does; a tenant-wide save reaches both."""
    url = str(service.base_url).rstrip("/")
    head = readyz_head(service)
    mine = "the staging cluster needs the vpn profile named zephyr"
    shared = "the tenant's wiki lives at the quokka address"

    def text_of(context: dict) -> str:
        return context["text"]

    async def scenario() -> None:
        async with over_http(url, "tok-a", session="ana-run-1", user="ana") as run1:
            saved = structured(await run1.call_tool("mem_save", {
                "type": "config", "title": "VPN profile", "content": mine,
            }))  # fmt: skip
            assert (saved["session"], saved["tier"]) == ("_tenant", "inserted")
            info = resource_json(await run1.read_resource("ledgermem://sessions/ana-run-1"))
            assert info["metadata"] == {"user_id": "ana"}  # made with the connection's user
        async with over_http(url, "tok-a", session="ops-run-1") as tenant_run:  # no user
            wide = structured(await tenant_run.call_tool("mem_save", {
                "type": "learning", "title": "Wiki", "content": shared,
            }))  # fmt: skip
            assert wide["session"] == "_tenant"
        section = resource_json(await tenant_run_read(url))
        owners = {i["id"]: i["metadata"].get("user_id") for i in section["items"]}
        assert (owners[saved["id"]], owners[wide["id"]]) == ("ana", None)

        async with over_http(url, "tok-a", session="ana-run-2", user="ana") as run2:
            text = text_of(structured(await run2.call_tool("mem_context", {})))
            assert mine in text and shared in text
            hits = structured(await run2.call_tool("mem_search", {"query": "vpn zephyr"}))
            assert saved["id"] in [h["id"] for h in hits["hits"]]

        async with over_http(url, "tok-a", session="bob-run-1", user="bob") as bob:
            text = text_of(structured(await bob.call_tool("mem_context", {})))
            assert shared in text and mine not in text and "zephyr" not in text
            hits = structured(await bob.call_tool("mem_search", {"query": "vpn zephyr"}))
            assert saved["id"] not in [h["id"] for h in hits["hits"]]
            hits = structured(await bob.call_tool("mem_search", {"query": "wiki quokka"}))
            assert wide["id"] in [h["id"] for h in hits["hits"]]
        # a user's save without a named session: its own default session, mcp@<user>
        async with over_http(url, "tok-a", user="bob") as bob_default:
            own = structured(await bob_default.call_tool("mem_save", {
                "type": "preference", "title": "Editor", "content": "bob edits with helix",
            }))  # fmt: skip
            info = resource_json(await bob_default.read_resource("ledgermem://sessions/mcp%40bob"))
            assert info["metadata"] == {"user_id": "bob"} and own["session"] == "_tenant"

        # A session belongs to one user: naming another is refused, nothing appended.
        before = await head()
        async with over_http(url, "tok-a", session="ana-run-1", user="bob") as wrong:
            text = await refused(
                wrong, "mem_save", {"type": "config", "title": "t", "content": "c"}
            )
            assert "user_conflict: session 'ana-run-1' belongs to user 'ana'" in text
            assert "user_conflict" in await refused(wrong, "mem_context", {})
        async with over_http(url, "tok-a", session="ops-run-1") as no_user:
            text = await refused(no_user, "mem_save", {
                "type": "config", "title": "t", "content": "c", "scope": "user",
            })  # fmt: skip
            assert "user_conflict: scope 'user' needs a user" in text
        assert await head() == before

    async def tenant_run_read(url: str):
        async with over_http(url, "tok-a", session="ops-run-1") as reader:
            return await reader.read_resource("ledgermem://sessions/_tenant/sections/observations")

    async def over_stdio(user: str, session: str) -> tuple[str, list[str]]:
        args = ("--url", url, "--token", "tok-a", "--session", session, "--user", user)
        async with stdio(*args) as client:
            text = text_of(structured(await client.call_tool("mem_context", {})))
            hits = structured(await client.call_tool("mem_search", {"query": "vpn zephyr"}))
            return text, [h["content"] for h in hits["hits"]]

    run(scenario())
    ana_text, ana_hits = run(over_stdio("ana", "ana-run-3"))
    assert mine in ana_text and shared in ana_text and mine in ana_hits
    bob_text, bob_hits = run(over_stdio("bob", "bob-run-2"))
    assert shared in bob_text and "bob edits with helix" in bob_text
    assert mine not in bob_text and mine not in bob_hits


def test_mem_context_with_a_query_recalls_the_users_earlier_sessions(service: httpx.Client) -> None:
    """mem_context(query=...) recalls what the same user said in an earlier session (over /mcp
    and over stdio's REST backend), never what another user said."""
    url = str(service.base_url).rstrip("/")
    auth = {"Authorization": "Bearer tok-a"}
    for session, user, said in (
        ("cleo-chat-1", "cleo", "my bike is a red Bianchi with a cracked saddle"),
        ("dan-chat-1", "dan", "my bike is a blue Pinarello with new tyres"),
    ):
        made = service.put(f"/v1/sessions/{session}", json={"metadata": {"user_id": user}},
                           headers=auth)  # fmt: skip
        assert made.status_code in (200, 201), made.text
        added = service.post(f"/v1/sessions/{session}/sections/messages/items",
                             json={"items": [{"content": said, "role": "user"}]}, headers=auth)  # fmt: skip
        assert added.status_code == 201, added.text

    async def over_mcp() -> str:
        async with over_http(url, "tok-a", session="cleo-chat-2", user="cleo") as client:
            found = await client.call_tool("mem_context", {"query": "which bike do I ride?"})
            return structured(found)["text"]

    async def over_stdio() -> str:
        args = ("--url", url, "--token", "tok-a", "--session", "cleo-chat-3", "--user", "cleo")
        async with stdio(*args) as client:
            found = await client.call_tool("mem_context", {"query": "which bike do I ride?"})
            return structured(found)["text"]

    for text in (run(over_mcp()), run(over_stdio())):
        assert "red Bianchi" in text and "Pinarello" not in text


# ---- without the mcp package --------------------------------------------------------------------


def test_the_service_starts_without_the_mcp_package(tmp_path: Path) -> None:
    blocker = tmp_path / "no-mcp"
    blocker.mkdir()
    # `import mcp` fails and find_spec finds nothing, as when the extra is not installed.
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['mcp'] = None\n")
    env = {"PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"}
    with Server(tmp_path / "data", env=env) as server:
        assert httpx.get(f"{server.url}/readyz").status_code == 200
        created = httpx.put(f"{server.url}/v1/sessions/s1")
        assert created.status_code == 201
        missing = httpx.post(
            f"{server.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
        assert missing.status_code == 404
    done = subprocess.run(
        [sys.executable, "-m", "ledgermem_cli", "mcp", "--data", str(tmp_path / "data")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=PATIENCE,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ledgermem mcp: the mcp package is not installed: pip install 'ledgermem[mcp]' "
        "(docs/mcp.md)"
    ]
