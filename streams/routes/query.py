"""A request's query string parsed by the model that documents it (streams/apidoc).

A query string is text: each value is given to the model as the string it was sent as, and the
model's types read it (streams/apidoc/models.py: an integer is ASCII digits, a time is µs or
ISO-8601). A list field takes every value of its name (`?kind=a&kind=b`). A model that refuses
unknown fields (`extra="forbid"`) refuses a parameter it does not take and a single-valued one
given twice, naming it; one that ignores them takes the last value, as a plain lookup would.
`token` is a credential, taken on every route (streams/web/auth.py): never a model's.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterable
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from streams.apidoc.models import QUERY_TEXT
from streams.web.errors import ApiError, invalid_input

Q = TypeVar("Q", bound=BaseModel)
CREDENTIAL = "token"
_UNIONS = (typing.Union, types.UnionType)


@functools.cache
def _lists(model: type[BaseModel]) -> frozenset[str]:
    """The fields of `model` that take every value of their name: those typed as lists."""
    names = set()
    for name, field in model.model_fields.items():
        kind = field.annotation
        members = typing.get_args(kind) if typing.get_origin(kind) in _UNIONS else (kind,)
        if any(typing.get_origin(member) is list for member in members):
            names.add(name)
    return frozenset(names)


def query_values(model: type[BaseModel], pairs: Iterable[tuple[str, str]]) -> dict:
    """The parameters as the model's input: a list for a list field, else the string."""
    lists, strict = _lists(model), model.model_config.get("extra") == "forbid"
    values: dict[str, str | list[str]] = {}
    for name, value in pairs:
        if name == CREDENTIAL:
            continue
        if name in lists:
            listed = values.setdefault(name, [])
            assert isinstance(listed, list)
            listed.append(value)
        elif strict and name in values:
            raise ApiError(400, "invalid_input", f"query parameter {name} is given twice")
        else:
            values[name] = value
    return values


def parse_query(model: type[Q], pairs: Iterable[tuple[str, str]]) -> Q:
    """The query parameters `pairs` (`request.query_params.multi_items()`) as `model`."""
    try:
        return model.model_validate(query_values(model, pairs), context=QUERY_TEXT)
    except ValidationError as exc:
        raise invalid_input(exc, model, query=True) from None
