"""Why the fan-out refuses a subscriber, free of any transport.

The hub raises these; whoever serves the subscriber decides how the refusal reaches its client
(streams/fanout/channels/context.py maps each to an HTTP status and a WebSocket close code). So
anything on an event loop, not only the HTTP service, can subscribe to the hub.
"""

from __future__ import annotations


class FanoutError(Exception):
    """A refused subscription. `code` is the machine-readable reason, stable across releases."""

    code = "fanout_refused"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CursorBeyondHead(FanoutError):
    """A cursor past the last record of the log: no record has that seq yet. Taken silently, a
    client whose log was restored from an older backup would skip every record up to it."""

    code = "cursor_beyond_head"


class HubClosed(FanoutError):
    """The hub has stopped publishing (the service is shutting down): subscribe again later."""

    code = "shutting_down"


class TooManySubscribers(FanoutError):
    """One client already holds as many subscriptions as it may."""

    code = "too_many_subscribers"
