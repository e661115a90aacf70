"""The served API against its own description, both ways, with schemathesis (docs/openapi.md).

A real `ledgermem serve` with data in it, and schemathesis' own command line run against its
`/openapi.json`:

- **positive**: requests the document says are valid are accepted (a 2xx, or the 404/409/422 of a
  state that refuses them, never a 400), and every answer conforms: its status is one the
  operation lists, its media type, headers and body are the ones the document gives; a method the
  document does not list for a path is 405 with an `Allow` naming the ones it does;
- **negative**: requests the document says are invalid are refused with a 4xx, never a 5xx, and
  the refusal is the error body the document gives.

The session, section, item and fact ids the document cannot invent are given to schemathesis as
parameters (its config file), so the operations reach real data; the operations that destroy get
ids of their own, so they do not take the others' data away (cleanupSessions, which removes every
idle session, a tenant of its own). The seed is fixed so that a failure
can be run again; LEDGERMEM_ST_SEED chooses another, LEDGERMEM_ST_EXAMPLES how many cases an
operation gets.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.server import Server

SEED = os.environ.get("LEDGERMEM_ST_SEED", "20261205")
EXAMPLES = os.environ.get("LEDGERMEM_ST_EXAMPLES", "20")
COMMON = ("not_a_server_error", "status_code_conformance", "content_type_conformance")
CHECKS = {
    "positive": (
        *COMMON,
        "response_headers_conformance",
        "response_schema_conformance",
        "positive_data_acceptance",
        "unsupported_method",  # a method the document does not list is 405 with Allow
        "allow_header_conformance",
    ),
    "negative": (*COMMON, "response_schema_conformance", "negative_data_rejection"),
}
ST = Path(sys.executable).with_name("st")


TOKENS = (  # one tenant for the run; cleanupSessions gets one of its own (it removes them all)
    '[[tokens]]\ntoken = "tok-a"\ntenant = "acme"\nscopes = ["read", "write", "admin"]\n'
    '[[tokens]]\ntoken = "tok-c"\ntenant = "scratch"\nscopes = ["read", "write", "admin"]\n'
)
A = {"Authorization": "Bearer tok-a"}
# A schema-valid request may still meet a state that refuses it: an id that does not exist (404),
# a stale version, an ended session, a retracted fact (409), a budget it does not fit (422), time
# travel already running (429). What it must never get is the 400 of a malformed request.
ACCEPTED = ("2xx", "401", "403", "404", "409", "422", "429")
HOOKS = Path(__file__).parent / "helpers" / "schemathesis_hooks.py"


def _seed(client: httpx.Client) -> dict[str, str]:
    """Data for the operations to reach; the ids schemathesis is to use, by parameter."""

    def ok(answer: httpx.Response) -> dict:
        assert answer.status_code < 300, answer.text
        return answer.json() if answer.content else {}

    for session in ("demo", "doomed", "erasable", "ending", "ended", "pruned"):
        ok(client.put(f"/v1/sessions/{session}", headers=A))
    items = "/v1/sessions/{}/sections/findings/items"
    item = ok(client.post(items.format("demo"), json={"content": "margin 12%"}, headers=A))
    turns = [{"role": r, "content": f"{r} turn {n}: " + "words " * 40} for n in range(8)
             for r in ("user", "assistant")]  # fmt: skip
    messages = "/v1/sessions/demo/sections/messages/items"
    ok(client.post(messages, json={"items": turns}, headers=A))  # for compactSession to compact
    ok(client.post(items.format("erasable"), json={"content": "to erase"}, headers=A))
    pruned = ok(client.post(items.format("pruned"), json={"content": "to remove"}, headers=A))
    ok(client.post("/v1/sessions/ended/end", headers=A))
    fact = {"subject": "acme", "predicate": "ceo", "object": "ada"}
    facts = ok(client.post("/v1/facts", json=fact, headers=A))
    agentops = {"session_id": "ao", "project": "demo", "type": "decision", "content": "use tiles"}
    ok(client.post("/sessions", json={"id": "ao", "project": "demo"}, headers=A))
    ok(client.post("/sessions", json={"id": "ao-ending", "project": "demo"}, headers=A))
    kept = ok(client.post("/observations", json={**agentops, "title": "kept"}, headers=A))
    gone = {**agentops, "title": "gone", "content": "to delete"}  # other content: not a duplicate
    gone = ok(client.post("/observations", json=gone, headers=A))
    return {
        "item": item["item"]["id"],
        "pruned_item": pruned["item"]["id"],
        "fact": (facts.get("facts") or [facts.get("fact")])[0]["id"],
        "observation": str(kept["id"]),
        "gone_observation": str(gone["id"]),
    }


def _config(ids: dict[str, str]) -> str:
    def operation(op_id: str, **parameters: str) -> str:
        table = ", ".join(f'"path.{k}" = "{v}"' for k, v in parameters.items())
        return f'\n[[operations]]\ninclude-operation-id = "{op_id}"\nparameters = {{ {table} }}\n'

    return (
        f'hooks = "{HOOKS}"\n'
        f'headers = {{ Authorization = "{A["Authorization"]}" }}\n'
        f"[checks.positive_data_acceptance]\nexpected-statuses = {list(ACCEPTED)}\n"
        "[parameters]\n"
        '"path.session" = "demo"\n"path.section" = "findings"\n'
        f'"path.item" = "{ids["item"]}"\n"path.fact" = "{ids["fact"]}"\n'
        + operation("deleteSession", session="doomed")
        + operation("eraseSession", session="erasable")
        + operation("endSession", session="ending")
        + operation("getSessionSummary", session="ended")
        + operation("configureSection", section="scratch")
        + operation("removeItem", session="pruned", item=ids["pruned_item"])
        + operation("endAgentOpsSession", id="ao-ending")
        + operation("getAgentOpsObservation", id=ids["observation"])
        + operation("updateAgentOpsObservation", id=ids["observation"])
        + operation("deleteAgentOpsObservation", id=ids["gone_observation"])
        + '\n[[operations]]\ninclude-operation-id = "getAgentOpsTimeline"\n'
        f'parameters = {{ "query.observation_id" = {ids["observation"]}, '
        '"query.project" = "demo" }\n'
        + '\n[[operations]]\ninclude-operation-id = "cleanupSessions"\n'
        'headers = { Authorization = "Bearer tok-c" }\n'
        # A stream answers for as long as the client stays: the long-poll is asked not to wait,
        # the JSONL stream not to follow (it ends at the head; "false" as text, as a query
        # string carries it), and an SSE stream, which only ends when its client leaves, is
        # read for two seconds.
        '\n[[operations]]\ninclude-operation-id = "pollRecords"\nparameters = { "query.wait" = 0 }\n'
        '\n[[operations]]\ninclude-operation-id = "streamJsonl"\n'
        'parameters = { "query.follow" = "false" }\n'
        '\n[[operations]]\ninclude-operation-id = "streamSse"\nrequest-timeout = 2\n'
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    if not ST.exists():
        pytest.fail(
            f"{ST} is missing: schemathesis is in the test extra (pip install -e '.[test]')"
        )
    root = tmp_path_factory.mktemp("conformance")
    (root / "settings.toml").write_text(TOKENS)
    with (
        Server(root / "data", "--config", str(root / "settings.toml")) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        config = root / "schemathesis.toml"
        config.write_text(_config(_seed(client)))
        yield server, config, root


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_the_api_conforms_to_its_document(served, mode):
    server, config, root = served
    reports = root / f"report-{mode}"
    command = [
        str(ST), "--config-file", str(config), "run", server.url + "/openapi.json",
        "--mode", mode, "--checks", ",".join(CHECKS[mode]),
        "--phases", "examples,coverage,fuzzing", "--max-examples", EXAMPLES, "--seed", SEED,
        "--generation-database", "none", "--request-timeout", "20",
        # One worker: with two, schemathesis' threads once met CPython 3.11's spurious
        # "AST constructor recursion depth mismatch" (gh-106905, seen in threaded programs).
        "--workers", "1",
        "--no-color", "--report", "junit", "--report-dir", str(reports),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=root)
    shutil.rmtree(reports, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-4000:]
    # It ran, over every operation of the document, with many cases each.
    selected = re.search(r"Selected: (\d+)/(\d+)", done.stdout)
    tested = re.search(r"Tested: (\d+)", done.stdout)
    cases = re.search(r"(\d+) generated", done.stdout)
    assert selected and tested and cases, done.stdout[-4000:]
    paths = httpx.get(server.url + "/openapi.json", timeout=30).json()["paths"]
    # Every operation but the document's own GET, which schemathesis leaves out of a run loaded
    # from it (tests/test_openapi_document.py holds that one).
    operations = sum(len(methods) for methods in paths.values()) - 1
    assert int(selected.group(1)) == int(selected.group(2)) == int(tested.group(1)) == operations
    assert int(cases.group(1)) >= 5 * operations, done.stdout[-4000:]
