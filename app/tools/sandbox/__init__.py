"""The sandbox tool kind: model-written code in bubblewrap, on ``tools.sandbox`` workers.

- :mod:`.runner`: the isolation itself (namespaces, limits, timeouts) on the worker's side;
  :mod:`.inside` is the small program that runs inside the sandbox.
- :mod:`.tools`: ``code_interpreter`` and operator-declared sandboxed function tools.
- :mod:`.presenter`: ``code_interpreter_call`` items and their events.
- :mod:`.executor`: the ``sandbox`` kind's executor; containers' files live in Redis.
- :mod:`.kind`: the kind's spec (registered in :mod:`app.tools.registry`).
"""
