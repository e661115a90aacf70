"""A package's public names, each imported the first time it is used (PEP 562).

Every package of ours names its public API in `__all__`, yet `import eventstore` (which the
`verify` command pays for) and `import streams` (which the client pays for) must stay cheap. So
each `__init__` lists the module every public name lives in, and this module turns that list
into the package's `__getattr__` and `__dir__`, as websockets' `__init__` does. The same names
are imported in the `__init__`'s `TYPE_CHECKING` block, for type checkers and editors;
tests/test_public_api*.py keep the lists in step.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, module_of: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`, whose module globals are `namespace`.

    `module_of` maps each public name to the module that defines it, absolute or relative to
    `package`. A name is imported on first use and then stored in `namespace`, so later lookups
    are plain attribute reads that never come back here.
    """

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace["__all__"]})

    return __getattr__, __dir__
