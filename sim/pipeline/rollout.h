// Rollout: the cost of one engine iteration (roofline of weight + KV bytes vs FLOPs, plus TP
// all-reduce and per-step overhead) and a continuous-batching engine that advances time
// analytically between batch changes (admission, completion, preemption) instead of per token.
#pragma once

#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "models/precision/footprint.h"
#include "sim/engine/event_queue.h"
#include "sim/engine/trace.h"
#include "sim/scenario/scenario.h"

namespace rlsim::sim {

/// Expected number of distinct experts a batch of `tokens` tokens routes to in one MoE layer,
/// each token choosing `active` of `experts` uniformly: E (1 - (1 - k/E)^b) (DESIGN.md).
double experts_touched(int experts, int active, double tokens);

/// Per-iteration cost of one rollout engine of tensor_parallel devices. All times in seconds.
///
/// decode_s(b, S): b sequences each produce one token while reading S cached tokens in total:
///   memory  = dense weights/TP / (HBM B * eff_mem) + S * kv_bytes_per_token_per_device / (HBM B * eff_mem * eff_attn)
///             + touched experts(b)/TP / (HBM B * eff_mem * w / (w + w_half))   (fused-MoE weight stream,
///             w = expert_intermediate x EP / TP columns per rank, w_half calibrated)
///   compute = (b * 2 N_active / TP + S * attention FLOPs per cached token / TP) / (rate(recipe) * eff_compute),
///             the routed-expert part of N_active at the grouped-GEMM efficiency (expert_compute_s)
///   time    = max(memory, compute) + comm(b) + overhead
///   comm(b) = 2 * layers * all_reduce(b * hidden bytes per token, TP) without expert parallelism (a
///             hierarchical all-reduce when the engine spans nodes); with
///             EP > 1 the MoE layers replace their FFN all-reduce by a dispatch (b/EP tokens x top-k
///             x hidden in the recipe's activation format) and a combine (same, BF16) all-to-all
///             over the EP ranks: layers * all_reduce + dense layers * all_reduce + MoE layers *
///             (a2a(dispatch) + a2a(combine)).
/// Data-parallel attention with wide expert parallelism (rollout.data_parallel DP > 1, or
/// expert_parallel > tensor_parallel; SGLang --enable-dp-attention, vLLM --data-parallel-size with
/// --enable-expert-parallel): the engine's D = TP x DP devices hold the attention and dense weights
/// per TP group and 1/D of the routed experts each. The engine's b sequences and S cached tokens
/// are spread over the DP ranks and the slowest rank gates the step: it runs ceil(b / DP)
/// sequences with their share of S (dense weights, attention, KV reads and TP all-reduces at that
/// batch); the routed experts see all b tokens, each device 1/D of the touched experts' bytes and
/// of the expert FLOPs times the load of its busiest device under random top-k routing, 1 +
/// sqrt(2 ln D / mu) at mu = b x top-k / D expert assignments per device (balls into bins,
/// Raab & Steger 1998); each MoE layer a dispatch and a combine expert_all_to_all_s over EP ranks.
/// where overhead(b) = iteration overhead + b * per-sequence overhead + layers * per-layer overhead
/// + MoE layers * MoE-layer overhead (+ dynamic activation quantisation kernels when the recipe
/// quantises activations). The per-sequence term (scheduler bookkeeping, sampler over the
/// vocabulary) is what makes a batch-1 tail step cheaper than a full-batch step's fixed cost.
struct RolloutCostModel {
  double weight_bytes_per_device = 0;        // resident rollout weights per device
  double dense_bytes_per_device = 0;         // weights read every iteration (all but routed experts)
  double expert_bytes_per_device = 0;        // one routed expert in every MoE layer, per device share
  int experts = 0, active = 0;               // routed experts (0 for dense models)
  double kv_bytes_per_token_device = 0;      // KV stored per token per device
  double matmul_flops_per_token_device = 0;  // 2 * active matmul params / TP, routed experts excluded
  double expert_flops_per_token_device = 0;  // 2 * routed-expert params one token passes through / TP
  double moe_half_tokens = 0;                // grouped-GEMM half-efficiency point (tokens per expert)
  double attn_flops_per_ctx_device = 0;      // attention FLOPs per (query, cached token) pair / TP
  double mem_bw = 0;                         // effective bytes/s of the weight stream
  double kv_mem_bw = 0;                      // effective bytes/s of paged-attention KV reads
  double expert_mem_bw = 0;                  // effective bytes/s of the fused-MoE expert weight stream (MoE only)
  double compute_rate = 0;                   // effective FLOP/s
  /// compute_rate / attention's own rate (1 / efficiency.attention_compute): attention FLOPs are
  /// scaled by it and priced at compute_rate (exactly the plain sum when it is 1).
  double attention_cost_factor = 1;
  models::ComputeType compute_type = models::ComputeType::kBf16;
  double overhead_s = 0;           // per engine step, whatever the batch
  double sequence_overhead_s = 0;  // per running sequence per engine step
  int layers = 0;
  double allreduce_bytes_per_token = 0;  // one token's hidden state (models::hidden_bytes_per_token)
  int tp = 1;
  int ep = 1;
  int dp = 1;            // attention data-parallel ranks per engine
  bool wide_ep = false;  // DP > 1 or EP > TP: the data-parallel attention model above
  int dense_ffn_layers = 0, moe_layers = 0;
  double dispatch_bytes_per_token = 0;  // top-k x hidden x activation bytes (EP dispatch)
  double combine_bytes_per_token = 0;   // top-k x one token's hidden state (combine)
  models::Link tp_link;                 // the link of EP all-to-alls (slowest hop of the group)
  models::Link intra_link, inter_link;  // TP all-reduces run hierarchically across nodes
  int devices_per_node = 1;
  double comm_eff = 1;

  static RolloutCostModel build(const Scenario& s);

  double weights_read_bytes(double tokens) const;
  /// Seconds to stream the weights one iteration of `tokens` tokens reads (dense at mem_bw, the
  /// touched routed experts at expert_mem_bw).
  double weights_read_s(double tokens) const;
  /// Fixed cost of one engine step with `sequences` sequences in it (overhead(b) above).
  double step_overhead_s(double sequences) const { return overhead_s + sequences * sequence_overhead_s; }
  /// TP all-reduces and EP all-to-alls of one iteration of `tokens` engine tokens, the slowest DP
  /// rank running `share` of them (rank_share; 1 without data-parallel attention).
  double comm_s(double tokens, double share = 1.0) const;
  /// Fraction of an engine batch of `sequences` the slowest DP rank runs: ceil(n / DP) / n (1
  /// without data-parallel attention or for an empty batch).
  double rank_share(double sequences) const { return dp <= 1 || sequences <= 0 ? 1.0 : std::ceil(sequences / dp) / sequences; }
  /// Busiest device's expert load over the mean for `tokens` engine tokens (1 unless wide_ep).
  double expert_imbalance(double tokens) const;
  double decode_memory_s(int b, double ctx) const;
  double decode_compute_s(int b, double ctx) const;
  double decode_s(int b, double ctx) const;
  /// Seconds of routed-expert GEMMs for `tokens` tokens: their FLOPs at the compute rate times
  /// the grouped-GEMM efficiency m / (m + m_half) at m = tokens x top-k / touched experts.
  double expert_compute_s(double tokens) const;

  /// Sum of decode_s(b, ctx0 + b k) for k = 0..n-1, in closed form (memory and compute are both
  /// linear in k; the sum of their maximum splits at the crossover). Exact up to rounding.
  double decode_stretch_s(int b, double ctx0, std::int64_t n) const;

  /// Per-device causal attention FLOPs of prefilling a sequence of `length` tokens:
  /// attention FLOPs per (query, key) pair / TP * L (L + 1) / 2.
  double causal_attn_flops_device(double length) const { return attn_flops_per_ctx_device * length * (length + 1) / 2; }

  /// One mixed iteration: prefill of `new_tokens` tokens (per-device causal attention FLOPs
  /// `prefill_attn` summed over the new sequences) plus one decode token for each of `b_decode` running
  /// sequences that read `ctx` cached tokens.
  /// `new_sequences` is the number of sequences the prefill admits (they are sampled too).
  double prefill_s(double new_tokens, double prefill_attn, int new_sequences, int b_decode, double ctx) const;
};

/// One rollout sequence.
struct Request {
  int step = -1;  // the RL step that consumes it (-1: not consumed yet)
  int engine = 0;
  int index = 0;           // index within the step (prompt-major: prompt * n + sample)
  std::int64_t group = 0;  // prompt group (the n samples of one prompt) in dispatch order
  std::int64_t prompt_tokens = 0;
  std::int64_t response_tokens = 0;
  std::int64_t generated = 0;
  std::int64_t admit_order = 0;
  int preemptions = 0;    // KV-full preemptions (recomputed later, vLLM's recompute policy)
  int interruptions = 0;  // partial-rollout pauses across a weight update
  int version = 0;        // policy version (weight updates so far) when generation started
  TimeNs admit_ns = -1;   // first admission
  TimeNs first_token_ns = -1;
  TimeNs finish_ns = -1;
  std::int64_t context() const { return prompt_tokens + generated; }
};

/// Statistics of one engine, accumulated over its whole run.
struct EngineStats {
  std::int64_t iterations = 0;
  std::int64_t prefill_iterations = 0;
  std::int64_t preemptions = 0;
  std::int64_t tokens_generated = 0;   // decoded tokens (recomputed context is not generation)
  std::int64_t tokens_recomputed = 0;  // prefill of contexts that had been generated before (preemption, pause)
  int max_running = 0;
  bool kv_limited = false;    // admission was refused for KV while sequence slots were free
  double memory_bound_s = 0;  // decode time where memory > compute
  double compute_bound_s = 0;
  double busy_s = 0;  // time with an iteration in flight
  double kv_peak_tokens = 0;
};

/// A continuous-batching engine (vLLM / SGLang scheduler, as modelled): FIFO admission up to
/// max_num_seqs while the KV cache has room for the sequence's context plus a 1 % watermark
/// (vLLM's default); a mixed prefill iteration for each admission; decode stretches between
/// batch changes, advanced in closed form; when the KV cache is full the last-admitted sequence
/// is preempted and later recomputed (vLLM's recompute policy).
///
/// With `generate_batch` > 0 the engine serves fixed generate() calls instead (OpenRLHF before
/// 0.5, DeepSpeed-Chat): up to that many waiting sequences form a call, continuously batched
/// among themselves, and the next call's sequences are admitted only when all of this one's
/// have finished.
///
/// Two ways to drive it: start() hands over one step's requests and reports when all are done
/// (synchronous and one-step-off schedules); submit() streams requests in, with a callback per
/// finished request and pause()/resume() around a weight update (fully asynchronous schedule,
/// partial rollout).
class RolloutEngine {
 public:
  /// `kv_capacity_tokens` > 0 (std::invalid_argument otherwise). Requests must outlive the run.
  /// `generate_batch`: sequences per generate() call, 0 for one continuous batch.
  RolloutEngine(const RolloutCostModel& cost, EventQueue& queue, TraceSink& sink, int index, double kv_capacity_tokens,
                int max_num_seqs, bool trace_iterations, int generate_batch = 0);

  /// Starts generating `requests` now; `on_done` runs (as an event) when all have finished.
  void start(std::vector<Request*> requests, std::function<void()> on_done);

  /// Streaming use: `on_finish` runs for each finished request (inside the engine's event, after
  /// its state is consistent; it may call submit()), `on_idle` when nothing is running or waiting.
  void set_callbacks(std::function<void(Request*)> on_finish, std::function<void()> on_idle);
  /// Queues one request (FIFO); the engine starts iterating if it was idle and not paused.
  void submit(Request* r);

  /// Stops now: the iteration in flight is cut at the last whole token (a decode stretch keeps the
  /// tokens finished so far; an unfinished prefill is lost), every running sequence keeps its
  /// generated tokens but loses its KV cache and waits at the head of the queue, to be recomputed
  /// after resume() (partial rollout across a weight update, verl fully_async_policy).
  void pause();
  void resume();
  bool paused() const { return paused_; }

  /// Requests running or waiting.
  int outstanding() const { return static_cast<int>(running_.size() + waiting_.size()); }
  const EngineStats& stats() const { return stats_; }

 private:
  void advance();
  void finish_tokens(std::int64_t n);
  void preempt_last();
  void schedule_iteration(TimeNs end, std::int64_t decode_tokens, bool prefill);
  void enqueue(Request* r);
  void schedule_advance();
  void trace_iteration(TimeNs end);

  const RolloutCostModel& cost_;
  EventQueue& queue_;
  TraceSink& sink_;
  int index_;
  double kv_capacity_;
  int max_num_seqs_;
  bool trace_;
  int generate_batch_;  // 0: continuous batching
  int call_left_ = 0;   // sequences of the current generate() call not admitted yet
  std::string track_;
  std::vector<Request*> running_;
  std::deque<Request*> waiting_;
  double kv_used_ = 0;
  std::int64_t next_order_ = 0;
  std::function<void()> on_done_;
  std::function<void(Request*)> on_finish_;
  std::function<void()> on_idle_;
  bool active_ = false;  // an advance() or iteration event is pending
  bool paused_ = false;
  // The iteration in flight (for pause()).
  EventId pending_ = 0;
  TimeNs pending_start_ = 0, pending_end_ = 0;
  std::int64_t pending_tokens_ = 0;  // decode tokens per sequence the event will finish
  bool pending_prefill_ = false;
  std::string pending_label_;  // trace span of the iteration in flight
  std::vector<std::pair<std::string, double>> pending_args_;
  EngineStats stats_;
};

}  // namespace rlsim::sim
