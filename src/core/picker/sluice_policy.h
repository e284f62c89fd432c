// sluice: the default policy. One currency: the expected cost, in milliseconds of request latency,
// of sending this request to each endpoint, from the engine's step-time model
// (core/engine/cost_model.h: step = C0 + max(W, beta N_tok) + delta B_run + gamma KV_read + eps
// prefill pairs) and the endpoint's signals; the lowest wins. The cost is this request's own
// latency plus the latency it adds to the requests it will share the engine with:
//
//   cost_ms = ttft_ms + decode_ms + interference_ms + prefill_imposed_ms + kv_ms + eviction_ms + adapter_ms
//             + followup_ms - copy_credit_ms
//
// Inputs per endpoint (own = the gateway's accounting, exact and never stale; ext = requests from
// other clients, from a fresh scrape, 0 when stale):
//   I, O  this request's input and output tokens (O = max_tokens, else default_output_tokens)
//   C, U  predicted cached (prefix index, or the oracle) and uncached input tokens, U = I - C
//   D     sequences decoding  = own past first token + ext running
//   P     requests queued     = own not yet past first token + ext waiting
//         ext = scraped waiting + running - own in flight when the scrape was taken, of which
//         waiting = min(ext, scraped waiting - own queued at the scrape), the rest running (an
//         engine counts a request in its prefill step as running). Less the own counts of now
//         instead, an own request that passed first token after the scrape looked like another
//         client's waiting request, a phantom mean prompt queued ahead, until the next scrape (the
//         8th follower of a fan-out went cold at 97 ms for a 15 ms warm TTFT; round 17).
//   B     the batch this request joins = D + P
//   K     KV tokens the batch's decode attention reads = own live context (input + output so far)
//         + ext x mean context
//   R     output tokens the batch still has to produce = own remaining output bounds + ext x mean
//         output / 2
//   Q     prefill tokens queued ahead = own uncached prefill in flight + ext waiting x mean prompt,
//         less the part of the own queue's head already done (sluice_head_progress: the time since
//         it became the head over the time its prefill takes); Q2 their attention token pairs (own
//         accounting: sum of U (C + U / 2) at dispatch, less the head's done share; ext waiting x
//         mean prompt^2 / 2). Without the head's progress, a burst's followers saw the leader's
//         whole prefill ahead of them at the endpoint that held their prefix however far it had
//         got, and a cold endpoint looked as fast (fan-out at 32 replicas, 120 req/s: TTFT p90
//         1.05-1.10x cache_aware's; bench/results/README.md, round 16).
//   step(b, k) = C0 + max(W, beta b) + delta b + gamma k    (one decode step of b sequences)
//   pace  the endpoint's step times relative to the pool's: every term below is computed with C0, W,
//         beta, delta, gamma and eps times its factor f (1 until it has samples). A sample is a
//         time the gateway saw against the ms the model gives it: a prefill (PoolRouter::
//         move_to_decode: its own queue's head, from becoming the head to its first token;
//         PrefillSample; the model: its own steps, which also carry the own prefills queued behind
//         it up to the chunk budget, after half a step of the batch when it became the head at its
//         dispatch beside own decoders, PrefillSample::mid_step: without it the half-slow fleet's
//         slow replicas read 1.80 for 2x, with it 1.86; hot prefix, seed 70, 120 req/s), a streamed
//         decode (from its first token to its last; the model: its tokens at step(B, K) of the
//         batch at its end, plus beta for each own prefill token done there meanwhile;
//         DecodeSample::streamed), a whole answer's decode (below), or
//         the engine's own ITL (DecodeSample::engine; engine_itl 1, the default; 0: not a sample):
//         its inter-token latency histogram's sum and count (vLLM's, SGLang's), scraped, over spans
//         of a quarter second (PoolRouter::engine_itl_sample), every request's tokens there against
//         the model's: their steps at the batch (the own decoders' mean over the span, the others
//         running at its end at the mean context) plus the prefill done there meanwhile, which
//         delays every decoder (B x (beta U + eps pairs) of the own prefills); in a bin of its own.
//         (The batch ITL at the pool's prefill duty instead read a replica that took more cold
//         prefills than the pool as slow, and a hot prefix's surge copies were kept.) A span whose
//         decoders made fewer than two tokens each is none (a replica filling up: its prefills ran
//         beside no decoders), nor one whose prefill term outweighs its steps (a long prefill beside
//         few decoders read as ~0.4 of the pace, and on a uniform fleet that noise moved the tool
//         agent's placements: whole answers, seed 40, 20 req/s, TTFT p90 33 -> 99 ms). The engine sees every token as it is made, streamed or not: with no
//         request streamed, a half-slow fleet was priced uniform for the ~20 s its first whole
//         answers took, and its slow replicas then served at twice the ITL SLO (mixed fleet, whole
//         answers, hot prefix at 200 req/s, seed 52: 42 req/s of goodput of a 70 peak; 56 with it;
//         bench/results/README.md, round 40).
//         Each sample x = log(observed / model) is fitted as a_e + m_b: the endpoint's effect
//         (log R) plus its bin's (kind, and a doubling of the modelled ms), what the model misses
//         for every endpoint at that size (the step in progress when a short prefill comes,
//         prefills that share a step), by least squares over the endpoints' decayed samples (~64
//         each; a few sweeps every 100 ms, the sample's bin and endpoint at once), a_e shrunk toward
//         0 by one sample. A fit, not each endpoint against the pool's mean of the bin: the policy
//         sends sizes to endpoints by their pace, and the pool's mean of a bin that only slow
//         replicas got was their pace (cost mix on a half-slow fleet: the 50k-100k-token documents
//         went to the slow replicas, which then priced 1.0-1.3x; round 37). The standard error of
//         a_e: the spread of its samples about the fit, with a prior 0.25 (+-50%) counted as one
//         more sample, over w, its decayed sample count faded with a 30 s time constant since its
//         last sample (kPaceFadeMs). The fastest endpoint is the one with the lowest log R + 2 se;
//         f = exp(log R less the fastest's, less two standard errors of that difference, 0 when
//         within them), in [1, 4]: an endpoint is priced only as slower than the fastest one, as
//         far as the samples tell them apart, never as faster. Pricing one faster drew it more
//         traffic, so more samples, so a tighter bound: noise read as pace fed itself (live, two
//         equal replicas and whole answers: 104 and 14 of 120 requests), where one priced slower
//         draws less and its evidence fades (an endpoint priced slow on a few samples and then sent
//         none is tried again). A streamed decode's steps are many and its sample tight, so an
//         endpoint whose batches run slower than the model says (a crowded batch, long contexts)
//         is priced a few % slower on a uniform fleet too. Samples taken with the KV usage at
//         kv_risk_start or above are left out (waiting for blocks is the KV terms'). An older GPU in
//         the pool is then priced as slower. Without it, on a fleet with half the replicas 2x
//         slower (fleetsim --slow-replicas), 7 of 48 checked rates were lost (bench/results/
//         README.md, rounds 35-37).
//   whole answers  a request that is not streamed shows the gateway no first token, only its
//         whole answer: it would count as queued for its whole decode, its prefill tokens in Q
//         ahead of everything sent after it. PoolRouter asks expected_prefill when it becomes the
//         head (the model's ms as for a sample, times exp(m_b + the fastest's a_e) of its size bin,
//         times f, and the tokens behind it its steps carry) and moves it on to its
//         decode when that time has passed, with the whole answers its steps carried; its tokens
//         are counted at expected_itl_ms (the batch's ITL at f) until its answer. The next head's
//         time from then is a model's, so its first token is no sample; instead the answer is one
//         (on_decode_done: from the expected first token to the answer against its tokens at the
//         batch's ITL, in bins of its own; the batch is its mean over that span, PoolRouter's
//         BatchArea: the batch at its end was a noisy pick, and an answer that ended in a small
//         batch read slow where the policy's placements made the slow replicas' batches small,
//         their pace read 1.35-1.5x for 2x). Without it, with no request
//         streamed, 22 of 90 checked rates were lost (held-out seeds at 8 and 32 replicas; 0 with
//         it; bench/results/README.md, round 36).
//
//   ttft_ms = F + k x ([D > 0] step(D, K) / 2 + max(n W, beta (Q + U + n D)) + n (C0 + delta D + gamma K)
//             + eps (Q2 + U (C + U / 2))),
//             n = max(1, ceil((Q + U) / chunk)): the engine's front end (F, below), the rest of the
//             decode step in progress (an engine schedules an arrival from its next step on; half a
//             step on average), then the steps until this prefill is done (queue, decode
//             interleaved, our own uncached prefill and its attention)
//   F     the engines' front end: what a request spends in an engine before its scheduler sees it
//         (vLLM's and SGLang's HTTP server, chat template and tokenizer: ~5-30 ms; `sluice sim`
//         --frontend-overhead-ms, 20 by default; fleetsim's engines have none). No engine reports
//         it. Learned (one F per pool) from the prefills that came to an idle endpoint known to run
//         at the pool's fastest pace (its head at their dispatch, PrefillSample::at_dispatch, with
//         no decoder and none queued behind: see on_prefill_done for why not the others): each
//         one's time less the model's (the front end is not the model's), each endpoint's running
//         median of them, the lowest once half of those endpoints have them (note_frontend). It
//         counts once past C0 (one step's fixed cost) plus the residuals' own spread (below that it
//         is the model's noise; on fleetsim's engines, which have none, it stays under: round 43's
//         scan of the committed cells), and it is taken off the time of each such prefill before it
//         is a pace sample (20 ms on a 5 ms prefill read a 2x slow replica as 1.3x). It is kept
//         while no endpoint is idle (a pool loaded from its start has none). Param frontend_ms (-1,
//         the default: learned; >= 0: that, fixed). The queue ahead moves while the front end
//         works; F is added, not max(F, queue) (a queue shorter than F costs nothing in fact): its
//         error is a TTFT too long by at most F. F adds the same to every endpoint's cost: it moves
//         a ranking only through what is tested against the TTFT SLO (the miss price, shedding,
//         lost causes); it also delays a whole answer's expected first token. Without it the live
//         gateway's TTFTs over `sluice sim` came 1.25-1.5x the estimate at the median, a short
//         prompt's up to 5x (sluice_ttft_estimate_ratio).
//   k     the pool's own prefill pace for the size of the scheduled part (pool_pace 1, the default;
//         0: off): the pace's f prices a replica against the fastest one, and the fastest at the
//         profile's times; what the profile misses for every replica, at a size, is in the prefill
//         bins' m_b (pace, above). A pool whose engines all run slower than the profile (a larger
//         model than the default profile's, an older GPU) was priced at the profile's: on the 70B TP4
//         profile (fleetsim --profile llama-3-70b-tp4) every TTFT the policy expected came ~2.1x short
//         at the median, and its lost causes, shedding and miss prices tested that against the SLO.
//         Per doubling of the scheduled ms (the bins' own), where the bin has 8 samples or more:
//         log k = m_b + the fastest endpoint's a_e, less two of its standard errors, counted past log
//         1.25 only (the profile's own estimate on its own engines falls within 0.77-1.26 of the TTFT
//         got, p10-p90: there k is 1), in [1, 4]; a bin with fewer samples takes the nearest such
//         bin's (a size not seen yet); k is 1 at every size while no bin's is past 1.25. F's residuals
//         stay at the profile's times: k is read off the same prefills, and an engine front end not
//         learned yet is in the short bins (20 ms on 7.5 ms prefills reads as 3.6x) until F is, and
//         the at-dispatch samples have it taken off (a 3.6x k on short prompts meanwhile: tens of ms).
//         (Reading k off the long bins only, the profile's 64 ms and up, and F's residuals at k: on
//         fleetsim's 70B the hot prefix and the tool agent kept k 1, their few long prefills too few
//         samples, and the estimate 2x short.) As a whole answer's expected first token
//         (expected_prefill) already was, a first token is then expected at what the pool's prefills of
//         that size took. Per size, not one factor: a profile may miss long prefills only. Only the TTFT
//         (the cost's ttft_ms, the lost cause's and shedding's time alone): the decode terms have the
//         ITL calibration (the SLO, below). On fleetsim's default profile every bin's k is 1 (the
//         committed rows unchanged); on the 70B the median TTFT got / expected came to ~1.0-1.3
//         (bench/results/README.md, round 44).
//   The default (decode_price 2, SLO-priced): decode, the slowdown of the batch and the stall of the
//   decoders are priced by the expected lag behind the ITL SLO's pace, the ITL being uncertain; the
//   TTFT terms stay in plain ms. The goodput SLO and the TTFT percentile are what is measured: a token
//   that streams faster than the pace buys neither, so a cold prefill (paid in TTFT, and in the GPU
//   time others wait for) is bought only when it buys ITL headroom. With
//     itl(b, k) = step(b, k) / (1 - rho)   (rho: the prefill duty, below)
//     sd(b, k) = sqrt(b) x (step(b + 1, k + k / b) - step(b, k)) / (1 - rho): the batch count varies
//             like a Poisson count (an M/G/inf system holds a Poisson number of requests), each
//             sequence at the batch's mean context
//     lag(m, s) = E[max(0, X - itl_slo_ms)] for X ~ N(m, s^2)   (smooth: it grows before the pace is
//             reached, as the chance of missing it does)
//   decode_ms = O x lag(itl(B + 1, K + c), sd(B + 1, K + c)),  c = I + O / 2 (its mean context)
//   interference_ms = min(R, B O) x (lag(B + 1, K + c) - lag(B, K)): the others' tokens produced
//             while this request decodes, each behind the pace by that much more;
//             + lambda x O x itl(B + 1, K + c) x (step(B + 1, K + c) - step(B, K)): the requests that
//             arrive while it decodes (lambda x its decode time of them) each wait about a step of
//             the batch before their prefill runs, longer by what this request adds to the step, in
//             their TTFT (plain ms: the lag is 0 below the pace and does not see it). It prices
//             joining a long-context or crowded batch at light load, where the lag is 0 everywhere.
//             Without it (bench/results/README.md, round 10), agent sessions at 32 replicas, seed 2,
//             48 req/s had a TTFT p90 1.07x cache_aware's (1.04x with it), and the hot prefix at 32
//             replicas, seed 2, 160 req/s stayed on 11 holders (13.5 with it; TTFT p90 29 -> 26 ms).
//   prefill_imposed_ms = (P + lambda x stall / 2) x stall + D x o x (lag(itl(B, K) + stall / o) - lag(itl(B, K))),
//             stall = max(W, beta (U + D)) - max(W, beta D) + eps U (C + U / 2) (the time this prefill
//             adds to the steps it shares; free under the weight-read floor), o = 2 R / B (a decoder's
//             output, about twice what it has left): the queue and the requests arriving during
//             the stall (lambda x stall of them, waiting stall / 2 on average) pay it in TTFT; each
//             decoder only by the lag it adds to its mean ITL. All of it only where the batch is not
//             empty (B > 0): an idle endpoint's arrivals priced the same way lost more rates of the
//             hard suite than they won (round 34). lambda = requests dispatched per ms to
//             this endpoint: its own input tokens per ms (smoothed over ~2 s) / the mean prompt,
//             shrunk toward the pool's mean by its sample size: (n x own + pool) / (n + 1), n =
//             own x 2000 ms (the requests its average holds; the pool's mean counts as one).
//             The stall also holds the batch's KV that much longer: free while the KV has room,
//             taken one for one from the requests waiting for KV when it is full. So the term is at
//             least u^3 x B x stall (u = KV usage; u^3: the chance the KV is what binds, 0.1 at half
//             full, 0.6 at 0.85, 1 when full: then the plain-ms price below). Without it, under KV
//             pressure cold copies looked cheap, the hit rate fell, KV filled and the pool collapsed
//             (kv_pressure, bench/results/README.md round 6).
//             The work price (decode_bound_price 1, the default; 0 turns it off): the term is also at
//             least w x B x stall, and interference_ms at least w x min(R, B O) x (step(B + 1, K + c) -
//             step(B, K)) (the others' delay in plain ms), with
//               w = e x min(1, phi^2),
//               e = ((beta B if beta B > W, else 0) + delta B + gamma K) / step(B, K): the share of the
//                 step that grows with the batch, 1 - (dT/dB) / (T/B) for the token rate T = B / step,
//                 the replica's decode utilisation at a steady batch (at e -> 1 one more sequence adds
//                 no tokens per second, and a ms of prefill there is a ms of every decoder's progress);
//               phi = the pool's mean batch ITL (step(B, K) / (1 - rho) over its endpoints) over
//                 itl_slo_ms, as the evaluation of the last dispatched request found it: how near the
//                 pool as a whole is to the pace, where work spent anywhere comes out of the goodput.
//             Below the pace the lag prices a decoder's time at 0, so near the pool's capacity a cold
//             copy (more prefill) and a crowded batch (slower steps) looked free as long as each
//             batch stayed under the pace; the extra work then took the pool over it together
//             (round 18's cliff: agent sessions at 32 replicas, 144 req/s, sluice's uncached share
//             20.8% against cache_aware's 14.6%, goodput 52 against 101). Both terms together: the
//             stall's alone held fan-out bursts on their holders (their tail 4% later at 480 req/s);
//             e without phi, or phi to the first power, priced work at light load and raised the
//             TTFT p90 of agent sessions at 48-64 req/s to 1.06-1.67x cache_aware's; phi^3 left 5 of 9
//             seeds on the cliff against phi^2's 3 (bench/results/README.md, round 20).
//   decode_price 0 (plain ms, the default before): decode_ms = O x step(B + 1, K + c),
//             interference_ms = min(R, B O) x (step(B + 1, K + c) - step(B, K)),
//             prefill_imposed_ms = B x stall (by Little's law about as many wait behind as ahead).
//             It copies long contexts at light load to save decode time no SLO needs, paying a cold
//             prefill in TTFT (agent sessions, fan-out, tool agent: bench/results/README.md).
//   decode_price 1: the certain lag, lag = max(0, itl - itl_slo_ms), with the plain-ms prefill term;
//   decode_price 3: the expected lag as 2, with the plain-ms prefill term (holds a hot prefix on too
//   few replicas: TTFT p90 1.4x cache_aware's at 8 replicas; bench/results/README.md, round 5).
//   kv_ms = risk^2 x (1 + B) x beta x (I + O),  risk = clamp((u' - kv_risk_start) / (1 - kv_risk_start)),
//             u' = KV usage (staleness rule) + (U + O) / capacity: the expected cost of a
//             preemption, whose recompute (beta x its context) stalls the whole batch
//   eviction_ms = eviction_price x beta x max(0, U + O - F) x h: the blocks it allocates beyond F, the
//             room the endpoint's prefix cache has left (its learned LRU: capacity from
//             cache_config_info minus the blocks it holds), evict other prefixes, least recently used
//             first; h = the pool's share of input tokens found cached (own accounting, smoothed over
//             ~2 s) is how often a cached token is found again, and a token found again after its
//             eviction costs its prefill (beta) again. 0 while the caches have room.
//   adapter_ms = 0 if the adapter is running, adapter_load_ms if it must load into a free slot or is
//             waiting, adapter_wait_ms if every slot holds another adapter. An engine keeps up to
//             max_lora adapters loaded, the least recently used evicted for a new one, and its metrics
//             (vllm:lora_requests_info) name only the adapters with running or waiting requests: an
//             adapter whose requests have all finished looks like one to load. So the policy learns
//             residency from its own dispatches as it learns prefixes: an adapter among the last
//             max_lora distinct adapters it sent to that endpoint is taken as loaded (0) where the
//             signals show a free slot. Other clients' adapters are not seen: where they have
//             evicted this gateway's, the load it then meets was not priced.
//   followup_ms = g x (decode_ms + interference_ms + step_ms): the later requests that will extend
//             this one's context (an agent's or a chat's next turns) go where it goes, since their
//             prefix is cached there; each pays this endpoint's decode and interference as this
//             request does, and one step of its batch before its first token (step_ms = ttft_ms with
//             no queue ahead and nothing uncached: its prefill is warm and short). g = c^2 / (1 - c^2),
//             c = the share of requests that extend an earlier prompt as a whole (its blocks, its
//             partial tail, then more text: core/picker/prompt_ends.h), smoothed over ~128
//             dispatches, at most 0.95: a context is extended j more times with
//             probability c^j (a chain that goes on with probability c), and the load this endpoint
//             carries now is still there by then about as often (its own contexts go on with the
//             same c), so sum_j c^2j. 0 where no request extends another (c = 0). Without it (round
//             17's trace of agent sessions at 32 replicas), a new session's first turn went to a busy
//             replica that held the 2k system prompt (82 ms estimated against 125 ms cold on an idle
//             one), its 13 later turns followed it there, six replicas received 0-4 of 6,000 requests,
//             and the TTFT p90 was 1.06-1.10x cache_aware's at 48-64 req/s on 3 of 7 seeds (all four
//             of those losing rates pass with it; bench/results/README.md, round 18).
//
//   copy_credit_ms: what a copy of the request's longest cached prefix onto this endpoint is worth to
//             the requests that will come for that prefix (the terms above see one request; a copy
//             is paid once and serves every later one). With d = the deepest block some endpoint
//             holds, holders = the h endpoints holding all d blocks, lambda_p = the demand for that
//             prefix (core/picker/prefix_demand.h: dispatches for it, decayed over 2 s), and for an
//             endpoint that does not hold it: premium = (ttft_ms + prefill_imposed_ms) - the same had
//             it held the d blocks (the cold prefill and its stall; its evictions and KV risk stay
//             charged in full), + adapter_ms when the request's adapter loads into a free slot there
//             (a load is paid once too; a prefix's blocks are keyed by their adapter, so its later
//             requests find it loaded), steady = cost_ms with the prefill queued ahead removed (Q,
//             Q2 = 0) had it held them, and saving = max(0, the lowest steady of the holders (cost_ms,
//             Q and Q2 removed) - steady); neither steady counts a load into a free slot (a holder
//             that must load the adapter again pays it once as the copy does). Without the load in
//             the premium, a popular adapter's prefix stayed on the one replica that ran it (LoRA mix
//             at 8 replicas, 120 req/s: 1,460 of 4,000 requests on one replica, TTFT p90 1.19x
//             cache_aware's; 0.85x with it; bench/results/README.md, round 31). The prefill ahead is
//             removed because it drains within steps (a
//             burst's leader still in prefill at the holder is not a load its followers will keep
//             meeting); the batch (B, with the queued requests that will join it) and its KV read
//             are what persist:
//               copy_credit_ms = fit x min(premium, users x saving / (h + 1)),
//               users = 2 x max(0, n - sqrt(n)),  n = lambda_p x tau,  fit = min(1, F / (C_d - C + O))
//             (C_d: the d blocks' tokens; tau = PrefixDemand's 2 s; n: the requests the demand's
//             decayed count holds)
//             fit: only the part of the copy the endpoint's prefix cache has free room for earns
//             credit; what must evict displaces prefixes whose own demand is not known here (under
//             KV pressure copying popular prefixes filled the KV: kv_pressure, round 7).
//             users: the requests for the prefix that the copy will serve, forecast as far ahead
//             as the demand's estimate looks back: 2 tau (a count decayed with time constant tau
//             has the variance of a plain count over 2 tau); the copy stays cached after this
//             request (fit counts only free room). The forecast is the count less its standard
//             deviation (a Poisson count's, sqrt(n)): the copy's premium is certain and its users
//             are not, and the copies are made exactly where the count came out high, so the count
//             itself over-forecasts them (the optimizer's curse). A prefix asked for once before
//             forecasts none; a count of 60 (30 a second), 104 users of 120. With the count itself, a 6,000-token group
//             prompt seen once in the last 2 s was forecast ~2 users where its rate gave 0.4, and
//             repaid cold copies of it (llm-d at 64 replicas, 64 and 96 req/s: TTFT p90 1.05 and
//             1.08x cache_aware's; 1.04 and 1.04x with it; bench/results/README.md, round 31). Counting only the requests during this one's
//             decode (tool agents' short outputs: a 0.5 s horizon), a 15k-token prefix asked for
//             13 times a second stayed on one replica at TTFT p50 30 ms against 18 ms elsewhere,
//             a copy's 490 ms premium never repaid (round 17: 35 -> 28 losing rates of 313 with
//             2 tau; 1, 3, 5 and 30 tau gave 32, 30, 27 and 50). Forecasting over the longer of
//             2 tau and this request's decode (O x itl_ms, rounds 17-20) reached 9x past what the
//             estimate saw with long outputs, and the holders' load gap that prices the saving
//             does not last that long either: llm-d's 1,000-token outputs decode ~35 s, a
//             5-prompt group at 64 replicas counted ~56 users, a 30 ms saving bought a cold
//             6,000-token copy, the hit rate fell to 0.89 (0.93 with 2 tau) and the TTFT p90 rose
//             to 1.09-1.91x the best other policy's (0.83-1.08x with 2 tau; bench/results/README.md,
//             round 21). Spread over h + 1 holders instead of h, each saves about
//             saving / (h + 1) (a holder's batch shrinks by 1 / (h + 1); saving is the gap between a
//             loaded holder and an endpoint without that load). The cap: the credit refunds at most
//             the cold prefill's premium. 0 for holders, for a prefix no one holds, and before a prefix is asked
//             for twice. It is what spreads a hot prefix without a threshold: the credit grows with
//             the prefix's demand and with the holders' load, and shrinks as holders are added.
//             Without it (round 6) a hot prefix stayed on 2 of 8 replicas where cache_aware used 3
//             (TTFT p90 52 vs 33 ms; bench/results/README.md, round 7).
//
// What falls out: a hot prefix stays where it is cached while its decoders there cost less than a
// cold prefill elsewhere (prefill_imposed grows with the cold endpoint's batch, interference and
// decode with the warm one's K and B), and is copied to another endpoint, paying the cold prefill
// once, when they do, or when the warm endpoint would miss the SLO (below); it contracts when demand
// falls, because warm endpoints are then the cheapest again. A burst of identical prefixes inside one
// scrape interval is placed deliberately: every dispatch is in the own accounting at once (B, K, R,
// Q), so copies stay on the warm endpoint while it absorbs them and spill over when its batch makes
// them dearer than a cold prefill.
//
// The SLO (goodput: TTFT <= ttft_slo_ms, ITL <= itl_slo_ms): latency summed over requests is the
// currency, but a request that misses its SLO is lost whatever it cost, so an endpoint where this
// request would miss it pays a miss price on top of its cost:
//   miss_ms = miss_price x (ttft_slo_ms + O x itl_slo_ms), a share of the request's latency budget
//   (miss_price 0.25; 0: the hard tier, where such endpoints rank after every endpoint where it meets
//   the SLO, then by cost among each, the default before round 20).
// The hard tier took a request to any endpoint predicted to meet the SLO however much work that
// cost: near the pool's capacity, a session's next turn went cold to a replica just under the pace
// rather than stay warm at one just over it, and the pool went over together (agent sessions at 32
// replicas, 144 req/s: 3 of 9 seeds still on round 18's cliff with the work price, 0 with the miss
// price at 0.1-0.5; at 1, 3 seeds half way). With no ITL test at all, KV pressure at its top rates
// lost 25-75% of its goodput: the endpoints past the pace there are the ones about to preempt.
// 0.25 was chosen over the 84 hard-suite cells of seeds 2,3,5-9 (losing rates 24 at 0.25, 1 and the
// hard tier; goodput gmean 1.0043, 0.9992, 1.0013) and held on seeds 10-15 (bench/results/README.md,
// round 20).
// Where it misses, the miss price stands for the request's own lateness: its decode_ms (the lag of
// its own tokens behind the pace) is 0, and followup_ms drops its later turns' decode lag (they
// follow it here; decode priced by its lag, decode_price >= 1, with miss_price > 0). The lag it adds
// to the others (interference_ms) and its TTFT, which is also the queue it joins, stay charged. When
// every endpoint misses (the pool past its pace), the request's own stream no longer steered it to
// the smallest batch at the price of a cold copy; warm endpoints that slow the others less win
// (agent sessions at 32 replicas, 160 req/s: goodput 51-64 -> 60-71 on seeds 1-9; the hard suite's
// seeds 2,3,5-9: 24 -> 23 losing rates; bench/results/README.md, round 21).
//   itl_ms = step(B + 1, K + c) / (1 - rho) + (max(W, beta (U + D)) - max(W, beta D) + eps U (C + U / 2)) / O:
//            the decode step it joins, stretched by the prefill duty rho = min(0.9, beta x uncached
//            tokens dispatched per ms per endpoint, from the own accounting (input - predicted cached
//            tokens) summed over the pool and divided by its endpoints, smoothed over ~2 s), plus its
//            own prefill spread over the tokens the batch produces alongside it (a cold copy of a long
//            prefix stalls the batch it lands in). rho is the pool's mean, not each endpoint's own rate:
//            at ~10 requests/s per endpoint a 100 ms sample holds about one request, so per-endpoint
//            rates are noise, and the pick (the lowest estimate of many) chose the endpoint whose noise
//            was lowest, not the one with the least prefill to come. On kv_pressure at 32 replicas
//            that under-predicted the ITL of the chosen endpoint 2-3x (22 ms predicted vs 64 ms
//            measured in fleetsim), so cold endpoints "met the SLO", took the request cold, and the hit
//            rate fell from 40% to 18%: more prefill, a full KV, preemptions, collapse. The endpoint's
//            own queue and batch (Q, B, K) are exact and stay per endpoint.
//   it misses when itl_ms > itl_slo_ms or ttft_ms > ttft_slo_ms. The same step time is the batch's:
//   an endpoint it would push past the ITL SLO is one where it misses too.
//   Lost causes (lost_causes 1, the default; 0: off): a request whose first token would come after
//   ttft_slo_ms even alone, on the endpoint holding its longest cached prefix at the fastest pace (a
//   50k-100k-token document: 4-10 s of prefill), misses the SLO everywhere whatever the load; it is
//   tested instead against its own times alone at each endpoint's pace (ttft_of and sluice_itl_ms
//   with no queue and no batch) plus the SLO's: the load may delay it by as much as the SLO lets
//   the load delay any request. Shed 2 weighs its chance of meeting that ITL target against the
//   batch's expected new misses of the SLO itself, and where no endpoint serves it, it is shed as
//   any request is (alone it meets its targets by their definition, so the load is why). Before,
//   such a request was never shed ("its lateness is its own"): past the pool's capacity the
//   documents of a cost mix (1% of requests, most of the GPU time) kept being admitted, queued
//   behind each other for minutes, and the chats they crowded out were shed instead (mixed fleet,
//   8 replicas, seed 47, 100 req/s: 164 chats shed, goodput 12.4 of a peak 31.9, the documents'
//   TTFT p90 83 s; with it 15 of 38 documents shed and no chat, goodput 39.8 (its peak 60.9 at 80 req/s), their TTFT p90 18 s;
//   bench/results/README.md, round 39).
//   The ITL calibration (itl_calibration 1, the default; 0: off): the ITL tested against the SLO is
//   k_e x itl_ms (in every term that prices a lag, the SLO is itl_slo_ms / k_e), k_e what the
//   endpoint's decodes showed against the model: each complete stream is a sample x = log(its own
//   ITL / expected_itl_ms of the batch it ended in, at the endpoint's pace; the batch as a ranking
//   counts it, the peers' and other clients' decoders at the mean context included,
//   DecodeSample::others: with 4 gateway replicas each saw a quarter of it), KV pressure included
//   (the pace leaves those samples out); k_e = exp(m - 2 se) in [1, 4], m = (w_e m_e + 8 m_pool) /
//   (w_e + 8), m_e the endpoint's mean (~64 samples, decayed per sample), m_pool the pool's (~256,
//   shrunk toward 0 by one), se the samples' spread (with a prior 0.25 counted as one more sample)
//   over sqrt(w_e + 8), each weight its count faded with a 10 s time constant since its last sample
//   (what the model misses of an ITL is mostly load, and follows it). A whole answer's decode is
//   timed from its expected first token, so that estimate's error is in it: it is a sample only
//   where its decode is expected to last at least as long as the span from its dispatch to that
//   first token (DecodeSample::expected_first_ms). Every whole answer counted, a short one after a
//   cold prefill the model underrated read 2-2.7x and the tool agent shed requests at 30 req/s;
//   none counted, the mixed fleet under KV pressure with no client streaming still collapsed
//   (mixed-whole-kvp8 at 75 req/s: 3.0-4.4; 39.0-39.3 with the rule). Against the
//   batch it ended in, not the ITL expected at its dispatch: that one also holds what the batch did
//   after the dispatch (the pick's lowest estimate of many regressing to the mean, a batch that
//   grew), which shed 2 already weighs; calibrated by it, the hot prefix at 32 replicas, 640-800
//   req/s, shed 7-13% of its goodput. Never under the model, and only what the samples tell apart
//   from their noise (a uniform fleet's streams read 1.00-1.06x, and k = 1: the hard suite's runs
//   are unchanged where the KV has room). A request that alone on the least calibrated endpoint
//   would miss the ITL SLO is not shed for it (after a burst whose streams ran slow, an idle pool
//   is not load). Without it, on a fleet with half its replicas 2x slower under KV pressure past
//   capacity (kv_pressure at 8 replicas, 75-90 req/s), the model read ~41 ms where the fast
//   replicas' full KV (waits, preemptions) made ~55 and the slow ones' (their pace read 1.5x, the
//   factor less its two standard errors) ~100; sluice admitted ~60 req/s of which almost none met
//   the SLO: goodput 2.6-6.0 where ~45 was sustainable (bench/results/README.md, round 38).
// Shedding (shed 1; the default, 2, below adds to it): when the request would miss its SLO on every endpoint, and on an
// idle endpoint holding its longest cached prefix it would meet the SLO (its prefill alone, ttft_of
// with no queue and no batch, <= ttft_slo_ms, and its ITL alone <= itl_slo_ms: an SLO no engine step
// can meet sheds nothing; a lost cause, above, meets its own targets alone), the load is what makes it miss: the first
// candidate carries Candidate::shed and the drivers refuse the request (429 over_slo, a jittered
// Retry-After; shed_advised in policy.h: never a request of positive priority). The Retry-After's
// base (Candidate::retry_after_ms, shed_retry_base in policy.h) is when the request would meet the
// SLO at the endpoint nearest to it: its TTFT excess, ttft_ms - ttft_slo_ms (the queue ahead drains
// that long first), and where its ITL is past the pace, the time the share 1 - itl_slo_ms / itl of
// the batch takes to finish, (1 - itl_slo_ms / itl) x 2 R / B x itl (remaining outputs spread over
// [0, 2 R / B]); at least one engine step (c0 + W: nothing on an engine changes sooner); plus the
// backlog of the requests shed before it, which come back first: their prefill alone, less what the
// endpoints have worked off since (each a ms of work per ms), over the endpoints; at most 30 s
// (the drivers report each refusal, PoolRouter::on_shed; a ranking alone, /debug/pick's, adds
// nothing; with peer_load sharing the other gateway replicas' refusals join it too, Policy::on_peer_shed).
// Without the backlog a burst's refusals were all told the same few tens of ms and came back
// together to a pool still full (40 ~4,000-token prompts at once, 2 replicas, the OpenAI SDK's 2
// retries: 5 of 40 served; the fixed 1 s: 13; with it 35, test_openai_sdk.py). The load that sheds
// a request under a steady overload is mostly a queue a few tens of ms past the SLO: with clients
// that retry as the OpenAI SDKs do (fleetsim --client-retries 2), the fixed 1 s base it replaced
// made every served retry miss the 1 s TTFT SLO (hot prefix 8 replicas, seed 2, 160 req/s: goodput
// 98, TTFT p90 1.16 s; with the estimate 114 and 104 ms; bench/results/README.md, round 24). Served, it would
// be late anyway and would slow the requests that can still make it; refused, the pool stays at
// the rate it can serve within the SLO, and the client comes back when told. A request too long to
// meet the SLO even alone is held to its own times alone plus the SLO's (lost causes, above). No threshold:
// the SLO is the one above. Past the pool's capacity every policy misses for most requests, and the
// one that keeps some replicas fast by starving others (llmd_default) kept ~half in the SLO where
// sluice, spreading the overload evenly, kept 3-28%; shed, sluice keeps the pool at its capacity
// (hot prefix 8 replicas, 200 req/s: goodput 31.6 -> 114.4 on seed 2, 20.7% of requests shed;
// bench/results/README.md, round 22). 0: never shed (the request goes to the cheapest endpoint).
// shed 2 (the default since round 25) also sheds by the expected goodput of admitting: an endpoint
// where the request meets the SLO serves it only if its chance of meeting the ITL SLO exceeds the
// expected new misses of the batch it joins, 1 - P(itl_ms > itl_slo_ms) > B x (P(batch ITL after >
// SLO) - P(before > SLO)) (the decode price's normal model, sd of the batch's ITL). Past capacity
// shed 1 admits wherever a request would itself just meet the pace, so the batches settle at the
// pace and about half of the admitted still miss (agent sessions at 32 replicas, 160 req/s:
// attainment 0.50-0.64; KV pressure at 8 replicas, 90 req/s: 0.26-0.32); shed 2 holds them below
// it (0.74-0.81 there). Round 22 kept it opt-in for a false alarm: at hot prefix 32 replicas,
// 640 req/s it shed 2-3% where shed 1 served 100% within the SLO. That was the 8,000-request run
// ending before the batches reached their steady size: run 3x longer (24,000 requests), shed 1
// sheds 12% there and keeps 0.83 of requests in the SLO, shed 2 0.86 (560 req/s: 0.95 and 0.97).
// And with clients that retry (as the SDKs do) shed 1's overload misses come back: the hard suite
// loses 8 of 313 checked rates with shed 1, 4 with shed 2 (bench/results/README.md, round 25).
// saturated: waiting (staleness rule) >= queue_limit; saturated endpoints rank after all others.
// KV usage is priced (kv_ms), not a tier: an earlier "KV usage >= 0.97 ranks last" sent requests for
// the prefixes a full replica held to replicas that did not hold them, and under KV pressure (every
// replica full) that copying evicted what others needed (kv_pressure, bench/results/README.md). Ties: fewer assignments since scrape, fewer in flight, then rotation.
// Embedding requests or pools: no prefix reuse and no decode, U = I, O = 0: least load in time.
//
// Defaults: the cost parameters are the default engine profile's (engine-cost-model.md, Llama-3-8B
// on H100: c0_ms 2, w_ms 5.5, beta_ms 0.022, delta_ms 0.02, gamma_ms 5e-5, eps_ms 1.5e-6,
// chunk_tokens 8192 = max_num_batched_tokens); KV capacity and block size come from the engines'
// cache_config_info. The SLO: ttft_slo_ms 1000, itl_slo_ms 50 (the goodput SLO of workloads.md; set
// them to the service's own). decode_price 2 (SLO-priced, above), eviction_price 1 (0: evictions are not
// priced), decode_bound_price 1 (the work price, above; 0: off), miss_price 0.25 (the SLO, above; 0: the hard tier),
// shed 2 (shedding, above; 1: only where the request itself misses; 0: off), itl_calibration 1 (the SLO,
// above; 0: off), lost_causes 1 (the SLO, above; 0: off), engine_itl 1 (pace, above; 0: off), pool_pace 1 (k, above; 0: off), frontend_ms -1 (F, above: learned; >= 0: fixed). Policy knobs: kv_risk_start 0.8, queue_limit 64,
// adapter_load_ms 30, adapter_wait_ms 200, max_output_tokens 2048 (cap on O), default_output_tokens
// 256 (O when the request gives no bound), mean_prompt_tokens 512 (initial mean prompt),
// max_prefix_blocks 8192. All are policy_params of the same name.
#pragma once
#include <array>
#include <functional>
#include <vector>

#include "core/config.h"
#include "core/picker/policy.h"
#include "core/picker/policy_params.h"
#include "core/picker/prefix_demand.h"
#include "core/picker/prefix_tracker.h"
#include "core/picker/prompt_ends.h"

namespace sluice {

struct SluiceParams {
  double c0_ms = 2.0, w_ms = 5.5, beta_ms = 0.022, delta_ms = 0.02, gamma_ms = 5e-5, eps_ms = 1.5e-6;
  double chunk_tokens = 8192;
  double kv_risk_start = 0.8;
  double ttft_slo_ms = 1000, itl_slo_ms = 50;
  double decode_price = 2;  // 0: plain ms; 1: certain lag behind the ITL SLO's pace; 2: expected lag (default)
  double queue_limit = 64;
  double eviction_price = 1;  // 0: evictions are not priced
  double decode_bound_price = 1;  // the work price's weight (0: off; prefill_imposed_ms, interference_ms above)
  double miss_price = 0.25;       // a miss's price, a share of the request's SLO budget (0: the hard tier; the SLO above)
  double adapter_load_ms = 30, adapter_wait_ms = 200;
  double max_output_tokens = 2048;
  double default_output_tokens = 256;
  double mean_prompt_tokens = 512;
  double max_prefix_blocks = 8192;
  double lost_causes = 1;         // 1: a request that misses the TTFT SLO alone is tested against that time plus the SLO (the SLO, above); 0: off
  double itl_calibration = 1;     // 1: the ITL tested against the SLO is calibrated by what streams showed (the SLO, above); 0: off
  double engine_itl = 1;          // 1: the engines' reported ITL is a sample of their pace (pace, above); 0: off
  double frontend_ms = -1;        // F (above): < 0 learned (the default), >= 0 that, fixed
  double front_end_ms = 0;        // F in use in ttft_ms (SluicePolicy sets it: frontend_ms, or learned)
  double pool_pace = 1;           // 1: the pool's own prefill pace, against the profile's, is learned (k, above); 0: off
  // k in use in ttft_ms, one per doubling of the scheduled TTFT's ms (SluicePolicy sets it: the pool's
  // own pace; null: 1 at every size).
  const double* ttft_factors = nullptr;
  double shed = 2;                // refuse requests that would miss the SLO everywhere because of load, or where
                                  // admitting costs the batch more than it gains (1: only the former; 0: off)
  static SluiceParams from(PolicyParams& p);
};

// The cost terms of one (request, endpoint) pair, in ms (see the formula above).
struct SluiceCost {
  double ttft_ms = 0, decode_ms = 0, interference_ms = 0, prefill_imposed_ms = 0, kv_ms = 0, adapter_ms = 0;
  double eviction_ms = 0;
  double copy_credit_ms = 0;  // the share of a cold copy's premium its future users repay (evaluate())
  double followup_ms = 0;     // the later turns that will extend this request's context, where it goes
  double total() const {
    return ttft_ms + decode_ms + interference_ms + prefill_imposed_ms + kv_ms + adapter_ms + eviction_ms + followup_ms -
           copy_credit_ms;
  }
};

// What the cost is computed from (the inputs named above), so each term can be tested on its own.
struct SluiceInputs {
  double input = 0, output = 0, cached = 0;     // I, O, C
  double decoding = 0, queued = 0;              // D, P
  double kv_read = 0, remaining = 0;            // K, R
  double queue_tokens = 0;                      // Q
  double queue_pairs = 0;                       // Q's prefill attention pairs, sum U (C + U / 2)
  double kv_usage = 0, capacity_tokens = 1;     // u, KV capacity in tokens
  double adapter_ms = 0;
  double prefill_duty = 0;                      // rho
  double cache_free_tokens = 1e18;              // F: the endpoint's prefix cache not yet holding any prefix
  double reuse = 0;                             // h: the pool's share of input tokens found cached
  double arrivals_per_ms = 0;                   // lambda: requests dispatched per ms per endpoint
  double followups = 0;                         // g: the later turns expected to extend this context
  double pace_share = 0;                        // phi: the pool's mean batch ITL over the ITL SLO (work price)
};
SluiceCost sluice_cost(const SluiceParams& p, const SluiceInputs& in);
// E[max(0, X - limit)] for X normal with this mean and standard deviation (max(0, mean - limit)
// when sd is 0), and P(X > limit).
double sluice_expected_excess(double mean, double sd, double limit);
double sluice_excess_probability(double mean, double sd, double limit);
// The ITL of a batch of b sequences reading k KV tokens: its mean (the step stretched by the prefill
// duty) and its standard deviation (the batch count varying like a Poisson count, sqrt(b) sequences
// at the batch's mean context).
struct SluiceItl {
  double mean_ms = 0, sd_ms = 0;
};
SluiceItl sluice_batch_itl(const SluiceParams& p, double b, double k, double prefill_duty);
// The inter-token latency the request would see (and impose on its batch), itl_ms above.
double sluice_itl_ms(const SluiceParams& p, const SluiceInputs& in);
// g, the follow-ups' weight, from c, the share of requests that extend an earlier prompt:
// c^2 / (1 - c^2), c at most 0.95 (followup_ms above).
double sluice_followups(double continuation);
// True when the request would meet the SLO on this endpoint.
bool sluice_meets_slo(const SluiceParams& p, const SluiceInputs& in, const SluiceCost& c);

// The share (0..1) of the head of an endpoint's own prefill queue (EndpointLoad::prefill_head_*)
// done `elapsed_ms` after it became the head: elapsed over the time its prefill takes alone beside
// `decoding` sequences reading `kv_read` KV tokens (the TTFT formula with no queue ahead). The
// policy subtracts that share of the head's tokens and pairs from Q and Q2.
double sluice_head_progress(const SluiceParams& p, double head_tokens, double head_pairs, double decoding, double kv_read,
                            double elapsed_ms);

// True cached tokens of `req` on pool endpoint `endpoint` (the oracle hook).
using CachedTokensOracle = std::function<int64_t(size_t endpoint, const PickRequest& req)>;

class SluicePolicy : public Policy {
 public:
  SluicePolicy(SluiceParams params, PoolKind kind);
  SluicePolicy(const SluicePolicy&) = delete;  // params_.ttft_factors points into ttft_factors_
  SluicePolicy& operator=(const SluicePolicy&) = delete;
  std::string_view name() const override { return "sluice"; }
  void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
            std::vector<Candidate>& out) override;
  void on_dispatch(const PickRequest& req, size_t endpoint, Time now) override;
  void on_prefill_done(size_t endpoint, const PrefillSample& sample, Time now) override;
  void on_decode_done(size_t endpoint, const DecodeSample& sample, Time now) override;
  ExpectedPrefill expected_prefill(size_t endpoint, const PrefillSample& head) const override;
  double expected_itl_ms(size_t endpoint, const PrefillSample& batch) const override;
  std::vector<HotPrefix> hot_prefixes(Time now, size_t n) const override;
  void on_shed(const Candidate& advised, Time now) override;
  bool endpoint_speed(size_t index, double& pace, double& itl_calibration) const override {
    pace = pace_of(index);
    itl_calibration = itl_calibration_of(index);
    return true;
  }
  void on_peer_shed(double work_ms, Time now) override;
  void on_endpoints_reset(size_t count) override {
    prefix_.reset(count);
    rate_ = PrefillRate{};
    endpoint_input_.clear();
    recent_adapters_.clear();
    demand_.clear();
    ends_.clear();
    continuation_ = 0;
    pace_share_ = next_pace_share_ = 0;
    pace_.clear();
    bin_effect_ = {};
    pace_bins_used_ = 0;
    pace_fastest_ = FastestPace{};
    pace_refreshed_ = Time{};
    itl_calib_.clear();
    itl_calib_pool_ = ItlCalibration{};
    itl_pool_factor_ = 1.0;
  }
  void explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
               std::vector<Explanation>& out) override;
  // Each kept endpoint's pace (its fit's cells and the bins'): an older GPU stays priced as one
  // across a reload that changed the pool. Only from a sluice policy with the same step-time model
  // (the samples are ratios to it).
  void adopt_endpoints(const Policy& old, std::span<const int> old_of_new) override;

  const SluiceParams& params() const { return params_; }
  const PrefixTracker& prefix() const { return prefix_; }
  // c: the share of recent requests that extended an earlier prompt (followup_ms above).
  double continuation_share() const { return continuation_; }

 protected:
  // Set by OraclePolicy: replaces the prefix index's prediction.
  CachedTokensOracle oracle_;

  PrefixTracker* prefix_tracker() override { return &prefix_; }
  const PrefixTracker* prefix_tracker() const override { return &prefix_; }

 private:
  // One endpoint's evaluation. rank() reads cached, saturated and score; explain() all of it.
  struct Eval {
    SluiceInputs in;
    SluiceCost cost;
    int64_t cached = 0;
    double ttft_ms = 0;  // cost.ttft_ms (the candidate's expected TTFT)
    double itl_ms = 0;
    double score = 0;  // -cost.total(), less kMissesSlo when it misses the SLO (the candidate's score)
    double total = 0;  // cost.total() before the copy credit
    // The copy credit's: the cold copy's premium (-1: a holder, or no demand) and the steady cost.
    double premium = -1, steady = 0;
    double free = 0, copy_tokens = 0;  // F, and the tokens the copy allocates (C_d - C + O)
    double copy_users = 0;  // the requests the copy is forecast to serve (explain())
    double meets_in_ms = 0;  // where it is not served: ms until it would meet the SLO here (shedding)
    bool fresh = false, saturated = false, meets_slo = true;
    bool serves = true;  // explain(): meets_slo, and with shed 2 admitting it gains more than it costs the batch
    double ttft_target_ms = 0, itl_target_ms = 0;  // explain(): what meets_slo tests (the SLO, or a lost cause's own)
  };
  // Uncached tokens dispatched to one endpoint per ms, smoothed (the prefill duty's input).
  struct PrefillRate {
    int64_t last_total = -1, last_input = 0;
    Time last{};
    double per_ms = 0;
    double hit = 0;  // the share of input tokens predicted cached, smoothed the same way
    double input_per_ms = 0;  // input tokens dispatched per ms
  };
  // kFull: every field of each Eval (explain()); otherwise only what rank() reads.
  template <bool kFull>
  void evaluate(const PickRequest& req, std::span<const EndpointView> endpoints, Time now);
  double prefill_duty(std::span<const EndpointView> endpoints, Time now);
  bool embedding(const PickRequest& req) const { return kind_ == PoolKind::embedding || req.kind == ApiKind::embedding; }
  double output_of(const PickRequest& req) const;

  SluiceParams params_;
  PoolKind kind_;
  PrefixTracker prefix_;
  double mean_prompt_, mean_output_;
  size_t cursor_ = 0;
  std::vector<Eval> evals_;
  PrefillRate rate_;  // the pool's uncached tokens dispatched (the prefill duty's input)
  // Per endpoint (by position): input tokens at the last sample, and input tokens per ms, smoothed
  // like the pool's (the arrival rate's input).
  struct EndpointInput {
    int64_t last = 0;
    double per_ms = 0;
  };
  std::vector<EndpointInput> endpoint_input_;
  // The pace (header): every sample is x = log(observed ms / the profile's ms), in a bin by its kind
  // (prefill, whole answer's decode, streamed decode) and size (a doubling of the profile's ms), and is fitted as
  // x = a_e + m_b + noise: the endpoint's effect a_e (its log R) plus the bin's m_b (what the
  // profile misses for every endpoint at that size). A fit of both, not the endpoint's samples
  // against the pool's mean per bin: where the policy sends the large prompts to some endpoints
  // and the short ones to others, the pool's mean of a bin is those endpoints' pace and hid it
  // (cost mix on a half-slow fleet: 50k-100k-token documents sent to the slow replicas, whose
  // prefills then set the documents' bin, priced 1.0-1.1x; round 37).
  static constexpr size_t kPaceBins = 16;  // per kind
  // Prefill bins, whole answers' decode bins, streamed decodes', the engine's ITL: at most 64
  // (pace_bins_used_'s bits).
  static constexpr size_t kPaceCells = 4 * kPaceBins;
  static_assert(kPaceCells <= 64);

  // k counts only past this (header): the profile's own TTFT estimate on its own engines falls
  // within 0.77-1.26 of the TTFT got (p10-p90; bench/results/README.md, round 43).
  static constexpr double kPoolPaceTolerance = 1.25;
  static constexpr double kPaceKeep = 1.0 - 1.0 / 64;  // an endpoint's samples decay per sample: ~64
  // An endpoint's evidence fades with this time constant since its last sample (pace_bounds): a
  // GPU's pace is its hardware's, and what changes it (clocks throttled, a neighbour on the host)
  // lasts minutes. With 2 s (rounds 35-36) a slow replica the pricing had kept idle for a few
  // seconds was priced as the fastest again and drew the next long prompt (round 37).
  static constexpr double kPaceFadeMs = 30000.0;
  struct PaceCell {
    double n = 0, s = 0, q = 0;  // decayed count, sum of x, sum of x^2
  };
  struct Pace {
    std::array<PaceCell, kPaceCells> cells{};
    double samples = 0;        // the cells' decayed count
    Time last{};               // the last sample
    double log_r = 0, se = 1;  // a_e and its standard error (pace_bounds)
    double factor = 1.0;
  };
  // The fastest endpoint's pace: the lowest log R + 2 se offered since the last refresh.
  struct FastestPace {
    bool known = false;
    double log_r = 0, se = 0;
    void offer(const Pace& q) {
      if (known && q.log_r + 2 * q.se >= log_r + 2 * se) return;
      known = true;
      log_r = q.log_r;
      se = q.se;
    }
  };
  FastestPace pace_fastest_;
  void pace_bounds(Pace& q, Time now) const;
  // The variance `var` of w samples with a prior 0.25 (a ratio's +-50%) counted as one more sample:
  // a few alike samples are not a tight estimate (the pace's and the ITL calibration's).
  static double with_prior_variance(double w, double var) { return (w * var + 0.25) / (w + 1); }
  std::vector<Pace> pace_;
  std::array<double, kPaceCells> bin_effect_{};  // m_b
  std::array<double, kPaceBins> ttft_factors_{};  // k per prefill bin (header; params_.ttft_factors)
  void refresh_ttft_factors();
  double ttft_factor_of(const Eval& e, double pace) const;
  uint64_t pace_bins_used_ = 0;  // the cells any endpoint has a sample in (bit b: cell b)
  Time pace_refreshed_{};
  double pace_factor(const Pace& q) const;
  void refresh_pace(Time now);
  void choose_fastest();
  // The fit's two halves: one endpoint's a_e given the bins', one bin's m_b given the endpoints'.
  void fit_endpoint(Pace& q) const;
  void fit_bin(size_t bin);
  double pace_of(size_t index) const { return index < pace_.size() ? pace_[index].factor : 1.0; }
  double duty_ = 0;  // the pool's prefill duty at the last ranking (expected_itl_ms)
  // The ITL calibration (header, the SLO): x = log(a decode's own ITL / expected_itl_ms of the batch
  // it ended in), per endpoint (decayed per sample as the pace's, kPaceKeep) and over the pool
  // (kItlPoolKeep); factor = exp(the endpoint's mean shrunk toward the pool's by kItlPriorSamples,
  // less two standard errors; each weighed by its count faded since its last sample, kItlFadeMs),
  // in [1, 4].
  struct ItlCalibration {
    double w = 0, s = 0, q = 0;  // decayed count, sum of x, sum of x^2
    Time last{};
    double factor = 1.0;
    void add(double x, double keep, Time now) {
      w = w * keep + 1;
      s = s * keep + x;
      q = q * keep + x * x;
      last = now;
    }
  };
  static constexpr double kItlPoolKeep = 1.0 - 1.0 / 256;
  // What the model misses of an ITL is mostly load (a full KV's waits, a burst's prefills) and
  // follows it within seconds: faded faster than a GPU's pace (kPaceFadeMs).
  static constexpr double kItlFadeMs = 10000.0;
  static constexpr double kItlPriorSamples = 8;
  std::vector<ItlCalibration> itl_calib_;
  ItlCalibration itl_calib_pool_;
  void note_itl(size_t endpoint, double x, Time now);
  void refresh_itl_calibration(Time now);
  double itl_pool_factor_ = 1.0;  // an endpoint's without samples of its own: the pool's
  double itl_calibration_of(size_t index) const { return index < itl_calib_.size() ? itl_calib_[index].factor : itl_pool_factor_; }
  // The profile's ms for a queue head's prefill (as a sample), and the tokens behind it its steps carry.
  std::pair<double, double> prefill_model(const PrefillSample& s) const;
  static size_t pace_bin(double model_ms);
  // One sample of an endpoint's pace: its observed ms against the profile's, in cell `cell`.
  void note_pace(size_t endpoint, size_t cell, double observed_ms, double model_ms, Time now);
  // F (header): each endpoint's running median of its idle at-dispatch heads' residuals
  // (note_frontend), and what counts of them (refresh_frontend).
  struct FrontEnd {
    double median = 0, spread = 0;
    int64_t samples = 0;
  };
  void note_frontend(size_t endpoint, double residual_ms);
  void refresh_frontend();  // params_.front_end_ms from frontend_ (and the paces)
  bool at_fastest_pace(size_t endpoint) const;
  std::vector<FrontEnd> frontend_;
  // Per endpoint (by index): the adapters last dispatched there, most recent first, as hashes of their
  // names, distinct (adapter_ms above: those among the first max_lora are taken as loaded).
  static constexpr size_t kRecentAdapters = 16;
  struct RecentAdapters {
    std::array<uint64_t, kRecentAdapters> names{};
    size_t count = 0;
    void note(uint64_t name);
    bool loaded(uint64_t name, int max_lora) const;
  };
  std::vector<RecentAdapters> recent_adapters_;
  static uint64_t adapter_key(std::string_view adapter);
  // The demand for each cached prefix (the copy credit's lambda_p), and the key of the last
  // evaluated request's cached prefix with that request's text (on_dispatch counts it).
  PrefixDemand demand_;
  uint64_t last_key_ = 0;
  bool last_continues_ = false;  // the last evaluated request extends an earlier prompt (ends_)
  // Where recent prompts ended, and the share of requests that extend one of them, smoothed over
  // ~128 requests: the follow-ups' weight (followup_ms).
  PromptEnds ends_;
  double continuation_ = 0;
  // phi (SluiceInputs::pace_share) as the last dispatched request's evaluation found it, and as the
  // last evaluation found it (on_dispatch moves it over).
  double pace_share_ = 0, next_pace_share_ = 0;
  // The last evaluation advises shedding: no endpoint meets the SLO, and alone on an idle endpoint
  // holding its longest cached prefix the request would (shedding, header).
  bool shed_advice_ = false;
  // With it, the shed request's Retry-After base (header): the soonest it would meet the SLO.
  double shed_wait_ms_ = 0;
  double shed_alone_ms_ = 0;  // its prefill alone (the shed backlog's unit of work)
  // The prefill of the requests shed and told to come back (on_shed), not yet worked off (rank():
  // a burst's refusals are told to come back one after another, not all at once).
  double shed_backlog_ms_ = 0;
  Time shed_backlog_at_{};
  double peer_shed_ms_ = 0;  // on_peer_shed's work, joining the backlog at the next ranking
  void drain_shed_backlog(Time now, double endpoints);
  static constexpr double kShedRetryMaxMs = 30000.0;
  const char* last_text_ = nullptr;
  size_t last_text_size_ = 0;
  double pool_arrivals(size_t endpoints) const;           // the pool's mean, per endpoint
  double arrivals_of(size_t i, double pool, double per_prompt) const;  // per_prompt = 1 / max(1, mean prompt)
};

}  // namespace sluice
