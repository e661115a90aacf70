"""Service settings: flags win over `LEDGERMEM_*` environment variables, which win over the TOML
file, which wins over the defaults of wire.md (`./ledgermem-data`, `127.0.0.1`, `8000`).

```toml
host = "127.0.0.1"
port = 8000
data = "./ledgermem-data"
allow_remote = false           # listen beyond loopback without tokens: only if you mean it
max_body_bytes = 8388608
max_batch_items = 1000
max_subscribers_per_client = 64
memory_config = "memory.toml"  # sections config (docs/sections.md)
dedup_window_us = 900000000    # observations with the same content within it are one (15 min)

[[tokens]]
token = "s3cret"
tenant = "acme"
scopes = ["read", "write", "admin"]
```
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from eventstore.errors import InvalidInput

SCOPES = ("read", "write", "admin")
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Token:
    token: str
    tenant: str
    scopes: frozenset[str]


@dataclass(frozen=True)
class Settings:
    data: str = "./ledgermem-data"
    host: str = "127.0.0.1"
    port: int = 8000
    allow_remote: bool = False
    tokens: tuple[Token, ...] = ()
    max_body_bytes: int = 8 * 2**20
    max_batch_items: int = 1000
    max_subscribers_per_client: int = 64
    long_poll_max_wait: float = 60.0
    heartbeat_seconds: float = 15.0
    subscriber_buffer: int = 1024  # live records a subscriber may lag before it reads the log
    subscriber_buffer_bytes: int = 1 << 20  # and the bytes those records may hold
    memory_config: str | None = None
    seg_bits: int = 16
    checkpoint_interval: float = 1.0
    unsafe_no_fsync: bool = False  # tests and benchmarks only: acknowledges before fsync
    dedup_window_us: int = 15 * 60 * 1_000_000  # observations: identical content within it is one
    extra: dict = field(default_factory=dict)

    def check(self) -> Settings:
        if not self.tokens and not self.allow_remote and not _is_loopback(self.host):
            raise InvalidInput(
                f"refusing to listen on {self.host} without API tokens: configure tokens, or set "
                "allow_remote = true (LEDGERMEM_ALLOW_REMOTE=1, --allow-remote) if you mean it"
            )
        return self


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parse_tokens(raw: object) -> tuple[Token, ...]:
    if not isinstance(raw, list):
        raise InvalidInput("tokens must be a list of {token, tenant, scopes} tables")
    tokens = []
    for entry in raw:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("token"), str)
            or not entry["token"]
        ):
            raise InvalidInput("each token needs a non-empty 'token' string")
        scopes = frozenset(entry.get("scopes", SCOPES))
        if not scopes <= set(SCOPES):
            raise InvalidInput(f"token scopes must be among {', '.join(SCOPES)}")
        tokens.append(Token(entry["token"], str(entry.get("tenant", DEFAULT_TENANT)), scopes))
    return tuple(tokens)


def _coerce(name: str, value: object) -> object:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    try:
        if kind == "bool" and isinstance(value, str):
            return value.lower() in ("1", "true", "yes", "on")
        if kind == "int":
            return int(value)  # type: ignore[arg-type]
        if kind == "float":
            return float(value)  # type: ignore[arg-type]
    except ValueError:
        raise InvalidInput(f"setting {name} must be a number, not {value!r}") from None
    return value


def load_settings(
    config_file: str | None = None, env: dict | None = None, **flags: object
) -> Settings:
    env = os.environ if env is None else env
    values: dict = {}
    path = config_file or env.get("LEDGERMEM_CONFIG")
    if path:
        try:
            data = tomllib.loads(Path(path).read_text("utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"cannot read settings {path}: {exc}") from None
        values.update(data)
    names = {f.name for f in fields(Settings)} - {"tokens", "extra"}
    for name in names:
        key = "LEDGERMEM_" + name.upper()
        if key in env:
            values[name] = env[key]
    if "LEDGERMEM_TOKENS" in env:  # token:tenant:scope+scope,...
        values["tokens"] = [
            {"token": t, "tenant": tenant, "scopes": scopes.split("+")}
            for t, tenant, scopes in (
                item.split(":") for item in env["LEDGERMEM_TOKENS"].split(",") if item
            )
        ]
    values.update({k: v for k, v in flags.items() if v is not None})
    unknown = set(values) - names - {"tokens"}
    if unknown:
        raise InvalidInput(f"unknown settings: {', '.join(sorted(unknown))}")
    settings = Settings(**{k: _coerce(k, v) for k, v in values.items() if k != "tokens"})
    if "tokens" in values:
        settings = replace(settings, tokens=_parse_tokens(values["tokens"]))
    return settings.check()
