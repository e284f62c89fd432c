"""Envoy's role in an Endpoint Picker exchange, for the ext_proc integration test and the ext_proc
benchmark: a Python gRPC client (Debian's python3-grpcio) of envoy.service.ext_proc.v3 with stubs
generated at run time from the repository's protos (protoc + grpc_python_plugin), speaking
FULL_DUPLEX_STREAMED as Envoy does: request headers, body chunks, then (after the picker's
answer) the response headers and body chunks of the engine it forwarded to. Needs
/usr/bin/python3 (the Debian modules); not a test itself."""
import http.client
import importlib
import os
import queue
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_DIR = os.path.join(REPO, "proto")
_STUBS = None


def stubs():
    """(pb2, pb2_grpc, processing_mode_pb2), generated once per process into a temporary directory."""
    global _STUBS
    if _STUBS:
        return _STUBS
    out = tempfile.mkdtemp(prefix="sluice-extproc-py-")
    protos = [os.path.relpath(os.path.join(d, f), PROTO_DIR)
              for d, _, fs in os.walk(os.path.join(PROTO_DIR, "envoy")) for f in fs if f.endswith(".proto")]
    subprocess.run(["protoc", f"-I{PROTO_DIR}", f"--python_out={out}", f"--grpc_python_out={out}",
                    "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin", *protos], check=True)
    sys.path.insert(0, out)
    pb2 = importlib.import_module("envoy.service.ext_proc.v3.external_processor_pb2")
    grpc_mod = importlib.import_module("envoy.service.ext_proc.v3.external_processor_pb2_grpc")
    pm = importlib.import_module("envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2")
    _STUBS = (pb2, grpc_mod, pm)
    return _STUBS


class Result:
    def __init__(self):
        self.immediate = None      # (status, headers dict, body bytes) for an immediate response
        self.destination = None    # the x-gateway-destination-endpoint header value
        self.metadata_destination = None
        self.set_headers = {}      # request header mutation
        self.removed = []
        self.clear_route_cache = False
        self.body = b""            # the request body as the picker sent it on
        self.upstream_status = None
        self.response_set_headers = {}
        self.response_removed = []
        self.response_body = b""   # the response body as the picker passed it on


class Envoy:
    def __init__(self, channel):
        pb2, grpc_mod, pm = stubs()
        self.pb2, self.pm = pb2, pm
        self.stub = grpc_mod.ExternalProcessorStub(channel)

    def _headers_msg(self, pairs, eos, subset=None, protocol=True):
        m = self.pb2.ProcessingRequest()
        for k, v in pairs:
            m.request_headers.headers.headers.add(key=k, raw_value=v.encode())
        m.request_headers.end_of_stream = eos
        if protocol:
            m.protocol_config.request_body_mode = self.pm.ProcessingMode.FULL_DUPLEX_STREAMED
            m.protocol_config.response_body_mode = self.pm.ProcessingMode.FULL_DUPLEX_STREAMED
        if subset is not None:
            m.metadata_context.filter_metadata["envoy.lb.subset_hint"].update(
                {"x-gateway-destination-endpoint-subset": list(subset)})
        return m

    def open(self):
        """A raw stream: (send, responses iterator, call)."""
        q = queue.Queue()
        call = self.stub.Process(iter(q.get, None))
        return q.put, call, call

    def decide(self, path, body, headers=(), subset=None, chunks=3, timeout=10):
        """Sends the request side; returns (Result, send, responses, call) after the picker's answer
        (the header response and the whole body response, or an immediate response)."""
        send, responses, call = self.open()
        res = Result()
        pairs = [(":method", "POST"), (":path", path), (":authority", "sluice-test"), (":scheme", "http"),
                 ("content-type", "application/json"), ("content-length", str(len(body)))] + list(headers)
        send(self._headers_msg(pairs, eos=False, subset=subset))
        step = max(1, (len(body) + chunks - 1) // chunks)
        parts = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
        for i, part in enumerate(parts):
            m = self.pb2.ProcessingRequest()
            m.request_body.body = part
            m.request_body.end_of_stream = i == len(parts) - 1
            send(m)
        first = next(responses)
        kind = first.WhichOneof("response")
        if kind == "immediate_response":
            im = first.immediate_response
            res.immediate = (im.status.code, {h.header.key: (h.header.raw_value or h.header.value.encode()).decode()
                                              for h in im.headers.set_headers}, im.body)
            return res, send, responses, call
        assert kind == "request_headers", kind
        common = first.request_headers.response
        for h in common.header_mutation.set_headers:
            res.set_headers[h.header.key.lower()] = (h.header.raw_value or h.header.value.encode()).decode()
        res.removed = list(common.header_mutation.remove_headers)
        res.clear_route_cache = common.clear_route_cache
        res.destination = res.set_headers.get("x-gateway-destination-endpoint")
        lb = first.dynamic_metadata.fields["envoy.lb"].struct_value.fields
        res.metadata_destination = lb["x-gateway-destination-endpoint"].string_value
        while True:
            r = next(responses)
            assert r.WhichOneof("response") == "request_body", r
            sr = r.request_body.response.body_mutation.streamed_response
            res.body += sr.body
            if sr.end_of_stream:
                break
        return res, send, responses, call

    def respond(self, res, send, responses, status, headers, chunks, served=None):
        """Plays the response side: response headers, then each body chunk (the last with
        end_of_stream), collecting what the picker passes on."""
        m = self.pb2.ProcessingRequest()
        m.response_headers.headers.headers.add(key=":status", raw_value=str(status).encode())
        for k, v in headers:
            m.response_headers.headers.headers.add(key=k, raw_value=v.encode())
        if served:
            m.metadata_context.filter_metadata["envoy.lb"].update({"x-gateway-destination-endpoint-served": served})
        send(m)
        r = next(responses)
        assert r.WhichOneof("response") == "response_headers", r
        for h in r.response_headers.response.header_mutation.set_headers:
            res.response_set_headers[h.header.key.lower()] = (h.header.raw_value or h.header.value.encode()).decode()
        res.response_removed = list(r.response_headers.response.header_mutation.remove_headers)
        chunks = list(chunks)
        for i, c in enumerate(chunks + [b""]):
            m = self.pb2.ProcessingRequest()
            m.response_body.body = c
            m.response_body.end_of_stream = i == len(chunks)
            send(m)
            r = next(responses)
            assert r.WhichOneof("response") == "response_body", r
            res.response_body += r.response_body.response.body_mutation.streamed_response.body

    def route_and_forward(self, path, body, headers=(), subset=None, upstream_headers=()):
        """The whole request as Envoy would run it: decide, forward to the first destination,
        stream the engine's response back through the picker. Returns the Result."""
        res, send, responses, call = self.decide(path, body, headers, subset)
        if res.immediate:
            send(None)
            return res
        host, port = res.destination.split(",")[0].rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            fwd = {"content-type": "application/json", "content-length": str(len(res.body))}
            fwd.update(dict(upstream_headers))
            c.request("POST", path, body=res.body, headers=fwd)
            r = c.getresponse()
            res.upstream_status = r.status
            hdrs = [(k.lower(), v) for k, v in r.getheaders() if k.lower() not in ("transfer-encoding", "connection")]
            chunks = []
            while True:
                b = r.read1(65536)
                if not b:
                    break
                chunks.append(b)
            self.respond(res, send, responses, r.status, hdrs, chunks, served=res.destination.split(",")[0])
        finally:
            c.close()
        send(None)
        for _ in responses:  # the server finishes the stream
            pass
        return res
