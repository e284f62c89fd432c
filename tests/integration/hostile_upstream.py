#!/usr/bin/env python3
"""A model server that misbehaves on purpose, for the gateway's hardening tests (stdlib only, raw
sockets, one thread per connection). Prints "PORT <n>" once listening.

The behaviour of a POST is its mode: the `x-hostile` request header if present (the gateway
forwards it), else --mode. GET /_stats (answered in every mode except `hang`) returns
{"requests": n, "concurrent": now, "max_concurrent": peak, "connections": n} (a POST counts as concurrent
from its head read until just before its answer's last bytes are sent); GET /_reset zeroes
the peak; GET /health and /metrics answer 200 (vLLM-style gauges) unless the mode is `hang`.

  ok            a normal answer: JSON (Content-Length) or, for "stream": true, chunked SSE; the
                body carries "seq" (the request's number) so a test can tell responses apart
  continue100   `HTTP/1.1 100 Continue` then the real 200 (an interim response the gateway must skip)
  hang          accepts and reads, never answers, GETs included (a SIGSTOPped engine)
  comments      200 SSE that sends only `: keep-alive` comments, every 100 ms, forever
  midfail       200 SSE, two token events, then the connection is cut (no last chunk)
  short_cl      Content-Length says 200 bytes more than it sends, then closes
  long_cl       sends 64 bytes more than Content-Length says (junk after the body)
  bad_chunked   a chunked body with an invalid chunk-size line
  huge_headers  a 200 with 200 KiB of response headers
  garbage       a response line that is not HTTP
Request headers steering `ok`: x-hostile-delay-ms (before the head), x-hostile-tokens (SSE events,
default 5), x-hostile-gap-ms (between events). In every mode, x-hostile-read-delay-ms: the body (what
did not come with the head) is read only after that long. --rcvbuf BYTES sets the listening socket's
receive buffer (the accepted ones inherit it, without autotuning): with a long body and a read delay,
the gateway's send of the request waits on TCP back-pressure.
"""
import argparse
import json
import socket
import sys
import threading
import time

LOCK = threading.Lock()
STATS = {"requests": 0, "concurrent": 0, "max_concurrent": 0, "connections": 0}
MODE = ["ok"]


def read_request(conn, buf):
    """One request (head + Content-Length body) from `buf`+socket: (method, path, headers, body, rest) or None."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, rest = buf.split(b"\r\n\r\n", 1)
    rest = bytearray(rest)  # appended to in place: a long body read in small pieces stays linear
    lines = head.decode("latin-1").split("\r\n")
    method, path = lines[0].split(" ")[:2]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    if len(rest) < n and "x-hostile-read-delay-ms" in headers:  # an engine slow to read the body
        time.sleep(float(headers["x-hostile-read-delay-ms"]) / 1000)
    while len(rest) < n:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    return method, path, headers, bytes(rest[:n]), bytes(rest[n:])


def json_response(obj, status=200, extra=b""):
    body = json.dumps(obj, separators=(",", ":")).encode()
    return (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
            + extra + b"\r\n" + body)


def completion(req, seq, tokens=5):
    return {"id": f"cmpl-hostile-{seq}", "object": "chat.completion", "created": 1700000000, "model": req.get("model"),
            "seq": seq, "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(f"tok{i}" for i in range(tokens))},
                                     "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": tokens, "total_tokens": 11 + tokens}}


def chunk(data):
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(req, i, seq):
    delta = {"role": "assistant", "content": f"tok{i}"} if i == 0 else {"content": f" tok{i}"}
    obj = {"id": f"chatcmpl-hostile-{seq}", "object": "chat.completion.chunk", "created": 1700000000, "model": req.get("model"),
           "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    return chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def answer_get(conn, path):
    if path == "/_stats":
        with LOCK:
            conn.sendall(json_response(dict(STATS)))
    elif path == "/_reset":
        with LOCK:
            STATS["max_concurrent"] = STATS["concurrent"]
            conn.sendall(json_response(dict(STATS)))
    elif path == "/metrics":
        with LOCK:
            running = STATS["concurrent"]
        body = f"vllm:num_requests_running {running}\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.1\n".encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    else:
        conn.sendall(json_response({}))


def answer_post(conn, mode, headers, body, seq, end):
    """Returns False when the connection must close afterwards. `ok` calls end() just before its
    answer's last bytes: the request stops counting as concurrent before the gateway can see it end."""
    try:
        req = json.loads(body or b"{}")
    except ValueError:
        req = {}
    stream = bool(req.get("stream"))
    delay = float(headers.get("x-hostile-delay-ms", "0")) / 1000
    if mode == "continue100":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        time.sleep(0.05)
        conn.sendall(json_response(completion(req, seq)))
        return True
    if mode == "comments":
        conn.sendall(SSE_HEAD)
        while True:
            conn.sendall(chunk(b": keep-alive\n\n"))
            time.sleep(0.1)
    if mode == "midfail":
        conn.sendall(SSE_HEAD + event(req, 0, seq) + event(req, 1, seq))
        time.sleep(0.1)
        conn.shutdown(socket.SHUT_RDWR)
        return False
    if mode == "short_cl":
        payload = json.dumps(completion(req, seq)).encode()
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(payload) + 200}\r\n\r\n".encode() + payload)
        time.sleep(0.05)
        return False
    if mode == "long_cl":
        conn.sendall(json_response(completion(req, seq)) + b"X" * 64)
        return True
    if mode == "bad_chunked":
        conn.sendall(SSE_HEAD + event(req, 0, seq) + b"zz-not-hex\r\nhello\r\n")
        time.sleep(0.05)
        return False
    if mode == "huge_headers":
        extra = b"".join(f"x-junk-{i}: {'a' * 1000}\r\n".encode() for i in range(200))
        conn.sendall(json_response(completion(req, seq), extra=extra))
        return True
    if mode == "garbage":
        conn.sendall(b"SSH-2.0-OpenSSH_9.0\r\n\r\n")
        return False
    # ok
    if delay:
        time.sleep(delay)
    if not stream:
        answer = json_response(completion(req, seq, int(headers.get("x-hostile-tokens", "5"))))
        end()
        conn.sendall(answer)
        return True
    gap = float(headers.get("x-hostile-gap-ms", "0")) / 1000
    out = SSE_HEAD
    for i in range(int(headers.get("x-hostile-tokens", "5"))):
        conn.sendall(out + event(req, i, seq))
        out = b""
        if gap:
            time.sleep(gap)
    end()
    conn.sendall(out + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return True


def serve(conn):
    with LOCK:
        STATS["connections"] += 1
    buf = b""
    try:
        while True:
            got = read_request(conn, buf)
            if got is None:
                return
            method, path, headers, body, buf = got
            mode = headers.get("x-hostile", MODE[0])
            if mode == "hang":
                while conn.recv(65536):
                    pass
                return
            if method == "GET":
                answer_get(conn, path)
                continue
            with LOCK:
                STATS["requests"] += 1
                seq = STATS["requests"]
                STATS["concurrent"] += 1
                STATS["max_concurrent"] = max(STATS["max_concurrent"], STATS["concurrent"])
            ended = []

            def end():
                if not ended:
                    ended.append(True)
                    with LOCK:
                        STATS["concurrent"] -= 1
            try:
                keep = answer_post(conn, mode, headers, body, seq, end)
            finally:
                end()
            if not keep:
                return
    except OSError:
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mode", default="ok")
    ap.add_argument("--rcvbuf", type=int, default=0)
    args = ap.parse_args()
    MODE[0] = args.mode
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if args.rcvbuf:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
    srv.bind(("127.0.0.1", args.port))
    srv.listen(1024)
    print(f"PORT {srv.getsockname()[1]}", flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
