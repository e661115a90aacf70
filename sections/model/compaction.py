"""Compaction, pure: what a section gives up when it grows past its threshold, decided once.

In the manner of MARSYS's managed conversation memory (docs/compaction.md): long tool outputs
are cut first; if that is not enough, every unit older than the protected tail is replaced by one
summary item. The protected part is the original instruction (the section's first user message),
system messages, and the tail: the last `compact_keep_turns` assistant rounds (an assistant
message and everything after it), or the last that many units when the section has fewer
assistant messages. Units (a tool call's group, or an item alone) are never split: a unit with a
member in the tail is in the tail.

The summary comes from a summarizer: `summarizer(messages, max_tokens) -> str`, given the
replaced items as OpenAI-style messages. Its text is stored in the record, so replay never calls
it again. The default, `digest`, calls no model. A summarizer that raises, or returns anything
but a non-empty string within `max_tokens`, makes the command fail with `SummarizerFailed`:
nothing is appended.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from eventstore.errors import InvalidInput
from sections.errors import NeedsPreparation, SummarizerFailed
from sections.model.config import SectionConfig
from sections.model.item import Item, units_of
from sections.model.projection import apply_compaction
from sections.model.render import MESSAGE_FIELDS, ContentOf, _text
from sections.model.state import SectionState
from sections.model.tokens import APPROX, TokenCounter

Summarizer = Callable[[list[dict], int], str]
SUMMARY_KIND = "summary"  # the summary item's event type (sections/model/item_filter.py)
SUMMARY_ROLE = "user"  # accepted anywhere in an OpenAI-style conversation
TRUNCATION_MARK = "\n[truncated: {cut} of {total} characters]"
DIGEST_LINE_CHARS = 120
DIGEST_HEADER = re.compile(r"\[Summary of ([0-9]+) earlier messages\]")
MIN_TOOL_CHARS = 64  # payload errors cut tool outputs down to this, not further
MIN_SUMMARY_TOKENS = 8  # a span this small (halved) is not worth a summary


def digest(messages: list[dict], max_tokens: int, counter: TokenCounter = APPROX) -> str:
    """The default summarizer, deterministic: one line per message (role, tool names, first
    line of text); an earlier digest among them gives its lines, so a summary of a summary still
    names what it covered. When the lines do not fit `max_tokens` as the session's `counter`
    counts them, the oldest go first."""
    covered, lines = 0, []
    for m in messages:
        text = m.get("content")
        text = (text if isinstance(text, str) else _text(text)).strip()
        earlier = DIGEST_HEADER.match(text)
        if earlier:  # a summary being summarized again
            covered += int(earlier.group(1))
            lines.extend(text.split("\n")[1:])
            continue
        covered += 1
        first = text.split("\n", 1)[0]
        calls = [c.get("function", {}).get("name") or c.get("id") for c in m.get("tool_calls", ())]
        who = m.get("role", "?") + (f" ({m['name']})" if m.get("name") else "")
        said = f"called {', '.join(map(str, calls))}" if calls else ""
        if first:
            said = f"{said}: {first}" if said else first
        lines.append(f"- {who}: {said}"[:DIGEST_LINE_CHARS])
    header = f"[Summary of {covered} earlier messages]"
    # Lines counted one by one first (a join costs about what its parts do), then the exact
    # count of the text, dropping the oldest line until it fits.
    costs = [counter.count(line) for line in lines]
    total = counter.count(header) + sum(costs)
    while lines and total > max_tokens:
        total -= costs.pop(0)
        lines.pop(0)
    text = "\n".join([header, *lines])
    while lines and counter.count(text) > max_tokens:
        lines.pop(0)
        text = "\n".join([header, *lines])
    if counter.count(text) > max_tokens:  # the header alone is too long: cut it to fit
        text = header[: max(1, max_tokens)]
        while len(text) > 1 and counter.count(text) > max_tokens:
            text = text[:-1]
    return text


DIGEST = "ledgermem.digest/1"  # what a compaction by `digest` names as its summarizer


def is_summary(item: Item) -> bool:
    """Whether a live item is a compaction's summary, in the place and under the id of the
    oldest item it replaced (whose own content is in the record that added it)."""
    return (
        item.kind == SUMMARY_KIND and item.content_seq != item.seq and "summarizes" in item.metadata
    )


def checked_summarizer(summarizer: object) -> Summarizer:
    """The summarizer a decision calls: `digest` as it is (cheap, pure), a runtime's behind
    `SummariesAhead`, so that it is never called under the memory's lock."""
    if isinstance(summarizer, SummariesAhead) or summarizer is digest:
        return summarizer
    if not callable(summarizer):
        raise InvalidInput("summarizer must be a function (messages, max_tokens) -> str")
    return SummariesAhead(summarizer)


def _raise(exc: BaseException) -> str:
    raise exc


class SummariesAhead:
    """A runtime's summarizer (an LLM call, say: seconds), called outside the memory's lock.

    A decision runs under the lock, which every command of the memory waits for. Called there
    with a span it has no summary for, this raises `NeedsPreparation`: the runner writes that
    summary outside the lock and decides the command again, which finds it here (a failure is
    kept too, and raised then, so the command fails with `SummarizerFailed` as before). If the
    section changed meanwhile, the new decision may ask for another span: another round; each
    round follows another command's progress, so some command always gets through. The last
    `SIZE` answers are kept."""

    SIZE = 64

    def __init__(self, summarizer: Summarizer) -> None:
        self.summarizer = summarizer
        self.name = summarizer_name(summarizer)
        self._answers: OrderedDict[tuple[bytes, int], Callable[[], str]] = OrderedDict()
        self._guard = threading.Lock()

    def __call__(self, messages: list[dict], max_tokens: int) -> str:
        key = (orjson.dumps(messages), max_tokens)
        with self._guard:
            answer = self._answers.get(key)
        if answer is None:
            raise NeedsPreparation(lambda: self._write(key, messages, max_tokens))
        return answer()

    def _write(self, key: tuple[bytes, int], messages: list[dict], max_tokens: int) -> None:
        try:
            text = self.summarizer(messages, max_tokens)
            answer = lambda: text  # noqa: E731
        except Exception as exc:  # raised again where the decision calls for it
            answer = functools.partial(_raise, exc)
        with self._guard:
            self._answers[key] = answer
            self._answers.move_to_end(key)
            while len(self._answers) > self.SIZE:
                self._answers.popitem(last=False)


def compacted_content(compacted: dict, id_: str) -> tuple[bool, object]:
    """(found, content): what a compaction record set as item `id_`'s content (its summary or
    a cut tool output), for reading back a content kept in the log."""
    summary = compacted.get("summary")
    if summary is not None and summary["id"] == id_:
        return True, summary["content"]
    for cut in compacted.get("truncated", ()):
        if cut["id"] == id_:
            return True, cut["content"]
    return False, None


def summarizer_name(summarizer: Summarizer) -> str:
    """What a compaction's record names its summarizer by: ours, or a runtime's `name`
    attribute (a function may be given one), or its qualified name."""
    if summarizer is digest:
        return DIGEST
    name = getattr(summarizer, "name", None) or getattr(summarizer, "__qualname__", None)
    return str(name or type(summarizer).__name__)


@dataclass(frozen=True)
class Settings:
    """What one compaction may do: protect `keep_turns` rounds, cut tool outputs longer than
    `tool_chars`, and (payload errors only) cut those in the tail too."""

    keep_turns: int
    tool_chars: int
    cut_tail: bool = False

    @classmethod
    def of(cls, config: SectionConfig) -> Settings:
        return cls(config.compact_keep_turns, config.compact_tool_chars)


# ---- which units are protected ----------------------------------------------------------------


def _tail_start(items: list[Item], units: dict[str, list[Item]], keep_turns: int) -> int:
    """The index in `items` where the protected tail starts."""
    assistants = [i for i, item in enumerate(items) if item.role == "assistant"]
    if len(assistants) >= keep_turns:
        return assistants[-keep_turns]
    position = {item.id: i for i, item in enumerate(items)}
    starts = sorted(position[members[0].id] for members in units.values())
    return starts[-keep_turns] if len(starts) >= keep_turns else 0


def partition(
    items: list[Item], keep_turns: int, joined: frozenset[str] = frozenset()
) -> tuple[list[list[Item]], list[list[Item]]]:
    """(the units that may be replaced, oldest first; the protected units). `keep_turns` may
    be 0 when an add brings the protected rounds itself; `joined`: units an add joins."""
    units = units_of(items)
    start = _tail_start(items, units, keep_turns) if items and keep_turns > 0 else len(items)
    tail = {item.unit for item in items[start:]} | joined
    instruction = next((item.unit for item in items if item.role == "user"), None)
    free: list[list[Item]] = []
    protected: list[list[Item]] = []
    for unit, members in units.items():
        keep = unit in tail or unit == instruction or any(m.role == "system" for m in members)
        (protected if keep else free).append(members)
    return free, protected


# ---- the plan ---------------------------------------------------------------------------------


@dataclass
class Plan:
    """A compaction decided: the record form (`compacted`) and the section as it would be."""

    compacted: dict
    trial: SectionState

    def content_of(self, content_of: ContentOf) -> ContentOf:
        """Contents in `trial`: what the compaction wrote is not in the log yet."""
        return _written_contents(self.compacted, content_of)


def _written_contents(compacted: dict, content_of: ContentOf) -> ContentOf:
    # The items a trial compaction wrote have content_seq 0 (`_try`): their contents are in
    # `compacted`, whether or not they were small enough to be kept in memory.
    written = {cut["id"]: cut["content"] for cut in compacted.get("truncated", ())}
    if "summary" in compacted:
        written[compacted["summary"]["id"]] = compacted["summary"]["content"]

    def content(item: Item) -> object:
        return (
            written[item.id] if item.content_seq == 0 and item.id in written else content_of(item)
        )

    return content


def _cut(item: Item, text: str, limit: int, counter: TokenCounter) -> dict:
    mark = TRUNCATION_MARK.format(cut=len(text) - limit, total=len(text))
    content = text[:limit] + mark
    tokens = counter.count(content)
    if item.extra.get("tool_calls"):
        tokens += counter.count(item.extra["tool_calls"])
    return {"id": item.id, "content": content, "tokens": tokens, "cut": len(text) - limit}


def _message(item: Item, content: object) -> dict:
    message = {"role": item.role or "user", "content": content}
    message.update((k, item.extra[k]) for k in MESSAGE_FIELDS if k in item.extra)
    return message


def _try(section: SectionState, compacted: dict) -> SectionState:
    trial = SectionState(section.config, dict(section.items), section.tokens)
    apply_compaction(trial, compacted, 0, "", 0)  # seq and hash are the record's, not known yet
    return trial


def plan(
    section: SectionState,
    settings: Settings,
    target_tokens: int | None,
    content_of: ContentOf,
    counter: TokenCounter,
    summarizer: Summarizer,
    reason: str,
    incoming: Sequence[dict] = (),
) -> Plan | None:
    """Cut tool outputs; if the section then holds more than `target_tokens` (None: always),
    replace its unprotected units by a summary. None when there is nothing to do. `incoming`:
    the items an add brings, the newest turns: they count towards the protected rounds, and
    the groups they join are protected."""
    items = list(section.items.values())
    rounds = sum(1 for i in incoming if i.get("role") == "assistant")
    joined = frozenset(i["group"] for i in incoming if "group" in i)
    free, protected = partition(items, max(0, settings.keep_turns - rounds), joined)
    cuttable = [m for u in free for m in u]
    if settings.cut_tail:
        cuttable += [m for u in protected for m in u if m.role == "tool"]
    cuts = []
    for item in cuttable:
        if item.role != "tool":
            continue
        content = content_of(item)
        text = content if isinstance(content, str) else _text(content)
        if len(text) > settings.tool_chars + len(TRUNCATION_MARK) + 20:
            cut = _cut(item, text, settings.tool_chars, counter)
            if cut["tokens"] < item.tokens:
                cuts.append(cut)
    compacted: dict = {"reason": reason, "keep_turns": settings.keep_turns, "truncated": cuts}
    trial = _try(section, compacted)
    spanned = [m for u in free for m in u]
    if (target_tokens is None or trial.tokens > target_tokens) and spanned:
        span = [trial.items[m.id] for m in sorted(spanned, key=lambda m: m.order)]
        span_tokens = sum(m.tokens for m in span)
        max_tokens = span_tokens // 2
        if max_tokens >= MIN_SUMMARY_TOKENS:
            cut_content = _written_contents(compacted, content_of)
            messages = [_message(m, cut_content(m)) for m in span]
            text = summarize(summarizer, messages, max_tokens, counter)
            first = span[0]
            compacted["replaced"] = [m.id for m in span]
            compacted["summary"] = {
                "id": first.id, "content": text, "role": SUMMARY_ROLE, "kind": SUMMARY_KIND,
                "metadata": {"summarizes": len(span)}, "tokens": counter.count(text),
                "committed": all(m.committed for m in span),
            }  # fmt: skip
            compacted["summarizer"] = summarizer_name(summarizer)
            compacted["truncated"] = [c for c in cuts if c["id"] not in compacted["replaced"]]
            trial = _try(section, compacted)
    if not compacted["truncated"] and "replaced" not in compacted:
        return None
    compacted["tokens_before"] = section.tokens
    compacted["tokens_after"] = trial.tokens
    return Plan(compacted, trial)


def summarize(summarizer: Summarizer, messages: list[dict], max_tokens: int, counter) -> str:
    """The summarizer's text, checked; SummarizerFailed when it fails or returns bad output."""
    try:
        if summarizer is digest:  # ours counts with the session's counter
            text = digest(messages, max_tokens, counter)
        else:
            text = summarizer(messages, max_tokens)
    except NeedsPreparation:  # not a failure: the runner writes it outside the lock
        raise
    except Exception as exc:  # a runtime's function (an LLM call): any failure refuses the write
        raise SummarizerFailed(f"the summarizer failed: {exc!r}; nothing was written") from exc
    if not isinstance(text, str) or not text.strip():
        raise SummarizerFailed(
            f"the summarizer returned {type(text).__name__} {text!r:.80}, not a non-empty string; "
            "nothing was written"
        )
    tokens = counter.count(text)
    if tokens > max_tokens:
        raise SummarizerFailed(
            f"the summary has {tokens} tokens, more than the {max_tokens} allowed (half of what "
            "it replaces); nothing was written"
        )
    return text
