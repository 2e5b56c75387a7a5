#include "models/runtime/reload.h"

#include <fmt/format.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

namespace rlsim::models {
namespace {

// Every tensor of a model, in a fixed order (the perturbation's stream index).
template <typename F>
void for_each_tensor(ModelWeights& m, F&& f) {
  auto mat = [&](MatrixRM& x) { f(x.data(), x.size()); };
  auto vec = [&](VectorF& x) { f(x.data(), x.size()); };
  mat(m.embedding);
  for (LayerWeights& l : m.layers) {
    vec(l.attn_norm), vec(l.ffn_norm), vec(l.q_norm), vec(l.k_norm), vec(l.bq), vec(l.bk), vec(l.bv);
    mat(l.wq), mat(l.wk), mat(l.wv), mat(l.wo), mat(l.w_gate), mat(l.w_up), mat(l.w_down), mat(l.router);
    for (ExpertWeights& e : l.experts) mat(e.w_gate), mat(e.w_up), mat(e.w_down);
  }
  vec(m.final_norm);
  mat(m.lm_head);
}

double diff(float a, float b) {
  if (std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b)) return 0.0;
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0.0 : std::numeric_limits<double>::infinity();
  return std::abs(static_cast<double>(a) - static_cast<double>(b));
}

}  // namespace

void perturb_weights(ModelWeights& m, std::uint64_t seed, std::int64_t step, double relative) {
  if (!(relative >= 0) || !std::isfinite(relative))
    throw std::invalid_argument(fmt::format("perturbation {} must be finite and >= 0", relative));
  std::uint64_t index = 0;
  for_each_tensor(m, [&](float* x, Eigen::Index n) {
    const std::uint64_t i = index++;
    if (n == 0) return;
    double ss = 0;
    for (Eigen::Index j = 0; j < n; ++j) ss += static_cast<double>(x[j]) * x[j];
    const double sigma = relative * std::sqrt(ss / static_cast<double>(n));
    std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32), static_cast<std::uint32_t>(step),
                      static_cast<std::uint32_t>(static_cast<std::uint64_t>(step) >> 32), static_cast<std::uint32_t>(i)};
    std::mt19937_64 gen(seq);
    std::normal_distribution<double> nd(0.0, 1.0);
    for (Eigen::Index j = 0; j < n; ++j) x[j] = static_cast<float>(x[j] + sigma * nd(gen));
  });
}

double max_abs_logit_diff(Transformer& a, Transformer& b, std::span<const int> tokens) {
  double worst = 0;
  const MatrixRM pa = a.prefill(tokens), pb = b.prefill(tokens);
  for (Eigen::Index i = 0; i < pa.size(); ++i) worst = std::max(worst, diff(pa.data()[i], pb.data()[i]));
  a.reset();
  b.reset();
  for (int t : tokens) {
    const std::span<const float> la = a.decode(t);
    const std::vector<float> keep(la.begin(), la.end());
    const std::span<const float> lb = b.decode(t);
    for (std::size_t i = 0; i < keep.size(); ++i) worst = std::max(worst, diff(keep[i], lb[i]));
  }
  a.reset();
  b.reset();
  return worst;
}

ReloadReport run_reload(const ModelWeights& initial, const RuntimePrecision& precision, KernelMode kernels,
                        const ReloadOptions& o, const std::function<void(const ReloadCycle&)>& on_cycle) {
  if (o.cycles < 1 || o.check_every < 0 || o.probe_tokens < 1) {
    throw std::invalid_argument(fmt::format("reload: cycles ({}) and probe_tokens ({}) must be >= 1 and check_every ({}) >= 0",
                                            o.cycles, o.probe_tokens, o.check_every));
  }
  ModelWeights master = initial;
  Transformer engine(master, precision, kernels);
  const std::vector<const void*> addresses = engine.weight_buffers();
  std::vector<int> probe(static_cast<std::size_t>(std::min(o.probe_tokens, master.config.max_seq)));
  std::mt19937_64 gen(o.seed ^ 0x9E3779B97F4A7C15ull);
  std::uniform_int_distribution<int> tok(0, master.config.vocab - 1);
  for (int& t : probe) t = tok(gen);

  ReloadReport report;
  report.kernel_buffers = addresses.size();
  for (int cycle = 1; cycle <= o.cycles; ++cycle) {
    perturb_weights(master, o.seed, cycle, o.perturbation);
    ReloadCycle c;
    c.cycle = cycle;
    const auto t0 = std::chrono::steady_clock::now();
    c.stats += engine.restore_weights_for_loading();
    c.stats += engine.load_weights(master);
    c.stats += engine.process_weights_after_loading();
    c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    c.addresses_stable = engine.weight_buffers() == addresses;
    report.addresses_stable = report.addresses_stable && c.addresses_stable;
    if ((o.check_every > 0 && cycle % o.check_every == 0) || cycle == o.cycles) {
      Transformer fresh(master, precision, kernels);
      c.checked = true;
      c.logit_diff = max_abs_logit_diff(engine, fresh, probe);
      report.max_abs_logit_diff = std::max(report.max_abs_logit_diff, c.logit_diff);
      ++report.checks;
    }
    if (on_cycle) on_cycle(c);
    report.cycles.push_back(c);
  }
  return report;
}

}  // namespace rlsim::models
