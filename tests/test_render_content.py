"""Issue 28, item 7: contents render as the model API takes them (sections/model/render.py `/3`).

Content parts go as parts, images and reasoning are not lost, section messages stay text (parts
as their text, images as `[image: url]`), MARSYS's `structured_data` is kept, read back and
rendered as JSON text. The record's `tokens` is still what the rendered messages count, and a
manifest written by `ledgermem.render/2` renders as it did then.
"""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest

from eventstore.errors import InvalidInput
from sections.adapters.marsys import ConversationMemory
from sections.model import commands
from sections.model.tokens import APPROX
from sections.runtime.memory import Memory
from tests.server import Server

PARTS = [
    {"type": "text", "text": "what is this?"},
    {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
]
THOUGHTS = [{"type": "reasoning.text", "text": "fur, whiskers"}]


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "d", seg_bits=8, counter="approx-chars-per-4")
    yield memory
    memory.close()


def _assembled(mem, s, sections=None, budget=4000):
    record, messages = s.assemble(budget, sections=sections)
    assert record.payload["tokens"] == sum(APPROX.count(m) for m in messages) <= budget
    assert mem.context_at(record.seq) == messages
    return messages


def test_content_parts_images_and_reasoning_go_to_the_model_as_its_api_takes_them(mem):
    s = mem.session("s")
    s.add("messages", PARTS, role="user")
    s.add("messages", "A cat.", role="assistant", reasoning_details=THOUGHTS)
    s.add("messages", "and this?", role="user", images=["https://x/dog.png"])
    s.add("messages", PARTS[:1], role="user", images=["data:image/png;base64,AAAA"])
    s.add("messages", {"answer": 42}, role="assistant")
    assert _assembled(mem, s, ["messages"]) == [
        {"role": "user", "content": PARTS},
        {"role": "assistant", "content": "A cat.", "reasoning_details": THOUGHTS},
        {"role": "user", "content": [
            {"type": "text", "text": "and this?"},
            {"type": "image_url", "image_url": {"url": "https://x/dog.png"}},
        ]},
        {"role": "user", "content": [
            PARTS[0], {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ]},
        {"role": "assistant", "content": '{"answer":42}'},  # a dict stays its JSON text
    ]  # fmt: skip


def test_tool_results_and_empty_contents_render_as_text(mem):
    s = mem.session("s")
    s.add("messages", "look it up", role="user")
    call = [{"id": "c1", "type": "function", "function": {"name": "see", "arguments": "{}"}}]
    s.add("messages", None, role="assistant", tool_calls=call)
    s.add("messages", PARTS, role="tool", tool_call_id="c1")
    messages = _assembled(mem, s, ["messages"])
    assert messages[1] == {"role": "assistant", "content": "", "tool_calls": call}
    assert messages[2] == {
        "role": "tool",
        "content": "what is this?\n[image: https://x/cat.png]",
        "tool_call_id": "c1",
    }


def test_section_messages_stay_text_with_images_as_markers(mem):
    s = mem.session("s")
    s.add("findings", PARTS)
    s.add("findings", "a chart", images=["https://x/chart.png"])
    s.add("findings", {"k": 1})
    assert _assembled(mem, s, ["findings"]) == [
        {
            "role": "system",
            "content": "## findings\n- what is this?\n[image: https://x/cat.png]\n"
            '- a chart\n[image: https://x/chart.png]\n- {"k":1}',
        }
    ]


def test_structured_data_is_kept_read_back_and_rendered_as_json_text(mem):
    s = mem.session("s")
    data = {"sources": ["a", "b"], "n": 2}
    view = s.add("messages", "Two sources.", role="assistant", structured_data=data)
    plain = s.add("messages", "Two sources.", role="assistant")
    assert view.tokens == plain.tokens + APPROX.count(data)  # it is sent, so it is counted
    assert s.get("messages", [view.id])[0].extra["structured_data"] == data
    assert view.to_json()["structured_data"] == data
    s.add("messages", PARTS, role="user", structured_data={"from": "camera"})
    messages = _assembled(mem, s, ["messages"])
    assert messages[0] == {
        "role": "assistant",
        "content": 'Two sources.\n\nstructured_data: {"n":2,"sources":["a","b"]}',  # keys as stored
    }
    assert messages[2]["content"] == [
        *PARTS, {"type": "text", "text": 'structured_data: {"from":"camera"}'},
    ]  # fmt: skip
    with pytest.raises(InvalidInput, match="structured_data"):
        s.add("messages", "x", role="assistant", structured_data=["not", "an", "object"])
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_marsys_messages_keep_their_structured_data(mem):
    memory = ConversationMemory(memory=mem, session_id="m")
    data = {"processing_state": "done"}
    first = memory.add(message={"role": "assistant", "content": "Done.", "structured_data": data})
    message = SimpleNamespace(role="error", content="Failed to connect",
                              structured_data={"retry_count": 3})  # fmt: skip
    second = memory.add(message=message)
    third = memory.add(role="tool", content="42", tool_call_id="c9", structured_data={"ok": True})
    assert memory.retrieve_by_id(first) == {
        "role": "assistant",
        "content": 'Done.\n\nstructured_data: {"processing_state":"done"}',
    }
    assert memory.retrieve_by_id(second)["content"].endswith('structured_data: {"retry_count":3}')
    assert memory.retrieve_by_id(third)["content"] == '42\n\nstructured_data: {"ok":true}'
    views = memory.session.get("messages", [memory.item_id(first), memory.item_id(second)])
    assert [v.extra["structured_data"] for v in views] == [data, {"retry_count": 3}]
    context = memory.session.context(4000, sections=["messages"])
    assert [m["content"] for m in context[:2]] == [
        memory.retrieve_by_id(first)["content"],
        memory.retrieve_by_id(second)["content"],
    ]


def test_a_manifest_written_by_render_2_renders_as_it_did_then(mem, tmp_path):
    """A `context.assembled` record of the old rules (its choice opening with "Paris." whose
    question is gone, its contents as JSON text) is rendered by its own renderer's rules."""
    s = mem.session("s")
    s.add("messages", "What is the capital of France?", role="user")
    views = [
        s.add("findings", PARTS),
        s.add("findings", {"k": 1}),
        s.add("messages", "Paris.", role="assistant"),
        s.add("messages", PARTS, role="user"),
        s.add("messages", "A cat.", role="assistant", reasoning_details=THOUGHTS),
        s.add("messages", "look", role="user", images=["https://x/dog.png"]),
    ]

    def old_record(state):
        session = state.sessions[("default", "s")]
        payload = commands.base_payload(session, None)
        payload.update({
            "reader": "agent", "renderer": "ledgermem.render/2", "budget": 4000, "tokens": 100,
            "sections": ["findings", "messages"],
            "manifest": [{"id": v.id, "section": v.section, "h": v.h, "tokens": v.tokens}
                         for v in views],
        })  # fmt: skip
        command = commands.Command("default", "s", "_session", "context.assembled", payload)
        return commands.Decision((command,))

    record = mem.append(old_record)
    parts_json = (
        '[{"text":"what is this?","type":"text"},'
        '{"image_url":{"url":"https://x/cat.png"},"type":"image_url"}]'
    )
    # What ledgermem.render/2 gave for this manifest (run at the commit before /3).
    assert mem.context_at(record.seq) == [
        {"role": "system", "content": f'## findings\n- {parts_json}\n- {{"k":1}}'},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": parts_json},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "look"},
    ]
    mem.close()  # and from the files alone
    reopened = Memory.open(tmp_path / "d", seg_bits=8, counter="approx-chars-per-4")
    try:
        assert reopened.context_at(record.seq)[2]["content"] == parts_json
    finally:
        reopened.close()


def test_structured_data_over_http(tmp_path):
    with Server(tmp_path / "data", "--unsafe-no-fsync") as server:
        assert httpx.put(server.url + "/v1/sessions/h").status_code in (200, 201)
        items = server.url + "/v1/sessions/h/sections/messages/items"
        data = {"sources": ["a"]}
        body = {"content": "One source.", "role": "assistant", "structured_data": data}
        added = httpx.post(items, json=body)
        assert added.status_code == 201, added.text
        assert added.json()["item"]["structured_data"] == data
        assert added.json()["record"]["payload"]["items"][0]["extra"] == {"structured_data": data}
        assert httpx.get(items).json()["items"][0]["structured_data"] == data
        refused = httpx.post(items, json={**body, "structured_data": ["a"]})
        assert refused.status_code == 400
