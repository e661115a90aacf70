"""`Client`: the REST API and live subscriptions, blocking, over httpx and websockets' sync
client. The calls themselves are calls.py's; this module only sends them and waits."""

from __future__ import annotations

import random
import time
from collections.abc import Generator, Iterator

import httpx
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

from streams.client.base import CALL_RETRY, DEFAULT_URL, IDLE_TIMEOUT, SUBSCRIBE_RETRY, ClientBase
from streams.client.calls import Answer, Call, finish
from streams.client.errors import (
    ApiError,
    ChainBroken,
    ConnectionFailed,
    error_for,
    parse_retry_after,
)
from streams.client.failures import TRANSIENT, final_close, handshake_error, lower_headers
from streams.client.retry import Attempts, Retry
from streams.client.sse import SseDecoder
from streams.client.subscription import StreamRecord, SubscriptionState


class Client(ClientBase):
    """A blocking client. `transport` is an httpx transport (tests, unix sockets, proxies)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retry: Retry = CALL_RETRY,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(url, token=token, timeout=timeout, retry=retry, headers=headers, rng=rng)
        self.http = httpx.Client(
            base_url=self.url, timeout=timeout, headers=self.headers, transport=transport
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, call: Call) -> object:
        request = self.http.build_request(
            call.method, call.path, params=list(call.params), headers=call.all_headers,
            content=call.content,
        )  # fmt: skip
        attempts = Attempts(self.retry, self.rng)
        while True:
            try:
                response = self.http.send(request)
            except httpx.TransportError as exc:
                delay = attempts.after_failure()
                if delay is None:
                    raise ConnectionFailed(
                        f"{call.method} {call.path}: {exc!r}", attempts.failures
                    ) from exc
                time.sleep(delay)
                continue
            answer = Answer(response.status_code, lower_headers(response.headers), response.content)
            if attempts.retryable(answer.status):
                retry_after = parse_retry_after(answer.headers.get("retry-after"))
                delay = attempts.after_failure(retry_after)
                if delay is not None:
                    time.sleep(delay)
                    continue
            return finish(call, answer)

    def subscribe(
        self,
        filters: dict | None = None,
        *,
        after: int = -1,
        after_h: str | None = None,
        origin: str | None = None,
        transport: str = "sse",
        contiguous: bool | None = None,
        partition: int | None = None,
        retry: Retry = SUBSCRIBE_RETRY,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> Subscription:
        """The records matching `filters` after seq `after`, live, checked (chain.py), across
        disconnects and restarts of the service: `for record in client.subscribe(...)`."""
        state = self._subscription_state(
            filters, after, after_h, origin, contiguous, partition, transport
        )
        return Subscription(self, state, transport, retry, idle_timeout)


class Subscription:
    """An iterator of `StreamRecord`s; `cursor` and `last_h` say where it is (keep them to
    resume later with `after=` and `after_h=`). `close()` ends it."""

    def __init__(
        self,
        client: Client,
        state: SubscriptionState,
        transport: str,
        retry: Retry,
        idle_timeout: float,
    ) -> None:
        self.client = client
        self.state = state
        self.transport = transport
        self.retry = retry
        self.idle_timeout = idle_timeout
        self._records = self._follow()

    @property
    def cursor(self) -> int:
        return self.state.cursor

    @property
    def last_h(self) -> str | None:
        return self.state.chain.h

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> StreamRecord:
        return next(self._records)

    def close(self) -> None:
        self._records.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _follow(self) -> Generator[StreamRecord, None, None]:
        attempts = Attempts(self.retry, self.client.rng)
        once = self._sse if self.transport == "sse" else self._ws
        while True:
            retry_after = None
            try:
                yield from once(attempts)
            except ChainBroken:
                raise
            except ApiError as exc:
                if not attempts.retryable(exc.status):
                    raise
                retry_after = exc.retry_after
            except TRANSIENT:
                pass
            delay = attempts.after_failure(retry_after)
            if delay is None:
                raise ConnectionFailed(
                    f"the {self.transport} stream could not be resumed at {self.cursor}",
                    attempts.failures,
                )
            time.sleep(delay)

    def _sse(self, attempts: Attempts) -> Iterator[StreamRecord]:
        path, params, headers = self.state.sse_request()
        timeout = httpx.Timeout(self.client.timeout, read=self.idle_timeout)
        http = self.client.http
        with http.stream("GET", path, params=params, headers=headers, timeout=timeout) as response:
            if response.status_code != 200:
                raise error_for(
                    response.status_code, lower_headers(response.headers), response.read()
                )
            self.state.connections += 1
            attempts.succeeded()
            decoder = SseDecoder()
            for chunk in response.iter_bytes():
                for event in decoder.feed(chunk):
                    record = self.state.accept_sse(event)
                    if record is not None:
                        yield record

    def _ws(self, attempts: Attempts) -> Iterator[StreamRecord]:
        try:
            ws = ws_connect(
                self.client.ws_url, additional_headers=self.client.headers, max_size=None,
                compression=None, proxy=None, open_timeout=self.client.timeout,
                ping_interval=min(20.0, self.idle_timeout / 2), ping_timeout=self.idle_timeout,
            )  # fmt: skip
        except InvalidStatus as exc:
            raise handshake_error(exc) from None
        with ws:
            self.state.connections += 1
            attempts.succeeded()
            try:
                ws.send(self.state.ws_first_frame())
                for message in ws:
                    record = self.state.accept_ws(message)
                    if record is not None:
                        yield record
            except ConnectionClosed as exc:
                final_close(exc, None, None)
                raise
        final_close(None, ws.close_code, ws.close_reason)
