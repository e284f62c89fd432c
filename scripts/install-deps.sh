#!/usr/bin/env bash
# Installs every dependency sluice needs from Debian packages, idempotently.
# Only packages that are missing are installed; a second run does nothing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev
  libsimdjson-dev libyaml-cpp-dev libfmt-dev libspdlog-dev libxxhash-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  clang libclang-rt-14-dev curl python3 prometheus haproxy nginx-light wrk
  nodejs chromium gnuplot-nox
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts packaged daemons on install; sluice's tests and benchmarks start their own.
  for svc in nginx haproxy prometheus; do
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
else
  echo "install-deps: all packages present"
fi

# The dashboard's static assets (web/dist, embedded into the sluice binary at build time):
# npm ci in web/ only when its package-lock.json changed, then a copy. Quiet when up to date.
"$(cd "$(dirname "$0")" && pwd)/build-web.sh"
