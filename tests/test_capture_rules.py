"""Declarative capture (AgentOps' memorySaveRules and contextInjectTools): the pure matching, the
rules loaded from the TOML config (a bad one refused at load, naming it), a tool call reported
through `Session.tool_call` and `POST /v1/sessions/{s}/tool-calls`, and replay equal to live."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from helpers.described import conforms, reply_schema
from server import Server
from test_search import Clock

from sections.errors import ConfigError, SessionEnded
from sections.model import capture_rules
from sections.model.capture_rules import CaptureRules
from sections.model.config import MemoryConfig, load_config
from sections.runtime.memory import Memory

RULES = """
[[memory_save_rules]]
name = "bash-errors"
tool = "bash"
match_output = "error|panic|fatal"
type = "bugfix"

[[memory_save_rules]]
name = "kubectl-apply"
tool = "bash"
match_args = { command = "^kubectl apply" }
type = "decision"
scope = "tenant"

[[context_inject_tools]]
name = "bash-memories"
tool = "bash"
limit = 2
"""


def _rules(text: str = RULES, tmp_path=None) -> CaptureRules:
    path = tmp_path / "memory.toml"
    path.write_text(text)
    return load_config(path).capture


# ---- matching, pure ------------------------------------------------------------------------------


def test_rules_load_from_the_config(tmp_path):
    rules = _rules(tmp_path=tmp_path)
    assert [r.name for r in rules.save] == ["bash-errors", "kubectl-apply"]
    assert rules.save[1].scope == "tenant" and rules.save[0].scope == "session"
    assert [(r.name, r.query, r.limit) for r in rules.inject] == [
        ("bash-memories", "from_tool_args", 2)
    ]


def test_an_output_pattern_matches_anywhere_in_the_output(tmp_path):
    rules = _rules(tmp_path=tmp_path)
    rule = capture_rules.save_rule_for(rules, "bash", {"command": "make"}, "build: fatal: no")
    assert rule is not None and rule.name == "bash-errors"


def test_the_first_rule_that_matches_wins_and_argument_patterns_must_all_match(tmp_path):
    rules = _rules(tmp_path=tmp_path)
    applied = capture_rules.save_rule_for(
        rules, "bash", {"command": "kubectl apply -f x.yaml"}, "created"
    )
    assert applied is not None and applied.name == "kubectl-apply"
    both = capture_rules.save_rule_for(rules, "bash", {"command": "kubectl apply"}, "error")
    assert both is not None and both.name == "bash-errors"  # first in the config


@pytest.mark.parametrize(
    ("tool", "args", "output"),
    [
        ("bash", {"command": "ls"}, "all fine"),  # output pattern not found, args rule not met
        ("bash", {}, "fine"),  # the argument is missing
        ("bash", {"command": 7}, "fine"),  # not a string
        ("python", {"command": "kubectl apply"}, "error"),  # another tool
    ],
)
def test_calls_no_rule_matches(tmp_path, tool, args, output):
    assert capture_rules.save_rule_for(_rules(tmp_path=tmp_path), tool, args, output) is None


def test_an_inject_rule_takes_the_tools_main_argument_or_its_fixed_query():
    rules = capture_rules.load(
        {"context_inject_tools": [{"tool": "bash"}, {"tool": "web", "query": "release notes"}]}
    )
    bash = capture_rules.inject_rule_for(rules, "bash")
    assert capture_rules.query_of(bash, {"command": "helm upgrade"}) == "helm upgrade"
    assert capture_rules.query_of(bash, {"path": "/etc/x"}) == "/etc/x"
    assert capture_rules.query_of(bash, {"other": "x"}) is None
    web = capture_rules.inject_rule_for(rules, "web")
    assert capture_rules.query_of(web, {"query": "ignored"}) == "release notes"
    assert capture_rules.inject_rule_for(rules, "python") is None


def test_the_observation_has_agentops_title_and_tags_and_names_the_rule():
    rule = capture_rules.load({"memory_save_rules": [{"name": "r", "tool": "bash"}]}).save[0]
    obs = capture_rules.observation_of(rule, "bash", {"command": "make " + "x" * 100}, "o" * 1500)
    assert obs["title"] == "Auto-captured: bash — " + ("make " + "x" * 100)[:80] + "..."
    assert obs["content"] == "o" * 1000 + "..."
    assert obs["type"] == "discovery" and obs["tags"] == ["auto-capture", "hook", "bash"]
    assert obs["source"] == {"rule": "r", "tool": "bash"}


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ('[[memory_save_rules]]\ntool = "bash"\nmatch_output = "(unclosed"\n',
         "memory_save_rules[0]: match_output '(unclosed' is not a regular expression"),
        ('[[memory_save_rules]]\ntool = "bash"\nmatch_args = { command = "[" }\n',
         "memory_save_rules[0]: match_args.command '[' is not a regular expression"),
        ('[[memory_save_rules]]\ntool = "bash"\ntype = " "\n',
         "memory_save_rules[0]: type ' ': an observation's type must be a non-blank string"),
        (f'[[memory_save_rules]]\ntool = "bash"\ntype = "{"t" * 51}"\n',
         "an observation's type is at most 50 characters"),
        ('[[memory_save_rules]]\ntool = "bash"\nscope = "global"\n',
         "memory_save_rules[0]: scope 'global' is not one of session, user, tenant"),
        ('[[memory_save_rules]]\nname = "x"\n', "memory_save_rules[0]: tool must be"),
        ('[[memory_save_rules]]\ntool = "bash"\nmatchOutput = "e"\n',
         "memory_save_rules[0]: unknown keys ['matchOutput']"),
        ('[[memory_save_rules]]\nname = "a"\ntool = "t"\n[[context_inject_tools]]\nname = "a"\n'
         'tool = "t"\n', "context_inject_tools[0]: another rule is named 'a' already"),
        ('[[context_inject_tools]]\ntool = "bash"\nlimit = 11\n',
         "context_inject_tools[0]: limit must be an integer from 1 to 10"),
        ('memory_save_rules = "bash"\n', "memory_save_rules must be an array of tables"),
    ],
)  # fmt: skip
def test_a_bad_rule_is_refused_at_load_naming_it(tmp_path, toml, named):
    path = tmp_path / "memory.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert named in str(caught.value) and str(path) in str(caught.value)


def test_a_bad_rule_stops_the_memory_from_opening(tmp_path):
    path = tmp_path / "memory.toml"
    path.write_text('[[memory_save_rules]]\ntool = "bash"\nmatch_output = "("\n')
    with pytest.raises(ConfigError, match=r"memory_save_rules\[0\]"):
        Memory.open(tmp_path / "data", config=path)
    assert not (tmp_path / "data" / "log").exists()


# ---- tool calls on a memory --------------------------------------------------------------------


@pytest.fixture
def mem(tmp_path):
    path = tmp_path / "memory.toml"
    path.write_text(RULES)
    memory = Memory.open(tmp_path / "data", seg_bits=6, clock=Clock(), config=path)
    yield memory
    memory.close()


def test_a_matching_result_becomes_an_observation_whose_record_names_the_rule(mem):
    s = mem.session("s")
    answer = s.tool_call("bash", {"command": "make"}, "error: missing header", call_id="c1")
    saved = answer["saved"]
    assert saved["rule"] == "bash-errors" and saved["tier"] == "inserted"
    record = mem.reader.get(int(saved["id"]))
    assert record.type == "item.added" and record.section == "observations"
    item = record.payload["items"][0]
    assert item["kind"] == "bugfix" and item["content"] == "error: missing header"
    assert item["metadata"]["rule"] == "bash-errors"
    assert item["metadata"]["tool"] == "bash" and item["metadata"]["call_id"] == "c1"


def test_a_tenant_scoped_rule_writes_tenant_wide(mem):
    s = mem.session("s")
    saved = s.tool_call("bash", {"command": "kubectl apply -f a.yaml"}, "configured")["saved"]
    assert saved["rule"] == "kubectl-apply" and saved["session"] == "_tenant"


def test_a_result_no_rule_matches_is_not_saved(mem):
    s = mem.session("s")
    size = mem.writer.size
    answer = s.tool_call("python", {"code": "1+1"}, "2")
    assert answer == {"injected": None, "saved": None}
    assert mem.writer.size == size  # nothing to trace, nothing to save: nothing appended


def test_an_inject_rule_records_what_it_found_before_the_tool_naming_the_rule(mem):
    s = mem.session("s")
    s.observe("bugfix", "Flaky build", "make fails when the cache is cold")
    answer = s.tool_call("bash", {"command": "make cache"}, "ok")
    injected = answer["injected"]
    assert injected["rule"] == "bash-memories" and injected["query"] == "make cache"
    assert [f["session"] for f in injected["found"]] == ["_tenant"]  # observe is tenant-wide
    trace = mem.reader.get(injected["seq"])
    assert trace.type == "items.read" and trace.payload["purpose"] == "inject"
    assert trace.payload["rule"] == "bash-memories" and trace.payload["found"] == injected["found"]
    # traced, not injected: no context record, no message came of it
    assert answer["saved"] is None


def test_an_inject_rule_that_finds_nothing_is_traced_too(mem):
    s = mem.session("s")
    injected = s.tool_call("bash", {"command": "uptime"}, "up 3 days")["injected"]
    assert injected["found"] == []
    assert mem.reader.get(injected["seq"]).payload["found"] == []


def test_bad_calls_are_refused_and_append_nothing(mem):
    s = mem.session("s")
    size = mem.writer.size
    for call in (
        lambda: s.tool_call("", {}, "x"),
        lambda: s.tool_call("bash", ["not", "an", "object"], "x"),
        lambda: s.tool_call("bash", {}, "x", call_id=""),
    ):
        with pytest.raises(Exception, match="must be"):
            call()
    assert mem.writer.size == size


def test_replay_equals_live(mem, tmp_path):
    s = mem.session("s")
    s.observe("decision", "Deploys", "deploy with make deploy")
    for n in range(3):
        s.tool_call("bash", {"command": f"make deploy {n}"}, "error: denied" if n else "done")
    s.tool_call("bash", {"command": "kubectl apply -f b.yaml"}, "configured")
    s.tool_call("bash", {"command": "make deploy 1"}, "error: denied")  # a duplicate
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.snapshot()
    assert mem.rebuild(use_snapshots=True).state_hash() == mem.state_hash()


def test_the_async_twin_answers_the_same(mem):
    s = mem.session("s")
    answer = asyncio.run(s.tool_call_async("bash", {"command": "make"}, "panic: x"))
    assert answer["saved"]["rule"] == "bash-errors"
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_a_memory_config_without_rules_captures_nothing(tmp_path):
    with Memory.open(tmp_path / "d", config=MemoryConfig()) as memory:
        answer = memory.session("s").tool_call("bash", {"command": "x"}, "error")
        assert answer == {"injected": None, "saved": None}


# ---- over HTTP -----------------------------------------------------------------------------------


def test_the_rest_endpoint_applies_the_services_rules(tmp_path):
    memory_toml = tmp_path / "memory.toml"
    memory_toml.write_text(RULES)
    settings = tmp_path / "settings.toml"
    settings.write_text(f'memory_config = "{memory_toml}"\n')
    with (
        Server(tmp_path / "data", "--config", str(settings)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        assert client.put("/v1/sessions/s").status_code == 201
        url = "/v1/sessions/s/tool-calls"
        call = {"tool": "bash", "args": {"command": "make"}, "output": "fatal: no"}
        answer = client.post(url, json=call)
        assert answer.status_code == 200, answer.text
        assert answer.json()["saved"]["rule"] == "bash-errors"
        assert answer.json()["injected"]["rule"] == "bash-memories"
        refused = client.post(url, json={"tool": "bash", "extra": 1})
        assert refused.status_code == 400 and "tool call" in refused.json()["error"]["message"]
        missing = client.post("/v1/sessions/nobody/tool-calls", json=call)
        assert missing.status_code == 404
        # the answer is what /openapi.json says, its two parts included
        doc = client.get("/openapi.json").json()
        assert doc["paths"][url.replace("/s/", "/{session}/")]["post"]["operationId"] == (
            "reportToolCall"
        )
        conforms(doc, reply_schema(doc, "/v1/sessions/{session}/tool-calls", "post", 200),
                 answer.json())  # fmt: skip


def test_a_tenant_rule_names_its_session_and_an_ended_session_saves_nothing(mem):
    s = mem.session("s")
    saved = s.tool_call("bash", {"command": "kubectl apply -f x"}, "created")["saved"]
    assert saved["rule"] == "kubectl-apply" and saved["session"] == "_tenant"
    holder = mem.read(lambda state: state.sessions[("default", "_tenant")])
    found = holder.sections["observations"].items[saved["id"]]
    assert found.metadata["session"] == "s"  # as Session.observe records it
    s.end()
    size = mem.writer.size
    with pytest.raises(SessionEnded):
        s.tool_call("bash", {"command": "kubectl apply -f y"}, "created")
    # the inject rule's search before the tool is a read, traced; no observation is written
    after = [mem.reader.get(seq).type for seq in range(size, mem.writer.size)]
    assert set(after) <= {"items.read"}
