"""Engine KV events (issue 15), real processes over loopback:
- wire: `sluice sim --kv-events-config` publishes [topic, seq, msgpack EventBatch] that Debian's
  python3-zmq + python3-msgpack decode as vLLM's consumers do, in both encodings, and its replay
  ROUTER answers a DEALER with the buffered batches then the end marker;
- the gateway subscribes per endpoint, its index fills from the events (/debug/pick says
  prefix_source "events" with cached tokens on the replica that served the prompt), and an engine
  restart clears that endpoint's blocks within a second;
- a hostile publisher (a pyzmq PUB peer) sending garbage, truncated and wrong-shaped frames, a bad
  sequence frame and a sequence jump is counted, never crashes the gateway, never stalls routing;
  its one well-formed batch is decoded and indexed.
Needs /usr/bin/python3 (Debian's zmq and msgpack modules): re-executes itself with it."""
import argparse
import json
import os
import sys
import tempfile
import threading
import time
import unittest

try:
    import msgpack
    import zmq
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

import sluice_fleet as fleet

SLUICE = None
SLOW = 3 if os.environ.get("SLUICE_SANITIZED") == "1" else 1
KV_CFG = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*",
          "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv@sim@m"}
PROMPT = "You are the sluice KV-event test oracle; answer briefly and precisely. " * 12


def start_kv_sim(replicas, encoding, cfg=KV_CFG, base_port=0):
    """A sim with events; returns (proc, http ports, [(pub, replay)] addresses)."""
    sim = fleet.Proc([SLUICE, "sim", "--replicas", str(replicas), "--base-port", str(base_port), "--seed", "7",
                      "--kv-events-config", json.dumps(cfg), "--kv-events-encoding", encoding,
                      "--output-len", "4"], "sim")
    ports, kv = [], []
    deadline = time.time() + 30
    while len(kv) < replicas and time.time() < deadline:
        line = sim.p.stdout.readline()
        if not line:
            break
        if "listening on" in line:
            ports.append(int(line.rsplit(":", 1)[1]))
        elif "kv events on" in line:
            parts = line.split()
            kv.append((parts[5], parts[7]))
    if len(kv) < replicas:
        sim.stop()
        raise RuntimeError("sim did not report its kv addresses: " + "".join(sim.err[-10:]))
    return sim, ports, kv


def completion(port, prompt, max_tokens=4):
    body = json.dumps({"model": fleet.MODEL, "prompt": prompt, "max_tokens": max_tokens})
    return fleet.http_req(port, "POST", "/v1/completions", body, timeout=30)


def chat_body(prompt):
    return json.dumps({"model": fleet.MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": prompt}]})


class Wire(unittest.TestCase):
    def check_encoding(self, encoding):
        sim, ports, kv = start_kv_sim(1, encoding)
        ctx = zmq.Context()
        try:
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
            sub.connect(kv[0][0])
            time.sleep(0.3 * SLOW)  # the subscription reaches the publisher (PUB drops before that)
            status, raw = completion(ports[0], PROMPT)
            self.assertEqual(status, 200, raw)
            self.assertTrue(sub.poll(5000 * SLOW), "no KV event published")
            topic, seq, payload = sub.recv_multipart()
            self.assertEqual(topic, b"kv@sim@m")
            self.assertEqual(len(seq), 8)
            batch = msgpack.unpackb(payload, raw=False)
            if encoding == "arrays":
                self.assertIsInstance(batch, list)
                ts, events, rank = batch
                ev = events[0]
                self.assertEqual(ev[0], "BlockStored")
                hashes, parent, tokens, block_size, lora_id, medium, lora_name = ev[1:8]
            else:
                self.assertIsInstance(batch, dict)
                ts, events, rank = batch["ts"], batch["events"], batch["data_parallel_rank"]
                ev = events[0]
                self.assertEqual(ev["type"], "BlockStored")
                hashes, parent, tokens = ev["block_hashes"], ev["parent_block_hash"], ev["token_ids"]
                block_size, medium, lora_name = ev["block_size"], ev["medium"], ev["lora_name"]
                self.assertNotIn("extra_keys", ev)  # omitted at its default, as msgspec does
            self.assertAlmostEqual(ts, time.time(), delta=30)
            self.assertEqual(rank, 0)
            self.assertEqual(block_size, 16)
            self.assertIsNone(parent)  # the prompt's first block starts the chain
            self.assertEqual(medium, "GPU")
            self.assertIsNone(lora_name)
            self.assertGreaterEqual(len(hashes), (len(PROMPT) // 4) // 16 - 1)
            self.assertEqual(len(tokens), 16 * len(hashes))
            self.assertTrue(all(isinstance(t, int) and 0 <= t < 128000 for t in tokens))
            # Replay: a DEALER asks from seq 0 and gets every buffered batch, then [-1, b""].
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(kv[0][1])
            dealer.send_multipart([b"", (0).to_bytes(8, "big")])
            got = []
            while True:
                self.assertTrue(dealer.poll(5000 * SLOW), "replay did not answer")
                empty, s, p = dealer.recv_multipart()
                self.assertEqual(empty, b"")
                if int.from_bytes(s, "big", signed=True) == -1:
                    self.assertEqual(p, b"")
                    break
                got.append(int.from_bytes(s, "big"))
                msgpack.unpackb(p, raw=False)
            self.assertEqual(got[0], 0)
            self.assertEqual(got, list(range(len(got))))
            self.assertIn(int.from_bytes(seq, "big"), got)
            # A malformed replay request is ignored; the socket still serves the next one.
            dealer.send_multipart([b"", b"short"])
            dealer.send_multipart([b"", (10 ** 6).to_bytes(8, "big")])
            self.assertTrue(dealer.poll(5000 * SLOW))
            empty, s, p = dealer.recv_multipart()
            self.assertEqual(int.from_bytes(s, "big", signed=True), -1)
            # reset_prefix_cache publishes AllBlocksCleared.
            self.assertEqual(fleet.http_req(ports[0], "POST", "/reset_prefix_cache")[0], 200)
            self.assertTrue(sub.poll(5000 * SLOW))
            cleared = msgpack.unpackb(sub.recv_multipart()[2], raw=False)
            ev = cleared[1][0] if encoding == "arrays" else cleared["events"][0]
            self.assertEqual(ev, ["AllBlocksCleared"] if encoding == "arrays" else {"type": "AllBlocksCleared"})
        finally:
            ctx.destroy(linger=0)
            sim.stop()

    def test_a_replay_longer_than_the_high_water_mark_arrives_whole(self):
        """More buffered batches than ZeroMQ's default high-water mark (1000): a ROUTER drops what
        exceeds it without a word, end marker included, so a gateway's warm start would time out."""
        cfg = dict(KV_CFG)
        sim = fleet.Proc([SLUICE, "sim", "--replicas", "1", "--base-port", "0", "--seed", "7", "--output-len", "1",
                          "--time-scale", "50", "--kv-blocks", "64", "--kv-events-config", json.dumps(cfg)], "sim")
        ctx = zmq.Context()
        try:
            port, replay = None, None
            deadline = time.time() + 30
            while replay is None and time.time() < deadline:
                line = sim.p.stdout.readline()
                if "listening on" in line:
                    port = int(line.rsplit(":", 1)[1])
                elif "kv events on" in line:
                    replay = line.split()[7]
            self.assertIsNotNone(replay, "".join(sim.err[-10:]))
            # Distinct prompts on a small cache: every step stores and evicts, one batch per step.
            todo = iter(range(2400))
            lock = threading.Lock()

            def client():
                while True:
                    with lock:
                        i = next(todo, None)
                    if i is None:
                        return
                    completion(port, f"p{i} " + "x y z " * 40, max_tokens=1)
            threads = [threading.Thread(target=client) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(replay)
            dealer.send_multipart([b"", (0).to_bytes(8, "big")])
            got = []
            while True:
                self.assertTrue(dealer.poll(5000 * SLOW), f"replay stopped after {len(got)} batches, no end marker")
                _, s, _ = dealer.recv_multipart()
                if int.from_bytes(s, "big", signed=True) == -1:
                    break
                got.append(int.from_bytes(s, "big"))
            self.assertGreater(len(got), 1100)
            self.assertEqual(got, list(range(got[0], got[0] + len(got))))
        finally:
            ctx.destroy(linger=0)
            sim.stop()

    def test_arrays_encoding(self):
        self.check_encoding("arrays")

    def test_maps_encoding(self):
        self.check_encoding("maps")


class Gateway(unittest.TestCase):
    def test_index_from_events_restart_and_hostile_publisher(self):
        tmp = tempfile.TemporaryDirectory()
        ctx = zmq.Context()
        procs = []
        try:
            # Two replicas in their own sim processes (one restarts) on fixed ports picked free.
            p0, p1 = fleet.free_port(), fleet.free_port()
            ev1, rp1 = fleet.free_port(), fleet.free_port()
            sim0, ports0, kv0 = start_kv_sim(1, "maps", base_port=p0)
            # Fixed ports must bind: vLLM's rule binds an address with a wildcard or "::" (else it
            # connects), so the restartable replica publishes on IPv6 loopback.
            cfg1 = dict(KV_CFG, endpoint=f"tcp://[::1]:{ev1}", replay_endpoint=f"tcp://[::1]:{rp1}")
            sim1, ports1, kv1 = start_kv_sim(1, "arrays", cfg=cfg1, base_port=p1)
            procs += [sim0, sim1]
            # A hostile publisher, as a third endpoint's events (its HTTP side is replica 0's port
            # under another name is not allowed: duplicate addresses): a third sim, events elsewhere.
            sim2, ports2 = fleet.start_sim(SLUICE, 1)
            procs.append(sim2)
            bad = ctx.socket(zmq.PUB)
            bad_port = bad.bind_to_random_port("tcp://127.0.0.1")
            extra_eps = [
                f"kv_events: '{kv0[0][0]}', kv_events_replay: '{kv0[0][1]}'",
                f"kv_events: 'tcp://[::1]:{ev1}', kv_events_replay: 'tcp://[::1]:{rp1}'",
                f"kv_events: 'tcp://127.0.0.1:{bad_port}'",
            ]
            gw, listen, admin = fleet.start_gateway(SLUICE, [ports0[0], ports1[0], ports2[0]], tmp.name,
                                                    endpoint_yaml=extra_eps,
                                                    pool_yaml="    kv_events: {stale_after_ms: 2000}\n")
            procs.append(gw)

            def m(name, **labels):
                return fleet.metric(fleet.admin_metrics(admin), name, pool="chat", **labels)

            self.assertTrue(fleet.wait_for(lambda: m("sluice_kv_events_connected", endpoint="replica-0") == 1
                                     and m("sluice_kv_events_connected", endpoint="replica-1") == 1, 10))
            # Serve one prompt per real replica directly (traffic from "another client"): the
            # gateway learns it only from the events.
            for port, tag in ((ports0[0], "zero"), (ports1[0], "one")):
                self.assertEqual(completion(port, f"[{tag}] " + PROMPT)[0], 200)
            self.assertTrue(fleet.wait_for(lambda: (m("sluice_kv_index_blocks", endpoint="replica-0") or 0) > 0
                                     and (m("sluice_kv_index_blocks", endpoint="replica-1") or 0) > 0, 5))
            for tag, want in (("zero", "replica-0"), ("one", "replica-1")):
                status, raw = fleet.http_req(admin, "POST", "/debug/pick",
                                             json.dumps({"model": fleet.MODEL, "prompt": f"[{tag}] " + PROMPT}))
                self.assertEqual(status, 200, raw)
                # The prediction (not the ranking: the policy also prices the replica's running
                # decode) comes from the events: cached tokens on the replica that served it only.
                for c in json.loads(raw)["candidates"]:
                    self.assertEqual(c["prefix_source"], "events", raw)
                    if c["endpoint"] == want:
                        self.assertGreaterEqual(c["predicted_cached_tokens"], 16 * ((len(PROMPT) // 4) // 16 - 1), raw)
                    else:
                        self.assertEqual(c["predicted_cached_tokens"], 0, raw)

            # The hostile publisher: garbage of every kind, then one good batch, then a jump.
            def send(*frames):
                bad.send_multipart(list(frames))
            seq = lambda n: n.to_bytes(8, "big")
            good = msgpack.packb({"ts": time.time(), "events": [
                {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None,
                 "token_ids": list(range(32)), "block_size": 16, "lora_id": None, "medium": "GPU",
                 "lora_name": None}], "data_parallel_rank": 0})
            self.assertTrue(fleet.wait_for(lambda: m("sluice_kv_events_connected", endpoint="replica-2") == 1, 10))
            time.sleep(0.3 * SLOW)  # the gateway's subscription reaches our PUB
            send(b"only-one-frame")
            send(b"t", b"short")
            send(b"t", seq(0), b"\xc1\xc1 not msgpack")
            send(b"t", seq(1), good[: len(good) // 2])            # truncated
            send(b"t", seq(2), msgpack.packb(["BlockStored", 1]))  # wrong shape
            send(b"t", seq(3), msgpack.packb({"ts": "x", "events": 5}))
            send(b"t", seq(4), os.urandom(200))
            send(b"t", seq(5), good)
            send(b"t", seq(50), good)                              # a jump: no replay socket -> resync
            self.assertTrue(fleet.wait_for(lambda: (m("sluice_kv_events_decode_errors_total", endpoint="replica-2") or 0) >= 6
                                     and (m("sluice_kv_events_gaps_total", endpoint="replica-2") or 0) >= 1, 5),
                            fleet.admin_metrics(admin))
            self.assertGreaterEqual(m("sluice_kv_events_resyncs_total", endpoint="replica-2"), 1)
            self.assertEqual(m("sluice_kv_events_last_seq", endpoint="replica-2"), 50)
            self.assertEqual(m("sluice_kv_index_blocks", endpoint="replica-2"), 2)  # the good batch, decoded
            # Routing never stalled: requests through the gateway all succeed.
            for i in range(6):
                status, raw = fleet.http_req(listen, "POST", "/v1/chat/completions", chat_body(f"q{i} " + PROMPT), 30)
                self.assertEqual(status, 200, raw)
            self.assertIsNone(gw.p.poll())

            # Restart engine 1: its blocks leave the gateway's index within a second of the restart.
            self.assertGreater(m("sluice_kv_index_blocks", endpoint="replica-1"), 0)
            reconnects = m("sluice_kv_events_reconnects_total", endpoint="replica-1")
            sim1.stop()
            sim1b, _, _ = start_kv_sim(1, "arrays", cfg=cfg1, base_port=p1)
            procs.append(sim1b)
            t0 = time.time()
            self.assertTrue(fleet.wait_for(lambda: m("sluice_kv_events_reconnects_total", endpoint="replica-1") > reconnects
                                     and m("sluice_kv_index_blocks", endpoint="replica-1") == 0, 1.0, 0.02),
                            fleet.admin_metrics(admin))
            self.assertLess(time.time() - t0, 1.0 * SLOW)
            self.assertGreater(m("sluice_kv_index_memory_bytes"), 0)
        finally:
            ctx.destroy(linger=0)
            for p in reversed(procs):
                p.stop()
            tmp.cleanup()

    def test_a_hung_replay_never_holds_up_another_endpoint(self):
        """Endpoint A's replay ROUTER takes the warm-start request and never answers; endpoint B (a real
        sim) must still be indexed at once, not after A's replay deadline. Then a gap on A is
        filled by a replay, and the live batch that revealed it is applied after the replayed ones."""
        tmp = tempfile.TemporaryDirectory()
        ctx = zmq.Context()
        procs = []
        stop = threading.Event()
        server = None
        try:
            sim, ports, kv = start_kv_sim(2, "maps")
            procs.append(sim)
            pub, router = ctx.socket(zmq.PUB), ctx.socket(zmq.ROUTER)
            pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
            router_port = router.bind_to_random_port("tcp://127.0.0.1")
            requests = []
            seq = lambda n: n.to_bytes(8, "big", signed=True)

            def batch(h, parent):
                return msgpack.packb({"ts": time.time(), "events": [
                    {"type": "BlockStored", "block_hashes": [h], "parent_block_hash": parent,
                     "token_ids": list(range(h * 16, h * 16 + 16)), "block_size": 16, "lora_id": None,
                     "medium": "GPU", "lora_name": None}], "data_parallel_rank": 0})

            def serve_replays():  # the first request hangs; later ones get seqs up to 4 and the end marker
                while not stop.is_set():
                    if not router.poll(50):
                        continue
                    ident, _, start = router.recv_multipart()
                    requests.append(int.from_bytes(start, "big", signed=True))
                    if len(requests) == 1:
                        continue
                    for n in range(requests[-1], 5):
                        router.send_multipart([ident, b"", seq(n), batch(n, n - 1)])
                    router.send_multipart([ident, b"", seq(-1), b""])
            server = threading.Thread(target=serve_replays)
            server.start()
            gw, listen, admin = fleet.start_gateway(
                SLUICE, ports, tmp.name,
                endpoint_yaml=[f"kv_events: 'tcp://127.0.0.1:{pub_port}', kv_events_replay: 'tcp://127.0.0.1:{router_port}'",
                               f"kv_events: '{kv[1][0]}', kv_events_replay: '{kv[1][1]}'"],
                pool_yaml=f"    kv_events: {{replay_timeout_ms: {4000 * SLOW}}}\n")
            procs.append(gw)
            m = lambda name, ep: fleet.metric(fleet.admin_metrics(admin), name, pool="chat", endpoint=ep)
            self.assertTrue(fleet.wait_for(lambda: requests == [0] and m("sluice_kv_events_connected", "replica-1") == 1, 5 * SLOW))
            t0 = time.time()
            self.assertEqual(completion(ports[1], "[b] " + PROMPT)[0], 200)
            self.assertTrue(fleet.wait_for(lambda: (m("sluice_kv_index_blocks", "replica-1") or 0) > 0, 1.5 * SLOW),
                            fleet.admin_metrics(admin))
            self.assertLess(time.time() - t0, 1.5 * SLOW)
            self.assertEqual(m("sluice_kv_events_replay_failures_total", "replica-0"), 0)  # A's replay is still hanging
            self.assertEqual(m("sluice_kv_events_fresh", "replica-0"), 0)
            # A's deadline: a failed warm start is a resync, and A is trusted from then on.
            self.assertTrue(fleet.wait_for(lambda: m("sluice_kv_events_replay_failures_total", "replica-0") == 1
                                           and m("sluice_kv_events_fresh", "replica-0") == 1, 8 * SLOW),
                            fleet.admin_metrics(admin))
            self.assertEqual(m("sluice_kv_events_resyncs_total", "replica-0"), 1)
            # Live seq 0, then 5: a gap; the replay brings 1..4, then the held 5 is applied.
            pub.send_multipart([b"t", seq(0), batch(0, None)])
            self.assertTrue(fleet.wait_for(lambda: m("sluice_kv_events_last_seq", "replica-0") == 0, 3 * SLOW))
            pub.send_multipart([b"t", seq(5), batch(5, 4)])
            self.assertTrue(fleet.wait_for(lambda: m("sluice_kv_events_last_seq", "replica-0") == 5, 3 * SLOW),
                            fleet.admin_metrics(admin))
            self.assertEqual(requests, [0, 1])
            self.assertEqual(m("sluice_kv_events_gaps_total", "replica-0"), 1)
            self.assertEqual(m("sluice_kv_events_replay_failures_total", "replica-0"), 1)  # only the warm start
            self.assertEqual(m("sluice_kv_events_resyncs_total", "replica-0"), 1)
            self.assertEqual(m("sluice_kv_index_blocks", "replica-0"), 6)  # hashes 0..5, chained, none orphaned
            self.assertEqual(m("sluice_kv_events_orphan_blocks_total", "replica-0"), 0)
            self.assertIsNone(gw.p.poll())
        finally:
            stop.set()
            if server:
                server.join()
            ctx.destroy(linger=0)
            for p in reversed(procs):
                p.stop()
            tmp.cleanup()

    @staticmethod
    def _up(admin):
        try:
            return fleet.http_req(admin, "GET", "/metrics")[0] == 200
        except OSError:
            return False


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = args.sluice
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
