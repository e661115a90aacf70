"""A Memory in a subprocess: threads add items with idempotency keys and print each acknowledgement."""

from __future__ import annotations

import sys
import threading

from sections.model.config import warm_counter
from sections.runtime.memory import Memory


def main() -> None:
    data_dir, threads, per_thread = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mem = Memory.open(data_dir, seg_bits=5)
    lock = threading.Lock()

    def work(n: int) -> None:
        s = mem.session(f"s-{n % 3}")
        for i in range(per_thread):
            key = f"t{n}-{i}"
            item = s.add("findings", f"finding {key}", idempotency_key=key)
            with lock:
                print(f"{key} {s.id} {item.id}", flush=True)

    warm_counter()  # the vocabulary loads before the test's kill clock starts
    print("ready", flush=True)
    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    mem.close()


if __name__ == "__main__":
    main()
