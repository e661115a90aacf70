"""Signed checkpoints (docs/format.md section 6): C2SP signed notes with Ed25519 keys.

The crypto is `cryptography`'s Ed25519; this module only lays out the note and key strings.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .atomic import create_atomically
from .errors import BadKey, LedgerError
from .filemodes import make_dir

ALG_ED25519 = b"\x01"
SIGNATURE_PREFIX = "\u2014 "  # an em dash and one space


class CheckpointError(LedgerError):
    """A checkpoint that is malformed or not signed by the log key. `check` names the rule."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check


def check_origin(origin: str) -> str:
    if (
        not origin
        or "+" in origin
        or any(c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in origin)
    ):
        raise BadKey(f"origin {origin!r} must be non-empty, without whitespace, controls or '+'")
    return origin


def key_id(origin: str, public_key: bytes) -> bytes:
    return hashlib.sha256(origin.encode("utf-8") + b"\n" + ALG_ED25519 + public_key).digest()[:4]


@dataclass(frozen=True)
class VerifierKey:
    """`<origin>+<hex key id>+<base64(0x01 || public key)>`."""

    origin: str
    key_id: bytes
    public_key: bytes

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        text = text.strip()
        parts = text.split("+", 2)  # the base64 part may itself hold '+'
        if len(parts) != 3:
            raise BadKey(f"vkey {text!r} is not <origin>+<key id>+<key>")
        origin, hex_id, b64 = parts
        try:
            raw = base64.b64decode(b64, validate=True)
            kid = bytes.fromhex(hex_id)
        except ValueError:
            raise BadKey(f"vkey {text!r}: key id or key is not valid hex/base64") from None
        if len(raw) != 33 or raw[:1] != ALG_ED25519 or len(kid) != 4:
            raise BadKey(f"vkey {text!r} is not an Ed25519 verifier key")
        check_origin(origin)
        if key_id(origin, raw[1:]) != kid:
            raise BadKey(f"vkey {text!r}: the key id does not match the key and origin")
        return cls(origin, kid, raw[1:])

    def __str__(self) -> str:
        b64 = base64.b64encode(ALG_ED25519 + self.public_key).decode()
        return f"{self.origin}+{self.key_id.hex()}+{b64}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


class SigningKey:
    """The log's Ed25519 signing key, kept outside the log directory."""

    def __init__(self, origin: str, private_key: Ed25519PrivateKey) -> None:
        self.origin = check_origin(origin)
        self._private = private_key
        public = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.vkey = VerifierKey(origin, key_id(origin, public), public)

    @classmethod
    def from_seed(cls, origin: str, seed: bytes) -> SigningKey:
        return cls(origin, Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def generate(cls, origin: str) -> SigningKey:
        return cls(origin, Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: Path, origin: str) -> SigningKey:
        try:
            private = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise BadKey(f"cannot read signing key {path}: {exc}") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise BadKey(f"signing key {path} is not an Ed25519 key")
        return cls(origin, private)

    def with_origin(self, origin: str) -> SigningKey:
        """The same private key under another origin: a partition's key (`<origin>/p<N>`)."""
        return SigningKey(origin, self._private)

    def save(self, path: Path) -> None:
        """Write the key with mode 0600, all or nothing and durably, refusing to replace an
        existing one (FileExistsError)."""
        pem = self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        make_dir(path.parent)
        create_atomically(path, pem)

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)


def checkpoint_body(origin: str, size: int, root: bytes) -> bytes:
    return f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n".encode()


def sign_checkpoint(key: SigningKey, size: int, root: bytes) -> str:
    body = checkpoint_body(key.origin, size, root)
    signature = base64.b64encode(key.vkey.key_id + key.sign(body)).decode()
    return f"{body.decode()}\n{SIGNATURE_PREFIX}{key.origin} {signature}\n"


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    text: str


def parse_checkpoint(text: str, vkey: VerifierKey) -> Checkpoint:
    """Parse a signed note and check its signature by `vkey`. Raises CheckpointError."""
    body, sep, signatures = text.partition("\n\n")
    if not sep or not signatures.endswith("\n"):
        raise CheckpointError(
            "checkpoint.format", "not a signed note: no blank line or final newline"
        )
    lines = body.split("\n")
    if len(lines) != 3:
        raise CheckpointError("checkpoint.format", f"the note has {len(lines)} body lines, not 3")
    origin, size_text, root_b64 = lines
    if origin != vkey.origin:
        raise CheckpointError("checkpoint.origin", f"origin {origin!r} is not {vkey.origin!r}")
    if (
        not size_text.isdigit()
        or not size_text.isascii()
        or (size_text != "0" and size_text[0] == "0")
    ):
        raise CheckpointError("checkpoint.format", f"tree size {size_text!r} is not a decimal")
    try:
        root = base64.b64decode(root_b64, validate=True)
    except ValueError:
        root = b""
    if len(root) != 32 or base64.b64encode(root).decode() != root_b64:
        raise CheckpointError("checkpoint.format", f"root {root_b64!r} is not base64 of 32 bytes")
    message = (body + "\n").encode()
    found_key = False
    for line in signatures[:-1].split("\n"):
        if not line.startswith(SIGNATURE_PREFIX):
            raise CheckpointError("checkpoint.format", f"malformed signature line {line!r}")
        name, _, b64 = line[len(SIGNATURE_PREFIX) :].partition(" ")
        try:
            raw = base64.b64decode(b64, validate=True)
        except ValueError:
            raise CheckpointError(
                "checkpoint.format", f"signature of {name!r} is not base64"
            ) from None
        if name != vkey.origin or raw[:4] != vkey.key_id:
            continue  # a witness or another key: not ours to judge
        found_key = True
        if len(raw) == 68 and vkey.verify(message, raw[4:]):
            return Checkpoint(origin, int(size_text), root, text)
    if found_key:
        raise CheckpointError("checkpoint.signature", "the log key's signature does not verify")
    raise CheckpointError("checkpoint.signature", "no signature by the log key")
