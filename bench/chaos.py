"""``make chaos``: every chaos scenario of ``tests/support/chaos.py`` N times, as a table.

Runs on a private ``redis-server`` (AOF, loopback, a free port) with a fleet of default settings
(the poison turn gets its own fleet with a 2 s lease: it is about the delivery cap). Each
scenario waits up to ``--bound`` seconds after its fault, so the table shows today's recovery
times rather than a timeout; the whole run stops starting scenarios after ``--max-minutes``.

Writes ``bench/results/chaos.md`` and ``bench/results/chaos.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.support.chaos import (
    POISON_SETTINGS,
    POISON_SHAPE,
    RECOVERY_TARGET_MAX,
    RECOVERY_TARGET_P50,
    SCENARIOS,
    ChaosFleet,
    ChaosModel,
    Outcome,
    PrivateRedis,
    problems,
    start_fleet,
)

RESULTS = Path(__file__).resolve().parent / "results"


def _run_scenario(
    fleet: ChaosFleet, name: str, runs: int, bound: float, until: float
) -> list[Outcome]:
    scenario: Callable[..., list[Outcome]] = SCENARIOS[name]
    outcomes: list[Outcome] = []
    for index in range(runs):
        if time.monotonic() > until:
            print(f"{name}: time is up after {index} runs", flush=True)
            break
        fleet.heal(within=120)
        started = time.monotonic()
        try:
            found = scenario(fleet, bound=bound)
        except (AssertionError, TimeoutError) as exc:
            found = [Outcome(scenario=name, status="stuck", note=f"harness: {exc}")]
        for outcome in found:
            print(
                f"{name} #{index}: {outcome.outcome} ({outcome.status}) recovery="
                f"{outcome.recovery} lost={outcome.lost} repeated={outcome.repeated} "
                f"tools={outcome.tool_starts}/{outcome.tool_ends} deliveries={outcome.deliveries} "
                f"readyz={outcome.readyz_lag} problems={problems(outcome)} "
                f"[{time.monotonic() - started:.1f} s]",
                flush=True,
            )
        outcomes += found
    return outcomes


def summarize(name: str, outcomes: list[Outcome]) -> dict[str, Any]:
    """One row of the table."""
    recoveries = sorted(o.recovery for o in outcomes if o.recovery is not None)
    lags = [o.readyz_lag for o in outcomes if o.measure_readyz]
    measured = [lag for lag in lags if lag is not None]
    return {
        "scenario": name,
        "runs": len(outcomes),
        "completed": sum(o.outcome == "completed" for o in outcomes),
        "failed_cleanly": sum(o.outcome == "failed-cleanly" for o in outcomes),
        "stuck": sum(o.outcome == "stuck" for o in outcomes),
        "lost_events": sum(o.lost for o in outcomes),
        "repeated_events": sum(o.repeated for o in outcomes),
        "silent_closes": sum(o.silent_closes for o in outcomes),
        "recovery_p50_s": round(statistics.median(recoveries), 2) if recoveries else None,
        "recovery_max_s": round(max(recoveries), 2) if recoveries else None,
        "tool_starts": sum(o.tool_starts for o in outcomes),
        "tool_ends": sum(o.tool_ends for o in outcomes),
        "deliveries": sum(o.deliveries for o in outcomes),
        "readyz_lag_max_s": round(max(measured), 2) if measured else None,
        "readyz_lag_unmeasured": len(lags) - len(measured),
        "conversation_faults": sum(o.conversation_ok is False for o in outcomes),
        "dead_processes": sorted({d for o in outcomes for d in o.dead}),
        "runs_missing_targets": sum(bool(problems(o)) for o in outcomes),
    }


_COLUMNS = (
    ("scenario", "scenario"),
    ("runs", "runs"),
    ("completed", "completed"),
    ("failed cleanly", "failed_cleanly"),
    ("stuck", "stuck"),
    ("lost", "lost_events"),
    ("repeated", "repeated_events"),
    ("silent closes", "silent_closes"),
    ("recovery p50 s", "recovery_p50_s"),
    ("recovery max s", "recovery_max_s"),
    ("tool starts/ends", "tools"),
    ("turn deliveries", "deliveries"),
    ("/readyz lag max s", "readyz_lag_max_s"),
    ("runs missing targets", "runs_missing_targets"),
)


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The table, with how it was made."""
    lines = [
        "# Chaos (issue 16): `make chaos`",
        "",
        f"{meta['runs']} runs per scenario requested, bound {meta['bound_s']:g} s after each "
        f"fault; default settings (the poison turn: 2 s lease). {meta['date']}, "
        f"{meta['minutes']:.1f} min. Targets: 0 stuck, 0 lost, 0 repeated, recovery p50 "
        f"≤ {RECOVERY_TARGET_P50:g} s and max ≤ {RECOVERY_TARGET_MAX:g} s (fault → next event; "
        "for the Redis restart: Redis back → next event).",
        "",
        "| " + " | ".join(title for title, _ in _COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    for row in rows:
        cells = {**row, "tools": f"{row['tool_starts']}/{row['tool_ends']}"}
        lines.append("| " + " | ".join(_cell(cells[key]) for _, key in _COLUMNS) + " |")
    dead = {row["scenario"]: row["dead_processes"] for row in rows if row["dead_processes"]}
    if dead:
        lines += ["", f"Processes that exited on their own: {dead}."]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    return "–" if value is None else str(value)


def main(argv: list[str] | None = None) -> None:
    """Run the scenarios and write the table."""
    parser = argparse.ArgumentParser(prog="bench.chaos")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--bound", type=float, default=120.0, help="seconds after each fault")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--max-minutes", type=float, default=240.0)
    parser.add_argument("--out", default=str(RESULTS / "chaos"))
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    started = time.monotonic()
    until = started + args.max_minutes * 60
    work = Path(tempfile.mkdtemp(prefix="antwort-chaos-"))
    redis_server = PrivateRedis(work / "redis")
    (work / "redis").mkdir()
    redis_server.start()
    model = ChaosModel()
    rows = []
    try:
        fleet = start_fleet(redis_server, model, work / "fleet")
        poison = None
        try:
            for name in names:
                if name == "poison-turn":
                    poison = poison or start_fleet(
                        redis_server, model, work / "poison", shape=POISON_SHAPE,
                        settings=POISON_SETTINGS,
                    )  # fmt: skip
                target = poison if name == "poison-turn" and poison else fleet
                outcomes = _run_scenario(target, name, args.runs, args.bound, until)
                rows.append(summarize(name, outcomes))
                _write(rows, args, started, [asdict(o) for o in outcomes], name)
        finally:
            fleet.stop()
            if poison is not None:
                poison.stop()
    finally:
        model.close()
        redis_server.stop()
    print(markdown(rows, _meta(args, started)))


def _meta(args: argparse.Namespace, started: float) -> dict[str, Any]:
    return {
        "runs": args.runs,
        "bound_s": args.bound,
        "minutes": (time.monotonic() - started) / 60,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def _write(
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    started: float,
    outcomes: list[dict[str, Any]],
    name: str,
) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path = out.with_suffix(".json")
    previous = json.loads(json_path.read_text()) if json_path.exists() else {}
    runs = previous.get("outcomes", {}) if previous.get("started") == started else {}
    runs[name] = [{**o, "expected": sorted(o["expected"])} for o in outcomes]
    meta = _meta(args, started)
    json_path.write_text(
        json.dumps({"started": started, **meta, "rows": rows, "outcomes": runs}, indent=2) + "\n"
    )
    out.with_suffix(".md").write_text(markdown(rows, meta))


if __name__ == "__main__":
    main()
