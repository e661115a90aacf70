"""Declarative capture, pure: AgentOps' `memorySaveRules` and `contextInjectTools` (docs/agentops.md).

When a runtime reports a tool call and its result (`Session.tool_call`, `POST
/v1/sessions/{s}/tool-calls`):

- the first save rule whose tool is the call's, whose `match_output` (a regular expression,
  searched anywhere in the output) matches and whose `match_args` (argument name -> regular
  expression; the argument must be a non-empty string) all match makes the result an
  observation of the rule's type and scope, the rule named in its metadata;
- the first inject rule of the tool runs a search before the tool (its query the tool's main
  argument, or a fixed string) and the memories found are recorded, for tracing: nothing is
  injected into a context.

Rules come from the memory's TOML config, checked when it is loaded: a bad rule refuses the
config with an error naming the rule and the field.

    [[memory_save_rules]]
    name = "bash-errors"          # optional: memory_save_rules[N] otherwise
    tool = "bash"
    match_output = "error|panic|fatal"
    match_args = { command = "^kubectl" }
    type = "bugfix"               # default "discovery"
    scope = "session"             # or "user" (the session's user), "tenant"; default "session"

    [[context_inject_tools]]
    tool = "bash"
    query = "from_tool_args"      # default; anything else is a fixed query
    limit = 3                     # 1 to 10, default 3
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from sections.errors import ConfigError
from sections.model.names import OBSERVATION_SCOPES, observation_type_error

SAVE_KEY, INJECT_KEY = "memory_save_rules", "context_inject_tools"
FROM_TOOL_ARGS = "from_tool_args"
QUERY_ARGS = ("command", "query", "path")  # the argument a query is taken from, in this order
TITLE_ARGS = ("command", "path")  # the argument a title quotes
TITLE_CHARS, CONTENT_CHARS = 80, 1000
MAX_INJECT = 10


@dataclass(frozen=True)
class SaveRule:
    name: str
    tool: str
    match_output: re.Pattern | None = None
    match_args: tuple[tuple[str, re.Pattern], ...] = ()
    type: str = "discovery"
    scope: str = "session"


@dataclass(frozen=True)
class InjectRule:
    name: str
    tool: str
    query: str = FROM_TOOL_ARGS
    limit: int = 3


@dataclass(frozen=True)
class CaptureRules:
    save: tuple[SaveRule, ...] = ()
    inject: tuple[InjectRule, ...] = ()


# ---- loading ------------------------------------------------------------------------------------


def _pattern(where: str, field: str, value: object) -> re.Pattern:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {field} must be a regular expression in a string")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ConfigError(
            f"{where}: {field} {value!r} is not a regular expression: {exc}"
        ) from None


def _table(where: str, table: object, allowed: set[str]) -> dict:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(
            f"{where}: unknown keys {sorted(unknown)}; use {', '.join(sorted(allowed))}"
        )
    if not isinstance(table.get("tool"), str) or not table["tool"]:
        raise ConfigError(f"{where}: tool must be the name of a tool (a non-empty string)")
    return table


def _name(where: str, table: dict, seen: set[str]) -> str:
    name = table.get("name", where)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: name must be a non-empty string")
    if name in seen:
        raise ConfigError(f"{where}: another rule is named {name!r} already")
    seen.add(name)
    return name


def _save_rule(where: str, table: object, seen: set[str]) -> SaveRule:
    fields = {"name", "tool", "match_output", "match_args", "type", "scope"}
    table = _table(where, table, fields)
    name = _name(where, table, seen)
    output = table.get("match_output")
    match_output = _pattern(where, "match_output", output) if output else None
    args = table.get("match_args", {})
    if not isinstance(args, dict):
        raise ConfigError(f"{where}: match_args must be a table of argument = regular expression")
    match_args = tuple(
        (key, _pattern(where, f"match_args.{key}", value)) for key, value in sorted(args.items())
    )
    kind = table.get("type", "discovery")
    wrong = observation_type_error(kind)
    if wrong:
        raise ConfigError(f"{where}: type {kind!r}: {wrong}")
    scope = table.get("scope", "session")
    if scope not in OBSERVATION_SCOPES:
        raise ConfigError(f"{where}: scope {scope!r} is not one of {', '.join(OBSERVATION_SCOPES)}")
    return SaveRule(name, table["tool"], match_output, match_args, kind, scope)


def _inject_rule(where: str, table: object, seen: set[str]) -> InjectRule:
    table = _table(where, table, {"name", "tool", "query", "limit"})
    name = _name(where, table, seen)
    query = table.get("query", FROM_TOOL_ARGS)
    if not isinstance(query, str) or not query.strip():
        raise ConfigError(f"{where}: query must be {FROM_TOOL_ARGS!r} or a fixed query string")
    limit = table.get("limit", 3)
    if type(limit) is not int or not 1 <= limit <= MAX_INJECT:
        raise ConfigError(f"{where}: limit must be an integer from 1 to {MAX_INJECT}")
    return InjectRule(name, table["tool"], query, limit)


def load(data: dict) -> CaptureRules:
    """The rules of a config's `memory_save_rules` and `context_inject_tools` arrays of tables."""
    seen: set[str] = set()
    save = tuple(_save_rule(where, t, seen) for where, t in _tables(data, SAVE_KEY))
    inject = tuple(_inject_rule(where, t, seen) for where, t in _tables(data, INJECT_KEY))
    return CaptureRules(save, inject)


def _tables(data: dict, key: str) -> list[tuple[str, object]]:
    """The tables of the array `key`, each with where it is (`key[N]`)."""
    tables = data.get(key, [])
    if not isinstance(tables, list):
        raise ConfigError(f"{key} must be an array of tables ([[{key}]])")
    return [(f"{key}[{n}]", t) for n, t in enumerate(tables)]


# ---- matching -----------------------------------------------------------------------------------


def as_text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _args_match(rule: SaveRule, args: dict) -> bool:
    for key, pattern in rule.match_args:
        value = args.get(key)
        if not isinstance(value, str) or not value or pattern.search(value) is None:
            return False
    return True


def save_rule_for(rules: CaptureRules, tool: str, args: dict, output: object) -> SaveRule | None:
    """The first save rule that matches this call and its output, or None."""
    text = as_text(output)
    for rule in rules.save:
        if rule.tool != tool:
            continue
        if rule.match_output is not None and rule.match_output.search(text) is None:
            continue
        if _args_match(rule, args):
            return rule
    return None


def inject_rule_for(rules: CaptureRules, tool: str) -> InjectRule | None:
    return next((rule for rule in rules.inject if rule.tool == tool), None)


def query_of(rule: InjectRule, args: dict) -> str | None:
    """The search an inject rule runs: the tool's main argument, or the rule's fixed query."""
    if rule.query != FROM_TOOL_ARGS:
        return rule.query
    for key in QUERY_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + "..."


def observation_of(rule: SaveRule, tool: str, args: dict, output: object) -> dict:
    """The observation a matching call becomes: AgentOps' title and tags, the output as content
    (1,000 characters at most), the rule and tool in `source`."""
    title = f"Auto-captured: {tool}"
    for key in TITLE_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value:
            title += f" — {_cut(value, TITLE_CHARS)}"
            break
    content = _cut(as_text(output), CONTENT_CHARS)
    return {
        "type": rule.type,
        "title": title,
        "content": content if content.strip() else f"{tool} returned no output",
        "tags": ["auto-capture", "hook", tool],
        "source": {"rule": rule.name, "tool": tool},
    }
