"""Shares of a py-spy raw profile's samples (spy.sh): per thread, and on the loop by package.

Usage: python spy_shares.py spy-single.txt"""

import collections
import re
import sys
from pathlib import Path

# The deepest frame of one of these names a loop sample's package; none of them (only
# `cli_serve.run` / `Runner.run` above native code): the event loop, httptools and syscalls.
PACKAGES = r"\((eventstore|sections|streams|uvicorn|starlette|asyncio|orjson|json|dataclasses|contextlib)/?"
AS = {"dataclasses": "sections", "contextlib": "streams", "json": "streams"}


def package(frames: list[str]) -> str:
    for frame in reversed(frames):
        found = re.search(PACKAGES, frame)
        if found is None:
            continue
        name = found.group(1)
        if name == "streams" and "cli_serve" in frame:
            break
        if name == "asyncio" and "runners" in frame:
            break
        return AS.get(name, name)
    return "event loop, httptools, syscalls (native)"


shares: collections.Counter = collections.Counter()
for line in Path(sys.argv[1]).read_text().splitlines():
    stack, _, count = line.rpartition(" ")
    frames = stack.split(";")
    thread = re.sub(r"thread \(\d+\): ", "", frames[0])
    key = "loop: " + package(frames[1:]) if thread == "MainThread" else "thread " + thread
    shares[key] += int(count)
total = sum(shares.values())
for key, count in shares.most_common():
    print(f"{100 * count / total:5.1f}% {key}")
