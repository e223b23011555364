"""The sandbox tool kind: model-written code in bubblewrap, on ``tools.sandbox`` workers.

- :mod:`.runner`: the isolation itself (namespaces, limits, timeouts) on the worker's side;
  :mod:`.inside` is the small program that runs inside the sandbox.
- :mod:`.tools`: ``code_interpreter`` and operator-declared sandboxed function tools.
- :mod:`.presenter`: ``code_interpreter_call`` items and their events (registered here).
- :mod:`.executor`: the ``sandbox`` kind's executor; containers' files live in Redis.
"""

from app.tools import presenters
from app.tools.base import ToolKind
from app.tools.sandbox.presenter import SandboxPresenter

presenters.register(ToolKind.SANDBOX, SandboxPresenter())
