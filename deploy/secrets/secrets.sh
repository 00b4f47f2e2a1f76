#!/bin/sh
# The stack's secrets, made at first start by the one-shot `secrets` service of
# docker-compose.yml. They go into named volumes, one per secret, never into the checkout; no
# value is ever printed or logged (this script names files and key ids only; the one exception
# is the new reviewer token add-inbox-reviewer prints, on request). Each volume is mounted
# read-only into the services that need it and into no other:
#
#   payload-keys/keys                payload key ring, PAYLOAD_KEYS_FILE: worker, codec-server
#   codec-token/token                codec server token, CODEC_SERVER_TOKEN_FILE: codec-server,
#                                    temporal-ui (inside its codec endpoint)
#   postgres-password/password       PostgreSQL password: postgres, temporal-schema, temporal
#   grafana-admin-password/password  Grafana's first admin password: grafana
#   inbox-key/key                    the review inbox's signing key, INBOX_SIGNING_KEY_FILE: inbox
#   review-public-keys/keys          its public half (`inbox:KEY:*`), REVIEW_PUBLIC_KEYS_FILE: worker
#   inbox-tokens/tokens              reviewers' token hashes, INBOX_TOKENS_FILE: inbox
#   capacity-store-url/url           the capacity store's URL with its Redis password,
#                                    redis://:PASSWORD@redis:6379/0, CAPACITY_STORE_URL_FILE: worker
#   redis-acl/users.acl              Redis's ACL: the store's user with the SHA-256 of that
#                                    password (derived from the URL, never the password), and
#                                    the healthcheck's PING-only user: redis
#
# Commands (the service's entrypoint is this script; docs/docker.md shows the compose lines):
#   init                 create whatever is missing; an existing secret is never replaced
#   rotate-payload-key   add a payload key kN to the ring and print its id (never the key)
#   import-payload-keys  restore a key ring read from standard input into an empty volume
#   new-codec-token      replace the codec server token
#   add-inbox-reviewer NAME     add a login token for NAME to the review inbox and print that
#                               token once (the one value this script prints, on request: the
#                               operator hands it to the reviewer; only its hash is kept)
#   remove-inbox-reviewer NAME  remove NAME's tokens (the inbox ends their sessions at once)
#   new-redis-password   replace the capacity store's password (both files); restart redis and
#                        the worker to use it
set -eu
umask 077

ROOT=${SECRETS_ROOT:-/secrets}
PYTHON=${PYTHON:-python}
# uid:gid of the process that reads each file; root (postgres's entrypoint) reads anything. If an
# image changes its user, that service stops with "permission denied" on the file: it fails
# closed instead of widening the mode.
PAYLOAD_KEYS_OWNER=${PAYLOAD_KEYS_OWNER:-10001:10001} # the project image (Dockerfile USER)
CODEC_TOKEN_OWNER=${CODEC_TOKEN_OWNER:-10001:1000}    # codec-server; group: temporalio/ui's user
POSTGRES_OWNER=${POSTGRES_OWNER:-1000:1000}           # temporalio/server and admin-tools' user
GRAFANA_OWNER=${GRAFANA_OWNER:-472:0}                 # grafana/grafana's user
INBOX_OWNER=${INBOX_OWNER:-10001:10001}               # the project image: inbox and worker
CAPACITY_STORE_OWNER=${CAPACITY_STORE_OWNER:-10001:10001} # the project image: worker
REDIS_OWNER=${REDIS_OWNER:-999:1000}                  # redis:7.4-alpine's user (docker-compose.yml)
LEDGER_DB_OWNER=${LEDGER_DB_OWNER:-0:0}               # the ledger-db job (root)
LEDGER_OWNER=${LEDGER_OWNER:-10001:10001}             # the project image: the ledger follower

KEYS=$ROOT/payload-keys/keys
TOKEN=$ROOT/codec-token/token
INBOX_KEY=$ROOT/inbox-key/key
INBOX_TOKENS=$ROOT/inbox-tokens/tokens
STORE_URL=$ROOT/capacity-store-url/url
REDIS_ACL=$ROOT/redis-acl/users.acl
LEDGER_WRITER_PASSWORD=$ROOT/ledger-writer-password/password
LEDGER_URL=$ROOT/ledger-url/url
LEDGER_READER_PASSWORD=$ROOT/ledger-reader-password/password

tmp=
trap 'rm -f -- ${tmp:+"$tmp"}' EXIT

say() { printf 'secrets: %s\n' "$*" >&2; }
fail() {
  say "$*"
  exit 1
}

random_token() { "$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(32))'; }

# payload_key_entry ID: a fresh key ring entry, ID:KEY (the value of the PAYLOAD_KEYS line).
payload_key_entry() {
  "$PYTHON" -m aiorch keys payload --id "$1" | sed -n 's/^PAYLOAD_KEYS=//p'
}

first_payload_key() { payload_key_entry k1; }

# new_temp FILE: a fresh temporary file next to FILE (same volume, so `mv` is atomic).
new_temp() {
  dir=$(dirname "$1")
  [ -d "$dir" ] || fail "$dir is not mounted (is its volume missing from docker-compose.yml?)"
  tmp=$(mktemp "$dir/.new.XXXXXX")
}

# protect FILE OWNER MODE: the file readable by its consumer only; its directory traversable.
protect() {
  chown "$2" "$1"
  chmod "$3" "$1"
  chmod 0755 "$(dirname "$1")"
}

# install FILE OWNER MODE: move the temporary file into place.
install_temp() {
  [ -s "$tmp" ] || fail "generating ${1#"$ROOT"/} produced nothing"
  protect "$tmp" "$2" "$3"
  mv -f "$tmp" "$1"
  tmp=
}

# ensure FILE OWNER MODE COMMAND...: create FILE from COMMAND's output unless it exists.
ensure() {
  file=$1 owner=$2 mode=$3
  shift 3
  if [ -s "$file" ]; then
    say "kept ${file#"$ROOT"/}"
  else
    new_temp "$file"
    "$@" >"$tmp"
    install_temp "$file" "$owner" "$mode"
    say "created ${file#"$ROOT"/}"
  fi
  protect "$file" "$owner" "$mode"
}

# derive FILE OWNER MODE COMMAND...: FILE is COMMAND's output, rewritten whenever it differs. For
# files made from another secret that hold none themselves, so they always match their source.
derive() {
  file=$1 owner=$2 mode=$3
  shift 3
  new_temp "$file"
  "$@" >"$tmp"
  if [ -s "$file" ] && [ "$(cat "$tmp")" = "$(cat "$file")" ]; then
    rm -f -- "$tmp"
    tmp=
    say "kept ${file#"$ROOT"/}"
  elif [ -s "$file" ]; then
    install_temp "$file" "$owner" "$mode"
    say "rewrote ${file#"$ROOT"/} to match its source; restart the service that reads it"
  else
    install_temp "$file" "$owner" "$mode"
    say "created ${file#"$ROOT"/}"
  fi
  protect "$file" "$owner" "$mode"
}

# The capacity store's URL with a new random password (printf is the shell's own: the password
# is never an argument of another process).
new_store_url() { printf 'redis://:%s@redis:6379/0\n' "$(random_token)"; }

# Redis's ACL, from the URL. The store's user: the SHA-256 of its password (never the password),
# the store's keys only (aiorch:*), and every command but the @dangerous ones (CONFIG, DEBUG,
# MODULE, FLUSHALL, KEYS, MONITOR, SHUTDOWN, ...). And the healthcheck's user: no password, and
# nothing but PING, so the password never has to reach the redis container. An error names the
# file only.
REDIS_ACL_ENTRY='
import hashlib
import sys
from urllib.parse import unquote, urlsplit
with open(sys.argv[1], encoding="utf-8") as file:
    password = urlsplit(file.read().strip()).password
if not password:
    sys.exit("secrets: capacity-store-url/url holds no password")
digest = hashlib.sha256(unquote(password).encode()).hexdigest()
print(f"user default on #{digest} resetchannels ~aiorch:* +@all -@dangerous")
print("user healthcheck on nopass resetchannels -@all +ping")
'
redis_acl() { "$PYTHON" -c "$REDIS_ACL_ENTRY" "$STORE_URL"; }

# The follower's URL, from the writer's password (cat reads the file; printf is the shell's own).
ledger_url() {
  printf 'postgresql://ledger_writer:%s@postgres:5432/ledger\n' "$(cat "$LEDGER_WRITER_PASSWORD")"
}

# The inbox's Ed25519 key (it signs reviews for the reviewers it authenticates), and the entry
# that lets the workers verify it: always derived from the key, never made on its own.
new_inbox_key() { "$PYTHON" -c 'from aiorch.ops.signing import SigningKey
print(SigningKey.generate("inbox").private_entry())'; }
inbox_public_entry() { "$PYTHON" -c 'import sys
from aiorch.ops.signing import SigningKey
key = SigningKey.parse(open(sys.argv[1], encoding="utf-8").read(), source="inbox-key/key")
print(key.public_entry(None))' "$INBOX_KEY"; }
empty_tokens() { printf '# review inbox tokens: secrets.sh add-inbox-reviewer NAME\n'; }

init() {
  ensure "$KEYS" "$PAYLOAD_KEYS_OWNER" 0400 first_payload_key
  ensure "$TOKEN" "$CODEC_TOKEN_OWNER" 0440 random_token
  ensure "$ROOT/postgres-password/password" "$POSTGRES_OWNER" 0400 random_token
  ensure "$ROOT/grafana-admin-password/password" "$GRAFANA_OWNER" 0400 random_token
  ensure "$INBOX_KEY" "$INBOX_OWNER" 0400 new_inbox_key
  ensure "$ROOT/review-public-keys/keys" "$INBOX_OWNER" 0400 inbox_public_entry
  ensure "$INBOX_TOKENS" "$INBOX_OWNER" 0400 empty_tokens
  ensure "$STORE_URL" "$CAPACITY_STORE_OWNER" 0400 new_store_url
  derive "$REDIS_ACL" "$REDIS_OWNER" 0400 redis_acl
  ensure "$LEDGER_WRITER_PASSWORD" "$LEDGER_DB_OWNER" 0400 random_token
  derive "$LEDGER_URL" "$LEDGER_OWNER" 0400 ledger_url
  ensure "$LEDGER_READER_PASSWORD" "$GRAFANA_OWNER" 0400 random_token
}

# Prints "TOKEN" then the tokens-file line for the name in $1.
NEW_INBOX_TOKEN='
import sys
from aiorch.ops.inbox.auth import new_token
from aiorch_runtime.config import ConfigError
try:
    token, line = new_token(sys.argv[1])
except ConfigError as err:
    sys.exit(f"secrets: {err}")
print(token)
print(line)
'

add_inbox_reviewer() {
  [ -n "${1:-}" ] || fail "usage: secrets.sh add-inbox-reviewer NAME"
  [ -s "$INBOX_TOKENS" ] || fail "no inbox tokens yet: start the stack once (docker compose up) first"
  made=$("$PYTHON" -c "$NEW_INBOX_TOKEN" "$1")
  new_temp "$INBOX_TOKENS"
  cat "$INBOX_TOKENS" >"$tmp"
  printf '%s\n' "$made" | sed -n 2p >>"$tmp"
  install_temp "$INBOX_TOKENS" "$INBOX_OWNER" 0400
  say "added a review inbox token for $1; it follows, once: give it to them (only its hash is kept)"
  printf '%s\n' "$made" | sed -n 1p
}

remove_inbox_reviewer() {
  [ -n "${1:-}" ] || fail "usage: secrets.sh remove-inbox-reviewer NAME"
  [ -s "$INBOX_TOKENS" ] || fail "no inbox tokens yet"
  new_temp "$INBOX_TOKENS"
  # Whole-line match on the name (as a fixed string), so no other reviewer's line can go.
  awk -v name="$1" 'index($0, name ":sha256:") != 1 || length($0) != length(name) + 72' \
    "$INBOX_TOKENS" >"$tmp"
  removed=$(($(wc -l <"$INBOX_TOKENS") - $(wc -l <"$tmp")))
  install_temp "$INBOX_TOKENS" "$INBOX_OWNER" 0400
  say "removed $removed review inbox token(s) of $1; their sessions end at their next request"
}

rotate_payload_key() {
  [ -s "$KEYS" ] || fail "no key ring yet: start the stack once (docker compose up) first"
  last=$(tr ',' '\n' <"$KEYS" | sed -n 's/^[[:space:]]*k\([0-9][0-9]*\)[[:space:]]*:.*/\1/p' |
    sort -n | tail -n 1)
  id=k$((${last:-0} + 1))
  entry=$(payload_key_entry "$id")
  new_temp "$KEYS"
  cat "$KEYS" >"$tmp"
  printf '\n%s\n' "$entry" >>"$tmp"
  install_temp "$KEYS" "$PAYLOAD_KEYS_OWNER" 0400
  say "added payload key $id; the older keys stay, so older histories still decode"
  say "next: set PAYLOAD_KEY_ID=$id for worker and codec-server and recreate them"
  printf '%s\n' "$id"
}

# Parses the ring with the codec's own parser: one line on error, never key material.
CHECK_RING='
import sys
from aiorch_runtime.codec import KeyRing
from aiorch_runtime.config import ConfigError
spec = open(sys.argv[1], encoding="utf-8").read()
entries = [e.strip() for e in spec.replace(",", "\n").splitlines()]
ids = [e.split(":", 1)[0].strip() for e in entries if e and not e.startswith("#")]
try:
    KeyRing.parse(spec, ids[0] if ids else None, source="the imported key ring")
except ConfigError as err:
    sys.exit(f"secrets: {err}")
print(" ".join(ids))
'

import_payload_keys() {
  [ ! -s "$KEYS" ] || fail "a key ring already exists; import only into an empty payload-keys volume"
  new_temp "$KEYS"
  cat >"$tmp"
  ids=$("$PYTHON" -c "$CHECK_RING" "$tmp")
  install_temp "$KEYS" "$PAYLOAD_KEYS_OWNER" 0400
  say "imported payload keys: $ids (with more than one, set PAYLOAD_KEY_ID)"
}

new_codec_token() {
  new_temp "$TOKEN"
  random_token >"$tmp"
  install_temp "$TOKEN" "$CODEC_TOKEN_OWNER" 0440
  say "replaced codec-token/token; recreate codec-server and temporal-ui to use it"
}

new_redis_password() {
  new_temp "$STORE_URL"
  new_store_url >"$tmp"
  install_temp "$STORE_URL" "$CAPACITY_STORE_OWNER" 0400
  say "replaced capacity-store-url/url"
  derive "$REDIS_ACL" "$REDIS_OWNER" 0400 redis_acl
  say "restart both to use the new password: docker compose restart redis worker"
}

case ${1:-init} in
init) init ;;
rotate-payload-key) rotate_payload_key ;;
import-payload-keys) import_payload_keys ;;
new-codec-token) new_codec_token ;;
add-inbox-reviewer) add_inbox_reviewer "${2:-}" ;;
remove-inbox-reviewer) remove_inbox_reviewer "${2:-}" ;;
new-redis-password) new_redis_password ;;
*) fail "usage: secrets.sh [init | rotate-payload-key | import-payload-keys | new-codec-token | add-inbox-reviewer NAME | remove-inbox-reviewer NAME | new-redis-password]" ;;
esac
