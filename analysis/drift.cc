#include "analysis/drift.h"

#include <fmt/format.h>
#include <gnuplot-iostream.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "analysis/output_dir.h"
#include "analysis/plots.h"
#include "models/precision/format.h"
#include "sim/engine/random.h"
#include "sim/engine/stop.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rlsim::analysis {
namespace {

namespace fs = std::filesystem;

// log-softmax of logits / temperature over the vocabulary, in double.
void log_softmax(std::span<const float> logits, double temperature, std::vector<double>& out) {
  out.resize(logits.size());
  double mx = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    out[i] = static_cast<double>(logits[i]) / temperature;
    mx = std::max(mx, out[i]);
  }
  double sum = 0;
  for (double v : out) sum += std::exp(v - mx);
  const double lse = mx + std::log(sum);
  for (double& v : out) v -= lse;
}

// Linear interpolation between order statistics (Hyndman and Fan type 7, numpy's default) of
// v, which is reordered. Requires a non-empty v and p in [0, 1].
double quantile(std::vector<double>& v, double p) {
  const double h = static_cast<double>(v.size() - 1) * p;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const double a = v[lo];
  if (lo + 1 >= v.size()) return a;
  const double b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());
  return a + (h - static_cast<double>(lo)) * (b - a);
}

// Per-sequence sums over its first L tokens: what every metric is built from.
struct SequenceSums {
  double abs_delta = 0, kl = 0, log_ratio = 0, max_prob_diff = 0;
  std::int64_t clipped = 0;
  std::vector<double> abs_deltas;  // |Δ| of each token
};

std::vector<double> metrics_of(const std::vector<SequenceSums>& seqs, const std::vector<std::size_t>& pick, int length) {
  const double n_tok = static_cast<double>(pick.size()) * length, n_seq = static_cast<double>(pick.size());
  double abs_delta = 0, kl = 0, max_pd = 0, seq_abs = 0, seq_sum = 0, clipped = 0;
  std::vector<double> all;
  all.reserve(pick.size() * static_cast<std::size_t>(length));
  for (std::size_t i : pick) {
    const SequenceSums& s = seqs[i];
    abs_delta += s.abs_delta;
    kl += s.kl;
    max_pd = std::max(max_pd, s.max_prob_diff);
    seq_abs += std::fabs(s.log_ratio);
    seq_sum += s.log_ratio;
    clipped += static_cast<double>(s.clipped);
    all.insert(all.end(), s.abs_deltas.begin(), s.abs_deltas.end());
  }
  const double seq_mean = seq_sum / n_seq;
  double var = 0;
  for (std::size_t i : pick) var += (seqs[i].log_ratio - seq_mean) * (seqs[i].log_ratio - seq_mean);
  const double seq_std = pick.size() > 1 ? std::sqrt(var / (n_seq - 1)) : 0.0;
  return {abs_delta / n_tok, quantile(all, 0.99), std::max(0.0, kl / n_tok), max_pd, seq_abs / n_seq, seq_std, clipped / n_tok};
}

// A value for a log-scaled axis: non-positive values are not drawn.
double log_axis(double v) { return v > 0 ? v : std::numeric_limits<double>::quiet_NaN(); }

const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                          "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

std::string colour(std::size_t i) { return kPalette[i % (sizeof kPalette / sizeof kPalette[0])]; }

std::size_t metric_index(const std::string& name) {
  const auto& names = drift_metric_names();
  return static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
}

void plot_vs_length(const fs::path& png, const std::vector<DriftPairResult>& results) {
  Gnuplot gp("gnuplot");
  gp << "set terminal pngcairo size 1800,560 font 'sans,10'\n";
  gp << "set output " << gnuplot_quoted(png.string()) << "\n";
  gp << "set multiplot layout 1,3 title 'Training-inference mismatch vs rollout length (bands: bootstrap 95 % CI)'\n";
  gp << "set logscale xy 2\nset logscale y 10\nset format x '%g'\nset format y '%g'\nset xlabel 'rollout length (tokens)'\nset "
        "grid\n";
  gp << "set key below noenhanced\nset style fill transparent solid 0.2 noborder\n";
  if (!results.empty() && !results.front().by_length.empty()) {
    const auto& bl = results.front().by_length;
    gp << "set xrange [" << bl.front().first / 1.25 << ":" << bl.back().first * 1.25 << "]\nset xtics (";
    for (std::size_t i = 0; i < bl.size(); ++i) gp << (i ? ", " : "") << bl[i].first;
    gp << ")\n";
  }
  for (const char* metric : {"mean_abs_delta", "kl", "seq_log_ratio_abs"}) {
    const std::size_t m = metric_index(metric);
    const std::string label = std::string(metric) == "kl" ? "KL(rollout || train), nats per token"
                              : std::string(metric) == "mean_abs_delta"
                                  ? "mean |log p_train - log p_rollout| per token"
                                  : "mean |sum of delta| per sequence (log importance ratio)";
    gp << "set ylabel " << gnuplot_quoted(label) << " noenhanced\n";
    gp << "plot ";
    for (std::size_t i = 0; i < results.size(); ++i) {
      bool any = false;
      for (const auto& [L, ms] : results[i].by_length) any = any || ms[m].value > 0;
      const std::string title = results[i].train + ":" + results[i].rollout + (any ? "" : " (exactly 0)");
      gp << (i ? ", " : "") << "'-' using 1:2:3 with filledcurves lc rgb '" << colour(i)
         << "' notitle, '-' using 1:2 with linespoints lw 2 pt 7 lc rgb '" << colour(i) << "' title " << gnuplot_quoted(title);
    }
    gp << "\n";
    for (const DriftPairResult& r : results) {
      std::vector<std::tuple<double, double, double>> band;
      std::vector<std::pair<double, double>> line;
      for (const auto& [L, ms] : r.by_length) {
        band.emplace_back(L, log_axis(ms[m].ci_low), log_axis(ms[m].ci_high));
        line.emplace_back(L, log_axis(ms[m].value));
      }
      gp.send1d(band);
      gp.send1d(line);
    }
  }
  gp << "unset multiplot\n";
}

void plot_vs_position(const fs::path& png, const std::vector<DriftPairResult>& results) {
  Gnuplot gp("gnuplot");
  gp << "set terminal pngcairo size 1400,560 font 'sans,10'\n";
  gp << "set output " << gnuplot_quoted(png.string()) << "\n";
  gp << "set multiplot layout 1,2 title 'Mismatch at each response position (mean over sequences, positions binned)'\n";
  gp << "set logscale y\nset format y '%g'\nset xlabel 'response position (tokens)'\nset grid\nset key below noenhanced\n";
  for (int which = 0; which < 2; ++which) {
    gp << "set ylabel " << gnuplot_quoted(which == 0 ? "mean |delta| at the position" : "mean KL at the position") << "\n";
    gp << "plot ";
    for (std::size_t i = 0; i < results.size(); ++i) {
      gp << (i ? ", " : "") << "'-' using 1:2 with lines lw 2 lc rgb '" << colour(i) << "' title "
         << gnuplot_quoted(results[i].train + ":" + results[i].rollout);
    }
    gp << "\n";
    for (const DriftPairResult& r : results) {
      const std::size_t len = r.sequences.empty() ? 0 : r.sequences.front().size();
      const std::size_t bin = std::max<std::size_t>(1, len / 64);
      std::vector<std::pair<double, double>> pts;
      for (std::size_t p0 = 0; p0 < len; p0 += bin) {
        double sum = 0, n = 0;
        for (const auto& seq : r.sequences) {
          for (std::size_t p = p0; p < std::min(len, p0 + bin); ++p) {
            sum += which == 0 ? std::fabs(seq[p].delta()) : seq[p].kl;
            n += 1;
          }
        }
        pts.emplace_back(static_cast<double>(p0) + static_cast<double>(std::min(len, p0 + bin) - p0 - 1) / 2.0,
                         log_axis(sum / n));
      }
      gp.send1d(pts);
    }
  }
  gp << "unset multiplot\n";
}

void plot_histogram(const fs::path& png, const std::vector<DriftPairResult>& results) {
  // Common symmetric range: the largest 99.9th percentile of |Δ| over the pairs.
  double range = 0;
  for (const DriftPairResult& r : results) {
    std::vector<double> a;
    for (const auto& seq : r.sequences) {
      for (const DriftToken& t : seq) a.push_back(std::fabs(t.delta()));
    }
    if (!a.empty()) range = std::max(range, quantile(a, 0.999));
  }
  if (range <= 0) range = 1e-6;
  constexpr int kBins = 101;
  const double width = 2 * range / kBins;
  Gnuplot gp("gnuplot");
  gp << "set terminal pngcairo size 1000,600 font 'sans,10'\n";
  gp << "set output " << gnuplot_quoted(png.string()) << "\n";
  gp << "set title 'Distribution of delta = log p_train(y) - log p_rollout(y) over all sampled tokens' noenhanced\n";
  gp << "set logscale y\nset format y '%g'\nset xlabel 'delta (nats)'\nset ylabel 'tokens'\nset grid\nset key below noenhanced\n";
  gp << "set xrange [" << -range << ":" << range << "]\n";
  gp << "plot ";
  for (std::size_t i = 0; i < results.size(); ++i) {
    gp << (i ? ", " : "") << "'-' using 1:2 with steps lw 2 lc rgb '" << colour(i) << "' title "
       << gnuplot_quoted(results[i].train + ":" + results[i].rollout);
  }
  gp << "\n";
  for (const DriftPairResult& r : results) {
    std::vector<double> counts(kBins, 0.0);
    for (const auto& seq : r.sequences) {
      for (const DriftToken& t : seq) {
        const int b = std::clamp(static_cast<int>(std::floor((t.delta() + range) / width)), 0, kBins - 1);
        counts[static_cast<std::size_t>(b)] += 1;
      }
    }
    std::vector<std::pair<double, double>> pts;
    for (int b = 0; b < kBins; ++b) pts.emplace_back(-range + b * width, log_axis(counts[static_cast<std::size_t>(b)]));
    gp.send1d(pts);
  }
}

}  // namespace

DriftPolicy parse_drift_policy(std::string_view text) {
  const std::size_t plus = text.find('+');
  const std::string_view base = text.substr(0, plus);
  DriftPolicy p{std::string(text), models::runtime_precision(base)};  // throws listing the recipes
  if (plus == std::string_view::npos) return p;
  const std::string_view mod = text.substr(plus + 1);
  if (mod.rfind("kv=", 0) != 0) {
    throw std::invalid_argument(fmt::format("'{}': expected RECIPE or RECIPE+kv=FORMAT after '+', got '{}'", text, mod));
  }
  if (!p.precision.recipe) throw std::invalid_argument(fmt::format("'{}': fp32 has no KV-cache format to override", text));
  try {
    p.precision.recipe->kv_cache = models::parse_format(mod.substr(3));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("'{}': bad KV-cache format: {}", text, e.what()));
  }
  p.precision.name = p.label;
  return p;
}

DriftPair parse_drift_pair(std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos || text.find(':', colon + 1) != std::string_view::npos) {
    throw std::invalid_argument(fmt::format("pair '{}': expected TRAIN:ROLLOUT (e.g. bf16:fp8-block)", text));
  }
  return DriftPair{parse_drift_policy(text.substr(0, colon)), parse_drift_policy(text.substr(colon + 1))};
}

const std::vector<std::string>& drift_metric_names() {
  static const std::vector<std::string> names = {
      "mean_abs_delta", "p99_abs_delta", "kl", "max_prob_diff", "seq_log_ratio_abs", "seq_log_ratio_std", "tis_clip_fraction"};
  return names;
}

std::vector<DriftMetric> drift_metrics(const std::vector<std::vector<DriftToken>>& sequences, int length, double tis_cap,
                                       int bootstrap, std::uint64_t seed) {
  if (sequences.empty()) throw std::invalid_argument("drift_metrics: no sequences");
  if (length <= 0) throw std::invalid_argument("drift_metrics: length must be positive");
  const double log_cap = std::log(tis_cap);
  std::vector<SequenceSums> seqs(sequences.size());
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    if (sequences[i].size() < static_cast<std::size_t>(length)) {
      throw std::invalid_argument(
          fmt::format("drift_metrics: sequence {} has {} tokens, fewer than {}", i, sequences[i].size(), length));
    }
    SequenceSums& s = seqs[i];
    for (int t = 0; t < length; ++t) {
      const DriftToken& k = sequences[i][static_cast<std::size_t>(t)];
      const double d = k.delta();
      s.abs_delta += std::fabs(d);
      s.abs_deltas.push_back(std::fabs(d));
      s.kl += k.kl;
      s.log_ratio += d;
      s.max_prob_diff = std::max(s.max_prob_diff, k.prob_diff);
      s.clipped += d > log_cap ? 1 : 0;  // exp(Δ) > C
    }
  }
  std::vector<std::size_t> all(seqs.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::vector<double> point = metrics_of(seqs, all, length);
  const auto& names = drift_metric_names();
  std::vector<DriftMetric> out;
  for (std::size_t m = 0; m < names.size(); ++m) out.push_back({names[m], point[m], point[m], point[m]});
  if (bootstrap <= 0) return out;
  std::vector<std::vector<double>> draws(names.size(), std::vector<double>(static_cast<std::size_t>(bootstrap)));
  // Each resample draws from its own stream: the same intervals whatever the thread count.
#pragma omp parallel for schedule(static)
  for (int b = 0; b < bootstrap; ++b) {
    sim::Rng rng(sim::mix_seed(seed) + static_cast<std::uint64_t>(b));
    std::vector<std::size_t> pick(seqs.size());
    for (std::size_t& i : pick) i = static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(seqs.size()) - 1));
    const std::vector<double> v = metrics_of(seqs, pick, length);
    for (std::size_t m = 0; m < v.size(); ++m) draws[m][static_cast<std::size_t>(b)] = v[m];
  }
  for (std::size_t m = 0; m < names.size(); ++m) {
    out[m].ci_low = quantile(draws[m], 0.025);
    out[m].ci_high = quantile(draws[m], 0.975);
  }
  return out;
}

namespace {

// Rejects options run_drift cannot honour on this model (std::invalid_argument); nothing may
// throw inside its parallel region.
void check_drift_options(const models::TransformerConfig& c, const DriftOptions& o) {
  if (o.pairs.empty()) throw std::invalid_argument("no pairs to run");
  if (o.lengths.empty()) throw std::invalid_argument("no lengths");
  for (std::size_t i = 0; i < o.lengths.size(); ++i) {
    if (o.lengths[i] <= 0 || (i > 0 && o.lengths[i] <= o.lengths[i - 1])) {
      throw std::invalid_argument("lengths must be positive and strictly ascending");
    }
  }
  if (!(o.temperature > 0))
    throw std::invalid_argument(
        fmt::format("temperature must be > 0 (log-probabilities at temperature {} are undefined)", o.temperature));
  if (o.samples <= 0 || o.prompts.empty()) throw std::invalid_argument("at least one prompt and one sample are needed");
  if (!(o.tis_cap > 0)) throw std::invalid_argument("the TIS cap must be > 0");
  const int L = o.lengths.back();
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    if (o.prompts[p].empty()) throw std::invalid_argument(fmt::format("prompt {} has no tokens", p));
    for (int t : o.prompts[p]) {
      if (t < 0 || t >= c.vocab)
        throw std::invalid_argument(fmt::format("prompt {} has token {} outside the model's vocabulary of {}", p, t, c.vocab));
    }
    // The trainer scores prompt + response[0..L-2]: its last row predicts response[L-1].
    if (static_cast<int>(o.prompts[p].size()) + L - 1 > c.max_seq) {
      throw std::invalid_argument(fmt::format("prompt {} ({} tokens) plus the longest length {} exceeds the model's max_seq {}",
                                              p, o.prompts[p].size(), L, c.max_seq));
    }
  }
}

// Sequences run in parallel, each thread with its own rollout engine (KV cache), when those
// copies are small (dense FP32 + packed weights, FP32 K and V at max_seq, under 2 GiB together);
// otherwise one at a time with the kernels' own threads. A sequence's numbers do not depend on
// which thread runs it, or on how many threads the kernels use.
int drift_threads(const models::ModelWeights& weights) {
  const models::TransformerConfig& c = weights.config;
  constexpr double kFloat = sizeof(float);
  const double kv_bytes = 2 * kFloat * c.layers * c.max_seq * static_cast<double>(c.kv_heads) * c.head_dim;
  const double copy_bytes = 2 * kFloat * static_cast<double>(weights.parameters()) + kv_bytes;
#ifdef _OPENMP
  return copy_bytes * omp_get_max_threads() <= 2.0 * (1 << 30) ? omp_get_max_threads() : 1;
#else
  (void)copy_bytes;
  return 1;
#endif
}

// The scored tokens of one sequence: `seq` is prompt (P tokens) + response; row t of
// `rollout_logits` (L x vocab) is what the rollout sampled response[t] from, row P - 1 + t of
// `scored` what the trainer gives it.
std::vector<DriftToken> score_sequence(const std::vector<int>& seq, std::size_t P, int prompt, int sample,
                                       const std::vector<float>& rollout_logits, const models::MatrixRM& scored, int L, int vocab,
                                       double temperature) {
  std::vector<DriftToken> toks;
  toks.reserve(static_cast<std::size_t>(L));
  std::vector<double> lr, lt;
  for (int t = 0; t < L; ++t) {
    const std::span<const float> r_row(rollout_logits.data() + static_cast<std::ptrdiff_t>(t) * vocab,
                                       static_cast<std::size_t>(vocab));
    const std::span<const float> t_row(scored.row(static_cast<Eigen::Index>(P) - 1 + t).data(), static_cast<std::size_t>(vocab));
    log_softmax(r_row, temperature, lr);
    log_softmax(t_row, temperature, lt);
    DriftToken d;
    d.prompt = prompt;
    d.sample = sample;
    d.position = t;
    d.token = seq[P + static_cast<std::size_t>(t)];
    d.logp_rollout = lr[static_cast<std::size_t>(d.token)];
    d.logp_train = lt[static_cast<std::size_t>(d.token)];
    double kl = 0, mpd = 0;
    for (std::size_t v = 0; v < lr.size(); ++v) {
      const double pr = std::exp(lr[v]), pt = std::exp(lt[v]);
      kl += pr * (lr[v] - lt[v]);
      mpd = std::max(mpd, std::fabs(pt - pr));
    }
    d.kl = std::max(0.0, kl);  // >= 0 exactly; rounding may leave -1e-17
    d.max_vocab_prob_diff = mpd;
    d.prob_diff = std::fabs(std::exp(d.logp_train) - std::exp(d.logp_rollout));
    toks.push_back(d);
  }
  return toks;
}

}  // namespace

std::vector<DriftPairResult> run_drift(const models::ModelWeights& weights, const DriftOptions& o, std::ostream* progress) {
  const models::TransformerConfig& c = weights.config;
  check_drift_options(c, o);
  const int L = o.lengths.back();
  const models::KernelMode mode = o.batch_invariant ? models::KernelMode::kBatchInvariant : models::KernelMode::kDefault;
  const int threads = drift_threads(weights);
  const std::size_t n_seq = o.prompts.size() * static_cast<std::size_t>(o.samples);
  std::vector<DriftPairResult> results;
  for (const DriftPair& pair : o.pairs) {
    DriftPairResult res{pair.train.label, pair.rollout.label, std::vector<std::vector<DriftToken>>(n_seq), {}, 0, 0};
    models::Transformer rollout_model(weights, pair.rollout.precision, mode);
    const models::Transformer trainer(weights, pair.train.precision, mode);
    double rollout_s = 0, train_s = 0;
    std::int64_t rollout_tokens = 0, train_tokens = 0;
#pragma omp parallel num_threads(threads) reduction(+ : rollout_s, train_s, rollout_tokens, train_tokens) if (threads > 1)
    {
      // A copy per thread only when sequences run in parallel: a large model is never duplicated.
      std::optional<models::Transformer> copy;
      if (threads > 1) copy.emplace(rollout_model);
      models::Transformer& rollout = copy ? *copy : rollout_model;
      std::vector<float> rollout_logits(static_cast<std::size_t>(L) * static_cast<std::size_t>(c.vocab));
#pragma omp for schedule(dynamic, 1)
      for (std::size_t i = 0; i < n_seq; ++i) {
        if (sim::stop_requested() != 0) continue;  // SIGINT / SIGTERM: finish the loop without work, throw below
        const std::size_t p = i / static_cast<std::size_t>(o.samples);
        const int k = static_cast<int>(i % static_cast<std::size_t>(o.samples));
        // Common random numbers: the same uniform draws for this (prompt, sample) in every pair.
        sim::Rng rng(sim::mix_seed(o.seed) ^
                     sim::mix_seed((static_cast<std::uint64_t>(p) << 32) | static_cast<std::uint64_t>(k)));
        std::vector<int> seq = o.prompts[p];
        const std::size_t P = seq.size();
        auto t0 = std::chrono::steady_clock::now();
        rollout.reset();
        std::span<const float> logits = rollout.extend(seq);
        for (int t = 0; t < L; ++t) {
          std::copy(logits.begin(), logits.end(), rollout_logits.begin() + static_cast<std::ptrdiff_t>(t) * c.vocab);
          const int y = models::sample_token(logits, o.temperature, 1.0, rng.uniform());
          seq.push_back(y);
          if (t + 1 < L) logits = rollout.decode(y);
        }
        auto t1 = std::chrono::steady_clock::now();
        rollout_s += std::chrono::duration<double>(t1 - t0).count();
        rollout_tokens += L;
        const models::MatrixRM scored = trainer.prefill(std::span<const int>(seq.data(), seq.size() - 1));
        auto t2 = std::chrono::steady_clock::now();
        train_s += std::chrono::duration<double>(t2 - t1).count();
        train_tokens += static_cast<std::int64_t>(seq.size() - 1);
        res.sequences[i] = score_sequence(seq, P, static_cast<int>(p), k, rollout_logits, scored, L, c.vocab, o.temperature);
      }
    }
    // Each side's rate over the threads that ran it: tokens / (its summed seconds / threads).
    rollout_s /= threads;
    sim::check_stop();
    train_s /= threads;
    res.rollout_tokens_per_s = rollout_s > 0 ? static_cast<double>(rollout_tokens) / rollout_s : 0;
    res.train_tokens_per_s = train_s > 0 ? static_cast<double>(train_tokens) / train_s : 0;
    for (int len : o.lengths) res.by_length.emplace_back(len, drift_metrics(res.sequences, len, o.tis_cap, o.bootstrap, o.seed));
    if (progress) {
      const auto& last = res.by_length.back().second;
      *progress << fmt::format(
          "drift: {}:{} done ({} sequences x {} tokens; mean |delta| {:.4g} at L = {}; rollout {:.0f} tok/s, trainer {:.0f} "
          "tok/s)\n",
          res.train, res.rollout, res.sequences.size(), L, last[0].value, L, res.rollout_tokens_per_s, res.train_tokens_per_s);
    }
    results.push_back(std::move(res));
  }
  return results;
}

std::vector<std::string> write_drift_outputs(const fs::path& dir, const std::vector<DriftPairResult>& results, bool plots) {
  std::vector<std::string> not_drawn;
  write_directory(dir, [&](const fs::path& tmp) {
    std::string csv = "train,rollout,length,metric,value,ci_low,ci_high\n";
    for (const DriftPairResult& r : results) {
      for (const auto& [L, ms] : r.by_length) {
        for (const DriftMetric& m : ms)
          csv += fmt::format("{},{},{},{},{:.9g},{:.9g},{:.9g}\n", r.train, r.rollout, L, m.name, m.value, m.ci_low, m.ci_high);
      }
    }
    write_text(tmp / "drift.csv", csv);
    std::string tok =
        "train,rollout,prompt,sample,position,token,logp_rollout,logp_train,delta,kl,prob_diff,max_vocab_prob_diff\n";
    for (const DriftPairResult& r : results) {
      for (const auto& seq : r.sequences) {
        for (const DriftToken& t : seq) {
          tok +=
              fmt::format("{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g}\n", r.train, r.rollout, t.prompt, t.sample,
                          t.position, t.token, t.logp_rollout, t.logp_train, t.delta(), t.kl, t.prob_diff, t.max_vocab_prob_diff);
        }
      }
    }
    write_text(tmp / "per_token.csv", tok);
    if (!plots) return;
    if (!gnuplot_available()) {
      not_drawn.push_back("plots not drawn: gnuplot is not installed (apt-get install gnuplot-nox)");
      return;
    }
    plot_vs_length(tmp / "drift_vs_length.png", results);
    plot_vs_position(tmp / "drift_vs_position.png", results);
    plot_histogram(tmp / "delta_histogram.png", results);
  });
  return not_drawn;
}

void print_drift_summary(std::ostream& out, const std::vector<DriftPairResult>& results, bool batch_invariant) {
  out << fmt::format(
      "Training-inference mismatch, delta = log p_train(y) - log p_rollout(y) ({} kernels; [95 % bootstrap CI])\n",
      models::kernel_mode_name(batch_invariant ? models::KernelMode::kBatchInvariant : models::KernelMode::kDefault));
  std::size_t w = 4;
  for (const DriftPairResult& r : results) w = std::max(w, r.train.size() + r.rollout.size() + 1);
  out << fmt::format("{:<{}} {:>6}  {:>32}  {:>32}  {:>9}  {:>9}  {:>9}  {:>9}\n", "pair", w, "length", "mean |delta|",
                     "KL (nats/token)", "p99|delta|", "max dp", "|seq lr|", "TIS clip");
  for (const DriftPairResult& r : results) {
    for (const auto& [L, m] : r.by_length) {
      out << fmt::format(
          "{:<{}} {:>6}  {:>10.4g} [{:>9.4g}, {:>9.4g}]  {:>10.4g} [{:>9.4g}, {:>9.4g}]  {:>9.4g}  {:>9.4g}  {:>9.4g}  "
          "{:>9.4g}\n",
          r.train + ":" + r.rollout, w, L, m[0].value, m[0].ci_low, m[0].ci_high, m[2].value, m[2].ci_low, m[2].ci_high,
          m[1].value, m[3].value, m[4].value, m[6].value);
    }
  }
  out << "Speed (wall time on this machine):\n";
  for (const DriftPairResult& r : results) {
    out << fmt::format("  {:<{}} rollout (prompt prefill + decode) {:.0f} tok/s, trainer (prefill scoring) {:.0f} tok/s\n",
                       r.train + ":" + r.rollout, w, r.rollout_tokens_per_s, r.train_tokens_per_s);
  }
}

const std::vector<std::string>& default_drift_prompts() {
  static const std::vector<std::string> prompts = {
      "Once upon a time, there was a little girl named Lily.",
      "One day, a big dog found a red ball in the park.",
      "Tom and his mom went to the store to buy some milk.",
      "There was a small bird who wanted to fly very high.",
      "Sam had a toy car that he loved very much.",
      "In a big forest, there lived a kind old bear.",
      "Anna liked to draw pictures of the sun and the sky.",
      "The little cat was sad because it lost its hat.",
      "Ben saw a shiny stone near the river.",
      "Mia and her friend played in the garden all day.",
      "A little boy named Tim wanted to help his dad.",
      "The sun was hot, so Lucy went to the beach.",
      "Once there was a funny frog who liked to jump.",
      "Max found a box under his bed.",
      "It was a rainy day, and Sue could not go outside.",
      "The princess had a pretty dress and a big smile.",
  };
  return prompts;
}

}  // namespace rlsim::analysis
