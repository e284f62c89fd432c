// PeerLoad: the in-flight load other gateway replicas report for one pool, merged into what this
// replica's policy sees (issue 15, item 5).
//
// Why: each replica's own accounting (EndpointLoad: requests queued and decoding, uncached prefill
// tokens and their attention pairs, KV read, remaining output bound, dispatches since the scrape) is
// exact for its own requests, but the other replicas' requests reach it only through the engines'
// scraped waiting / running (`ext` = scraped - own), up to a scrape interval late and priced at mean
// sizes. With N replicas, N - 1 of every N dispatches are in that lagging estimate, so a burst spread
// over the replicas lands on the one endpoint each replica believes idle.
//
// What a peer reports (state, not events): its own EndpointLoad per endpoint, the in-flight fields
// (in_flight, prefill_requests, prefill_tokens, prefill_pairs, decode_tokens, live and bound context
// tokens) as they are now, and the cumulative ones (input tokens, predicted cached tokens, picks)
// as running totals. A report replaces that peer's previous one. A state report rather than
// "added / prefill done / finished" events: a lost, duplicated or reordered message costs one
// interval of staleness instead of load that never goes away (a lost "finished"), it needs no
// per-request table, and it carries the per-token decode progress (live context, remaining output)
// that events would only carry one message per token. Each report covers every endpoint the peer
// has load on; an endpoint it omits has nothing in flight from it (its cumulative totals unchanged).
// Per pool it also reports the running total of the work it refused (shed_work_total_ms: each over_slo
// refusal's prefill alone, Candidate::shed_work_ms): its increments join this replica's shed backlog
// (Policy::on_peer_shed), so a burst refused across replicas is told to come back one after another
// as it is by one replica, not N times as densely.
//
// Rules:
//   merge      what the policy sees for endpoint e = own + the sum of the live peers' reports for e;
//              in-flight fields add up, so the sluice policy's own-accounting inputs (D, P, K, R, Q,
//              Q2) and least-request style in-flight counts include the peers' dispatches, and
//              `ext` = scraped - (own + peers) does not count them twice. Cumulative fields add the
//              peers' increments since first heard (never their history before that, so a peer that
//              appears does not look like a burst; never decreasing, so the policies' rate estimates
//              do not reset; a peer whose totals go down restarted: its new totals count from 0).
//              assigned_since_scrape adds the peers' picks since this replica's last scrape of e.
//   own        a report with this replica's own gateway id is ignored (pub/sub echoes it back).
//   order      per peer (gateway id, instance): a sequence number at or below the last applied is a
//              duplicate or reordered and dropped; a new instance (the peer restarted) replaces it.
//   expiry     a peer not heard from for `ttl` (default 1 s) is removed with all its in-flight load:
//              a gateway that dies leaves no phantom load (its cumulative increments stay counted).
//   bounds     at most `max_peers` peers (default 64; a report from one more, while none has expired,
//              is dropped and counted), one fixed-size entry per pool endpoint each: memory is
//              max_peers x endpoints x sizeof(PeerEndpointLoad). Endpoints are keyed by a 64-bit
//              hash of their address (peers may list them in another order); a key this pool does not
//              have is skipped and counted. Values above kMaxPeerValue are refused (the report is
//              dropped: garbage, not load).
// Not shared: the hard in-flight cap (max_in_flight_per_endpoint) stays per replica, as configured.
// Pure: no clocks (time is passed in), no sockets; the transports are the drivers' (fleetsim delays
// reports on its virtual clock; the live gateway's is gateway/redis/peer_load_link.h).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/picker/endpoint_state.h"
#include "core/time.h"

namespace sluice {

inline constexpr uint64_t kMaxPeerValue = uint64_t{1} << 48;

// One peer's own accounting of one endpoint (the EndpointLoad fields it shares).
struct PeerEndpointLoad {
  int64_t in_flight = 0, prefill_requests = 0, prefill_tokens = 0;
  double prefill_pairs = 0;
  int64_t decode_tokens = 0, live_context_tokens = 0, context_tokens = 0;
  int64_t input_tokens_total = 0, predicted_cached_tokens_total = 0, picks_total = 0;  // cumulative
  bool idle() const { return in_flight == 0 && prefill_requests == 0 && prefill_tokens == 0 && decode_tokens == 0; }
  static PeerEndpointLoad of(const EndpointLoad& l);
};

struct PeerEndpointReport {
  uint64_t key = 0;  // peer_endpoint_key(address)
  PeerEndpointLoad load;
};

// One gateway's report of one pool.
struct PeerPoolReport {
  std::string pool;
  std::vector<PeerEndpointReport> endpoints;
  int64_t shed_work_total_ms = 0;  // cumulative: the ms of work the gateway refused in this pool (header)
};

// The key of an endpoint on the wire: XXH3-64 of its address ("host:port").
uint64_t peer_endpoint_key(std::string_view address);

class PeerLoad {
 public:
  struct Options {
    Duration ttl = std::chrono::seconds(1);
    size_t max_peers = 64;
  };
  enum class Applied : uint8_t { ok, own, duplicate, too_many_peers, bad_value };
  struct Counters {
    uint64_t applied = 0, own = 0, duplicates = 0, refused_peers = 0, bad_values = 0, unknown_endpoints = 0;
    uint64_t expired = 0;
  };

  // `keys[e]` = peer_endpoint_key of endpoint e's address; `self` = this replica's gateway id.
  PeerLoad(std::vector<uint64_t> keys, std::string self, Options options);

  Applied apply(std::string_view gateway, uint64_t instance, uint64_t seq, const PeerPoolReport& report, Time now);
  // Removes the peers not heard from for ttl. Cheap when none is due; rank() calls it.
  void expire(Time now);
  // Adds the live peers' load of endpoint e to `load` (the merge rule).
  void add_to(size_t e, EndpointLoad& load) const;
  // This replica scraped endpoint e: peers' picks from now on count as assigned since scrape.
  void on_scrape(size_t e);
  // The peers' refused work (shed_work_total_ms increments) since the last call, in ms.
  double take_shed_work_ms() {
    const double w = static_cast<double>(shed_work_pending_ms_);
    shed_work_pending_ms_ = 0;
    return w;
  }
  // The live peers' in-flight requests on endpoint e (metrics, /debug/pick).
  int64_t in_flight(size_t e) const { return e < sum_.size() ? sum_[e].in_flight : 0; }
  bool any() const { return !peers_.empty(); }
  size_t peers() const { return peers_.size(); }
  size_t endpoints() const { return keys_.size(); }
  const Counters& counters() const { return counters_; }
  const Options& options() const { return options_; }

 private:
  struct Peer {
    std::string gateway;
    uint64_t instance = 0, seq = 0;
    int64_t shed_total = 0;  // its shed_work_total_ms as last reported
    Time heard{};
    std::vector<PeerEndpointLoad> load;  // per endpoint, as last reported (cumulative: last seen)
  };
  void add(size_t e, const PeerEndpointLoad& l, int sign);  // in-flight fields only
  void remove(size_t p);

  const std::vector<uint64_t> keys_;
  const std::string self_;
  const Options options_;
  std::vector<Peer> peers_;
  std::vector<PeerEndpointLoad> sum_;      // per endpoint: live peers' in-flight + cumulative increments
  int64_t shed_work_pending_ms_ = 0;       // peers' shed_work_total_ms increments not yet taken
  std::vector<int64_t> picks_at_scrape_;   // sum_[e].picks_total at this replica's last scrape of e
  std::unordered_map<uint64_t, size_t> index_;  // key -> endpoint
  std::vector<PeerEndpointLoad> scratch_;  // apply()
  std::vector<uint8_t> listed_;            // apply()
  Time next_expiry_ = Time::max();
  Counters counters_;
};

}  // namespace sluice
