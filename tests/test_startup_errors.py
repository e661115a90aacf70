"""`ledgermem serve` refuses a start it cannot make with one line naming the problem and the fix,
and exit 2; a shutdown whose final checkpoint fails does not exit 0 (issue 13, item 4)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

import httpx
import pytest
from helpers.cli import ledgermem
from server import Server

TIMEOUT = 60


def serve(data, *args: object, env: dict | None = None) -> subprocess.CompletedProcess:
    return ledgermem(
        "serve", "--data", data, "--port", "0", *args, env=env, text=True, timeout=TIMEOUT
    )


def assert_one_line_refusal(result: subprocess.CompletedProcess, *words: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ledgermem serve: "), lines[0]
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.fixture
def data(tmp_path):
    """A data directory made by one clean run of the service."""
    path = tmp_path / "data"
    with Server(path):
        pass
    return path


def test_data_directory_in_use(data):
    with Server(data):
        result = serve(data)
    assert_one_line_refusal(result, "LOCK is held by another writer", "stop it")


def test_unreadable_key(data):
    key = data / "keys" / "signing.key"
    if os.geteuid() == 0:  # root reads a mode-000 file: make the key unreadable as a key instead
        key.unlink()
        key.mkdir()
    else:
        key.chmod(0)
    result = serve(data)
    assert_one_line_refusal(result, "signing.key", "--data")


def test_key_that_is_not_a_key(data):
    (data / "keys" / "signing.key").write_text("not a PEM key\n")
    result = serve(data)
    assert_one_line_refusal(result, "signing.key", "restore")


@contextlib.contextmanager
def read_only(path):
    """`path` read-only: by its mode for a normal user, by a read-only bind mount for root."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")] if p.is_dir()}
        for p in modes:
            p.chmod(0o555)
        try:
            yield
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    mounted = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount as root here: {mounted.stderr!r}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_read_only_data_directory(data):
    with read_only(data):
        result = serve(data)
    assert_one_line_refusal(result, str(data), "writable")


def test_bad_memory_config(tmp_path):
    config = tmp_path / "memory.toml"
    config.write_text("[sections.notes]\npolicy = 'sometimes'\n")
    result = serve(tmp_path / "data", "--memory-config", config)
    assert_one_line_refusal(result, "sometimes", "--memory-config")
    missing = serve(tmp_path / "data", "--memory-config", tmp_path / "nope.toml")
    assert_one_line_refusal(missing, "nope.toml", "--memory-config")


@pytest.mark.parametrize("tokens", ["abc", "a:b:c:d", "t::read", ":acme:read", "t:acme:"])
def test_malformed_token_setting(tmp_path, tokens):
    result = serve(tmp_path / "data", env={"LEDGERMEM_TOKENS": tokens})
    assert_one_line_refusal(result, "LEDGERMEM_TOKENS", "s3cret:acme:read+write")
    if tokens == "abc":
        assert "abc" not in result.stderr  # an entry holds a secret: never echoed
    assert not (tmp_path / "data").exists()


def test_empty_tenant_in_the_toml_is_an_error_not_tenant_default(tmp_path):
    config = tmp_path / "settings.toml"
    config.write_text('[[tokens]]\ntoken = "s3cret"\ntenant = ""\nscopes = ["read"]\n')
    result = serve(tmp_path / "data", "--config", config)
    assert_one_line_refusal(result, "tenant ''", "tenant name")


def test_port_in_use(tmp_path):
    with Server(tmp_path / "one") as first:
        port = first.url.rsplit(":", 1)[1]
        result = ledgermem("serve", "--data", tmp_path / "two", "--port", port, text=True)
    assert_one_line_refusal(result, "in use", "--port")


def test_a_shutdown_whose_final_checkpoint_fails_does_not_exit_0(tmp_path):
    data = tmp_path / "data"
    server = Server(data).start()
    try:
        httpx.put(f"{server.url}/v1/sessions/demo", json={}, timeout=30).raise_for_status()
        log = data / "log"
        deadline = time.monotonic() + 20
        while "\n2\n" not in (log / "checkpoint").read_text():  # the periodic checkpoint is in
            assert time.monotonic() < deadline, "no checkpoint within 20 s"
            time.sleep(0.05)
        # The checkpoint is replaced through checkpoint.tmp: a directory there makes the final
        # one (at log.close) fail while every record stays durable.
        (log / "checkpoint.tmp").mkdir()
        code = server.stop()
    finally:
        server.kill()
    assert code != 0
    last = server.output[-1]
    assert last.startswith("ledgermem serve: the final checkpoint was not written"), server.output
    assert "ledgermem verify" in last


def test_a_clean_shutdown_still_exits_0(tmp_path):
    server = Server(tmp_path / "data").start()
    try:
        httpx.put(f"{server.url}/v1/sessions/demo", json={}, timeout=30).raise_for_status()
        assert server.stop() == 0
    finally:
        server.kill()
    assert not any("ledgermem serve:" in line for line in server.output), server.output
