"""What the benchmarks share: percentiles and the machine's noise (CPU, neighbours, the disk).

The scripts run as `python bench/<name>.py`, so this directory is on `sys.path` and they import
this module by name.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def percentile(sorted_values: list, q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def cpu_times() -> tuple[int, int]:
    """(idle incl. iowait, total) jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])


def idle_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 3) if total else float("nan")


def busy_neighbours(exclude: set[int], limit: int = 5, window: float = 0.5) -> list[dict]:
    """The processes (other than `exclude`) that used the most CPU over `window` seconds."""

    def sample() -> dict[int, tuple[str, float]]:
        found = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in exclude:
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            fields = text.rsplit(")", 1)[1].split()
            name = text[text.index("(") + 1 : text.rindex(")")]
            found[int(entry.name)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
        return found

    first = sample()
    time.sleep(window)
    second = sample()
    used = [
        {"pid": pid, "name": name, "cores": round((cpu - first[pid][1]) / window, 2)}
        for pid, (name, cpu) in second.items()
        if pid in first and cpu > first[pid][1]
    ]
    return sorted(used, key=lambda p: -p["cores"])[:limit]


def disk_noise(directory: Path, count: int) -> dict:
    """`count` bare write + fdatasync of 300 bytes: how fast this filesystem flushes right now."""
    path = directory / "disk-noise.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    data = b"x" * 299 + b"\n"
    lat = []
    try:
        for _ in range(count):
            t0 = time.perf_counter_ns()
            os.write(fd, data)
            os.fdatasync(fd)
            lat.append(time.perf_counter_ns() - t0)
    finally:
        os.close(fd)
        path.unlink()
    lat.sort()
    return {
        "syncs": count,
        "p50_ms": round(percentile(lat, 0.50) / 1e6, 4),
        "p99_ms": round(percentile(lat, 0.99) / 1e6, 4),
        "max_ms": round(lat[-1] / 1e6, 4),
        "syncs_per_s": round(count / (sum(lat) / 1e9)),
    }
