"""Print the ABBA table of bench/append.py runs: python table.py LABEL (JSON beside this file)."""

import json
import sys
from pathlib import Path

here = Path(__file__).parent
runs = sorted(here.glob(f"{sys.argv[1]}-*.json"), key=lambda p: int(p.stem.split("-")[1]))
data = [(p.stem.split("-")[2], json.loads(p.read_text())) for p in runs]
for side, d in data:
    m = d["machine"]
    floors = [f["records_per_s"] for f in d["floor"]["runs"]]
    print(
        side,
        d.get("code", {}).get("commit"),
        "load",
        m["loadavg_1m_before"],
        "idle",
        m["cpu_idle_before"],
        "disk",
        d["disk_noise"]["start"]["p50_ms"],
        "/",
        d["disk_noise"]["end"]["p50_ms"],
        "floor",
        floors,
    )
for fam in ("threads", "asyncio"):
    for c in ("1", "8", "64"):
        cells = []
        for side, d in data:
            r = d["results"][fam][c]
            cells.append(
                f"{side} {r['records_per_s']:>6} ({r['cpu_us_per_record']:>6} us, p50/p99 {r['ack_ms']['p50']}/{r['ack_ms']['p99']}, rpc {r['records_per_commit']}, nb {r['neighbour_cores_est']})"
            )
        a = [d["results"][fam][c] for s, d in data if s == "A"]
        b = [d["results"][fam][c] for s, d in data if s == "B"]
        rate = sum(x["records_per_s"] for x in b) / max(1, sum(x["records_per_s"] for x in a))
        cpu = sum(x["cpu_us_per_record"] for x in b) / sum(x["cpu_us_per_record"] for x in a)
        print(f"{fam} x{c}: rate B/A {rate:.2f}  cpu B/A {cpu:.2f}")
        for cell in cells:
            print("   ", cell)
