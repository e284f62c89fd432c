#!/usr/bin/env bash
# Syscalls and CPU per small request, sluice beside HAProxy (one worker / one thread each), under
# wrk at TPUT connections: nginx serves the canned completion of bench-overhead.sh. The counts come
# from the kernel's syscall tracepoints (`perf stat -e syscalls:...` on the proxy's pid, 3 s in the
# middle of the run), the CPU from /proc/PID/stat over the same window; both are divided by the
# requests the proxy completed in it (sluice: sluice_requests_total; HAProxy: its stats socket).
# Needs perf with tracepoint access (run as root). Usage:
#   scripts/count-syscalls.sh [sluice-binary] [connections=64] [rounds=2]
# Ports 18471-18475 on 127.0.0.1.
set -eu
sluice=$(realpath "${1:-build-release/sluice}"); conns=${2:-64}; rounds=${3:-2}
command -v perf >/dev/null || { echo "needs perf (linux-perf)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/sluice-syscalls.XXXXXX); mkdir -p "$tmp/nginx/logs"; chmod a+rx "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
model=meta-llama/Llama-3.1-8B-Instruct
completion='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"'$model'","choices":[{"index":0,"message":{"role":"assistant","content":"The capital of France is Paris."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":8,"total_tokens":32,"prompt_tokens_details":{"cached_tokens":16}}}'
request='{"model":"'$model'","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"temperature":0}'
cat > "$tmp/nginx/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $tmp/nginx/nginx.pid; error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; client_body_temp_path $tmp/nginx/body;
  server { listen 127.0.0.1:18471 reuseport; location / { default_type application/json; return 200 '$completion'; } } }
CONF
nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" & pids+=($!)
cat > "$tmp/sluice.yaml" <<CONF
listen: 127.0.0.1:18472
admin: 127.0.0.1:18473
workers: 1
pools:
  - name: chat
    policy: round_robin
    endpoints: [127.0.0.1:18471]
models:
  - name: $model
    pool: chat
CONF
cat > "$tmp/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 4096
  stats socket $tmp/haproxy.sock
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:18474
  default_backend engines
backend engines
  balance roundrobin
  server nginx1 127.0.0.1:18471
CONF
"$sluice" serve -c "$tmp/sluice.yaml" --access-log off --log-level warn & sl=$!; pids+=($sl)
haproxy -f "$tmp/haproxy.cfg" -db & hp=$!; pids+=($hp)
for _ in $(seq 100); do curl -s -o /dev/null 127.0.0.1:18473/healthz && [ -S "$tmp/haproxy.sock" ] && break; sleep 0.1; done
printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = %s\n' "'$request'" > "$tmp/post.lua"

served() {  # requests completed so far by the proxy on port $1
  if [ "$1" = 18472 ]; then
    curl -s 127.0.0.1:18473/metrics | awk '/^sluice_requests_total/ {s += $2} END {printf "%d\n", s}'
  else
    python3 - "$tmp/haproxy.sock" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"show stat\n")
out = b""
while (d := s.recv(65536)): out += d
for line in out.decode().splitlines():
    f = line.split(",")
    if len(f) > 49 and f[0] == "fe" and f[1] == "FRONTEND": print(f[48])  # req_tot
PY
  fi
}
events=raw_syscalls:sys_enter,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_timerfd_settime
one() {  # name port pid
  wrk -t1 -c"$conns" -d8s -s "$tmp/post.lua" "http://127.0.0.1:$2/v1/chat/completions" > "$tmp/wrk.txt" & local w=$!
  sleep 2
  local c0 n0 c1 n1
  c0=$(awk '{print $14 + $15}' "/proc/$3/stat"); n0=$(served "$2")
  perf stat -x, -e "$events" -p "$3" -o "$tmp/perf.txt" -- sleep 3 2>/dev/null
  c1=$(awk '{print $14 + $15}' "/proc/$3/stat"); n1=$(served "$2")
  wait "$w"
  python3 - "$1" "$c0" "$c1" "$n0" "$n1" "$(getconf CLK_TCK)" "$tmp/perf.txt" "$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk.txt")" <<'PY'
import sys
name, c0, c1, n0, n1, tck, perf, rps = sys.argv[1:]
n = max(1, int(n1) - int(n0))
counts = {}
for line in open(perf):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].replace(".", "").isdigit():
        counts[f[2].split(":")[-1].replace("sys_enter_", "")] = int(float(f[0])) / n
cpu = (float(c1) - float(c0)) * 1e6 / float(tck) / n
detail = "  ".join(f"{k} {v:.2f}" for k, v in counts.items() if k != "raw_syscalls:sys_enter" and k != "sys_enter" and v >= 0.005)
print(f"{name:8s} {float(rps):8.0f} req/s  cpu {cpu:5.2f} us/req  syscalls {counts.get('sys_enter', 0):.2f}/req  ({detail})")
PY
}
echo "small requests, $conns connections, wrk 1 thread; sluice 1 worker, HAProxy 1 thread, nginx 1 worker"
for _ in $(seq "$rounds"); do one sluice 18472 "$sl"; one haproxy 18474 "$hp"; done
