#!/usr/bin/env bash
# Starts a throw-away PostgreSQL server for the tests and prints the line to export:
#
#   eval "$(scripts/test-postgres.sh start)"   # sets GANTRY_TEST_POSTGRES_URL and GANTRY_TEST_POSTGRES_DIR
#   scripts/test-postgres.sh stop              # stops it and removes its files
#   scripts/test-postgres.sh stop --all        # stops every server it started (/tmp/gantry-pg.*)
#
# Installs Debian's postgresql package when no server binaries are found. The cluster lives
# in a temporary directory, listens on 127.0.0.1 only (a free port), trusts local
# connections, and belongs to the `postgres` user when run as root (initdb refuses root).
# Each test creates its own database in it.
set -euo pipefail

find_bin() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ]; then
      echo "$dir"
      return 0
    fi
  done
  if command -v initdb >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return 0
  fi
  return 1
}

case "${1:-}" in
start)
  if ! bin=$(find_bin); then
    echo "scripts/test-postgres.sh: installing postgresql" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    bin=$(find_bin)
  fi
  dir=$(mktemp -d /tmp/gantry-pg.XXXXXX)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 55432)
  as_owner=()
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$dir"
    as_owner=(runuser -u postgres --)
  fi
  "${as_owner[@]}" "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync --locale=C -E UTF8 >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
    start >&2 || { cat "$dir/server.log" >&2; exit 1; }
  echo "export GANTRY_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$port/postgres GANTRY_TEST_POSTGRES_DIR=$dir"
  ;;
stop)
  if [ "${2:-}" = --all ]; then
    dirs=(/tmp/gantry-pg.*)
    [ -e "${dirs[0]}" ] || exit 0
  else
    dir=${GANTRY_TEST_POSTGRES_DIR:-}
    if [ -z "$dir" ]; then
      found=$(find /tmp -maxdepth 1 -name 'gantry-pg.*' | wc -l)
      echo "scripts/test-postgres.sh: GANTRY_TEST_POSTGRES_DIR is not set (the environment start printed), nothing stopped; $found server director(y/ies) under /tmp/gantry-pg.*: \`stop --all\` stops them all" >&2
      exit 0
    fi
    dirs=("$dir")
  fi
  bin=$(find_bin)
  as_owner=()
  [ "$(id -u)" = 0 ] && as_owner=(runuser -u postgres --)
  for dir in "${dirs[@]}"; do
    [ -d "$dir" ] || continue
    if [ -d "$dir/data" ]; then
      "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
  done
  ;;
*)
  echo "usage: scripts/test-postgres.sh start | stop [--all]" >&2
  exit 2
  ;;
esac
