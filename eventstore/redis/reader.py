"""`RedisReader`: the shared store's reads (eventstore/shared/reader.py) from a partition's
stream and hashes (keys.py). A seq whose stream entry a redaction deleted is read from the
`erased` hash, so every reader sees the log as the verifier must: every seq, in order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import keys

if TYPE_CHECKING:
    from . import Client


class RedisReader:
    def __init__(self, client: Client) -> None:
        self.client = client

    def head(self, partition: int) -> tuple[int, bytes]:
        last_seq, last_h = self.client.hmget(keys.head(partition), ["last_seq", "last_h"])
        if last_seq is None:
            from . import StoreError

            raise StoreError(f"partition {partition} has no head: run ledgermem init-store")
        return int(last_seq), bytes(last_h)

    def rows(self, partition: int, start: int, limit: int) -> list[tuple[int, bytes]]:
        last_seq, _ = self.head(partition)
        end = min(start + limit - 1, last_seq)
        if end < start:
            return []
        entries = self.client.xrange(keys.log(partition), keys.entry_id(start), keys.entry_id(end))
        found = {keys.seq_of(entry_id): fields[b"l"] for entry_id, fields in entries}
        missing = [seq for seq in range(start, end + 1) if seq not in found]
        if missing:
            found.update(self._erased(partition, missing))
        return sorted(found.items())

    def lines_at(self, partition: int, seqs: list[int]) -> dict[int, bytes]:
        if not seqs:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for seq in seqs:
            pipe.xrange(keys.log(partition), keys.entry_id(seq), keys.entry_id(seq))
        found: dict[int, bytes] = {}
        for seq, entries in zip(seqs, pipe.execute(), strict=True):
            if entries:
                found[seq] = entries[0][1][b"l"]
        missing = [seq for seq in seqs if seq not in found]
        if missing:
            found.update(self._erased(partition, missing))
        return found

    def _erased(self, partition: int, seqs: list[int]) -> dict[int, bytes]:
        lines = self.client.hmget(keys.erased(partition), [str(seq) for seq in seqs])
        return {seq: line for seq, line in zip(seqs, lines, strict=True) if line is not None}

    def segment_roots(self, partition: int, below: int) -> list[tuple[int, bytes]]:
        held = self.client.hgetall(keys.roots(partition))
        return sorted((int(n), root) for n, root in held.items() if int(n) < below)

    def checkpoint(self, partition: int, at_most: int | None = None) -> tuple[int, str] | None:
        top = "+inf" if at_most is None else at_most
        sizes = self.client.zrevrangebyscore(
            keys.checkpoint_sizes(partition), top, "-inf", start=0, num=1
        )
        if not sizes:
            return None
        text = self.client.hget(keys.checkpoints(partition), sizes[0])
        if text is None:
            return None
        return int(sizes[0]), text.decode()
