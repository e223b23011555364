"""Observability of the engine: Prometheus metrics, OpenTelemetry spans, structured logs.

Every process records into the same module-level metrics (:mod:`app.telemetry.metrics`); how
they are exposed is the process's business (the gateway's ``/metrics`` in prometheus_client's
multiprocess mode, each worker's own HTTP port).
"""
