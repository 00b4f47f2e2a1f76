#!/bin/sh
# Run a command with environment variables read from secret files, for images that take a
# secret only as a variable (temporalio/server's POSTGRES_PWD) or need one inside a value
# (temporalio/ui's TEMPORAL_CODEC_ENDPOINT, whose path carries the codec server token):
#
#   with-secrets.sh NAME=FILE... NAME+=FILE... -- COMMAND [ARG...]
#
# NAME=FILE sets NAME to the file's content; NAME+=FILE appends it to NAME's current value.
# The variables exist only in this process and COMMAND, not in the container's configuration
# (`docker inspect`). A missing, empty or unreadable file stops here with one line naming the
# file; a value is never printed.
set -eu

fail() {
  printf 'with-secrets: %s\n' "$*" >&2
  exit 1
}

while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  spec=$1
  shift
  case $spec in
  *+=*) name=${spec%%+=*} file=${spec#*+=} append=yes ;;
  *=*) name=${spec%%=*} file=${spec#*=} append= ;;
  *) fail "expected NAME=FILE or NAME+=FILE, got: $spec" ;;
  esac
  case $name in
  '' | [!A-Za-z_]* | *[!A-Za-z0-9_]*) fail "not a variable name: $name" ;;
  esac
  if [ ! -r "$file" ] || [ ! -s "$file" ]; then
    fail "$file is missing, empty or unreadable (the secrets service creates it)"
  fi
  value=$(cat "$file")
  if [ -n "$append" ]; then
    eval "value=\${$name-}\$value"
  fi
  export "$name=$value"
done

[ "${1-}" = "--" ] || fail "usage: with-secrets.sh NAME=FILE... -- COMMAND [ARG...]"
shift
[ $# -gt 0 ] || fail "no command after --"
exec "$@"
