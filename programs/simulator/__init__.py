"""The model simulator: a deterministic OpenAI-compatible Chat Completions server.

Used by tests, the quickstart and the benchmarks when no real model is configured. It is not a
model: its answers follow the rules documented in :mod:`programs.simulator.behaviour`.
"""

from programs.simulator.behaviour import SimConfig
from programs.simulator.server import make_server, serve

__all__ = ["SimConfig", "make_server", "serve"]
