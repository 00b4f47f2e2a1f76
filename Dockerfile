# The image for the worker (`python worker.py`, the default) and the LLM simulator
# (`python -m aiorch.devstack.llm_simulator`). Runtime dependencies only: no dev extras.
FROM python:3.11.13-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY workflows ./workflows
COPY activities ./activities
COPY aiorch ./aiorch
COPY worker.py starter.py ./
# A venv copied whole into the final stage, so no build leftovers ship.
RUN python -m venv /opt/venv && /opt/venv/bin/pip install .


FROM python:3.11.13-slim-bookworm

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /app --shell /usr/sbin/nologin app \
    && install -d -o app -g app /app

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# The entry points run as scripts from here; the packages they import are in the venv.
COPY --chown=app:app worker.py starter.py ./

USER 10001:10001

# 8700: the LLM simulator; 9464: the worker's Prometheus endpoint (METRICS_PORT).
EXPOSE 8700 9464
CMD ["python", "worker.py"]
