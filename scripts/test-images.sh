#!/usr/bin/env bash
# Builds the images the Docker executor's tests and benchmark use, locally: no registry
# is needed (or reachable). Each is `docker import` of a root file system made from
# Debian's busybox-static package. Idempotent: an image already built with the current
# recipe version is kept, so a second run takes well under a second.
#
#   gantry-test/busybox:latest     busybox as /bin/sh and every applet, /etc/passwd, /etc/group,
#                                  /etc/os-release; CMD ["sh"]
#   gantry-test/entrypoint:latest  the same with ENTRYPOINT ["/bin/false"] (jobs must
#                                  override it)
#   gantry-test/http:latest        busybox httpd on port 8080 (EXPOSE 8080/tcp) serving
#                                  /www/index.html = "hello from the service"
#   gantry-test/dnsutils:latest    the busybox image plus /usr/bin/host: `host NAME` answered by
#                                  busybox nslookup, printed as bind9's host prints its usual
#                                  answers (`NAME has address A`, `Host NAME not found:
#                                  3(NXDOMAIN)`); for jobs that look up service aliases
#
# crates/gantry/tests/gcl_docker_conformance.rs also tags them with image names the
# gitlab-ci-local cases use (alpine, busybox, …), as stand-ins.
#
# Usage: scripts/test-images.sh [--force]
set -euo pipefail

VERSION=2
FORCE=${1:-}

if ! command -v docker >/dev/null 2>&1; then
  echo "scripts/test-images.sh: the docker CLI is not installed; the Docker executor tests need a Docker engine" >&2
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  echo "scripts/test-images.sh: no Docker engine answers (docker info failed); start it (systemctl start docker) or set DOCKER_HOST" >&2
  exit 1
fi

current() {
  [ "$FORCE" != "--force" ] &&
    [ "$(docker image inspect --format '{{ index .Config.Labels "com.gantry.test-images" }}' "$1" 2>/dev/null)" = "$VERSION" ]
}

images=(gantry-test/busybox:latest gantry-test/entrypoint:latest gantry-test/http:latest gantry-test/dnsutils:latest)
missing=0
for image in "${images[@]}"; do
  current "$image" || missing=1
done
if [ "$missing" = 0 ]; then
  echo "test images up to date: ${images[*]}"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# busybox-static from Debian (apt's cache first; fetch it if needed).
deb=$(ls /var/cache/apt/archives/busybox-static_*.deb 2>/dev/null | head -n 1 || true)
if [ -z "$deb" ]; then
  (cd "$work" && { apt-get download busybox-static >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get download busybox-static >/dev/null; }; })
  deb=$(ls "$work"/busybox-static_*.deb | head -n 1)
fi
rootfs="$work/rootfs"
mkdir -p "$rootfs"
dpkg-deb -x "$deb" "$rootfs"
mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,tmp,root,etc,www,proc,sys,dev}
chmod 1777 "$rootfs/tmp"
if [ ! -x "$rootfs/bin/busybox" ]; then
  echo "scripts/test-images.sh: $deb has no bin/busybox" >&2
  exit 1
fi
for applet in $("$rootfs/bin/busybox" --list); do
  [ -e "$rootfs/bin/$applet" ] || ln -s busybox "$rootfs/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
printf 'hello from the service\n' >"$rootfs/www/index.html"
printf 'NAME="gantry-test"\nID=busybox\nPRETTY_NAME="busybox (Gantry test image)"\n' >"$rootfs/etc/os-release"

import() {
  local image=$1
  shift
  tar -C "$rootfs" -c . | docker import \
    --change "LABEL com.gantry.test-images=$VERSION" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$@" - "$image" >/dev/null
  echo "built $image"
}

import gantry-test/busybox:latest --change 'CMD ["sh"]'
import gantry-test/entrypoint:latest --change 'ENTRYPOINT ["/bin/false"]'
import gantry-test/http:latest \
  --change 'EXPOSE 8080/tcp' \
  --change 'CMD ["httpd", "-f", "-v", "-p", "8080", "-h", "/www"]'
# `host` for the dnsutils image only (the other images stay plain busybox).
cat >"$rootfs/usr/bin/host" <<'HOST'
#!/bin/sh
# host NAME: bind9's host answers for the usual cases, from busybox nslookup.
if [ $# -ne 1 ]; then
  echo "usage: host NAME (this image's host takes one name)" >&2
  exit 1
fi
out=$(nslookup "$1" 2>&1)
status=$?
addresses=$(printf '%s\n' "$out" | sed -n '/^Name:/,$ s/^Address:[[:space:]]*\([^[:space:]]*\).*/\1/p')
if [ "$status" = 0 ] && [ -n "$addresses" ]; then
  for address in $addresses; do
    case $address in
      *:*) echo "$1 has IPv6 address $address" ;;
      *) echo "$1 has address $address" ;;
    esac
  done
  exit 0
fi
case $out in
  *NXDOMAIN*) echo "Host $1 not found: 3(NXDOMAIN)" ;;
  *) echo ";; connection timed out; no servers could be reached" ;;
esac
exit 1
HOST
chmod 755 "$rootfs/usr/bin/host"
import gantry-test/dnsutils:latest --change 'CMD ["sh"]'
