"""Service settings: flags win over `LEDGERMEM_*` environment variables, which win over the TOML
file, which wins over the defaults of docs/wire.md (`./ledgermem-data`, `127.0.0.1`, `8000`).

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
allowed_hosts = ["memory.internal"]            # Host names besides loopback and the bound host
allowed_origins = ["https://app.example"]      # cross-origin callers; CORS answers only to them
header_timeout = 10.0          # seconds a client may take to send a request's headers
body_timeout = 60.0            # and its body (streams answer for as long as they like)
fd_reserve = 64                # file descriptors kept for the log, never used for connections
store = "postgresql://ledgermem@db/ledgermem"  # or redis://...: a shared store; else files
lease_seconds = 5.0            # a partition leader's lease on the shared store
advertise_url = "http://10.0.0.5:8000"  # where other replicas reach this one (forwarding)
agentops_tenant = "agents"     # AgentOps calls without a token act for it (off when unset)
agentops_networks = ["10.42.0.0/16"]  # the peers they may come from, besides loopback

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
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from eventstore.errors import InvalidInput
from eventstore.identifiers import is_identifier
from eventstore.record import CONTROL_TENANT

# `log`: the log-wide reads (every tenant's figures and identifiers: entry bundles, the log's
# /v1/log/status and /metrics, any partition), for operators and auditors. A tenant's `admin`
# (erasure) never implies it, and a token that names no scopes gets `TENANT_SCOPES`.
LOG_SCOPE = "log"
SCOPES = ("read", "write", "admin", LOG_SCOPE)
TENANT_SCOPES = ("read", "write", "admin")
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
    allowed_hosts: tuple[str, ...] = ()  # Host names accepted besides loopback and the bound host
    allowed_origins: tuple[str, ...] = ()  # foreign origins allowed to call (answered with CORS)
    header_timeout: float = 10.0  # a request's headers must arrive within it
    body_timeout: float = 60.0  # and its body within it (a response may stream for ever)
    fd_reserve: int = 64  # descriptors no connection may take, so the log can always open files
    store: str | None = None  # a shared store's postgresql:// or redis:// URL; None: file log
    lease_seconds: float = 5.0  # a partition leader's lease (store mode)
    advertise_url: str | None = None  # this replica's URL for the others; None: the bound one
    # AgentOps' routes without a token act for this tenant (read, write), from loopback and
    # `agentops_networks` only (docs/agentops.md, "A runtime without a token"); None: off
    agentops_tenant: str | None = None
    agentops_networks: tuple[str, ...] = ()  # peer networks (CIDR) besides loopback
    extra: dict[str, object] = field(default_factory=dict)

    def check(self) -> Settings:
        if type(self.port) is not int or not 0 <= self.port <= 65535:
            raise InvalidInput(f"port must be 0 to 65535 (0: any free one), not {self.port!r}")
        _check_tokens(self.tokens)
        if self.store is not None:
            from eventstore.shared import StoreError
            from eventstore.shared.engine import check_store_url

            try:
                check_store_url(self.store)
            except StoreError as exc:
                raise InvalidInput(
                    f"{exc}; leave store out for the file log in the data directory"
                ) from None
        if not 0.5 <= self.lease_seconds <= 600:  # also refuses NaN
            raise InvalidInput(
                f"lease_seconds must be between 0.5 and 600, not {self.lease_seconds!r}"
            )
        if self.advertise_url is not None and not self.advertise_url.startswith(
            ("http://", "https://")
        ):
            raise InvalidInput(
                f"advertise_url must be an http:// or https:// URL, not {self.advertise_url!r}"
            )
        if self.agentops_tenant is not None and not is_identifier(self.agentops_tenant):
            raise InvalidInput(
                f"agentops_tenant must be a tenant name (an identifier), not {self.agentops_tenant!r}"
            )
        if self.agentops_networks and self.agentops_tenant is None:
            raise InvalidInput("agentops_networks needs agentops_tenant: the tenant they reach")
        for network in self.agentops_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise InvalidInput(
                    f"agentops_networks: {network!r} is not a network (10.0.0.0/8, fd00::/8, an "
                    "address)"
                ) from None
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


def _check_tokens(tokens: tuple[Token, ...]) -> None:
    """No token for the log's own tenant (its control records), and no token listed twice: which
    tenant it names would depend on the order of the list. A token is never echoed (a secret):
    the entries are named by their place in the list."""
    first: dict[str, int] = {}
    for number, token in enumerate(tokens, 1):
        if token.tenant == CONTROL_TENANT:
            raise InvalidInput(
                f"token {number} has tenant {CONTROL_TENANT!r}, reserved for the log's control "
                "records: give it another tenant"
            )
        if token.token in first:
            was = tokens[first[token.token] - 1].tenant
            also = f"for tenants {was!r} and {token.tenant!r}" if was != token.tenant else "twice"
            raise InvalidInput(
                f"tokens {first[token.token]} and {number} are the same token, listed {also}: "
                "give each entry its own token"
            )
        first[token.token] = number


def _parse_tokens(raw: object) -> tuple[Token, ...]:
    if not isinstance(raw, list):
        raise InvalidInput("tokens must be a list of {token, tenant, scopes} tables")
    tokens: list[Token] = []
    for entry in raw:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("token"), str)
            or not entry["token"]
        ):
            raise InvalidInput("each token needs a non-empty 'token' string")
        raw_scopes = entry.get("scopes", list(TENANT_SCOPES))
        if not isinstance(raw_scopes, list) or not all(isinstance(s, str) for s in raw_scopes):
            raise InvalidInput(f"token scopes must be a list among {', '.join(SCOPES)}")
        scopes = frozenset(raw_scopes)
        if not scopes <= set(SCOPES):
            raise InvalidInput(f"token scopes must be among {', '.join(SCOPES)}")
        tenant = entry.get("tenant", DEFAULT_TENANT)
        if not is_identifier(tenant):
            # An empty tenant is a typo (`t::read`), not a request for tenant `default`.
            raise InvalidInput(
                f"token {len(tokens) + 1} has tenant {tenant!r}: give it a tenant name of 1 to "
                "128 characters of A-Z a-z 0-9 . _ : @ / + -"
            )
        tokens.append(Token(entry["token"], tenant, scopes))
    return tuple(tokens)


def _tokens_from_env(text: str) -> list[dict[str, str | list[str]]]:
    """`token:tenant:scope+scope,...`; an entry is never echoed, it holds a secret."""
    entries: list[dict[str, str | list[str]]] = []
    for number, item in enumerate(text.split(","), 1):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) != 3 or not all(parts):
            raise InvalidInput(
                f"LEDGERMEM_TOKENS entry {number} is not token:tenant:scopes; write it like "
                "s3cret:acme:read+write (scopes among read, write, admin, joined by +)"
            )
        token, tenant, scopes = parts
        entries.append({"token": token, "tenant": tenant, "scopes": scopes.split("+")})
    return entries


def _coerce(name: str, value: Any) -> Any:
    """A setting's value from TOML or the environment, as its field's type wants it (checked by
    `Settings.check` after)."""
    kind = {f.name: f.type for f in fields(Settings)}[name]
    if kind == "tuple[str, ...]":
        if isinstance(value, str):  # from the environment: comma-separated
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise InvalidInput(f"setting {name} must be a list of strings, not {value!r}")
        return tuple(value)
    try:
        if kind == "bool" and isinstance(value, str):
            return value.lower() in ("1", "true", "yes", "on")
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
    except ValueError:
        raise InvalidInput(f"setting {name} must be a number, not {value!r}") from None
    return value


def load_settings(
    config_file: str | None = None, env: Mapping[str, str] | None = None, **flags: object
) -> Settings:
    """The settings from a TOML file (or LEDGERMEM_CONFIG), then the environment's LEDGERMEM_*,
    then `flags` (the command line's), each over the one before; checked."""
    environ: Mapping[str, str] = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = config_file or environ.get("LEDGERMEM_CONFIG")
    if path:
        try:
            data = tomllib.loads(Path(path).read_text("utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"cannot read settings {path}: {exc}") from None
        values.update(data)
    names = {f.name for f in fields(Settings)} - {"tokens", "extra"}
    for name in names:
        key = "LEDGERMEM_" + name.upper()
        if key in environ:
            values[name] = environ[key]
    if "LEDGERMEM_TOKENS" in environ:
        values["tokens"] = _tokens_from_env(environ["LEDGERMEM_TOKENS"])
    values.update({k: v for k, v in flags.items() if v is not None})
    unknown = set(values) - names - {"tokens"}
    if unknown:
        raise InvalidInput(f"unknown settings: {', '.join(sorted(unknown))}")
    settings = Settings(**{k: _coerce(k, v) for k, v in values.items() if k != "tokens"})
    if "tokens" in values:
        settings = replace(settings, tokens=_parse_tokens(values["tokens"]))
    return settings.check()
