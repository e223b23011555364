"""The Celery wiring the gateway and the workers share.

``celery_app`` builds the app (queues, routes, delivery guarantees), ``routing`` names the tasks,
their queues and their ids, ``dispatch`` and ``jobs`` send work by task name (so no sender
imports task code), and ``publish`` writes the sends of turns and single tool calls. What runs
a task lives in ``workers/``; ``gateway/`` imports this package and never ``workers/``.
"""
