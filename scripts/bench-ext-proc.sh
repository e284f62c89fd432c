#!/usr/bin/env bash
# The Endpoint Picker (ext_proc) path vs the standalone path on one gateway, side by side in one
# run (issue 17): picks per second and the added latency per request, small bodies. nginx serves
# the canned completion (the engine's place); sluice runs both listeners over it; the client is
# sluice_ext_proc_bench (bench/ext_proc/ext_proc_bench.cpp, C++ gRPC sync API).
#   scripts/bench-ext-proc.sh [build-dir]
#   (env: SECONDS_PER_RUN=5 THREADS=8 SLUICE_WORKERS=2 EXT_PROC_THREADS=1 CONNS=4 INFLIGHT=32)
# The gateway's CPU per pick (its /proc stat around an ext_proc-only run) does not depend on how
# busy the shared machine is; picks/s does: the load average is printed before and after.
# COMPARE_WITH=path/to/another/sluice: the same ext_proc-only runs against that binary too (e.g. a
# build of an older commit), one after the other in this run, for a before/after at the same load.
# Prints the figures; bench/results/ext_proc.txt keeps a run with its command.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-release}
seconds=${SECONDS_PER_RUN:-5}
threads=${THREADS:-8}
workers=${SLUICE_WORKERS:-2}
ep_threads=${EXT_PROC_THREADS:-1}
conns=${CONNS:-4}
inflight=${INFLIGHT:-32}
command -v nginx >/dev/null || { echo "bench-ext-proc: nginx is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
ninja -C "$build" -j2 -l3 sluice sluice_ext_proc_bench >/dev/null

tmp=$(mktemp -d /tmp/sluice-bench-extproc.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() {
  for _ in $(seq 200); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2).close()" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "bench-ext-proc: nothing listening on port $1" >&2; exit 1
}

completion='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":"assistant","content":"The capital of France is Paris."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":8,"total_tokens":32,"prompt_tokens_details":{"cached_tokens":16}}}'
nginx_port=$(free_port)
mkdir -p "$tmp/nginx/logs"
cat > "$tmp/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $tmp/nginx/body;
  server {
    listen 127.0.0.1:$nginx_port reuseport;
    location / { default_type application/json; return 200 '$completion'; }
  }
}
CONF
nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" &
pids+=($!)
wait_port "$nginx_port"

sluice_port=$(free_port)
admin_port=$(free_port)
grpc_port=$(free_port)
cat > "$tmp/sluice.yaml" <<CONF
listen: 127.0.0.1:$sluice_port
admin: 127.0.0.1:$admin_port
workers: $workers
ext_proc: {listen: 127.0.0.1:$grpc_port, threads: $ep_threads}
pools:
  - name: chat
    endpoints: [127.0.0.1:$nginx_port]
    health: {path: /}
    scrape: {interval_ms: 1000}
models:
  - {name: meta-llama/Llama-3.1-8B-Instruct, pool: chat}
CONF
"$build/sluice" serve -c "$tmp/sluice.yaml" --access-log off --log-level warn &
pids+=($!)
wait_port "$sluice_port"
wait_port "$grpc_port"

echo "# scripts/bench-ext-proc.sh: SECONDS_PER_RUN=$seconds THREADS=$threads SLUICE_WORKERS=$workers EXT_PROC_THREADS=$ep_threads CONNS=$conns INFLIGHT=$inflight, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
bench=("$build/sluice_ext_proc_bench" --ext-proc-port "$grpc_port" --gateway-port "$sluice_port" --direct-port "$nginx_port"
       --threads "$threads" --seconds "$seconds" --conns "$conns" --inflight "$inflight")
"${bench[@]}"
# The gateway's own CPU per pick: an ext_proc run alone (each client), the sluice process's CPU time around it.
spid=${pids[1]}
cpu() { awk '{print $14 + $15}' "/proc/$spid/stat"; }
# Each client alone against ext_proc, with the gateway's (pid $spid) CPU time around the run.
cpu_per_pick() {
  local client before after out picks
  for client in async sync; do
    before=$(cpu)
    out=$("${bench[@]}" --only ext_proc --client "$client")
    after=$(cpu)
    echo "$out"
    picks=$(echo "$out" | sed -E 's/.* ([0-9]+) picks, .*/\1/')
    python3 -c "t=($after-$before)/$(getconf CLK_TCK); p=$picks; print(f'  gateway CPU: {t:.2f} s for {p} picks = {t/p*1e6:.0f} us per pick -> {p/t:.0f} picks/s per fully used core')"
  done
}
cpu_per_pick
curl -s "127.0.0.1:$admin_port/metrics" | grep -E '^sluice_requests_total|^sluice_ext_proc_(streams|bad)' | sed 's/^/  metrics: /'
if [ -n "${COMPARE_WITH:-}" ]; then
  kill "$spid"; wait "$spid" 2>/dev/null || true
  # The other binary, same config but without keys it may not know (ext_proc.threads).
  sed -E 's/, threads: [0-9]+\}/}/' "$tmp/sluice.yaml" > "$tmp/other.yaml"
  "$COMPARE_WITH" serve -c "$tmp/other.yaml" --access-log off --log-level warn &
  pids+=($!)
  spid=$!
  wait_port "$sluice_port"
  wait_port "$grpc_port"
  echo "compared with $COMPARE_WITH ($("$COMPARE_WITH" --version 2>&1 | head -1)), same runs:"
  cpu_per_pick
fi
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
