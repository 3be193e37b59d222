#!/usr/bin/env bash
# Runs the README's "A server and a runner" quick start from nothing: the commands of that
# section's ```sh block, taken from README.md at run time (so the two cannot drift), exactly
# as written, in a fresh HOME (a new ~/gantry-data) and a fresh git checkout whose
# .gitlab-ci.yml is committed on `main`, with the `gantry` binary to test first on PATH.
# The one change: the port 8080 becomes a free one, so tests running at once do not collide.
# It passes when the block has at most six commands and they all succeed — the last one,
# `gantry pipeline create … --watch`, exits 0 only when the pipeline succeeded.
#
#   scripts/test-quickstart.sh [GANTRY_BIN]    # default: ${CARGO_TARGET_DIR:-target}/debug/gantry
#
# The commands run in a process group of their own (the server and the runner are started
# in the background by them); the whole group is stopped at the end, by its id, whatever
# happened, and the temporary directory removed. The crate `gantry`'s test
# `server_cli::readme_quick_start_reaches_a_green_pipeline` runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

fail() {
  echo "scripts/test-quickstart.sh: $*" >&2
  exit 1
}

bin=${1:-${CARGO_TARGET_DIR:-target}/debug/gantry}
[ -x "$bin" ] || fail "no gantry binary at $bin: build it (cargo build -p gantry) or pass its path"
bin=$(realpath "$bin")

commands=$(awk '
  /^## A server and a runner/ { section = 1; next }
  section && /^## / { exit }
  section && /^```sh$/ { block = 1; next }
  block && /^```$/ { exit }
  block { print }
' README.md)
count=$(printf '%s\n' "$commands" | grep -cvE '^[[:space:]]*(#.*)?$' || true)
if [ "$count" -lt 1 ] || [ "$count" -gt 6 ]; then
  fail "README.md's \"A server and a runner\" block has $count commands; it must have 1 to 6"
fi
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
commands=${commands//127.0.0.1:8080/127.0.0.1:$port}

work=$(mktemp -d)
group=""
cleanup() {
  if [ -n "$group" ]; then
    kill -TERM -- "-$group" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 -- "-$group" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$group" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/home" "$work/project"
git -C "$work/project" init -q -b main
git -C "$work/project" config user.email quickstart@example.com
git -C "$work/project" config user.name "Quick start"
cat >"$work/project/.gitlab-ci.yml" <<'YAML'
stages: [build, test]
build:
  stage: build
  script:
    - echo "building $CI_PROJECT_NAME at $CI_COMMIT_SHORT_SHA"
test:
  stage: test
  script:
    - echo "testing on $CI_COMMIT_REF_NAME"
YAML
git -C "$work/project" add -A
git -C "$work/project" commit -q -m "a pipeline"

printf '%s\n' "$commands" >"$work/quickstart.sh"
echo "scripts/test-quickstart.sh: running README.md's $count commands (port $port):" >&2
sed 's/^/    /' "$work/quickstart.sh" >&2

# A process group of its own (setsid execs in the background child, not a group leader),
# so the server and runner the commands start stop with it.
(
  cd "$work/project"
  export HOME="$work/home" PATH="$(dirname "$bin"):$PATH"
  unset GANTRY_URL GANTRY_TOKEN GANTRY_RUNNER_CONFIG GANTRY_DATABASE_URL GANTRY_BLOBS_URL
  exec setsid timeout 300 bash -e "$work/quickstart.sh"
) &
group=$!
status=0
wait "$group" || status=$?
cd "$root"
if [ "$status" != 0 ]; then
  fail "the quick start failed (exit status $status)"
fi
echo "scripts/test-quickstart.sh: the quick start reached a green pipeline" >&2
