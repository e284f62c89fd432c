#!/usr/bin/env python3
"""How big a fleet can one `sluice sim` process (one core) serve in real time?

Starts `sluice sim --replicas R`, keeps C requests in flight per replica (closed loop, asyncio,
raw HTTP/1.1), runs for D seconds, and prints the sim's CPU use (one core = 100%), the achieved
generated tokens/s, and the mean TTFT/ITL it reported in /metrics next to the batch-size model's
expectation. The fleet is "sustained" when the sim's CPU stays below ~90% of one core and the ITL
it reports stays close to the cost model's step time (a late timer stretches it).

  python3 bench/sim_scale.py --sluice build/sluice --replicas 16 --concurrency 1000 --max-tokens 512
Streaming (--stream) makes the client read every SSE event; in Python that caps the client, not
the sim, at a few hundred thousand events per second.
"""
import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def client(port, stop_at, args, stats):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "scale test " * 40}],
                       "max_tokens": args.max_tokens, "stream": args.stream}).encode()
    req = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           f"content-length: {len(body)}\r\n\r\n").encode() + body
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        stats["connect_errors"] += 1
        return
    while time.time() < stop_at:
        writer.write(req)
        head = await reader.readuntil(b"\r\n\r\n")
        if b"200 OK" not in head.split(b"\r\n", 1)[0]:
            stats["errors"] += 1
        if b"chunked" in head.lower():
            while True:  # read chunks until the last one
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            n = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
            await reader.readexactly(n)
        stats["done"] += 1
    writer.close()


def scrape(port):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    vals = {}
    for line in text.splitlines():
        for name in ("vllm:generation_tokens_total", "vllm:inter_token_latency_seconds_sum",
                     "vllm:inter_token_latency_seconds_count", "vllm:num_requests_running",
                     "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"):
            if line.startswith(name + "{"):
                vals[name] = float(line.rsplit(" ", 1)[1])
    return vals


async def main_async(args, ports, pid):
    stats = {"done": 0, "errors": 0, "connect_errors": 0}
    stop_at = time.time() + args.warmup + args.duration
    tasks = [asyncio.create_task(client(p, stop_at, args, stats)) for p in ports for _ in range(args.concurrency)]
    await asyncio.sleep(args.warmup)
    before = [scrape(p) for p in ports]
    c0, t0 = cpu_seconds(pid), time.time()
    await asyncio.sleep(args.duration)
    c1, t1 = cpu_seconds(pid), time.time()
    after = [scrape(p) for p in ports]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    d = lambda k: sum(a.get(k, 0) - b.get(k, 0) for a, b in zip(after, before))
    tokens = d("vllm:generation_tokens_total")
    itl = d("vllm:inter_token_latency_seconds_sum") / max(1, d("vllm:inter_token_latency_seconds_count"))
    running = sum(a.get("vllm:num_requests_running", 0) for a in after) / len(ports)
    b = running  # expected step time at this batch (8B/H100 model: C0 + max(W, beta*B) + delta*B + gamma*KV)
    kv = b * (100 + args.max_tokens / 2)
    expect_ms = 2 + max(5.5, 0.022 * b) + 0.02 * b + 5e-5 * kv
    cpu = 100 * (c1 - c0) / (t1 - t0)
    print(f"replicas {len(ports)} x concurrency {args.concurrency} (stream={args.stream}, max_tokens {args.max_tokens})")
    print(f"  sim CPU {cpu:.0f}% of one core; {tokens / (t1 - t0):,.0f} tokens/s; mean running/replica {running:.0f}")
    print(f"  mean ITL reported {itl * 1000:.1f} ms vs model step {expect_ms:.1f} ms; errors {stats['errors']}, "
          f"connect errors {stats['connect_errors']}")
    print(f"  sustained: {'yes' if cpu < 90 and itl * 1000 < expect_ms * 1.25 else 'no'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=500, help="requests in flight per replica")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=5)
    args = ap.parse_args()
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    proc = subprocess.Popen([args.sluice, "sim", "--replicas", str(args.replicas), "--base-port", "0",
                             "--max-num-seqs", "4096"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ports = []
        while len(ports) < args.replicas:
            m = re.match(r"replica \d+ listening on 127\.0\.0\.1:(\d+)", proc.stdout.readline())
            if m:
                ports.append(int(m.group(1)))
        asyncio.run(main_async(args, ports, proc.pid))
    finally:
        proc.kill()
        proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
