"""When to try a call again, and after how long: exponential backoff with full jitter.

Pure: the random draw is passed in, and the clock that measures a call's budget too, so the
policy is tested without real time. Both clients and the subscription loop ask the same
`Attempts` object after each failure.

Why every failure may be retried: a call that changes memory carries an Idempotency-Key that the
service keeps, so a retry of a call that did land returns the first call's record instead of
appending again; `PUT /v1/sessions/{s}` gets or creates, and reads are reads. A connection error
after the request was sent (the answer lost) is therefore as safe to retry as one before it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Retry:
    """`tries`: attempts in all (1: never retry). The n-th retry waits a uniform draw from
    [0, min(cap, base * 2**n)] ("full jitter": many clients that failed together do not come
    back together), but never less than the answer's `Retry-After`, itself capped by
    `max_retry_after`. `statuses`: the answers worth another try. `budget`: seconds from the
    first try after which no try starts (None: only `tries` counts); the last wait is cut to
    end at the budget, so the last try comes at its end rather than never."""

    tries: int = 5
    base: float = 0.1
    cap: float = 5.0
    max_retry_after: float = 30.0
    statuses: frozenset[int] = frozenset({503})
    budget: float | None = None

    def __post_init__(self) -> None:
        if self.tries < 1:
            raise ValueError("tries counts the first attempt: it must be at least 1")
        if self.budget is not None and not self.budget >= 0:
            raise ValueError(f"budget is a number of seconds, at least 0, not {self.budget!r}")

    def delay(self, retry: int, retry_after: float | None, draw: float) -> float:
        """How long to wait before retry number `retry` (0 for the first); `draw` in [0, 1)."""
        wait = draw * min(self.cap, self.base * 2**retry)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after))
        return wait


class Attempts:
    """One logical call's tries: each failure answers the delay before the next, or None when
    the tries are spent (then the caller raises what the last try got)."""

    def __init__(
        self,
        policy: Retry,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.rng = rng or random.Random()
        self.clock = clock
        self.started = clock()
        self.failures = 0

    def retryable(self, status: int) -> bool:
        return status in self.policy.statuses

    def after_failure(self, retry_after: float | None = None) -> float | None:
        self.failures += 1
        if self.failures >= self.policy.tries:
            return None
        wait = self.policy.delay(self.failures - 1, retry_after, self.rng.random())
        budget = self.policy.budget
        if budget is None:
            return wait
        left = budget - (self.clock() - self.started)
        return None if left <= 0 else min(wait, left)

    def succeeded(self) -> None:
        """A subscription that got through starts counting its failures afresh."""
        self.failures = 0
        self.started = self.clock()
