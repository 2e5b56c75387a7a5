#include "sim/cli/runtime_cmds.h"

#include <chrono>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "models/runtime/tokenizer.h"
#include "models/runtime/transformer.h"
#include "sim/engine/random.h"
#include "sim/scenario/scenario.h"

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;

/// The tokenizer beside a model: tokenizer.json in a Hugging Face directory; for a checkpoint
/// file, tokenizer.bin or the single tok*.bin in its directory.
std::string default_tokenizer(const std::string& model) {
  const fs::path p(model);
  if (fs::is_directory(p)) return (p / "tokenizer.json").string();
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (fs::exists(dir / "tokenizer.bin")) return (dir / "tokenizer.bin").string();
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tok", 0) == 0 && e.path().extension() == ".bin") found.push_back(e.path());
  }
  if (found.size() == 1) return found[0].string();
  throw sim::ScenarioError(fmt::format("rlsim generate: no tokenizer given and none unique beside {} (use --tokenizer)", model));
}

}  // namespace

int cmd_generate(const GenerateOptions& o, std::ostream& out, std::ostream& err) {
  models::RuntimePrecision precision;
  try {
    precision = models::runtime_precision(o.precision);
  } catch (const std::invalid_argument& e) {
    throw sim::ScenarioError(std::string("rlsim generate: ") + e.what());
  }
  const models::ModelWeights weights = models::load_model(o.model);
  const auto tokenizer = models::load_tokenizer(o.tokenizer.empty() ? default_tokenizer(o.model) : o.tokenizer, weights.config.vocab);
  if (tokenizer->vocab_size() > weights.config.vocab) {
    throw sim::ScenarioError(fmt::format("rlsim generate: the tokenizer has {} tokens, the model {}", tokenizer->vocab_size(), weights.config.vocab));
  }
  models::Transformer model(weights, precision);
  const int bos = weights.config.bos >= 0 ? weights.config.bos : tokenizer->bos();
  const int eos = weights.config.eos >= 0 ? weights.config.eos : tokenizer->eos();
  std::vector<int> prompt = tokenizer->encode(o.prompt, false);
  if (bos >= 0) prompt.insert(prompt.begin(), bos);
  if (prompt.empty()) throw sim::ScenarioError("rlsim generate: the prompt encodes to no token and the model has no BOS");
  const int steps = std::min(o.steps, weights.config.max_seq);
  if (static_cast<int>(prompt.size()) > steps) {
    throw sim::ScenarioError(fmt::format("rlsim generate: the prompt is {} tokens, more than --steps {}", prompt.size(), steps));
  }
  sim::Rng rng(o.seed);
  const auto t0 = std::chrono::steady_clock::now();
  int token = prompt[0], generated = 0;
  for (int pos = 0; pos < steps; ++pos) {
    const auto logits = model.decode(token);
    int next;
    if (pos + 1 < static_cast<int>(prompt.size())) {
      next = prompt[static_cast<std::size_t>(pos) + 1];
    } else {
      next = models::sample_token(logits, o.temperature, o.top_p, rng.uniform());
      ++generated;
    }
    if (next == bos || next == eos) break;  // llama2.c stops when the model emits BOS
    out << tokenizer->decode(token, next);
    out.flush();
    token = next;
  }
  out << "\n";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.quiet) {
    err << fmt::format("rlsim generate: {} ({}), {} prompt tokens, {} generated, {:.1f} tok/s\n", weights.config.name, precision.name,
                       prompt.size(), generated, model.position() / std::max(s, 1e-9));
  }
  return 0;
}

}  // namespace rlsim::cli
