"""What the sync and the async client share besides the calls: settings, the credentials'
headers, and a subscription's start."""

from __future__ import annotations

import random

from streams.client.methods import Methods
from streams.client.retry import Retry
from streams.client.subscription import TRANSPORTS, SubscriptionState

DEFAULT_URL = "http://127.0.0.1:8000"
# A call: tries for about ten seconds, so that a write outlives a restart or a partition's
# takeover (measured: 2.2 to 5.7 s), backing off up to 2 s between tries; only the failures a
# retry is safe for: no connection, 502, 503 (its Retry-After honoured), 504 (docs/client.md).
CALL_RETRY = Retry(tries=40, base=0.1, cap=2.0, budget=10.0, statuses=frozenset({502, 503, 504}))
# A subscription: up to 60 connections in a row that fail to open, each wait up to 2 s, so a
# service that restarts within a minute or so is followed; the count starts again at every
# connection that opens.
SUBSCRIBE_RETRY = Retry(tries=60, base=0.05, cap=2.0)
# SSE sends a comment and WebSocket a ping at least every 15 s (wire.md): a connection silent
# for much longer than that is dead, whatever TCP believes.
IDLE_TIMEOUT = 45.0


class ClientBase(Methods):
    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        timeout: float,
        retry: Retry,
        headers: dict[str, str] | None,
        rng: random.Random | None,
    ) -> None:
        self.url = url.rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"the service's URL starts with http:// or https://, not {url!r}")
        self.token = token
        self.timeout = timeout
        self.retry = retry
        self.rng = rng or random.Random()
        self.headers = dict(headers or {})
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"

    @property
    def ws_url(self) -> str:
        return "ws" + self.url.removeprefix("http") + "/v1/stream/ws"

    def _subscription_state(
        self,
        filters: dict | None,
        after: int,
        after_h: str | None,
        origin: str | None,
        contiguous: bool | None,
        partition: int | None,
        transport: str,
    ) -> SubscriptionState:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")
        if contiguous is None:
            # Every record of the log comes only with no filter and no token (a token forces
            # its tenant into the filter, and hides the control records).
            contiguous = not filters and self.token is None
        return SubscriptionState(
            filters, after=after, after_h=after_h, origin=origin, contiguous=contiguous,
            partition=partition,
        )  # fmt: skip
