#!/usr/bin/env python3
"""Integration tests of `sluice sim` over HTTP on loopback ephemeral ports: SSE byte format, usage
and cached_tokens, errors, /v1/models and LoRA endpoints, embeddings, abort on disconnect freeing
KV blocks (seen in /metrics), /metrics through `promtool check metrics`, and fault injection.
Run: python3 test_sim.py --sluice path/to/sluice"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import unittest

SLUICE = None
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class Sim:
    """A `sluice sim` process; always killed by close()."""

    def __init__(self, *args, replicas=1):
        self.proc = subprocess.Popen([SLUICE, "sim", "--replicas", str(replicas), "--base-port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.ports = []
        deadline = time.time() + 10
        while len(self.ports) < replicas:
            line = self.proc.stdout.readline()
            if not line or time.time() > deadline:
                self.close()
                raise RuntimeError("sim did not start: " + repr(line))
            m = re.match(r"replica (\d+) listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.ports.append(int(m.group(2)))

    def conn(self, i=0, timeout=10):
        return http.client.HTTPConnection("127.0.0.1", self.ports[i], timeout=timeout)

    def request(self, method, path, body=None, i=0, timeout=10):
        c = self.conn(i, timeout)
        try:
            data = json.dumps(body) if isinstance(body, (dict, list)) else body
            c.request(method, path, body=data, headers={"content-type": "application/json"} if data else {})
            r = c.getresponse()
            return r.status, r.getheader("content-type", ""), r.read()
        finally:
            c.close()

    def metrics(self, i=0):
        status, _, body = self.request("GET", "/metrics", i=i)
        assert status == 200, status
        return body.decode()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.proc.stdout.close()


def metric(text, name, **labels):
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def chat(content, max_tokens=4, stream=False, model=MODEL, **extra):
    body = {"model": model, "messages": [{"role": "system", "content": "You are a helpful assistant. " * 8},
                                         {"role": "user", "content": content}], "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    body.update(extra)
    return body


class SimTest(unittest.TestCase):
    sim = None

    @classmethod
    def setUpClass(cls):
        cls.sim = Sim("--kv-blocks", "400", "--max-model-len", "2048", "--adapters", "sql-lora,chat-lora",
                      "--output-len", "8", "--jitter", "0")

    @classmethod
    def tearDownClass(cls):
        cls.sim.close()

    def test_streaming_chat_byte_format_and_usage(self):
        status, ctype, body = self.sim.request(
            "POST", "/v1/chat/completions", chat("stream please", 5, True, stream_options={"include_usage": True}))
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("text/event-stream"), ctype)
        text = body.decode()
        self.assertTrue(text.endswith("data: [DONE]\n\n"))
        events = text.split("\n\n")[:-1]
        self.assertTrue(all(e.startswith("data: ") for e in events), events)
        chunks = [json.loads(e[6:]) for e in events[:-1]]
        self.assertEqual(chunks[0]["choices"][0]["delta"], {"role": "assistant", "content": ""})
        self.assertEqual(len({c["id"] for c in chunks}), 1)
        self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))
        deltas = chunks[1:-1]
        self.assertEqual(len(deltas), 5)
        self.assertTrue(all("content" in d["choices"][0]["delta"] for d in deltas))
        self.assertEqual(deltas[-1]["choices"][0]["finish_reason"], "length")
        self.assertTrue(all(d["choices"][0]["finish_reason"] is None for d in deltas[:-1]))
        usage = chunks[-1]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], 5)
        self.assertEqual(usage["usage"]["total_tokens"], usage["usage"]["prompt_tokens"] + 5)
        self.assertIn("cached_tokens", usage["usage"]["prompt_tokens_details"])
        # Without include_usage: no usage chunk.
        _, _, body = self.sim.request("POST", "/v1/chat/completions", chat("no usage", 2, True))
        self.assertNotIn(b'"usage"', body)

    def test_streaming_completions(self):
        status, _, body = self.sim.request("POST", "/v1/completions",
                                           {"model": MODEL, "prompt": "once upon a time", "max_tokens": 3, "stream": True})
        self.assertEqual(status, 200)
        events = body.decode().split("\n\n")[:-1]
        chunks = [json.loads(e[6:]) for e in events[:-1]]
        self.assertEqual(len(chunks), 3)
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")

    def test_cached_tokens_on_repeated_prompt(self):
        prompt = "A long shared document about gateways and caches. " * 10
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
        _, _, first = self.sim.request("POST", "/v1/completions", body)
        _, _, second = self.sim.request("POST", "/v1/completions", body)
        u1, u2 = json.loads(first)["usage"], json.loads(second)["usage"]
        self.assertEqual(u1["prompt_tokens"], (len(prompt) + 3) // 4)
        self.assertEqual(u1["prompt_tokens_details"]["cached_tokens"], 0)
        cached = u2["prompt_tokens_details"]["cached_tokens"]
        self.assertEqual(cached % 16, 0)
        self.assertEqual(cached, (u2["prompt_tokens"] - 1) // 16 * 16)

    def test_non_streaming_chat_and_output_len_default(self):
        status, _, body = self.sim.request("POST", "/v1/chat/completions", chat("hello", None))
        self.assertEqual(status, 200)
        r = json.loads(body)
        self.assertEqual(r["object"], "chat.completion")
        self.assertEqual(r["choices"][0]["message"]["role"], "assistant")
        self.assertEqual(r["choices"][0]["finish_reason"], "stop")
        self.assertEqual(r["usage"]["completion_tokens"], 8)  # --output-len 8

    def test_errors(self):
        status, _, body = self.sim.request("POST", "/v1/chat/completions", chat("x", 2, model="nope"))
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body)["error"]["message"], "The model `nope` does not exist.")
        status, _, body = self.sim.request("POST", "/v1/chat/completions", '{"model": ')
        self.assertEqual(status, 400)
        self.assertIn("error", json.loads(body))
        status, _, body = self.sim.request("POST", "/v1/completions", {"model": MODEL, "prompt": "x" * 4000, "max_tokens": 2000})
        self.assertEqual(status, 400)
        self.assertIn("maximum context length is 2048", json.loads(body)["error"]["message"])
        self.assertEqual(json.loads(body)["error"]["code"], 400)
        status, _, _ = self.sim.request("GET", "/nowhere")
        self.assertEqual(status, 404)

    def test_models_and_lora_endpoints(self):
        status, _, body = self.sim.request("GET", "/v1/models")
        self.assertEqual(status, 200)
        data = json.loads(body)["data"]
        ids = {m["id"]: m for m in data}
        self.assertIsNone(ids[MODEL]["parent"])
        self.assertEqual(ids["sql-lora"]["parent"], MODEL)
        self.assertEqual(ids[MODEL]["max_model_len"], 2048)
        status, _, _ = self.sim.request("POST", "/v1/load_lora_adapter", {"lora_name": "new-lora", "lora_path": "/x"})
        self.assertEqual(status, 200)
        status, _, _ = self.sim.request("POST", "/v1/load_lora_adapter", {"lora_name": "new-lora", "lora_path": "/x"})
        self.assertEqual(status, 400)
        status, _, body = self.sim.request("POST", "/v1/chat/completions", chat("adapter", 2, model="new-lora"))
        self.assertEqual(status, 200, body)
        self.assertIn("vllm:lora_requests_info{max_lora=", self.sim.metrics())
        status, _, _ = self.sim.request("POST", "/v1/unload_lora_adapter", {"lora_name": "new-lora"})
        self.assertEqual(status, 200)
        status, _, _ = self.sim.request("POST", "/v1/unload_lora_adapter", {"lora_name": "new-lora"})
        self.assertEqual(status, 404)
        status, _, _ = self.sim.request("POST", "/v1/chat/completions", chat("adapter", 2, model="new-lora"))
        self.assertEqual(status, 404)

    def test_embeddings(self):
        status, _, body = self.sim.request("POST", "/v1/embeddings", {"model": MODEL, "input": ["a b c d", "e f"]})
        self.assertEqual(status, 200, body)
        r = json.loads(body)
        self.assertEqual(len(r["data"]), 2)
        self.assertGreater(r["usage"]["prompt_tokens"], 0)

    def test_health(self):
        status, _, body = self.sim.request("GET", "/health")
        self.assertEqual((status, body), (200, b""))


class AbortTest(unittest.TestCase):
    def test_client_disconnect_aborts_and_frees_blocks(self):
        sim = Sim("--kv-blocks", "500", "--jitter", "0")
        try:
            c = sim.conn()
            c.request("POST", "/v1/chat/completions", body=json.dumps(chat("long answer " * 50, 4000, True)),
                      headers={"content-type": "application/json"})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            while b'"delta":{"content"' not in r.fp.readline():  # a token arrived: prefill is done
                pass
            deadline = time.time() + 5
            while metric(sim.metrics(), "vllm:num_requests_running") != 1.0 and time.time() < deadline:
                time.sleep(0.02)
            m = sim.metrics()
            self.assertEqual(metric(m, "vllm:num_requests_running"), 1.0)
            self.assertGreater(metric(m, "vllm:kv_cache_usage_perc"), 0.0)
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            deadline = time.time() + 5
            while metric(sim.metrics(), "vllm:request_success_total", finished_reason="abort") != 1.0:
                self.assertLess(time.time(), deadline, "abort not seen")
                time.sleep(0.02)
            m = sim.metrics()
            self.assertEqual(metric(m, "vllm:kv_cache_usage_perc"), 0.0)
            self.assertEqual(metric(m, "vllm:num_requests_running"), 0.0)
            # The aborted request's blocks stay cached: the same prompt now hits.
            status, _, body = sim.request("POST", "/v1/chat/completions", chat("long answer " * 50, 1))
            self.assertGreater(json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        finally:
            sim.close()


@unittest.skipIf(shutil.which("promtool") is None, "promtool not installed")
class PromtoolTest(unittest.TestCase):
    def check(self, text):
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=20)
        out = (p.stdout + p.stderr).strip()
        return p.returncode, [line for line in out.splitlines() if line.strip()]

    def test_metrics_pass_promtool(self):
        sim = Sim("--adapters", "a", "--jitter", "0", replicas=1)
        trt = Sim("--metrics-format", "trtllm")
        try:
            sim.request("POST", "/v1/chat/completions", chat("metrics", 3))
            sim.request("POST", "/v1/chat/completions", chat("metrics", 3, model="a"))
            rc, problems = self.check(sim.metrics())
            # vLLM's own names contain ':' (recording-rule style); promtool's linter flags that and
            # nothing else may be flagged. Exit code 1 would be a parse error.
            self.assertIn(rc, (0, 3), problems)
            others = [p for p in problems if "should not contain ':'" not in p]
            self.assertEqual(others, [])
            trt.request("POST", "/v1/completions", {"model": MODEL, "prompt": "x y z", "max_tokens": 2})
            rc, problems = self.check(trt.metrics())
            self.assertEqual((rc, problems), (0, []))
            m = sim.metrics()
            for name in ("vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                         "vllm:e2e_request_latency_seconds_bucket", "vllm:request_queue_time_seconds_bucket",
                         "vllm:cache_config_info", "vllm:prefix_cache_queries_total", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
                self.assertIn(name, m)
            self.assertIn("# TYPE vllm:prompt_tokens_total counter", m)
            self.assertEqual(metric(m, "vllm:request_success_total", finished_reason="length"), 2.0)
        finally:
            sim.close()
            trt.close()


class FaultTest(unittest.TestCase):
    def test_runtime_faults(self):
        sim = Sim("--jitter", "0", replicas=2)
        try:
            status, _, body = sim.request("POST", "/admin/faults", {"error_rate": {"503": 1.0}})
            self.assertEqual(status, 200, body)
            status, _, body = sim.request("POST", "/v1/chat/completions", chat("x", 2))
            self.assertEqual(status, 503)
            self.assertEqual(json.loads(body)["error"]["code"], 503)
            status, _, _ = sim.request("POST", "/v1/chat/completions", chat("x", 2), i=1)
            self.assertEqual(status, 200, "faults are per replica")
            self.assertEqual(sim.request("POST", "/admin/faults", {"bogus": 1})[0], 400)
            sim.request("POST", "/admin/faults", {"reset": True})
            self.assertEqual(sim.request("POST", "/v1/chat/completions", chat("x", 2))[0], 200)
            # Metrics: fail, then freeze (old values served), then ok again.
            sim.request("POST", "/admin/faults", {"metrics": "fail"})
            self.assertEqual(sim.request("GET", "/metrics")[0], 500)
            sim.request("POST", "/admin/faults", {"metrics": "freeze"})
            before = metric(sim.metrics(), "vllm:generation_tokens_total")
            sim.request("POST", "/v1/chat/completions", chat("x", 3))
            self.assertEqual(metric(sim.metrics(), "vllm:generation_tokens_total"), before)
            sim.request("POST", "/admin/faults", {"metrics": "slow", "metrics_delay_ms": 300})
            t0 = time.time()
            self.assertEqual(metric(sim.metrics(), "vllm:generation_tokens_total"), before + 3)
            self.assertGreater(time.time() - t0, 0.25)
            sim.request("POST", "/admin/faults", {"metrics": "ok"})
            # Hang: accepted, never answered.
            sim.request("POST", "/admin/faults", {"hang": True}, i=1)
            with self.assertRaises(socket.timeout):
                sim.request("POST", "/v1/chat/completions", chat("x", 2), i=1, timeout=0.5)
            sim.request("POST", "/admin/faults", {"hang": False}, i=1)
            self.assertEqual(sim.request("GET", "/health", i=1)[0], 200)
            # Exit: the replica stops listening, the other keeps serving.
            sim.request("POST", "/admin/faults", {"exit": "replica"}, i=1)
            time.sleep(0.1)
            with self.assertRaises(OSError):
                socket.create_connection(("127.0.0.1", sim.ports[1]), timeout=1).close()
            self.assertEqual(sim.request("GET", "/health")[0], 200)
        finally:
            sim.close()


class StreamTimingTest(unittest.TestCase):
    def test_role_chunk_comes_with_the_first_token(self):
        # vLLM sends a stream's role chunk on its first engine output (after the prefill), not when
        # the request is queued: a gateway takes the first chunk with choices for the first token.
        # One running sequence at a time: the second request waits in the engine's queue while the
        # first decodes for ~2 s. Its headers come at once (uvicorn's response start); no data
        # until the first request is done, then the role chunk, then its tokens.
        sim = Sim("--max-num-seqs", "1", "--jitter", "0", "--frontend-overhead-ms", "0")
        try:
            first = sim.conn(timeout=30)
            first.request("POST", "/v1/chat/completions", body=json.dumps(chat("first", 300, True)),
                          headers={"content-type": "application/json"})
            time.sleep(0.2)  # the first is running
            s = socket.create_connection(("127.0.0.1", sim.ports[0]), timeout=10)
            body = json.dumps(chat("second", 3, True)).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                      b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            got = b""
            while b"\r\n\r\n" not in got:
                got += s.recv(65536)
            self.assertTrue(got.startswith(b"HTTP/1.1 200"), got[:100])
            early = got.split(b"\r\n\r\n", 1)[1]
            s.settimeout(0.5)
            try:
                early += s.recv(65536)
            except socket.timeout:
                pass
            self.assertNotIn(b"data:", early, "a chunk before the queued request's first token")
            s.settimeout(20)
            while b"[DONE]" not in got:
                chunk = s.recv(65536)
                self.assertTrue(chunk, "stream ended early")
                got += chunk
            s.close()
            chunks = [json.loads(e) for e in re.findall(rb"data: (\{.*?\})\r?\n", got)]
            self.assertEqual(chunks[0]["choices"][0]["delta"], {"role": "assistant", "content": ""})
            self.assertTrue(chunks[1]["choices"][0]["delta"].get("content"), chunks[1])
            first.getresponse().read()
            first.close()
        finally:
            sim.close()

    def test_fault_flags(self):
        sim = Sim("--fault-error-rate", "429=1", "--fault-replicas", "1", replicas=2)
        try:
            self.assertEqual(sim.request("POST", "/v1/chat/completions", chat("x", 2))[0], 200)
            self.assertEqual(sim.request("POST", "/v1/chat/completions", chat("x", 2), i=1)[0], 429)
        finally:
            sim.close()
        p = subprocess.run([SLUICE, "sim", "--fault-error-rate", "418=0.5"], capture_output=True, text=True, timeout=10)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("status must be", p.stderr)

    def test_mixed_fleet_flags_are_checked(self):
        # (the slow replicas' pace itself: test_faults.py TestSlowReplica)
        for args, message in ((["--replicas", "2", "--slow-replicas", "3"], "--slow-replicas must be"),
                              (["--slow-replicas", "1", "--slow-factor", "0"], "--slow-factor must be")):
            p = subprocess.run([SLUICE, "sim", *args], capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(message, p.stderr)


def main():
    global SLUICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
