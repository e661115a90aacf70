#!/usr/bin/env bash
# usage: bench/peer_adk.sh MODE [pytest args...]    (from the project root)
#   MODE = theirs | ours
# Google ADK's own session-service tests (tests/unittests/sessions/test_session_service.py of
# github.com/google/adk-python) laid into a temporary directory and run there: `theirs` as they
# are (their InMemorySessionService: the baseline, since the file may be older or newer than
# the installed ADK), `ours` with their in-memory service swapped for
# sections.adapters.adk.LedgerSessionService (constructed with no argument, as theirs is). The
# DATABASE parametrization needs SQLAlchemy and is ADK's own backend: deselected in both modes.
# Nothing of ADK is written into the project.
#   MIRROR: a git directory of github.com/google/adk-python (PEER_REV: a revision, default HEAD)
#   PY: a python with pytest, pytest-asyncio, google-adk and this project (`.venv/bin/python`
#       after `pip install -e '.[test]' pytest-asyncio`)
set -euo pipefail
mode=${1:?MODE: theirs or ours}; shift
mirror=${MIRROR:?set MIRROR to a git directory of github.com/google/adk-python}
py=${PY:-.venv/bin/python}
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
files="tests/__init__.py tests/unittests/__init__.py tests/unittests/conftest.py
       tests/unittests/sessions/__init__.py tests/unittests/sessions/test_session_service.py"
present=$(for f in $files; do git --git-dir "$mirror" cat-file -e "${PEER_REV:-HEAD}:$f" 2>/dev/null && echo "$f"; done)
git --git-dir "$mirror" archive "${PEER_REV:-HEAD}" $present | tar -x -C "$work"
test_file=$work/tests/unittests/sessions/test_session_service.py
case $mode in
  theirs) ;;
  ours)
    # every place the file constructs their in-memory service constructs ours
    sed -i 's/\bInMemorySessionService()/LedgerSessionService()/g' "$test_file"
    sed -i '0,/^import /s//from sections.adapters.adk import LedgerSessionService\nimport /' "$test_file"
    ;;
  *) echo "MODE: theirs or ours" >&2; exit 2;;
esac
mkdir -p "$work/tmp"; export TMPDIR="$work/tmp"
export PYTHONPATH="$work:$root${PYTHONPATH:+:$PYTHONPATH}"
cd "$work"
"$root/$py" -m pytest -p no:cacheprovider -o asyncio_mode=auto -q -k "not DATABASE" \
  tests/unittests/sessions/test_session_service.py "$@" 2>&1 || true
