"""The agent's own model as the MARSYS adapter's summarizer (docs/adapters/marsys.md).

MARSYS hands its compaction the agent's model (`runtime["compaction_model"]`, an object with
an async `arun`) and writes what it answers as a user message opening with
`[User Requests Summary]`, so that the model still sees what it was asked after the messages
are gone. Here the model is asked for the same kind of answer (one JSON object: the user's
requests, a summary, salient facts, open threads) by a prompt of this module's, and the answer
becomes the text of the compaction's summary item (a `user` message, as every summary here).

ledgermem calls a runtime's summarizer outside the memory's lock, on a worker thread, while the
event loop that runs `compact_if_needed` waits (sections/model/compaction.py `SummariesAhead`):
the summarizer hands the model's coroutine to that loop and waits for its answer there. Any
failure (the model's, or an answer that is not the JSON asked for) fails the compaction, which
then appends nothing, as with any summarizer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

ROLLUP_TITLE = "[User Requests Summary]"
TIMEOUT_S = 300.0  # a compaction call to a model: generous, but never forever
INSTRUCTION = (
    "You compact the start of a conversation so that an agent can go on without it. Answer "
    "with one JSON object and nothing else, with these keys: user_request_summary (what the "
    "user asked for, in order, in a few sentences), summary (what was done and found), "
    "salient_facts (a list of short facts the agent must keep: names, numbers, decisions), "
    "open_threads (a list of what is still to be done)."
)


def model_summarizer(model: Any, output_max_tokens: int) -> Any:
    """A summarizer `(messages, max_tokens) -> str` asking `model` (its `arun`), to be called on
    a worker thread while the running loop waits. Call it from a coroutine."""
    loop = asyncio.get_running_loop()

    def summarize(messages: list[dict], max_tokens: int) -> str:
        asked = _ask(model, messages, min(max_tokens, output_max_tokens))
        answer = asyncio.run_coroutine_threadsafe(asked, loop).result(TIMEOUT_S)
        return rollup(answer)

    summarize.name = f"marsys.compaction_model:{type(model).__name__}"  # type: ignore[attr-defined]  # why: the record names a summarizer by this attribute
    return summarize


async def _ask(model: Any, messages: list[dict], max_tokens: int) -> str:
    transcript = "\n".join(f"{m.get('role', 'user')}: {_text(m.get('content'))}" for m in messages)
    response = await model.arun(
        messages=[{"role": "system", "content": INSTRUCTION},
                  {"role": "user", "content": transcript}],
        max_tokens=max_tokens, temperature=0.1, json_mode=True,
    )  # fmt: skip
    content = getattr(response, "content", response)
    if isinstance(content, dict):
        content = content.get("content", "")
    return content if isinstance(content, str) else str(content)


def _text(content: object) -> str:
    return content if isinstance(content, str) else orjson.dumps(content).decode()


def rollup(answer: str) -> str:
    """The summary item's text from the model's JSON answer; ValueError when it is not one."""
    found = orjson.loads(answer)
    if not isinstance(found, dict) or not isinstance(found.get("user_request_summary"), str):
        raise ValueError("the compaction model did not answer the JSON object asked for")
    parts = [f"{ROLLUP_TITLE}\n{found['user_request_summary']}"]
    if isinstance(found.get("summary"), str) and found["summary"]:
        parts.append(f"[Summary]\n{found['summary']}")
    for key, title in (("salient_facts", "[Salient Facts]"), ("open_threads", "[Open Threads]")):
        items = found.get(key)
        if isinstance(items, list) and items:
            parts.append(title + "\n" + "\n".join(f"- {_text(i)}" for i in items))
    return "\n\n".join(parts)
