#!/usr/bin/env bash
# Installs every dependency sluice needs from Debian packages, idempotently.
# Only packages that are missing are installed; a second run does nothing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev
  libsimdjson-dev libyaml-cpp-dev libfmt-dev libspdlog-dev libxxhash-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev libjemalloc-dev
  clang libclang-rt-14-dev curl python3 prometheus haproxy nginx-light wrk
  nodejs chromium gnuplot-nox
  # active-active and the Endpoint Picker: KV events (ZeroMQ + msgpack), shared budgets (Redis),
  # ext_proc (gRPC + protobuf), and the Python peers the integration tests use (/usr/bin/python3).
  # msgpack: msgpuck (libmsgpuck-dev, Tarantool's header-only C codec); Debian 12's msgpack-c and
  # msgpack-cxx packages both depend on Boost 1.74, which conflicts with the Boost 1.81 sluice uses.
  libzmq3-dev cppzmq-dev libmsgpuck-dev libhiredis-dev redis-server
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  python3-zmq python3-msgpack python3-redis python3-grpcio python3-protobuf
  # deployment checks (tests/integration/test_deploy.py): YAML of the Kubernetes manifests
  python3-yaml
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
  for svc in nginx haproxy prometheus redis-server; do
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
else
  echo "install-deps: all packages present"
fi

# The dashboard's static assets (web/dist, embedded into the sluice binary at build time):
# npm ci in web/ only when its package-lock.json changed, then a copy. Quiet when up to date.
"$(cd "$(dirname "$0")" && pwd)/build-web.sh"

# The official openai npm SDK for tests/integration/test_openai_sdk.py (npm ci in tests/sdk/ when
# its package-lock.json changed).
"$(cd "$(dirname "$0")" && pwd)/install-sdk-tests.sh"
# The official OpenAI Node SDK for the TLS test (tests/integration/test_tls.py): npm ci only when
# its package-lock.json changed since the last install.
sdk="$(cd "$(dirname "$0")/.." && pwd)/tests/integration/openai_sdk"
sdk_stamp="$sdk/node_modules/.sluice-lock.sha256"
sdk_want=$(sha256sum "$sdk/package-lock.json" | cut -d' ' -f1)
if [ ! -f "$sdk_stamp" ] || [ "$(cat "$sdk_stamp")" != "$sdk_want" ]; then
  echo "install-deps: npm ci in tests/integration/openai_sdk"
  (cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$sdk_want" > "$sdk_stamp"
fi
