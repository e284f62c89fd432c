"""Operability (issue 19): `sluice validate` runs serve's checks and lists every error; `sluice
hash-key`; `--version` and sluice_build_info; process_* metrics; the reload-failure counter; the
access log's fields (RFC 3339 timestamp, method, client, tenant, priority, queue time, "-" for
empty) and the tenant on rejects (log and sluice_rejects_total); the engines' API key
(upstream_auth) sent in place of the client's and never logged; stdout carrying only JSON lines;
--port refused with -c; the overhead histogram's send_request phase (an engine slow to read a long
body) apart from first_upstream_byte. Real `sluice serve` processes and the fake upstream on
loopback ports.

Run: python3 test_operability.py --sluice path/to/sluice"""
import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_harness import FakeUpstream, Gateway, loopback_endpoints, read_line_matching  # noqa: E402
from hostile_harness import HostileUpstream  # noqa: E402

SLUICE = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "m1"
SLOW = os.environ.get("SLUICE_SANITIZED") == "1"


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def base_config(port, pool_extra="", endpoint=None, extra=""):
    ep = endpoint or f"127.0.0.1:{port}"
    if "health:" not in pool_extra:
        pool_extra = "    health: {interval_ms: 100}\n" + pool_extra
    return f"""
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
limits: {{max_body_bytes: 4096}}
pools:
  - name: p
{pool_extra}    endpoints: [{ep}]
models:
  - {{name: {MODEL}, pool: p}}
{extra}"""


def validate(text, env=None):
    d = tempfile.mkdtemp(prefix="sluice-val-")
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([SLUICE, "validate", "-c", path], capture_output=True, text=True, timeout=30,
                       env={**os.environ, **(env or {})})
    return r.returncode, r.stdout, r.stderr


def chat(content="hello", max_tokens=4):
    return json.dumps({"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}]})


def metric_value(text, name, **labels):
    total = None
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total = (total or 0) + float(line.rsplit(" ", 1)[1])
    return total


class Validate(unittest.TestCase):
    BROKEN = [
        # (what, config fragment replacing the pool extra / endpoint / extra, the path the message must name)
        ("misspelt policy_params key", dict(pool_extra="    policy: sluice\n    policy_params: {ttft_slo_msec: 500}\n"),
         "pools[0].policy_params.ttft_slo_msec: unknown parameter for policy 'sluice'"),
        ("endpoint with a path", dict(endpoint="http://127.0.0.1:8000/v1"), "pools[0].endpoints[0]: 'http://127.0.0.1:8000/v1' has a path"),
        ("ftp endpoint", dict(endpoint="ftp://127.0.0.1:8000"), "pools[0].endpoints[0]: unsupported scheme 'ftp'"),
        ("endpoint without a port", dict(endpoint="http://127.0.0.1"), "pools[0].endpoints[0]: 'http://127.0.0.1' has no port"),
        ("unknown pool key", dict(pool_extra="    polcy: sluice\n"), "pools[0].polcy: unknown key"),
        ("bad health interval", dict(pool_extra="    health: {interval_ms: 1}\n"), "pools[0].health.interval_ms: must be between 10"),
        ("short key hash", dict(extra="tenants:\n  - {name: a, key_sha256: abc}\n"), "tenants[0].key_sha256[0]: expected 64 hex digits"),
        ("unknown anonymous tenant", dict(extra="tenants:\n  - {name: a}\nadmission: {anonymous_tenant: ghost}\n"),
         "admission.anonymous_tenant: no tenant named 'ghost'"),
        ("missing api key env", dict(pool_extra="    upstream_auth: {api_key_env: SLUICE_TEST_SURELY_UNSET}\n"),
         "pools[0].upstream_auth.api_key_env: environment variable SLUICE_TEST_SURELY_UNSET is not set"),
        ("unknown policy", dict(pool_extra="    policy: fastest\n"), "pools[0].policy: unknown policy 'fastest'"),
        ("a key given twice", dict(pool_extra="    policy: sluice\n    policy: llmd_default\n"), "pools[0].policy: duplicate key"),
        ("retry out of range", dict(pool_extra="    retry: {budget_ratio: 2}\n"), "pools[0].retry.budget_ratio: must be between 0 and 1"),
        ("model in an unknown pool", dict(extra="  - {name: m2, pool: nope}\n"), "models[1].pool: unknown pool 'nope'"),
        ("allow-list naming an unknown model", dict(extra="tenants:\n  - {name: a, allowed_models: [m1, m9]}\n"),
         "tenants[0].allowed_models[1]: unknown model 'm9'"),
        ("per-model limit on an unknown model",
         dict(extra="tenants:\n  - {name: a, models: [{model: ghost, limits: {requests_per_min: 5}}]}\n"),
         "tenants[0].models[0].model: unknown model 'ghost'"),
        ("empty allow-list", dict(extra="tenants:\n  - {name: a, allowed_models: []}\n"),
         "tenants[0].allowed_models: expected a non-empty list"),
    ]

    def test_each_broken_config_fails_naming_its_key(self):
        for what, parts, want in self.BROKEN:
            with self.subTest(what):
                code, out, err = validate(base_config(9, **parts))
                self.assertEqual(code, 2, f"{what}: validate must fail; stdout {out!r}")
                self.assertIn(want, err, what)

    def test_every_error_is_listed_in_the_files_numbering(self):
        text = f"""
listen: 127.0.0.1:0
workers: 0
pools:
  - name: p
    policy_params: {{prefix_wieght: 1}}
    endpoints: [127.0.0.1:notaport, 127.0.0.1:9001, http://127.0.0.1:9002/v1, 127.0.0.1:9003]
    retry: {{max_retries: 99}}
  - name: q
    endpoints: [127.0.0.1:9100]
    health: {{path: health}}
models:
  - {{name: a, pool: p}}
  - {{name: b, pool: missing}}
tenants:
  - {{name: t, key_sha256: nothex}}
"""
        code, _, err = validate(text)
        self.assertEqual(code, 2)
        lines = [l.strip() for l in err.splitlines()[1:] if l.strip()]
        wanted = ["workers: must be between 1 and 256", "pools[0].policy_params.prefix_wieght: unknown parameter",
                  "pools[0].endpoints[0]: ", "pools[0].endpoints[2]: ", "pools[0].retry.max_retries: must be between 0 and 10",
                  "pools[1].health.path: must start with '/'", "models[1].pool: unknown pool 'missing'",
                  "tenants[0].key_sha256[0]: expected 64 hex digits"]
        for w in wanted:
            self.assertTrue(any(l.startswith(w) for l in lines), f"missing {w!r} in:\n{err}")
        self.assertEqual(len(lines), len(wanted), f"one line per error, no consequences reported:\n{err}")
        self.assertIn(f"{len(wanted)} errors", err.splitlines()[0])

    def test_accepted_configs_start_and_summary_names_tenants(self):
        up = FakeUpstream()
        try:
            ok = [
                base_config(up.port, endpoint=f"http://127.0.0.1:{up.port}"),
                base_config(up.port, endpoint=f"http://127.0.0.1:{up.port}/"),
                base_config(up.port, extra=f"tenants:\n  - {{name: acme, key_sha256: {sha('k')}, priority: 2,"
                                           f" limits: {{requests_per_min: 5}}}}\n"),
            ]
            with open(os.path.join(ROOT, "config", "example.yaml")) as f:
                example = f.read()
            ok.append(loopback_endpoints(example.replace("127.0.0.1:8080", "127.0.0.1:0").replace("127.0.0.1:9090", "127.0.0.1:0")))
            for i, text in enumerate(ok):
                with self.subTest(i):
                    code, out, err = validate(text)
                    self.assertEqual(code, 0, err)
                    self.assertIn(": ok", out)
                    gw = Gateway(SLUICE, text)  # raises unless it reports listening
                    try:
                        self.assertIsNone(gw.proc.poll())
                        if i < 2:  # the http:// form reaches the engine
                            deadline = time.time() + (10 if SLOW else 4)
                            status = 0
                            while time.time() < deadline and status != 200:
                                status, _, _ = gw.request("POST", "/v1/chat/completions", chat())
                                time.sleep(0.05)
                            self.assertEqual(status, 200)
                    finally:
                        gw.stop()
            code, out, _ = validate(ok[2])
            self.assertIn("tenant acme (1 keys, priority 2, weight 1; requests/min 5; every model)", out)
            self.assertIn("requests without a key: refused (401)", out)
            code, out, _ = validate(ok[0])
            self.assertIn("tenants: none", out)
        finally:
            up.stop()


class Commands(unittest.TestCase):
    def test_hash_key(self):
        r = subprocess.run([SLUICE, "hash-key", "sk-test-1"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout.strip(), sha("sk-test-1"))
        r = subprocess.run([SLUICE, "hash-key"], input="sk-test-2\n", capture_output=True, text=True, timeout=10)
        self.assertEqual(r.stdout.strip(), sha("sk-test-2"), "stdin, trailing newline not hashed")
        r = subprocess.run([SLUICE, "hash-key"], input="Bearer sk-x\n", capture_output=True, text=True, timeout=10)
        self.assertIn("Bearer", r.stderr)
        r = subprocess.run([SLUICE, "hash-key"], input="", capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 2)

    def test_version_and_build_info(self):
        r = subprocess.run([SLUICE, "--version"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0)
        m = re.match(r"sluice (\d+\.\d+\.\d+) \(revision ([0-9a-f]+|unknown), (\w+)\)", r.stdout.strip())
        self.assertIsNotNone(m, r.stdout)
        up = FakeUpstream()
        gw = Gateway(SLUICE, base_config(up.port))
        try:
            _, text = gw.admin("/metrics")
            self.assertIn(f'sluice_build_info{{version="{m.group(1)}",revision="{m.group(2)}",build_type="{m.group(3)}"}} 1',
                          text)
            for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                         "process_start_time_seconds", "process_max_fds", "process_virtual_memory_bytes"):
                v = metric_value(text, name)
                self.assertIsNotNone(v, name)
                if name != "process_cpu_seconds_total":  # a fresh process may not have used a 10 ms tick
                    self.assertGreater(v, 0, name)
            self.assertGreater(metric_value(text, "process_resident_memory_bytes"), 1 << 20)
            self.assertLess(abs(metric_value(text, "process_start_time_seconds") - time.time()), 600)
            self.assertEqual(metric_value(text, "sluice_config_reload_failures_total"), 0)
            # A broken file on SIGHUP: refused, counted, the old config keeps serving.
            with open(gw.config_path, "a") as f:
                f.write("bogus_key: 1\n")
            gw.signal(signal.SIGHUP)
            deadline = time.time() + 5
            while time.time() < deadline and not metric_value(gw.admin("/metrics")[1], "sluice_config_reload_failures_total"):
                time.sleep(0.05)
            self.assertEqual(metric_value(gw.admin("/metrics")[1], "sluice_config_reload_failures_total"), 1)
            self.assertEqual(gw.request("POST", "/v1/chat/completions", chat())[0], 200)
        finally:
            gw.stop()
            up.stop()

    def test_a_sighup_right_after_listening_is_a_reload(self):
        # A reload sent the moment the gateway says it listens (a config manager's, at start-up) is
        # a reload: the gateway keeps serving and counts the refused file. Before the signal set was
        # made ahead of the log line, SIGHUP could meet its default action there and end the process
        # (about 1 start in 3 under load): 8 starts make that all but certain to show.
        up = FakeUpstream()
        try:
            for i in range(8):
                gw = Gateway(SLUICE, base_config(up.port))
                try:
                    with open(gw.config_path, "a") as f:
                        f.write("bogus_key: 1\n")
                    gw.signal(signal.SIGHUP)
                    deadline = time.time() + 5
                    while time.time() < deadline and gw.proc.poll() is None and \
                            not metric_value(gw.admin("/metrics")[1], "sluice_config_reload_failures_total"):
                        time.sleep(0.02)
                    self.assertIsNone(gw.proc.poll(), f"start {i}: the gateway ended on SIGHUP")
                    self.assertEqual(metric_value(gw.admin("/metrics")[1], "sluice_config_reload_failures_total"), 1)
                    self.assertEqual(gw.request("POST", "/v1/chat/completions", chat())[0], 200)
                finally:
                    gw.stop()
        finally:
            up.stop()

    def test_port_flags_refused_with_a_config(self):
        d = tempfile.mkdtemp(prefix="sluice-flags-")
        path = os.path.join(d, "c.yaml")
        with open(path, "w") as f:
            f.write(base_config(9))
        r = subprocess.run([SLUICE, "serve", "-c", path, "--port", "8123"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--port applies only without -c", r.stderr)


class AccessLogAndRejects(unittest.TestCase):
    def setUp(self):
        self.up = FakeUpstream()
        tenants = f"""tenants:
  - {{name: acme, key_sha256: {sha('acme-key')}, priority: 3, limits: {{requests_per_min: 1}}}}
"""
        self.gw = Gateway(SLUICE, base_config(self.up.port, extra=tenants))

    def tearDown(self):
        self.gw.stop()
        self.up.stop()

    def test_fields_and_tenant_on_rejects(self):
        auth = {"authorization": "Bearer acme-key"}
        self.assertEqual(self.gw.request("POST", "/v1/chat/completions", chat(), auth)[0], 200)
        status, _, body = self.gw.request("POST", "/v1/chat/completions", chat(), auth)
        self.assertEqual(status, 429)
        self.assertIn(b"acme", body)
        self.assertEqual(self.gw.request("POST", "/v1/chat/completions", chat())[0], 401)
        self.assertEqual(self.gw.request("POST", "/v1/chat/completions", "x" * 5000, auth)[0], 413)
        recs = self.gw.access_records(min_count=4)
        self.assertEqual(len(recs), 4, recs)
        ok, limited, unauth, too_big = recs
        for r in recs:
            self.assertRegex(r["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertRegex(r["client"], r"^127\.0\.0\.1:\d+$")
            for k, v in r.items():
                self.assertNotEqual(v, "", f"{k} is an empty string in {r}")
        self.assertEqual(ok["method"], "POST")
        self.assertEqual((ok["tenant"], ok["priority"], ok["status"]), ("acme", 3, 200))
        self.assertIsInstance(ok["queue_ms"], float)
        self.assertEqual((limited["tenant"], limited["priority"], limited["status"], limited["reason"]),
                         ("acme", 3, 429, "rate_limit"))
        self.assertEqual((unauth["tenant"], unauth["priority"], unauth["reason"]), ("-", None, "unauthorized"))
        self.assertEqual((too_big["status"], too_big["model"], too_big["pool"]), (413, "-", "-"))
        _, text = self.gw.admin("/metrics")
        self.assertEqual(metric_value(text, "sluice_rejects_total", reason="rate_limit", tenant="acme"), 1)
        self.assertEqual(metric_value(text, "sluice_rejects_total", reason="unauthorized", tenant="-"), 1)


class ModelAccess(unittest.TestCase):
    """With tenants, /v1/models needs a key like every API route; a tenant's allowed_models is what it
    sees and may use (any other model: the unknown model's 404); latency series by model/adapter."""

    @classmethod
    def setUpClass(cls):
        cls.up = FakeUpstream()
        extra = f"""  - {{name: m1-latest, alias_of: {MODEL}}}
  - {{name: lora-a, adapter_of: {MODEL}}}
  - {{name: m2, pool: p}}
tenants:
  - {{name: acme, key_sha256: {sha('acme-key')}, allowed_models: [{MODEL}, lora-a]}}
  - {{name: beta, key_sha256: {sha('beta-key')}}}
"""
        cls.text = base_config(cls.up.port, extra=extra)
        cls.gw = Gateway(SLUICE, cls.text)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.up.stop()

    def test_validate_summarises_the_allow_lists(self):
        code, out, err = validate(self.text)
        self.assertEqual(code, 0, err)
        self.assertIn(f"tenant acme (1 keys, priority 0, weight 1; no limits; models {MODEL}, lora-a)", out)
        self.assertIn("tenant beta (1 keys, priority 0, weight 1; no limits; every model)", out)

    def get(self, path, key=None):
        status, _, body = self.gw.request("GET", path, None, {"authorization": f"Bearer {key}"} if key else {})
        return status, json.loads(body)

    def post(self, model, key, stream=False):
        body = json.dumps({"model": model, "max_tokens": 4, "stream": stream,
                           "messages": [{"role": "user", "content": "hi"}]})
        status, _, data = self.gw.request("POST", "/v1/chat/completions", body, {"authorization": f"Bearer {key}"})
        return status, data

    def test_models_need_a_key_and_list_the_tenants_models(self):
        for path in ("/v1/models", f"/v1/models/{MODEL}"):
            status, body = self.get(path)
            self.assertEqual((status, body["error"]["code"]), (401, "missing_api_key"), path)
            status, body = self.get(path, "wrong-key")
            self.assertEqual((status, body["error"]["code"]), (401, "invalid_api_key"), path)
        status, body = self.get("/v1/models", "acme-key")
        self.assertEqual(status, 200)
        self.assertEqual([m["id"] for m in body["data"]], [MODEL, "lora-a"])
        status, body = self.get("/v1/models", "beta-key")
        self.assertEqual([m["id"] for m in body["data"]], [MODEL, "m1-latest", "lora-a", "m2"])
        self.assertEqual(self.get("/v1/models/lora-a", "acme-key")[1]["parent"], MODEL)
        # Not the tenant's: the very answer an unconfigured name gets (existence not revealed).
        hidden, unknown = self.get("/v1/models/m2", "acme-key"), self.get("/v1/models/zz", "acme-key")
        self.assertEqual((hidden[0], hidden[1]["error"]["code"]), (404, "model_not_found"))
        self.assertEqual(json.dumps(hidden[1]).replace("m2", "zz"), json.dumps(unknown[1]))
        self.assertEqual(self.get("/v1/models/m2", "beta-key")[0], 200)

    def test_requests_for_models_outside_the_allow_list_are_unknown(self):
        before = metric_value(self.gw.admin("/metrics")[1], "sluice_rejects_total", reason="model_not_allowed",
                              tenant="acme") or 0
        hidden, unknown = self.post("m2", "acme-key"), self.post("zz", "acme-key")
        self.assertEqual(hidden[0], 404)
        self.assertEqual(json.loads(hidden[1])["error"]["code"], "model_not_found")
        self.assertEqual(hidden[1].replace(b"m2", b"zz"), unknown[1])
        self.assertEqual(self.post("m1-latest", "acme-key")[0], 404, "an alias is its own name")
        self.assertEqual(self.post("lora-a", "acme-key")[0], 200)
        self.assertEqual(self.post("m2", "beta-key")[0], 200)
        def chat_records(recs):
            return {(r["model"], r["tenant"]): r for r in recs if r["path"] == "/v1/chat/completions"}
        by_model = chat_records(self.gw.access_records(
            until=lambda recs: {("m2", "acme"), ("zz", "acme")} <= chat_records(recs).keys()))
        self.assertEqual(by_model[("m2", "acme")]["reason"], "model_not_allowed")
        self.assertEqual(by_model[("zz", "acme")]["reason"], "unknown_model")
        text = self.gw.admin("/metrics")[1]
        self.assertEqual(metric_value(text, "sluice_rejects_total", reason="model_not_allowed", tenant="acme"), before + 2)

    def test_latency_series_by_model_and_adapter(self):
        text = self.gw.admin("/metrics")[1]
        base = dict(pool="p", model=MODEL, adapter="-")
        lora = dict(pool="p", model=MODEL, adapter="lora-a")
        b0 = metric_value(text, "sluice_ttft_seconds_count", **base) or 0
        l0 = metric_value(text, "sluice_ttft_seconds_count", **lora) or 0
        i0 = metric_value(text, "sluice_itl_seconds_count", **lora) or 0
        for model in (MODEL, "m1-latest", "lora-a"):  # the alias counts as its target
            self.assertEqual(self.post(model, "beta-key", stream=True)[0], 200)
        self.post("zz", "beta-key")
        text = self.gw.admin("/metrics")[1]
        self.assertEqual(metric_value(text, "sluice_ttft_seconds_count", **base), b0 + 2)
        self.assertEqual(metric_value(text, "sluice_ttft_seconds_count", **lora), l0 + 1)
        self.assertGreaterEqual(metric_value(text, "sluice_itl_seconds_count", **lora), i0 + 4)  # 5 chunks, 4 gaps
        self.assertGreaterEqual(metric_value(text, "sluice_request_duration_seconds_count", pool="-", model="-", adapter="-"), 1)
        # Only configured names (and "-") become label values: the client's "zz" never does.
        self.assertNotIn('model="zz"', text)


class UpstreamAuth(unittest.TestCase):
    def test_engine_key_replaces_the_clients_and_is_never_logged(self):
        up = FakeUpstream()
        d = tempfile.mkdtemp(prefix="sluice-key-")
        key_file = os.path.join(d, "engine-key")
        with open(key_file, "w") as f:
            f.write("engine-secret-123\n")
        text = base_config(up.port, pool_extra=f"    upstream_auth: {{api_key_file: {key_file}}}\n")
        gw = Gateway(SLUICE, text)
        try:
            self.assertEqual(gw.request("POST", "/v1/chat/completions", chat(), {"authorization": "Bearer client-key"})[0], 200)
            self.assertEqual(gw.request("POST", "/v1/chat/completions", chat())[0], 200)
            posts = [r for r in up.log() if r["method"] == "POST"]
            self.assertEqual(len(posts), 2)
            for p in posts:
                auth = [v for k, v in p["headers"].items() if k.lower() == "authorization"]
                self.assertEqual(auth, ["Bearer engine-secret-123"], p["headers"])
            gw.access_records(min_count=2)
            with open(gw.access_log) as f:
                self.assertNotIn("engine-secret", f.read())
        finally:
            gw.stop()
            up.stop()
        err = gw.proc.stderr.read().decode(errors="replace")
        self.assertNotIn("engine-secret", err)
        # The env form, and an endpoint's own key over its pool's.
        code, out, err = validate(base_config(9, pool_extra="    upstream_auth: {api_key_env: SLUICE_TEST_KEY}\n",
                                              endpoint=f"{{address: 127.0.0.1:9, upstream_auth: {{api_key_file: {key_file}}}}}"),
                                  env={"SLUICE_TEST_KEY": "from-env"})
        self.assertEqual(code, 0, err)
        code, _, err = validate(base_config(9, pool_extra="    upstream_auth: {api_key_file: /nonexistent/key}\n"))
        self.assertIn("pools[0].upstream_auth.api_key_file: cannot read '/nonexistent/key'", err)
        code, _, err = validate(base_config(9, pool_extra=f"    upstream_auth: {{api_key_file: {key_file}, api_key_env: X}}\n"))
        self.assertIn("pools[0].upstream_auth: give exactly one of api_key_file and api_key_env", err)


class Stdout(unittest.TestCase):
    def test_stdout_carries_only_access_log_lines(self):
        up = FakeUpstream()
        d = tempfile.mkdtemp(prefix="sluice-stdout-")
        path = os.path.join(d, "c.yaml")
        with open(path, "w") as f:
            f.write(base_config(up.port))
        proc = subprocess.Popen([SLUICE, "serve", "-c", path, "--access-log", "-"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, bufsize=0)
        try:
            line = read_line_matching(proc.stderr, "listening on", 30 if SLOW else 10)
            port = int(line.split("http://")[1].split(":")[1].split()[0])
            import http.client
            for _ in range(3):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("POST", "/v1/chat/completions", body=chat())
                c.getresponse().read()
                c.close()
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            up.stop()
        lines = [l for l in out.decode().splitlines() if l.strip()]
        self.assertEqual(len(lines), 3, out)
        for l in lines:
            self.assertEqual(json.loads(l)["status"], 200)


class OverheadPhases(unittest.TestCase):
    """sluice_gateway_overhead_seconds tells the engine's back-pressure on a long request body
    (send_request) from the engine's own time to answer (first_upstream_byte)."""

    def test_a_slow_reading_engine_shows_in_send_request(self):
        # An engine that reads a request's body 0.6 s late, through a 4 KB receive buffer.
        up = HostileUpstream("ok", rcvbuf=4096)
        gw = None
        try:
            gw = Gateway(SLUICE, base_config(up.port).replace("max_body_bytes: 4096", "max_body_bytes: 8388608"))
            # 6 MB: more than the gateway's socket can hold (tcp_wmem's 4 MB at most) and the engine's
            # 4 KB buffer, so its write ends only once the engine has read most of it.
            status, _, body = gw.request("POST", "/v1/chat/completions", chat("x" * (6 << 20)),
                                         {"content-type": "application/json", "x-hostile-read-delay-ms": "600"},
                                         timeout=20)
            self.assertEqual(status, 200, body[:300])
            text = gw.admin("/metrics")[1]
            b = "sluice_gateway_overhead_seconds"
            self.assertEqual(metric_value(text, b + "_count", phase="send_request"), 1)
            self.assertGreaterEqual(metric_value(text, b + "_sum", phase="send_request"), 0.45)
            self.assertEqual(metric_value(text, b + "_count", phase="first_upstream_byte"), 1)
            self.assertLess(metric_value(text, b + "_sum", phase="first_upstream_byte"), 0.3)
        finally:
            if gw:
                gw.stop()
            up.stop()


class MetricsDocs(unittest.TestCase):
    def test_docs_and_a_real_scrape_agree(self):
        import metrics_contract
        up = FakeUpstream()
        tenants = f"tenants:\n  - {{name: acme, key_sha256: {sha('acme-key')}, limits: {{requests_per_min: 1}}}}\n"
        gw = Gateway(SLUICE, base_config(up.port, extra=tenants))
        try:
            auth = {"authorization": "Bearer acme-key"}
            gw.request("POST", "/v1/chat/completions", chat(), auth)
            gw.request("POST", "/v1/chat/completions", chat(), auth)  # a reject
            _, text = gw.admin("/metrics")
        finally:
            gw.stop()
            up.stop()
        exported = {}
        for line in text.splitlines():
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if m:
                exported[m.group(1)] = m.group(2)
        documented = metrics_contract.families()
        self.assertEqual(sorted(set(exported) - set(documented)), [], "exported but missing from docs/metrics.md")
        # Families of the optional subsystems appear only when their config section is set (ext_proc:,
        # discovery:, kv_events:, redis:, token_ids: {source: render}, peer_load:); their own integration tests scrape them.
        gated = ("sluice_ext_proc_", "sluice_discovery_", "sluice_kv_", "sluice_redis_", "sluice_shared_budget_",
                 "sluice_render_", "sluice_peer_load_")
        self.assertEqual(sorted(n for n in set(documented) - set(exported) if not n.startswith(gated)), [],
                         "documented but not exported")
        for name, kind in exported.items():
            self.assertEqual(documented[name][0], kind, name)
        # Label names of every sample present agree with the documented ones.
        for line in text.splitlines():
            m = re.match(r"([a-z_:]+)\{([^}]*)\} ", line)
            if not m:
                continue
            name = m.group(1)
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in documented and documented[name[: -len(suffix)]][0] == "histogram":
                    name = name[: -len(suffix)]
            labels = [kv.split("=", 1)[0] for kv in re.findall(r'([a-z_]+="(?:[^"\\]|\\.)*")', m.group(2))]
            labels = [l for l in labels if l != "le"]
            self.assertEqual(sorted(labels), sorted(documented[name][1]), line)


def main():
    global SLUICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
