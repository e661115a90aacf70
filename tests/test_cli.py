"""The `ledgermem` command: demo, vkey, one-line errors, and offline commands stay offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import cli


def ledgermem(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return cli.ledgermem(*args, text=True, cwd=cwd)


ROOT = Path(__file__).parent.parent


def test_demo_creates_a_private_key_writes_reads_and_verifies(tmp_path):
    result = ledgermem("demo", "--data", str(tmp_path / "d"))
    assert result.returncode == 0, result.stderr
    assert "created signing key" in result.stdout
    assert "VALID-LOCAL" in result.stdout
    key = tmp_path / "d" / "keys" / "signing.key"
    assert key.stat().st_mode & 0o777 == 0o600
    again = ledgermem("demo", "--data", str(tmp_path / "d"))
    assert again.returncode == 0 and "created signing key" not in again.stdout


def test_vkey_prints_the_key_that_verifies_the_log(tmp_path):
    assert ledgermem("demo", "--data", str(tmp_path / "d")).returncode == 0
    vkey = ledgermem("vkey", "--data", str(tmp_path / "d"))
    assert vkey.returncode == 0
    line = vkey.stdout.strip()
    assert line.count("\n") == 0 and line.startswith("ledgermem.local/")
    verify = ledgermem("verify", str(tmp_path / "d" / "log"), "--vkey", line, "--json")
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["verdict"] == "VALID-LOCAL"


def test_errors_are_one_line_with_a_nonzero_exit(tmp_path):
    result = ledgermem("vkey", "--data", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "no signing key" in result.stderr
    result = ledgermem("verify", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0


def test_offline_commands_do_not_import_the_web_stack(tmp_path):
    assert ledgermem("demo", "--data", str(tmp_path / "d")).returncode == 0
    code = (
        "import sys, ledgermem_cli\n"
        f"rc = ledgermem_cli.main(['verify', {str(tmp_path / 'd' / 'log')!r}])\n"
        "web = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('streams', 'starlette', 'uvicorn', 'sse_starlette', 'websockets', 'sections'))\n"
        "print(rc, web)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.stdout.strip().endswith("[]"), result.stdout + result.stderr
