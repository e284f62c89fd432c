"""Deployment files (issue 19): what can be checked without a container engine or a cluster.

- `cmake --install` of this build into a temporary prefix yields a binary that runs (--version),
  serves its embedded dashboard (the web assets are inside the binary), and an example config
  that validates; the unit, manifests, Containerfile, docs and LICENSE are installed.
- deploy/Containerfile: every path it COPYs from the build context exists; multi-stage, Debian base;
  the runtime stage installs a package for every shared library `ldd sluice` lists (no engine
  here: the image is not built by this test).
- deploy/kubernetes: every document parses (PyYAML when /usr/bin/python3 has it, else `kubectl
  kustomize`), the Deployment's readiness probe is /readyz, the ConfigMap's sluice.yaml
  validates with `sluice validate` (its key file replaced by a temporary one), and kustomize
  renders the directory when kubectl is installed (client side only: nothing contacts a cluster).
- deploy/systemd/sluice.service: `systemd-analyze verify` when present (binary paths pointed at
  the installed prefix), else the required keys.

Run: python3 test_deploy.py --sluice path/to/sluice"""
import argparse
import glob
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_harness import loopback_endpoints, read_line_matching  # noqa: E402

SLUICE = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLOW = os.environ.get("SLUICE_SANITIZED") == "1"


def yaml_docs(path):
    """The YAML documents of a file, parsed, or None when no YAML parser is available."""
    try:
        import yaml  # python3-yaml (Debian)
    except ImportError:
        # The python3 running the tests may lack Debian's modules: ask /usr/bin/python3.
        if not os.path.exists("/usr/bin/python3"):
            return None
        import json
        r = subprocess.run(["/usr/bin/python3", "-c", "import json, sys, yaml; "
                            "print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))", path],
                           capture_output=True, text=True, timeout=30)
        return json.loads(r.stdout) if r.returncode == 0 else None
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


class Install(unittest.TestCase):
    def test_cmake_install_layout_runs(self):
        build_dir = os.path.dirname(SLUICE)
        if not os.path.exists(os.path.join(build_dir, "cmake_install.cmake")):
            self.skipTest("not a CMake build directory")
        prefix = tempfile.mkdtemp(prefix="sluice-prefix-")
        try:
            r = subprocess.run(["cmake", "--install", build_dir, "--prefix", prefix], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            binary = os.path.join(prefix, "bin", "sluice")
            for rel in ("bin/sluice", "etc/sluice/sluice.yaml", "lib/systemd/system/sluice.service",
                        "share/sluice/prometheus/sluice-alerts.yml", "share/sluice/grafana/sluice-dashboard.json",
                        "share/sluice/kubernetes/deployment.yaml", "share/sluice/Containerfile",
                        "share/doc/sluice/LICENSE", "share/doc/sluice/config.md", "share/doc/sluice/operations.md"):
                self.assertTrue(os.path.exists(os.path.join(prefix, rel)), rel)
            r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 0)
            self.assertTrue(r.stdout.startswith("sluice "), r.stdout)
            r = subprocess.run([binary, "validate", "-c", os.path.join(prefix, "etc/sluice/sluice.yaml")],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            # The installed binary serves the dashboard from itself (no files beside it).
            cfg = os.path.join(prefix, "gw.yaml")
            with open(os.path.join(prefix, "etc/sluice/sluice.yaml")) as f:
                text = loopback_endpoints(f.read().replace("127.0.0.1:8080", "127.0.0.1:0").replace("127.0.0.1:9090", "127.0.0.1:0"))
            with open(cfg, "w") as f:
                f.write(text)
            proc = subprocess.Popen([binary, "serve", "-c", cfg, "--access-log", "off"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, cwd=prefix, bufsize=0)
            try:
                line = read_line_matching(proc.stderr, "listening on", 30 if SLOW else 10)
                admin = int(line.split("http://")[2].split(":")[1].split(")")[0])
                c = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
                c.request("GET", "/dashboard")
                r = c.getresponse()
                page = r.read().decode()
                c.close()
                self.assertEqual(r.status, 200)
                self.assertNotIn("assets not built", page, "the dashboard must be embedded (scripts/build-web.sh)")
            finally:
                proc.kill()
                proc.wait(5)
        finally:
            shutil.rmtree(prefix, ignore_errors=True)


class Containerfile(unittest.TestCase):
    def test_copied_paths_exist_and_runtime_has_the_libraries(self):
        path = os.path.join(ROOT, "deploy", "Containerfile")
        text = open(path).read()
        stages = re.findall(r"^FROM\s+(\S+)", text, re.M)
        self.assertGreaterEqual(len(stages), 2, "multi-stage")
        self.assertTrue(all("debian" in s for s in stages), stages)
        copies = re.findall(r"^COPY\s+(?!--from)(.+)$", text, re.M)
        self.assertTrue(copies)
        for line in copies:
            srcs = line.split()[:-1]
            for src in srcs:
                self.assertTrue(os.path.exists(os.path.join(ROOT, src)), f"COPY {src}: missing in the build context")
        # Every shared library of the binary has a package in the runtime stage.
        runtime = text.split("FROM", 2)[2]
        r = subprocess.run(["ldd", SLUICE], capture_output=True, text=True, timeout=10)
        if r.returncode != 0 or os.environ.get("SLUICE_SANITIZED") == "1":
            self.skipTest("ldd unavailable or a sanitized build (its runtime differs)")
        for lib in re.findall(r"^\s*(\S+\.so[.\d]*) =>", r.stdout, re.M):
            if re.match(r"lib(c|m|gcc_s|stdc\+\+|pthread|dl|rt|resolv)\.so", lib):
                continue  # in the base image
            owner = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True, timeout=10).stdout
            pkgs = {l.split(":")[0] for l in owner.splitlines() if l}
            self.assertTrue(pkgs & set(re.findall(r"[a-z0-9][a-z0-9.+-]+", runtime)), f"{lib} ({pkgs}) not installed in the runtime stage")


class Kubernetes(unittest.TestCase):
    def test_manifests(self):
        kdir = os.path.join(ROOT, "deploy", "kubernetes")
        # The standalone gateway is the kustomization and what it lists; the Endpoint Picker's manifests
        # (sluice-epp.yaml, inferencepool.yaml, envoy-gateway.yaml) are a separate install, checked below.
        kust = open(os.path.join(kdir, "kustomization.yaml")).read()
        listed = re.findall(r"^\s*-\s*(\S+\.yaml)\s*$", kust, re.M)
        files = [os.path.join(kdir, "kustomization.yaml")] + [os.path.join(kdir, f) for f in listed]
        self.assertTrue(listed)
        for f in sorted(glob.glob(os.path.join(kdir, "*.yaml"))):
            if f not in files and yaml_docs(f) is not None:
                for d in yaml_docs(f):
                    self.assertIn("apiVersion", d, f)
                    self.assertIn("kind", d, f)
        docs = []
        parsed = True
        for f in files:
            d = yaml_docs(f)
            if d is None:
                parsed = False
                break
            docs += d
        kubectl = shutil.which("kubectl")
        if kubectl:
            # Client side only: kustomize renders the directory without contacting a cluster.
            r = subprocess.run([kubectl, "kustomize", kdir], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "KUBECONFIG": "/dev/null"})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("kind: Deployment", r.stdout)
        if not parsed:
            if not kubectl:
                self.skipTest("neither PyYAML nor kubectl")
            return
        kinds = {d["kind"]: d for d in docs if "kind" in d}
        for k in ("Deployment", "Service", "ConfigMap", "Kustomization"):
            self.assertIn(k, kinds)
        for d in docs:
            self.assertIn("apiVersion", d)
            if d["kind"] != "Kustomization":
                self.assertIn("name", d["metadata"])
        dep = kinds["Deployment"]
        spec = dep["spec"]["template"]["spec"]
        main = [c for c in spec["containers"] if c["name"] == "sluice"][0]
        self.assertEqual(main["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual(main["livenessProbe"]["httpGet"]["path"], "/healthz")
        ports = {p["name"]: p["containerPort"] for p in main["ports"]}
        self.assertEqual(ports, {"http": 8080, "admin": 9090})
        self.assertTrue(spec.get("shareProcessNamespace"), "the reloader signals sluice")
        self.assertGreater(spec["terminationGracePeriodSeconds"], 30, "above drain_timeout_ms")
        self.assertEqual(dep["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
        # The ConfigMap's config is a valid sluice config.
        cfg = kinds["ConfigMap"]["data"]["sluice.yaml"]
        d = tempfile.mkdtemp(prefix="sluice-k8s-")
        key = os.path.join(d, "key")
        with open(key, "w") as f:
            f.write("k\n")
        path = os.path.join(d, "c.yaml")
        with open(path, "w") as f:
            f.write(cfg.replace("/etc/sluice-secrets/vllm-api-key", key))
        r = subprocess.run([SLUICE, "validate", "-c", path], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("listen 0.0.0.0:8080", r.stdout)
        # The secret mount matches the path the config reads.
        mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
        self.assertTrue("/etc/sluice-secrets/vllm-api-key".startswith(mounts["engine-key"]))
        self.assertEqual(mounts["config"], "/etc/sluice")


class Systemd(unittest.TestCase):
    def test_unit(self):
        unit = os.path.join(ROOT, "deploy", "systemd", "sluice.service")
        text = open(unit).read()
        for key in ("ExecStart=", "ExecReload=/bin/kill -HUP $MAINPID", "ExecStartPre=", "[Install]"):
            self.assertIn(key, text)
        sa = shutil.which("systemd-analyze")
        if not sa:
            return
        d = tempfile.mkdtemp(prefix="sluice-unit-")
        shutil.copy(SLUICE, os.path.join(d, "sluice"))
        local = os.path.join(d, "sluice.service")
        with open(local, "w") as f:
            f.write(text.replace("/usr/local/bin/sluice", os.path.join(d, "sluice"))
                    .replace("LoadCredential=vllm-api-key:/etc/sluice/vllm-api-key\n", ""))
        r = subprocess.run([sa, "verify", local], capture_output=True, text=True, timeout=60)
        # Messages about the host's own units (no systemd running in a container) are not ours.
        ours = [l for l in (r.stdout + r.stderr).splitlines() if "sluice.service" in l]
        self.assertEqual(ours, [], r.stdout + r.stderr)


def main():
    global SLUICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
