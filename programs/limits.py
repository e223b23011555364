"""The gateway's open-files limit: one descriptor per connection it holds, and some to spare.

A gevent gateway holds every SSE stream and WebSocket as an open socket; a process that reaches
its soft ``RLIMIT_NOFILE`` refuses the next connection (``EMFILE``). ``antwort gateway`` raises
the soft limit to the hard one (which needs no privilege) before it hands over to gunicorn
(``exec`` keeps the limits), and says so when even the hard limit is below what the configured
connections need.
"""

from __future__ import annotations

import logging
import resource

from app.config import Settings

logger = logging.getLogger(__name__)

SPARE_FILES = 64
"""Descriptors a gateway process needs beside its connections: listening socket, logs, imports."""


def files_needed(settings: Settings) -> int:
    """Descriptors one gateway process needs: its client connections, its Redis pool, spares."""
    return settings.gateway_connections + settings.redis_max_connections + SPARE_FILES


def raise_open_files(needed: int) -> int:
    """Raise the soft open-files limit to the hard limit; returns the soft limit now.

    Logs a warning when the limit stays below ``needed`` (the hard limit is lower, or the raise
    was refused).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open-files limit to %d: %s", hard, exc)
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < needed:
        logger.warning(
            "open-files limit %d is below the %d the gateway's connections need "
            "(ANTWORT_GATEWAY_CONNECTIONS + ANTWORT_REDIS_MAX_CONNECTIONS + %d): raise the hard "
            "limit (ulimit -Hn, LimitNOFILE=, --ulimit nofile=) or lower the connections",
            soft,
            needed,
            SPARE_FILES,
        )
    return int(soft)
