"""What a command's steps may use besides the state they decide on, declared once.

Every function of the command table (sections/specs/command_specs.py) receives it as `ctx`: the
memory's settings, the few primitives of the runner, and reads of the log's files. The engine
(sections/runtime/engine.py) implements it; nothing else of the memory reaches the specs.

Which members a step may use follows from where it runs (sections/specs/spec.py): a decision
runs under the memory's lock and must not block, so it uses the settings, `decision_ts` and
`content_of`; `prepare` and `result` run outside the lock and may read files, append and wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from eventstore.record import Record
from sections.model.commands import Decision
from sections.model.compaction import Summarizer
from sections.model.config import MemoryConfig
from sections.model.item import Item
from sections.model.state import MemoryState, SessionState
from sections.model.tokens import TokenCounter
from sections.retrieval.search import Hit, Query
from sections.retrieval.views import ItemView

T = TypeVar("T")


class CommandContext(Protocol):
    # ---- settings: what the memory was opened with

    @property
    def config(self) -> MemoryConfig:
        """The memory's config: new sessions' sections, retention's bounds, capture rules."""
        ...

    @property
    def counter(self) -> TokenCounter:
        """The counter the memory's own sessions (`_tenant`) are created with."""
        ...

    def counter_for(self, config: MemoryConfig) -> TokenCounter:
        """The counter a session created with `config` will count with for good."""
        ...

    def counter_of(self, session: SessionState) -> TokenCounter:
        """The counter `session` was created with (its `session.created` names it)."""
        ...

    @property
    def summarizer(self) -> Summarizer:
        """What writes a compaction's summary, unless the command brings its own."""
        ...

    @property
    def dedup_window_us(self) -> int:
        """How far back identical observation content is a duplicate (microseconds)."""
        ...

    # ---- while deciding, under the lock

    @property
    def decision_ts(self) -> int:
        """The `ts` the records being decided will carry: "now" for a decision."""
        ...

    def content_of(self, item: Item) -> object:
        """An item's content: kept in memory, or read back from the record that set it."""
        ...

    # ---- outside the lock: prepare and result steps

    def read(self, fn: Callable[[MemoryState], T]) -> T:
        """`fn(state)` under the lock, answered once everything it may reflect is durable."""
        ...

    def append(self, decide: Callable[[MemoryState], Decision | None]) -> Record | None:
        """Decide under the lock and append, as a command does; the first record, once durable
        (None when the decision needs none). For the records a command makes on the way: a
        holder session created on first use, a summary after an end."""
        ...

    def search(self, tenant: str, query: Query) -> list[Hit]:
        """The search index's hits for `query` (its own lock; WriterClosed once closed). Not a
        read yet: the decision that follows records what it returns."""
        ...

    def similar(
        self, tenant: str, text: str, sessions: tuple[str, ...] | None, top_k: int
    ) -> list[tuple[str, str, str, float]]:
        """The items nearest `text` by the semantic extra's embeddings, (session, section, id,
        cosine) best first, within `sessions` (None: the tenant); none when it is off."""
        ...

    def state_at(self, seq: int) -> MemoryState:
        """The state right after record `seq` (time travel): a replay of the files.
        WriterClosed once the memory is closed."""
        ...

    def record_at(self, seq: int) -> Record:
        """The record at `seq`, once durable."""
        ...

    def payload_of(self, record: Record) -> dict | None:
        """A record's payload, or the restatement an erase kept of it (None when neither)."""
        ...

    def session_records(self, tenant: str, session: str) -> tuple[list[Record], int]:
        """Every record the session ever wrote (all its incarnations), from a scan of the files,
        and the last seq the scan covered."""
        ...

    def fill(self, views: list[ItemView]) -> list[ItemView]:
        """The views, with each content kept in the log read back from it."""
        ...

    def redact_erased(self, seqs: list[int], reason: str, request: str) -> None:
        """The last steps of an erase: redact these records' payloads (`request` names the
        erase), then purge every copy the projections and snapshots still hold."""
        ...

    def erase_retained(self) -> int:
        """Append and carry out the erase of each retention deletion with `erase` that has none
        yet; how many were erased."""
        ...
