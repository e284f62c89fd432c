#!/usr/bin/env bash
# Builds the dashboard's static assets into web/dist/ (embedded into the sluice binary at build time,
# served at /dashboard on the admin listener): installs web/'s npm packages exactly as locked
# (npm ci, only when package-lock.json changed since the last install), then copies uPlot's minified
# js/css and web/src/* into web/dist/. Idempotent and quiet: files are copied only when they differ,
# so an unchanged tree does not re-trigger the C++ embed step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
web="$root/web"

if ! command -v npm >/dev/null 2>&1; then
  echo "build-web: npm not found (Debian package npm; scripts/install-deps.sh installs it)" >&2
  exit 1
fi

stamp="$web/node_modules/.sluice-lock.sha256"
want=$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -d "$web/node_modules/uplot" ]; then
  echo "build-web: npm ci in web/"
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$want" > "$stamp"
fi

mkdir -p "$web/dist"
copy() {  # copy SRC into dist only when its content differs
  local dst="$web/dist/$(basename "$1")"
  if ! cmp -s "$1" "$dst"; then cp "$1" "$dst"; fi
}
copy "$web/node_modules/uplot/dist/uPlot.iife.min.js"
copy "$web/node_modules/uplot/dist/uPlot.min.css"
for f in "$web"/src/*; do copy "$f"; done
# Drop files that no longer have a source (renamed or deleted).
for f in "$web"/dist/*; do
  b=$(basename "$f")
  case "$b" in uPlot.iife.min.js|uPlot.min.css) continue ;; esac
  [ -e "$web/src/$b" ] || rm -f "$f"
done
