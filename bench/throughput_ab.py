"""Core benchmark (b) alone, on a fleet of the checkout in the current directory: one JSON line.

``cd <checkout> && /work/…/.venv/bin/python <this file>``: the fleet's processes run that
checkout's code (they start in it), so two checkouts can be compared in turns, as
``bench/results/metrics-cost.md`` compares the tree with and without its telemetry. The same
figure as ``bench.run --only core``'s (b): 50 clients, 15 s, 100-token streamed responses, one
inference worker per core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

sys.path.insert(0, os.getcwd())  # the checkout compared, not the one this file lives in

from bench.fleet import Fleet
from bench.run import bench_throughput


def main() -> None:
    """Start the fleet, run (b), print its figures with the commit, stop."""
    fleet = Fleet(inference_workers=os.cpu_count() or 2, worker_threads=64)
    try:
        fleet.start()
        result, _ = bench_throughput(fleet, 50, 15.0, 100)
    finally:
        fleet.stop()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(json.dumps({"checkout": os.getcwd(), "commit": commit or "export", **result}))


if __name__ == "__main__":
    main()
