# The image for the worker (`python worker.py`, the default) and the LLM simulator
# (`python -m aiorch.devstack.llm_simulator`). Runtime dependencies only, installed from the
# hash-locked requirements/runtime.txt (no dev servers, no test tools), so a build today and a
# build next month install the same bytes; a package whose hash does not match fails the build.
# Every install is --no-deps: the locks are complete, so no pip resolves anything (an old pip's
# resolver looks at the registry's newest releases even when every version is pinned).
FROM python:3.11.13-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Dependencies first, so a code change reuses this layer.
COPY requirements ./requirements
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-deps --require-hashes -r requirements/runtime.txt \
    && python -m venv /opt/build \
    && /opt/build/bin/pip install --no-deps --require-hashes -r requirements/build.txt
COPY pyproject.toml README.md ./
COPY workflows ./workflows
COPY activities ./activities
COPY aiorch ./aiorch
COPY aiorch_runtime ./aiorch_runtime
COPY worker.py starter.py ./
# The project itself: built with the locked backend, installed without resolving anything.
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
    && /opt/venv/bin/pip install --no-deps /wheels/*.whl


FROM python:3.11.13-slim-bookworm

# A container's own interfaces: the collector scrapes the metrics and the orchestrator probes
# the health endpoints from outside it (the worker's defaults are loopback).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    METRICS_HOST=0.0.0.0 \
    HEALTH_HOST=0.0.0.0

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /app --shell /usr/sbin/nologin app \
    && install -d -o app -g app /app /app/.data

# Only the runtime venv: the build venv and the wheel stay in the build stage.
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# The entry points run as scripts from here; the packages they import are in the venv.
COPY --chown=app:app worker.py starter.py ./

USER 10001:10001

# 8700: the LLM simulator; 9464: the worker's Prometheus endpoint (METRICS_PORT); 9465: its
# liveness and readiness probes (HEALTH_PORT: /healthz, /readyz).
EXPOSE 8700 9464 9465
CMD ["python", "worker.py"]
