"""The fleet as real processes: gunicorn+gevent gateway and Celery workers, on real Redis."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest
import redis

from programs.supervisor import free_port
from tests.conftest import delete_prefix
from tests.e2e.helpers import TERMINAL, wait_for_status
from tests.support.mcp_servers import stdio_command

SANDBOX_TOOLS = [
    {
        "name": "word_count",
        "description": "Count the words of a text (runs in the sandbox).",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        "script": "import json, sys\nprint(len(json.load(sys.stdin)['text'].split()))",
    }
]
"""Operator-declared sandboxed tools of the e2e fleet (``ANTWORT_SANDBOX_TOOLS_FILE``)."""

EXAMPLE_SERVERS_FILE = Path(__file__).resolve().parents[2] / "examples" / "mcp_servers.json"
"""compose.yaml's configured MCP servers; the fleet gets its ``example`` on a loopback port."""


@dataclass
class Fleet:
    """A running fleet; tests may add or kill workers."""

    base_url: str
    env: dict[str, str]
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    specs: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    """How each process was started (:meth:`revive` starts it again)."""

    def spawn(self, name: str, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(argv, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs[name] = proc
        self.specs[name] = (argv, env)
        return proc

    def revive(self) -> list[str]:
        """Start again every process of the fleet that exited (a test killed it); their names."""
        dead = [name for name, proc in self.procs.items() if proc.poll() is not None]
        for name in dead:
            argv, env = self.specs[name]
            self.spawn(name, argv, **env)
        return dead

    def start_worker(
        self, name: str, queues: str = "inference", *extra: str, loglevel: str | None = "WARNING"
    ) -> subprocess.Popen[bytes]:
        """A worker on ``queues`` at ``loglevel`` (None: ``ANTWORT_LOG_LEVEL``'s)."""
        level = [] if loglevel is None else [f"--loglevel={loglevel}"]
        argv = [sys.executable, "-m", "workers.main", f"--queues={queues}", *level, *extra]
        return self.spawn(name, argv)

    @contextmanager
    def inference_worker_on(self, model_url: str) -> Iterator[None]:
        """The fleet's inference worker swapped for one whose model server is ``model_url``."""
        self.stop("worker-0")
        argv = [sys.executable, "-m", "workers.main", "--queues=inference", "--loglevel=WARNING"]
        self.spawn("worker-model", argv, ANTWORT_LLM_BASE_URL=model_url)
        try:
            yield
        finally:
            self.stop("worker-model")
            self.start_worker("worker-0")
        with openai.OpenAI(base_url=f"{self.base_url}/v1", api_key="k", max_retries=0) as client:
            probe = client.responses.create(model="antwort-sim", input="probe", background=True)
            assert wait_for_status(client, probe.id, TERMINAL, timeout=60).status == "completed"

    @contextmanager
    def extra_gateway(self, name: str, **env: str) -> Iterator[str]:
        """Another gateway process of this fleet (its Redis, its workers) with ``env``; its URL."""
        port = free_port()
        gateway = [sys.executable, "-m", "programs.cli", "gateway"]
        self.spawn(name, gateway, ANTWORT_PORT=str(port), **env)
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base_url)
            yield base_url
        finally:
            self.stop(name)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.log_dir.glob("*.log")
        )


SPEEDUPS_OFF = {"ANTWORT_FAST_PUBLISH": "0", "ANTWORT_LEAN_HTTP": "0", "ANTWORT_HIREDIS": "0"}
"""The switches ``--speedups=off`` sets for every process the e2e tests start."""


@pytest.fixture(scope="session")
def process_environ(pytestconfig: pytest.Config) -> dict[str, str]:
    """The environment of the processes e2e tests start, before their own settings.

    None of the shell's ANTWORT_* settings; the speed-ups off when ``--speedups=off`` (the
    test process's own ANTWORT_* variables are cleared by ``tests/conftest.py``, so the switch
    travels as a pytest option).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTWORT_")}
    if pytestconfig.getoption("speedups") == "off":
        env.update(SPEEDUPS_OFF)
    return env


def fleet_env(
    base: Mapping[str, str],
    *,
    redis_url: str,
    prefix: str,
    llm_base_url: str,
    model: str | None = "antwort-sim",
    port: int | None = None,
    **settings: str,
) -> dict[str, str]:
    """The environment of a test fleet's processes: ``base`` and what every fleet sets.

    ``base``: the shell's environment without its ANTWORT_* settings (``process_environ``).
    The fleet's Redis and key prefix, its model server (and default model unless None), the
    loopback as the gateway's address (and ``port`` if given: a fleet of several gateways gives
    each its own), warnings and worse logged, then ``settings`` (``ANTWORT_…`` names).
    """
    env = dict(base)
    env.update(
        ANTWORT_REDIS_URL=redis_url,
        ANTWORT_KEY_PREFIX=prefix,
        ANTWORT_LLM_BASE_URL=llm_base_url,
        ANTWORT_HOST="127.0.0.1",
        ANTWORT_LOG_LEVEL="warning",
    )
    if model is not None:
        env["ANTWORT_DEFAULT_MODEL"] = model
    if port is not None:
        env["ANTWORT_PORT"] = str(port)
    env.update(settings)
    return env


def wait_ready(base_url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{base_url}/readyz", timeout=2)
            if response.status_code == 200:
                return
            last = response.text
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"fleet not ready: {last}")


@pytest.fixture(scope="session")
def fleet(
    redis_url: str,
    sim_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    process_environ: dict[str, str],
) -> Iterator[Fleet]:
    """One fleet for the e2e session: a gateway and an inference worker."""
    prefix = f"antwort-e2e-{uuid.uuid4().hex[:8]}:"
    port = free_port()
    env = fleet_env(
        process_environ,
        redis_url=redis_url,
        prefix=prefix,
        llm_base_url=sim_url,
        port=port,
        ANTWORT_LLM_MAX_RETRIES="0",
        ANTWORT_KEEPALIVE_SECONDS="1",
        ANTWORT_INFERENCE_CONCURRENCY="8",
        ANTWORT_INTERNAL_TOOL_MODULES="tests.support.tools",
        ANTWORT_TOOL_OUTPUT_MAX_CHARS="1000",
        ANTWORT_LLM_REASONING_REPLAY="true",  # the simulator takes reasoning_content, as vLLM
    )
    # -- sandbox kind and built-ins (tests/e2e/test_sandbox.py, test_builtins.py) -------------
    sandbox_tools = tmp_path_factory.mktemp("sandbox") / "tools.json"
    sandbox_tools.write_text(json.dumps(SANDBOX_TOOLS))
    env.update(ANTWORT_SANDBOX_TOOLS_FILE=str(sandbox_tools), ANTWORT_SANDBOX_TIMEOUT_SECONDS="3")
    env["ANTWORT_FETCH_ALLOWED_HOSTS"] = "127.0.0.1"  # http_fetch may read the tests' server
    # -------------------------------------------------------------------------------------------
    # -- MCP (tests/e2e/test_mcp*.py): test servers on loopback, one configured stdio server, --
    # -- and examples/mcp_servers.json's `example` moved to a loopback port (test_mcp_example) --
    mcp_servers = tmp_path_factory.mktemp("mcp") / "servers.json"
    command, args = stdio_command("local")
    configured = {"local": {"command": command, "args": args}}
    example = json.loads(EXAMPLE_SERVERS_FILE.read_text())["servers"]["example"]
    configured["example"] = {**example, "url": f"http://127.0.0.1:{free_port()}/mcp"}
    mcp_servers.write_text(json.dumps({"servers": configured}))
    env.update(
        ANTWORT_MCP_ALLOWED_HOSTS="127.0.0.1,localhost",
        ANTWORT_MCP_SERVERS_FILE=str(mcp_servers),
        ANTWORT_MCP_SECRET_KEY="e2e-seal-key",
        ANTWORT_SECRETS_FILE=str(tmp_path_factory.mktemp("secrets") / "secrets.key"),
        ANTWORT_MCP_TIMEOUT_SECONDS="5",
    )
    # -------------------------------------------------------------------------------------------
    base_url = f"http://127.0.0.1:{port}"
    running = Fleet(base_url=base_url, env=env, log_dir=tmp_path_factory.mktemp("fleet-logs"))
    running.spawn("gateway", [sys.executable, "-m", "programs.cli", "gateway"])
    running.start_worker("worker-0")
    running.start_worker("tools-0", "tools.internal")
    if shutil.which("bwrap"):  # the sandbox kind (its tests skip without bubblewrap)
        running.start_worker("sandbox-0", "tools.sandbox")
    running.start_worker("mcp-0", "tools.mcp")  # MCP
    try:
        wait_ready(base_url)
    except RuntimeError:
        running.stop_all()
        raise RuntimeError(running.logs()) from None
    yield running
    running.stop_all()
    client = redis.Redis.from_url(redis_url)
    delete_prefix(client, prefix)
    client.close()


@pytest.fixture
def client(fleet: Fleet) -> Iterator[openai.OpenAI]:
    """The official SDK, pointed at the fleet."""
    with openai.OpenAI(base_url=f"{fleet.base_url}/v1", api_key="test-key", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def counters(fleet: Fleet) -> Iterator[redis.Redis]:
    """The fleet's Redis, for the counters of ``tests.support.tools.Counted``."""
    client = redis.Redis.from_url(fleet.env["ANTWORT_REDIS_URL"], decode_responses=True)
    yield client
    client.close()
