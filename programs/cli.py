"""``antwort up | gateway | worker --queues Q[,Q] | sim | chat | status | keys``.

The gateway and the workers run under their own servers (gunicorn, Celery); this module only
hands over to them with ``exec``, so the core never imports a framework.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

from pydantic import ValidationError

from app.config import Settings


def _exec(argv: list[str]) -> None:
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *argv])


def _gateway(args: argparse.Namespace, settings: Settings) -> int:
    from programs.limits import files_needed, raise_open_files

    logging.basicConfig(level=settings.log_level.upper(), format="antwort gateway: %(message)s")
    raise_open_files(files_needed(settings))
    os.environ.setdefault("ANTWORT_GATEWAY_WORKERS", str(args.workers or settings.gateway_workers))
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # gunicorn's processes share their metrics through it (gateway/gunicorn_conf.py, which
        # removes it when the gateway stops)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="antwort-metrics-")
        os.environ["ANTWORT_METRICS_DIR_OWNED"] = "1"
    _exec(
        ["-m", "gunicorn", "--config", "python:gateway.gunicorn_conf", "gateway.wsgi:application"]
    )
    return 0  # pragma: no cover - exec does not return


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    extra = [f"--queues={args.queues}"]
    if args.concurrency:
        extra.append(f"--concurrency={args.concurrency}")
    if args.pool:
        extra.append(f"--pool={args.pool}")
    if args.loglevel:
        extra.append(f"--loglevel={args.loglevel}")
    _exec(["-m", "workers.main", *extra])
    return 0  # pragma: no cover


def _sim(args: argparse.Namespace, settings: Settings) -> int:
    from programs.simulator import SimConfig, serve

    logging.basicConfig(level=settings.log_level.upper(), format="%(message)s")
    config = SimConfig(
        ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms, default_tokens=args.tokens
    )
    serve(args.host, args.port or settings.sim_port, config)
    return 0


def _status(args: argparse.Namespace, settings: Settings) -> int:
    from app.fleet import make_store
    from programs.status import print_status

    print_status(make_store(settings), as_json=args.json)
    return 0


def _up(args: argparse.Namespace, settings: Settings) -> int:
    from programs.supervisor import run

    return run(settings)


def _chat(args: argparse.Namespace, settings: Settings) -> int:
    from programs.chat import run_chat

    return int(run_chat(args, settings))


def _keys(args: argparse.Namespace, settings: Settings) -> int:
    from programs.keys import run_keys

    return run_keys(args, settings)


def build_parser() -> argparse.ArgumentParser:
    """The ``antwort`` command line."""
    parser = argparse.ArgumentParser(
        prog="antwort", description="Antwort Fleet: the Responses API on a Celery fleet"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="run the whole fleet in the foreground").set_defaults(run=_up)
    gateway = sub.add_parser("gateway", help="run the HTTP gateway (gunicorn + gevent)")
    gateway.add_argument("--workers", type=int, default=None)
    gateway.set_defaults(run=_gateway)
    worker = sub.add_parser("worker", help="run a worker on the given queues")
    worker.add_argument("--queues", default="inference")
    worker.add_argument("--concurrency", type=int, default=None)
    worker.add_argument("--pool", default=None)
    worker.add_argument("--loglevel", default=None, help="default: ANTWORT_LOG_LEVEL")
    worker.set_defaults(run=_worker)
    sim = sub.add_parser("sim", help="run the model simulator (not a real model)")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=None)
    sim.add_argument("--ttft-ms", type=float, default=0.0)
    sim.add_argument("--token-delay-ms", type=float, default=0.0)
    sim.add_argument("--tokens", type=int, default=20)
    sim.set_defaults(run=_sim)
    status = sub.add_parser("status", help="the fleet now: queues, workers, failures")
    status.add_argument("--json", action="store_true", help="as JSON, for scripts")
    status.set_defaults(run=_status)
    chat = sub.add_parser("chat", help="watch an agent work: chat with a gateway from a terminal")
    from programs.chat import add_arguments

    add_arguments(chat)
    chat.set_defaults(run=_chat)
    keys = sub.add_parser("keys", help="create, list and revoke tenants' API keys; set limits")
    from programs.keys import add_arguments as add_key_arguments

    add_key_arguments(keys)
    keys.set_defaults(run=_keys)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``antwort`` script."""
    args = build_parser().parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as exc:  # a line a setting (its value may be a secret: not shown)
        for error in exc.errors():
            name = "_".join(str(part) for part in error["loc"]).upper()
            print(f"antwort: {f'ANTWORT_{name}: ' if name else ''}{error['msg']}", file=sys.stderr)
        return 2
    import redis  # here: app, imported above, settles ANTWORT_HIREDIS before redis is

    from app.refusals import described

    try:
        return int(args.run(args, settings))
    except redis.RedisError as exc:
        # Redis away, or refusing (app.refusals: a failed disk refuses even PING): one line
        print(f"antwort: the fleet's Redis: {described(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
