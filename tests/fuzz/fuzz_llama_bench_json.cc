// llama-bench's JSON output (-o json or jsonl: `rlsim bench runtime --compare-gguf DIR` with
// *.json files, and --llama-bench's own runs): parse_llama_bench_json on the input. Tests that
// load have a weight type without a space, counts in range, a positive finite avg_ts and best
// sample, and a model_size of at least 1 where given.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "sim/cli/llama_bench.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<cli::LlamaBenchTest> tests;
  if (!fuzz::accepts([&] { tests = cli::parse_llama_bench_json(text, "results.json"); })) return 0;
  for (const cli::LlamaBenchTest& t : tests) {
    if (t.type.find(' ') != std::string::npos) fuzz::fail("a weight type with a space: '" + t.type + "'");
    if (t.n_prompt < 0 || t.n_gen < 0 || t.n_threads < 1) fuzz::fail("a count out of range in " + t.where);
    if (!std::isfinite(t.avg_ts) || t.avg_ts <= 0) fuzz::fail("an avg_ts that is not a positive number in " + t.where);
    if (t.best_ts && (!std::isfinite(*t.best_ts) || *t.best_ts <= 0)) fuzz::fail("a best sample not positive in " + t.where);
    if (t.model_size && *t.model_size < 1) fuzz::fail("a model_size under 1 in " + t.where);
  }
  return 0;
}
