// The real-runtime subcommands of `rlsim`: generate (text from a real small model in any
// precision).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace rlsim::cli {

/// Options of `rlsim generate`.
struct GenerateOptions {
  std::string model;             // llama2.c checkpoint file or Hugging Face directory
  std::string tokenizer;         // default: tokenizer.json of the directory, or the checkpoint's sibling tok*.bin / tokenizer.bin
  std::string precision = "fp32";
  std::string prompt;
  double temperature = 1.0;
  double top_p = 0.9;
  int steps = 256;               // positions, prompt included (llama2.c's -n)
  std::uint64_t seed = 1;
  bool quiet = false;            // no statistics line on stderr
};

/// `rlsim generate`: encodes the prompt (BOS first), feeds it through the decode path, then samples
/// until `steps` positions are filled or the model emits BOS / EOS; prints the prompt and the
/// continuation to `out` as the llama2.c reference does, then a newline; tokens/s to `err`.
/// Throws models::ModelFileError (exit 2) for bad model or tokenizer files and sim::ScenarioError
/// (exit 2) for a bad precision name or a prompt longer than `steps`.
int cmd_generate(const GenerateOptions& o, std::ostream& out, std::ostream& err);

}  // namespace rlsim::cli
