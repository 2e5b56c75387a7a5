// Shared by the fuzz harnesses (one per reader of rlsim's inputs). Each harness defines
// LLVMFuzzerTestOneInput: built with clang and -fsanitize=fuzzer (./rlsim.sh fuzz) it is driven
// by libFuzzer; in the normal build it is linked with replay_main.cc and ctest replays its corpus
// (seeds and the inputs of every crash found, kept as regressions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "models/graph/graph.h"
#include "models/llm/hf_config.h"
#include "models/runtime/model.h"
#include "models/runtime/tokenizer.h"
#include "sim/scenario/scenario.h"

namespace rlsim::fuzz {

/// A folder of this process's own for the files a harness writes (removed at exit).
const std::string& work_dir();

/// Writes `data` to work_dir()/name (the readers take paths) and returns that path.
std::string input_file(const std::uint8_t* data, std::size_t size, const std::string& name);
std::string input_file(std::string_view text, const std::string& name);

/// Runs `read`; true when it accepted its input. The readers' input errors (sim::ScenarioError,
/// models::ModelFileError, models::GraphError: the CLI's exit 2; models::HfConfigError, which
/// the config.json reader's callers restate as one of those) are expected and give false;
/// any other exception escapes, and libFuzzer reports it as a crash (the CLI's exit 3, a bug).
template <typename F>
bool accepts(F&& read) {
  try {
    read();
    return true;
  } catch (const sim::ScenarioError&) {
  } catch (const models::ModelFileError&) {
  } catch (const models::GraphError&) {
  } catch (const models::HfConfigError&) {
  }
  return false;
}

/// Encodes `text` (with BOS) and decodes every token after its predecessor, as the drift and
/// train loops do; the tokenizer's own input errors are expected.
void exercise_tokenizer(const models::Tokenizer& tok, std::string_view text);

/// A property a harness checks failed: prints `what` and aborts (a crash to libFuzzer).
[[noreturn]] void fail(const std::string& what);

}  // namespace rlsim::fuzz
