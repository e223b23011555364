# One image for every role of the fleet (gateway, workers, flower, simulator); compose.yaml picks
# the role with `command:`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# bubblewrap: the tools.sandbox worker runs code in bwrap namespaces (DESIGN.md, tool kinds).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /srv/antwort
COPY . .
# The project pinned by the lock; flower (pinned in the lock too) for the `flower` service.
RUN pip install -c requirements.lock . flower

# Non-root: also what makes RLIMIT_NPROC bind inside the sandbox (DESIGN.md, pitfalls).
RUN useradd --create-home --uid 10001 --user-group antwort \
    && mkdir -p /var/lib/antwort && chown antwort:antwort /var/lib/antwort  # ANTWORT_SECRETS_FILE
USER antwort

ENV ANTWORT_HOST=0.0.0.0 \
    ANTWORT_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request,os; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ANTWORT_PORT','8080'), timeout=2)"
CMD ["antwort", "gateway"]
