"""Debian's headless chromium through Playwright, for the tests that need a real browser.

Never a downloaded browser: `executable_path` is the system's chromium (.ci/run installs it).
Without it, or without playwright, the tests skip with the reason, except under CI, where they
fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# The machine's network is closed: without the background-networking switches chromium keeps
# trying to reach Google's services and logs every refused connection.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def browser_missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: pip install -e '.[test]'"
    return None


def launched_browser() -> Iterator:
    """A launched chromium for a fixture to yield; skips (fails in CI) when there is none."""
    missing = browser_missing()
    if missing:
        if IN_CI:
            pytest.fail(missing)
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield chromium
        chromium.close()
