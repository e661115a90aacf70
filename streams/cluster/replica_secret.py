"""Where the secret the replicas share comes from: LEDGERMEM_REPLICA_SECRET or DATA/keys/replica.secret.

`ledgermem init-store --data DIR` writes `DIR/keys/replica.secret` beside the signing key, so the
one step that shares the key between replicas (copying `keys/`) shares this secret too. The
environment variable wins, for deployments that hand secrets in that way. Without either, the
replica takes no forwarded requests (each one is a 401) and forwards none.

The secret is the file's bytes without surrounding whitespace (so an editor's trailing newline
does not split the replicas) and must be at least MIN_SECRET_BYTES long.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from eventstore.errors import InvalidInput
from streams.cluster.replica_sig import MIN_SECRET_BYTES

ENV = "LEDGERMEM_REPLICA_SECRET"
FILE_NAME = "replica.secret"


def secret_path(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / "keys" / FILE_NAME


def load_replica_secret(
    data_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> bytes | None:
    """The shared secret, or None when none is configured. A too-short one is an InvalidInput."""
    env = os.environ if env is None else env
    if env.get(ENV):
        secret, where = env[ENV].strip().encode(), ENV
    else:
        path = secret_path(data_dir)
        try:
            secret, where = path.read_bytes().strip(), str(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InvalidInput(f"cannot read the replica secret {path}: {exc.strerror}") from None
    if len(secret) < MIN_SECRET_BYTES:
        raise InvalidInput(
            f"the replica secret in {where} is {len(secret)} bytes; give at least "
            f"{MIN_SECRET_BYTES} (ledgermem init-store --data creates one)"
        )
    return secret
