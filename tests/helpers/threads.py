"""Run a function on several threads at once and collect what they raised."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_threads(target: Callable[[int], None], count: int) -> list[BaseException]:
    """`target(n)` for n in range(count), each on its own thread, started together; returns
    every exception raised (an empty list when all succeeded)."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(n: int) -> None:
        barrier.wait()
        try:
            target(n)
        except BaseException as exc:  # noqa: BLE001 - the caller asserts on them
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
