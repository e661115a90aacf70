#!/usr/bin/env bash
# usage: bench/peer_openai_agents.sh MODE [pytest args...]    (from the project root)
#   MODE = theirs | ours
# The OpenAI Agents SDK's own session tests (github.com/openai/openai-agents-python:
# tests/memory/test_session.py, tests/memory/test_session_limit.py, tests/test_soft_cancel.py,
# tests/extensions/memory/test_async_sqlite_session.py)
# laid into a temporary directory with the rest of their tests/ package (its helpers and
# conftest) and run there: `theirs` as they are (their SQLiteSession: the baseline, since the
# files may be older or newer than the installed SDK), `ours` with SQLiteSession bound to
# sections.adapters.openai_agents.LedgerSession by a constructor-only shim written here (and
# AsyncSQLiteSession likewise, with its close() a coroutine as theirs is):
# SQLiteSession(id) is LedgerSession(id) (in-process), SQLiteSession(id, db_path) is
# LedgerSession(id, data_dir=db_path) (durable, one memory per path in the process, as their
# sessions share one SQLite file). Tests that open the SQLite file themselves or call its
# connection methods (corrupt rows, rollbacks, worker-thread connections) test SQLite, not a
# session: they fail in `ours` and count as not applicable. Nothing of the SDK is committed.
#   MIRROR: a git directory of github.com/openai/openai-agents-python (PEER_REV, default HEAD)
#   PY: a python with pytest, pytest-asyncio, openai-agents and this project
set -euo pipefail
mode=${1:?MODE: theirs or ours}; shift
mirror=${MIRROR:?set MIRROR to a git directory of github.com/openai/openai-agents-python}
py=${PY:-.venv/bin/python}
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git --git-dir "$mirror" archive "${PEER_REV:-HEAD}" tests | tar -x -C "$work"
tests="tests/memory/test_session.py tests/memory/test_session_limit.py tests/test_soft_cancel.py
       tests/extensions/memory/test_async_sqlite_session.py"
case $mode in
  theirs) ;;
  ours)
    cat > "$work/ledgermem_peer_shim.py" <<'PY'
"""Test shim only: SQLiteSession's constructor, giving ledgermem's LedgerSession."""
from sections.adapters.openai_agents import LedgerSession


class SQLiteSession(LedgerSession):
    def __init__(self, session_id, db_path=":memory:", sessions_table="agent_sessions",
                 messages_table="agent_messages", session_settings=None):
        data_dir = None if str(db_path) == ":memory:" else str(db_path)
        super().__init__(session_id, data_dir=data_dir, session_settings=session_settings)


class AsyncSQLiteSession(LedgerSession):
    """AsyncSQLiteSession's constructor, and its close(), which is a coroutine there."""

    def __init__(self, session_id, db_path=":memory:", sessions_table="agent_sessions",
                 messages_table="agent_messages", session_settings=None):
        data_dir = None if str(db_path) == ":memory:" else str(db_path)
        super().__init__(session_id, data_dir=data_dir, session_settings=session_settings)

    async def close(self):
        super().close()
PY
    for t in $tests; do
      sed -i '/^from agents\(\.memory\)\? import .*SQLiteSession/a from ledgermem_peer_shim import SQLiteSession' "$work/$t"
      sed -i '/^from agents\.extensions\.memory import AsyncSQLiteSession/a from ledgermem_peer_shim import AsyncSQLiteSession' "$work/$t"
    done
    ;;
  *) echo "MODE: theirs or ours" >&2; exit 2;;
esac
mkdir -p "$work/tmp"; export TMPDIR="$work/tmp"
export PYTHONPATH="$work:$root${PYTHONPATH:+:$PYTHONPATH}"
cd "$work"
# --timeout: four of their AsyncSQLiteSession tests wait for a hook of its connection code, which
# ours never calls: they fail after it instead of hanging
"$root/$py" -m pytest -p no:cacheprovider -o asyncio_mode=auto --timeout=20 $tests "$@" 2>&1 || true
