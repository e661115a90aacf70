"""`AsyncClient`: the REST API and live subscriptions on asyncio, over httpx and websockets'
asyncio client. The calls themselves are calls.py's; this module only sends them and awaits."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, AsyncIterator

import httpx
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

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


class AsyncClient(ClientBase):
    """An asyncio client: every API method returns an awaitable. `transport` is an httpx
    async transport."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retry: Retry = CALL_RETRY,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(url, token=token, timeout=timeout, retry=retry, headers=headers, rng=rng)
        self.http = httpx.AsyncClient(
            base_url=self.url, timeout=timeout, headers=self.headers, transport=transport
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, call: Call) -> object:
        request = self.http.build_request(
            call.method, call.path, params=list(call.params), headers=call.all_headers,
            content=call.content,
        )  # fmt: skip
        attempts = Attempts(self.retry, self.rng)
        while True:
            try:
                response = await self.http.send(request)
            except httpx.TransportError as exc:
                delay = attempts.after_failure()
                if delay is None:
                    raise ConnectionFailed(
                        f"{call.method} {call.path}: {exc!r}", attempts.failures
                    ) from exc
                await asyncio.sleep(delay)
                continue
            answer = Answer(response.status_code, lower_headers(response.headers), response.content)
            if attempts.retryable(answer.status):
                retry_after = parse_retry_after(answer.headers.get("retry-after"))
                delay = attempts.after_failure(retry_after)
                if delay is not None:
                    await asyncio.sleep(delay)
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
    ) -> AsyncSubscription:
        """The records matching `filters` after seq `after`, live, checked (chain.py), across
        disconnects and restarts of the service: `async for record in client.subscribe(...)`."""
        state = self._subscription_state(
            filters, after, after_h, origin, contiguous, partition, transport
        )
        return AsyncSubscription(self, state, transport, retry, idle_timeout)


class AsyncSubscription:
    """An async iterator of `StreamRecord`s; `cursor` and `last_h` say where it is (keep them
    to resume later with `after=` and `after_h=`). `aclose()` (or `async with`) ends it."""

    def __init__(
        self,
        client: AsyncClient,
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

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> StreamRecord:
        return await self._records.__anext__()

    async def aclose(self) -> None:
        await self._records.aclose()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _follow(self) -> AsyncGenerator[StreamRecord, None]:
        attempts = Attempts(self.retry, self.client.rng)
        once = self._sse if self.transport == "sse" else self._ws
        while True:
            retry_after = None
            try:
                async for record in once(attempts):
                    yield record
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
            await asyncio.sleep(delay)

    async def _sse(self, attempts: Attempts) -> AsyncIterator[StreamRecord]:
        path, params, headers = self.state.sse_request()
        timeout = httpx.Timeout(self.client.timeout, read=self.idle_timeout)
        http = self.client.http
        async with http.stream(
            "GET", path, params=params, headers=headers, timeout=timeout
        ) as response:
            if response.status_code != 200:
                raise error_for(
                    response.status_code, lower_headers(response.headers), await response.aread()
                )
            self.state.connections += 1
            attempts.succeeded()
            decoder = SseDecoder()
            async for chunk in response.aiter_bytes():
                for event in decoder.feed(chunk):
                    record = self.state.accept_sse(event)
                    if record is not None:
                        yield record

    async def _ws(self, attempts: Attempts) -> AsyncIterator[StreamRecord]:
        try:
            ws = await ws_connect(
                self.client.ws_url, additional_headers=self.client.headers, max_size=None,
                compression=None, proxy=None, open_timeout=self.client.timeout,
                ping_interval=min(20.0, self.idle_timeout / 2), ping_timeout=self.idle_timeout,
            )  # fmt: skip
        except InvalidStatus as exc:
            raise handshake_error(exc) from None
        async with ws:
            self.state.connections += 1
            attempts.succeeded()
            try:
                await ws.send(self.state.ws_first_frame())
                async for message in ws:
                    record = self.state.accept_ws(message)
                    if record is not None:
                        yield record
            except ConnectionClosed as exc:
                final_close(exc, None, None)
                raise
        final_close(None, ws.close_code, ws.close_reason)
