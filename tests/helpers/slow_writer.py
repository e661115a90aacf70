"""A writer subprocess for tests that tail a live directory: appends N records at a steady pace."""

from __future__ import annotations

import sys
import time

from eventstore.checkpoint import SigningKey
from eventstore.writer import LogWriter


def main() -> None:
    log_dir, seed_hex, count, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    key = SigningKey.from_seed("test.local/tail", bytes.fromhex(seed_hex))
    with LogWriter.open(log_dir, key, seg_bits=3) as writer:
        print("ready", flush=True)
        for i in range(count):
            writer.append(
                "acme", f"s-{i % 3}", "messages", "item.added", {"i": i, "pad": "x" * (i % 50)}
            )
            if pause:
                time.sleep(pause)


if __name__ == "__main__":
    main()
