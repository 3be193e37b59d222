#!/usr/bin/env bash
# Starts a throw-away S3-compatible server for the tests (moto's, from PyPI) and prints the
# line to export:
#
#   eval "$(scripts/test-s3.sh start)"   # sets GANTRY_TEST_S3_URL, the AWS_* variables, GANTRY_TEST_S3_PID
#   scripts/test-s3.sh stop              # stops it
#   scripts/test-s3.sh stop --all        # stops every server it started (/tmp/gantry-s3.*.pid)
#
# moto is installed once into a virtual environment under the target directory
# ($CARGO_TARGET_DIR or target/moto-venv). The server listens on 127.0.0.1 (a free port),
# keeps objects in memory and has one bucket, `gantry-test`; each test uses a prefix of
# its own in it.
set -euo pipefail
cd "$(dirname "$0")/.."

MOTO_VERSION=5.2.5

case "${1:-}" in
start)
  venv="${CARGO_TARGET_DIR:-target}/moto-venv"
  if [ ! -x "$venv/bin/moto_server" ]; then
    echo "scripts/test-s3.sh: installing moto $MOTO_VERSION into $venv" >&2
    if ! python3 -m venv "$venv" >&2; then
      apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
      python3 -m venv "$venv" >&2
    fi
    "$venv/bin/pip" install -q "moto[s3]==$MOTO_VERSION" flask flask-cors >&2
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  log=$(mktemp /tmp/gantry-s3.XXXXXX.log)
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
  pid=$!
  echo "$pid" >"${log%.log}.pid"
  for _ in $(seq 1 100); do
    if curl -s -o /dev/null -X PUT "http://127.0.0.1:$port/gantry-test"; then
      break
    fi
    sleep 0.1
  done
  curl -sf -o /dev/null "http://127.0.0.1:$port/gantry-test" || { cat "$log" >&2; exit 1; }
  echo "export GANTRY_TEST_S3_URL=s3://gantry-test GANTRY_TEST_S3_PID=$pid" \
    "AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ALLOW_HTTP=true AWS_REGION=us-east-1" \
    "AWS_ACCESS_KEY_ID=gantry-test AWS_SECRET_ACCESS_KEY=gantry-test"
  ;;
stop)
  if [ "${2:-}" = --all ]; then
    for file in /tmp/gantry-s3.*.pid; do
      [ -e "$file" ] || continue
      pid=$(cat "$file")
      # Only a moto server: the pid may have been reused since.
      if grep -q moto_server "/proc/$pid/cmdline" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
      fi
      rm -f "$file" "${file%.pid}.log"
    done
    exit 0
  fi
  pid=${GANTRY_TEST_S3_PID:-}
  if [ -z "$pid" ]; then
    echo "scripts/test-s3.sh: GANTRY_TEST_S3_PID is not set (the environment start printed), nothing stopped; \`stop --all\` stops every server this script started" >&2
    exit 0
  fi
  kill "$pid" 2>/dev/null || true
  for file in /tmp/gantry-s3.*.pid; do
    if [ "$(cat "$file" 2>/dev/null)" = "$pid" ]; then
      rm -f "$file" "${file%.pid}.log"
    fi
  done
  ;;
*)
  echo "usage: scripts/test-s3.sh start | stop [--all]" >&2
  exit 2
  ;;
esac
