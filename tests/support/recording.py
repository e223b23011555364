"""The model simulator with a recorder: what the model was sent, as it arrived over HTTP.

The simulator answers as it always does; the recorder keeps the Chat Completions bodies of the
requests a test watches for (those that contain its marker anywhere), so tests of one session
share one server without seeing each other's requests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from programs.simulator import SimConfig
from programs.simulator.server import SimulatorServer, _Handler
from tests.support.serving import serving


class Recorder:
    """The requests whose body contains a watched marker, per marker, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[str, list[dict[str, Any]]] = {}

    def watch(self, marker: str) -> list[dict[str, Any]]:
        """The list the requests that mention ``marker`` will be appended to."""
        with self._lock:
            return self._watched.setdefault(marker, [])

    def record(self, body: Mapping[str, Any]) -> None:
        """Keep ``body`` for every marker it contains."""
        text = json.dumps(body)
        with self._lock:
            for marker, seen in self._watched.items():
                if marker in text:
                    seen.append(json.loads(text))


class _RecordingHandler(_Handler):
    server: RecordingSimulator

    def _complete(self, request: Mapping[str, Any]) -> None:
        self.server.recorder.record(request)
        super()._complete(request)


class RecordingSimulator(SimulatorServer):
    """The simulator, recording the request bodies its recorder watches for."""

    def __init__(self, address: tuple[str, int], config: SimConfig) -> None:
        super().__init__(address, config)
        self.RequestHandlerClass = _RecordingHandler
        self.recorder = Recorder()


@contextmanager
def recording_simulator(config: SimConfig | None = None) -> Iterator[RecordingSimulator]:
    """A recording simulator in a thread on a free loopback port; stopped on exit."""
    server = RecordingSimulator(("127.0.0.1", 0), config or SimConfig())
    with serving(server):
        yield server


def base_url(server: RecordingSimulator) -> str:
    """The simulator's OpenAI base URL."""
    return f"http://127.0.0.1:{server.server_address[1]}/v1"
