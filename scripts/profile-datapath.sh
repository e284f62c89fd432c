#!/usr/bin/env bash
# Instruction profile of the data path (callgrind counts instructions: repeatable on a loaded machine).
# nginx serves a canned completion; sluice (1 worker) runs under valgrind; N small requests over one
# keep-alive connection. Usage: scripts/profile-datapath.sh [sluice] [N=3000]. Ports 18431-18433.
# BODY_BYTES=225280: the user message is that long instead (bench-overhead.sh's long prompt, prose).
set -eu
sluice=${1:-build-release/sluice}; n=${2:-3000}
tmp=$(mktemp -d /tmp/sluice-profile.XXXXXX); mkdir -p $tmp/nginx/logs; chmod a+rx $tmp
completion='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":"assistant","content":"The capital of France is Paris."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":8,"total_tokens":32,"prompt_tokens_details":{"cached_tokens":16}}}'
request='{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"temperature":0}'
cat > $tmp/nginx/nginx.conf <<CONF
worker_processes 1; daemon off; pid $tmp/nginx/nginx.pid; error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; client_body_temp_path $tmp/nginx/body;
  server { listen 127.0.0.1:18431 reuseport; location / { default_type application/json; return 200 '$completion'; } } }
CONF
nginx -p $tmp/nginx -c $tmp/nginx/nginx.conf & ng=$!
cat > $tmp/s.yaml <<CONF
listen: 127.0.0.1:18432
admin: 127.0.0.1:18433
workers: 1
pools:
  - name: chat
    policy: round_robin
    endpoints: [127.0.0.1:18431]
models:
  - name: meta-llama/Llama-3.1-8B-Instruct
    pool: chat
CONF
valgrind --tool=callgrind --callgrind-out-file=$tmp/cg.out $sluice serve -c $tmp/s.yaml --access-log off --log-level warn 2>$tmp/vg.log & sl=$!
for i in $(seq 100); do curl -s -o /dev/null localhost:18432/healthz && break; sleep 0.2; done
printf '%s' "$request" > $tmp/request.json
python3 - "$n" "$tmp/request.json" "${BODY_BYTES:-0}" <<'PY'
import http.client, json, sys
n, body, long = int(sys.argv[1]), open(sys.argv[2]).read(), int(sys.argv[3])
if long:
    r = json.loads(body)
    r["messages"][1]["content"] = ("the quick brown fox jumps over the lazy dog while the fleet routes tokens " * (long // 70 + 1))[:long]
    body = json.dumps(r)
c = http.client.HTTPConnection("127.0.0.1", 18432)
for i in range(n):
    c.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"})
    r = c.getresponse(); r.read()
print("sent", n)
PY
kill -INT $sl; wait $sl || true; kill $ng; wait $ng 2>/dev/null || true
callgrind_annotate --inclusive=yes $tmp/cg.out 2>/dev/null | head -80
echo "callgrind output: $tmp/cg.out"
