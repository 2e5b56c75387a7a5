// The drift experiment (analysis/drift): metrics in closed form, the bootstrap, pair parsing, and
// runs on the real stories260K model — batch-invariant kernels with identical recipes give
// delta = 0 at every position, default kernels do not, precision pairs drift more, and the same
// seed gives the same outputs byte for byte.
#include "analysis/drift.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/runtime/kernels.h"

namespace rlsim::analysis {
namespace {

namespace fs = std::filesystem;

const models::ModelWeights& stories() {
  static const models::ModelWeights w =
      models::load_llama2c((fs::path(RLSIM_SHARED_DIR) / "models/stories260K/stories260K.bin").string());
  return w;
}

// A token with log p_rollout = log(0.5) and Δ = d.
DriftToken token(double d, double kl = 0) {
  DriftToken t;
  t.logp_rollout = std::log(0.5);
  t.logp_train = t.logp_rollout + d;
  t.kl = kl;
  t.prob_diff = std::fabs(std::exp(t.logp_train) - 0.5);
  return t;
}

double metric(const std::vector<DriftMetric>& ms, const std::string& name) {
  for (const auto& m : ms) {
    if (m.name == name) return m.value;
  }
  ADD_FAILURE() << "no metric " << name;
  return NAN;
}

TEST(DriftMetrics, ClosedFormValues) {
  // Two sequences of 4 tokens; L = 3 uses the first three of each.
  const std::vector<std::vector<DriftToken>> seqs = {
      {token(0.1, 0.01), token(-0.2, 0.02), token(1.0, 0.03), token(9.0, 9.0)},
      {token(0.0, 0.00), token(0.3, 0.04), token(-0.5, 0.06), token(9.0, 9.0)},
  };
  const auto m = drift_metrics(seqs, 3, 2.0, 0, 1);
  ASSERT_EQ(m.size(), drift_metric_names().size());
  EXPECT_NEAR(metric(m, "mean_abs_delta"), (0.1 + 0.2 + 1.0 + 0.0 + 0.3 + 0.5) / 6, 1e-12);
  // |Δ| sorted: 0, 0.1, 0.2, 0.3, 0.5, 1.0; type 7 at p = 0.99: h = 4.95 -> 0.5 + 0.95 * 0.5.
  EXPECT_NEAR(metric(m, "p99_abs_delta"), 0.975, 1e-12);
  EXPECT_NEAR(metric(m, "kl"), (0.01 + 0.02 + 0.03 + 0.04 + 0.06) / 6, 1e-12);
  EXPECT_NEAR(metric(m, "max_prob_diff"), std::fabs(0.5 * std::exp(1.0) - 0.5),
              1e-12);  // capped by nothing: Δ = 1 -> p_train = 0.5e
  // Sequence sums: 0.9 and -0.2.
  EXPECT_NEAR(metric(m, "seq_log_ratio_abs"), (0.9 + 0.2) / 2, 1e-12);
  EXPECT_NEAR(metric(m, "seq_log_ratio_std"), std::sqrt((0.55 * 0.55 + 0.55 * 0.55) / 1), 1e-12);
  // exp(Δ) > 2 only for Δ = 1.0 (ln 2 = 0.693): 1 of 6 tokens.
  EXPECT_NEAR(metric(m, "tis_clip_fraction"), 1.0 / 6, 1e-12);
  for (const auto& x : m) {
    EXPECT_EQ(x.ci_low, x.value);  // bootstrap 0: no interval
    EXPECT_EQ(x.ci_high, x.value);
  }
  EXPECT_THROW(drift_metrics(seqs, 5, 2.0, 0, 1), std::invalid_argument);
  EXPECT_THROW(drift_metrics({}, 1, 2.0, 0, 1), std::invalid_argument);
}

TEST(DriftMetrics, BootstrapIntervalsAreSeededAndBracketThePoint) {
  std::vector<std::vector<DriftToken>> seqs;
  for (int s = 0; s < 40; ++s) {
    std::vector<DriftToken> q;
    for (int t = 0; t < 16; ++t) q.push_back(token(0.01 * ((s * 7 + t * 13) % 17 - 8), 1e-3 * (s % 5)));
    seqs.push_back(q);
  }
  const auto a = drift_metrics(seqs, 16, 2.0, 500, 3), b = drift_metrics(seqs, 16, 2.0, 500, 3),
             c = drift_metrics(seqs, 16, 2.0, 500, 4);
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ci_low, b[i].ci_low);
    EXPECT_EQ(a[i].ci_high, b[i].ci_high);
    EXPECT_LE(a[i].ci_low, a[i].value + 1e-12) << a[i].name;
    EXPECT_GE(a[i].ci_high, a[i].value - 1e-12) << a[i].name;
    differs = differs || a[i].ci_low != c[i].ci_low;
  }
  EXPECT_TRUE(differs);
  EXPECT_LT(a[0].ci_low, a[0].ci_high);
  // Identical sequences: every resample is the same, so the interval is the point.
  const std::vector<std::vector<DriftToken>> same(10, seqs[0]);
  for (const auto& m : drift_metrics(same, 16, 2.0, 200, 1)) {
    EXPECT_NEAR(m.ci_low, m.value, 1e-15) << m.name;
    EXPECT_NEAR(m.ci_high, m.value, 1e-15) << m.name;
  }
}

TEST(DriftPairs, ParseRecipesAndKvOverride) {
  const DriftPair p = parse_drift_pair("fp8-block:fp8-block+kv=fp8-e4m3");
  EXPECT_EQ(p.train.label, "fp8-block");
  EXPECT_EQ(p.rollout.label, "fp8-block+kv=fp8-e4m3");
  ASSERT_TRUE(p.rollout.precision.recipe.has_value());
  EXPECT_EQ(p.rollout.precision.recipe->kv_cache, models::parse_format("fp8-e4m3"));
  EXPECT_EQ(p.train.precision.recipe->kv_cache, models::builtin_recipe("fp8-block").kv_cache);
  EXPECT_FALSE(parse_drift_pair("fp32:bf16").train.precision.recipe.has_value());
  for (const char* bad :
       {"bf16", "bf16:", "bf16:fp9", "bf16:bf16:bf16", "bf16:bf16+kv=fp7", "bf16:bf16+tp=2", "fp32+kv=fp8-e4m3:bf16"}) {
    EXPECT_THROW(parse_drift_pair(bad), std::invalid_argument) << bad;
  }
}

DriftOptions small_options(std::vector<std::string> pairs, bool batch_invariant) {
  DriftOptions o;
  for (const auto& p : pairs) o.pairs.push_back(parse_drift_pair(p));
  o.lengths = {8, 24};
  o.prompts = {{1, 403, 407, 261}, {1, 300, 270, 290, 301, 275}};
  o.samples = 3;
  o.batch_invariant = batch_invariant;
  o.bootstrap = 50;
  return o;
}

TEST(DriftRun, BatchInvariantIdenticalRecipesGiveZeroDeltaAtEveryPosition) {
  const auto results = run_drift(stories(),
                                 small_options({"bf16:bf16", "fp8-block:fp8-block", "int4-qat-g32:int4-w4a16-g32", "nvfp4:nvfp4",
                                                "fp8-block+kv=fp8-e4m3:fp8-block+kv=fp8-e4m3"},
                                               true),
                                 nullptr);
  ASSERT_EQ(results.size(), 5u);
  for (const DriftPairResult& r : results) {
    SCOPED_TRACE(r.train + ":" + r.rollout);
    ASSERT_EQ(r.sequences.size(), 6u);
    for (const auto& seq : r.sequences) {
      ASSERT_EQ(seq.size(), 24u);
      for (const DriftToken& t : seq) {
        ASSERT_EQ(t.delta(), 0.0) << "position " << t.position;
        ASSERT_EQ(t.kl, 0.0);
        ASSERT_EQ(t.max_vocab_prob_diff, 0.0);
      }
    }
    for (const auto& [L, ms] : r.by_length) {
      for (const DriftMetric& m : ms) {
        EXPECT_EQ(m.value, 0.0) << m.name << " at " << L;
        EXPECT_EQ(m.ci_high, 0.0) << m.name << " at " << L;
      }
    }
  }
}

TEST(DriftRun, DefaultKernelsDriftAndPrecisionDriftsMore) {
  const auto results = run_drift(
      stories(), small_options({"fp32:fp32", "bf16:bf16", "bf16:fp8-block", "bf16:nvfp4", "fp32:bf16"}, false), nullptr);
  auto mean_abs = [&](std::size_t i) { return results[i].by_length.back().second[0].value; };
  EXPECT_LT(mean_abs(0), 1e-4);  // fp32: summation order only, no rounding to amplify it
  if (models::simd_kernels_available()) {
    // bf16 both sides: the kernel path alone moves log-probs (the SIMD GEMV sums in 16 lanes,
    // the prefill GEMM in its own blocks; a portable build's scalar kernels may coincide here).
    EXPECT_GT(mean_abs(1), 0.0);
  }
  EXPECT_LT(mean_abs(1), 0.02);
  EXPECT_GT(mean_abs(2), 3 * mean_abs(1));  // FP8 rollout vs BF16 training
  EXPECT_GT(mean_abs(3), mean_abs(2));      // NVFP4 rollout drifts further than FP8
  // Common random numbers: pairs with the same rollout recipe draw the same uniforms, so they
  // sample the same sequences and the same rollout log-probabilities whatever the trainer.
  for (std::size_t s = 0; s < results[1].sequences.size(); ++s) {
    for (std::size_t t = 0; t < results[1].sequences[s].size(); ++t) {
      ASSERT_EQ(results[1].sequences[s][t].token, results[4].sequences[s][t].token);
      ASSERT_EQ(results[1].sequences[s][t].logp_rollout, results[4].sequences[s][t].logp_rollout);
    }
  }
  // Δ is log p_train - log p_rollout of the sampled token.
  const DriftToken& t = results[2].sequences[0][5];
  EXPECT_DOUBLE_EQ(t.delta(), t.logp_train - t.logp_rollout);
  EXPECT_LE(t.logp_rollout, 0.0);
  EXPECT_GE(t.max_vocab_prob_diff, t.prob_diff);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(DriftRun, SameSeedSameCsvBytes) {
  const DriftOptions o = small_options({"bf16:fp8-block", "bf16:int4-w4a16-g32"}, false);
  const fs::path a = fs::temp_directory_path() / "rlsim_drift_a", b = fs::temp_directory_path() / "rlsim_drift_b";
  write_drift_outputs(a, run_drift(stories(), o, nullptr), false);
  write_drift_outputs(b, run_drift(stories(), o, nullptr), false);
  for (const char* f : {"drift.csv", "per_token.csv"}) {
    const std::string x = slurp(a / f);
    EXPECT_FALSE(x.empty()) << f;
    EXPECT_EQ(x, slurp(b / f)) << f;
  }
  const std::string csv = slurp(a / "drift.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "train,rollout,length,metric,value,ci_low,ci_high");
  // 2 pairs x 2 lengths x 7 metrics.
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 2 * 7);
  DriftOptions other = o;
  other.seed = 2;
  write_drift_outputs(b, run_drift(stories(), other, nullptr), false);
  EXPECT_NE(slurp(a / "per_token.csv"), slurp(b / "per_token.csv"));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(DriftRun, BadOptionsAreRejected) {
  DriftOptions o = small_options({"bf16:bf16"}, false);
  o.lengths = {8, 600};  // past stories260K's max_seq of 512
  EXPECT_THROW(run_drift(stories(), o, nullptr), std::invalid_argument);
  o.lengths = {16, 8};
  EXPECT_THROW(run_drift(stories(), o, nullptr), std::invalid_argument);
  o.lengths = {8};
  o.temperature = 0;
  EXPECT_THROW(run_drift(stories(), o, nullptr), std::invalid_argument);
  o.temperature = 1;
  o.prompts = {{1, 512}};  // stories260K's vocabulary is 0..511
  EXPECT_THROW(run_drift(stories(), o, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace rlsim::analysis
