#!/usr/bin/env bash
# Runs GitLab's own clients from PyPI, unpatched, against a running `gantry server`:
# python-gitlab (the calls a team makes daily), gitlab-runner-api and gitlab-python-runner
# (third-party runners written against GitLab's Runner API), and Debian's two GitLab command
# lines: gitlab-cli (python-gitlab's CLI, installed as /usr/bin/python-gitlab) and ruby-gitlab
# (the `gitlab` gem's CLI, installed as /usr/bin/ruby-gitlab; upstream both are `gitlab`,
# which is why Debian renames them). See scripts/gitlab_clients.py.
#
#   scripts/test-gitlab-clients.sh URL ADMIN_TOKEN REGISTRATION_TOKEN REPOSITORY WORK_DIR
#   scripts/test-gitlab-clients.sh install    # only install them (scripts/test does, up front)
#
# The clients are installed once into a virtual environment under the target directory
# ($CARGO_TARGET_DIR or target/gitlab-clients-venv), at the versions pinned here, as
# scripts/test-s3.sh installs moto. The `gantry` crate's test
# `gitlab_clients_from_pypi_work_against_the_server` starts the server and runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_GITLAB_VERSION=8.6.0
GITLAB_RUNNER_API_VERSION=1.0.4
GITLAB_PYTHON_RUNNER_VERSION=14.3.20
# gitlab-python-runner 14.3.20 imports `gitlabemu.helpers.debug_enabled`, which later
# gitlab-emulator releases dropped; its own dependency range (>=0.11.1) does not say so.
GITLAB_EMULATOR_VERSION=1.1.9

venv="${CARGO_TARGET_DIR:-target}/gitlab-clients-venv"
stamp="$venv/.installed-$PYTHON_GITLAB_VERSION-$GITLAB_RUNNER_API_VERSION-$GITLAB_PYTHON_RUNNER_VERSION-$GITLAB_EMULATOR_VERSION"
if [ ! -e "$stamp" ]; then
  echo "scripts/test-gitlab-clients.sh: installing python-gitlab $PYTHON_GITLAB_VERSION," \
    "gitlab-runner-api $GITLAB_RUNNER_API_VERSION and gitlab-python-runner" \
    "$GITLAB_PYTHON_RUNNER_VERSION into $venv" >&2
  if ! python3 -m venv "$venv" >&2; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
    python3 -m venv "$venv" >&2
  fi
  "$venv/bin/pip" install -q \
    "python-gitlab==$PYTHON_GITLAB_VERSION" \
    "gitlab-runner-api==$GITLAB_RUNNER_API_VERSION" \
    "gitlab-python-runner==$GITLAB_PYTHON_RUNNER_VERSION" \
    "gitlab-emulator==$GITLAB_EMULATOR_VERSION" >&2
  touch "$stamp"
fi
# Debian's packages, from the distribution's archive (apt-get, as scripts/test installs git).
if [ ! -x /usr/bin/python-gitlab ] || [ ! -x /usr/bin/ruby-gitlab ]; then
  echo "scripts/test-gitlab-clients.sh: installing Debian's gitlab-cli and ruby-gitlab" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gitlab-cli ruby-gitlab >&2
fi
if [ "${1:-}" = install ]; then
  exit 0
fi
exec "$venv/bin/python" scripts/gitlab_clients.py "$@"
