#include "sim/cli/host_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

#include "models/precision/footprint.h"
#include "models/precision/recipe.h"
#include "models/runtime/model.h"
#include "models/runtime/train.h"
#include "models/runtime/transformer.h"
#include "sim/cli/runtime_cmds.h"

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

// Seconds per decoded token: an 8-token prompt, then 128 decode steps.
double decode_s(const models::ModelWeights& w, int repeat) {
  models::Transformer t(w, models::runtime_precision(kRecipe));
  std::vector<int> prompt(8);
  for (int i = 0; i < 8; ++i) prompt[static_cast<std::size_t>(i)] = (i * 7 + 3) % w.config.vocab;
  constexpr int kTokens = 128;
  const double s = best_of(repeat, [&] {
    t.reset();
    (void)t.extend(prompt);
    int y = 1;
    for (int k = 0; k < kTokens; ++k) y = (static_cast<int>(t.decode(y)[0] > 0) + k * 13) % w.config.vocab;
  });
  return s / kTokens;
}

double layer_params(const models::TransformerConfig& c) {
  const double q = static_cast<double>(c.heads) * c.head_dim, kv = static_cast<double>(c.kv_heads) * c.head_dim;
  return c.dim * (2 * q + 2 * kv) + 3.0 * c.dim * c.hidden_dim;
}

}  // namespace

int bench_host(const std::string& model, int repeat, std::ostream& out) {
#ifdef _OPENMP
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  const int saved_eigen = Eigen::nbThreads();
  Eigen::setNbThreads(1);
  const models::ModelWeights w = models::load_model(model);
  const models::TransformerConfig& c = w.config;
  out << fmt::format("rlsim bench host: one core, best of {} (model shapes: {})\n", repeat, model);
  const double bw = measure_read_bandwidth(std::size_t{512} << 20, repeat) * 1e9;  // bytes/s
  out << fmt::format("  memory read bandwidth       {:8.2f} GB/s\n", bw / 1e9);
  const double rate = gemm_rate(repeat);
  out << fmt::format("  fp32 GEMM 512^3             {:8.2f} GFLOP/s\n", rate / 1e9);
  // Decode: all layers, then one.
  const double t_all = decode_s(w, repeat);
  models::ModelWeights one = w;
  one.layers.resize(1);
  one.config.layers = 1;
  const double t_one = decode_s(one, repeat);
  // What the simulator models of one token (RolloutCostModel::decode_s at batch 1): max(weight
  // bytes / bandwidth, matmul FLOPs / rate) per layer and for the classifier (the embedding is a
  // row copy); the engine overheads are the measured rest.
  const double bytes = models::element_bytes(models::builtin_recipe(kRecipe).linear.weight.element);
  const double layer_mm = std::max(layer_params(c) * bytes / bw, 2.0 * layer_params(c) / rate);
  const double cls = static_cast<double>(c.vocab) * c.dim;
  const double io_mm = std::max(cls * bytes / bw, 2.0 * cls / rate);
  const double per_layer = (t_all - t_one) / std::max(1, c.layers - 1) - layer_mm;
  const double iteration = t_one - (per_layer + layer_mm) - io_mm;
  out << fmt::format("  decode ({}), {} layers       {:8.2f} us/token\n", kRecipe, c.layers, t_all * 1e6);
  out << fmt::format("  decode ({}), 1 layer        {:8.2f} us/token\n", kRecipe, t_one * 1e6);
  out << fmt::format("  engine overhead per layer    {:8.2f} us  (rollout.overheads.per_layer)\n", per_layer * 1e6);
  out << fmt::format(
      "  engine overhead per step     {:8.2f} us  (rollout.overheads.iteration; {:.2f} us measured, below 0 is noise)\n",
      std::max(0.0, iteration) * 1e6, iteration * 1e6);
  // Trainer.
  models::TrainableModel<float> tm(w, models::builtin_recipe(kRecipe));
  constexpr int kT = 136;
  // A sequence the model itself writes (greedy from BOS), so its logits are those of training on
  // text: arbitrary token ids give extreme logits whose exp underflows to slow denormals.
  std::vector<int> seq{1};
  {
    models::Transformer gen(w, models::runtime_precision(kRecipe));
    std::span<const float> logits = gen.extend(seq);
    while (static_cast<int>(seq.size()) < kT) {
      seq.push_back(models::sample_token(logits, 0.0, 1.0, 0.5));
      logits = gen.decode(seq.back());
    }
  }
  const double matmul = c.layers * layer_params(c) + static_cast<double>(c.vocab) * c.dim;
  // Causal attention: QK^T and PV, 2 x 2 x heads x head_dim per (query, key) pair, T (T+1) / 2 pairs.
  const double attn = 4.0 * c.heads * c.head_dim * c.layers * kT * (kT + 1) / 2.0;
  const double fwd_flops = 2.0 * matmul * kT + attn;
  const std::vector<double> dlogp(kT - 1, 1e-3);
  const double t_fwd = best_of(repeat, [&] { (void)tm.forward(seq); });
  const double t_upd = best_of(repeat, [&] {
    (void)tm.forward(seq);
    tm.backward(dlogp);
  });
  const double fwd_rate = fwd_flops / t_fwd, upd_rate = 3 * fwd_flops / t_upd;
  out << fmt::format("  trainer forward             {:8.2f} GFLOP/s  {:8.0f} tokens/s\n", fwd_rate / 1e9, kT / t_fwd);
  out << fmt::format("  trainer forward + backward  {:8.2f} GFLOP/s  {:8.0f} tokens/s\n", upd_rate / 1e9, kT / t_upd);
  out << fmt::format("  training.efficiency.compute {:8.4f}  (update rate / GEMM rate)\n", upd_rate / rate);
  out << fmt::format("  training.efficiency.forward {:8.4f}  (forward rate / update rate)\n", fwd_rate / upd_rate);
  Eigen::setNbThreads(saved_eigen);
#ifdef _OPENMP
  omp_set_num_threads(saved_threads);
#endif
  return 0;
}

}  // namespace rlsim::cli
