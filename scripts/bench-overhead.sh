#!/usr/bin/env bash
# The data path's overhead (issue 2): wrk against a canned chat completion served by nginx,
#   (1) direct to nginx, (2) through HAProxy (http mode, round robin, keep-alive to nginx),
#   (3) through sluice (full request parsing with simdjson, pick, upstream keep-alive pool,
#       model rewrite not needed; no access log, like the HAProxy config, which has no log target:
#       SLUICE_ACCESS_LOG=path writes it).
# Two runs per target: a latency run at a moderate, closed-loop load (LAT_CONNS connections) that
# reports p50/p99, and a throughput run (TPUT_CONNS connections) that reports requests/s.
# Goal: sluice adds <= 50 us at p50 and <= 250 us at p99 over direct in the latency run, and
# reaches >= 0.9x HAProxy's requests/s in the throughput run. Proxies get one thread each (nginx
# one worker, wrk one thread): on a 2-core machine every process competes for the same cores.
# Then (PARTS, default "small long stream"):
#   long:   220 KB request bodies at LONG_CONNS (150) connections against nginx: time to first
#           byte p50/p99 direct vs through sluice (goal: sluice adds <= 5 ms at p50, <= 20 ms at
#           p99), and sluice's CPU per request (utime + stime from /proc) at 220 KB and at 100k-token
#           (400 KB) prompts, and at 220 KB of source code (escape-dense JSON).
#   stream: a 2,000-token SSE stream (nginx serves it at full speed) relayed by sluice with
#           admission on (a tenant with a key): gateway CPU per relayed token (goal <= 2 us).
#   syscalls (not in the default; needs perf with tracepoint access, i.e. root): small requests at
#           TPUT_CONNS connections, sluice and HAProxy alternated ROUNDS (2) times: syscalls per
#           request by kind (`perf stat` on the syscall tracepoints of the proxy's pid, 3 s of an
#           11 s wrk run) and CPU per request (/proc over the 3 s before, untraced), each divided by
#           the requests the proxy completed in its window (sluice_requests_total; HAProxy's stats
#           socket).
#
# Usage: scripts/bench-overhead.sh [path/to/sluice]   (default: build-release/sluice)
# Env: DURATION (s, default 10), LAT_CONNS (4), TPUT_CONNS (64), SLUICE_WORKERS (1), HAPROXY_THREADS (1),
#      ROUNDS (2, the syscalls part),
#      BENCH_NICE (-10 as root, else 0): every measured process (nginx, haproxy, sluice, wrk) runs at
#      this niceness, so that other work on a shared machine disturbs the three targets alike and less.
#      UPSTREAM_RCVBUF (unset: the kernel's autotuned default): the canned upstream's listen socket
#      receive buffer (nginx `listen ... rcvbuf=`), e.g. 1m. Over loopback, with nginx short of CPU,
#      the gateway's 220 KB sends to it sometimes wait out TCP's persist timer (200 ms: `ss -tno` shows
#      the timer on the gateway's sockets to nginx); a 1 MB buffer removes those stalls (overhead.txt, run 23).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sluice=${1:-$root/build-release/sluice}
duration=${DURATION:-10}
lat_conns=${LAT_CONNS:-4}
tput_conns=${TPUT_CONNS:-64}
sluice_workers=${SLUICE_WORKERS:-1}
parts=${PARTS:-small long stream}
long_conns=${LONG_CONNS:-150}
haproxy_threads=${HAPROXY_THREADS:-1}
if [ "$(id -u)" -eq 0 ]; then bench_nice=${BENCH_NICE:--10}; else bench_nice=${BENCH_NICE:-0}; fi
run() { nice -n "$bench_nice" "$@"; }  # foreground only: `nice` execs, so `nice ... &` keeps $! right
for tool in nginx haproxy wrk; do
  command -v "$tool" >/dev/null || { echo "bench-overhead: $tool is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
[ -x "$sluice" ] || { echo "bench-overhead: no sluice binary at $sluice (scripts/build.sh builds one)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/sluice-bench-overhead.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() {
  for _ in $(seq 100); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2).close()" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "bench-overhead: nothing listening on port $1" >&2; exit 1
}

model="meta-llama/Llama-3.1-8B-Instruct"
completion='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":"assistant","content":"The capital of France is Paris."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":8,"total_tokens":32,"prompt_tokens_details":{"cached_tokens":16}}}'
request='{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"temperature":0}'

# ---- nginx: the canned completion --------------------------------------------------------------
nginx_port=$(free_port)
stream_port=$(free_port)
mkdir -p "$tmp/nginx/logs" "$tmp/nginx/stream/v1/chat"
python3 - "$tmp/nginx/stream/v1/chat/completions" <<'PY'
import json, sys
n = 2000
with open(sys.argv[1], "w") as f:
    for i in range(n):
        f.write("data: " + json.dumps({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1700000000,
                                       "model": "meta-llama/Llama-3.1-8B-Instruct",
                                       "choices": [{"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": None}]},
                                      separators=(",", ":")) + "\n\n")
    f.write("data: " + json.dumps({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1700000000,
                                   "model": "meta-llama/Llama-3.1-8B-Instruct", "choices": [],
                                   "usage": {"prompt_tokens": 24, "completion_tokens": n, "total_tokens": n + 24}},
                                  separators=(",", ":")) + "\n\ndata: [DONE]\n\n")
PY
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
    listen 127.0.0.1:$nginx_port reuseport${UPSTREAM_RCVBUF:+ rcvbuf=$UPSTREAM_RCVBUF};
    location / {
      default_type application/json;
      return 200 '$completion';
    }
  }
  server {  # the streaming upstream: a 2,000-token SSE body for any POST (405 -> 200: static files to POST)
    listen 127.0.0.1:$stream_port reuseport;
    root $tmp/nginx/stream;
    default_type text/event-stream;
    location = /health { return 200 'ok'; }  # the gateway's active health check
    location / { error_page 405 =200 \$uri; }
  }
}
CONF
chmod a+rx "$tmp"; chmod -R a+rX "$tmp/nginx/stream"  # nginx's workers may run as nobody
nice -n "$bench_nice" nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" &
pids+=($!)

# ---- HAProxy: http mode, round robin, keep-alive to nginx ---------------------------------------
haproxy_port=$(free_port)
cat > "$tmp/haproxy.cfg" <<CONF
global
  nbthread $haproxy_threads
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
  bind 127.0.0.1:$haproxy_port
  default_backend engines
backend engines
  balance roundrobin
  server nginx1 127.0.0.1:$nginx_port
CONF
nice -n "$bench_nice" haproxy -f "$tmp/haproxy.cfg" -db &
pids+=($!)
haproxy_pid=$!

# ---- sluice ---------------------------------------------------------------------------------------
sluice_port=$(free_port)
admin_port=$(free_port)
cat > "$tmp/sluice.yaml" <<CONF
listen: 127.0.0.1:$sluice_port
admin: 127.0.0.1:$admin_port
workers: $sluice_workers
pools:
  - name: chat
    policy: round_robin
    endpoints: [127.0.0.1:$nginx_port]
models:
  - name: $model
    pool: chat
CONF
# The streaming part runs with admission on: a second sluice whose one tenant has a key.
sluice_adm_port=$(free_port)
admin_adm_port=$(free_port)
key_sha=$(printf '%s' bench-key | sha256sum | cut -d' ' -f1)
cat > "$tmp/sluice-adm.yaml" <<CONF
listen: 127.0.0.1:$sluice_adm_port
admin: 127.0.0.1:$admin_adm_port
workers: $sluice_workers
pools:
  - name: stream
    policy: round_robin
    endpoints: [127.0.0.1:$stream_port]
models:
  - name: $model
    pool: stream
tenants:
  - name: bench
    key_sha256: [$key_sha]
CONF
nice -n "$bench_nice" "$sluice" serve -c "$tmp/sluice.yaml" --access-log "${SLUICE_ACCESS_LOG:-off}" --log-level warn &
pids+=($!)

sluice_pid=$!
nice -n "$bench_nice" "$sluice" serve -c "$tmp/sluice-adm.yaml" --access-log off --log-level warn &
pids+=($!)
sluice_adm_pid=$!

wait_port "$nginx_port"; wait_port "$haproxy_port"; wait_port "$sluice_port"; wait_port "$sluice_adm_port"
cpu_us() { awk '{print ($14 + $15) * 1e6 / '"$(getconf CLK_TCK)"'}' "/proc/$1/stat"; }  # utime + stime

cat > "$tmp/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$request'
done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50=%.1f p99=%.1f errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA

# Check the three answer the same thing before measuring.
for port in $nginx_port $haproxy_port $sluice_port; do
  body=$(curl -s -X POST -H 'Content-Type: application/json' -d "$request" "http://127.0.0.1:$port/v1/chat/completions")
  [ "$body" = "$completion" ] || { echo "bench-overhead: port $port answered: $body" >&2; exit 1; }
done

run_wrk() {  # port conns -> "rps p50 p99 errors"
  run wrk -t1 -c"$2" -d"${duration}s" -s "$tmp/post.lua" "http://127.0.0.1:$1/v1/chat/completions" |
    sed -n 's/^RESULT rps=\([0-9.]*\) p50=\([0-9.]*\) p99=\([0-9.]*\) errors=\([0-9]*\)/\1 \2 \3 \4/p'
}

if [[ " $parts " == *" small "* ]]; then
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A lat tput
for name in direct haproxy sluice; do
  case $name in direct) port=$nginx_port ;; haproxy) port=$haproxy_port ;; sluice) port=$sluice_port ;; esac
  run wrk -t1 -c"$lat_conns" -d2s -s "$tmp/post.lua" "http://127.0.0.1:$port/v1/chat/completions" >/dev/null  # warm-up
  lat[$name]=$(run_wrk "$port" "$lat_conns")
  tput[$name]=$(run_wrk "$port" "$tput_conns")
done

echo "sluice data-path overhead: wrk, POST /v1/chat/completions, canned completion from nginx"
echo "$(nproc) cores; ${duration}s per run; latency run: $lat_conns connections; throughput run: $tput_conns connections"
echo "sluice workers: $sluice_workers, haproxy threads: $haproxy_threads, nginx workers: 1, wrk threads: 1, nice $bench_nice"
echo "load average before: $load_before; sluice access log: ${SLUICE_ACCESS_LOG:-off}"
echo
printf "%-8s %12s %10s %10s %14s %7s\n" target "lat-run rps" "p50 us" "p99 us" "tput-run rps" errors
for name in direct haproxy sluice; do
  read -r lrps p50 p99 lerr <<<"${lat[$name]}"
  read -r trps tp50 tp99 terr <<<"${tput[$name]}"
  printf "%-8s %12.0f %10.1f %10.1f %14.0f %7d\n" "$name" "$lrps" "$p50" "$p99" "$trps" "$((lerr + terr))"
done
echo
read -r _ d50 d99 _ <<<"${lat[direct]}"
read -r _ h50 h99 _ <<<"${lat[haproxy]}"
read -r _ s50 s99 _ <<<"${lat[sluice]}"
read -r htput _ <<<"${tput[haproxy]}"
read -r stput _ <<<"${tput[sluice]}"
python3 - "$d50" "$d99" "$h50" "$h99" "$s50" "$s99" "$htput" "$stput" <<'PY'
import sys
d50, d99, h50, h99, s50, s99, ht, st = map(float, sys.argv[1:])
add50, add99, ratio = s50 - d50, s99 - d99, st / ht
print(f"haproxy adds {h50 - d50:7.1f} us at p50, {h99 - d99:7.1f} us at p99 over direct")
print(f"sluice  adds {add50:7.1f} us at p50 (goal <= 50: {'met' if add50 <= 50 else 'NOT met'}), "
      f"{add99:7.1f} us at p99 (goal <= 250: {'met' if add99 <= 250 else 'NOT met'})")
print(f"sluice / haproxy requests/s: {ratio:.2f}x (goal >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'})")
PY
fi

# ---- long prompts: 220 KB bodies, LONG_CONNS connections ------------------------------------------
long_request() {  # bytes [code] -> a chat request whose user message is that long (code: source code, an
                 # escaped quote or newline every ~12 bytes of its JSON, as code pasted into a prompt)
  python3 - "$1" "${2:-}" <<'PY'
import json, sys
n = int(sys.argv[1])
unit = ('  if (x == "fox") {\n    return jumps("dog");\n  }\n' if sys.argv[2] == "code"
        else "the quick brown fox jumps over the lazy dog while the fleet routes tokens ")
words = (unit * (n // len(unit) + 1))[:n]
print(json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 16,
                  "messages": [{"role": "system", "content": "You are a helpful assistant."},
                               {"role": "user", "content": words}]}))
PY
}
long_lua() {  # body-file lua-file
  cat > "$2" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$1", "rb"); wrk.body = f:read("*a"); f:close()
done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50=%.1f p99=%.1f errors=%d n=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.requests))
end
LUA
}
if [[ " $parts " == *" long "* ]]; then
  long_request 225280 > "$tmp/long220k.json"
  long_request 409600 > "$tmp/long100k.json"
  long_request 225280 code > "$tmp/code220k.json"
  long_lua "$tmp/long220k.json" "$tmp/long220k.lua"
  long_lua "$tmp/long100k.json" "$tmp/long100k.lua"
  long_lua "$tmp/code220k.json" "$tmp/code220k.lua"
  run_long() {  # port lua conns -> "rps p50 p99 errors n"
    run wrk -t1 -c"$3" -d"${duration}s" --timeout 10s -s "$2" "http://127.0.0.1:$1/v1/chat/completions" |
      sed -n 's/^RESULT rps=\([0-9.]*\) p50=\([0-9.]*\) p99=\([0-9.]*\) errors=\([0-9]*\) n=\([0-9]*\)/\1 \2 \3 \4 \5/p'
  }
  echo
  echo "long prompts: 220 KB request bodies, $long_conns connections, canned completion from nginx (time to first byte = latency)"
  printf "%-8s %10s %10s %10s %7s\n" target rps "p50 us" "p99 us" errors
  declare -A lng
  for name in direct sluice; do
    case $name in direct) port=$nginx_port ;; sluice) port=$sluice_port ;; esac
    run wrk -t1 -c"$long_conns" -d2s -s "$tmp/long220k.lua" "http://127.0.0.1:$port/v1/chat/completions" >/dev/null
    c0=$(cpu_us "$sluice_pid")
    lng[$name]=$(run_long "$port" "$tmp/long220k.lua" "$long_conns")
    c1=$(cpu_us "$sluice_pid")
    read -r rps p50 p99 err n <<<"${lng[$name]}"
    printf "%-8s %10.0f %10.1f %10.1f %7d\n" "$name" "$rps" "$p50" "$p99" "$err"
    [ "$name" = sluice ] && cpu220=$(python3 -c "print(($c1 - $c0) / max(1, $n))")
  done
  cpu_per_request() {  # lua -> sluice's CPU (us) per request over a 16-connection run of that body
    local c0 c1 n
    c0=$(cpu_us "$sluice_pid")
    read -r _ _ _ _ n <<<"$(run_long "$sluice_port" "$1" 16)"
    c1=$(cpu_us "$sluice_pid")
    python3 -c "print(($c1 - $c0) / max(1, $n))"
  }
  cpu100=$(cpu_per_request "$tmp/long100k.lua")
  cpucode=$(cpu_per_request "$tmp/code220k.lua")
  read -r _ d50 d99 _ _ <<<"${lng[direct]}"
  read -r _ s50 s99 _ _ <<<"${lng[sluice]}"
  python3 - "$d50" "$d99" "$s50" "$s99" "$cpu220" "$cpu100" "$cpucode" <<'PY'
import sys
d50, d99, s50, s99, c220, c100, ccode = map(float, sys.argv[1:])
a50, a99 = (s50 - d50) / 1000, (s99 - d99) / 1000
print(f"sluice adds {a50:.2f} ms at p50 (goal <= 5: {'met' if a50 <= 5 else 'NOT met'}), "
      f"{a99:.2f} ms at p99 (goal <= 20: {'met' if a99 <= 20 else 'NOT met'}) to the time to first byte")
print(f"sluice CPU per request: {c220:.0f} us at 220 KB prompts, {c100:.0f} us at 100k-token (400 KB) prompts, "
      f"{ccode:.0f} us at 220 KB of source code")
PY
fi

# ---- streaming: a 2,000-token stream relayed at full speed, admission on ----------------------------
if [[ " $parts " == *" stream "* ]]; then
  stream_req='{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"messages":[{"role":"user","content":"Count."}]}'
  # Check: every token event arrives, usage stripped (the client did not ask for it).
  got=$(curl -s -X POST -H 'Content-Type: application/json' -H 'Authorization: Bearer bench-key' -d "$stream_req" \
        "http://127.0.0.1:$sluice_adm_port/v1/chat/completions" | grep -c '"delta"' || true)
  [ "$got" = 2000 ] || { echo "bench-overhead: the stream relayed $got of 2000 token events:" >&2; curl -s -X POST -H "Content-Type: application/json" -H "Authorization: Bearer bench-key" -d "$stream_req" "http://127.0.0.1:$sluice_adm_port/v1/chat/completions" | head -c 600 >&2; exit 1; }
  cat > "$tmp/stream.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-key"
wrk.body = '$stream_req'
done = function(summary, latency, requests)
  io.write(string.format("RESULT n=%d errors=%d p50=%.1f\n", summary.requests,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50)))
end
LUA
  c0=$(cpu_us "$sluice_adm_pid")
  out=$(run wrk -t1 -c4 -d"${duration}s" -s "$tmp/stream.lua" "http://127.0.0.1:$sluice_adm_port/v1/chat/completions")
  c1=$(cpu_us "$sluice_adm_pid")
  n=$(sed -n 's/^RESULT n=\([0-9]*\).*/\1/p' <<<"$out")
  e=$(sed -n 's/^RESULT n=[0-9]* errors=\([0-9]*\).*/\1/p' <<<"$out")
  p50=$(sed -n 's/.*p50=\([0-9.]*\)/\1/p' <<<"$out")
  echo
  echo "streaming: 2,000-token SSE streams relayed at full speed (nginx), admission on (a keyed tenant), 4 connections"
  python3 - "$c0" "$c1" "$n" "$e" "$p50" <<'PY'
import sys
c0, c1, n, e, p50 = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
per_token = (c1 - c0) / max(1, n * 2000)
print(f"{n} streams ({n * 2000} tokens, {e} errors), stream p50 {p50 / 1000:.2f} ms; "
      f"gateway CPU {per_token:.3f} us per token (goal <= 2: {'met' if per_token <= 2 else 'NOT met'})")
PY
fi

# ---- syscalls and CPU per small request, sluice beside HAProxy (perf stat) ---------------------------
if [[ " $parts " == *" syscalls "* ]]; then
  command -v perf >/dev/null || { echo "bench-overhead: the syscalls part needs perf (linux-perf)" >&2; exit 1; }
  served() {  # requests the proxy on port $1 has completed so far
    if [ "$1" = "$sluice_port" ]; then
      curl -s "http://127.0.0.1:$admin_port/metrics" | awk '/^sluice_requests_total/ {s += $2} END {printf "%d\n", s}'
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
  count_one() {  # name port pid
    run wrk -t1 -c"$tput_conns" -d11s -s "$tmp/post.lua" "http://127.0.0.1:$2/v1/chat/completions" > "$tmp/wrk-sys.txt" &
    local w=$!
    sleep 2
    local c0 n0 c1 n1 t0 t1
    c0=$(cpu_us "$3"); n0=$(served "$2")
    sleep 3
    c1=$(cpu_us "$3"); n1=$(served "$2")
    t0=$(served "$2")
    perf stat -x, -e "$events" -p "$3" -o "$tmp/perf.txt" -- sleep 3 2>/dev/null
    t1=$(served "$2")
    wait "$w"
    python3 - "$1" "$c0" "$c1" "$n0" "$n1" "$t0" "$t1" "$tmp/perf.txt" "$(sed -n 's/^RESULT rps=\([0-9.]*\).*/\1/p' "$tmp/wrk-sys.txt")" <<'PY'
import sys
name, c0, c1, n0, n1, t0, t1, perf, rps = sys.argv[1:]
n, t = max(1, int(n1) - int(n0)), max(1, int(t1) - int(t0))
counts = {}
for line in open(perf):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].replace(".", "").isdigit():
        counts[f[2].split(":")[-1].replace("sys_enter_", "")] = int(float(f[0])) / t
detail = "  ".join(f"{k} {v:.2f}" for k, v in counts.items() if k != "sys_enter" and v >= 0.005)
print(f"{name:8s} {float(rps):8.0f} req/s  cpu {(float(c1) - float(c0)) / n:5.2f} us/req  "
      f"syscalls {counts.get('sys_enter', 0):.2f}/req  ({detail})")
PY
  }
  echo
  echo "syscalls and CPU per small request, $tput_conns connections (requests/s over the whole run, traced part included)"
  for _ in $(seq "${ROUNDS:-2}"); do
    count_one sluice "$sluice_port" "$sluice_pid"
    count_one haproxy "$haproxy_port" "$haproxy_pid"
  done
fi
