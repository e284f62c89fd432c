#include "core/prefix/kv_events.h"

#include <cstring>

#include "core/msgpack_io.h"

namespace sluice::kv {

std::string_view to_string(Encoding e) { return e == Encoding::arrays ? "arrays" : "maps"; }

namespace {

// A bounds-checked reader over one payload (core/msgpack_io.h), with the KV events' own fields.
class Reader : public MsgpackReader {
 public:
  using MsgpackReader::MsgpackReader;

  // A block hash: an int, or bytes whose low 64 bits (big-endian) are taken.
  bool hash(uint64_t& h) {
    if (is(MP_UINT) || is(MP_INT)) return bits64(h);
    std::string_view b;
    if (!bin(b) && !str(b)) return false;
    h = 0;
    const size_t from = b.size() > 8 ? b.size() - 8 : 0;
    for (size_t i = from; i < b.size(); ++i) h = (h << 8) | static_cast<unsigned char>(b[i]);
    return true;
  }

  bool hashes(std::vector<uint64_t>& out) {
    uint32_t n = 0;
    if (!array(n)) return false;
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i)
      if (!hash(out[i])) return false;
    return true;
  }
  bool tokens(std::vector<uint32_t>& out) {
    uint32_t n = 0;
    if (!array(n)) return false;
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t t = 0;
      if (!is(MP_UINT) || !uint(t) || t > UINT32_MAX) return false;
      out[i] = static_cast<uint32_t>(t);
    }
    return true;
  }
  bool opt_str(std::string& out) {
    if (nil()) {
      out.clear();
      return true;
    }
    std::string_view s;
    if (!str(s)) return false;
    out.assign(s);
    return true;
  }
  bool opt_hash(std::optional<uint64_t>& out) {
    if (nil()) {
      out.reset();
      return true;
    }
    uint64_t h = 0;
    if (!hash(h)) return false;
    out = h;
    return true;
  }
  bool opt_int(std::optional<int64_t>& out) {
    if (nil()) {
      out.reset();
      return true;
    }
    int64_t v = 0;
    if (!sint(v)) return false;
    out = v;
    return true;
  }
  // extra_keys: nil, or one entry per block (nil or an array of keys). The first block's string
  // keys other than the LoRA name are kept as the cache salt.
  bool extra_keys(BlockStored& ev) {
    if (nil()) return true;
    uint32_t n = 0;
    if (!array(n)) return false;
    ev.has_extra_keys = true;
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t k = 0;
      if (i > 0 || nil()) {
        if (i > 0 && !skip()) return false;
        continue;
      }
      if (!array(k)) return false;
      for (uint32_t j = 0; j < k; ++j) {
        std::string_view s;
        if (is(MP_STR)) {
          if (!str(s)) return false;
          if (s == ev.lora_name) continue;
          if (!ev.cache_salt.empty()) ev.cache_salt += '\0';
          ev.cache_salt.append(s);
        } else if (!skip()) {
          return false;
        }
      }
    }
    return true;
  }
};

enum class Kind { stored, removed, cleared, unknown };
Kind kind_of(std::string_view tag) {
  if (tag == "BlockStored") return Kind::stored;
  if (tag == "BlockRemoved") return Kind::removed;
  if (tag == "AllBlocksCleared") return Kind::cleared;
  return Kind::unknown;
}

// ["Tag", fields...]; `n` elements, the tag already read.
bool decode_array_event(Reader& r, Kind kind, uint32_t n, Event& out) {
  uint32_t used = 1;
  auto more = [&] { return used < n; };
  bool ok = true;
  if (kind == Kind::stored) {
    BlockStored ev;
    // Positional: hashes, parent, tokens, block_size are required; the rest optional.
    if (n < 5) return false;
    ok = r.hashes(ev.block_hashes) && r.opt_hash(ev.parent_block_hash) && r.tokens(ev.token_ids) &&
         r.sint(ev.block_size);
    used = 5;
    if (ok && more()) ok = r.opt_int(ev.lora_id), ++used;
    if (ok && more()) ok = r.opt_str(ev.medium), ++used;
    if (ok && more()) ok = r.opt_str(ev.lora_name), ++used;
    if (ok && more()) ok = r.extra_keys(ev), ++used;
    out = std::move(ev);
  } else if (kind == Kind::removed) {
    BlockRemoved ev;
    if (n < 2) return false;
    ok = r.hashes(ev.block_hashes);
    used = 2;
    if (ok && more()) ok = r.opt_str(ev.medium), ++used;
    out = std::move(ev);
  } else {
    out = AllBlocksCleared{};
  }
  for (; ok && used < n; ++used) ok = r.skip();  // fields newer than ours
  return ok;
}

bool decode_map_event(Reader& r, uint32_t n, Event& out) {
  // The "type" key may come anywhere: read every field into a BlockStored (a superset of the
  // others' fields), then keep what the type needs.
  BlockStored ev;
  Kind kind = Kind::unknown;
  bool have_hashes = false, have_tokens = false, have_size = false;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view key;
    if (!r.str(key)) return false;
    bool ok = true;
    if (key == "type") {
      std::string_view tag;
      ok = r.str(tag);
      kind = kind_of(tag);
    } else if (key == "block_hashes") {
      ok = have_hashes = r.hashes(ev.block_hashes);
    } else if (key == "parent_block_hash") {
      ok = r.opt_hash(ev.parent_block_hash);
    } else if (key == "token_ids") {
      ok = have_tokens = r.tokens(ev.token_ids);
    } else if (key == "block_size") {
      ok = have_size = r.sint(ev.block_size);
    } else if (key == "lora_id") {
      ok = r.opt_int(ev.lora_id);
    } else if (key == "medium") {
      ok = r.opt_str(ev.medium);
    } else if (key == "lora_name") {
      ok = r.opt_str(ev.lora_name);
    } else if (key == "extra_keys") {
      ok = r.extra_keys(ev);
    } else {
      ok = r.skip();
    }
    if (!ok) return false;
  }
  switch (kind) {
    case Kind::stored:
      if (!have_hashes || !have_tokens || !have_size) return false;
      out = std::move(ev);
      return true;
    case Kind::removed:
      if (!have_hashes) return false;
      out = BlockRemoved{std::move(ev.block_hashes), std::move(ev.medium)};
      return true;
    case Kind::cleared: out = AllBlocksCleared{}; return true;
    case Kind::unknown: return false;
  }
  return false;
}

// One event. False: malformed (the reader is then past it or the batch is broken: the caller
// resynchronises on the event's end, computed by skipping from its start).
bool decode_event(Reader& r, Event& out) {
  uint32_t n = 0;
  if (r.is(MP_ARRAY)) {
    if (!r.array(n) || n == 0) return false;
    std::string_view tag;
    if (!r.str(tag)) return false;
    const Kind kind = kind_of(tag);
    if (kind == Kind::unknown) return false;
    return decode_array_event(r, kind, n, out);
  }
  if (r.is(MP_MAP)) {
    if (!r.map(n)) return false;
    return decode_map_event(r, n, out);
  }
  return false;
}

bool decode_events(Reader& r, EventBatch& out) {
  uint32_t n = 0;
  if (!r.array(n)) return false;
  out.events.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Reader probe = r;  // the event's extent, found by skipping it whole
    if (!probe.skip()) return false;  // truncated: the batch is broken
    Event ev;
    Reader one(r.pos(), probe.pos());
    if (decode_event(one, ev) && one.at_end()) out.events.push_back(std::move(ev));
    else ++out.skipped_events;
    r = probe;
  }
  return true;
}

// ---- encoding -------------------------------------------------------------------------------

class Writer : public MsgpackWriter {
 public:
  using MsgpackWriter::MsgpackWriter;
  void opt_str(std::string_view s) { s.empty() ? nil() : str(s); }
  void hashes(const std::vector<uint64_t>& hs) {
    array(static_cast<uint32_t>(hs.size()));
    for (uint64_t h : hs) uint(h);
  }
};

void encode_stored(Writer& w, const BlockStored& e, Encoding enc) {
  const bool extra = e.has_extra_keys || !e.cache_salt.empty();
  auto extra_keys = [&] {
    // vLLM: one entry per block; the salt in the first block's entry.
    w.array(static_cast<uint32_t>(e.block_hashes.size()));
    for (size_t i = 0; i < e.block_hashes.size(); ++i) {
      if (i == 0 && !e.cache_salt.empty()) {
        w.array(1);
        w.str(e.cache_salt);
      } else {
        w.nil();
      }
    }
  };
  auto tokens = [&] {
    w.array(static_cast<uint32_t>(e.token_ids.size()));
    for (uint32_t t : e.token_ids) w.uint(t);
  };
  if (enc == Encoding::arrays) {
    w.array(extra ? 9 : 8);
    w.str("BlockStored");
  } else {
    w.map(extra ? 9 : 8);
    w.str("type");
    w.str("BlockStored");
  }
  auto key = [&](std::string_view k) {
    if (enc == Encoding::maps) w.str(k);
  };
  key("block_hashes");
  w.hashes(e.block_hashes);
  key("parent_block_hash");
  if (e.parent_block_hash) w.uint(*e.parent_block_hash);
  else w.nil();
  key("token_ids");
  tokens();
  key("block_size");
  w.sint(e.block_size);
  key("lora_id");
  if (e.lora_id) w.sint(*e.lora_id);
  else w.nil();
  key("medium");
  w.opt_str(e.medium);
  key("lora_name");
  w.opt_str(e.lora_name);
  if (extra) {
    key("extra_keys");
    extra_keys();
  }
}

}  // namespace

std::string decode_event_batch(std::string_view payload, EventBatch& out) {
  out = EventBatch{};
  if (payload.empty()) return "empty payload";
  Reader r(payload.data(), payload.data() + payload.size());
  uint32_t n = 0;
  if (r.is(MP_ARRAY)) {
    if (!r.array(n)) return "truncated batch";
    if (n < 2) return "batch array has fewer than 2 fields";
    if (!r.number(out.ts)) return "batch ts is not a number";
    if (!decode_events(r, out)) return "batch events are not a well-formed list";
    if (n >= 3) {
      if (!r.opt_int(out.data_parallel_rank)) return "batch data_parallel_rank is not an int";
      for (uint32_t i = 3; i < n; ++i)
        if (!r.skip()) return "truncated batch";
    }
  } else if (r.is(MP_MAP)) {
    if (!r.map(n)) return "truncated batch";
    bool have_ts = false, have_events = false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view key;
      if (!r.str(key)) return "batch map key is not a string";
      if (key == "ts") {
        if (!r.number(out.ts)) return "batch ts is not a number";
        have_ts = true;
      } else if (key == "events") {
        if (!decode_events(r, out)) return "batch events are not a well-formed list";
        have_events = true;
      } else if (key == "data_parallel_rank") {
        if (!r.opt_int(out.data_parallel_rank)) return "batch data_parallel_rank is not an int";
      } else if (!r.skip()) {
        return "truncated batch";
      }
    }
    if (!have_ts || !have_events) return "batch map lacks ts or events";
  } else {
    return "payload is not a msgpack array or map";
  }
  if (!r.at_end()) return "trailing bytes after the batch";
  return {};
}

void encode_event_batch(const EventBatch& batch, Encoding enc, std::string& out) {
  Writer w(out);
  const bool rank = batch.data_parallel_rank.has_value();
  if (enc == Encoding::arrays) {
    w.array(rank ? 3 : 2);
    w.dbl(batch.ts);
  } else {
    w.map(rank ? 3 : 2);
    w.str("ts");
    w.dbl(batch.ts);
    w.str("events");
  }
  w.array(static_cast<uint32_t>(batch.events.size()));
  for (const Event& ev : batch.events) {
    if (const auto* s = std::get_if<BlockStored>(&ev)) {
      encode_stored(w, *s, enc);
    } else if (const auto* rm = std::get_if<BlockRemoved>(&ev)) {
      if (enc == Encoding::arrays) {
        w.array(3);
        w.str("BlockRemoved");
      } else {
        w.map(3);
        w.str("type");
        w.str("BlockRemoved");
        w.str("block_hashes");
      }
      w.hashes(rm->block_hashes);
      if (enc == Encoding::maps) w.str("medium");
      w.opt_str(rm->medium);
    } else {
      if (enc == Encoding::arrays) {
        w.array(1);
      } else {
        w.map(1);
        w.str("type");
      }
      w.str("AllBlocksCleared");
    }
  }
  if (rank) {
    if (enc == Encoding::maps) w.str("data_parallel_rank");
    w.sint(*batch.data_parallel_rank);
  }
}

std::string encode_seq(int64_t seq) {
  std::string s(8, '\0');
  auto u = static_cast<uint64_t>(seq);
  for (int i = 7; i >= 0; --i, u >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(u & 0xff);
  return s;
}

bool decode_seq(std::string_view frame, int64_t& seq) {
  if (frame.size() != 8) return false;
  uint64_t u = 0;
  for (char c : frame) u = (u << 8) | static_cast<unsigned char>(c);
  seq = static_cast<int64_t>(u);
  return true;
}

}  // namespace sluice::kv
