#!/usr/bin/env bash
# Installs the npm packages of tests/sdk/ (the official openai SDK that
# tests/integration/test_openai_sdk.py runs against the gateway) exactly as locked, only when its
# package-lock.json changed since the last install. Idempotent and quiet when up to date.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sdk="$root/tests/sdk"
if ! command -v npm >/dev/null 2>&1; then
  echo "install-sdk-tests: npm not found (Debian package npm; scripts/install-deps.sh installs it)" >&2
  exit 1
fi
stamp="$sdk/node_modules/.sluice-lock.sha256"
want=$(sha256sum "$sdk/package-lock.json" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -d "$sdk/node_modules/openai" ]; then
  echo "install-sdk-tests: npm ci in tests/sdk/"
  (cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$want" > "$stamp"
fi
