"""Offline tools over a log: session bundles that prove a session's records without the log,
a mirror fed by a record stream, and the history behind the `ledgermem` replay commands
(docs/replay.md, docs/api.md).

As in `eventstore`, importing `replay` imports none of its modules: each public name is imported
on first use (the module `__getattr__` below), and the `TYPE_CHECKING` block lists the same
names for type checkers and editors. What changed between two points of a log is
`replay.diff.diff`: the name `diff` here is the module, which the CLI imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventstore.lazy import lazy_names

__all__ = [
    "Bundle",
    "BundleError",
    "BundleReport",
    "read_bundle",
    "verify_bundle",
    "build_bundle",
    "Mirror",
    "MirrorError",
    "redact_segments",
    "open_history",
]

if TYPE_CHECKING:
    from .bundle import (
        Bundle,
        BundleError,
        BundleReport,
        build_bundle,
        read_bundle,
        verify_bundle,
    )
    from .mirror import Mirror, MirrorError, redact_segments
    from .options import open_history

# Each public name and the module it comes from.
_MODULE_OF = {
    "Bundle": ".bundle",
    "BundleError": ".bundle",
    "BundleReport": ".bundle",
    "build_bundle": ".bundle",
    "read_bundle": ".bundle",
    "verify_bundle": ".bundle",
    "Mirror": ".mirror",
    "MirrorError": ".mirror",
    "redact_segments": ".mirror",
    "open_history": ".options",
}

__getattr__, __dir__ = lazy_names(__name__, _MODULE_OF, globals())
