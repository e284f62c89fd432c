#!/usr/bin/env python3
"""A tiny OpenAI-compatible model server for the gateway's integration tests (stdlib only).

Prints "PORT <n>" on stdout once listening. Behaviour is steered by request headers (the gateway
forwards them):
  x-fake-tokens: N            output chunks to stream (default 5)
  x-fake-token-delay-ms: MS   pause between streamed chunks (default 0)
  x-fake-first-byte-delay-ms: MS  pause before the response head
  x-fake-stall-after: N       stream N chunks, then stop sending (but keep the connection open)
  x-fake-split: 1             write every SSE event in two halves, the cut inside a CRLF
  x-fake-crlf: 1              end SSE lines with CRLF instead of LF
  x-fake-status: CODE         answer with this status and an OpenAI error body
  x-fake-retry-after: S       with x-fake-status: a Retry-After of S seconds on that answer
  x-fake-close: 1             close the connection right after reading the request
  x-fake-close-after-ms: MS   answer normally (keep-alive), then silently close the connection
With --tls-cert/--tls-key it serves HTTPS. Records every request; GET /_log returns them as JSON (method, path, headers, body, model,
disconnected, completed, connection id), GET /_stats the number of TCP connections accepted.
"""
import argparse
import json
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
LOG = []
CONNECTIONS = [0]


def chunk_id(i):
    return f"chatcmpl-fake{i}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        with LOCK:
            CONNECTIONS[0] += 1
            self.conn_id = CONNECTIONS[0]

    def log_message(self, *args):
        pass

    def _json(self, status, obj, extra=None):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/_log":
            with LOCK:
                self._json(200, LOG)
        elif self.path == "/_stats":
            with LOCK:
                self._json(200, {"connections": CONNECTIONS[0]})
        elif self.path in ("/health", "/healthz"):
            self._json(200, {})
        elif self.path == "/metrics":
            body = b"vllm:num_requests_waiting 0\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error", "param": None, "code": None}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        try:
            req = json.loads(raw)
        except ValueError:
            req = {}
        rec = {"method": "POST", "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
               "body": raw.decode("utf-8", "replace"), "model": req.get("model"), "disconnected": False,
               "completed": False, "conn": self.conn_id}
        with LOCK:
            LOG.append(rec)
        h = self.headers
        if h.get("x-fake-close"):
            self.close_connection = True
            self.connection.shutdown(2)
            return
        delay = float(h.get("x-fake-first-byte-delay-ms", "0")) / 1000
        if delay:
            time.sleep(delay)
        if h.get("x-fake-status"):
            code = int(h["x-fake-status"])
            extra = {"Retry-After": h["x-fake-retry-after"]} if h.get("x-fake-retry-after") else None
            self._json(code, {"error": {"message": f"fake error {code}", "type": "server_error", "param": None, "code": None}},
                       extra)
            rec["completed"] = True
            return
        model = req.get("model")
        if self.path == "/v1/embeddings":
            self._json(200, {"object": "list", "model": model, "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                             "usage": {"prompt_tokens": 3, "total_tokens": 3}})
            rec["completed"] = True
            return
        tokens = int(h.get("x-fake-tokens", "5"))
        if not req.get("stream"):
            text = " ".join(f"tok{i}" for i in range(tokens))
            if self.path == "/v1/chat/completions":
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                obj = "chat.completion"
            else:
                choice = {"index": 0, "text": text, "finish_reason": "stop"}
                obj = "text_completion"
            self._json(200, {"id": "cmpl-fake", "object": obj, "created": 1700000000, "model": model, "choices": [choice],
                             "usage": {"prompt_tokens": 11, "completion_tokens": tokens, "total_tokens": 11 + tokens,
                                       "prompt_tokens_details": {"cached_tokens": 0}}})
            rec["completed"] = True
            if h.get("x-fake-close-after-ms"):
                conn = self.connection
                threading.Timer(float(h["x-fake-close-after-ms"]) / 1000, lambda: conn.shutdown(2)).start()
            return
        self.stream(rec, req, tokens, h)

    def stream(self, rec, req, tokens, h):
        nl = "\r\n" if h.get("x-fake-crlf") else "\n"
        split = bool(h.get("x-fake-split"))
        gap = float(h.get("x-fake-token-delay-ms", "0")) / 1000
        stall = int(h.get("x-fake-stall-after", "-1"))
        model = req.get("model")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(data):
            payload = data.encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

        def event(obj):
            text = "data: " + (obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))) + nl + nl
            if split:
                cut = len(text) - len(nl) - (1 if nl == "\r\n" else 0)  # inside the final line end
                send(text[:cut])
                time.sleep(0.005)
                send(text[cut:])
            else:
                send(text)

        try:
            for i in range(tokens):
                if i == stall:
                    time.sleep(3600)
                if i == 0:
                    delta = {"role": "assistant", "content": f"tok{i}"}
                else:
                    delta = {"content": f" tok{i}"}
                event({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                if gap:
                    time.sleep(gap)
            if (req.get("stream_options") or {}).get("include_usage"):
                event({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
                       "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": tokens, "total_tokens": 11 + tokens,
                                                "prompt_tokens_details": {"cached_tokens": 0}}})
            event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            rec["completed"] = True
        except (BrokenPipeError, ConnectionResetError, OSError):
            rec["disconnected"] = True
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1", help="a loopback address (127.0.0.0/8)")
    ap.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate chain (and --tls-key)")
    ap.add_argument("--tls-key")
    args = ap.parse_args()
    srv = Server((args.host, args.port), Handler)
    if args.tls_cert:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(f"PORT {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
