#include "analysis/grpo.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "models/runtime/train.h"
#include "sim/engine/random.h"
#include "sim/engine/stop.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rlsim::analysis {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

double token_log_prob(std::span<const float> logits, double temperature, int y) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : logits) m = std::max(m, v / temperature);
  double sum = 0;
  for (float v : logits) sum += std::exp(v / temperature - m);
  return logits[static_cast<std::size_t>(y)] / temperature - m - std::log(sum);
}

namespace {

// One sampled response: the whole sequence (prompt + response), the rollout's log-prob of each
// response token and its reward.
struct Sample {
  std::vector<int> tokens;
  std::size_t prompt_len = 0;
  std::vector<double> logp_rollout;
  double reward = 0;
};

void check_options(const models::TransformerConfig& c, const std::vector<std::vector<int>>& prompts, const GrpoOptions& o) {
  if (o.prompts_per_step < 1 || o.group_size < 2 || o.response_tokens < 1 || o.steps < 1 || o.train_ranks < 1)
    throw std::invalid_argument("prompts_per_step, steps, response_tokens and train_ranks must be >= 1 and group_size >= 2");
  if (!(o.learning_rate > 0) || !(o.temperature > 0)) throw std::invalid_argument("learning_rate and temperature must be > 0");
  if (o.tis_cap && !(*o.tis_cap > 0)) throw std::invalid_argument("tis_cap must be > 0");
  if (prompts.empty()) throw std::invalid_argument("no prompts");
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty() || static_cast<int>(prompts[p].size()) + o.response_tokens > c.max_seq)
      throw std::invalid_argument(fmt::format("prompt {} ({} tokens) plus {} response tokens exceeds max_seq {}", p,
                                              prompts[p].size(), o.response_tokens, c.max_seq));
  }
}

// Samples every response of step `step` with the rollout engine (copies per thread).
std::vector<Sample> rollout_step(models::Transformer& engine, const models::Tokenizer& tok,
                                 const std::vector<std::vector<int>>& prompts, const GrpoOptions& o, int step) {
  const std::size_t n = static_cast<std::size_t>(o.prompts_per_step) * static_cast<std::size_t>(o.group_size);
  std::vector<Sample> out(n);
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
#else
  const int threads = 1;
#endif
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::optional<models::Transformer> copy;
    if (threads > 1) copy.emplace(engine);
    models::Transformer& e = copy ? *copy : engine;
#pragma omp for schedule(dynamic, 1)
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t p = (static_cast<std::size_t>(step) * static_cast<std::size_t>(o.prompts_per_step) +
                             i / static_cast<std::size_t>(o.group_size)) %
                            prompts.size();
      sim::Rng rng(sim::mix_seed(o.seed) ^ sim::mix_seed((static_cast<std::uint64_t>(step) << 32) | i));
      Sample& s = out[i];
      s.tokens = prompts[p];
      s.prompt_len = s.tokens.size();
      e.reset();
      std::span<const float> logits = e.extend(s.tokens);
      std::string text;
      for (int t = 0; t < o.response_tokens; ++t) {
        const int y = models::sample_token(logits, o.temperature, 1.0, rng.uniform());
        s.logp_rollout.push_back(token_log_prob(logits, o.temperature, y));
        text += tok.decode(s.tokens.back(), y);
        s.tokens.push_back(y);
        if (t + 1 < o.response_tokens) logits = e.decode(y);
      }
      s.reward = task_reward(o.task, text);
    }
  }
  return out;
}

// Group-normalised advantages: (r - group mean) / (group std + 1e-6).
std::vector<double> advantages(const std::vector<Sample>& s, int group, GrpoStep& m) {
  std::vector<double> a(s.size());
  double sum = 0, sq = 0;
  for (const auto& x : s) {
    sum += x.reward;
    sq += x.reward * x.reward;
  }
  const double n = static_cast<double>(s.size());
  m.reward_mean = sum / n;
  m.reward_std = std::sqrt(std::max(0.0, sq / n - m.reward_mean * m.reward_mean));
  for (std::size_t g0 = 0; g0 < s.size(); g0 += static_cast<std::size_t>(group)) {
    double gs = 0, gq = 0;
    for (int k = 0; k < group; ++k) {
      gs += s[g0 + static_cast<std::size_t>(k)].reward;
      gq += s[g0 + static_cast<std::size_t>(k)].reward * s[g0 + static_cast<std::size_t>(k)].reward;
    }
    const double mean = gs / group, sd = std::sqrt(std::max(0.0, gq / group - mean * mean));
    for (int k = 0; k < group; ++k) {
      const std::size_t i = g0 + static_cast<std::size_t>(k);
      a[i] = (s[i].reward - mean) / (sd + 1e-6);
    }
  }
  return a;
}

// One sequence's contribution to a step: its token statistics and the times of its trainer passes.
struct TokenStats {
  double kl = 0, w_sum = 0, entropy = 0, max_abs_diff = 0, w_max = 0;
  std::int64_t clipped = 0;
  double forward_s = 0, backward_s = 0;
};

// The trainer's forward and backward of one sampled sequence with advantage `adv_per_token` (A /
// tokens in the batch), into `model`'s gradients. The trainer's log-probabilities (importance
// weights, mismatch) come from that forward, or, when `scorer` is set (batch-invariant runs), from
// the runtime's prefill of the same weights in the training recipe: the kernels the rollout
// engine decodes with, so identical recipes give bitwise-identical log-probabilities.
TokenStats train_sequence(models::TrainableModel<float>& model, const models::Transformer* scorer, const Sample& s,
                          double adv_per_token, const GrpoOptions& o) {
  TokenStats x;
  auto t0 = Clock::now();
  auto pass = model.forward(s.tokens, o.temperature);
  if (scorer) {
    const models::MatrixRM logits = scorer->prefill(std::span<const int>(s.tokens.data(), s.tokens.size() - 1));
    for (std::size_t pos = s.prompt_len - 1; pos + 1 < s.tokens.size(); ++pos) {
      const std::span<const float> row(logits.row(static_cast<Eigen::Index>(pos)).data(),
                                       static_cast<std::size_t>(logits.cols()));
      pass.logp[pos] = token_log_prob(row, o.temperature, s.tokens[pos + 1]);
    }
  }
  x.forward_s = since(t0);
  t0 = Clock::now();
  std::vector<double> dlogp(s.tokens.size() - 1, 0.0);
  for (std::size_t j = 0; j < s.logp_rollout.size(); ++j) {
    const std::size_t pos = s.prompt_len - 1 + j;  // logp[pos] scores tokens[pos + 1]
    const double diff = s.logp_rollout[j] - pass.logp[pos];
    x.kl += diff;
    x.max_abs_diff = std::max(x.max_abs_diff, std::fabs(diff));
    double w = std::exp(-diff);  // pi_trainer / pi_rollout
    x.w_sum += w;
    x.w_max = std::max(x.w_max, w);
    if (o.tis_cap && w > *o.tis_cap) {
      ++x.clipped;
      w = *o.tis_cap;
    }
    if (!o.tis_cap) w = 1.0;
    x.entropy += pass.entropy[pos];
    // Minimising -A w logp / N: d loss / d logp = -A w / N.
    dlogp[pos] = -adv_per_token * w;
  }
  model.backward(dlogp);
  x.backward_s = since(t0);
  return x;
}

}  // namespace

double task_reward(GrpoTask task, const std::string& response) {
  (void)task;  // one task so far: the lipogram in 'e'
  int words = 0, clean = 0;
  bool in_word = false, has_e = false;
  auto end_word = [&] {
    if (!in_word) return;
    ++words;
    clean += has_e ? 0 : 1;
    in_word = has_e = false;
  };
  for (const char ch : response) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalpha(c)) {
      in_word = true;
      has_e = has_e || c == 'e' || c == 'E';
    } else {
      end_word();
    }
  }
  end_word();
  return words > 0 ? static_cast<double>(clean) / words : 0.0;
}

std::vector<GrpoStep> run_grpo(const models::ModelWeights& initial, const models::Tokenizer& tokenizer,
                               const std::vector<std::vector<int>>& prompts, const GrpoOptions& o,
                               const std::function<void(const GrpoStep&)>& on_step) {
  check_options(initial.config, prompts, o);
  const models::KernelMode kernels = o.batch_invariant ? models::KernelMode::kBatchInvariant : models::KernelMode::kDefault;
  models::Transformer engine(initial, o.rollout_precision, kernels);
  // Data-parallel trainer ranks, each with its own copy of the model and its gradient buffer;
  // rank r takes sequences r, r + R, ... and the ranks' gradients are summed in rank order, so the
  // result does not depend on how many threads run the ranks.
  std::vector<models::TrainableModel<float>> ranks;
  for (int r = 0; r < o.train_ranks; ++r) ranks.emplace_back(initial, o.train_precision.recipe);
  // Batch-invariant runs score with the runtime's kernels too (one scorer per rank).
  std::vector<models::Transformer> scorers;
  if (o.batch_invariant) {
    for (int r = 0; r < o.train_ranks; ++r) scorers.emplace_back(initial, o.train_precision, kernels);
  }
  models::AdamW opt({.lr = o.learning_rate, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0, .clip = 1.0});
  // Eigen's GEMM blocking (hence its summation order) depends on its thread count: the trainer's
  // products run on one thread per rank so that the same seed gives the same weights anywhere.
  struct EigenThreads {
    int saved = Eigen::nbThreads();
    EigenThreads() { Eigen::setNbThreads(1); }
    ~EigenThreads() { Eigen::setNbThreads(saved); }
  } one_thread;
#ifdef _OPENMP
  const int threads = std::min(o.train_ranks, omp_get_max_threads());
#else
  const int threads = 1;
#endif
  std::vector<GrpoStep> steps;
  for (int k = 0; k < o.steps; ++k) {
    sim::check_stop();  // SIGINT / SIGTERM: stop between steps
    GrpoStep m;
    m.step = k;
    auto t0 = Clock::now();
    const std::vector<Sample> samples = rollout_step(engine, tokenizer, prompts, o, k);
    m.rollout_s = since(t0);
    const std::vector<double> adv = advantages(samples, o.group_size, m);
    const double n_tok = static_cast<double>(samples.size()) * o.response_tokens;
    std::vector<TokenStats> st(samples.size());
    t0 = Clock::now();
#pragma omp parallel for num_threads(threads) schedule(static, 1) if (threads > 1)
    for (int r = 0; r < o.train_ranks; ++r) {
      for (std::size_t i = static_cast<std::size_t>(r); i < samples.size(); i += static_cast<std::size_t>(o.train_ranks)) {
        const models::Transformer* scorer = scorers.empty() ? nullptr : &scorers[static_cast<std::size_t>(r)];
        st[i] = train_sequence(ranks[static_cast<std::size_t>(r)], scorer, samples[i], adv[i] / n_tok, o);
      }
    }
    double fwd = 0, bwd = 0;
    TokenStats sum;
    for (const TokenStats& x : st) {  // in sequence order
      sum.kl += x.kl;
      sum.w_sum += x.w_sum;
      sum.entropy += x.entropy;
      sum.clipped += x.clipped;
      sum.max_abs_diff = std::max(sum.max_abs_diff, x.max_abs_diff);
      sum.w_max = std::max(sum.w_max, x.w_max);
      fwd += x.forward_s;
      bwd += x.backward_s;
    }
    for (std::size_t r = 1; r < ranks.size(); ++r) {
      auto g0 = ranks[0].grads().tensors();
      auto gr = ranks[r].grads().tensors();
      for (std::size_t t = 0; t < g0.size(); ++t) g0[t] += gr[t];
      ranks[r].zero_grads();
    }
    m.grad_norm = opt.step(ranks[0].params(), ranks[0].grads());
    ranks[0].zero_grads();
    for (std::size_t r = 1; r < ranks.size(); ++r) ranks[r].params() = ranks[0].params();
    // The wall time of the trainer, split between its forward (the log-prob recompute) and its
    // backward and update in the proportion of their summed per-sequence times.
    const double wall = since(t0);
    m.logprob_s = fwd + bwd > 0 ? wall * fwd / (fwd + bwd) : 0.0;
    m.train_s = wall - m.logprob_s;
    m.kl_rollout_trainer = sum.kl / n_tok;
    m.max_abs_logp_diff = sum.max_abs_diff;
    m.is_weight_mean = sum.w_sum / n_tok;
    m.is_weight_max = sum.w_max;
    m.is_clip_fraction = static_cast<double>(sum.clipped) / n_tok;
    m.entropy = sum.entropy / n_tok;
    m.response_length = o.response_tokens;
    // The new weights reach the rollout engine through its reload path.
    t0 = Clock::now();
    const models::ModelWeights updated = ranks[0].weights();
    engine.restore_weights_for_loading();
    engine.load_weights(updated);
    engine.process_weights_after_loading();
    m.sync_s = since(t0);
    for (auto& sc : scorers) {  // the scorers are the trainer's: not part of the measured sync
      sc.restore_weights_for_loading();
      sc.load_weights(updated);
      sc.process_weights_after_loading();
    }
    steps.push_back(m);
    if (on_step) on_step(m);
  }
  return steps;
}

std::string grpo_steps_csv(const std::vector<GrpoStep>& steps) {
  std::string t =
      "step,reward_mean,reward_std,kl_rollout_trainer,max_abs_logp_diff,is_weight_mean,is_weight_max,is_clip_fraction,"
      "grad_norm,entropy,response_length,rollout_s,logprob_s,train_s,sync_s\n";
  for (const auto& m : steps) {
    t += fmt::format("{},{:.6f},{:.6f},{:.6e},{:.6e},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.0f},{:.4f},{:.4f},{:.4f},{:.4f}\n",
                     m.step, m.reward_mean, m.reward_std, m.kl_rollout_trainer, m.max_abs_logp_diff, m.is_weight_mean,
                     m.is_weight_max, m.is_clip_fraction, m.grad_norm, m.entropy, m.response_length, m.rollout_s, m.logprob_s,
                     m.train_s, m.sync_s);
  }
  return t;
}

}  // namespace rlsim::analysis
