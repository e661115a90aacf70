"""Any id a seed system accepts, as a log identifier, and back (docs/adapters/README.md).

The log's ids are `[A-Za-z0-9._:@/+-]{1,128}` (eventstore/identifiers.py): what a record line,
a URL path segment and a file name can all carry without quoting. The seeds take any string as
a session or conversation id ("chat 1", "Zoë", a 300-character key). An adapter keeps the
seed's id exactly by this encoding, which it owns:

- an id that is already a log identifier, and does not begin with the encoding's marker `+`,
  is itself: the ids every existing log holds stay as they are;
- any other id of up to 128 characters once escaped is `+` followed by its UTF-8 bytes, each
  byte outside `[A-Za-z0-9._:@/-]` written `+XX` (upper-case hex): "chat 1" is `+chat+201`;
- a longer one is `+h:` and the first 40 hex digits of its SHA-256 (never decoded: the adapter
  keeps the seed's id in the session's metadata under `ORIGINAL_KEY`, and reads it from there).

`decode(encode(x)) == x` for every id but the hashed ones, for which `decode` gives None.
"""

from __future__ import annotations

import hashlib
import re

from eventstore.identifiers import is_identifier

MARKER = "+"
HASHED = "+h:"
ORIGINAL_KEY = "seed_id"  # session metadata: the seed's own id, when it had to be encoded
_PLAIN = re.compile(rb"[A-Za-z0-9._:@/-]")


def encode(seed_id: str, room: int = 128) -> str:
    """The log identifier of a seed's id (TypeError for anything but a str, or a str subclass).
    `room`: the characters it may take, less than 128 when an adapter puts it after a prefix of
    its own (an escaped id longer than that is hashed)."""
    if not isinstance(seed_id, str):
        raise TypeError(f"an id must be a string, not {type(seed_id).__name__}")
    seed_id = str(seed_id)  # a str subclass (JAF's ids) is its string
    if is_identifier(seed_id) and not seed_id.startswith(MARKER) and len(seed_id) <= room:
        return seed_id
    escaped = MARKER + "".join(
        chr(b) if _PLAIN.fullmatch(bytes((b,))) else f"+{b:02X}" for b in seed_id.encode()
    )
    if len(escaped) <= room:
        return escaped
    return HASHED + hashlib.sha256(seed_id.encode()).hexdigest()[:40]


def needs_original(seed_id: str, room: int = 128) -> bool:
    """Whether the log id cannot give the seed's id back (kept in metadata, `ORIGINAL_KEY`)."""
    return encode(seed_id, room).startswith(HASHED)


def decode(log_id: str, metadata: dict | None = None) -> str | None:
    """The seed's id of a log id: the metadata's `ORIGINAL_KEY` when given, else the escape
    undone; None for a hashed id whose metadata is not at hand."""
    if metadata and isinstance(metadata.get(ORIGINAL_KEY), str):
        return metadata[ORIGINAL_KEY]
    if log_id.startswith(HASHED):
        return None
    if not log_id.startswith(MARKER):
        return log_id
    out = bytearray()
    rest = log_id[1:]
    at = 0
    while at < len(rest):
        if rest[at] == MARKER:
            out += bytes.fromhex(rest[at + 1 : at + 3])
            at += 3
        else:
            out += rest[at].encode()
            at += 1
    return out.decode("utf-8")
