"""Where a streamed response's CPU goes: ``python -m bench.profile [--out profile-NAME]``.

Core (b)'s load (50 clients, 100-token streamed responses, one gateway process, one inference
worker per core of 64 threads, the simulator at zero delay) while ``py-spy`` samples the
gateway's gevent worker and the first inference worker for ``--seconds``, counting only the
thread that holds the GIL (``--gil``: the Python code's own CPU, not threads waiting on a
socket). Writes, in ``bench/results/``: ``<out>-gateway.txt`` and ``<out>-worker.txt`` (py-spy's
collapsed stacks, one line per stack and its sample count) and ``<out>.md`` (the share of
samples per function, inclusive and self, for each process).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.fleet import Fleet, raise_nofile
from bench.run import RESULTS, machine

_NOISE = re.compile(r"click|bootsteps|runpy|_bootstrap|Thread\.run \(")


def _name(frame: str) -> str:
    """``function (path)`` with the line and the site-packages/stdlib/checkout prefixes cut."""
    frame = re.sub(r":\d+\)", ")", frame)
    return re.sub(r"\(/[^)]*/(site-packages|python3\.\d+|work/[^/]+)/", "(", frame)


def summarise(collapsed: Path, top: int = 40) -> str:
    """A markdown table of the functions with the most samples, inclusive and self."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        total += samples
        frames = [_name(frame) for frame in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += samples
        own[frames[-1]] += samples
    rows = [f"{total} samples (GIL held)\n", "| inclusive % | function | | self % | function |"]
    rows.append("|---|---|---|---|---|")
    shown = [f for f, _ in inclusive.most_common(top * 2) if not _NOISE.search(f)][:top]
    for index, frame in enumerate(shown):
        self_frame, self_count = (own.most_common(top) + [("", 0)] * top)[index]
        rows.append(
            f"| {100 * inclusive[frame] / max(1, total):.1f} | `{frame}` | "
            f"| {100 * self_count / max(1, total):.1f} | `{self_frame}` |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.profile")
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--rate", type=int, default=200, help="samples a second")
    parser.add_argument("--out", default="profile", help="file name stem in bench/results/")
    parser.add_argument("--note", default="", help="a line saying which tree this is")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    raise_nofile()
    fleet = Fleet(inference_workers=2, worker_threads=64)
    fleet.start()
    try:
        pids = fleet.pids()
        targets = {"gateway": pids["gateway"][-1], "worker": pids["worker0"][0]}
        load = subprocess.Popen(
            [sys.executable, "-m", "bench.clients", "throughput", "--url", fleet.gateway_url,
             "--clients", "50", "--seconds", str(args.seconds + 6), "--tokens", "100"],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        time.sleep(3)  # past the warm-up
        spies = [
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "-p",
                    str(pid),
                    "-d",
                    str(int(args.seconds)),
                    "-r",
                    str(args.rate),
                    "-f",
                    "raw",
                    "--gil",
                    "--nonblocking",
                    "-o",
                    str(RESULTS / f"{args.out}-{role}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for role, pid in targets.items()
        ]
        for spy_proc in spies:
            spy_proc.wait()
        throughput = json.loads(load.communicate()[0])
    finally:
        fleet.stop()
    command = shlex.join([".venv/bin/python", "-m", "bench.profile", *(argv or sys.argv[1:])])
    parts = [
        f"# Profile: {args.note or args.out}\n",
        f"`{command}` — {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}, "
        f"load at start {machine()['loadavg_at_start']}; under the profiler the load ran "
        f"{throughput['responses_per_s']}/s, {throughput['events_per_response']} events a "
        "response.\n",
    ]
    for role in ("gateway", "worker"):
        parts.append(f"\n## {role}\n\n")
        parts.append(summarise(RESULTS / f"{args.out}-{role}.txt"))
    (RESULTS / f"{args.out}.md").write_text("".join(parts))
    print("".join(parts))


if __name__ == "__main__":
    main()
