"""Real token counts: the BPE counters, the counter chosen per memory and per session, kept in
the log, and a log written with one counter going on with it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from helpers.live_api import LiveApi

from eventstore.writer import Durability
from sections.errors import ConfigError
from sections.model.tokens import APPROX, CL100K, DEFAULT_COUNTER, O200K, counter_named
from sections.runtime.memory import Memory

# Counts by OpenAI's tiktoken 0.14 (the reference implementation), made with
# bench/token_counters.py's `tiktoken_reference` from hash-checked vocabulary files.
GOLDEN = json.loads((Path(__file__).parent / "vectors" / "token_counts.json").read_text("utf-8"))


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: c["text"][:16])
def test_the_bpe_counters_count_what_tiktoken_counts(case):
    assert O200K.count(case["text"]) == max(1, case["o200k_base"])
    assert CL100K.count(case["text"]) == max(1, case["cl100k_base"])


def test_the_default_is_o200k_and_cjk_text_is_no_longer_counted_four_characters_a_token():
    assert DEFAULT_COUNTER is O200K
    japanese = "東京の天気は晴れです。明日は雨が降るでしょう。会"  # 24 characters
    assert APPROX.count(japanese) == 6
    assert O200K.count(japanese) == 18  # what GPT-4o sees


def test_every_content_costs_a_token_and_json_is_counted_on_its_compact_form():
    assert O200K.count("") == 1 and APPROX.count("") == 1
    content = [{"type": "text", "text": "hello"}]
    assert O200K.count(content) == O200K.count('[{"type":"text","text":"hello"}]')


def test_json_content_counts_the_same_whatever_the_order_of_its_keys():
    """A record stores JSON in JCS (sorted keys): a session imported from a bundle must count
    a tool call exactly as its source did."""
    written = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    stored = [{"function": {"arguments": "{}", "name": "f"}, "id": "c1", "type": "function"}]
    for counter in (O200K, CL100K, APPROX):
        assert counter.count(written) == counter.count(stored)


def test_an_unknown_counter_is_refused_naming_the_known_ones():
    with pytest.raises(ConfigError) as refused:
        counter_named("gpt2")
    assert all(name in str(refused.value) for name in ("o200k_base", "cl100k_base", "gpt2"))


@pytest.fixture
def mem(tmp_path):
    with Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC) as memory:
        yield memory


def created_counter(mem: Memory, session: str) -> dict:
    """The counter the session's `session.created` names."""
    return mem.read(lambda state: state.sessions[(mem.tenant, session)].counter)


def test_a_session_counts_with_the_counter_it_was_created_with(mem):
    mem.create_session("gpt4", token_counter="cl100k_base")
    mem.create_session("default")
    text = "東京の天気は晴れです。明日は雨が降るでしょう。"
    old = mem.session("gpt4").add("messages", text)
    new = mem.session("default").add("messages", text)
    assert old.tokens == CL100K.count(text) and new.tokens == O200K.count(text)
    assert old.tokens != new.tokens
    assert created_counter(mem, "gpt4")["name"] == "cl100k_base"
    assert created_counter(mem, "default")["name"] == "o200k_base"
    assert created_counter(mem, "default")["version"].startswith("quicktok ")


def test_a_log_written_with_one_counter_goes_on_with_it_and_rebuilds_to_the_live_state(tmp_path):
    data = tmp_path / "data"
    text = "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)  # 東京"
    with Memory.open(data, counter="approx-chars-per-4") as mem:  # as logs before issue 18
        mem.session("old").add("messages", text)
    with Memory.open(data) as mem:  # the default is o200k_base now
        later = mem.session("old").add("messages", text)
        fresh = mem.session("new").add("messages", text)
        assert later.tokens == APPROX.count(text)
        assert fresh.tokens == O200K.count(text)
        live = mem.state_hash()
    with Memory.open(data) as mem:  # replay never counts again: the counts are the records'
        assert mem.state_hash() == live
        assert mem.rebuild(use_snapshots=False).state_hash() == live


def test_an_unknown_counter_for_a_session_appends_nothing(mem):
    size = mem.writer.size
    with pytest.raises(ConfigError, match="unknown token counter 'gpt2'"):
        mem.create_session("s", token_counter="gpt2")
    assert mem.writer.size == size


def test_the_config_file_picks_the_counter_of_new_sessions(tmp_path):
    config = tmp_path / "memory.toml"
    config.write_text('token_counter = "cl100k_base"\n')
    with Memory.open(tmp_path / "data", config=config) as mem:
        added = mem.session("s").add("messages", "東京の天気は晴れです。")
        assert added.tokens == CL100K.count("東京の天気は晴れです。")
    config.write_text('token_counter = "gpt2"\n')
    with pytest.raises(ConfigError, match="gpt2"):
        Memory.open(tmp_path / "other", config=config)


def test_over_http_a_session_names_its_counter_and_a_bad_one_is_a_400(tmp_path):
    with Memory.open(tmp_path / "data") as mem:
        api = LiveApi(mem).start()
        try:
            with httpx.Client(base_url=api.url, timeout=30) as client:
                made = client.put("/v1/sessions/g", json={"token_counter": "cl100k_base"})
                assert made.status_code == 201, made.text
                assert made.json()["record"]["payload"]["counter"]["name"] == "cl100k_base"
                posted = client.post("/v1/sessions", json={"token_counter": "approx-chars-per-4"})
                assert posted.status_code == 201
                assert posted.json()["record"]["payload"]["counter"]["name"] == "approx-chars-per-4"
                size = mem.writer.size
                for body in ({"token_counter": "gpt2"}, {"token_counter": 5}):
                    refused = client.put("/v1/sessions/h", json=body)
                    assert refused.status_code == 400, refused.text
                    assert refused.json()["error"]["code"] == "invalid_input"
                assert mem.writer.size == size
        finally:
            api.stop()
