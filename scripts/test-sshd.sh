#!/usr/bin/env bash
# Makes an OpenSSH server binary available for the SSH connector's tests
# (crates/gantry-fleet: LocalSshd, tests/connector_*.rs):
#
#   scripts/test-sshd.sh install   # installs Debian's openssh-server when /usr/sbin/sshd is missing
#
# The tests start their own throw-away sshd processes on loopback (free ports, files in temp
# dirs); they never use a system sshd service. So the install keeps the package from starting
# one: a temporary policy-rc.d denies service starts while apt-get runs (Debian's documented
# mechanism), and the service is not enabled or started afterwards. Idempotent and quiet;
# prints the path of sshd on stdout.
set -euo pipefail

SSHD=/usr/sbin/sshd

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  else
    sudo "$@"
  fi
}

install_sshd() {
  if [ -x "$SSHD" ]; then
    echo "$SSHD"
    return 0
  fi
  local policy=/usr/sbin/policy-rc.d
  local own_policy=0
  if [ ! -e "$policy" ]; then
    # exit 101: "action forbidden by policy" — invoke-rc.d then starts nothing.
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    own_policy=1
  fi
  local status=0
  {
    as_root apt-get update -qq &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server
  } >/dev/null || status=$?
  if [ "$own_policy" -eq 1 ]; then
    as_root rm -f "$policy"
  fi
  if [ "$status" -ne 0 ]; then
    echo "test-sshd.sh: apt-get install openssh-server failed (exit $status)" >&2
    exit "$status"
  fi
  if [ ! -x "$SSHD" ]; then
    echo "test-sshd.sh: openssh-server is installed but $SSHD is missing" >&2
    exit 1
  fi
  echo "$SSHD"
}

case "${1:-}" in
install)
  install_sshd
  ;;
*)
  echo "usage: $0 install" >&2
  exit 2
  ;;
esac
