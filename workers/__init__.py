"""The Celery workers: each runs turns or tool calls from its queues (``workers.main``).

Like ``gateway/__init__``, this file imports ``app`` before anything of the workers' imports
redis: that settles ``ANTWORT_HIREDIS`` (``app/__init__``) for ``workers.main``, whatever it
imports first.
"""

import app  # noqa: F401 - first, before anything imports redis (ANTWORT_HIREDIS, app/__init__)
