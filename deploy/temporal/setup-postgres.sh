#!/bin/sh
# Create and migrate Temporal's two databases. Every step is idempotent (an existing database is
# kept, setup-schema skips a versioned schema, update-schema applies only newer versions), so
# this runs on every `docker compose up`, and an image upgrade migrates the schema.
set -eu

HOST=postgres
PORT=5432
USER=temporal
SCHEMA=/etc/temporal/schema/postgresql/v12

# The password the secrets service generated (docker-compose.yml mounts its volume read-only);
# temporal-sql-tool reads it from SQL_PASSWORD.
[ -s "${SQL_PASSWORD_FILE:-}" ] || { echo "SQL_PASSWORD_FILE is unset or empty" >&2; exit 1; }
SQL_PASSWORD=$(cat "$SQL_PASSWORD_FILE")
export SQL_PASSWORD

echo "waiting for PostgreSQL at $HOST:$PORT"
tries=0
until nc -z "$HOST" "$PORT"; do
  tries=$((tries + 1))
  [ "$tries" -lt 60 ] || { echo "PostgreSQL not reachable after 60 s" >&2; exit 1; }
  sleep 1
done

for db in temporal temporal_visibility; do
  case "$db" in
    temporal) dir="$SCHEMA/temporal/versioned" ;;
    *) dir="$SCHEMA/visibility/versioned" ;;
  esac
  tool="temporal-sql-tool --plugin postgres12 --ep $HOST -p $PORT -u $USER --db $db"
  $tool create
  $tool setup-schema -v 0.0
  $tool update-schema -d "$dir"
done
echo "Temporal schema ready"
