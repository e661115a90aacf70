"""The direction of imports between our packages (docs/architecture.md), checked on the source.

`eventstore` <- `sections` <- `streams`, with `replay` beside `streams` and never importing it;
the fan-out core (hub, cursor, its errors) free of the web stack; `ledgermem_cli.py` importing
the packages only when a command runs. Every import counts, wherever it is: at module level, in a
function, under `if TYPE_CHECKING`, or as `importlib.import_module("<literal>")`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("eventstore", "sections", "streams", "replay")

# package -> the other packages of ours it may import
MAY_IMPORT: dict[str, frozenset[str]] = {
    "eventstore": frozenset(),
    "sections": frozenset({"eventstore"}),
    "streams": frozenset({"eventstore", "sections"}),
    "replay": frozenset({"eventstore", "sections"}),
}

# The fan-out core must serve any transport (an MCP server, a replica tailer), not only HTTP.
FANOUT_CORE = (
    "streams/fanout/hub.py",
    "streams/fanout/cursor.py",
    "streams/fanout/fanout_errors.py",
)
FANOUT_CORE_STREAMS_MODULES = (
    "streams.fanout.hub",
    "streams.fanout.cursor",
    "streams.fanout.fanout_errors",
)
WEB_STACK = (
    "starlette",
    "sse_starlette",
    "uvicorn",
    "websockets",
    "httpx",
    "h11",
    "httptools",
    "wsproto",
)
# The client (streams/client) runs inside an agent's runtime: httpx, websockets and the log's
# pure format core, never the service's stack (docs/client.md).
CLIENT = "streams/client/"
SERVER_STACK = ("starlette", "sse_starlette", "uvicorn", "sections", "prometheus_client")


def _within(name: str, modules: tuple[str, ...] | frozenset[str]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in modules)


def imports_of(tree: ast.AST, module: str, is_package: bool) -> list[tuple[ast.AST, list[str]]]:
    """(node, the dotted names it imports) for every import in `tree`, the source of `module`.

    `from a.b import c` names `a.b.c` (c may be a submodule); a relative import resolves against
    the module's package.
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[ast.AST, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.append((node, [alias.name for alias in node.names]))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                prefix = ".".join([*base, *([node.module] if node.module else [])])
            else:
                prefix = node.module or ""
            found.append((node, [f"{prefix}.{alias.name}" for alias in node.names]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node, [node.args[0].value]))
    return found


def _module_name(relative: Path) -> tuple[str, bool]:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _rule_breaks(path: str, top: str, names: list[str], top_level: bool) -> list[str]:
    """What is wrong with one import of `names` in the file `path` of package `top`."""
    wrong: list[str] = []
    if top == "ledgermem_cli":
        if top_level and any(_within(n, PACKAGES) for n in names):
            wrong.append("ledgermem_cli.py imports the packages only inside the command it runs")
        return wrong
    for name in names:
        target = name.split(".")[0]
        if target in PACKAGES and target != top and target not in MAY_IMPORT[top]:
            allowed = ", ".join(sorted(MAY_IMPORT[top])) or "none of the others"
            wrong.append(f"{top} imports {target} (it may import: {allowed})")
        if path in FANOUT_CORE:
            if _within(name, WEB_STACK):
                wrong.append(f"the fan-out core imports the web stack ({name})")
            elif target == "streams" and not _within(name, FANOUT_CORE_STREAMS_MODULES):
                wrong.append(f"the fan-out core imports {name}, outside the transport-free core")
        if path.startswith(CLIENT):
            if _within(name, SERVER_STACK):
                wrong.append(f"the client imports the service's stack ({name})")
            elif target == "streams" and not _within(name, ("streams.client",)):
                wrong.append(f"the client imports {name}, outside streams.client")
    return list(dict.fromkeys(wrong))  # `from sections import a, b` breaks the rule once


def violations(root: Path) -> list[str]:
    """Every import under `root` that breaks the rule, as `file:line: import: why`."""
    files = [p for top in PACKAGES for p in sorted((root / top).rglob("*.py"))]
    if (root / "ledgermem_cli.py").exists():
        files.append(root / "ledgermem_cli.py")
    found: list[str] = []
    for file in files:
        relative = file.relative_to(root)
        module, is_package = _module_name(relative)
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
        top_level = {id(node) for node in tree.body}
        for node, names in imports_of(tree, module, is_package):
            for why in _rule_breaks(
                relative.as_posix(), module.split(".")[0], names, id(node) in top_level
            ):
                found.append(f"{relative.as_posix()}:{node.lineno}: {ast.unparse(node)}: {why}")
    return found


def test_the_packages_import_only_down_the_layers_and_the_fanout_core_is_free_of_http():
    checked = [p for top in PACKAGES for p in (ROOT / top).rglob("*.py")]
    assert len(checked) > 50 and (ROOT / "streams/fanout/hub.py") in checked
    assert violations(ROOT) == []


def test_the_checker_reports_each_violation_with_its_file_line_and_import(tmp_path):
    sources = {
        "eventstore/__init__.py": "",
        "eventstore/bad.py": "import os\n\n\ndef late():\n    from sections import memory, state\n",
        "sections/ok.py": "from eventstore import layout\nfrom . import ok\n",
        "sections/sneaky.py": 'import importlib\n\nimportlib.import_module("streams.routes.api")\n',
        "replay/__init__.py": "",
        "replay/tail.py": "from eventstore.reader import LogReader\nfrom streams.fanout.hub import Hub\n",
        "streams/__init__.py": "",
        "streams/routes/api.py": "from replay import diff\nfrom starlette.responses import Response\n",
        "streams/client/calls.py": "from ..errors import ApiError\nimport starlette\n",
        "streams/fanout/cursor.py": "from eventstore.filters import MATCH_ALL\n",
        "streams/fanout/hub.py": (
            "from . import cursor\nfrom .fanout_errors import HubClosed\n"
            "from ..web.errors import ApiError\nimport uvicorn\n"
        ),
        "ledgermem_cli.py": "import importlib\nimport streams.web.app\n\n\ndef run():\n"
        "    from eventstore.errors import LedgerError\n",
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    found = violations(tmp_path)

    assert found == [
        "eventstore/bad.py:5: from sections import memory, state: "
        "eventstore imports sections (it may import: none of the others)",
        "sections/sneaky.py:3: importlib.import_module('streams.routes.api'): "
        "sections imports streams (it may import: eventstore)",
        "streams/client/calls.py:1: from ..errors import ApiError: "
        "the client imports streams.errors.ApiError, outside streams.client",
        "streams/client/calls.py:2: import starlette: "
        "the client imports the service's stack (starlette)",
        "streams/fanout/hub.py:3: from ..web.errors import ApiError: "
        "the fan-out core imports streams.web.errors.ApiError, outside the transport-free core",
        "streams/fanout/hub.py:4: import uvicorn: the fan-out core imports the web stack (uvicorn)",
        "streams/routes/api.py:1: from replay import diff: "
        "streams imports replay (it may import: eventstore, sections)",
        "replay/tail.py:2: from streams.fanout.hub import Hub: "
        "replay imports streams (it may import: eventstore, sections)",
        "ledgermem_cli.py:2: import streams.web.app: "
        "ledgermem_cli.py imports the packages only inside the command it runs",
    ]
