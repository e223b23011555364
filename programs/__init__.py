"""The programs around the engine, each behind a command of ``antwort``.

``cli`` (the command line), ``supervisor`` (``antwort up``: the whole fleet in the foreground),
``chat`` (``antwort chat``: the terminal client) and ``simulator`` (``antwort sim``: a model
stand-in). They import :mod:`app` and start the gateway and the workers as processes; nothing in
``app/``, ``gateway/`` or ``workers/`` imports them.
"""
