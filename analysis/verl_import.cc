#include "analysis/verl_import.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "analysis/launch_script.h"
#include "sim/scenario/scenario.h"

namespace rlsim::analysis {
namespace {

bool is_verl_entry(const ShellWord& w) {
  const std::string& word = w.text;
  return word.find("main_ppo") != std::string::npos || (word.starts_with("recipe.") && word.find("main") != std::string::npos);
}

// Adds the words of a verl command (after its entry point) to `l`.
void add_words(VerlLaunch& l, const std::vector<ShellWord>& words, std::size_t from, const std::string& file) {
  for (std::size_t i = from; i < words.size(); ++i) {
    const std::string& w = words[i].text;
    const int line = words[i].line;
    if (w == "$@") continue;
    if (w == "--config-name" || w == "--config-path") {
      if (i + 1 >= words.size()) fail_at(file, line, w + " without a value");
      if (w == "--config-name") l.config_name = words[i + 1].text;
      ++i;
      continue;
    }
    if (w.starts_with("--config-name=")) {
      l.config_name = w.substr(std::string_view("--config-name=").size());
      continue;
    }
    if (w.starts_with("--config-path=")) continue;
    if (ends_command(w)) break;  // a pipe or redirection
    const auto eq = w.find('=');
    if ((eq == std::string::npos || eq == 0) && unresolved_expansion(w)) {
      l.unread.push_back(ShellWord{w, line});  // a variable or array the script does not assign
      continue;
    }
    if (eq == std::string::npos || eq == 0) fail_at(file, line, fmt::format("'{}' is not a Hydra override KEY=VALUE", w));
    std::string key = w.substr(0, eq);
    while (!key.empty() && (key.front() == '+' || key.front() == '~')) key.erase(key.begin());
    l.overrides.push_back({key, w.substr(eq + 1), line});
  }
}

}  // namespace

const VerlOverride* VerlLaunch::last(const std::string& key) const {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    if (it->key == key) return &*it;
  }
  return nullptr;
}

std::string VerlLaunch::get(const std::string& key) const {
  const VerlOverride* o = last(key);
  return o ? o->value : "";
}

VerlLaunch parse_verl_script(const std::string& text, const std::string& file) {
  const LaunchCommand c = find_launch_command(text, file, is_verl_entry, "verl", "python3 -m verl.trainer.main_ppo");
  VerlLaunch l;
  l.entry = c.command.words[c.entry].text;
  add_words(l, c.command.words, c.entry + 1, file);
  return l;
}

VerlLaunch parse_verl_overrides(const std::vector<std::string>& words) {
  VerlLaunch l;
  std::vector<ShellWord> w;
  for (const auto& x : words) w.push_back({x, 0});
  add_words(l, w, 0, "rlsim import verl --");
  return l;
}

namespace {

// verl's defaults for the keys rlsim maps: verl/trainer/config/_generated_ppo_trainer.yaml (FSDP)
// and _generated_ppo_megatron_trainer.yaml (Megatron), volcengine/verl main, 2025-11. "" = null.
struct VerlDefault {
  const char* key;
  const char* fsdp;
  const char* megatron;
};
constexpr VerlDefault kVerlDefaults[] = {
    {"data.train_batch_size", "1024", "1024"},
    {"data.max_prompt_length", "512", "512"},
    {"data.max_response_length", "512", "512"},
    {"actor_rollout_ref.rollout.n", "1", "1"},
    {"actor_rollout_ref.rollout.name", "vllm", "vllm"},  // "???" (required) in verl; vllm in its examples
    {"actor_rollout_ref.rollout.tensor_model_parallel_size", "2", "2"},
    {"actor_rollout_ref.rollout.data_parallel_size", "1", "1"},
    {"actor_rollout_ref.actor.megatron.context_parallel_size", "1", "1"},
    {"actor_rollout_ref.rollout.expert_parallel_size", "1", "1"},
    {"actor_rollout_ref.rollout.gpu_memory_utilization", "0.5", "0.5"},
    {"actor_rollout_ref.rollout.max_num_seqs", "1024", "1024"},
    {"actor_rollout_ref.rollout.enforce_eager", "false", "false"},
    {"actor_rollout_ref.rollout.free_cache_engine", "true", "true"},
    {"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "", ""},
    {"actor_rollout_ref.actor.strategy", "fsdp", "megatron"},
    {"actor_rollout_ref.actor.ppo_mini_batch_size", "256", "256"},
    {"actor_rollout_ref.actor.ppo_epochs", "1", "1"},
    {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "", ""},
    {"actor_rollout_ref.actor.use_dynamic_bsz", "false", "false"},
    {"actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "16384", "16384"},
    {"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "16384", "16384"},
    {"actor_rollout_ref.actor.megatron.tensor_model_parallel_size", "1", "1"},
    {"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", "1", "1"},
    {"actor_rollout_ref.actor.megatron.expert_model_parallel_size", "1", "1"},
    {"actor_rollout_ref.actor.megatron.param_offload", "false", "false"},
    {"actor_rollout_ref.actor.megatron.optimizer_offload", "false", "false"},
    {"actor_rollout_ref.actor.megatron.grad_offload", "false", "false"},
    {"actor_rollout_ref.actor.fsdp_config.param_offload", "false", "false"},
    {"actor_rollout_ref.actor.fsdp_config.optimizer_offload", "false", "false"},
    // FSDP: model.enable_gradient_checkpointing true; Megatron: recompute_granularity null (none).
    {"actor_rollout_ref.model.enable_gradient_checkpointing", "true", "false"},
    {"actor_rollout_ref.actor.use_kl_loss", "false", "false"},
    {"algorithm.use_kl_in_reward", "false", "false"},
    // PPO: the advantage estimator (gae trains a critic), the critic's strategy and Megatron
    // layout, and a model-based reward.
    {"algorithm.adv_estimator", "gae", "gae"},
    {"critic.strategy", "fsdp", "megatron"},
    {"critic.megatron.tensor_model_parallel_size", "1", "1"},
    {"critic.megatron.pipeline_model_parallel_size", "1", "1"},
    {"critic.megatron.expert_model_parallel_size", "1", "1"},
    {"critic.megatron.context_parallel_size", "1", "1"},
    {"reward_model.enable", "false", "false"},
    {"trainer.nnodes", "1", "1"},
    {"trainer.n_gpus_per_node", "8", "8"},
    // The one-step-off and fully-async recipes' rollout devices and async keys:
    // recipe/one_step_off_policy/config/one_step_off_ppo_trainer.yaml and
    // recipe/fully_async_policy/config/fully_async_ppo_trainer.yaml.
    {"rollout.nnodes", "1", "1"},
    {"rollout.n_gpus_per_node", "8", "8"},
    {"async_training.staleness_threshold", "0.1", "0.1"},
    {"async_training.trigger_parameter_sync_step", "4", "4"},
    {"async_training.require_batches", "1", "1"},
    {"async_training.partial_rollout", "true", "true"},
};

// Keys that change performance and that rlsim does not model (yet): a warning when set.
constexpr const char* kNotModelled[] = {
    "actor_rollout_ref.rollout.max_num_batched_tokens",
    "actor_rollout_ref.rollout.enable_chunked_prefill",
    "actor_rollout_ref.rollout.enable_prefix_caching",
    "actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.actor.megatron.use_distributed_optimizer",
    "actor_rollout_ref.actor.megatron.sequence_parallel",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "actor_rollout_ref.model.use_fused_kernels",
    "actor_rollout_ref.rollout.mode",
    "actor_rollout_ref.model.enable_activation_offload",
    "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method",
    "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_num_layers",
    "actor_rollout_ref.rollout.multi_turn.enable",
    "actor_rollout_ref.actor.entropy_checkpointing",
    "actor_rollout_ref.rollout.max_model_len",
};

// Key prefixes without effect on step time in rlsim's model (data paths, names, logging,
// checkpointing, algorithm coefficients, learning rate...).
constexpr const char* kNoEffectPrefixes[] = {
    "data.train_files",
    "data.val_files",
    "data.prompt_key",
    "data.filter_overlong",
    "data.truncation",
    "data.shuffle",
    "data.return_raw_chat",
    "data.reward_fn_key",
    "data.val_batch_size",
    "data.dataloader",
    "data.seed",
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.actor.optim.",
    "actor_rollout_ref.actor.clip_ratio",
    "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.entropy_coeff",
    "actor_rollout_ref.actor.kl_loss",
    "actor_rollout_ref.actor.grad_clip",
    "actor_rollout_ref.actor.checkpoint",
    "actor_rollout_ref.actor.policy_loss",
    "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.top_k",
    "actor_rollout_ref.rollout.val_kwargs",
    "actor_rollout_ref.rollout.calculate_log_probs",
    "actor_rollout_ref.rollout.dtype",
    "actor_rollout_ref.rollout.load_format",
    "actor_rollout_ref.model.trust_remote_code",
    "algorithm.adv_estimator",
    "algorithm.kl_ctrl",
    "algorithm.norm_adv",
    "algorithm.gamma",
    "algorithm.lam",
    "algorithm.filter_groups",
    "trainer.",
    "custom_reward_function",
    "reward_model.reward_manager",
    "critic.",
    "ray_kwargs",
    "global_profiler",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",  // the reference pass: as the old log-prob (rollout's)
    "actor_rollout_ref.ref.fsdp_config.param_offload",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.hybrid_engine",  // the recipe's placement says it (colocated for main_ppo)
};

// The launch's value of a mapped key, or verl's default, with where it came from.
struct Value {
  std::string text;
  int line = 0;  // the override's line; 0: verl's default (or a command-line override)
  bool set = false;
};

class Reader {
 public:
  Reader(const VerlLaunch& l, std::string source) : l_(l), source_(std::move(source)) {
    megatron_ = l.config_name.find("megatron") != std::string::npos || l.get("actor_rollout_ref.actor.strategy") == "megatron";
  }
  bool megatron() const { return megatron_; }

  Value value(const std::string& key) const {
    if (const VerlOverride* o = l_.last(key)) return {o->value, o->line, true};
    for (const auto& d : kVerlDefaults) {
      if (key == d.key) return {megatron_ ? d.megatron : d.fsdp, 0, false};
    }
    return {};
  }
  std::int64_t integer(const std::string& key) const { return setting_integer(setting(key), source_); }
  bool has(const std::string& key) const { return !value(key).text.empty() && value(key).text != "null"; }
  bool boolean(const std::string& key) const {
    const std::string t = ascii_lower(value(key).text);
    if (t == "true") return true;
    if (t == "false" || t.empty() || t == "null") return false;
    fail_at(source_, value(key).line, fmt::format("{}={}: expected true or false", key, value(key).text));
  }
  double number(const std::string& key) const { return setting_number(setting(key), source_); }
  // The key's value as a launch setting, for the shared readers and their messages.
  LaunchSetting setting(const std::string& key) const {
    const Value v = value(key);
    return {v.text, v.line, fmt::format("{}={}", key, v.text), fmt::format("rlsim import verl SCRIPT {}=VALUE", key)};
  }
  // "  # verl KEY=VALUE" (or "(verl default)") for the comment of a scenario line.
  std::string note(const std::string& key) const {
    const Value v = value(key);
    return fmt::format("# verl {}={}{}", key, v.text.empty() ? "null" : v.text, v.set ? "" : " (verl default)");
  }

 private:
  const VerlLaunch& l_;
  std::string source_;
  bool megatron_ = false;
};

}  // namespace

namespace {

double phi(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// Phi^-1 by bisection (the fit needs a few digits).
double phi_inverse(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (phi(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double clipped_mean(double mu, double sigma, double m) {
  const double lm = std::log(m);
  return std::exp(mu + sigma * sigma / 2) * phi((lm - mu - sigma * sigma) / sigma) + m * (1 - phi((lm - mu) / sigma));
}

// The number in a log value: "123.4" or "np.float64(123.4)".
std::optional<double> log_number(std::string v) {
  if (const auto open = v.find('('); open != std::string::npos) v = v.substr(open + 1, v.find(')') - open - 1);
  return parse_number(v);
}

}  // namespace

std::pair<double, double> fit_clipped_lognormal(double mean, double clip_ratio, double max_tokens) {
  if (!(mean > 0) || !(max_tokens > 0) || mean > max_tokens || clip_ratio < 0 || clip_ratio >= 1)
    throw std::invalid_argument(
        fmt::format("response lengths: mean {} with max {} and clip ratio {} cannot be fitted", mean, max_tokens, clip_ratio));
  if (clip_ratio <= 0) {
    const double sigma = 0.8;
    return {mean / std::exp(sigma * sigma / 2), sigma};
  }
  // For a sigma, the clip ratio fixes mu: ln M - mu = sigma Phi^-1(1 - clip). The clipped mean
  // then falls as sigma grows (more mass far below the cap): bisect on it.
  const double z = phi_inverse(1 - clip_ratio);
  auto mu_of = [&](double sigma) { return std::log(max_tokens) - sigma * z; };
  double lo = 0.05, hi = 3.0;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (clipped_mean(mu_of(mid), mid, max_tokens) > mean ? lo : hi) = mid;
  }
  const double sigma = 0.5 * (lo + hi);
  return {std::exp(mu_of(sigma)), sigma};
}

namespace {

// The numeric fields of every `step:N - key:value - ...` line of a console log, with its line.
std::vector<std::pair<int, std::map<std::string, double>>> step_lines(const std::string& text) {
  std::vector<std::pair<int, std::map<std::string, double>>> out;
  std::istringstream in(text);
  std::string raw;
  int n = 0;
  while (std::getline(in, raw)) {
    ++n;
    const auto at = raw.find("step:");
    if (at == std::string::npos) continue;
    std::map<std::string, double> kv;
    std::size_t pos = at;
    while (pos < raw.size()) {
      const auto end = raw.find(" - ", pos);
      const std::string field = raw.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      const auto colon = field.find(':');
      if (colon != std::string::npos) {
        if (const auto v = log_number(field.substr(colon + 1))) kv[field.substr(0, colon)] = *v;
      }
      if (end == std::string::npos) break;
      pos = end + 3;
    }
    out.emplace_back(n, std::move(kv));
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, double>> verl_log_phase_times(const std::string& text, const std::string& file) {
  std::vector<std::map<std::string, double>> steps;
  for (auto& [line, kv] : step_lines(text)) {
    if (kv.count("timing_s/step")) steps.push_back(std::move(kv));
  }
  if (steps.empty()) fail_at(file, 0, "no step line with timing_s/step (a verl console log: step:N - key:value - ...)");
  const std::size_t first = steps.size() > 1 ? 1 : 0;
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, figure] : {std::pair{"timing_s/gen", "phase.rollout"},
                                    {"timing_s/old_log_prob", "phase.old_logprob"},
                                    {"timing_s/ref", "phase.reference"},
                                    {"timing_s/update_actor", "phase.actor_update"},
                                    {"timing_s/step", "step_time"}}) {
    double sum = 0;
    int n = 0;
    for (std::size_t i = first; i < steps.size(); ++i) {
      if (const auto it = steps[i].find(key); it != steps[i].end()) {
        sum += it->second;
        ++n;
      }
    }
    if (n > 0) out.emplace_back(figure, sum / n);
  }
  return out;
}

VerlLogLengths parse_verl_log(const std::string& text, const std::string& file) {
  VerlLogLengths out;
  for (auto& [n, kv] : step_lines(text)) {
    if (!kv.count("response_length/mean")) continue;  // a step line of another kind
    for (const char* k : {"response_length/max", "prompt_length/mean", "prompt_length/max"}) {
      if (!kv.count(k)) fail_at(file, n, fmt::format("a step line with response_length/mean but no {}", k));
    }
    ++out.steps;
    out.response_mean += kv["response_length/mean"];
    out.response_max += kv["response_length/max"];
    out.response_clip_ratio += kv.count("response_length/clip_ratio") ? kv["response_length/clip_ratio"] : 0.0;
    out.prompt_mean += kv["prompt_length/mean"];
    out.prompt_max += kv["prompt_length/max"];
  }
  if (out.steps == 0) fail_at(file, 0, "no step line with response_length/mean (a verl console log: step:N - key:value - ...)");
  const double s = out.steps;
  out.response_mean /= s;
  out.response_max /= s;
  out.response_clip_ratio /= s;
  out.prompt_mean /= s;
  out.prompt_max /= s;
  return out;
}

namespace {

// The Megatron key that also turns on activation recomputation (read by the training section,
// and so no override warning).
constexpr const char* kRecomputeKey = "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity";

// What the section writers share: the launch's settings, the scenario being written (each line
// commented with the verl key behind it) and the import's warnings.
struct VerlWriter {
  const VerlLaunch& launch;
  const Reader& r;
  const std::string& source;
  ScenarioText& y;
  ImportedScenario& out;

  // A scenario line with the note of verl key `key` ("": no comment).
  void line(const std::string& text, const std::string& key) const { y.line(text, key.empty() ? "" : r.note(key)); }
  // fail_at at the line that set `key` (0: a verl default).
  [[noreturn]] void fail(const std::string& key, const std::string& what) const { fail_at(source, r.value(key).line, what); }
};

// name and model: the catalog model whose name the checkpoint path contains, else the config.json
// given by --model-config. Returns the checkpoint path.
std::string write_verl_model(const VerlWriter& w, const std::string& model_config) {
  const std::string path = w.r.value("actor_rollout_ref.model.path").text;
  const std::string model = catalog_model_for_path(path);
  w.line(fmt::format("name: imported from {}", w.source), "");
  if (!model.empty()) {
    w.line("model: " + model, "actor_rollout_ref.model.path");
  } else if (!model_config.empty()) {
    w.line("model: {hf_config: " + model_config + "}", "actor_rollout_ref.model.path");
  } else {
    w.fail("actor_rollout_ref.model.path",
           fmt::format("actor_rollout_ref.model.path={}: no catalog model matches '{}' (catalog: {}); give --model-config "
                       "config.json",
                       path, path, fmt::join(sim::catalog_model_names(), ", ")));
  }
  return path;
}

// Which entry point the launch runs: main_ppo's hybrid engine, or a recipe that gives the
// rollout devices of its own.
struct VerlEntry {
  bool one_step_off = false, fully_async = false;
  explicit VerlEntry(const VerlLaunch& l)
      : one_step_off(l.entry.find("one_step_off") != std::string::npos),
        fully_async(l.entry.find("fully_async") != std::string::npos) {}
  bool colocated() const { return !one_step_off && !fully_async; }
};

// cluster, placement and schedule: main_ppo's hybrid engine shares every device; the recipes give
// the rollout its own (rollout.nnodes x rollout.n_gpus_per_node).
void write_verl_cluster(const VerlWriter& w, const std::string& device, const VerlEntry& entry) {
  const Reader& r = w.r;
  const std::int64_t nodes = r.integer("trainer.nnodes"), per_node = r.integer("trainer.n_gpus_per_node");
  w.line("cluster:", "");
  w.line("  device: " + device, "");
  if (entry.colocated()) {
    w.line(fmt::format("  nodes: {}", nodes), "trainer.nnodes");
    w.line(fmt::format("  devices_per_node: {}", per_node), "trainer.n_gpus_per_node");
    w.line("placement: {mode: colocated}", "");
    return;
  }
  const std::int64_t rnodes = r.integer("rollout.nnodes"), rper = r.integer("rollout.n_gpus_per_node");
  // As many trainer as rollout nodes, together no more than a node of 8 (the common node, as
  // verl's one-step-off examples split one: 6 + 2): the two pools share the nodes; otherwise
  // they are nodes of their own.
  constexpr std::int64_t kCommonNodeSize = 8;
  const bool shared = nodes == rnodes && per_node + rper <= kCommonNodeSize;
  w.line(fmt::format("  nodes: {}", shared ? nodes : nodes + rnodes), "");
  w.line(fmt::format("  devices_per_node: {}", shared ? per_node + rper : std::max(per_node, rper)), "");
  if (!shared && per_node != rper)
    w.out.warnings.push_back(fmt::format("trainer nodes have {} GPUs and rollout nodes {}: the cluster takes {} per node",
                                         per_node, rper, std::max(per_node, rper)));
  w.line("placement:", "");
  w.line("  mode: disaggregated", "");
  w.line(fmt::format("  rollout_devices: {}", rnodes * rper), "rollout.n_gpus_per_node");
  w.line(fmt::format("  train_devices: {}", nodes * per_node), "trainer.n_gpus_per_node");
  if (entry.one_step_off) {
    w.line("schedule: {mode: one-step-off}", "");
  } else {
    w.line("schedule:", "");
    w.line("  mode: async", "");
    w.line(fmt::format("  staleness: {}", r.number("async_training.staleness_threshold")), "async_training.staleness_threshold");
    w.line(fmt::format("  partial_rollout: {}", r.boolean("async_training.partial_rollout")), "async_training.partial_rollout");
  }
}

// The length distributions: from a console log's means, maxima and clip ratio when one is given,
// else assumed from the maximum lengths (a warning says so).
void write_verl_lengths(const VerlWriter& w, const VerlLogLengths* lengths) {
  const std::int64_t max_prompt = w.r.integer("data.max_prompt_length"), max_response = w.r.integer("data.max_response_length");
  if (lengths) {
    // The log's prompts: its mean, up to its max (a lognormal clipped at the max, sigma 0.8; a
    // uniform ending at the max when the mean is within 10 % of it); responses: a lognormal
    // clipped at max_response_length with the log's mean and clip ratio.
    const auto pmax = static_cast<std::int64_t>(std::llround(lengths->prompt_max));
    const std::string prompt_note = fmt::format("# log: prompt_length/mean {:.1f}, /max {:.0f} over {} steps",
                                                lengths->prompt_mean, lengths->prompt_max, lengths->steps);
    if (lengths->prompt_mean > 0.9 * lengths->prompt_max) {
      const auto pmin = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(2 * lengths->prompt_mean)) - pmax);
      w.y.line(fmt::format("  prompt_tokens: {{dist: uniform, min: {}, max: {}}}", pmin, std::max(pmin, pmax)), prompt_note);
    } else {
      const auto [pmedian, psigma] = fit_clipped_lognormal(lengths->prompt_mean, 0.0, static_cast<double>(pmax));
      w.y.line(fmt::format("  prompt_tokens: {{dist: lognormal, median: {:.1f}, sigma: {:.4f}, max: {}}}", pmedian, psigma, pmax),
               prompt_note);
    }
    const auto [median, sigma] =
        fit_clipped_lognormal(std::min(lengths->response_mean, static_cast<double>(max_response)),
                              std::min(lengths->response_clip_ratio, 0.999), static_cast<double>(max_response));
    w.y.line(fmt::format("  response_tokens: {{dist: lognormal, median: {:.1f}, sigma: {:.4f}, max: {}}}", median, sigma,
                         max_response),
             fmt::format("# log: response_length/mean {:.1f}, /clip_ratio {:.3f}; cap: data.max_response_length",
                         lengths->response_mean, lengths->response_clip_ratio));
    return;
  }
  w.line(
      fmt::format("  prompt_tokens: {{dist: uniform, min: {}, max: {}}}", std::max<std::int64_t>(1, max_prompt / 4), max_prompt),
      "data.max_prompt_length");
  w.line(fmt::format("  response_tokens: {{dist: lognormal, median: {}, sigma: 0.8, max: {}}}",
                     std::max<std::int64_t>(1, max_response / 4), max_response),
         "data.max_response_length");
  w.out.warnings.push_back(
      "length distributions assumed (prompts uniform in [max/4, max], responses lognormal, median max/4, sigma 0.8, "
      "truncated at max_response_length); --log sets them from a run's console log");
}

// workload: GRPO groups of n samples per prompt. Fully async: a trainer step takes
// require_batches mini-batches and the weights reach the rollout every
// trigger_parameter_sync_step steps; rlsim's step is one weight update. Returns the prompts per step.
std::int64_t write_verl_workload(const VerlWriter& w, const VerlEntry& entry, const VerlLogLengths* lengths) {
  const Reader& r = w.r;
  const std::int64_t async_batches =
      entry.fully_async ? r.integer("async_training.require_batches") * r.integer("async_training.trigger_parameter_sync_step")
                        : 1;
  const std::int64_t prompts = entry.fully_async ? r.integer("actor_rollout_ref.actor.ppo_mini_batch_size") * async_batches
                                                 : r.integer("data.train_batch_size");
  w.line("workload:", "");
  if (entry.fully_async) {
    w.y.line(fmt::format("  prompts_per_step: {}", prompts),
             fmt::format("# ppo_mini_batch_size x require_batches x trigger_parameter_sync_step ({} x {})",
                         r.integer("actor_rollout_ref.actor.ppo_mini_batch_size"), async_batches));
  } else {
    w.line(fmt::format("  prompts_per_step: {}", prompts), "data.train_batch_size");
  }
  w.line(fmt::format("  samples_per_prompt: {}", r.integer("actor_rollout_ref.rollout.n")), "actor_rollout_ref.rollout.n");
  write_verl_lengths(w, lengths);
  return prompts;
}

// rollout: the engine and its layout, memory share, sequence limit and CUDA graphs.
void write_verl_rollout(const VerlWriter& w) {
  const Reader& r = w.r;
  const std::string engine = ascii_lower(r.value("actor_rollout_ref.rollout.name").text);
  if (engine != "vllm" && engine != "sglang")
    w.fail("actor_rollout_ref.rollout.name", fmt::format("actor_rollout_ref.rollout.name={}: expected vllm or sglang", engine));
  w.line("rollout:", "");
  w.line("  engine: " + engine, "actor_rollout_ref.rollout.name");
  w.line(fmt::format("  tensor_parallel: {}", r.integer("actor_rollout_ref.rollout.tensor_model_parallel_size")),
         "actor_rollout_ref.rollout.tensor_model_parallel_size");
  // Data-parallel attention and expert parallelism inside one engine (verl's rollout
  // data_parallel_size / expert_parallel_size, passed to vLLM / SGLang as --data-parallel-size and
  // --enable-expert-parallel): written only when set, so dense-model imports read as before.
  for (const auto& [ours, theirs] : {std::pair{"data_parallel", "actor_rollout_ref.rollout.data_parallel_size"},
                                     std::pair{"expert_parallel", "actor_rollout_ref.rollout.expert_parallel_size"}}) {
    if (r.integer(theirs) > 1) w.line(fmt::format("  {}: {}", ours, r.integer(theirs)), theirs);
  }
  w.line(fmt::format("  memory_utilization: {}", r.number("actor_rollout_ref.rollout.gpu_memory_utilization")),
         "actor_rollout_ref.rollout.gpu_memory_utilization");
  w.line(fmt::format("  max_num_seqs: {}", r.integer("actor_rollout_ref.rollout.max_num_seqs")),
         "actor_rollout_ref.rollout.max_num_seqs");
  w.line(fmt::format("  enforce_eager: {}", r.boolean("actor_rollout_ref.rollout.enforce_eager")),
         "actor_rollout_ref.rollout.enforce_eager");
  // free_cache_engine: the engine sleeps while the trainer runs (level 1 offloads weights for vLLM).
  if (!r.boolean("actor_rollout_ref.rollout.free_cache_engine"))
    w.out.warnings.push_back("actor_rollout_ref.rollout.free_cache_engine=false: rlsim's colocated engines always sleep");
}

// training's batching: mini-batches of the step's prompts, micro-batches by tokens (dynamic
// batching) or by sequences, for the update and the log-prob passes.
void write_verl_batching(const VerlWriter& w, std::int64_t prompts) {
  const Reader& r = w.r;
  const std::int64_t mini = r.integer("actor_rollout_ref.actor.ppo_mini_batch_size");
  if (mini < 1 || prompts % mini != 0)
    w.fail("actor_rollout_ref.actor.ppo_mini_batch_size",
           fmt::format("actor_rollout_ref.actor.ppo_mini_batch_size={}{} must divide data.train_batch_size={}", mini,
                       r.value("actor_rollout_ref.actor.ppo_mini_batch_size").set ? "" : " (verl default)", prompts));
  w.line(fmt::format("  mini_batches: {}", prompts / mini), "actor_rollout_ref.actor.ppo_mini_batch_size");
  w.line(fmt::format("  ppo_epochs: {}", r.integer("actor_rollout_ref.actor.ppo_epochs")), "actor_rollout_ref.actor.ppo_epochs");
  const bool dynamic = r.boolean("actor_rollout_ref.actor.use_dynamic_bsz");
  w.line(fmt::format("  dynamic_batching: {}", dynamic), "actor_rollout_ref.actor.use_dynamic_bsz");
  w.line(fmt::format("  micro_batch_tokens: {}", r.integer("actor_rollout_ref.actor.ppo_max_token_len_per_gpu")),
         "actor_rollout_ref.actor.ppo_max_token_len_per_gpu");
  if (dynamic)
    w.line(fmt::format("  logprob_micro_batch_tokens: {}", r.integer("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu")),
           "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu");
  if (r.has("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"))
    w.line(fmt::format("  micro_batch_sequences: {}", r.integer("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")),
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu");
  else if (!dynamic)
    w.out.warnings.push_back(
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu is null with use_dynamic_bsz=false: "
        "verl requires one; rlsim's default (8) is used");
  if (r.has("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"))
    w.line(fmt::format("  logprob_micro_batch_sequences: {}",
                       r.integer("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")),
           "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu");
}

// training: the backend and its Megatron layout, batching, recomputation, the KL reference and
// offload.
void write_verl_training(const VerlWriter& w, std::int64_t prompts) {
  const Reader& r = w.r;
  const bool meg = r.megatron();
  w.line("training:", "");
  const sim::TrainingBackend backend = meg ? sim::TrainingBackend::kMegatron : sim::TrainingBackend::kFsdp;
  w.line("  backend: " + sim::name_in(sim::backend_names(), backend), "actor_rollout_ref.actor.strategy");
  if (meg) {
    for (const auto& [ours, theirs] :
         {std::pair{"tensor_parallel", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size"},
          std::pair{"pipeline_parallel", "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size"},
          std::pair{"expert_parallel", "actor_rollout_ref.actor.megatron.expert_model_parallel_size"}})
      w.line(fmt::format("  {}: {}", ours, r.integer(theirs)), theirs);
    if (r.integer("actor_rollout_ref.actor.megatron.context_parallel_size") > 1)
      w.line(fmt::format("  context_parallel: {}", r.integer("actor_rollout_ref.actor.megatron.context_parallel_size")),
             "actor_rollout_ref.actor.megatron.context_parallel_size");
  }
  write_verl_batching(w, prompts);
  // Megatron also recomputes when the transformer config is overridden to full recompute.
  if (meg && ascii_lower(w.launch.get(kRecomputeKey)) == "full") {
    w.line("  activation_checkpointing: true", kRecomputeKey);
  } else {
    w.line(fmt::format("  activation_checkpointing: {}", r.boolean("actor_rollout_ref.model.enable_gradient_checkpointing")),
           "actor_rollout_ref.model.enable_gradient_checkpointing");
  }
  const bool reference = r.boolean("actor_rollout_ref.actor.use_kl_loss") || r.boolean("algorithm.use_kl_in_reward");
  w.line(fmt::format("  reference_model: {}", reference), "actor_rollout_ref.actor.use_kl_loss");
  const std::string pre = meg ? "actor_rollout_ref.actor.megatron." : "actor_rollout_ref.actor.fsdp_config.";
  w.line(fmt::format("  param_offload: {}", r.boolean(pre + "param_offload")), pre + "param_offload");
  w.line(fmt::format("  optimizer: {{offload: {}}}", r.boolean(pre + "optimizer_offload")), pre + "optimizer_offload");
}

// The algorithm section: verl's advantage estimator by name (gae trains a critic: PPO), the
// critic's strategy and Megatron layout (verl's critic worker colocated with the actor's), and a
// model-based reward when reward_model.enable is set. A critic or reward model checkpoint other
// than the actor's is priced as the actor's model (a warning says so).
void write_verl_algorithm(const VerlWriter& w, const std::string& actor_path) {
  const Reader& r = w.r;
  const std::string adv = ascii_lower(r.value("algorithm.adv_estimator").text);
  std::string name = "grpo";
  if (adv == "gae") {
    name = "ppo";
  } else if (adv.starts_with("reinforce_plus_plus")) {
    name = "reinforce++";
  } else if (adv.starts_with("rloo")) {
    name = "rloo";
  } else if (adv != "grpo") {
    w.out.warnings.push_back("algorithm.adv_estimator=" + adv +
                             ": a critic-free estimator, priced as GRPO (advantages cost nothing rlsim models)");
  }
  const bool reward = r.boolean("reward_model.enable");
  if (name == "grpo" && !reward) return;  // rlsim's default
  w.line("algorithm:", "");
  w.line("  name: " + name, "algorithm.adv_estimator");
  // A checkpoint of a model the scenario runs (the critic under PPO, the reward model when enabled).
  for (const auto& [model_key, used] :
       {std::pair{"critic.model.path", name == "ppo"}, std::pair{"reward_model.model.path", reward}}) {
    const std::string p = r.value(model_key).text;
    if (used && !p.empty() && p != actor_path)
      w.out.warnings.push_back(fmt::format("{}={}: not the actor's checkpoint; priced as the actor's model", model_key, p));
  }
  if (name == "ppo") {
    const bool meg = r.value("critic.strategy").text == "megatron";
    w.line(std::string("  critic:"), "");
    const sim::TrainingBackend backend = meg ? sim::TrainingBackend::kMegatron : sim::TrainingBackend::kFsdp;
    w.line("    backend: " + sim::name_in(sim::backend_names(), backend), "critic.strategy");
    const char* keys[][2] = {{"tensor_parallel", "critic.megatron.tensor_model_parallel_size"},
                             {"pipeline_parallel", "critic.megatron.pipeline_model_parallel_size"},
                             {"expert_parallel", "critic.megatron.expert_model_parallel_size"},
                             {"context_parallel", "critic.megatron.context_parallel_size"}};
    for (const auto& [ours, theirs] : keys)
      w.line(fmt::format("    {}: {}", ours, meg ? r.integer(theirs) : 1), meg ? theirs : "");
  }
  if (reward) w.line("  reward_model: {}", "reward_model.enable");
}

// The warnings of what the import could not read or does not model, and the list of overrides
// without effect on step time: every override is mapped, not modelled (a warning), or listed.
void report_verl_overrides(const VerlWriter& w) {
  if (w.r.megatron() && w.r.boolean("actor_rollout_ref.actor.megatron.grad_offload"))
    w.out.warnings.push_back("actor_rollout_ref.actor.megatron.grad_offload=true: gradient offload is not modelled");
  for (const ShellWord& word : w.launch.unread)
    w.out.warnings.push_back(
        fmt::format("line {}: {} is not assigned in the script (a sourced file's or the environment's): "
                    "its overrides are not read; give them after the script as KEY=VALUE",
                    word.line, word.text));
  for (const auto& o : w.launch.overrides) {
    const bool mapped =
        std::any_of(std::begin(kVerlDefaults), std::end(kVerlDefaults), [&](const VerlDefault& d) { return o.key == d.key; });
    if (mapped || o.key == "actor_rollout_ref.model.path" || o.key == kRecomputeKey) continue;
    const bool no_effect = std::any_of(std::begin(kNoEffectPrefixes), std::end(kNoEffectPrefixes),
                                       [&](const char* p) { return o.key.starts_with(p); });
    const bool known = std::any_of(std::begin(kNotModelled), std::end(kNotModelled), [&](const char* k) { return o.key == k; });
    const std::string where = o.line > 0 ? fmt::format("line {}: ", o.line) : "";
    if (no_effect && !known) {
      w.out.ignored.push_back(o.key);
    } else {
      w.out.warnings.push_back(fmt::format("{}{}={}: changes performance, not modelled by rlsim", where, o.key, o.value));
    }
  }
}

}  // namespace

ImportedScenario import_verl(const VerlLaunch& launch, const std::string& device, const std::string& model_config,
                             const std::string& source, const VerlLogLengths* lengths) {
  const Reader r(launch, source);
  ImportedScenario out;
  ScenarioText y;
  const VerlWriter w{launch, r, source, y, out};
  const VerlEntry entry(launch);
  const std::string actor_path = write_verl_model(w, model_config);
  write_verl_cluster(w, device, entry);
  const std::int64_t prompts = write_verl_workload(w, entry, lengths);
  write_verl_rollout(w);
  write_verl_training(w, prompts);
  write_verl_algorithm(w, actor_path);
  report_verl_overrides(w);
  out.yaml = y.str();
  return out;
}

}  // namespace rlsim::analysis
