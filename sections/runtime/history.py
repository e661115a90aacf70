"""The projection at any point of a log, from the files alone: no writer, no lock.

`Memory` uses it for time travel, and the offline tools (`ledgermem state`, `diff`, `export`)
use it on a copy of the files. Snapshots speed it up when a snapshot directory is given.
"""

from __future__ import annotations

import logging
from itertools import islice
from pathlib import Path

import orjson

from eventstore.reader import LogReader
from eventstore.record import Record
from sections.errors import NotFound
from sections.model import render
from sections.model.commands import payload
from sections.model.erasure import content_in
from sections.model.item import Item
from sections.model.projection import replay_lines
from sections.model.state import MemoryState
from sections.retrieval import inject, recall
from sections.runtime import checkpoints
from sections.runtime.snapshot import Snapshot, newest_snapshot, read_snapshot, snapshot_paths

ERASE_PREFIX = "items.erased@"
log = logging.getLogger("ledgermem.snapshot")


class History:
    def __init__(
        self,
        reader: LogReader,
        snapshot_dir: Path | None = None,
        leave_checkpoints: bool = True,
        snapshot_floor: int = 0,
    ) -> None:
        """`leave_checkpoints=False` for a caller that asks once (the offline commands): a
        checkpoint serializes the whole state (~70 µs per record of the replay at 23k live
        items), worth it only to a process that travels in time again. `state_at` starts from
        no snapshot taken before `snapshot_floor`."""
        self.reader = reader
        self.snapshot_dir = snapshot_dir
        self.leave_checkpoints = leave_checkpoints
        self.snapshot_floor = snapshot_floor
        self.checkpoints = checkpoints.Checkpoints()

    def state_at(self, upto: int, use_snapshots: bool = True) -> MemoryState:
        """The state right after record `upto`: from the nearest checkpoint or snapshot at or
        before it, plus the tail, leaving checkpoints behind. Without snapshots: from zero."""
        if not use_snapshots:
            return self.load(upto, False)[0]
        generation = self.checkpoints.generation
        nearest = self.checkpoints.nearest(upto)
        state = self._from_snapshot(nearest[0] if nearest else -1, upto, generation)
        if state is None:
            state = MemoryState.from_json(orjson.loads(nearest[1])) if nearest else MemoryState()
        lines = self.reader.lines(after=state.seq, until=upto + 1)
        if self.leave_checkpoints:
            # Fold in runs that end on the checkpoints' seqs (multiples of `every`, minus one).
            every = self.checkpoints.every
            stop = state.seq + every - (state.seq + 1) % every
            while stop < upto:
                replay_lines(state, islice(lines, stop - state.seq), self.restate)
                if state.seq != stop:
                    break  # the log ended first
                self.checkpoints.put(stop, state.to_json(), generation)
                stop += every
        return replay_lines(state, lines, self.restate)

    def states_at(self, seqs: list[int]) -> list[MemoryState]:
        """The states right after each of these seqs (ascending), from one fold: a state is
        copied at each seq and the fold goes on to the next."""
        states = [self.state_at(seqs[0])]
        for upto in seqs[1:]:
            state = states[-1]
            states[-1] = MemoryState.from_json(orjson.loads(orjson.dumps(state.to_json())))
            lines = self.reader.lines(after=state.seq, until=upto + 1)
            states.append(replay_lines(state, lines, self.restate))
        return states

    def _from_snapshot(self, after: int, upto: int, generation: int) -> MemoryState | None:
        """The newest valid snapshot with `after` < seq <= `upto` (by file name first: reading
        one costs as much as a checkpoint saves), kept as a checkpoint too."""
        if self.snapshot_dir is None:
            return None
        for path in snapshot_paths(self.snapshot_dir):  # newest first
            seq = path.stem.removeprefix("snap-")
            if not seq.isdigit() or int(seq) > upto:
                continue
            if int(seq) <= after or int(seq) < self.snapshot_floor:
                return None  # the older ones too
            snapshot = read_snapshot(path, self.reader.origin, self.reader, at_most=upto)
            if snapshot is None:
                continue
            try:
                state = MemoryState.from_json(snapshot.projections["sections"])
            except (KeyError, TypeError, ValueError) as exc:  # written by other code: a miss
                log.warning("ignoring snapshot at seq %d: unreadable state (%r)", snapshot.seq, exc)
                continue
            if self.leave_checkpoints:
                self.checkpoints.put(snapshot.seq, snapshot.projections["sections"], generation)
            return state
        return None

    def load(
        self, upto: int, use_snapshots: bool = True
    ) -> tuple[MemoryState, Snapshot | None, set[tuple[str, str]]]:
        """The state at `upto` from the files alone (start-up, verification: no checkpoints),
        with the snapshot it started from and the (tenant, session) keys of the records
        replayed after it: what another projection loaded from that snapshot must redo (none
        without a snapshot: nothing was loaded that could need redoing)."""
        snapshot = None
        if use_snapshots and self.snapshot_dir is not None:
            snapshot = newest_snapshot(
                self.snapshot_dir, self.reader.origin, self.reader, at_most=upto
            )
        state = MemoryState()
        if snapshot is not None:
            try:
                state = MemoryState.from_json(snapshot.projections["sections"])
            except (KeyError, TypeError, ValueError) as exc:  # written by other code: a cache miss
                log.warning("ignoring snapshot at seq %d: unreadable state (%r)", snapshot.seq, exc)
                snapshot = None
        touched: set[tuple[str, str]] = set()
        lines = self.reader.lines(after=state.seq, until=upto + 1)
        replay_lines(state, lines, self.restate, touched if snapshot is not None else None)
        return state, snapshot, touched

    def restate(self, seq: int, redacted: int | None) -> dict | None:
        """The content-free restatement of the erased record `seq` (whose payload the redaction
        at `redacted` removed), kept by the erase that removed it."""
        if redacted is None:
            return None
        redaction = self.reader.get(redacted)
        request = payload(redaction).get("request", "") if redaction.has_payload else ""
        if not request.startswith(ERASE_PREFIX):
            return None
        erase = self.reader.get(int(request[len(ERASE_PREFIX) :]))
        return payload(erase).get("restate", {}).get(str(seq)) if erase.has_payload else None

    def payload_of(self, record: Record) -> dict | None:
        """A record's payload, or the restatement an erase kept of it (None when neither)."""
        if record.has_payload:
            return payload(record)
        return self.restate(record.seq, record.redacted)

    def logged_content(self, id_: str, content_seq: int) -> object:
        """Read back a content kept in the log (large, or from an earlier state)."""
        return content_in(self.reader.get(content_seq), id_)

    def content_of(self, item: Item) -> object:
        return (
            item.content
            if item.content is not None
            else self.logged_content(item.id, item.content_seq)
        )

    def context_at(self, seq: int) -> list[dict]:
        """The messages exactly as the `context.assembled` record at `seq` assembled them."""
        record = self.reader.get(seq)
        if record.type != "context.assembled" or not record.has_payload:
            raise NotFound(f"record {seq} is not a context.assembled record")
        state = self.state_at(seq)
        session = state.sessions[(record.tenant, record.session)]
        chosen: list[tuple[str, list[Item]]] = []
        assembled = payload(record)
        manifest = assembled["manifest"]
        injected = [e for e in manifest if "inject" in e and e["inject"] != "recall"]
        recalled = [e for e in manifest if e.get("inject") == "recall"]
        try:
            settings = assembled.get("inject") or {}
            chars = settings.get("observation_chars", inject.OBSERVATION_CHARS)
            messages = inject.replay(state, record.tenant, injected, chars, self.content_of)
            messages += recall.replay(state, record.tenant, recalled, self.content_of)
        except LookupError as exc:  # KeyError included
            raise NotFound(
                f"the context at seq {seq} cites what the log no longer holds: {exc}"
            ) from None
        for entry in manifest:
            if "inject" in entry:
                continue
            item = session.sections[entry["section"]].items[entry["id"]]
            if item.h != entry["h"]:
                raise NotFound(
                    f"item {entry['id']} at seq {seq} does not have the hash the manifest cites"
                )
            if not chosen or chosen[-1][0] != entry["section"]:
                chosen.append((entry["section"], []))
            chosen[-1][1].append(item)
        renderer = assembled.get("renderer", "ledgermem.render/1")
        return render.render(chosen, self.content_of, messages, renderer)

    def seq_at_time(self, ts: int) -> int:
        """The last seq of the longest prefix of the log whose records all have `ts` <= `ts`.

        `ts` is the writer's clock and can go backwards; the log's order is `seq`. "The state at
        time T" is therefore what the log held when its clock first passed T: everything before
        the first record stamped later than T, even if later records carry earlier stamps.
        -1 when the first record is already later than T.
        """
        last = -1
        for seq, line in self.reader.lines():
            if _ts_of(line) > ts:
                break
            last = seq
        return last


def _ts_of(line: bytes) -> int:
    """A line's `ts`, from the part before `tenant` where a canonical line has it (a `Record`
    per line made the scan of `seq_at_time` cost as much as the fold after it); the whole line
    when laid out otherwise."""
    cut = line.find(b',"tenant":')
    if cut > 0:
        try:
            return orjson.loads(line[:cut] + b"}")["ts"]
        except (orjson.JSONDecodeError, KeyError):  # a "tenant" key nested in the payload
            pass
    return orjson.loads(line)["ts"]
