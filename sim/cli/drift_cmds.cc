#include "sim/cli/drift_cmds.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <ostream>

#include "analysis/drift.h"
#include "models/runtime/tokenizer.h"
#include "sim/cli/runtime_cmds.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/yaml_file.h"
#include "sim/scenario/yaml_map.h"

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;

// A list of scalars under `key` of the drift file, each read as T, or fails at the offending item.
template <typename T>
std::vector<T> list_of(sim::Map& m, const std::string& key, const char* expected) {
  const YAML::Node n = m.get(key);
  if (!n) return {};
  if (!n.IsSequence() || n.size() == 0) m.src().fail(n, key, fmt::format("'{}' must be a non-empty list of {}", key, expected));
  std::vector<T> v;
  for (const auto& e : n) {
    T x{};
    if (!e.IsScalar() || !YAML::convert<T>::decode(e, x))
      m.src().fail(e, key, fmt::format("'{}' must be a list of {}", key, expected));
    v.push_back(x);
  }
  return v;
}

std::vector<std::string> read_prompt_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw sim::ScenarioError(fmt::format("{}: cannot open the prompt file", path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) throw sim::ScenarioError(fmt::format("{}: no prompt (one per line expected)", path));
  return lines;
}

}  // namespace

void merge_drift_file(DriftCliOptions& o) {
  const YAML::Node root = sim::load_input_file(o.file, sim::InputKind::kDrift);
  const sim::Source f{o.file, {}, "--set"};
  if (!root.IsMap()) f.fail(root, "", fmt::format("expected a mapping of drift keys ({})", fmt::join(drift_file_keys(), ", ")));
  sim::Map m(f, root, "");
  m.finish(drift_file_keys());
  const fs::path base = fs::path(o.file).parent_path();
  auto path_key = [&](const std::string& key, std::optional<std::string>& out) {
    const std::string p = m.str(key, "");
    if (!p.empty() && !out) out = fs::path(p).is_absolute() ? p : (base / p).lexically_normal().string();
  };
  auto set_if_unset = [](auto& out, auto value, bool present) {
    if (present && !out) out = value;
  };
  (void)m.str("name", "");
  path_key("model", o.model);
  path_key("tokenizer", o.tokenizer);
  path_key("prompt_file", o.prompt_file);
  const auto pairs = list_of<std::string>(m, "pairs", "TRAIN:ROLLOUT strings");
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    try {
      (void)analysis::parse_drift_pair(pairs[i]);
    } catch (const std::invalid_argument& e) {
      f.fail(root["pairs"][i], "pairs", e.what());
    }
  }
  if (o.pairs.empty()) o.pairs = pairs;
  const auto lengths = list_of<int>(m, "lengths", "positive integers");
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) f.fail(root["lengths"][i], "lengths", "'lengths' must be a list of positive integers");
  }
  if (o.lengths.empty()) o.lengths = lengths;
  constexpr auto kIntMax = std::numeric_limits<int>::max();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kPositive = std::numeric_limits<double>::min();
  set_if_unset(o.prompts, static_cast<int>(m.integer("prompts", 0, 1, kIntMax)), m.has("prompts"));
  set_if_unset(o.samples, static_cast<int>(m.integer("samples", 0, 1, kIntMax)), m.has("samples"));
  set_if_unset(o.temperature, m.number("temperature", 0, kPositive, kInf), m.has("temperature"));
  set_if_unset(o.seed, static_cast<std::uint64_t>(m.integer("seed", 0, 0, std::numeric_limits<std::int64_t>::max())),
               m.has("seed"));
  o.batch_invariant = m.boolean("batch_invariant", false) || o.batch_invariant;
  set_if_unset(o.tis_cap, m.number("tis_cap", 0, kPositive, kInf), m.has("tis_cap"));
  set_if_unset(o.bootstrap, static_cast<int>(m.integer("bootstrap", 0, 0, kIntMax)), m.has("bootstrap"));
  if (m.has("out")) set_if_unset(o.out, m.str("out", ""), true);
}

const std::vector<std::string>& drift_file_keys() {
  static const std::vector<std::string> keys = {
      "name",    "model",       "tokenizer", "prompt_file",     "pairs",   "lengths",   "prompts",
      "samples", "temperature", "seed",      "batch_invariant", "tis_cap", "bootstrap", "out"};
  return keys;
}

int cmd_drift(const DriftCliOptions& cli, std::ostream& out, std::ostream& err) {
  use_host_independent_kernels();
  DriftCliOptions o = cli;
  if (!o.file.empty()) merge_drift_file(o);
  if (!o.model) throw sim::ScenarioError("rlsim drift: no model (give --model or model: in the drift file)");
  if (o.pairs.empty())
    throw sim::ScenarioError("rlsim drift: no pairs (give --pairs TRAIN:ROLLOUT,... or pairs: in the drift file)");
  analysis::DriftOptions d;
  for (const std::string& p : o.pairs) {
    try {
      d.pairs.push_back(analysis::parse_drift_pair(p));
    } catch (const std::invalid_argument& e) {
      throw sim::ScenarioError(std::string("rlsim drift: ") + e.what());
    }
  }
  if (!o.lengths.empty()) d.lengths = o.lengths;
  d.samples = o.samples.value_or(d.samples);
  d.temperature = o.temperature.value_or(d.temperature);
  d.seed = o.seed.value_or(d.seed);
  d.batch_invariant = o.batch_invariant;
  d.tis_cap = o.tis_cap.value_or(d.tis_cap);
  d.bootstrap = o.bootstrap.value_or(d.bootstrap);
  const int n_prompts = o.prompts.value_or(analysis::kDefaultDriftPrompts);
  if (n_prompts <= 0) throw sim::ScenarioError("rlsim drift: prompts must be positive");
  if (d.bootstrap < 0) throw sim::ScenarioError("rlsim drift: bootstrap must be >= 0");

  const models::ModelWeights weights = load_model_within_host(*o.model, "rlsim drift");
  const auto tokenizer =
      models::load_tokenizer(o.tokenizer ? *o.tokenizer : default_tokenizer(*o.model, "rlsim drift"), weights.config.vocab);
  const std::vector<std::string> texts = o.prompt_file ? read_prompt_file(*o.prompt_file) : analysis::default_drift_prompts();
  d.prompts = encode_prompts(*tokenizer, weights.config, texts, n_prompts);
  const std::string dir = o.out ? *o.out : o.file.empty() ? "out/drift" : "out/" + fs::path(o.file).stem().string();
  if (!o.quiet) {
    err << fmt::format(
        "rlsim drift: {} pairs x {} prompts x {} samples, lengths up to {}, temperature {}, {} kernels\n", d.pairs.size(),
        n_prompts, d.samples, d.lengths.back(), d.temperature,
        models::kernel_mode_name(d.batch_invariant ? models::KernelMode::kBatchInvariant : models::KernelMode::kDefault));
  }
  std::vector<analysis::DriftPairResult> results;
  try {
    results = analysis::run_drift(weights, d, o.quiet ? nullptr : &err);
  } catch (const std::invalid_argument& e) {
    throw sim::ScenarioError(std::string("rlsim drift: ") + e.what());
  }
  for (const std::string& w : analysis::write_drift_outputs(dir, results, !o.no_plots))
    err << "rlsim drift: warning: " << w << "\n";
  if (!o.quiet) {
    analysis::print_drift_summary(out, results, d.batch_invariant);
    out << "Outputs in " << dir << "/ (drift.csv, per_token.csv"
        << (o.no_plots ? "" : ", drift_vs_length.png, drift_vs_position.png, delta_histogram.png") << ")\n";
  }
  return 0;
}

}  // namespace rlsim::cli
