"""Rough edges a new user meets first (issue 18), each through the real `ledgermem` command or a
real server: a data directory where a log directory is expected, another log's key, `--version`,
one range vocabulary, a demo that leaves nothing behind, the JSONL keep-alive, the access log,
counted nouns, and docs that say what the code does."""

from __future__ import annotations

import http.client
import json
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from helpers.cli import ROOT, ledgermem
from server import Server

from sections.model.commands import EXTRA_FIELDS
from sections.runtime.memory import Memory
from streams.fanout.channels.longpoll import DEFAULT_WAIT
from streams.server.settings import Settings


def run(*args: object, **kw) -> subprocess.CompletedProcess:
    return ledgermem(*args, text=True, **kw)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A stopped data directory holding memory records of two sessions."""
    root = tmp_path_factory.mktemp("edges") / "data"
    with Memory.open(root) as mem:
        s = mem.session("s1")
        s.add("messages", "hello")
        s.add("findings", "margin is 40%")
        mem.session("s2").add("messages", "second")
    return root


@pytest.fixture(scope="module")
def vkey(data) -> str:
    return run("vkey", "--data", data).stdout.strip()


# -- a data directory wherever a log directory is expected


OFFLINE = [
    ("replay",),
    ("verify",),
    ("state", "--at", "head"),
    ("diff", "--from", "0", "--to", "head"),
    ("proof", "--seq", "1"),
    ("checkpoint",),
]


@pytest.mark.parametrize("command", OFFLINE, ids=[c[0] for c in OFFLINE])
def test_every_offline_command_takes_the_data_directory_as_its_log(data, command):
    name, *rest = command
    given_data = run(name, data, *rest)
    given_log = run(name, data / "log", *rest)
    assert given_data.returncode == 0, given_data.stderr
    assert given_data.stdout == given_log.stdout
    assert given_data.stdout.strip()


def test_export_takes_the_data_directory_too(data, tmp_path):
    assert run("export", data, "--session", "s1", tmp_path / "a").returncode == 0
    assert run("export", data / "log", "--session", "s1", tmp_path / "b").returncode == 0
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


NO_LOG = [c for c in OFFLINE if c[0] in ("replay", "verify", "proof")]  # the three ways in


@pytest.mark.parametrize("command", NO_LOG, ids=[c[0] for c in NO_LOG])
def test_a_directory_without_a_log_says_what_to_pass(tmp_path, command):
    name, *rest = command
    error = one_line_error(run(name, tmp_path, *rest))
    assert "seg-" in error and "data directory" in error
    assert "header line" not in error


# -- verify with another log's key


def test_verify_with_another_logs_key_names_the_origins(data, vkey, tmp_path):
    with Memory.open(tmp_path / "other") as other_log:
        other = str(other_log.key.key.vkey)
    error = one_line_error(run("verify", data, "--vkey", other, "--json"))
    assert "this key belongs to another origin" in error
    assert other.split("+")[0] in error and vkey.split("+")[0] in error


def test_a_tampered_header_origin_is_still_a_fail(data, tmp_path, vkey):
    """Only a log that chains from its own origin's genesis is "another log": a header whose
    origin alone was edited stays a FAIL of that line."""
    log = tmp_path / "log"
    log.mkdir()
    for path in (data / "log").iterdir():
        if path.is_file():
            (log / path.name).write_bytes(path.read_bytes())
    segment = log / "seg-000000000000.jsonl"
    origin = vkey.split("+")[0]
    segment.write_bytes(segment.read_bytes().replace(origin.encode(), b"example.org/forged", 1))
    result = run("verify", log, "--vkey", vkey, "--json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["error"]["line"] == 1


# -- --version, --at head, one range vocabulary


def test_version():
    result = run("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"ledgermem \d+\.\d+\.\d+\S*\n", result.stdout)


def test_state_at_head_is_the_default_and_the_last_seq(data):
    head = run("state", data, "--at", "head")
    assert head.returncode == 0, head.stderr
    at = json.loads(head.stdout)["at"]
    assert at == len(run("replay", data).stdout.splitlines()) - 1
    assert run("state", data).stdout == head.stdout
    assert run("state", data, "--at", str(at)).stdout == head.stdout
    assert [s["session"] for s in json.loads(head.stdout)["sessions"]] == ["s1", "s2"]


def test_replay_ranges_share_one_vocabulary_and_keep_the_old_flags(data):
    lines = run("replay", data).stdout.splitlines(keepends=True)
    assert len(lines) > 4
    assert run("replay", data, "--from", "2", "--to", "3").stdout == "".join(lines[2:4])
    assert run("replay", data, "--from-seq", "2", "--to-seq", "3").stdout == "".join(lines[2:4])
    assert run("replay", data, "--after", "2", "--to", "head").stdout == "".join(lines[3:])
    assert run("replay", data, "--from", "head").stdout == lines[-1]
    assert "not both" in one_line_error(run("replay", data, "--from", "1", "--after", "1"))


def test_diff_to_defaults_to_head(data):
    explicit = run("diff", data, "--from", "0", "--to", "head")
    assert explicit.returncode == 0, explicit.stderr
    assert run("diff", data, "--from", "0").stdout == explicit.stdout


# -- the demo writes nowhere it was not asked to


def test_demo_without_data_leaves_nothing_behind(tmp_path):
    result = run("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "VALID-LOCAL" in result.stdout
    assert list(tmp_path.iterdir()) == []
    scratch = re.search(r"temporary directory (\S+)", result.stdout).group(1)
    assert not Path(scratch).exists()


# -- counted nouns


def test_counts_are_not_written_1_things(data, vkey, tmp_path):
    verify = run("verify", data, "--vkey", vkey)
    assert "in 1 segment file\n" in verify.stdout
    backup = run("backup", "--data", data, tmp_path / "copy")
    assert backup.returncode == 0, backup.stderr
    assert " in 1 segment, " in backup.stdout and "1 snapshot," in backup.stdout
    for out in (verify.stdout, backup.stdout):
        assert not re.search(r"\b1 [a-z]+s\b", out), out


# -- against a running server: keep-alives, the access log, the README's live example


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = {"LEDGERMEM_HEARTBEAT_SECONDS": "0.3"}
    data = tmp_path_factory.mktemp("edges-server") / "data"
    with Server(data, "--unsafe-no-fsync", "--log-level", "info", env=env) as running:
        yield running


def read_stream(url: str, target: str, seconds: float) -> bytes:
    """Everything a streaming GET sends within `seconds`."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=seconds)
    conn.request("GET", target)
    response = conn.getresponse()
    assert response.status == 200
    got = b""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            got += response.read1(65536)
    except TimeoutError:
        pass
    conn.close()
    return got


def test_an_idle_jsonl_stream_sends_empty_lines(server):
    body = read_stream(server.url, "/v1/stream/jsonl?session=nobody", 1.5)
    assert body.count(b"\n") >= 2
    assert set(body) == {ord("\n")}  # nothing but keep-alives: no record matches


def test_tail_stays_connected_through_keep_alives(server, tmp_path):
    head = httpx.get(server.url + "/v1/log/status").json()["head"]
    tail = subprocess.Popen(
        [sys.executable, "-m", "ledgermem_cli", "tail", server.url, "--session", "quiet",
         "--after", str(head), "--idle-timeout", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(tail.stdout), daemon=True)
    reader.start()
    try:
        time.sleep(3)  # three idle timeouts' worth of silence but for the keep-alives
        assert httpx.put(server.url + "/v1/sessions/quiet").status_code == 201
        deadline = time.monotonic() + 30
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        tail.terminate()
        _, err = tail.communicate(timeout=30)
    reader.join(10)
    assert [orjson.loads(line)["type"] for line in lines] == ["session.created"]
    assert b"disconnected" not in err, err


def test_serve_logs_each_request_at_info(server):
    httpx.get(server.url + "/v1/log/status?probe=access-log")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any("GET /v1/log/status?probe=access-log" in line for line in server.output):
            break
        time.sleep(0.05)
    access = [line for line in server.output if "probe=access-log" in line]
    assert access and '" 200' in access[0]


def test_serve_refuses_a_bad_log_level(tmp_path):
    result = run(
        "serve", "--data", tmp_path / "d", "--port", "0", env={"LEDGERMEM_LOG_LEVEL": "loud"}
    )
    assert "log level 'loud'" in one_line_error(result)
    assert not (tmp_path / "d").exists()


def test_the_readme_live_example_starts_at_the_head(server):
    readme = (ROOT / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("curl -N") and "stream/sse" in x)
    inner = re.search(r"after=\$\((.*)\)\"$", line).group(1)
    port = urlsplit(server.url).port
    command = inner.replace("localhost:8000", f"127.0.0.1:{port}")
    printed = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, check=True
    ).stdout
    head = httpx.get(server.url + "/v1/log/status").json()["head"]
    assert int(printed) == head > 0
    assert shlex.split(line)[-1].startswith("localhost:8000/v1/stream/sse?after=$(")


# -- docs that agree with the code


def test_an_item_takes_rendering_fields_itself_and_refuses_extra(server):
    assert httpx.put(server.url + "/v1/sessions/render").status_code in (200, 201)
    items = server.url + "/v1/sessions/render/sections/messages/items"
    refused = httpx.post(items, json={"content": "x", "extra": {"name": "bob"}})
    assert refused.status_code == 400 and "extra" in refused.json()["error"]["message"]
    added = httpx.post(items, json={"content": "x", "role": "user", "name": "bob"})
    assert added.status_code == 201
    assert added.json()["record"]["payload"]["items"][0]["extra"] == {"name": "bob"}
    events = (ROOT / "docs" / "events.md").read_text()
    row = next(x for x in events.splitlines() if x.startswith("| `item.added` | the section"))
    for field in EXTRA_FIELDS:
        assert f"`{field}`" in row


def test_long_poll_wait_figures_agree_between_docs_and_code():
    wait, most = DEFAULT_WAIT, Settings().long_poll_max_wait
    fanout = (ROOT / "docs" / "fanout.md").read_text()
    found = re.search(r"`wait` in seconds: default (\d+), at most\s+`long_poll_max_wait` "
                      r"\(default (\d+);", fanout)  # fmt: skip
    assert found and (float(found[1]), float(found[2])) == (wait, most)
    wire = (ROOT / "docs" / "wire.md").read_text()
    found = re.search(r"`wait`\s+seconds \(default (\d+), at most (\d+)", wire)
    assert found and (float(found[1]), float(found[2])) == (wait, most)


def test_the_readme_says_what_the_browser_and_database_tests_need():
    readme = (ROOT / "README.md").read_text()
    for needed in ("/usr/bin/chromium", "tests/test_dashboard.py", "skipped", "CI=1", ".ci/run"):
        assert needed in readme
    chromium = (ROOT / "tests" / "helpers" / "chromium.py").read_text()
    assert 'Path("/usr/bin/chromium")' in chromium and "pytest.skip" in chromium


# -- issue 30: refusals in one line, exit non-zero


def test_export_refuses_to_overwrite_an_output_unless_forced(data, tmp_path):
    out = tmp_path / "kept.bundle"
    out.write_bytes(b"not to be lost")
    refused = one_line_error(run("export", data, "--session", "s1", out))
    assert f"{out} exists" in refused and "--force" in refused
    assert out.read_bytes() == b"not to be lost"
    assert run("export", data, "--session", "s1", out, "--force").returncode == 0
    assert out.read_bytes() != b"not to be lost"


def test_serve_refuses_a_port_out_of_range_in_one_line(tmp_path):
    refused = one_line_error(run("serve", "--data", tmp_path / "d", "--port", "99999"))
    assert "port must be 0 to 65535" in refused and "Traceback" not in refused


def test_serve_says_a_data_directory_that_is_a_file_is_one(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    refused = one_line_error(run("serve", "--data", afile, "--port", "0"))
    assert f"the data directory {afile} is a file" in refused


@pytest.mark.parametrize(
    ("tokens", "says"),
    [
        ('[[tokens]]\ntoken = "t1"\ntenant = "_log"\n', "token 1 has tenant '_log'"),
        (
            '[[tokens]]\ntoken = "t1"\ntenant = "acme"\n[[tokens]]\ntoken = "t1"\ntenant = "b"\n',
            "tokens 1 and 2 are the same token, listed for tenants 'acme' and 'b'",
        ),
    ],
)
def test_serve_refuses_a_reserved_or_shared_token_at_start_up(tmp_path, tokens, says):
    config = tmp_path / "settings.toml"
    config.write_text(tokens)
    refused = one_line_error(
        run("serve", "--data", tmp_path / "d", "--port", "0", "--config", config, timeout=60)
    )
    assert says in refused and "t1" not in refused.replace("token 1", "").replace("tokens 1", "")
    env_refused = one_line_error(
        run("serve", "--data", tmp_path / "d", "--port", "0", env={"LEDGERMEM_TOKENS":
            "t1:acme:read,t1:b:read" if "same" in says else "t1:_log:read"}, timeout=60)
    )  # fmt: skip
    assert says.split(",")[0].split(" listed")[0] in env_refused
