#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the gateway in front of an embedded
# simulated fleet (vLLM-compatible replicas on loopback ports). Extra arguments go to `sluice serve`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_BUILD_DIR:-$root/build-release}
SLUICE_TARGETS=sluice "$root/scripts/build.sh" "$dir"
exec "$dir/sluice" serve "$@"
