"""gunicorn settings of the gateway: gevent workers that hold thousands of SSE streams."""

import os

from gevent import monkey

monkey.patch_all()  # before anything imports ssl or sockets (gevent/gevent#1016)

worker_class = "gateway.worker.EdgeWorker"  # gevent's, with the edge bounded
workers = int(os.environ.get("ANTWORT_GATEWAY_WORKERS", "1"))
worker_connections = int(os.environ.get("ANTWORT_GATEWAY_CONNECTIONS", "4000"))
bind = f"{os.environ.get('ANTWORT_HOST', '127.0.0.1')}:{os.environ.get('ANTWORT_PORT', '8080')}"
keepalive = 75  # a keep-alive connection idles at most ANTWORT_HEADER_TIMEOUT_SECONDS (worker)
timeout = 60  # gevent workers heartbeat between requests; long SSE streams are not cut by this
graceful_timeout = 10
accesslog = None
errorlog = "-"
loglevel = os.environ.get("ANTWORT_LOG_LEVEL", "info")
