"""The types every part of the API shares: identifiers, times, records, errors, write answers.

The model that describes a request is the one that parses it (streams/web/json_body.py for a
body, streams/routes/query.py for a query string), so what /openapi.json says a route takes is
what its handler is given. Bodies are `Strict` models: unknown fields are refused
(`additionalProperties: false`) and nothing is coerced (a bool is no integer, "5" is no 5).
Answers are `Open` models: a client must accept fields added later (docs/wire.md).
"""

from __future__ import annotations

import functools
import re
from types import UnionType
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Literal,
    NotRequired,
    Union,
    get_args,
    get_origin,
)

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError
from typing_extensions import TypeAliasType, TypedDict

from eventstore.errors import InvalidInput
from eventstore.identifiers import IDENTIFIER_PATTERN
from eventstore.jcs import MAX_SAFE_INTEGER
from eventstore.timestamps import parse_time

# The validation context of a query string (streams/routes/query.py): every value is text.
QUERY_TEXT = "query text"
_DIGITS = re.compile(r"-?[0-9]{1,18}")  # ASCII digits only: "²" is a digit to str.isdigit


def _integer(value: object, info: ValidationInfo) -> object:
    """An integer as the API takes one. JSON has one number type, so a whole-number float is
    the integer it equals (8000.0 is 8000: JSON Schema's `integer` says so, and the log's JCS
    writes it so); in a query string, an integer is ASCII digits with an optional minus.
    Anything else goes on to the strict `int`, which refuses it (a bool, "5" in a body, 80.5)."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
            return int(value)
    elif isinstance(value, str) and info.context == QUERY_TEXT:
        if _DIGITS.fullmatch(value):
            return int(value)
        raise PydanticCustomError("int_parsing", "must be an integer")
    return value


def _time(value: object) -> object:
    """A time given as text, as eventstore/timestamps.py `parse_time` reads it: µs."""
    if not isinstance(value, str):
        return value
    try:
        return parse_time(value)
    except InvalidInput as exc:
        raise PydanticCustomError("time_parsing", str(exc)) from None


# docs/format.md section 2; anchored, as JSON Schema's `pattern` is a search.
Identifier = Annotated[str, Field(pattern=f"^{IDENTIFIER_PATTERN}$")]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
# After an int's constraints (`Annotated[int, Field(ge=...), WHOLE]`): the constraints then
# stay the integer's own, in its JSON Schema too.
WHOLE = BeforeValidator(_integer)
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER), WHOLE]
Count = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER), WHOLE]
# eventstore/timestamps.py parse_time: microseconds since the epoch, or an ISO-8601 time.
Micros = Annotated[
    int, Field(ge=-(10**18) + 1, le=10**18 - 1, description="µs since the epoch"), WHOLE
]
if TYPE_CHECKING:  # what a handler is given: the time, parsed to µs
    Time = int
else:
    Time = Annotated[
        Micros | Annotated[str, Field(json_schema_extra={"format": "date-time"})],
        BeforeValidator(_time),
        Field(description="µs since the epoch, or an ISO-8601 time (UTC when it has no offset)"),
    ]
JsonObject = dict[str, Any]
# Who reads: an `agent` read counts for lru/lfu eviction, an `operator` one (a dashboard) does not.
Reader = Literal["agent", "operator"]

# A JSON number a record can hold (eventstore/jcs.py): within ±(2**53-1), or a double of magnitude
# 1e21 or more (JCS writes it with an exponent: it stays a double). Between the two, and an integer
# literal beyond ±(2**53-1), is refused. JSON Schema cannot tell a literal from the double of the
# same value, so this says the doubles (what a JSON encoder writes of them).
JCS_EXPONENT_FROM = 1e21
SafeNumber = Annotated[
    Union[  # noqa: UP007 (a TypeAliasType's members are evaluated at runtime)
        Annotated[float, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)],
        Annotated[float, Field(ge=JCS_EXPONENT_FROM)],
        Annotated[float, Field(le=-JCS_EXPONENT_FROM)],
    ],
    Field(description="within ±(2**53-1), or a double beyond ±1e21 (not an integer literal)"),
]


def _as_is(value: object) -> object:
    return value


def _number_as_given(value: object, check: ValidatorFunctionWrapHandler) -> object:
    try:
        check(value)
    except ValidationError:  # one refusal, not one per member of the union
        raise PydanticCustomError(
            "number", "must be a number within ±(2**53-1), or a double beyond ±1e21"
        ) from None
    return value


def refused_as(message: str) -> WrapValidator:
    """A union's refusal in one sentence (`message`), instead of one per member it tried."""

    def check(value: object, handler: ValidatorFunctionWrapHandler) -> object:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("union", message) from None

    return WrapValidator(check)


# A number in a body, checked as a SafeNumber and kept as given: 2 stays the integer 2 (when
# the model is dumped for the memory core too).
Number = Annotated[
    SafeNumber, WrapValidator(_number_as_given), PlainSerializer(_as_is, when_used="always")
]

# Any JSON value: what a record's payload can hold.
if TYPE_CHECKING:
    JsonValue = Any  # a recursive TypeAliasType is beyond mypy: to the checker, any value
else:
    JsonValue = TypeAliasType(
        "JsonValue",
        Union[SafeNumber, str, bool, None, list["JsonValue"], dict[str, "JsonValue"]],  # noqa: UP007
    )


def _as_parsed(value: object, _check: ValidatorFunctionWrapHandler) -> object:
    return value


# A JSON value in a body, as the body's parse gave it. That parse (streams/web/json_body.py,
# eventstore/jcs.py `loads_strict`'s rules) takes exactly the JSON a record can hold, which is
# what `JsonValue` says: the value is not walked a second time, nor changed (2 stays 2).
Json = Annotated[JsonValue, WrapValidator(_as_parsed), PlainSerializer(_as_is, when_used="always")]
JsonValueObject = dict[str, Json]

# A string the core takes as not blank: one character that str.strip() keeps. Spelled out, as
# JSON Schema's `\s` (ECMA-262's) is not str.isspace: it lacks U+001C-U+001F and U+0085 and has
# U+FEFF. Every character str.isspace() holds is below U+3001.
_SPACES = "".join(f"\\u{n:04x}" for n in range(0x3001) if chr(n).isspace())
NOT_BLANK = f"[^{_SPACES}]"

# What If-Match carries (streams/routes/resource.py `expected_version`): a session version,
# quoted or not, weak or not ("7", W/"7", 7).
Version = Annotated[str, Field(pattern=r'^\s*(W/)?"*-?[0-9]{1,18}"*\s*$')]

# An Idempotency-Key: any non-empty value (an empty one would be shared by every caller that
# sends one: 400).
IdempotencyKeyText = Annotated[str, Field(min_length=1)]

# An optional field or query parameter a client leaves out: absent, never null (a query string
# has no null, and a null is refused where the type has none).
Absent = SkipJsonSchema[None]


def absent(description: str | None = None) -> Any:
    """An optional field whose schema shows no `default: null`: absent means "not given", the
    server's own value (which may depend on the session)."""
    if description is None:  # the type's own description stays
        return Field(None, json_schema_extra=_no_default)
    return Field(None, description=description, json_schema_extra=_no_default)


def _no_default(schema: dict) -> None:
    schema.pop("default", None)


def as_typed_dict(model: type[BaseModel]) -> Any:
    """`model` as a TypedDict of the same fields, types and constraints (its nested models too):
    it validates a body to the plain dict it was given, without making the model's instances.
    For the hot write path, whose core takes dicts (streams/routes/items_api.py): the same
    declaration, about a microsecond less per item. A model with validators of its own has no
    such form."""
    return _typed_dicts(model)


@functools.cache
def _typed_dicts(model: type[BaseModel]) -> Any:
    decorators = model.__pydantic_decorators__
    assert not (decorators.model_validators or decorators.field_validators), model
    fields: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        kind = _plain(field.annotation)
        if field.metadata:
            kind = Annotated[(kind, *field.metadata)]
        fields[name] = kind if field.is_required() else NotRequired[kind]
    typed = _make_typed_dict(model.__name__, fields)  # a class made at run time: to mypy, Any
    config = model.model_config
    strict = bool(config.get("strict"))
    typed.__pydantic_config__ = ConfigDict(extra=config.get("extra"), strict=strict)
    return typed


_make_typed_dict: Any = TypedDict


def _plain(kind: Any) -> Any:
    """`kind` with each model in it as its TypedDict (`as_typed_dict`)."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return _typed_dicts(kind)
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        return Annotated[(_plain(args[0]), *kind.__metadata__)]
    if origin in (list, dict):
        return origin[tuple(_plain(arg) for arg in args)]
    if origin in (Union, UnionType):
        return Union[tuple(_plain(arg) for arg in args)]  # noqa: UP007
    return kind


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    what: ClassVar[str] = "the body"  # how a refusal of an unknown field names it


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


def _live_or_redacted(schema: dict) -> None:
    _no_default(schema["properties"]["salt"])
    _no_default(schema["properties"]["redacted"])
    # Exactly one of them: an erased payload takes its salt along (docs/format.md section 9).
    schema["oneOf"] = [{"required": ["salt"]}, {"required": ["redacted"]}]


class Record(Open):
    """One record, exactly its line in the segment file (docs/format.md section 2): with its
    `payload` and `salt`, or, once erased, with `redacted` instead (section 9)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_live_or_redacted)

    v: int
    seq: Count
    ts: SafeInt
    tenant: str
    session: str
    section: str
    type: str
    prev: Hex64
    h: Hex64
    pd: Hex64
    salt: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")] | Absent = Field(
        None, description="the payload's salt; gone with an erased payload"
    )
    payload: Any = Field(None, description="what happened; gone once erased")
    redacted: Count | Absent = Field(
        None, description="once erased: the seq of the redaction record that allowed it"
    )


class ErrorDetail(Open):
    code: str = Field(description="what went wrong, for programs (docs/wire.md)")
    message: str = Field(description="what went wrong, for people")


class ErrorReply(Open):
    """Every refusal: nothing was appended."""

    error: ErrorDetail


class RecordReply(Open):
    """A durable write: its record, exactly as the segment file holds it."""

    record: Record
