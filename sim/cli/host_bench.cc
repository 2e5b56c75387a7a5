#include "sim/cli/host_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

#include "analysis/grpo.h"
#include "models/precision/footprint.h"
#include "models/precision/recipe.h"
#include "models/runtime/model.h"
#include "models/runtime/train.h"
#include "models/runtime/transformer.h"
#include "sim/cli/runtime_cmds.h"
#include "sim/engine/random.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rlsim::cli {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double best_of(int repeat, F&& f) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeat + 1; ++r) {  // one warm-up
    const auto t0 = Clock::now();
    f();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return best;
}

double gemm_rate(int repeat) {
  constexpr int n = 512;
  const models::MatrixRM a = models::MatrixRM::Random(n, n), b = models::MatrixRM::Random(n, n);
  models::MatrixRM c(n, n);
  const double s = best_of(repeat, [&] { c.noalias() = a * b; });
  return 2.0 * n * n * n / s;
}

// The recipe the host figures are measured in (the host scenario's and train files').
constexpr const char* kRecipe = "bf16";

// Seconds per decoded token over `tokens` decode steps after an 8-token prompt, each token
// sampled at temperature 1 with its log-probability taken, as `rlsim train`'s rollout does.
double decode_s(const models::ModelWeights& w, int tokens, int repeat) {
  models::Transformer t(w, models::runtime_precision(kRecipe));
  std::vector<int> prompt(8);
  for (int i = 0; i < 8; ++i) prompt[static_cast<std::size_t>(i)] = (i * 7 + 3) % w.config.vocab;
  double sink = 0;
  const double s = best_of(repeat, [&] {
    sim::Rng rng(1);
    t.reset();
    std::span<const float> logits = t.extend(prompt);
    for (int k = 0; k < tokens; ++k) {
      const int y = models::sample_token(logits, 1.0, 1.0, rng.uniform());
      sink += analysis::token_log_prob(logits, 1.0, y);
      if (k + 1 < tokens) logits = t.decode(y);
    }
  });
  return sink == 0.5 ? 0.0 : s / tokens;  // `sink` keeps the log-probabilities from being optimised away
}

double layer_params(const models::TransformerConfig& c) {
  const double q = static_cast<double>(c.heads) * c.head_dim, kv = static_cast<double>(c.kv_heads) * c.head_dim;
  return c.dim * (2 * q + 2 * kv) + 3.0 * c.dim * c.hidden_dim;
}

// The machine's figures, measured once and shared by the three measurements below.
struct Host {
  double bw = 0;    // read bandwidth, bytes/s
  double rate = 0;  // FP32 GEMM rate, FLOP/s
};

// Attention per cached token and layer: QK^T and PV, 2 x 2 x heads x head_dim FLOPs.
double attn_per_ctx_layer(const models::TransformerConfig& c) { return 4.0 * c.heads * c.head_dim; }

void bench_decode(const models::ModelWeights& w, const Host& h, int repeat, std::ostream& out) {
  const models::TransformerConfig& c = w.config;
  const double bw = h.bw, rate = h.rate;
  // Decode at the model's depth and at one layer (short: 128 tokens, mean context 72), and at the
  // model's depth with 384 tokens (mean context 200): what the simulator models of a token at
  // batch 1 (RolloutCostModel::decode_s) is max(weight + KV bytes / bandwidth, (matmul + f x
  // attention FLOPs) / rate) plus overheads; the long run's extra time per context token gives f
  // (compute-bound attention), the two depths the overheads per layer and per step.
  constexpr int kShort = 128, kLong = 384;
  constexpr double kCtxShort = 8 + kShort / 2.0, kCtxLong = 8 + kLong / 2.0;
  const double t_all = decode_s(w, kShort, repeat);
  const double t_long = decode_s(w, kLong, repeat);
  models::ModelWeights one = w;
  one.layers.resize(1);
  one.config.layers = 1;
  const double t_one = decode_s(one, kShort, repeat);
  const double bytes = models::element_bytes(models::builtin_recipe(kRecipe).linear.weight.element);
  const double kv_bytes = models::element_bytes(models::builtin_recipe(kRecipe).kv_cache.element);
  const double kv_per_ctx_layer = 2.0 * c.kv_heads * c.head_dim * kv_bytes;
  const double cls = static_cast<double>(c.vocab) * c.dim;
  const double slope = (t_long - t_all) / (kCtxLong - kCtxShort);  // seconds per context token, all layers
  const double attention_compute = c.layers * attn_per_ctx_layer(c) / rate / slope;
  // The modelled time of a token at `layers` layers and context `ctx` (no overheads).
  auto modelled = [&](int layers, double ctx) {
    const double mem = (layers * layer_params(c) + cls) * bytes / bw + ctx * layers * kv_per_ctx_layer / bw;
    const double flops = 2.0 * (layers * layer_params(c) + cls) + ctx * layers * attn_per_ctx_layer(c) / attention_compute;
    return std::max(mem, flops / rate);
  };
  const double per_layer =
      ((t_all - modelled(c.layers, kCtxShort)) - (t_one - modelled(1, kCtxShort))) / std::max(1, c.layers - 1);
  const double iteration = t_one - modelled(1, kCtxShort) - per_layer;
  out << fmt::format("  decode ({}), {} layers, {} tokens {:8.2f} us/token\n", kRecipe, c.layers, kShort, t_all * 1e6);
  out << fmt::format("  decode ({}), {} layers, {} tokens {:8.2f} us/token\n", kRecipe, c.layers, kLong, t_long * 1e6);
  out << fmt::format("  decode ({}), 1 layer, {} tokens   {:8.2f} us/token\n", kRecipe, kShort, t_one * 1e6);
  out << fmt::format("  rollout.efficiency.attention_compute {:8.4f}\n", attention_compute);
  out << fmt::format("  rollout.overheads.per_layer  {:8.2f} us\n", per_layer * 1e6);
  out << fmt::format("  rollout.overheads.iteration  {:8.2f} us  ({:.2f} us measured; below 0 is noise)\n",
                     std::max(0.0, iteration) * 1e6, iteration * 1e6);
}

void bench_trainer(const models::ModelWeights& w, const Host& h, int repeat, std::ostream& out) {
  const models::TransformerConfig& c = w.config;
  const double rate = h.rate;
  const double cls = static_cast<double>(c.vocab) * c.dim;
  // Trainer: sequences the model writes itself (sampled at temperature 1 from BOS), eight of 150
  // tokens (a 22-token prompt and a 128-token response, the train files' shape) and eight of 300:
  // the two lengths separate the matmul rate from attention's (the simulator prices both at
  // rate x efficiency, attention FLOPs scaled by 1 / attention_compute).
  constexpr int kSeqs = 8, kT1 = 150, kT2 = 300;
  auto write = [&](int length, std::uint64_t seed) {
    std::vector<std::vector<int>> seqs;
    models::Transformer gen(w, models::runtime_precision(kRecipe));
    sim::Rng rng(seed);
    for (int q = 0; q < kSeqs; ++q) {
      std::vector<int> seq{1};
      gen.reset();
      std::span<const float> logits = gen.extend(seq);
      while (static_cast<int>(seq.size()) < length) {
        seq.push_back(models::sample_token(logits, 1.0, 1.0, rng.uniform()));
        logits = gen.decode(seq.back());
      }
      seqs.push_back(std::move(seq));
    }
    return seqs;
  };
  const auto seqs1 = write(kT1, 2), seqs2 = write(kT2, 3);
  models::TrainableModel<float> tm(w, models::builtin_recipe(kRecipe));
  auto time_pass = [&](const std::vector<std::vector<int>>& seqs, bool backward) {
    const std::vector<double> dlogp(seqs.front().size() - 1, 1e-3);
    return best_of(repeat, [&] {
      for (const auto& q : seqs) {
        (void)tm.forward(q);
        if (backward) tm.backward(dlogp);
      }
    });
  };
  const double matmul = c.layers * layer_params(c) + cls;
  // Per sequence of T tokens, one forward: 2 x matmul parameters x T matmul FLOPs, and causal
  // attention's 2 x 2 x heads x head_dim per (query, key) pair, T (T+1) / 2 pairs per layer.
  auto mm_flops = [&](int T) { return kSeqs * 2.0 * matmul * T; };
  auto attn_flops = [&](int T) { return kSeqs * attn_per_ctx_layer(c) * c.layers * T * (T + 1) / 2.0; };
  const double t1 = time_pass(seqs1, true), t2 = time_pass(seqs2, true), t1f = time_pass(seqs1, false);
  // t = 3 (mm / (rate e_mm) + attn / (rate e_att)) at both lengths: solve for 1 / e_mm and 1 / e_att.
  const double a1 = 3 * mm_flops(kT1) / rate, b1 = 3 * attn_flops(kT1) / rate;
  const double a2 = 3 * mm_flops(kT2) / rate, b2 = 3 * attn_flops(kT2) / rate;
  const double det = a1 * b2 - a2 * b1;
  const double inv_mm = (t1 * b2 - t2 * b1) / det, inv_att = (a1 * t2 - a2 * t1) / det;
  // Forward only, at the update's efficiencies: the forward pass factor.
  const double forward = (a1 * inv_mm + b1 * inv_att) / 3.0 / t1f;
  out << fmt::format("  trainer fwd+bwd, {} tokens   {:8.0f} tokens/s\n", kT1, kSeqs * kT1 / t1);
  out << fmt::format("  trainer fwd+bwd, {} tokens   {:8.0f} tokens/s\n", kT2, kSeqs * kT2 / t2);
  out << fmt::format("  trainer forward, {} tokens   {:8.0f} tokens/s\n", kT1, kSeqs * kT1 / t1f);
  out << fmt::format("  training.efficiency.compute           {:8.4f}\n", 1.0 / inv_mm);
  // The simulator prices attention at rate x efficiency.compute / attention_compute.
  out << fmt::format("  training.efficiency.attention_compute {:8.4f}\n", inv_mm / inv_att);
  out << fmt::format("  training.efficiency.forward           {:8.4f}\n", forward);
}

// Weight sync: the engine's reload (restore, load, quantise and repack every tensor) per matrix.
void bench_reload_per_matrix(const models::ModelWeights& w, int repeat, std::ostream& out) {
  {
    const models::TransformerConfig& c = w.config;
    models::Transformer engine(w, models::runtime_precision(kRecipe));
    const models::ModelWeights master = w;
    const double reload = best_of(repeat, [&] {
      engine.restore_weights_for_loading();
      engine.load_weights(master);
      engine.process_weights_after_loading();
    });
    const double matrices = 7.0 * c.layers + 1;  // q, k, v, o, gate, up, down per layer, and lm_head
    out << fmt::format("  reload                       {:8.2f} us ({} matrices)\n", reload * 1e6, matrices);
    out << fmt::format("  weight_sync.per_matrix       {:8.2f} us\n", reload / matrices * 1e6);
  }
}

}  // namespace

int bench_host(const std::string& model, int repeat, std::ostream& out) {
#ifdef _OPENMP
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  keep_freed_memory();
  use_host_independent_kernels();  // the kernels `rlsim train`, whose loop these rates predict, runs
  const int saved_eigen = Eigen::nbThreads();
  Eigen::setNbThreads(1);
  const models::ModelWeights w = load_model_within_host(model, "rlsim bench host");
  out << fmt::format("rlsim bench host: one core, best of {} (model shapes: {})\n", repeat, model);
  Host h;
  h.bw = measure_read_bandwidth(std::size_t{512} << 20, repeat) * 1e9;
  out << fmt::format("  memory read bandwidth       {:8.2f} GB/s\n", h.bw / 1e9);
  h.rate = gemm_rate(repeat);
  out << fmt::format("  fp32 GEMM 512^3             {:8.2f} GFLOP/s\n", h.rate / 1e9);
  bench_decode(w, h, repeat, out);
  bench_trainer(w, h, repeat, out);
  bench_reload_per_matrix(w, repeat, out);
  Eigen::setNbThreads(saved_eigen);
#ifdef _OPENMP
  omp_set_num_threads(saved_threads);
#endif
  return 0;
}

}  // namespace rlsim::cli
