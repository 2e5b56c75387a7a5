#include "sim/cli/drift_cmds.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
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

// Reads a scalar of type T from a drift file node, or fails naming file:line:column and what was
// expected (the scenario reader's Source, so every input file reports errors the same way).
template <typename T>
T get(const YAML::Node& n, const sim::Source& f, const std::string& key, const char* expected) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    f.fail(n, key, fmt::format("'{}' must be {}", key, expected));
  }
}

template <typename T>
std::vector<T> get_list(const YAML::Node& n, const sim::Source& f, const std::string& key, const char* expected) {
  if (!n.IsSequence()) f.fail(n, key, fmt::format("'{}' must be a list of {}", key, expected));
  std::vector<T> v;
  for (const auto& e : n) v.push_back(get<T>(e, f, key, expected));
  return v;
}

// Fills every option the command line left unset from the drift file.
void merge_file(DriftCliOptions& o) {
  const YAML::Node root = sim::load_yaml_file(o.file, "drift file");
  const sim::Source f{o.file, {}, "--set"};
  if (!root.IsMap()) f.fail(root, "", fmt::format("expected a mapping of drift keys ({})", fmt::join(drift_file_keys(), ", ")));
  const fs::path base = fs::path(o.file).parent_path();
  auto relative = [&](const std::string& p) { return fs::path(p).is_absolute() ? p : (base / p).lexically_normal().string(); };
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "name") {
      (void)get<std::string>(v, f, key, "a string");
    } else if (key == "model") {
      if (!o.model) o.model = relative(get<std::string>(v, f, key, "a path (relative to the drift file)"));
    } else if (key == "tokenizer") {
      if (!o.tokenizer) o.tokenizer = relative(get<std::string>(v, f, key, "a path (relative to the drift file)"));
    } else if (key == "prompt_file") {
      if (!o.prompt_file) o.prompt_file = relative(get<std::string>(v, f, key, "a path (relative to the drift file)"));
    } else if (key == "pairs") {
      const auto pairs = get_list<std::string>(v, f, key, "TRAIN:ROLLOUT strings");
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        try {
          (void)analysis::parse_drift_pair(pairs[i]);
        } catch (const std::invalid_argument& e) {
          f.fail(v[i], key, e.what());
        }
      }
      if (o.pairs.empty()) o.pairs = pairs;
    } else if (key == "lengths") {
      const auto lengths = get_list<int>(v, f, key, "positive integers");
      if (o.lengths.empty()) o.lengths = lengths;
    } else if (key == "prompts") {
      if (!o.prompts) o.prompts = get<int>(v, f, key, "a positive integer");
    } else if (key == "samples") {
      if (!o.samples) o.samples = get<int>(v, f, key, "a positive integer");
    } else if (key == "temperature") {
      if (!o.temperature) o.temperature = get<double>(v, f, key, "a number > 0");
    } else if (key == "seed") {
      if (!o.seed) o.seed = get<std::uint64_t>(v, f, key, "a non-negative integer");
    } else if (key == "batch_invariant") {
      o.batch_invariant = o.batch_invariant || get<bool>(v, f, key, "true or false");
    } else if (key == "tis_cap") {
      if (!o.tis_cap) o.tis_cap = get<double>(v, f, key, "a number > 0");
    } else if (key == "bootstrap") {
      if (!o.bootstrap) o.bootstrap = get<int>(v, f, key, "a non-negative integer");
    } else if (key == "out") {
      if (!o.out) o.out = get<std::string>(v, f, key, "a directory");
    } else {
      f.fail(kv.first, key, fmt::format("unknown key '{}' (expected one of: {})", key, fmt::join(drift_file_keys(), ", ")));
    }
  }
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

const std::vector<std::string>& drift_file_keys() {
  static const std::vector<std::string> keys = {
      "name",    "model",       "tokenizer", "prompt_file",     "pairs",   "lengths",   "prompts",
      "samples", "temperature", "seed",      "batch_invariant", "tis_cap", "bootstrap", "out"};
  return keys;
}

int cmd_drift(const DriftCliOptions& cli, std::ostream& out, std::ostream& err) {
  DriftCliOptions o = cli;
  if (!o.file.empty()) merge_file(o);
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
  d.lengths = o.lengths.empty() ? std::vector<int>{16, 32, 64, 128} : o.lengths;
  d.samples = o.samples.value_or(4);
  d.temperature = o.temperature.value_or(1.0);
  d.seed = o.seed.value_or(1);
  d.batch_invariant = o.batch_invariant;
  d.tis_cap = o.tis_cap.value_or(2.0);
  d.bootstrap = o.bootstrap.value_or(1000);
  const int n_prompts = o.prompts.value_or(8);
  if (n_prompts <= 0) throw sim::ScenarioError("rlsim drift: prompts must be positive");
  if (d.bootstrap < 0) throw sim::ScenarioError("rlsim drift: bootstrap must be >= 0");

  const models::ModelWeights weights = models::load_model(*o.model);
  const auto tokenizer =
      models::load_tokenizer(o.tokenizer ? *o.tokenizer : default_tokenizer(*o.model, "rlsim drift"), weights.config.vocab);
  const std::vector<std::string> texts = o.prompt_file ? read_prompt_file(*o.prompt_file) : analysis::default_drift_prompts();
  const int bos = weights.config.bos >= 0 ? weights.config.bos : tokenizer->bos();
  for (int i = 0; i < n_prompts; ++i) {
    std::vector<int> ids = tokenizer->encode(texts[static_cast<std::size_t>(i) % texts.size()], false);
    if (bos >= 0) ids.insert(ids.begin(), bos);
    d.prompts.push_back(std::move(ids));
  }
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
