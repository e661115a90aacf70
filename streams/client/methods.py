"""The API calls as methods, written once for both clients.

Each method builds its `Call` (calls.py) and hands it to `self._call`, which the sync client
answers with the result and the async client with an awaitable of it. So `Client.get_session`
and `AsyncClient.get_session` are the same function, with the signature and documentation of
`calls.get_session`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec

from streams.client import calls
from streams.client.calls import Call

P = ParamSpec("P")


def _method(build: Callable[P, Call]) -> Callable[Concatenate[Methods, P], Any]:
    """A method taking `build`'s parameters (a type checker sees them) that answers its call."""

    @functools.wraps(build)
    def method(self: Methods, *args: P.args, **kwargs: P.kwargs) -> Any:
        return self._call(build(*args, **kwargs))

    return method


class Methods:
    """The REST API: sessions, items, context, search, observations, stats."""

    def _call(self, call: Call) -> Any:  # pragma: no cover - each client defines it
        raise NotImplementedError

    create_session = _method(calls.create_session)
    get_session = _method(calls.get_session)
    list_sessions = _method(calls.list_sessions)
    end_session = _method(calls.end_session)
    end_turn = _method(calls.end_turn)
    delete_session = _method(calls.delete_session)
    add_item = _method(calls.add_item)
    add_items = _method(calls.add_items)
    get_items = _method(calls.get_items)
    get_item = _method(calls.get_item)
    update_item = _method(calls.update_item)
    remove_item = _method(calls.remove_item)
    context = _method(calls.context)
    search = _method(calls.search)
    observe = _method(calls.observe)
    stats = _method(calls.stats)
    log_status = _method(calls.log_status)
