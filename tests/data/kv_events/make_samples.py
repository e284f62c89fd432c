#!/usr/bin/python3
"""Writes the committed KV-event samples (msgpack payloads as vLLM's msgspec structs encode them).

Run with Debian's python3-msgpack: /usr/bin/python3 make_samples.py. Field orders follow
vllm/distributed/kv_events.py: arrays (array_like, <= 0.25: trailing defaults omitted) and maps
(>= 0.26: tag key "type", fields at their default omitted).
"""
import msgpack

T = list(range(100, 132))  # two blocks of 16 tokens
H1, H2 = 0x1111111111111111, 0x2222222222222222
B1 = bytes(24) + H1.to_bytes(8, "big")  # sha256-style bytes hashes: the low 64 bits are the key
B2 = bytes(24) + H2.to_bytes(8, "big")
samples = {
    # vLLM 0.9-0.10: BlockStored without lora_name, EventBatch without data_parallel_rank.
    "arrays_v09.msgpack": [1700000000.5, [["BlockStored", [H1, H2], None, T, 16, None, "GPU"],
                                          ["BlockRemoved", [H2], "GPU"], ["AllBlocksCleared"]]],
    # vLLM 0.11-0.25: lora_name, extra_keys present, rank present; a negative int hash.
    "arrays_v025.msgpack": [1700000001.0, [["BlockStored", [H1, -5], None, T, 16, None, "GPU", "adapter-a",
                                            [["salt-1"], None]],
                                           ["BlockRemoved", [-5], None]], 0],
    # vLLM 0.26+: maps, defaults omitted, bytes hashes, newer fields (group_idx, spec kind).
    "maps_v026.msgpack": {"ts": 1700000002.25, "events": [
        {"type": "BlockStored", "block_hashes": [B1, B2], "parent_block_hash": None, "token_ids": T,
         "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
         "group_idx": 0, "kv_cache_spec_kind": "full_attention"},
        {"type": "BlockRemoved", "block_hashes": [B2], "medium": "GPU"},
        {"type": "AllBlocksCleared"}], "data_parallel_rank": 1},
    # A map batch whose optional fields are all absent (no rank, event without medium/lora).
    "maps_minimal.msgpack": {"events": [{"block_size": 16, "type": "BlockStored", "block_hashes": [H1],
                                         "token_ids": T[:16]}], "ts": 5},
    # A map batch holding array-encoded events (seen in one copy of vLLM's code).
    "mixed_map_of_arrays.msgpack": {"ts": 1.0, "events": [["BlockRemoved", [H1]]]},
}
for name, obj in samples.items():
    with open(name, "wb") as f:
        f.write(msgpack.packb(obj, use_bin_type=True))
