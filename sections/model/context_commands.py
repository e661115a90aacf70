"""The commands over a session's context, pure: assembling it within a token budget
(`context.assembled`), and compacting a section until what it renders fits a payload's bytes
(`section.compacted`). Like every command (sections/model/commands.py), each checks everything
first and returns the one record it appends.
"""

from __future__ import annotations

from dataclasses import replace

import orjson

from eventstore.errors import InvalidInput
from sections.errors import CannotCompact
from sections.model import compaction, render
from sections.model.commands import (
    READERS,
    Command,
    base_payload,
    check_open,
    check_version,
    check_writable,
    get_section,
)
from sections.model.names import SESSION_SECTION
from sections.model.render import Injection
from sections.model.state import SectionState, SessionState
from sections.model.tokens import TokenCounter


def assemble_context(
    session: SessionState,
    names: list[str] | None,
    budget: int,
    content_of: render.ContentOf,
    counter: TokenCounter,
    reader: str = "agent",
    injection: Injection | None = None,
    recall: render.RecallRequest | None = None,
) -> tuple[Command, list[dict]]:
    """The `context.assembled` record and the messages, whose rendered tokens (as `counter`
    counts them) stay within `budget`. Without `names`, every section but those assembled only
    on request (`documents`; `observations`, whose contents come in through injection). With
    `recall`, the user's past is recalled into what the injected blocks and the sections leave,
    with its share kept when the sections would take it all."""
    if type(budget) is not int or budget <= 0:
        raise InvalidInput("the context budget must be a positive number of tokens")
    if reader not in READERS:
        raise InvalidInput(f"reader must be one of {', '.join(READERS)}")
    for name in names or ():
        get_section(session, name)
    injection = injection or Injection()
    injected = render.tokens_of(injection.messages, counter)
    remaining = budget - injected
    recalled = Injection()
    if recall is None:
        chosen, spent = render.choose(session, names, remaining, content_of, counter)
    else:
        reserve = int(remaining * recall.share)
        chosen, spent = render.choose(session, names, remaining - reserve, content_of, counter)
        shown = {(e["session"], e["id"]) for e in injection.entries if "id" in e}
        recalled = recall.fill(shown | render.chosen_ids(session.id, chosen), remaining - spent)
        if recalled.tokens < reserve:  # recall found less than was kept for it: give it back
            more, more_spent = render.choose(
                session, names, remaining - recalled.tokens, content_of, counter
            )
            if more_spent > spent:
                ids = shown | render.chosen_ids(session.id, more)
                if any((e["session"], e["id"]) in ids for e in recalled.entries):
                    recalled = recall.fill(ids, remaining - more_spent)  # nothing twice
                chosen, spent = more, more_spent
    messages = render.render(chosen, content_of, injection.messages + recalled.messages)
    entries = injection.entries + recalled.entries + render.manifest(chosen)
    payload = base_payload(session, None)
    payload.update(
        {
            "reader": reader,
            "renderer": render.RENDERER,
            "budget": budget,
            "tokens": injected + recalled.tokens + spent,
            "sections": names,
            "manifest": entries,
        }
    )
    if injection.settings is not None:
        payload["inject"] = injection.settings
    if recall is not None:
        payload["recall"] = recall.settings
    return Command(
        session.tenant, session.id, SESSION_SECTION, "context.assembled", payload
    ), messages


def context_bytes(
    session: SessionState,
    names: list[str] | None,
    budget: int,
    content_of: render.ContentOf,
    counter: TokenCounter,
) -> int:
    """The bytes of the messages `assemble_context` would render now (serialized as compact
    JSON, as a model API is sent them), without injected observations or summaries."""
    chosen, _ = render.choose(session, names, budget, content_of, counter)
    return len(orjson.dumps(render.render(chosen, content_of)))


def compact_for_payload_error(
    session: SessionState,
    section_name: str,
    target_bytes: int,
    budget: int,
    names: list[str] | None,
    content_of: render.ContentOf,
    counter: TokenCounter,
    summarizer: compaction.Summarizer,
    idem: str | None = None,
    expected_version: int | None = None,
) -> tuple[Command | None, dict]:
    """The `section.compacted` record that makes what `context(budget, names)` renders fit
    `target_bytes`, and the outcome; no record when it fits already. Compaction is tried
    gentlest first: the section's own settings, then fewer protected rounds (down to one), then
    tool outputs in the tail cut too, ever shorter. CannotCompact when none fits."""
    check_version(session, expected_version)
    section = get_section(session, section_name)
    check_open(session)
    check_writable(section, session)
    if type(target_bytes) is not int or target_bytes <= 0:
        raise InvalidInput("target_bytes must be a positive integer")
    if type(budget) is not int or budget <= 0:
        raise InvalidInput("the context budget must be a positive number of tokens")
    for name in names or ():
        get_section(session, name)

    def size(trial: SectionState, contents: render.ContentOf = content_of) -> int:
        sections = {**session.sections, section_name: trial}
        return context_bytes(replace(session, sections=sections), names, budget, contents,
                             counter)  # fmt: skip

    before = size(section)
    outcome = {"compacted": False, "seq": None, "bytes_before": before, "bytes_after": before}
    if before <= target_bytes:
        return None, outcome
    config = section.config
    attempts = [
        compaction.Settings(keep, config.compact_tool_chars)
        for keep in range(config.compact_keep_turns, 0, -1)
    ]
    limit = config.compact_tool_chars
    while limit >= compaction.MIN_TOOL_CHARS:
        attempts.append(compaction.Settings(1, limit, cut_tail=True))
        limit //= 2
    remembered = _Remembered(summarizer, counter)
    for settings in attempts:
        found = compaction.plan(
            section, settings, None, content_of, counter, remembered, "payload_error"
        )
        if found is None:
            continue
        after = size(found.trial, found.content_of(content_of))
        if after <= target_bytes:
            payload = base_payload(session, idem)
            payload.update({"compacted": found.compacted, "target_bytes": target_bytes,
                            "bytes_before": before, "bytes_after": after})  # fmt: skip
            command = Command(session.tenant, session.id, section_name, "section.compacted",
                              payload)  # fmt: skip
            return command, compaction_outcome(None, payload)
    raise CannotCompact(
        f"no compaction of section {section_name!r} makes the context ({before} bytes) fit "
        f"{target_bytes} bytes: what is left is protected (the instruction, system messages, "
        "the last round) or not in this section; nothing was written"
    )


class _Remembered:
    """A summarizer whose answers are kept: a span is summarized once, however many attempts
    see it. Its `name` is the summarizer's, which the record keeps."""

    def __init__(self, summarizer: compaction.Summarizer, counter: TokenCounter) -> None:
        self.summarizer = summarizer
        self.counter = counter
        self.name = compaction.summarizer_name(summarizer)
        self.summaries: dict[tuple[bytes, int], str] = {}

    def __call__(self, messages: list[dict], max_tokens: int) -> str:
        key = (orjson.dumps(messages), max_tokens)
        if key not in self.summaries:
            if self.summarizer is compaction.digest:  # ours fits what the session's counter counts
                self.summaries[key] = compaction.digest(messages, max_tokens, self.counter)
            else:
                self.summaries[key] = self.summarizer(messages, max_tokens)
        return self.summaries[key]


def compaction_outcome(seq: int | None, payload: dict) -> dict:
    """What `compact_for_payload_error` answers, from its record alone (a retry has only it):
    the record's seq, sizes before and after, and how many items were replaced and cut (which
    ones, and the summary, are in the record)."""
    return {
        "compacted": True,
        "seq": seq,
        "bytes_before": payload["bytes_before"],
        "bytes_after": payload["bytes_after"],
        "tokens_before": payload["compacted"]["tokens_before"],
        "tokens_after": payload["compacted"]["tokens_after"],
        "replaced": len(payload["compacted"].get("replaced", ())),
        "truncated": len(payload["compacted"]["truncated"]),
    }
