"""Settings, read once from the environment (``ANTWORT_*``) at process start."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.keys import CLUSTER_SHARDS, Keys
from app.protocol.items import ReasoningEffort
from app.redis_url import ClusterTarget, RedisTarget, parse_redis_url

REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)
"""``reasoning.effort``'s values, least effort first."""


def _comma_list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


ClientToolStatus = Literal["auto", "requires_action", "completed"]
HostedToolPolicy = Literal["drop", "reject"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]


class Settings(BaseSettings):
    """Every tunable of the fleet; the names marked *contract* are fixed (DESIGN.md)."""

    model_config = SettingsConfigDict(env_prefix="ANTWORT_", extra="ignore")

    redis_url: str | None = None
    """*Contract.* Redis for broker, store, events; unset: an embedded Redis (``antwort up``)."""
    llm_base_url: str | None = None
    """*Contract.* OpenAI-compatible base URL (``…/v1``); unset: the built-in simulator."""
    llm_api_key: str | None = None
    """*Contract.* Bearer key sent to the model server."""
    default_model: str | None = None
    """*Contract.* Model used when a request names none."""
    host: str = "127.0.0.1"
    """*Contract.* Gateway bind address."""
    port: int = 8080
    """*Contract.* Gateway port."""
    max_turns: int = Field(default=10, ge=1)
    """*Contract.* Model turns one response may take."""
    client_tool_status: ClientToolStatus = "auto"
    """*Contract.* Status of a response paused for client function calls."""
    api_keys: str | None = None
    """*Contract.* Comma-separated bearer keys the gateway accepts, each a tenant of its own
    unless written ``tenant:key``; unset (and no key stored by ``antwort keys``): open."""
    mcp_allowed_hosts: str | None = None
    """*Contract.* Hosts MCP ``server_url`` may name."""

    key_cache_seconds: float = Field(default=5.0, ge=0)
    """How long a gateway process trusts what it read of a stored key (``antwort keys``): a
    revoked key stops working within this time, a new one starts within it."""
    metrics_key: str | None = None
    """Bearer key ``/metrics`` wants; unset: ``/metrics`` is open (bind it elsewhere then)."""
    rate_limit_requests_per_minute: int = Field(default=0, ge=0)
    """Default requests per minute of a tenant (0: unlimited); ``antwort keys limits`` overrides."""
    rate_limit_tokens_per_minute: int = Field(default=0, ge=0)
    """Default tokens per minute of a tenant (0: unlimited): estimated at create (input
    characters / 4 plus ``max_output_tokens``), then what its model calls took past that."""
    tenant_max_running: int | None = Field(default=None, ge=0)
    """Fair share: responses of one tenant on the fleet at once (queued on it or running); the
    tenant's further responses wait parked in Redis, in order, and start as its running ones
    end, so one tenant's flood cannot starve another. Unset: automatic, off while the fleet has
    one tenant (auth off, or every key one tenant's), else half the live inference threads (at
    least 1); 0: off, every response queued at once. The gateways decide; the workers start
    parked responses with the cap the gateways last used (``app.fairness``)."""

    tenant_max_tool_calls: int | None = Field(default=None, ge=0)
    """Fair share of each tool queue: tool calls of one tenant there at once (queued on it or
    running); a response whose calls find no place waits parked in Redis, in order, and goes on
    as the tenant's calls there end, so one tenant's tool calls cannot hold up another's. Unset:
    automatic, off while the fleet has one tenant, else half the live threads of the queue's
    workers (at least 1); 0: off. The gateways decide for each response they create."""

    @field_validator("tenant_max_running", "tenant_max_tool_calls", mode="before")
    @classmethod
    def _auto_is_unset(cls, value: object) -> object:
        """``auto`` or an empty value (compose passes one through) mean unset."""
        if isinstance(value, str) and value.strip().lower() in ("", "auto"):
            return None
        return value

    rate_limit_max_in_flight: int = Field(default=0, ge=0)
    """Default responses a tenant may have queued or running at once (0: unlimited)."""
    unavailable_hosted_tools: HostedToolPolicy = "drop"
    """What a request's hosted tools the fleet cannot run (``file_search``, ``image_generation``,
    ``web_search`` unless a plugin backs it …) become:
    ``drop``, left out of the request (a client's default tool list, like Codex's, works);
    ``reject``, a 400 naming the tool. A ``tool_choice`` forcing one is a 400 either way."""

    redis_max_connections: int = Field(default=200, ge=4)
    """Redis connections one process may hold; more requests wait for a free one."""
    redis_outage_seconds: float = Field(default=60.0, ge=1)
    """How long an outage of Redis every process rides out: a command that finds Redis gone is
    tried again with backoff for about this long before it fails (then a turn's lease lapses and
    the sweeper runs it again; an SSE follower is told to resume with ``starting_after``)."""
    queued_grace_seconds: float = Field(default=30.0, gt=0)
    """How long a ``queued`` response may wait for its first turn to start before the sweeper
    queues that turn again (its message may have been lost with a worker or a connection); then
    again after each doubling of the wait, up to ``max_task_deliveries`` times."""
    redis_sentinel_master: str | None = None
    """The master's name when ``redis_url`` (or ``broker_url``) is in kombu's
    ``sentinel://host:port;sentinel://host:port`` form; ``redis+sentinel://`` URLs name it in
    their path (:mod:`app.redis_url`)."""
    broker_url: str | None = None
    """Redis (plain or Sentinel) of the Celery broker and result backend; unset: ``redis_url``.
    Lets the store live elsewhere than the queues (needed when ``redis_url`` is a cluster)."""
    redis_cluster_shards: int = Field(default=CLUSTER_SHARDS, ge=2, le=16384)
    """Hash-tag shards of the keyspace when ``redis_url`` is a Redis Cluster
    (``redis+cluster://``): each shard's keys live in one slot (:mod:`app.keys`). Every process
    of a fleet must use the same number."""
    key_prefix: str = "antwort:"
    """Prefix of every Redis key the fleet writes."""
    response_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    """How long responses, their input items and their events live."""
    unstored_ttl_seconds: int = Field(default=300, ge=1)
    """How long a ``store: false`` response lingers after it ends (for its stream only)."""
    event_stream_maxlen: int = Field(default=20_000, ge=100)
    """Events kept per response for replay (``starting_after``)."""
    coalesce_ms: float = Field(default=5.0, ge=0)
    """Window in which text deltas are merged before they reach Redis."""
    coalesce_max_ms: float = Field(default=25.0, ge=0)
    """The window under load: a worker streaming many responses at once stretches
    ``coalesce_ms`` (by one more for every 4 responses) up to this."""
    keepalive_seconds: float = Field(default=15.0, gt=0)
    """Interval of SSE ``: keepalive`` comments."""
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    """Largest accepted request body."""
    body_timeout_seconds: float = Field(default=30.0, gt=0)
    """Time a client has to send a request's body, from the first read of it (a 408 after)."""
    header_timeout_seconds: float = Field(default=15.0, gt=0)
    """Time a client has to send a request's line and headers, in all; also the longest idle
    keep-alive (the gateway's worker class, ``gateway.worker``)."""
    max_connections_per_client: int = Field(default=256, ge=0)
    """Connections of one client address the gateway serves at once (0: no cap); one more is
    answered 429 and closed."""
    sync_timeout_seconds: float = Field(default=600.0, gt=0)
    """How long a non-streaming, non-background request waits for its answer."""
    compact_threshold: int | None = Field(default=None, ge=1)
    """The prompt tokens past which a response whose ``context_management`` asks for compaction
    without a ``compact_threshold`` compacts its context (None: such a request compacts never)."""
    llm_timeout_seconds: float = Field(default=300.0, gt=0)
    """Read timeout of one model call."""
    llm_connect_timeout_seconds: float = Field(default=10.0, gt=0)
    """Connect timeout of one model call."""
    llm_max_retries: int = Field(default=2, ge=0)
    """Retries of a model call on 429, 5xx and connection errors."""
    llm_retry_max_wait_seconds: float = Field(default=20.0, ge=0)
    """Cap on a ``Retry-After`` the fleet honours."""
    llm_reasoning_replay: bool = False
    """The model server takes earlier reasoning back as ``reasoning_content`` on assistant
    messages (vLLM): reasoning items of the conversation go back to it. Off: left out."""
    llm_reasoning_efforts: str = "low,medium,high"
    """Comma-separated ``reasoning.effort`` values the model server takes as
    ``reasoning_effort`` (vLLM: low, medium, high; Ollama also none; OpenAI: none, minimal, low,
    medium, high, xhigh, max). A request's effort outside them goes as the nearest one of them (the
    lower of two as near); empty: the field is never sent."""
    task_visibility_timeout_seconds: int = Field(default=3600, ge=60)
    """Redis broker visibility timeout; above the longest task."""
    max_task_deliveries: int = Field(default=3, ge=1)
    """Runs of one turn (started one after another without ending), or of one tool call, before
    the response is failed: a turn or a call that kills its worker. Also how often a turn 0 that
    never started is queued again (``queued_grace_seconds``)."""
    lease_seconds: float = Field(default=3.0, gt=1)
    """A run's lease, renewed every third of it: a worker that dies is noticed within this
    time, and the sweeper (every third of it) re-runs its work."""
    claim_seconds: float = Field(default=1.5, gt=0.3)
    """A running tool call's claim, renewed every third of it along with the task's look at the
    response (no round trip of its own): a tool worker that dies is noticed within this time."""
    fast_publish: bool = True
    """Turns and single tool calls are written onto the queue lists directly
    (``broker.publish.TaskPublisher``); off: through Celery's ``send_task``."""
    lean_http: bool = True
    """Plain-HTTP model servers are read with the lean transport (``app.providers.http11``);
    off: through httpx's own."""
    hiredis: bool = True
    """redis-py parses replies and packs commands with hiredis (C); off: its pure-Python parser
    and packer, in every client of the process, Celery's included. Read by ``app/__init__``,
    before anything imports redis."""
    inference_concurrency: int = Field(default=32, ge=1)
    """Threads of an inference worker (model calls are I/O-bound)."""
    gateway_workers: int = Field(default=1, ge=1)
    """gunicorn worker processes of ``antwort gateway``."""
    gateway_connections: int = Field(default=4000, ge=1)
    """Connections (SSE streams, WebSockets, requests) one gateway process holds at once
    (gunicorn's ``worker_connections``); ``antwort gateway`` raises the open-files limit to
    match."""
    gateway_gc_threshold: int = Field(default=10_000, ge=0)
    """Allocations between two collections of the youngest generation in a gateway process
    (Python's default: 700; 0 leaves Python's thresholds). The oldest generation is looked at
    once every 10,000,000 allocations whatever this is: at Python's default, a process opening
    10,000 streams stopped for a full collection of 0.1-0.7 s each time its heap grew by a
    quarter, every request waiting (``gateway.worker``). Larger means fewer, longer pauses: at
    100,000 a middle collection took 0.3-0.4 s with 10,000 WebSockets open."""
    tool_timeout_seconds: float = Field(default=60.0, gt=0)
    """Deadline of one tool call (a tool's own definition may override it)."""
    tool_output_max_chars: int = Field(default=100_000, ge=100)
    """Tool output longer than this is cut, with a marker the model can read."""
    max_parallel_tools: int = Field(default=8, ge=1)
    """Tool calls of one turn running at once."""
    tool_runner_pool: bool = True
    """Run tool calls on reused runner threads (``app.tool_calls``); off: a new thread each."""
    internal_tool_isolation: Literal["process", "thread"] = "process"
    """``process``: each internal tool call runs in a child the worker kills at the deadline,
    so a tool that holds the GIL cannot stall the worker; ``thread``: in the worker itself."""
    internal_tool_modules: str | None = None
    """Comma-separated modules whose ``register(registry)`` adds internal tools."""
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Where a worker serves its Prometheus metrics; 0: a free port. With several pool
    processes (prefork) each serves its own: this port + its index (a free one each with 0).
    Every process registers its URL in Redis (``antwort status`` lists them)."""
    metrics_host: str = "127.0.0.1"
    """Bind address of a worker's metrics port (``0.0.0.0`` in containers); the URL a worker
    registers names its hostname then."""
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object a line, with ``response_id``, ``turn``, ``call_id`` and
    ``trace_id`` where known (:mod:`app.telemetry.logs`)."""
    log_level: LogLevel = "info"
    """The level of every process's logs: the gateway's (gunicorn's own among them) and the
    workers' (``antwort worker --loglevel`` sets one worker's)."""

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_any_case(cls, value: object) -> object:
        """``WARNING`` as well as ``warning`` (Celery's and Python's spelling)."""
        return value.strip().lower() if isinstance(value, str) else value

    sim_port: int = 8090
    """Port of the simulator that ``antwort up`` starts when no model is configured."""
    mcp_servers_file: str | None = None
    """JSON file of configured MCP servers (label → URL or stdio command, headers, timeout,
    default approval); requests name them by ``server_label`` alone."""
    mcp_secret_key: str | None = None
    """Key that seals per-request MCP ``headers``/``authorization`` in the store; unset: one
    derived from the key in ``secrets_file`` (never a key kept in Redis)."""
    mcp_timeout_seconds: float = Field(default=30.0, gt=0)
    """Deadline of one MCP call or listing (a configured server may set its own)."""
    mcp_connect_timeout_seconds: float = Field(default=10.0, gt=0)
    """Deadline for connecting to an MCP server."""
    mcp_list_cache_seconds: float = Field(default=300.0, ge=0)
    """How long a worker reuses a server's tool listing (until ``tools/list_changed``)."""
    mcp_max_sessions: int = Field(default=100, ge=1)
    """MCP sessions a worker process keeps open (one per server and headers); past it, the
    least recently used idle one is closed."""
    mcp_idle_seconds: float = Field(default=300.0, gt=0)
    """An MCP session unused this long is closed (the next call connects again)."""

    # -- sandbox (tools.sandbox) and the built-in internal tools ---------------------------------
    sandbox_bwrap: str | None = None
    """Path of ``bwrap``; unset: found on ``PATH``."""
    sandbox_timeout_seconds: float = Field(default=30.0, gt=0)
    """Wall-clock limit of one sandbox run; the whole process tree is killed when it passes."""
    sandbox_cpu_seconds: int = Field(default=30, ge=1)
    """CPU seconds of each sandboxed process."""
    sandbox_memory_mb: int = Field(default=512, ge=64)
    """Address space of each sandboxed process."""
    sandbox_max_processes: int = Field(default=32, ge=4)
    """Processes and threads one sandbox run may have."""
    sandbox_file_size_mb: int = Field(default=32, ge=1)
    """Largest file sandboxed code may write."""
    sandbox_open_files: int = Field(default=64, ge=16)
    """Open files of each sandboxed process."""
    sandbox_work_dir_mb: int = Field(default=64, ge=1)
    """Size of a run's work directory (a tmpfs)."""
    sandbox_max_output_bytes: int = Field(default=64 * 1024, ge=1024)
    """stdout and stderr of a run are each cut here."""
    sandbox_max_files_mb: int = Field(default=8, ge=1)
    """Largest compressed work directory kept between the calls of a response chain."""
    sandbox_uid_base: int = Field(default=61000, ge=1000)
    """First of the unprivileged uids a root worker runs sandboxes as (one per running sandbox)."""
    sandbox_uid_count: int = Field(default=64, ge=1)
    """Sandboxes one host may run at once (uids from ``sandbox_uid_base``)."""
    sandbox_cgroup: str | None = None
    """A cgroup v2 directory delegated to the sandbox worker: each run gets a child cgroup capping
    all its processes together (``sandbox_memory_mb``, ``sandbox_max_processes``, one CPU).
    Unset: the worker finds a hierarchy itself (``sandbox_cgroup_auto``)."""
    sandbox_cgroup_auto: bool = True
    """With ``sandbox_cgroup`` unset, give each run a cgroup in the host's cgroup v2 or v1
    hierarchy when the worker can write it (``app.tools.sandbox.cgroup_host``); off: none."""
    sandbox_tools_file: str | None = None
    """JSON file of operator-declared sandboxed function tools (see ``app.tools.sandbox.tools``)."""
    fetch_allowed_hosts: str | None = None
    """Comma-separated hosts (``*.example.com`` for subdomains) the ``http_fetch`` tool may read."""
    fetch_max_bytes: int = Field(default=256 * 1024, ge=1024)
    """Largest body ``http_fetch`` reads."""

    @model_validator(mode="after")
    def _check_redis_urls(self) -> Settings:
        for url in (self.redis_url, self.broker_url):
            if url:
                parse_redis_url(url, sentinel_master=self.redis_sentinel_master)
        if isinstance(self.broker_redis, ClusterTarget):
            raise ValueError(
                "the Celery broker cannot be a Redis Cluster: set ANTWORT_BROKER_URL to a plain "
                "or Sentinel Redis (the store stays on the cluster)"
            )
        return self

    @property
    def store_shards(self) -> int:
        """Hash-tag shards of the store's keys: 1 on one Redis, more on a cluster."""
        return self.redis_cluster_shards if isinstance(self.store_redis, ClusterTarget) else 1

    @property
    def keys(self) -> Keys:
        """The store's keyspace (its prefix, and its shards on a cluster)."""
        return Keys(self.key_prefix, self.store_shards)

    @property
    def store_redis(self) -> RedisTarget | None:
        """Where the store lives (``redis_url``); ``None``: not configured."""
        if not self.redis_url:
            return None
        return parse_redis_url(self.redis_url, sentinel_master=self.redis_sentinel_master)

    @property
    def broker_redis(self) -> RedisTarget | None:
        """Where the Celery broker and result backend live (``broker_url``, else ``redis_url``)."""
        url = self.broker_url or self.redis_url
        if not url:
            return None
        return parse_redis_url(url, sentinel_master=self.redis_sentinel_master)

    @property
    def internal_tool_module_list(self) -> list[str]:
        """``internal_tool_modules`` as a list."""
        return _comma_list(self.internal_tool_modules)

    @property
    def fetch_allowed_host_list(self) -> list[str]:
        """``fetch_allowed_hosts`` as a list."""
        return [h.strip().lower() for h in (self.fetch_allowed_hosts or "").split(",") if h.strip()]

    @property
    def api_key_set(self) -> frozenset[str]:
        """The bearer keys of ``api_keys``, without their ``tenant:`` (empty: none)."""
        entries = (entry.partition(":") for entry in (self.api_keys or "").split(","))
        keys = (key if sep else tenant for tenant, sep, key in entries)
        return frozenset(key.strip() for key in keys if key.strip())

    tool_protocols: str | None = None
    """Comma-separated ``model=protocol`` pairs (``native`` or ``json``; ``*=json`` for every
    model): models listed ``json`` get the prompted JSON tool protocol instead of native tool
    calling. A request's ``metadata.antwort_tool_protocol`` overrides it."""

    @field_validator("tool_protocols")
    @classmethod
    def _check_tool_protocols(cls, value: str | None) -> str | None:
        for pair in (value or "").split(","):
            model, _, protocol = pair.strip().rpartition("=")
            if pair.strip() and (not model.strip() or protocol.strip() not in ("native", "json")):
                raise ValueError(f"expected model=native|json, got {pair.strip()!r}")
        return value

    @field_validator("llm_reasoning_efforts")
    @classmethod
    def _check_reasoning_efforts(cls, value: str) -> str:
        for effort in _comma_list(value):
            if effort not in REASONING_EFFORTS:
                raise ValueError(f"expected some of {', '.join(REASONING_EFFORTS)}, got {effort!r}")
        return value

    @property
    def reasoning_effort_list(self) -> tuple[str, ...]:
        """``llm_reasoning_efforts`` as a tuple, least effort first."""
        named = set(_comma_list(self.llm_reasoning_efforts))
        return tuple(effort for effort in REASONING_EFFORTS if effort in named)

    @property
    def tool_protocol_map(self) -> dict[str, str]:
        """``tool_protocols`` as model → protocol."""
        pairs = (p.strip().rpartition("=") for p in (self.tool_protocols or "").split(","))
        return {model.strip(): protocol.strip() for model, _, protocol in pairs if model.strip()}

    # -- WebSocket mode and compaction (issue 8) ----------------------------------------------
    websocket_max_seconds: float = Field(default=3600.0, gt=0)
    """Lifetime of one WebSocket connection; then ``websocket_connection_limit_reached``."""
    websocket_idle_seconds: float = Field(default=300.0, gt=0)
    """How long a WebSocket connection may wait for the client's next message (none of its
    responses running); then ``websocket_idle_timeout`` and a close frame. An idle socket holds
    one of the gateway's connections (``ANTWORT_GATEWAY_CONNECTIONS``) like a busy one."""
    websocket_deflate: bool = False
    """Compress WebSocket messages (permessage-deflate) when the client offers it. Events then
    cost a tenth of their bytes, but a connection that has carried a message holds its
    compressor for the rest of its life, idle or not: 10,000 WebSockets idle after a response
    each took the gateway to 1.71-1.76 GB with it, 0.72-0.74 GB without (simple-websocket gives
    the server no smaller window). Off, as SSE streams are: the offer is declined."""
    websocket_max_pending: int = Field(default=16, ge=1)
    """``response.create`` messages one WebSocket connection may have queued or running, all its
    lanes (``stream_id``) together; beyond that the gateway reads no more of its messages until
    one is done."""
    compaction_key: str | None = None
    """Secret that seals ``compaction`` items (any string; hashed to an AES-256 key). Unset: one
    derived from the key in ``secrets_file``."""
    secrets_file: str | None = None
    """File of the fleet's generated key (made, mode 0600, by the first process that needs it)
    for the secrets above left unset; ``antwort up`` puts it in its state directory. Unset too:
    what needs a secret is refused, for a key kept in Redis would open to a reader of Redis."""
