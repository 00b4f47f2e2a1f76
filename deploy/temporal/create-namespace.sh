#!/bin/sh
# Create the namespace and register the search attributes the worker upserts, the way a
# deployment does before any worker starts (the worker also registers missing ones at start).
# Retries in-process: compose's service_completed_successfully reads the first exit code.
set -eu

NAMESPACE=${NAMESPACE:-default}

# Run "$@" until it succeeds, at most 60 times 2 s apart.
retry() {
  tries=0
  until "$@"; do
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || { echo "gave up: $*" >&2; exit 1; }
    sleep 2
  done
}

ensure_namespace() {
  temporal operator namespace describe --namespace "$NAMESPACE" >/dev/null 2>&1 ||
    temporal operator namespace create --namespace "$NAMESPACE" --retention 168h
}

# A new namespace reaches the server's cache a few seconds after it is created, so listing
# can fail at first; hence the retry around the whole step.
ensure_search_attributes() {
  existing=$(temporal operator search-attribute list --namespace "$NAMESPACE") || return 1
  for pair in AiState:Keyword AiStateSince:Datetime AiReviewRound:Int AiPipelineVersion:Keyword; do
    name=${pair%%:*}
    kind=${pair#*:}
    if ! printf '%s\n' "$existing" | grep -qw "$name"; then
      temporal operator search-attribute create --namespace "$NAMESPACE" \
        --name "$name" --type "$kind" || return 1
    fi
  done
}

# The CLI reads TEMPORAL_ADDRESS from the environment.
echo "waiting for Temporal at ${TEMPORAL_ADDRESS}"
retry temporal operator cluster health
retry ensure_namespace
retry ensure_search_attributes
echo "namespace $NAMESPACE ready"
