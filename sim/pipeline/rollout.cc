#include "sim/pipeline/rollout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "sim/pipeline/collectives.h"

namespace rlsim::sim {

using models::LinearKind;

using models::weight_bytes;

namespace {
unsigned bit(LinearKind k) { return 1u << static_cast<unsigned>(k); }
}  // namespace

double experts_touched(int experts, int active, double tokens) {
  if (experts <= 0) return 0.0;
  if (tokens <= 0) return 0.0;
  const double miss = std::pow(1.0 - static_cast<double>(active) / experts, tokens);
  return experts * (1.0 - miss);
}

RolloutCostModel RolloutCostModel::build(const Scenario& s) {
  const auto& arch = s.model;
  const auto& r = s.rollout;
  const models::Recipe& recipe = r.precision;
  RolloutCostModel c;
  c.tp = r.tensor_parallel;
  c.dp = r.data_parallel;
  c.wide_ep = arch.moe && (c.dp > 1 || r.expert_parallel > c.tp);
  // Devices the routed experts are spread over: the TP group, or the whole engine with wide EP.
  const int expert_devices = c.wide_ep ? r.engine_devices() : c.tp;
  c.layers = arch.layers;
  const double total = weight_bytes(arch, recipe);
  const double routed = weight_bytes(arch, recipe, bit(LinearKind::kRoutedExpert), false);
  c.weight_bytes_per_device = c.wide_ep ? (total - routed) / c.tp + routed / expert_devices : total / c.tp;
  // The embedding is a gather of b rows, not a full read; the lm_head is read in full.
  const double embedding = recipe.embedding.bytes(arch.vocab, arch.hidden);
  c.dense_bytes_per_device = (total - routed - (arch.tied_embeddings ? 0.0 : embedding)) / c.tp;
  if (arch.moe) {
    c.experts = arch.moe->experts;
    c.active = arch.moe->active;
    c.expert_bytes_per_device = routed / arch.moe->experts / expert_devices;
  }
  // KV: GQA heads are split across TP ranks (replicated when TP > kv_heads); the MLA latent is
  // replicated on every rank (vLLM / SGLang without DP attention).
  const double kv_token_bytes = models::kv_bytes_per_token(arch, recipe);
  if (arch.mla) {
    c.kv_bytes_per_token_device = kv_token_bytes;
  } else {
    const int heads_per_device = (arch.kv_heads + c.tp - 1) / c.tp;
    c.kv_bytes_per_token_device = kv_token_bytes * heads_per_device / arch.kv_heads;
  }
  // Routed experts one token passes through: top-k of each MoE layer's experts.
  const double routed_params = [&] {
    double p = 0;
    for (const auto& l : arch.linear_shapes()) {
      if (l.kind == LinearKind::kRoutedExpert) p += static_cast<double>(l.count) * l.out * l.in;
    }
    return arch.moe ? p * arch.moe->active / arch.moe->experts : 0.0;
  }();
  c.matmul_flops_per_token_device = 2.0 * (static_cast<double>(arch.active_matmul_params()) - routed_params) / c.tp;
  c.expert_flops_per_token_device = 2.0 * routed_params / expert_devices;
  c.moe_half_tokens = r.moe_half_tokens;
  c.attn_flops_per_ctx_device = arch.attention_flops_per_token(1.0) / c.tp;
  c.mem_bw = s.cluster.device.memory_bandwidth_bytes_per_s * r.efficiency.memory;
  c.kv_mem_bw = c.mem_bw * r.attention_memory_efficiency;
  if (arch.moe) {
    const double width = static_cast<double>(arch.moe->expert_intermediate) * r.expert_parallel / expert_devices;
    c.expert_mem_bw = c.mem_bw * width / (width + r.moe_half_width);
  }
  c.compute_type = *s.cluster.device.effective(recipe.linear.compute(recipe.mode));
  c.compute_rate = s.cluster.device.rate(recipe.linear.compute(recipe.mode)) * r.efficiency.compute;
  c.attention_cost_factor = 1.0 / r.efficiency.attention_compute;
  // Dynamic activation quantisation launches one quantisation kernel per quantised linear input
  // (q/k/v share one, gate/up share one: 4 per layer), ~2 us each under CUDA graphs (assumption).
  const double act_quant = recipe.dynamic_activation_quant() ? 4.0 * arch.layers * 2e-6 : 0.0;
  c.overhead_s =
      r.iteration_overhead_s + arch.layers * r.layer_overhead_s + arch.moe_layers() * r.moe_layer_overhead_s + act_quant;
  c.sequence_overhead_s = r.sequence_overhead_s;
  const double hidden_bytes = models::hidden_bytes_per_token(arch, recipe);
  c.allreduce_bytes_per_token = hidden_bytes;
  c.ep = arch.moe ? r.expert_parallel : 1;
  c.moe_layers = arch.moe_layers();
  c.dense_ffn_layers = arch.dense_ffn_layers();
  if (arch.moe) {
    // DeepEP-style dispatch in the activation format with its scales (FP8 group1x128 when the
    // recipe quantises activations), combine in the hidden element.
    const double act_bytes = recipe.dynamic_activation_quant()
                                 ? arch.hidden * models::bytes_per_value(recipe.linear.activation, arch.hidden)
                                 : hidden_bytes;
    c.dispatch_bytes_per_token = static_cast<double>(arch.moe->active) * act_bytes;
    c.combine_bytes_per_token = static_cast<double>(arch.moe->active) * hidden_bytes;
  }
  c.tp_link = group_link(c.tp, s.cluster.devices_per_node, s.cluster.intra_node, s.cluster.inter_node);
  c.intra_link = s.cluster.intra_node;
  c.inter_link = s.cluster.inter_node;
  c.devices_per_node = s.cluster.devices_per_node;
  c.comm_eff = r.efficiency.comm;
  return c;
}

double RolloutCostModel::weights_read_bytes(double tokens) const {
  return dense_bytes_per_device + experts_touched(experts, active, tokens) * expert_bytes_per_device;
}

double RolloutCostModel::weights_read_s(double tokens) const {
  const double experts_s = experts > 0 ? experts_touched(experts, active, tokens) * expert_bytes_per_device / expert_mem_bw : 0.0;
  return dense_bytes_per_device / mem_bw + experts_s;
}

double RolloutCostModel::comm_s(double tokens, double share) const {
  if (wide_ep) {
    // The slowest DP rank's all-reduces over its TP group; each device dispatches its TP slice of
    // its rank's tokens to the experts of the whole engine and takes their outputs back.
    const double rank_tokens = tokens * share;
    const double ar = tp > 1 ? hierarchical_all_reduce_s(rank_tokens * allreduce_bytes_per_token, tp, devices_per_node,
                                                         intra_link, inter_link, comm_eff)
                             : 0.0;
    const double per_device = rank_tokens / tp;
    const double a2a =
        expert_all_to_all_s(per_device * dispatch_bytes_per_token, ep, devices_per_node, intra_link, inter_link, comm_eff) +
        expert_all_to_all_s(per_device * combine_bytes_per_token, ep, devices_per_node, intra_link, inter_link, comm_eff);
    return (layers + dense_ffn_layers) * ar + moe_layers * a2a;
  }
  if (tp <= 1) return 0.0;
  tokens *= share;
  const double ar =
      hierarchical_all_reduce_s(tokens * allreduce_bytes_per_token, tp, devices_per_node, intra_link, inter_link, comm_eff);
  if (ep <= 1) return 2.0 * layers * ar;
  const double per_rank = tokens / ep;
  const double a2a = all_to_all_s(per_rank * dispatch_bytes_per_token, ep, tp_link, comm_eff) +
                     all_to_all_s(per_rank * combine_bytes_per_token, ep, tp_link, comm_eff);
  return layers * ar + dense_ffn_layers * ar + moe_layers * a2a;
}

double RolloutCostModel::decode_memory_s(int b, double ctx) const {
  return weights_read_s(b) + ctx * rank_share(b) * kv_bytes_per_token_device / kv_mem_bw;
}

double RolloutCostModel::expert_imbalance(double tokens) const {
  if (!wide_ep || tokens <= 0) return 1.0;
  const double devices = static_cast<double>(tp) * dp;  // the engine
  const double mu = tokens * active / devices;          // expert assignments per device
  return 1.0 + std::sqrt(2.0 * std::log(devices) / mu);
}

double RolloutCostModel::expert_compute_s(double tokens) const {
  if (expert_flops_per_token_device <= 0 || tokens <= 0) return 0.0;
  const double m = tokens * active / experts_touched(experts, active, tokens);  // tokens per touched expert
  const double efficiency = m / (m + moe_half_tokens);
  return tokens * expert_flops_per_token_device / (compute_rate * efficiency) * expert_imbalance(tokens);
}

double RolloutCostModel::decode_compute_s(int b, double ctx) const {
  const double share = rank_share(b);
  return (b * share * matmul_flops_per_token_device + ctx * share * attn_flops_per_ctx_device * attention_cost_factor) /
             compute_rate +
         expert_compute_s(b);
}

double RolloutCostModel::decode_s(int b, double ctx) const {
  const double share = rank_share(b);
  return std::max(decode_memory_s(b, ctx), decode_compute_s(b, ctx)) + comm_s(b, share) + step_overhead_s(b * share);
}

double RolloutCostModel::decode_stretch_s(int b, double ctx0, std::int64_t n) const {
  if (n <= 0) return 0.0;
  const double nn = static_cast<double>(n);
  // memory_k = m0 + m1 k, compute_k = c0 + c1 k
  // (the slowest DP rank's context grows by its ceil(b / DP) sequences per step)
  const double share = rank_share(b);
  const double m0 = decode_memory_s(b, ctx0), m1 = b * share * kv_bytes_per_token_device / kv_mem_bw;
  const double c0 = decode_compute_s(b, ctx0), c1 = b * share * attn_flops_per_ctx_device * attention_cost_factor / compute_rate;
  // sum max(m, c) = sum c + sum_{k: d_k > 0} d_k, with d_k = (m0 - c0) + (m1 - c1) k
  double sum = nn * c0 + c1 * nn * (nn - 1) / 2;
  const double d0 = m0 - c0, d1 = m1 - c1;
  double lo = 0, hi = nn - 1;
  if (d1 == 0) {
    if (d0 <= 0) hi = -1;
  } else if (d1 > 0) {
    if (d0 <= 0) lo = std::floor(-d0 / d1) + 1;
  } else {
    if (d0 <= 0)
      hi = -1;
    else
      hi = std::min(hi, std::ceil(-d0 / d1) - 1);
  }
  if (hi >= lo) {
    const double count = hi - lo + 1;
    sum += count * d0 + d1 * (lo + hi) * count / 2;
  }
  return sum + nn * (comm_s(b, share) + step_overhead_s(b * share));
}

double RolloutCostModel::prefill_s(double new_tokens, double prefill_attn, int new_sequences, int b_decode, double ctx) const {
  const double tokens = new_tokens + b_decode;
  // The slowest DP rank's share of the sequences, tokens and attention (1 without DP attention).
  const double share = rank_share(new_sequences + b_decode);
  const double memory = weights_read_s(tokens) + (ctx + new_tokens) * share * kv_bytes_per_token_device / kv_mem_bw;
  const double compute = (tokens * share * matmul_flops_per_token_device + prefill_attn * share * attention_cost_factor +
                          ctx * share * attn_flops_per_ctx_device * attention_cost_factor) /
                             compute_rate +
                         expert_compute_s(tokens);
  return std::max(memory, compute) + comm_s(tokens, share) + step_overhead_s((new_sequences + b_decode) * share);
}

// Engine ----------------------------------------------------------------------------------------

RolloutEngine::RolloutEngine(const RolloutCostModel& cost, EventQueue& queue, TraceSink& sink, int index,
                             double kv_capacity_tokens, int max_num_seqs, bool trace_iterations, int generate_batch)
    : cost_(cost),
      queue_(queue),
      sink_(sink),
      index_(index),
      kv_capacity_(kv_capacity_tokens),
      max_num_seqs_(max_num_seqs),
      trace_(trace_iterations),
      generate_batch_(generate_batch),
      track_(fmt::format("rollout engine {}", index)) {
  if (!(kv_capacity_tokens > 0)) throw std::invalid_argument("RolloutEngine: KV capacity must be positive");
}

void RolloutEngine::start(std::vector<Request*> requests, std::function<void()> on_done) {
  on_done_ = std::move(on_done);
  for (Request* r : requests) enqueue(r);
  if (!active_ && on_done_) {  // nothing to do (no requests): done at once
    queue_.schedule_in(0, std::move(on_done_));
    on_done_ = nullptr;
  }
}

void RolloutEngine::submit(Request* r) { enqueue(r); }

void RolloutEngine::enqueue(Request* r) {
  r->engine = index_;
  waiting_.push_back(r);
  if (!active_ && !paused_) schedule_advance();
}

void RolloutEngine::set_callbacks(std::function<void(Request*)> on_finish, std::function<void()> on_idle) {
  on_finish_ = std::move(on_finish);
  on_idle_ = std::move(on_idle);
}

void RolloutEngine::preempt_last() {
  auto it = std::max_element(running_.begin(), running_.end(),
                             [](const Request* a, const Request* b) { return a->admit_order < b->admit_order; });
  Request* victim = *it;
  running_.erase(it);
  kv_used_ -= static_cast<double>(victim->context());
  victim->preemptions++;
  stats_.preemptions++;
  waiting_.push_front(victim);
  if (generate_batch_ > 0) ++call_left_;  // still part of the current call
}

void RolloutEngine::finish_tokens(std::int64_t n) {
  const TimeNs now = queue_.now();
  kv_used_ += static_cast<double>(n) * static_cast<double>(running_.size());
  stats_.kv_peak_tokens = std::max(stats_.kv_peak_tokens, kv_used_);
  stats_.tokens_generated += n * static_cast<std::int64_t>(running_.size());
  std::vector<Request*> finished;
  auto keep = running_.begin();
  for (Request* r : running_) {
    r->generated += n;
    if (n > 0 && r->first_token_ns < 0) r->first_token_ns = now;
    if (r->generated >= r->response_tokens) {
      r->finish_ns = now;
      kv_used_ -= static_cast<double>(r->context());
      finished.push_back(r);
    } else {
      *keep++ = r;
    }
  }
  running_.erase(keep, running_.end());
  if (running_.empty()) kv_used_ = 0;  // no floating residue between batches
  if (on_finish_) {
    for (Request* r : finished) on_finish_(r);
  }
}

void RolloutEngine::trace_iteration(TimeNs end) {
  if (!trace_ || pending_label_.empty()) return;
  sink_.span(Span{track_, pending_label_, "rollout", pending_start_, end - pending_start_, std::move(pending_args_), true});
  pending_label_.clear();
  pending_args_.clear();
}

void RolloutEngine::schedule_iteration(TimeNs end, std::int64_t decode_tokens, bool prefill) {
  const TimeNs now = queue_.now();
  stats_.busy_s += to_seconds(end - now);
  pending_start_ = now;
  pending_end_ = end;
  pending_tokens_ = decode_tokens;
  pending_prefill_ = prefill;
  pending_ = queue_.schedule_at(end, [this, decode_tokens] {
    trace_iteration(queue_.now());
    finish_tokens(decode_tokens);
    advance();
  });
}

void RolloutEngine::schedule_advance() {
  active_ = true;
  pending_tokens_ = -1;  // an advance(), not an iteration: pause() has nothing to cut
  pending_ = queue_.schedule_in(0, [this] { advance(); });
}

void RolloutEngine::pause() {
  if (paused_) return;
  paused_ = true;
  if (!active_) return;
  const TimeNs now = queue_.now();
  queue_.cancel(pending_);
  active_ = false;
  if (pending_tokens_ >= 0) {
    // An iteration was in flight: give back the busy time not yet spent and keep whole tokens.
    stats_.busy_s -= to_seconds(pending_end_ - now);
    if (!pending_label_.empty()) pending_label_ += " (paused)";
    trace_iteration(now);
    if (!pending_prefill_ && pending_tokens_ > 0) {
      const int b = static_cast<int>(running_.size());
      const double elapsed = to_seconds(now - pending_start_);
      std::int64_t lo = 0, hi = pending_tokens_;  // largest k with stretch(k) <= elapsed
      while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo + 1) / 2;
        if (to_seconds(to_ns(cost_.decode_stretch_s(b, kv_used_, mid))) <= elapsed)
          lo = mid;
        else
          hi = mid - 1;
      }
      if (lo > 0) finish_tokens(lo);
    }
  }
  // Running sequences lose their KV cache and wait at the head of the queue, in admission order.
  std::sort(running_.begin(), running_.end(), [](const Request* a, const Request* b) { return a->admit_order < b->admit_order; });
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    (*it)->interruptions++;
    waiting_.push_front(*it);
  }
  if (generate_batch_ > 0) call_left_ += static_cast<int>(running_.size());
  running_.clear();
  kv_used_ = 0;
}

void RolloutEngine::resume() {
  if (!paused_) return;
  paused_ = false;
  if (!waiting_.empty() && !active_) schedule_advance();
}

void RolloutEngine::advance() {
  const TimeNs now = queue_.now();
  // 1. Admission (FIFO; a preempted or paused sequence re-enters at the head with its whole context).
  std::vector<Request*> admitted;
  double new_tokens = 0;
  const double limit = kv_capacity_ * 0.99;  // vLLM's 1 % watermark
  const int b_old = static_cast<int>(running_.size());
  if (generate_batch_ > 0 && running_.empty() && call_left_ == 0) {
    call_left_ = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(generate_batch_), waiting_.size()));
  }
  while (!waiting_.empty() && static_cast<int>(running_.size()) < max_num_seqs_ && (generate_batch_ == 0 || call_left_ > 0)) {
    Request* r = waiting_.front();
    const double need = static_cast<double>(r->context() + 1);
    if (kv_used_ + need > limit && !running_.empty()) {
      stats_.kv_limited = true;
      break;
    }
    waiting_.pop_front();
    if (generate_batch_ > 0) --call_left_;
    r->engine = index_;
    r->admit_order = next_order_++;
    if (r->admit_ns < 0) r->admit_ns = now;
    if (r->generated > 0) stats_.tokens_recomputed += r->context();
    running_.push_back(r);
    admitted.push_back(r);
    kv_used_ += static_cast<double>(r->context());
    new_tokens += static_cast<double>(r->context());
  }
  stats_.max_running = std::max(stats_.max_running, static_cast<int>(running_.size()));

  if (!admitted.empty()) {
    // Mixed iteration: prefill of the admitted contexts + one decode token for the others.
    double attn = 0;
    for (const Request* r : admitted) attn += cost_.causal_attn_flops_device(static_cast<double>(r->context()));
    const double ctx_old = kv_used_ - new_tokens;
    const double dur = cost_.prefill_s(new_tokens, attn, static_cast<int>(admitted.size()), b_old, ctx_old);
    const TimeNs end = now + to_ns(dur);
    stats_.iterations++;
    stats_.prefill_iterations++;
    if (trace_) {
      pending_label_ = fmt::format("prefill +{}", admitted.size());
      pending_args_ = {{"new_tokens", new_tokens}, {"running", static_cast<double>(running_.size())}};
    }
    schedule_iteration(end, 1, true);
    return;
  }
  if (running_.empty()) {
    active_ = false;
    if (on_done_) queue_.schedule_in(0, std::move(on_done_));
    on_done_ = nullptr;
    if (on_idle_) on_idle_();
    return;
  }
  // 2. Decode stretch until the next completion or until the KV cache is full.
  const int b = static_cast<int>(running_.size());
  std::int64_t n_finish = INT64_MAX;
  for (const Request* r : running_) n_finish = std::min(n_finish, r->response_tokens - r->generated);
  const auto n_safe = static_cast<std::int64_t>(std::floor((kv_capacity_ - kv_used_) / b));
  if (n_safe <= 0) {
    if (b == 1) {
      // A single sequence larger than the whole cache: the pipeline's fit check prevents this.
      throw std::logic_error("RolloutEngine: one sequence exceeds the KV capacity");
    }
    preempt_last();
    schedule_advance();
    return;
  }
  const std::int64_t n = std::min(n_finish, n_safe);
  const double dur = cost_.decode_stretch_s(b, kv_used_, n);
  const TimeNs end = now + to_ns(dur);
  stats_.iterations += n;
  const double mid_ctx = kv_used_ + b * (static_cast<double>(n) - 1) / 2;
  (cost_.decode_memory_s(b, mid_ctx) >= cost_.decode_compute_s(b, mid_ctx) ? stats_.memory_bound_s : stats_.compute_bound_s) +=
      dur;
  if (trace_) {
    pending_label_ = fmt::format("decode b={}", b);
    pending_args_ = {{"batch", static_cast<double>(b)}, {"iterations", static_cast<double>(n)}, {"kv_tokens", kv_used_}};
  }
  schedule_iteration(end, n, false);
}

}  // namespace rlsim::sim
