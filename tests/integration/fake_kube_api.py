"""A small fake Kubernetes API server for the discovery test: serves the InferencePool object, pod
lists and pod watches (newline-delimited JSON events over a chunked response) in the shapes the real
API server uses (recorded: metadata.resourceVersion, items[], {"type":..,"object":..} events, Status
objects for errors), checks the bearer token, and lets the test add/modify/delete pods, break the
watch, and change the accepted token. Standard library only; not a test itself."""
import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


def pod(name, ip, ready=True, labels=None, rv="1", deleting=False):
    meta = {"name": name, "namespace": "ml", "uid": "uid-" + name, "resourceVersion": rv,
            "labels": labels or {"app": "vllm-llama"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta,
            "spec": {"containers": [{"name": "vllm", "ports": [{"containerPort": 8000}]}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                       "conditions": [{"type": "Initialized", "status": "True"},
                                      {"type": "Ready", "status": "True" if ready else "False"},
                                      {"type": "ContainersReady", "status": "True" if ready else "False"}]}}


class FakeKube:
    def __init__(self, token, pool_ports=(8000,)):
        self.token = token
        self.rv = 100
        self.pods = {}
        self.watchers = []        # queues of live watches
        self.lists = 0
        self.watch_rvs = []       # resourceVersion of each watch request
        self.events = []          # (resourceVersion, event): a watch from version R replays those after R
        self.lock = threading.Lock()
        self.pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
                     "metadata": {"name": "llama", "namespace": "ml"},
                     "spec": {"selector": {"matchLabels": {"app": "vllm-llama"}},
                              "targetPorts": [{"number": p} for p in pool_ports],
                              "endpointPickerRef": {"name": "sluice-epp", "port": {"number": 9002}, "failureMode": "FailClose"}}}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send_json(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    return self.send_json(401, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                                "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
                u = urlparse(self.path)
                q = parse_qs(u.query)
                if u.path == "/apis/inference.networking.k8s.io/v1/namespaces/ml/inferencepools/llama":
                    return self.send_json(200, fake.pool)
                if u.path != "/api/v1/namespaces/ml/pods":
                    return self.send_json(404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404})
                if q.get("labelSelector") != ["app=vllm-llama"]:
                    return self.send_json(400, {"kind": "Status", "status": "Failure", "message": "bad selector", "code": 400})
                if q.get("watch") != ["true"]:
                    with fake.lock:
                        fake.lists += 1
                        items = list(fake.pods.values())
                        rv = str(fake.rv)
                    return self.send_json(200, {"kind": "PodList", "apiVersion": "v1",
                                                "metadata": {"resourceVersion": rv}, "items": items})
                w = queue.Queue()
                since = q.get("resourceVersion", ["0"])[0]
                with fake.lock:
                    fake.watch_rvs.append(since)
                    for rv, ev in fake.events:
                        if since.isdigit() and rv > int(since):
                            w.put(ev)
                    fake.watchers.append(w)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while True:
                        ev = w.get()
                        if ev is None:  # break the watch: the connection ends mid-stream
                            self.close_connection = True
                            return
                        line = (json.dumps(ev) + "\n").encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                except OSError:
                    return
                finally:
                    with fake.lock:
                        if w in fake.watchers:
                            fake.watchers.remove(w)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _event(self, type_, obj):
        with self.lock:
            ev = {"type": type_, "object": obj}
            self.events.append((int(obj["metadata"]["resourceVersion"]), ev))
            for w in self.watchers:
                w.put(ev)

    def put(self, name, ip, ready=True):
        with self.lock:
            self.rv += 1
            new = name not in self.pods
            self.pods[name] = pod(name, ip, ready, rv=str(self.rv))
            obj = self.pods[name]
        self._event("ADDED" if new else "MODIFIED", obj)

    def delete(self, name):
        with self.lock:
            self.rv += 1
            obj = self.pods.pop(name)
            obj["metadata"]["resourceVersion"] = str(self.rv)
        self._event("DELETED", obj)

    def break_watches(self):
        with self.lock:
            ws = list(self.watchers)
            self.watchers.clear()
        for w in ws:
            w.put(None)

    def live_watches(self):
        with self.lock:
            return len(self.watchers)

    def stop(self):
        self.break_watches()
        self.server.shutdown()
