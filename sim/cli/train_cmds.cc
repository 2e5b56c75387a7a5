#include "sim/cli/train_cmds.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>

#include "analysis/drift.h"
#include "analysis/grpo.h"
#include "analysis/output_dir.h"
#include "analysis/plots.h"
#include "models/runtime/tokenizer.h"
#include "sim/cli/runtime_cmds.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/yaml_file.h"
#include "sim/scenario/yaml_map.h"

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;

models::RuntimePrecision precision_value(sim::Map& m, const std::string& key) {
  const std::string name = m.str(key, "fp32");
  try {
    return models::runtime_precision(name);
  } catch (const std::invalid_argument& e) {
    m.src().fail(m.get(key), m.path(key), fmt::format("'{}': {}", m.path(key), e.what()));
  }
}

}  // namespace

TrainFile read_train_file(const std::string& path) {
  const YAML::Node root = sim::load_input_file(path, sim::InputKind::kTrain);
  const sim::Source src{path, {}, "--set"};
  if (!root.IsMap()) src.fail(root, "", "a train file must be a YAML mapping (see rlsim train --help)");
  sim::Map m(src, root, "");
  m.finish(train_file_keys());
  TrainFile f;
  const fs::path dir = fs::path(path).parent_path();
  auto relative = [&](const std::string& p) { return fs::path(p).is_absolute() ? p : (dir / p).lexically_normal().string(); };
  f.name = m.str("name", fs::path(path).stem().string());
  f.model = relative(m.str("model", "", true));
  if (m.has("tokenizer")) f.tokenizer = relative(m.str("tokenizer", ""));
  analysis::GrpoOptions& g = f.grpo;
  g.task = m.choice<analysis::GrpoTask>("task", g.task, {{"lipogram-e", analysis::GrpoTask::kLipogram}});
  g.train_precision = precision_value(m, "training_precision");
  g.rollout_precision = precision_value(m, "rollout_precision");
  g.batch_invariant = m.boolean("batch_invariant", g.batch_invariant);
  g.prompts_per_step = static_cast<int>(m.integer("prompts_per_step", g.prompts_per_step, 1, 4096));
  g.group_size = static_cast<int>(m.integer("group_size", g.group_size, 2, 1024));
  g.response_tokens = static_cast<int>(m.integer("response_tokens", g.response_tokens, 1, 1 << 20));
  g.steps = static_cast<int>(m.integer("steps", g.steps, 1, 1 << 20));
  g.train_ranks = static_cast<int>(m.integer("train_ranks", g.train_ranks, 1, 1024));
  g.learning_rate = m.number("learning_rate", g.learning_rate, 1e-12, 10.0);
  g.temperature = m.number("temperature", g.temperature, 1e-6, 100.0);
  if (m.has("tis_cap")) g.tis_cap = m.number("tis_cap", 2.0, 1e-6, 1e6);
  g.seed = static_cast<std::uint64_t>(
      m.integer("seed", static_cast<std::int64_t>(g.seed), 0, std::numeric_limits<std::int64_t>::max()));
  f.out = m.str("out", "out/" + fs::path(path).stem().string());
  return f;
}

namespace {

nlohmann::json run_json(const TrainFile& f, const std::vector<analysis::GrpoStep>& steps) {
  const auto& g = f.grpo;
  nlohmann::json j;
  j["name"] = f.name;
  j["model"] = f.model;
  j["training_precision"] = g.train_precision.name;
  j["rollout_precision"] = g.rollout_precision.name;
  j["batch_invariant"] = g.batch_invariant;
  j["prompts_per_step"] = g.prompts_per_step;
  j["group_size"] = g.group_size;
  j["response_tokens"] = g.response_tokens;
  j["learning_rate"] = g.learning_rate;
  j["tis_cap"] = g.tis_cap ? nlohmann::json(*g.tis_cap) : nlohmann::json(nullptr);
  j["seed"] = g.seed;
  j["train_ranks"] = g.train_ranks;
  j["steps"] = steps.size();
  if (!steps.empty()) {
    j["reward_first"] = steps.front().reward_mean;
    j["reward_last"] = steps.back().reward_mean;
  }
  return j;
}

}  // namespace

const std::vector<std::string>& train_file_keys() {
  static const std::vector<std::string> keys = {"name",
                                                "model",
                                                "tokenizer",
                                                "task",
                                                "training_precision",
                                                "rollout_precision",
                                                "batch_invariant",
                                                "prompts_per_step",
                                                "group_size",
                                                "response_tokens",
                                                "steps",
                                                "train_ranks",
                                                "learning_rate",
                                                "temperature",
                                                "tis_cap",
                                                "seed",
                                                "out"};
  return keys;
}

namespace {

// One (train file, seed) run.
struct Run {
  TrainFile file;
  std::string config;  // the file's stem
  std::vector<analysis::GrpoStep> steps;
  double prompt_tokens_mean = 0;  // of the first step's prompts (BOS included)
};

Run run_one(const TrainFile& f, const std::string& config, bool quiet, std::ostream& out, std::ostream& err,
            double* prompt_mean) {
  const models::ModelWeights weights = load_model_within_host(f.model, "rlsim train");
  const auto tokenizer =
      models::load_tokenizer(f.tokenizer.empty() ? default_tokenizer(f.model, "rlsim train") : f.tokenizer, weights.config.vocab);
  const auto& texts = analysis::default_drift_prompts();
  const std::vector<std::vector<int>> prompts = encode_prompts(*tokenizer, weights.config, texts, static_cast<int>(texts.size()));
  double used = 0;
  for (int i = 0; i < f.grpo.prompts_per_step; ++i)
    used += static_cast<double>(prompts[static_cast<std::size_t>(i) % prompts.size()].size());
  *prompt_mean = used / f.grpo.prompts_per_step;
  const auto& g = f.grpo;
  if (!quiet) {
    err << fmt::format("rlsim train: {} (seed {}): {} steps of {} prompts x {} samples x {} tokens, training {}, rollout {}{}\n",
                       f.name, g.seed, g.steps, g.prompts_per_step, g.group_size, g.response_tokens, g.train_precision.name,
                       g.rollout_precision.name, g.tis_cap ? fmt::format(", TIS C = {}", *g.tis_cap) : "");
  }
  Run r{f, config, {}};
  r.steps = analysis::run_grpo(weights, *tokenizer, prompts, g, [&](const analysis::GrpoStep& s) {
    if (quiet) return;
    out << fmt::format(
        "step {:>3}: reward {:.3f} +- {:.3f}  KL(rollout||trainer) {:+.2e}  grad {:.3f}  entropy {:.3f}  time rollout {:.2f} s, "
        "log-prob {:.2f} s, train {:.2f} s, sync {:.3f} s\n",
        s.step, s.reward_mean, s.reward_std, s.kl_rollout_trainer, s.grad_norm, s.entropy, s.rollout_s, s.logprob_s, s.train_s,
        s.sync_s);
    out.flush();
  });
  return r;
}

// Mean and range over runs of `field` at each step, one series per config (in first-seen order).
std::vector<analysis::BandSeries> bands(const std::vector<Run>& runs, double analysis::GrpoStep::*field,
                                        const std::string& suffix = "") {
  std::vector<analysis::BandSeries> out;
  std::vector<std::string> configs;
  for (const auto& r : runs) {
    if (std::find(configs.begin(), configs.end(), r.config) == configs.end()) configs.push_back(r.config);
  }
  for (const auto& c : configs) {
    analysis::BandSeries b;
    for (const auto& r : runs) {
      if (r.config != c) continue;
      b.label = r.file.name + suffix;
      for (std::size_t k = 0; k < r.steps.size(); ++k) {
        const double v = r.steps[k].*field;
        if (k >= b.x.size()) {
          b.x.push_back(static_cast<double>(k));
          b.mean.push_back(0);
          b.lo.push_back(v);
          b.hi.push_back(v);
        }
        b.mean[k] += v;
        b.lo[k] = std::min(b.lo[k], v);
        b.hi[k] = std::max(b.hi[k], v);
      }
    }
    const auto n = static_cast<double>(std::count_if(runs.begin(), runs.end(), [&](const Run& r) { return r.config == c; }));
    for (double& m : b.mean) m /= n;
    out.push_back(std::move(b));
  }
  return out;
}

std::string study_csv(const std::vector<Run>& runs) {
  std::string t;
  for (const auto& r : runs) {
    const std::string csv = analysis::grpo_steps_csv(r.steps);
    const auto nl = csv.find('\n');
    if (t.empty()) t = "config,seed," + csv.substr(0, nl + 1);
    std::size_t pos = nl + 1;
    while (pos < csv.size()) {
      const auto e = csv.find('\n', pos);
      t += fmt::format("{},{},", r.config, r.file.grpo.seed) + csv.substr(pos, e - pos + 1);
      pos = e + 1;
    }
  }
  return t;
}

// Per config: mean and range over seeds of the first and last rewards, the mean mismatch and the
// mean phase times per step.
std::string summary_csv(const std::vector<Run>& runs) {
  std::string t =
      "config,name,training_precision,rollout_precision,tis_cap,batch_invariant,seeds,reward_first_mean,reward_last_mean,"
      "reward_last_min,reward_last_max,kl_rollout_trainer_mean,max_abs_logp_diff_mean,rollout_s,logprob_s,train_s,sync_s\n";
  std::vector<std::string> done;
  for (const auto& r0 : runs) {
    if (std::find(done.begin(), done.end(), r0.config) != done.end()) continue;
    done.push_back(r0.config);
    int n = 0;
    double first = 0, last = 0, lo = 1e300, hi = -1e300, kl = 0, diff = 0, ro = 0, lp = 0, tr = 0, sy = 0;
    std::size_t cells = 0;
    for (const auto& r : runs) {
      if (r.config != r0.config || r.steps.empty()) continue;
      ++n;
      first += r.steps.front().reward_mean;
      last += r.steps.back().reward_mean;
      lo = std::min(lo, r.steps.back().reward_mean);
      hi = std::max(hi, r.steps.back().reward_mean);
      for (const auto& s : r.steps) {
        kl += s.kl_rollout_trainer;
        diff += s.max_abs_logp_diff;
        ro += s.rollout_s;
        lp += s.logprob_s;
        tr += s.train_s;
        sy += s.sync_s;
        ++cells;
      }
    }
    const auto& g = r0.file.grpo;
    const double c = static_cast<double>(std::max<std::size_t>(cells, 1));
    t += fmt::format("{},\"{}\",{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4e},{:.4e},{:.4f},{:.4f},{:.4f},{:.5f}\n",
                     r0.config, r0.file.name, g.train_precision.name, g.rollout_precision.name,
                     g.tis_cap ? fmt::format("{}", *g.tis_cap) : "", g.batch_invariant, n, first / n, last / n, lo, hi, kl / c,
                     diff / c, ro / c, lp / c, tr / c, sy / c);
  }
  return t;
}

}  // namespace

int cmd_train(const TrainCliOptions& cli, std::ostream& out, std::ostream& err) {
  keep_freed_memory();  // a training worker reuses its buffers every step
  use_host_independent_kernels();
  if (cli.files.empty()) throw sim::ScenarioError("rlsim train: no train file");
  std::vector<TrainFile> files;
  for (const auto& p : cli.files) files.push_back(read_train_file(p));  // every file checked before any run
  const std::string dir = cli.out ? *cli.out : files.front().out;
  std::vector<Run> runs;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string config = fs::path(cli.files[i]).stem().string();
    const std::vector<std::uint64_t> seeds = cli.seeds.empty() ? std::vector<std::uint64_t>{files[i].grpo.seed} : cli.seeds;
    for (const std::uint64_t seed : seeds) {
      TrainFile f = files[i];
      f.grpo.seed = seed;
      if (cli.steps) f.grpo.steps = *cli.steps;
      try {
        double prompt_mean = 0;
        runs.push_back(run_one(f, config, cli.quiet, out, err, &prompt_mean));
        runs.back().prompt_tokens_mean = prompt_mean;
      } catch (const std::invalid_argument& e) {
        throw sim::ScenarioError(cli.files[i] + ": " + e.what());
      }
    }
  }
  std::vector<std::string> not_drawn;
  analysis::write_directory(dir, [&](const fs::path& tmp) {
    for (const auto& r : runs) {
      const fs::path sub = tmp / r.config / fmt::format("seed{}", r.file.grpo.seed);
      fs::create_directories(sub);
      analysis::write_text(sub / "steps.csv", analysis::grpo_steps_csv(r.steps));
      nlohmann::json j = run_json(r.file, r.steps);
      j["prompt_tokens_mean"] = r.prompt_tokens_mean;
      analysis::write_text(sub / "run.json", j.dump(2) + "\n");
    }
    analysis::write_text(tmp / "study.csv", study_csv(runs));
    analysis::write_text(tmp / "summary.csv", summary_csv(runs));
    if (cli.no_plots) return;
    std::string why;
    const std::string band = runs.size() > files.size() ? " (mean over seeds, band min..max)" : "";
    if (!analysis::plot_bands(tmp / "reward.png", "GRPO reward" + band, "step", "mean reward",
                              bands(runs, &analysis::GrpoStep::reward_mean), &why))
      not_drawn.push_back("reward.png: " + why);
    if (!analysis::plot_bands(tmp / "mismatch.png", "Training-inference mismatch" + band, "step",
                              "KL(rollout || trainer) per token (nats)", bands(runs, &analysis::GrpoStep::kl_rollout_trainer),
                              &why))
      not_drawn.push_back("mismatch.png: " + why);
    std::vector<analysis::BandSeries> phases;
    for (const auto& [field, name] : {std::pair{&analysis::GrpoStep::rollout_s, " rollout"},
                                      {&analysis::GrpoStep::logprob_s, " log-prob"},
                                      {&analysis::GrpoStep::train_s, " train"},
                                      {&analysis::GrpoStep::sync_s, " sync"}}) {
      for (auto& b : bands(runs, field, name)) phases.push_back(std::move(b));
    }
    if (!analysis::plot_bands(tmp / "phase_time.png", "Measured time per step" + band, "step", "seconds", phases, &why))
      not_drawn.push_back("phase_time.png: " + why);
  });
  for (const auto& w : not_drawn) err << "rlsim train: warning: not drawn: " << w << "\n";
  if (!cli.quiet)
    out << fmt::format("outputs: {}/ (study.csv, summary.csv, per run steps.csv{})\n", dir,
                       cli.no_plots ? "" : ", reward.png, mismatch.png, phase_time.png");
  return 0;
}

}  // namespace rlsim::cli
