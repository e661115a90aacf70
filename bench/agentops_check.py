"""A black-box check of ledgermem against AgentOps' memory service (docs/agentops.md).

Each check is one behaviour of agentops-memory (github.com/samyn92/agentops-memory) as its own
tests (server_test.go, store_test.go) and handlers (server.go, store.go) show it, or one call its
runtime (agentops-runtime-fantasy, memory.go) makes as agentops-core deploys it, asked of our
service over HTTP only. The behaviours are described here in our words; none of their code is.
A check passes when our answer is the one their service gives (status, and the fields their
tests read).

Usage (from the project root, with the project's venv):

    .venv/bin/python bench/agentops_check.py                  # starts `ledgermem serve` itself
    .venv/bin/python bench/agentops_check.py --url URL --token TOKEN [--runtime-host HOST]

Started by the script, the service has one token (tenant `agentops`) and is set up as an
AgentOps deployment would set it up: `LEDGERMEM_AGENTOPS_TENANT=agentops` (no-token AgentOps
calls act for that tenant, from loopback) and `LEDGERMEM_ALLOWED_HOSTS=memory.agents.svc` (the
cluster host name agentops-core gives the runtime: `http://<serverRef>.<namespace>.svc:7437`).
A version without those settings ignores the variables, and the runtime checks then fail.
Prints one line per check and `N of M match`; exits 0 only when all match.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "agentops-check-token"
TENANT = "agentops"
RUNTIME_HOST = "memory.agents.svc:7437"

Check = Callable[[httpx.Client], str | None]  # None: matches; else what differs
CHECKS: list[tuple[str, Check]] = []


def check(name: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS.append((name, fn))
        return fn

    return register


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _session(c: httpx.Client, project: str = "proj", sid: str | None = None) -> str:
    sid = sid or _id("s")
    r = c.post("/sessions", json={"id": sid, "project": project})
    if r.status_code != 201:
        raise AssertionError(f"create session: {r.status_code} {r.text}")
    return sid


def _observe(c: httpx.Client, sid: str, project: str = "proj", **fields: object) -> httpx.Response:
    body = {"session_id": sid, "type": "decision", "title": "Test", "content": "Test content",
            "project": project, **fields}  # fmt: skip
    return c.post("/observations", json=body)


def _expect(r: httpx.Response, status: int) -> str | None:
    return None if r.status_code == status else f"{r.status_code} {r.text[:200]}"


# ---- server_test.go ---------------------------------------------------------------------------


@check("health is 200")
def _health(c: httpx.Client) -> str | None:
    return _expect(c.get("/health"), 200)


@check("create session with an empty id is 400")
def _empty_id(c: httpx.Client) -> str | None:
    return _expect(c.post("/sessions", json={"id": "", "project": "test"}), 400)


@check("create session with an empty project is 400")
def _empty_project(c: httpx.Client) -> str | None:
    return _expect(c.post("/sessions", json={"id": _id("s"), "project": ""}), 400)


@check("an observation missing its fields is 400 naming each")
def _missing(c: httpx.Client) -> str | None:
    r = c.post("/observations", json={})
    if r.status_code != 400:
        return f"{r.status_code}"
    said = r.json().get("error", "")
    missing = [f for f in ("session_id", "type", "title", "content", "project") if f not in said]
    return f"not named: {missing}" if missing else None


@check("a title over 500 characters is 400")
def _long_title(c: httpx.Client) -> str | None:
    return _expect(_observe(c, _session(c), title="x" * 501), 400)


@check("more than 20 tags is 400")
def _many_tags(c: httpx.Client) -> str | None:
    return _expect(_observe(c, _session(c), tags=[f"t{n}" for n in range(21)]), 400)


@check("a valid observation is 201 created")
def _valid(c: httpx.Client) -> str | None:
    r = _observe(c, _session(c), tags=["go"])
    if r.status_code != 201:
        return f"{r.status_code} {r.text[:200]}"
    return None if r.json().get("action") == "created" else r.text


@check("a body over 1 MiB is 400")
def _big(c: httpx.Client) -> str | None:
    sid = _session(c)
    body = {"session_id": sid, "type": "decision", "title": "t", "content": "x" * (1 << 20),
            "project": "proj"}  # fmt: skip
    return _expect(c.post("/observations", json=body), 400)


@check("the full CRUD flow (201, 201, 200, 200, 200, 200, 200, 204, then not 200)")
def _crud(c: httpx.Client) -> str | None:
    sid = _session(c, "myproject")
    r = _observe(c, sid, "myproject", title="Chose Go", tags=["go", "language"],
                 content="Selected Go for its simplicity and SQLite support.")  # fmt: skip
    if r.status_code != 201:
        return f"observe {r.status_code}"
    obs = r.json()["id"]
    steps = [
        ("get", c.get(f"/observations/{obs}"), 200),
        ("patch", c.patch(f"/observations/{obs}", json={"title": "Chose Go for memory"}), 200),
        ("search", c.get("/search", params={"q": "SQLite", "project": "myproject"}), 200),
        ("context", c.get("/context", params={"project": "myproject", "query": "Go language"}),
         200),
        ("stats", c.get("/stats", params={"project": "myproject"}), 200),
        ("delete", c.delete(f"/observations/{obs}"), 204),
    ]  # fmt: skip
    for name, answer, status in steps:
        if answer.status_code != status:
            return f"{name}: {answer.status_code}"
    return "deleted still 200" if c.get(f"/observations/{obs}").status_code == 200 else None


# ---- store_test.go ----------------------------------------------------------------------------


@check("creating a session twice answers it both times")
def _idempotent(c: httpx.Client) -> str | None:
    sid = _id("s")
    first = c.post("/sessions", json={"id": sid, "project": "Test"})
    second = c.post("/sessions", json={"id": sid, "project": "Test"})
    ok = first.status_code == second.status_code == 201 and second.json()["id"] == sid
    return None if ok else f"{first.status_code} {second.status_code}"


@check("a session's project is lowercased")
def _lower(c: httpx.Client) -> str | None:
    r = c.post("/sessions", json={"id": _id("s"), "project": "MyProject"})
    return None if r.json().get("project") == "myproject" else r.text


@check("ending with 4 messages counts 4 and summarizes")
def _end(c: httpx.Client) -> str | None:
    sid = _session(c)
    msgs = [{"role": "user", "content": "Hello world"}, {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "Thanks"}, {"role": "assistant", "content": "Welcome"}]  # fmt: skip
    r = c.post(f"/sessions/{sid}/end", json={"messages": msgs})
    if r.status_code != 200:
        return f"{r.status_code}"
    body = r.json()
    return None if body["message_count"] == 4 and body["summary"] else r.text


@check("recent sessions are the project's")
def _recent(c: httpx.Client) -> str | None:
    project = _id("p")
    _session(c, project), _session(c, project), _session(c, project + "-other")
    r = c.get("/sessions/recent", params={"project": project, "limit": 10})
    return None if len(r.json()) == 2 else r.text


@check("tier 3: a new observation is created, revision 1, duplicate 1")
def _tier3(c: httpx.Client) -> str | None:
    body = _observe(c, _session(c), content=f"We chose Go {uuid.uuid4()}").json()
    ok = (body["action"], body["revision_count"], body["duplicate_count"]) == ("created", 1, 1)
    return None if ok else str(body)


@check("tier 1: the same topic key updates in place (revision 2, same id, new content)")
def _tier1(c: httpx.Client) -> str | None:
    sid, key = _session(c), _id("config/db/pool")
    first = _observe(c, sid, type="config", title="DB pool", content="size 10", topic_key=key)
    second = _observe(c, sid, type="config", title="DB pool updated", content="size 20",
                      topic_key=key).json()  # fmt: skip
    if (second["action"], second["revision_count"]) != ("updated", 2):
        return str(second)
    if second["id"] != first.json()["id"]:
        return "another id"
    got = c.get(f"/observations/{second['id']}").json()
    return None if (got["title"], got["content"]) == ("DB pool updated", "size 20") else str(got)


@check("tier 2: the same content, type and title is deduplicated (duplicate 2, same id)")
def _tier2(c: httpx.Client) -> str | None:
    sid, content = _session(c), f"The service crashes on empty input {uuid.uuid4()}"
    first = _observe(c, sid, type="discovery", title="Found a bug", content=content).json()
    second = _observe(c, sid, type="discovery", title="Found a bug", content=content).json()
    ok = second["action"] == "deduplicated" and second["duplicate_count"] == 2
    return None if ok and second["id"] == first["id"] else str(second)


@check("tier 2 ignores case")
def _tier2_case(c: httpx.Client) -> str | None:
    sid, tail = _session(c), uuid.uuid4().hex
    _observe(c, sid, type="discovery", content=f"Hello World {tail}")
    second = _observe(c, sid, type="discovery", content=f"hello world {tail}").json()
    return None if second["action"] == "deduplicated" else str(second)


@check("the same content in another project is created")
def _other_project(c: httpx.Client) -> str | None:
    content = f"Same content {uuid.uuid4()}"
    _observe(c, _session(c, "proj1"), "proj1", content=content)
    second = _observe(c, _session(c, "proj2"), "proj2", content=content).json()
    return None if second["action"] == "created" else str(second)


@check("an observation reads back with its tags")
def _get(c: httpx.Client) -> str | None:
    r = _observe(c, _session(c), title="Test obs", tags=["go", "testing"],
                 content=f"Test content {uuid.uuid4()}")  # fmt: skip
    got = c.get(f"/observations/{r.json()['id']}").json()
    return None if got.get("tags") == ["go", "testing"] else str(got)


@check("a PATCH of the title keeps the content")
def _patch(c: httpx.Client) -> str | None:
    content = f"Original content {uuid.uuid4()}"
    obs = _observe(c, _session(c), title="Original", content=content).json()["id"]
    c.patch(f"/observations/{obs}", json={"title": "Updated"})
    got = c.get(f"/observations/{obs}").json()
    return None if (got["title"], got["content"]) == ("Updated", content) else str(got)


@check("a soft delete hides the observation")
def _soft(c: httpx.Client) -> str | None:
    obs = _observe(c, _session(c), content=f"soft {uuid.uuid4()}").json()["id"]
    c.delete(f"/observations/{obs}")
    return _expect(c.get(f"/observations/{obs}"), 404)


@check("a hard delete hides the observation")
def _hard(c: httpx.Client) -> str | None:
    obs = _observe(c, _session(c), content=f"hard {uuid.uuid4()}").json()["id"]
    c.delete(f"/observations/{obs}", params={"hard": "true"})
    return _expect(c.get(f"/observations/{obs}"), 404)


@check("search ranks the matching observation first")
def _search(c: httpx.Client) -> str | None:
    project = _id("p")
    sid = _session(c, project)
    _observe(c, sid, project, title="Database architecture",
             content="Chose SQLite with FTS5 for full-text search capabilities.")  # fmt: skip
    _observe(c, sid, project, type="bugfix", title="Fixed API timeout",
             content="The REST API was timing out due to missing connection pooling.")  # fmt: skip
    hits = c.get("/search", params={"q": "SQLite", "project": project}).json()
    return None if hits and hits[0]["title"] == "Database architecture" else str(hits)


@check("search stems words (run matches running)")
def _stem(c: httpx.Client) -> str | None:
    project = _id("p")
    _observe(c, _session(c, project), project, type="discovery", title="Running processes",
             content="The service was running multiple goroutines that were leaking.")  # fmt: skip
    hits = c.get("/search", params={"q": "run goroutine", "project": project}).json()
    return None if hits else "no hit"


@check("a query holding '/' finds topic keys")
def _topic_search(c: httpx.Client) -> str | None:
    project = _id("p")
    _observe(c, _session(c, project), project, type="config", title="Pool size",
             content="Set to 10", topic_key="config/db/pool")  # fmt: skip
    hits = c.get("/search", params={"q": "config/db", "project": project}).json()
    return None if hits else "no hit"


@check("context ranks the query's observation first")
def _context(c: httpx.Client) -> str | None:
    project = _id("p")
    sid = _session(c, project)
    _observe(c, sid, project, title="Memory architecture",
             content="Three-layer memory model with SQLite backend.")  # fmt: skip
    _observe(c, sid, project, type="bugfix", title="Fixed login bug",
             content="Auth token was not being refreshed on expiry.")  # fmt: skip
    c.post(f"/sessions/{sid}/end", json={"messages": [{"role": "user", "content": "memory"}]})
    got = c.get("/context", params={"project": project, "query": "memory"}).json()
    first = got["recent_observations"][:1]
    return None if first and first[0]["title"] == "Memory architecture" else str(got)


@check("context without a query gives the recent observations")
def _context_recent(c: httpx.Client) -> str | None:
    project = _id("p")
    sid = _session(c, project)
    _observe(c, sid, project, title="First observation", content="This was first")
    _observe(c, sid, project, title="Second observation", content="This was second")
    got = c.get("/context", params={"project": project}).json()
    return None if len(got["recent_observations"]) == 2 else str(got)


@check("stats count a project's sessions and observations")
def _stats(c: httpx.Client) -> str | None:
    project = _id("p")
    sid = _session(c, project)
    _observe(c, sid, project, title="T1", content="C1")
    got = c.get("/stats", params={"project": project}).json()
    return None if (got["total_sessions"], got["total_observations"]) == (1, 1) else str(got)


@check("an export imports again (1 session, 1 observation)")
def _export(c: httpx.Client) -> str | None:
    project = _id("p")
    _observe(c, _session(c, project), project, content="Content")
    exported = c.get("/export", params={"project": project}).json()
    if (len(exported["sessions"]), len(exported["observations"])) != (1, 1):
        return str(exported)
    got = c.post("/import", json=exported).json()
    return None if got == {"imported_sessions": 1, "imported_observations": 1} else str(got)


@check("a timeline holds its anchor")
def _timeline(c: httpx.Client) -> str | None:
    project = _id("p")
    sid = _session(c, project)
    ids = [_observe(c, sid, project, title=f"Obs {n}", content=f"Content {n}").json()["id"]
           for n in "ABCDE"]  # fmt: skip
    got = c.get("/timeline", params={"observation_id": ids[2], "before": 2, "after": 2}).json()
    return None if any(e["id"] == ids[2] for e in got) else str(got)


# ---- server.go and store.go: what the handlers take and answer ---------------------------------


@check("any observation type up to 50 characters is taken (the CRD names any)")
def _any_type(c: httpx.Client) -> str | None:
    sid = _session(c)
    for kind in ("lesson", "procedure", "Runbook Step", "t" * 50):
        r = _observe(c, sid, type=kind, content=f"typed {kind} {uuid.uuid4()}")
        if r.status_code != 201:
            return f"{kind!r}: {r.status_code} {r.text[:120]}"
        if c.get(f"/observations/{r.json()['id']}").json()["type"] != kind:
            return f"{kind!r} read back otherwise"
    return _expect(_observe(c, sid, type="t" * 51), 400)


@check("a project name with a space (or any other character) keeps observations")
def _project_chars(c: httpx.Client) -> str | None:
    for project in ("my project", "team:web", "Zoë/ünïcode", "p" * 200):
        sid = _session(c, project)
        r = _observe(c, sid, project, content=f"in {project} {uuid.uuid4()}")
        if r.status_code != 201:
            return f"{project[:20]!r}: {r.status_code} {r.text[:120]}"
        got = c.get(f"/observations/{r.json()['id']}").json()
        if got["project"] != project.lower():
            return f"project read back as {got['project']!r}"
        recent = c.get("/observations/recent", params={"project": project.lower()}).json()
        if [o["id"] for o in recent] != [got["id"]]:
            return f"{project[:20]!r}: recent {recent}"
    return None


@check("the same content with another title is a new observation")
def _other_title(c: httpx.Client) -> str | None:
    sid, content = _session(c), f"Same content {uuid.uuid4()}"
    first = _observe(c, sid, title="One title", content=content).json()
    second = _observe(c, sid, title="Another title", content=content).json()
    ok = second["action"] == "created" and second["id"] != first["id"]
    return None if ok else str(second)


@check("the same content with another type is a new observation")
def _other_type(c: httpx.Client) -> str | None:
    sid, content = _session(c), f"Same content {uuid.uuid4()}"
    _observe(c, sid, type="decision", content=content)
    second = _observe(c, sid, type="bugfix", content=content).json()
    return None if second["action"] == "created" else str(second)


@check("ending an unknown session is 200 with the transcript's count")
def _end_unknown(c: httpx.Client) -> str | None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    r = c.post(f"/sessions/{_id('ghost')}/end", json={"messages": msgs})
    if r.status_code != 200:
        return f"{r.status_code} {r.text[:120]}"
    return None if r.json()["message_count"] == 2 else r.text


@check("ending a session twice is 200 both times")
def _end_twice(c: httpx.Client) -> str | None:
    sid = _session(c)
    first = c.post(f"/sessions/{sid}/end", json={"messages": [{"role": "user", "content": "a"}]})
    second = c.post(f"/sessions/{sid}/end", json={})
    return None if first.status_code == second.status_code == 200 else f"{second.status_code}"


@check("deleting an unknown observation is 204")
def _delete_unknown(c: httpx.Client) -> str | None:
    return _expect(c.delete("/observations/999999999999"), 204)


# ---- the runtime as agentops-core deploys it: a URL, no token -----------------------------------


@check("the runtime, with no token, by the cluster host name: its calls are answered")
def _runtime(c: httpx.Client) -> str | None:
    runtime = httpx.Client(base_url=str(c.base_url), headers={"Host": RUNTIME_HOST}, timeout=30)
    with runtime:
        sid, project = str(uuid.uuid4()), _id("agent")
        steps = [
            ("init", runtime.post("/sessions", json={"id": sid, "project": project}), 201),
            ("context", runtime.get("/context", params={"project": project, "limit": 5,
                                                        "query": "deploy"}), 200),
            ("mem_save", runtime.post("/observations", json={
                "session_id": sid, "type": "lesson", "title": "Deploys", "project": project,
                "content": "roll out one zone at a time"}), 201),
            ("search", runtime.get("/search", params={"q": "zone", "project": project}), 200),
            ("end", runtime.post(f"/sessions/{sid}/end", json={}), 200),
        ]  # fmt: skip
        for name, answer, status in steps:
            if answer.status_code != status:
                return f"{name}: {answer.status_code} {answer.text[:160]}"
    # what it saved is the configured tenant's: the token of that tenant reads it
    found = c.get("/observations/recent", params={"project": project}).json()
    return None if [o["type"] for o in found] == ["lesson"] else f"not in the tenant: {found}"


# ---- running ----------------------------------------------------------------------------------


@contextlib.contextmanager
def started_service() -> Iterator[str]:
    """`ledgermem serve` on loopback, set up as an AgentOps deployment (the module's notes)."""
    with tempfile.TemporaryDirectory() as root:
        config = Path(root) / "settings.toml"
        config.write_text(
            f'[[tokens]]\ntoken = "{TOKEN}"\ntenant = "{TENANT}"\nscopes = ["read", "write"]\n'
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LEDGERMEM_AGENTOPS_TENANT": TENANT,
            "LEDGERMEM_ALLOWED_HOSTS": RUNTIME_HOST.split(":")[0],
        }
        command = [sys.executable, "-m", "ledgermem_cli", "serve", "--data", f"{root}/data",
                   "--port", "0", "--config", str(config), "--unsafe-no-fsync"]  # fmt: skip
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        url: list[str] = []
        ready = threading.Event()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("listening on "):
                    url.append(line.split()[-1])
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        try:
            if not ready.wait(60) or not url:
                raise SystemExit("ledgermem serve did not start")
            yield url[0]
        finally:
            proc.terminate()
            proc.wait(30)


def run(url: str, token: str) -> int:
    matched = 0
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for name, fn in CHECKS:
            try:
                differs = fn(client)
            except Exception as exc:  # a check that breaks is a difference, named
                differs = f"{type(exc).__name__}: {exc}"
            matched += differs is None
            print(f"{'match' if differs is None else 'DIFFERS'}  {name}"
                  + ("" if differs is None else f"\n         {differs}"))  # fmt: skip
    print(f"{matched} of {len(CHECKS)} match")
    return 0 if matched == len(CHECKS) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running service (else one is started)")
    parser.add_argument("--token", default=TOKEN, help="a token of the AgentOps tenant")
    given = parser.parse_args()
    if given.url:
        return run(given.url, given.token)
    with started_service() as url:
        return run(url, given.token)


if __name__ == "__main__":
    sys.exit(main())
