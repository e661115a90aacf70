"""Long-poll (docs/wire.md): the records after `after` as one JSON body, waiting up to `wait`
seconds for the first."""

from __future__ import annotations

import asyncio

from starlette.types import Receive, Scope, Send

from streams.apidoc import Reply, operation
from streams.fanout.channel_models import CACHE_CONTROL, REFUSED, LongPollQuery, LongPollReply
from streams.fanout.channels.context import (
    ChannelContext,
    refusal_response,
    stream_fields,
    until_disconnect,
)
from streams.fanout.channels.query import after_of, bad, client_address, number
from streams.fanout.fanout_errors import FanoutError
from streams.fanout.hub import EncodedRecord
from streams.web.errors import ApiError

DEFAULT_LIMIT = 100
DEFAULT_WAIT = 30.0
READ_TYPE = "items.read"  # traces only: delivering them to a long-poll is not traced (no echo)


class LongPollChannel:
    def __init__(self, context: ChannelContext) -> None:
        self.context = context

    @operation(
        "pollRecords",
        "long-poll: the records after `after`, waiting up to `wait` seconds for one",
        query=LongPollQuery,
        replies={
            200: Reply(LongPollReply, headers=(CACHE_CONTROL,)),
            **REFUSED,
        },
        tags=("streams",),
    )
    async def events(self, scope: Scope, receive: Receive, send: Send) -> None:
        context = self.context
        settings = context.service.settings
        try:
            principal, params, where, hub = context.begin(scope, ("after", "limit", "wait"))
            after = after_of(params)
            limit = number(params, "limit", DEFAULT_LIMIT, 1, settings.max_batch_items)
            if limit != int(limit):
                raise bad(f"limit must be an integer, not {limit:g}")
            wait = number(params, "wait", DEFAULT_WAIT, 0, settings.long_poll_max_wait)
            subscription = hub.subscribe(
                after, where, "longpoll", client=client_address(scope), batch=int(limit)
            )
        except (ApiError, FanoutError) as exc:
            await refusal_response(exc)(scope, receive, send)
            return

        async def poll() -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            records: list[EncodedRecord] = []
            while True:
                delivery = await subscription.next(max(0.0, deadline - loop.time()))
                if delivery is None or delivery.items or delivery.caught_up is None:
                    break  # records, the end (shutdown), or the wait is over
            if delivery is not None:
                records = delivery.items
            if any(item.type != READ_TYPE for item in records):  # one trace per answer with content
                polled = {**stream_fields(scope, "longpoll", where, after), "last": records[-1].seq}
                await context.trace(principal, "polled", polled)
            body = b'{"records":[%s],"next":%d,"head":%d}' % (
                b",".join([item.line for item in records]),
                records[-1].seq if records else after,
                hub.head,
            )
            headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        try:
            with subscription:
                await until_disconnect(receive, poll())
        except ApiError as exc:  # the read could not be traced: nothing was sent
            await refusal_response(exc)(scope, receive, send)
