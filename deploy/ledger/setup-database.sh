#!/bin/sh
# Create the run ledger's database on the stack's PostgreSQL, and its two roles: ledger_writer,
# which owns the database (the follower's migrations create its tables), and ledger_reader,
# which may only read them (Grafana's ledger datasource). Every step is idempotent and the
# passwords are set again from the secret files each time, so this runs on every
# `docker compose up`, and a password the secrets job replaced takes effect.
#
# Connects with the standard libpq variables (PGHOST, PGPORT, PGUSER: a superuser) and the
# password in POSTGRES_PASSWORD_FILE; the roles' passwords are in LEDGER_WRITER_PASSWORD_FILE
# and LEDGER_READER_PASSWORD_FILE. psql reads each file itself (\set NAME `cat FILE`), so no
# password is ever an argument of a process or part of the script's text.
set -eu

for variable in POSTGRES_PASSWORD_FILE LEDGER_WRITER_PASSWORD_FILE LEDGER_READER_PASSWORD_FILE; do
  eval "file=\${$variable:-}"
  [ -s "$file" ] || { echo "$variable is unset, or its file is missing or empty" >&2; exit 1; }
done
PGPASSWORD=$(cat "$POSTGRES_PASSWORD_FILE")
export PGPASSWORD
export PGDATABASE=postgres

echo "waiting for PostgreSQL at ${PGHOST:-postgres}:${PGPORT:-5432}"
tries=0
until pg_isready -q; do
  tries=$((tries + 1))
  [ "$tries" -lt 60 ] || { echo "PostgreSQL not ready after 60 s" >&2; exit 1; }
  sleep 1
done

psql --no-psqlrc --quiet --set ON_ERROR_STOP=1 <<'SQL'
-- The statements below carry passwords: keep them out of the server's log, even on an error.
SET log_statement = 'none';
SET log_min_error_statement = 'panic';

SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger_writer') AS missing \gset
\if :missing
CREATE ROLE ledger_writer LOGIN;
\endif
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger_reader') AS missing \gset
\if :missing
CREATE ROLE ledger_reader LOGIN;
\endif
\set password `cat "$LEDGER_WRITER_PASSWORD_FILE"`
ALTER ROLE ledger_writer WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'password';
\set password `cat "$LEDGER_READER_PASSWORD_FILE"`
ALTER ROLE ledger_reader WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'password';
\unset password
-- Every session of the reader is read-only, and a dashboard's query cannot hold the server
-- that Temporal runs on for long.
ALTER ROLE ledger_reader SET default_transaction_read_only = on;
ALTER ROLE ledger_reader SET statement_timeout = '30s';

SELECT NOT EXISTS (SELECT FROM pg_database WHERE datname = 'ledger') AS missing \gset
\if :missing
CREATE DATABASE ledger OWNER ledger_writer;
\endif
-- Nobody else connects or makes temporary tables; the reader connects.
REVOKE ALL ON DATABASE ledger FROM PUBLIC;
GRANT CONNECT ON DATABASE ledger TO ledger_reader;

\connect ledger
-- The public schema belongs to the database's owner (PostgreSQL 15 and later), so the writer
-- creates tables there and nobody else may: the reader gets SELECT on the tables that exist,
-- and, by default privileges, on every table the writer's later migrations create.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO ledger_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO ledger_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE ledger_writer IN SCHEMA public
  GRANT SELECT ON TABLES TO ledger_reader;
SQL
echo "ledger database ready"
