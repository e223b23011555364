"""Chaos scenarios against a real fleet (issue 16 §5): shared by ``tests/e2e/test_chaos.py``
(each once, in ``make test``) and ``bench/chaos.py`` (each N times, ``make chaos``).

The fleet runs on a private ``redis-server`` (AOF, a free loopback port), so a scenario may
stop and restart it; the machine's Redis is never touched. The model is the simulator with a
kill switch (:class:`ChaosModel`): a request naming an armed tag SIGKILLs the worker that sent
it, mid-stream. The MCP server is ``tests.support.mcp_servers`` whose ``counted`` tool logs
every start and end with the caller's port, which names the worker running the call.

Each scenario returns :class:`Outcome` records; :func:`problems` holds them against the issue's
targets. Every wait is bounded in time; nothing but loopback addresses is used; only processes
the fleet started are ever signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis

from app.keys import Keys
from app.tenancy import OPEN_TENANT
from programs.simulator.behaviour import SimConfig
from programs.simulator.server import SimulatorServer, _Handler
from programs.supervisor import free_port
from tests.e2e.conftest import Fleet, fleet_env, wait_ready
from tests.support.faketime import clock_off
from tests.support.mcp_servers import RunningServer, start_server
from tests.support.private_redis import PrivateRedis

TERMINAL_EVENTS = frozenset(
    {"response.completed", "response.failed", "response.incomplete", "response.cancelled"}
)
TERMINAL = frozenset({"completed", "failed", "incomplete", "cancelled", "requires_action"})

RECOVERY_TARGET_P50 = 5.0
"""Issue 16 §3: seconds from a fault to the next event, median over runs."""
RECOVERY_TARGET_MAX = 10.0
"""Issue 16 §3: seconds from a fault to the next event, worst run."""
DEFAULT_MAX_TASK_DELIVERIES = 3
"""``ANTWORT_MAX_TASK_DELIVERIES``'s default (``app.config.Settings``)."""

MCP_LABEL = "chaos"
RESUME_CODE = "stream_interrupted"
"""The ``error`` event of a relay cut off from Redis: resume with ``starting_after``."""


# -- processes -------------------------------------------------------------------------------


def pid_on_port(port: int, candidates: Collection[int], *, peer_port: int) -> int | None:
    """The process among ``candidates`` holding the TCP connection from local port ``port`` to
    ``peer_port``.

    Both ends: Linux gives one local port to several connections when their peers differ, so
    a worker's connection to Redis can have the port of another worker's model call.
    """
    for conn in psutil.net_connections(kind="tcp"):
        if (
            conn.laddr
            and conn.laddr.port == port
            and conn.raddr
            and conn.raddr.port == peer_port
            and conn.pid in candidates
        ):
            return int(conn.pid)
    return None


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process we started and its children (a gunicorn master and its workers)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    proc.kill()
    proc.wait(timeout=15)


# -- the model with a kill switch --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kill:
    """One worker the model killed."""

    tag: str
    pid: int
    at: float
    """``time.monotonic()`` of the SIGKILL."""


@dataclass
class _Arming:
    after_chunks: int
    times: int | None
    """Kills left (None: every request)."""


class _ChaosServer(SimulatorServer):
    def __init__(self, victims: Callable[[], Collection[int]]):
        super().__init__(("127.0.0.1", 0), SimConfig())
        self.RequestHandlerClass = _KillingHandler
        self.victims = victims
        self.armed: dict[str, _Arming] = {}
        self.kills: list[Kill] = []
        self.lock = threading.Lock()

    def armed_tag(self, request: Mapping[str, Any]) -> str | None:
        messages = json.dumps(request.get("messages"))
        with self.lock:
            for tag, arming in self.armed.items():
                if tag in messages and arming.times != 0:
                    return tag
        return None

    def kill_caller(self, tag: str, port: int) -> None:
        pid = pid_on_port(port, set(self.victims()), peer_port=self.server_address[1])
        if pid is None:  # not one of the fleet's processes: never signal it
            return
        with self.lock:
            arming = self.armed[tag]
            if arming.times is not None:
                arming.times -= 1
            os.kill(pid, signal.SIGKILL)
            self.kills.append(Kill(tag=tag, pid=pid, at=time.monotonic()))


class _KillingHandler(_Handler):
    """The simulator's handler; an armed request's stream ends with its caller's SIGKILL."""

    server: _ChaosServer
    _tag: str | None = None

    def _complete(self, request: Mapping[str, Any]) -> None:
        self._tag = self.server.armed_tag(request)
        super()._complete(request)

    def _stream(self, chunks: Iterator[tuple[float, bytes]]) -> None:
        tag = self._tag
        super()._stream(chunks if tag is None else self._killing(chunks, tag))

    def _killing(
        self, chunks: Iterator[tuple[float, bytes]], tag: str
    ) -> Iterator[tuple[float, bytes]]:
        after = self.server.armed[tag].after_chunks
        for index, item in enumerate(chunks):
            if index == after:
                if after:
                    time.sleep(0.3)  # the chunks sent so far become events first
                self.server.kill_caller(tag, self.client_address[1])
                raise BrokenPipeError  # the stream ends as a dead client's would
            yield item


class ChaosModel:
    """The model simulator on a free loopback port, in a thread, with a kill switch."""

    def __init__(self) -> None:
        self._victims: list[Callable[[], Collection[int]]] = []
        self.server = _ChaosServer(lambda: {pid for pids in self._victims for pid in pids()})
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def allow_victims(self, victims: Callable[[], Collection[int]]) -> None:
        """Also let the model kill ``victims()`` (a fleet's workers); nothing else is signalled."""
        self._victims.append(victims)

    def arm(self, tag: str, *, after_chunks: int, times: int | None = 1) -> None:
        """Kill the caller of a request naming ``tag`` after ``after_chunks`` chunks."""
        with self.server.lock:
            self.server.armed[tag] = _Arming(after_chunks=after_chunks, times=times)

    def disarm(self, tag: str) -> None:
        with self.server.lock:
            self.server.armed.pop(tag, None)

    def kills(self, tag: str) -> list[Kill]:
        with self.server.lock:
            return [kill for kill in self.server.kills if kill.tag == tag]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


# -- the fleet ---------------------------------------------------------------------------------


@dataclass
class ChaosFleet:
    """A fleet on a private Redis: gateways, inference and MCP workers, the counting server."""

    fleet: Fleet
    redis: PrivateRedis
    model: ChaosModel
    gateways: list[str]
    runs_file: Path
    mcp: RunningServer | None = None

    @property
    def gateway(self) -> str:
        """The gateway the scenarios create on (the last; the first is the one killed)."""
        return self.gateways[-1]

    def worker_pids(self) -> set[int]:
        return {
            proc.pid for name, proc in self.fleet.procs.items() if not name.startswith("gateway")
        }

    def create(
        self,
        text: str,
        *,
        mcp: bool = False,
        conversation: str | None = None,
        before: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        """A background response of ``text`` (after the items ``before``), in ``conversation``."""
        given: Any = [*before, {"role": "user", "content": text}] if before else text
        body: dict[str, Any] = {"model": "antwort-sim", "input": given, "background": True}
        if mcp:
            body["tools"] = [{"type": "mcp", "server_label": MCP_LABEL}]
        if conversation:
            body["conversation"] = conversation
        response = httpx.post(f"{self.gateway}/v1/responses", json=body, timeout=30)
        response.raise_for_status()
        return str(response.json()["id"])

    def create_conversation(self, text: str) -> str:
        """A conversation whose first item is a user message of ``text``."""
        items = [{"type": "message", "role": "user", "content": text}]
        made = httpx.post(f"{self.gateway}/v1/conversations", json={"items": items}, timeout=30)
        made.raise_for_status()
        return str(made.json()["id"])

    def conversation_items(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every item of the conversation, oldest first (a page of 100 a request)."""
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"order": "asc", "limit": 100}
        while True:
            url = f"{self.gateway}/v1/conversations/{conversation_id}/items"
            page = httpx.get(url, params=params, timeout=30).raise_for_status().json()
            items += page["data"]
            if not page["has_more"]:
                return items
            params["after"] = page["last_id"]

    def retrieve(self, response_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.gateway}/v1/responses/{response_id}", timeout=10)
        response.raise_for_status()
        return dict(response.json())

    def wait_terminal(self, response_id: str, *, within: float) -> dict[str, Any]:
        deadline = time.monotonic() + within
        body = self.retrieve(response_id)
        while body["status"] not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.1)
            body = self.retrieve(response_id)
        return body

    def baseline(self, text: str, *, mcp: bool = False) -> str:
        """The output text of an undisturbed run of ``text``."""
        body = self.wait_terminal(self.create(text, mcp=mcp), within=60)
        assert body["status"] == "completed", body
        return output_text(body)

    def replay(self, response_id: str, *, within: float = 10.0) -> list[dict[str, Any]]:
        """The stored events of a response, from a gateway (bounded: a stuck response's stream
        never ends, it only sends keepalives)."""
        deadline = time.monotonic() + within
        events: list[dict[str, Any]] = []
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream(
                "GET",
                f"{self.gateway}/v1/responses/{response_id}",
                params={"stream": "true"},
                timeout=httpx.Timeout(10.0, read=5.0),
            ) as response,
        ):
            for line in response.iter_lines():
                if line == "data: [DONE]" or time.monotonic() > deadline:
                    break
                if line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
        return events

    def runs(self, tag: str) -> tuple[int, int, list[int]]:
        """``counted`` runs of ``tag``: (started, ended, the callers' ports of the starts)."""
        started, ended, ports = 0, 0, []
        with contextlib.suppress(FileNotFoundError):
            for line in self.runs_file.read_text().splitlines():
                what, logged, port = line.split()
                if logged == tag:
                    started += what == "start"
                    ended += what == "end"
                    if what == "start":
                        ports.append(int(port))
        return started, ended, ports

    def readyz_workers(self) -> int | None:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            body = httpx.get(f"{self.gateway}/readyz", timeout=5).json()
            return int(body["checks"]["inference_workers"])
        return None

    def heal(self, *, within: float = 60) -> list[str]:
        """Start again whatever died (Redis included) and wait until every gateway is ready."""
        if self.redis.proc is None or self.redis.proc.poll() is not None:
            self.redis.start()
        revived = self.fleet.revive()
        for url in self.gateways:
            wait_ready(url, timeout=within)
        return revived

    def stop(self) -> None:
        self.fleet.stop_all()
        if self.mcp is not None:
            self.mcp.stop()


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """How many processes of each role a chaos fleet runs."""

    gateways: int = 2
    inference: int = 2
    mcp: int = 2


def start_fleet(
    redis_server: PrivateRedis,
    model: ChaosModel,
    log_dir: Path,
    *,
    shape: Shape = Shape(),
    settings: Mapping[str, str] | None = None,
) -> ChaosFleet:
    """Start a fleet with default settings but ``settings`` (``ANTWORT_…`` names)."""
    gateways, inference, mcp = shape.gateways, shape.inference, shape.mcp
    log_dir.mkdir(parents=True, exist_ok=True)
    dumps = log_dir / "tmp"
    dumps.mkdir(exist_ok=True)
    runs_file = log_dir / "mcp-runs.log"
    server = (
        start_server("streamable-http", name=MCP_LABEL, runs_file=str(runs_file)) if mcp else None
    )
    servers_file = log_dir / "mcp-servers.json"
    configured = {MCP_LABEL: {"url": server.url, "require_approval": "never"}} if server else {}
    servers_file.write_text(json.dumps({"servers": configured}))
    env = fleet_env(
        {k: v for k, v in os.environ.items() if not k.startswith("ANTWORT_")},
        redis_url=redis_server.url,
        prefix=f"antwort-chaos-{uuid.uuid4().hex[:8]}:",
        llm_base_url=model.url,
        ANTWORT_KEEPALIVE_SECONDS="1",  # the followers notice a stall quickly; no recovery timing
        ANTWORT_MCP_ALLOWED_HOSTS="127.0.0.1",
        ANTWORT_MCP_SERVERS_FILE=str(servers_file),
        ANTWORT_MCP_SECRET_KEY="chaos-seal-key",
        # kombu pickles the messages it cannot give back to a Redis that went away into
        # mkstemp() files ("EMERGENCY DUMP STATE TO FILE"): in the fleet's directory, not /tmp
        TMPDIR=str(dumps),
    )
    env.update(settings or {})
    ports = [free_port() for _ in range(gateways)]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    fleet = Fleet(base_url=urls[-1], env=env, log_dir=log_dir)
    chaos = ChaosFleet(
        fleet=fleet, redis=redis_server, model=model, gateways=urls, runs_file=runs_file, mcp=server
    )
    model.allow_victims(chaos.worker_pids)
    for index, port in enumerate(ports):
        fleet.spawn(
            f"gateway-{index}",
            [sys.executable, "-m", "programs.cli", "gateway"],
            ANTWORT_PORT=str(port),
        )
    for index in range(inference):
        fleet.start_worker(f"inference-{index}")
    for index in range(mcp):
        fleet.start_worker(f"mcp-{index}", "tools.mcp")
    try:
        for url in urls:
            wait_ready(url)
    except RuntimeError:
        chaos.stop()
        raise RuntimeError(fleet.logs()) from None
    return chaos


# -- watching a response -----------------------------------------------------------------------


class Watch:
    """A client following one response's events to the end, from the first gateway.

    A stream that breaks (its gateway died) or closes without a terminal event is resumed with
    ``starting_after`` on the next gateway; a close without a terminal or ``error`` event is a
    *silent close* (issue 16 §1: followers are carried over or told to resume, never dropped).
    An ``error`` event that tells the client to resume is counted in ``told``, not among the
    response's events.
    """

    def __init__(self, gateways: list[str], response_id: str, *, deadline: float):
        self.gateways = gateways
        self.response_id = response_id
        self.deadline = deadline
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.silent_closes = 0
        self.told = 0
        self.breaks = 0
        self.finished = False
        self.done = False
        """The stream ended with ``data: [DONE]``."""
        self._thread = threading.Thread(target=self._run, name="chaos-watch", daemon=True)
        self._thread.start()

    def deltas(self) -> int:
        return sum(e["type"] == "response.output_text.delta" for _, e in list(self.events))

    def join(self) -> None:
        self._thread.join(timeout=max(0.0, self.deadline - time.monotonic()) + 5)

    def first_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` to the first event that arrived after it."""
        later = [at for at, _ in list(self.events) if at > moment]
        return min(later) - moment if later else None

    def _run(self) -> None:
        for attempt in range(8):  # bounded resumes
            if self.finished or time.monotonic() > self.deadline:
                return
            ended = self._follow(self.gateways[attempt % len(self.gateways)])
            if ended == "done":
                self.finished = True
                return
            if ended == "closed":
                self.silent_closes += 1
            else:
                self.breaks += 1
                time.sleep(0.1)

    def _follow(self, gateway: str) -> str:
        params = {"stream": "true"}
        if self.events:
            params["starting_after"] = str(self.events[-1][1]["sequence_number"])
        told = False
        try:
            with httpx.stream(
                "GET",
                f"{gateway}/v1/responses/{self.response_id}",
                params=params,
                timeout=httpx.Timeout(10.0, read=5.0),
            ) as response:
                if response.status_code != 200:
                    return "error"
                for line in response.iter_lines():
                    if time.monotonic() > self.deadline:
                        return "deadline"
                    if line == "data: [DONE]":
                        self.done = True
                        return "told" if told and not self.finished else "done"
                    if line.startswith("data: "):
                        event = json.loads(line.removeprefix("data: "))
                        if event["type"] == "error" and event.get("code") == RESUME_CODE:
                            told = True  # not an event of the response: resume after the last
                            self.told += 1
                            continue
                        self.events.append((time.monotonic(), event))
                        if event["type"] in TERMINAL_EVENTS:
                            self.finished = True
        except httpx.HTTPError:
            return "error"
        return "done" if self.finished else ("told" if told else "closed")


# -- outcomes ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run of a scenario did to one response."""

    scenario: str
    status: str
    """The response's last status (``stuck``: not terminal when the scenario's bound passed)."""
    expected: frozenset[str] = frozenset({"completed"})
    lost: int = 0
    """Sequence numbers the client never received (gaps in 0..N)."""
    repeated: int = 0
    """Events the client received more than once."""
    silent_closes: int = 0
    recovery: float | None = None
    """Seconds from the fault to the next event this client received."""
    text_ok: bool | None = None
    """The final text equals an undisturbed run's (None: no text expected)."""
    tool_starts: int = 0
    tool_ends: int = 0
    max_tool_starts: int | None = None
    deliveries: int = 0
    """Workers the turn killed (the poison scenario)."""
    max_deliveries: int | None = None
    readyz_lag: float | None = None
    """Seconds from a worker's death until ``/readyz`` stopped counting it (None: not measured,
    or not within the bound)."""
    measure_readyz: bool = False
    conversation_ok: bool | None = None
    """Its conversation holds each response's block once, whole, in the order the responses
    ended (None: not checked)."""
    dead: list[str] = field(default_factory=list)
    """Fleet processes that exited though the scenario did not kill them."""
    note: str = ""

    @property
    def outcome(self) -> str:
        if self.status not in TERMINAL:
            return "stuck"
        return "completed" if self.status == "completed" else "failed-cleanly"


def judge(
    chaos: ChaosFleet,
    watch: Watch,
    *,
    scenario: str,
    fault_at: float | None,
    baseline: str | None,
    within: float,
    **extra: Any,
) -> Outcome:
    """Wait (bounded) for the response to end, then count what its client saw."""
    watch.join()
    body = chaos.wait_terminal(
        watch.response_id, within=max(0.0, watch.deadline - time.monotonic())
    )
    replay = chaos.replay(watch.response_id)
    numbers = [event["sequence_number"] for _, event in watch.events]
    stored = [event["sequence_number"] for event in replay]
    last = max([*numbers, *stored], default=-1)
    lost = len(set(range(last + 1)) - set(numbers)) + (last + 1 - len(set(stored)))
    repeated = len(numbers) - len(set(numbers)) + len(stored) - len(set(stored))
    status = body["status"] if body["status"] in TERMINAL else "stuck"
    text_ok = None
    if baseline is not None and status == "completed":
        text_ok = output_text(body) == baseline
    return Outcome(
        scenario=scenario,
        status=status,
        lost=lost if status in TERMINAL else 0,
        repeated=repeated,
        silent_closes=watch.silent_closes,
        recovery=watch.first_after(fault_at) if fault_at is not None else None,
        text_ok=text_ok,
        **extra,
    )


def output_text(body: Mapping[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in body.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
    )


def problems(outcome: Outcome, *, recovery_max: float = RECOVERY_TARGET_MAX) -> list[str]:
    """How ``outcome`` misses issue 16's targets (empty: it meets them).

    ``recovery_max``: the most seconds from the fault to the next event (and to ``/readyz``
    no longer counting a dead worker). ``make chaos`` holds the fleet to the issue's 10 s; the
    test suite gives a busy machine more, still enough to tell a rescue from none.
    """
    found = []
    if outcome.status not in outcome.expected:
        found.append(f"status {outcome.status}, expected one of {sorted(outcome.expected)}")
    if outcome.lost or outcome.repeated:
        found.append(f"{outcome.lost} events lost, {outcome.repeated} repeated")
    if outcome.silent_closes:
        found.append(f"{outcome.silent_closes} silent closes of the client's stream")
    if outcome.text_ok is False:
        found.append("final text differs from an undisturbed run's")
    if outcome.recovery is not None and outcome.recovery > recovery_max:
        found.append(f"recovery {outcome.recovery:.1f} s > {recovery_max:g} s")
    if outcome.recovery is None and outcome.status == "stuck":
        found.append("no event after the fault")
    if outcome.max_tool_starts is not None and outcome.tool_starts > outcome.max_tool_starts:
        found.append(f"tool started {outcome.tool_starts} times > {outcome.max_tool_starts}")
    if outcome.max_deliveries is not None and outcome.deliveries > outcome.max_deliveries:
        found.append(f"turn delivered {outcome.deliveries} times > {outcome.max_deliveries}")
    if outcome.measure_readyz and (outcome.readyz_lag is None or outcome.readyz_lag > recovery_max):
        found.append(f"/readyz counted the dead worker too long ({outcome.readyz_lag})")
    if outcome.conversation_ok is False:
        found.append("the conversation's items are lost, repeated or out of order")
    if outcome.dead:
        found.append(f"processes exited: {outcome.dead}")
    return found


def _dead(chaos: ChaosFleet, *, killed: Collection[int] = ()) -> list[str]:
    return [
        name
        for name, proc in chaos.fleet.procs.items()
        if proc.poll() is not None and proc.pid not in killed
    ]


def _wait(condition: Callable[[], bool], *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"chaos: {what} did not happen within {within:g} s")
        time.sleep(0.02)


# -- scenarios ---------------------------------------------------------------------------------

TEXT = "chaos {tag} [tokens=200] [delay_ms={delay}]"
"""A text turn of 200 tokens; at 25 ms a token it streams for 5 s (the baseline at 0 ms)."""
TOOL = "counted tag={tag} seconds={seconds}"
"""One MCP call of ``counted`` (its output, hence the final text, depends on the tag only)."""


def _readyz_lag(
    chaos: ChaosFleet, before: int | None, fault_at: float, until: float
) -> float | None:
    """Seconds after ``fault_at`` when ``/readyz`` counted one inference worker fewer."""
    if before is None:
        return None
    while time.monotonic() < until:
        now = chaos.readyz_workers()
        if now is not None and now < before:
            return time.monotonic() - fault_at
        time.sleep(0.2)
    return None


def _killed_mid_stream(chaos: ChaosFleet, tag: str, *, bound: float) -> tuple[Watch, Kill]:
    """Create a text turn followed by a client; the inference worker streaming it is killed
    20 chunks in. The client watches until ``bound`` after the kill."""
    chaos.model.arm(tag, after_chunks=20)
    response_id = chaos.create(TEXT.format(tag=tag, delay=25))
    watch = Watch(chaos.gateways[-1:], response_id, deadline=time.monotonic() + 30 + bound)
    _wait(lambda: bool(chaos.model.kills(tag)), within=30, what="the kill")
    (kill,) = chaos.model.kills(tag)
    watch.deadline = kill.at + bound
    return watch, kill


def inference_kill(chaos: ChaosFleet, *, bound: float) -> list[Outcome]:
    """SIGKILL the inference worker streaming a turn, 20 chunks in; another one takes over."""
    tag = uuid.uuid4().hex[:10]
    baseline = chaos.baseline(TEXT.format(tag=tag, delay=0))
    alive = sum(
        name.startswith("inference") and proc.poll() is None
        for name, proc in chaos.fleet.procs.items()
    )
    # /readyz counts every live worker (and no dead one of an earlier run) before the kill
    _wait(lambda: chaos.readyz_workers() == alive, within=45, what="/readyz counting the workers")
    before = chaos.readyz_workers()
    watch, kill = _killed_mid_stream(chaos, tag, bound=bound)
    lag = _readyz_lag(chaos, before, kill.at, kill.at + bound)
    outcome = judge(
        chaos, watch, scenario="inference-kill", fault_at=kill.at, baseline=baseline, within=bound,
        readyz_lag=lag, measure_readyz=True,
    )  # fmt: skip
    outcome.dead = _dead(chaos, killed={kill.pid})
    chaos.model.disarm(tag)
    return [outcome]


CLOCK_AHEAD = "+600s"
"""How far ahead the clock of :func:`clock_ahead_kill`'s worker runs (``faketime``)."""


def clock_ahead_kill(chaos: ChaosFleet, *, bound: float) -> list[Outcome]:
    """SIGKILL an inference worker whose clock runs ten minutes ahead, mid-turn; the fleet's
    other workers, whose clocks are true, take over as from any other.

    The true workers step aside while it takes the turn, and come back for the rescue. Its
    host's clock is played by ``libfaketime`` (:func:`~tests.support.faketime.clock_off`).
    """
    tag = uuid.uuid4().hex[:10]
    baseline = chaos.baseline(TEXT.format(tag=tag, delay=0))
    true_clocks = sorted(name for name in chaos.fleet.procs if name.startswith("inference"))
    for name in true_clocks:
        chaos.fleet.stop(name)
    ahead = "inference-clock-ahead"
    worker = [sys.executable, "-m", "workers.main", "--queues=inference", "--loglevel=WARNING"]
    chaos.fleet.spawn(ahead, worker, **clock_off(CLOCK_AHEAD))
    try:
        _wait(lambda: chaos.readyz_workers() == 1, within=45, what="the worker ahead beating")
        watch, kill = _killed_mid_stream(chaos, tag, bound=bound)
        for name in true_clocks:
            chaos.fleet.start_worker(name)
        outcome = judge(
            chaos, watch, scenario="clock-ahead-kill", fault_at=kill.at, baseline=baseline,
            within=bound,
        )  # fmt: skip
    finally:
        chaos.fleet.procs.pop(ahead).kill()  # never revived: the fleet's clocks are true again
        chaos.fleet.specs.pop(ahead)
        for name in true_clocks:
            if name not in chaos.fleet.procs:
                chaos.fleet.start_worker(name)
    outcome.dead = _dead(chaos)
    chaos.model.disarm(tag)
    return [outcome]


def tool_kill(chaos: ChaosFleet, *, bound: float) -> list[Outcome]:
    """SIGKILL the MCP worker running a 2 s call, 0.3 s into it; the call runs again."""
    tag = uuid.uuid4().hex[:10]
    baseline = chaos.baseline(TOOL.format(tag=tag, seconds=0), mcp=True)
    done_before = chaos.runs(tag)
    response_id = chaos.create(TOOL.format(tag=tag, seconds=2), mcp=True)
    watch = Watch(chaos.gateways[-1:], response_id, deadline=time.monotonic() + 30 + bound)
    _wait(lambda: chaos.runs(tag)[0] > done_before[0], within=30, what="the tool call")
    port = chaos.runs(tag)[2][done_before[0]]
    assert chaos.mcp is not None
    mcp_port = httpx.URL(chaos.mcp.url).port
    assert mcp_port is not None
    pid = pid_on_port(port, chaos.worker_pids(), peer_port=mcp_port)
    assert pid is not None, "no worker of the fleet holds the MCP call's connection"
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    fault_at = time.monotonic()
    watch.deadline = fault_at + bound
    outcome = judge(
        chaos, watch, scenario="tool-kill", fault_at=fault_at, baseline=baseline, within=bound
    )
    started, ended, _ = chaos.runs(tag)
    outcome.tool_starts, outcome.tool_ends = started - done_before[0], ended - done_before[1]
    outcome.max_tool_starts = 2  # the killed run and one more (at-least-once, bounded)
    outcome.dead = _dead(chaos, killed={pid})
    return [outcome]


LONG_INPUT = 300
"""Items before a conversation response's text: its block (more than 250 items) is queued by its
final write and appended a batch a call (``app/store/conversations.py``)."""


def conversation_kill(chaos: ChaosFleet, *, bound: float) -> list[Outcome]:
    """SIGKILL the inference worker streaming a long response of a conversation, 20 chunks in;
    meanwhile a short response of the same conversation ends. Both end completed, and the
    conversation holds the seed, then the short response's block, then the long one's: each
    item once."""
    tag, short_tag = uuid.uuid4().hex[:10], uuid.uuid4().hex[:10]
    conversation = chaos.create_conversation(f"seed {tag}")
    chaos.model.arm(tag, after_chunks=20)
    filler = [{"role": "user", "content": f"filler {i}"} for i in range(LONG_INPUT)]
    long_id = chaos.create(TEXT.format(tag=tag, delay=25), conversation=conversation, before=filler)
    watch = Watch(chaos.gateways[-1:], long_id, deadline=time.monotonic() + 30 + bound)
    _wait(lambda: bool(chaos.model.kills(tag)), within=30, what="the kill")
    (kill,) = chaos.model.kills(tag)
    watch.deadline = kill.at + bound
    short_id = chaos.create(f"short {short_tag} [tokens=5]", conversation=conversation)
    short = chaos.wait_terminal(short_id, within=bound)
    outcome = judge(
        chaos, watch, scenario="conversation-kill", fault_at=kill.at, baseline=None, within=bound
    )
    chaos.model.disarm(tag)
    outcome.dead = _dead(chaos, killed={kill.pid})
    if outcome.status != "completed" or short["status"] != "completed":
        outcome.note = f"the short response ended {short['status']}"
        return [outcome]
    final = chaos.retrieve(long_id)
    texts = [_text_of(item) for item in chaos.conversation_items(conversation)]
    expected = [
        f"seed {tag}",
        f"short {short_tag} [tokens=5]",
        output_text(short),
        *(item["content"] for item in filler),
        TEXT.format(tag=tag, delay=25),
        output_text(final),
    ]
    outcome.conversation_ok = texts == expected
    if not outcome.conversation_ok:
        outcome.note = f"{len(texts)} items, expected {len(expected)}"
    return [outcome]


def _text_of(item: Mapping[str, Any]) -> str:
    """A message item's text (its content a string, or parts)."""
    content = item.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def gateway_kill(chaos: ChaosFleet, *, bound: float) -> list[Outcome]:
    """SIGKILL the gateway a client streams from; the client resumes on the other one."""
    tag = uuid.uuid4().hex[:10]
    baseline = chaos.baseline(TEXT.format(tag=tag, delay=0))
    response_id = chaos.create(TEXT.format(tag=tag, delay=25))
    watch = Watch(chaos.gateways, response_id, deadline=time.monotonic() + 30 + bound)
    _wait(lambda: watch.deltas() >= 10, within=30, what="ten deltas")
    victim = chaos.fleet.procs["gateway-0"]
    kill_tree(victim)
    fault_at = time.monotonic()
    watch.deadline = fault_at + bound
    outcome = judge(
        chaos, watch, scenario="gateway-kill", fault_at=fault_at, baseline=baseline, within=bound
    )
    outcome.dead = _dead(chaos, killed={victim.pid})
    return [outcome]


CANCEL_DELAYS = (0.0, 0.02, 0.1, 0.3, 0.6)
"""Seconds between creating a response and cancelling it (before, at and during the turn)."""


def cancel_race(
    chaos: ChaosFleet, *, bound: float, delays: tuple[float, ...] = CANCEL_DELAYS
) -> list[Outcome]:
    """Cancel responses at several moments of their 1 s turn; each ends cancelled or completed."""
    outcomes = []
    for delay in delays:
        tag = uuid.uuid4().hex[:10]
        baseline = chaos.baseline(f"race {tag} [tokens=50] [delay_ms=0]")
        response_id = chaos.create(f"race {tag} [tokens=50] [delay_ms=20]")
        watch = Watch(chaos.gateways[-1:], response_id, deadline=time.monotonic() + bound)
        time.sleep(delay)
        httpx.post(f"{chaos.gateway}/v1/responses/{response_id}/cancel", timeout=10)
        outcome = judge(
            chaos, watch, scenario="cancel-race", fault_at=None, baseline=baseline, within=bound
        )
        outcome.expected = frozenset({"completed", "cancelled"})
        # A cancelled response's stream ends without a terminal event (the cancel is the
        # client's own act); every other end is announced exactly once, last.
        ends = [e["type"] for _, e in watch.events if e["type"] in TERMINAL_EVENTS]
        announced = (
            ends == [f"response.{outcome.status}"] and ends[-1] == watch.events[-1][1]["type"]
        )
        if outcome.status != "stuck" and not (
            watch.done and (announced or (outcome.status == "cancelled" and not ends))
        ):
            outcome.note = f"terminal events {ends}, [DONE] {watch.done}"
            outcome.status = "stuck"  # a response whose end the client never saw is stuck to it
        outcomes.append(outcome)
    return outcomes


REDIS_OUTAGE_SECONDS = 5.0


def parked_tool_restart(
    chaos: ChaosFleet, *, bound: float, outage: float = REDIS_OUTAGE_SECONDS
) -> list[Outcome]:
    """On a fleet with one place a tenant on each tool queue (``ANTWORT_TENANT_MAX_TOOL_CALLS=1``):
    one response's 10 s MCP call holds the place, a second response waits parked for it; stop
    Redis under them and start it again on its AOF. Both complete, each call run once.

    Recovery is measured from Redis being back to each client's next event.
    """
    tags = [uuid.uuid4().hex[:10] for _ in range(2)]
    baselines = [chaos.baseline(TOOL.format(tag=tag, seconds=0), mcp=True) for tag in tags]
    done_before = [chaos.runs(tag) for tag in tags]
    # long enough that the second response parks before it ends, however busy the machine
    ids = [chaos.create(TOOL.format(tag=tags[0], seconds=10), mcp=True)]
    _wait(lambda: chaos.runs(tags[0])[0] > done_before[0][0], within=30, what="the MCP call")
    ids.append(chaos.create(TOOL.format(tag=tags[1], seconds=0), mcp=True))
    far = time.monotonic() + 60 + bound
    watches = [Watch(chaos.gateways[-1:], rid, deadline=far) for rid in ids]
    _wait(lambda: _parked_for_tools(chaos) == 1, within=30, what="the second response parked")
    chaos.redis.stop()
    time.sleep(outage)
    chaos.redis.start()
    back_at = time.monotonic()
    outcomes = []
    for watch, baseline, tag, before in zip(watches, baselines, tags, done_before, strict=True):
        watch.deadline = back_at + bound
        outcome = judge(
            chaos, watch, scenario="parked-tool-restart", fault_at=back_at, baseline=baseline,
            within=bound,
        )  # fmt: skip
        started, ended, _ = chaos.runs(tag)
        outcome.tool_starts, outcome.tool_ends = started - before[0], ended - before[1]
        outcome.max_tool_starts = 1  # no worker died: each call runs once
        outcomes.append(outcome)
    dead = _dead(chaos)
    for outcome in outcomes:
        outcome.dead = dead
    return outcomes


def _parked_for_tools(chaos: ChaosFleet) -> int:
    """Responses of the open tenant waiting for a place on the MCP tools' queue."""
    client = redis.Redis.from_url(chaos.redis.url)
    try:
        keys = Keys(chaos.fleet.env["ANTWORT_KEY_PREFIX"])
        return int(client.zcard(keys.tenant_tool_parked(OPEN_TENANT, "tools.mcp")))
    finally:
        client.close()


def redis_restart(
    chaos: ChaosFleet, *, bound: float, outage: float = REDIS_OUTAGE_SECONDS
) -> list[Outcome]:
    """Stop Redis (SIGTERM) under 3 streaming turns and an MCP call; start it again on its AOF.

    Recovery is measured from Redis being back to each client's next event.
    """
    tags = [uuid.uuid4().hex[:10] for _ in range(4)]
    texts = [TEXT.format(tag=tag, delay=0) for tag in tags[:3]]
    baselines = [chaos.baseline(text) for text in texts]
    baselines.append(chaos.baseline(TOOL.format(tag=tags[3], seconds=0), mcp=True))
    done_before = chaos.runs(tags[3])
    ids = [chaos.create(TEXT.format(tag=tag, delay=25)) for tag in tags[:3]]
    ids.append(chaos.create(TOOL.format(tag=tags[3], seconds=4), mcp=True))
    far = time.monotonic() + 60 + bound
    watches = [Watch(chaos.gateways[-1:], rid, deadline=far) for rid in ids]
    _wait(lambda: chaos.runs(tags[3])[0] > done_before[0], within=30, what="the MCP call")
    _wait(lambda: all(w.deltas() for w in watches[:3]), within=30, what="text deltas")
    chaos.redis.stop()
    time.sleep(outage)
    chaos.redis.start()
    back_at = time.monotonic()
    for watch in watches:
        watch.deadline = back_at + bound
    outcomes = []
    for watch, baseline in zip(watches, baselines, strict=True):
        outcomes.append(
            judge(chaos, watch, scenario="redis-restart", fault_at=back_at, baseline=baseline,
                  within=bound)
        )  # fmt: skip
    started, ended, _ = chaos.runs(tags[3])
    outcomes[-1].tool_starts, outcomes[-1].tool_ends = (
        started - done_before[0],
        ended - done_before[1],
    )
    outcomes[-1].max_tool_starts = 1  # no worker died: the call runs once
    dead = _dead(chaos)
    for outcome in outcomes:
        outcome.dead = dead
    return outcomes


def poison_turn(
    chaos: ChaosFleet, *, bound: float, max_deliveries: int = DEFAULT_MAX_TASK_DELIVERIES
) -> list[Outcome]:
    """A turn that kills every worker that runs it: the response fails after the cap.

    Killed workers are started again at once (as a supervisor would). The scenario stops after
    one kill more than the cap, or ``bound`` seconds.
    """
    tag = uuid.uuid4().hex[:10]
    chaos.model.arm(tag, after_chunks=0, times=None)
    try:
        response_id = chaos.create(f"poison {tag} [tokens=5]")
        deadline = time.monotonic() + bound
        body = chaos.retrieve(response_id)
        while (
            body["status"] not in TERMINAL
            and time.monotonic() < deadline
            and len(chaos.model.kills(tag)) <= max_deliveries
        ):
            chaos.fleet.revive()
            time.sleep(0.25)
            body = chaos.retrieve(response_id)
    finally:
        chaos.model.disarm(tag)
    kills = chaos.model.kills(tag)
    failed_cleanly = body["status"] == "failed" and bool((body.get("error") or {}).get("message"))
    status = body["status"] if body["status"] in TERMINAL else "stuck"
    return [
        Outcome(
            scenario="poison-turn",
            status=status if status != "failed" or failed_cleanly else "failed-unclear",
            expected=frozenset({"failed"}),
            deliveries=len(kills),
            max_deliveries=max_deliveries,
            note=str((body.get("error") or {}).get("message", "")),
        )
    ]


SCENARIOS: dict[str, Callable[..., list[Outcome]]] = {
    "inference-kill": inference_kill,
    "tool-kill": tool_kill,
    "gateway-kill": gateway_kill,
    "conversation-kill": conversation_kill,
    "cancel-race": cancel_race,
    "redis-restart": redis_restart,
    "poison-turn": poison_turn,
}
"""Every scenario, by name (the bench runs them in this order; the poison turn needs the
short-lease fleet of :data:`POISON_SETTINGS`)."""

POISON_SHAPE = Shape(gateways=1, inference=2, mcp=0)
POISON_SETTINGS = {"ANTWORT_LEASE_SECONDS": "2"}
"""The poison turn's fleet: it is about the delivery cap, not default timing, and a 2 s lease
keeps its kills seconds apart."""
