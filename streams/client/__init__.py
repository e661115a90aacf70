"""A Python client for the ledgermem service (docs/client.md): `Client` (blocking) and
`AsyncClient` (asyncio) for the REST API, typed errors, safe retries, and live subscriptions
that resume across restarts and check every record's hash chain as it arrives.

It imports httpx, websockets and the log's pure format core (`eventstore.record`,
`eventstore.linecheck`), never the service itself, so a runtime can use it without Starlette or
uvicorn being loaded.
"""

from streams.client.async_client import AsyncClient, AsyncSubscription
from streams.client.calls import Call, new_idempotency_key
from streams.client.errors import *  # noqa: F403 - every typed error is part of the API
from streams.client.errors import ApiError, ChainBroken, ClientError, ConnectionFailed
from streams.client.failures import StreamClosed
from streams.client.retry import Retry
from streams.client.subscription import StreamRecord
from streams.client.sync_client import Client, Subscription

__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncSubscription",
    "Call",
    "ChainBroken",
    "Client",
    "ClientError",
    "ConnectionFailed",
    "Retry",
    "StreamClosed",
    "StreamRecord",
    "Subscription",
    "new_idempotency_key",
]
