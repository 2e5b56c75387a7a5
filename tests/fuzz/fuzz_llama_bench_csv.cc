// llama-bench's CSV output (`rlsim bench runtime --compare-gguf DIR`): the input is the one *.csv
// file of a folder. Results that load are positive finite tok/s (0 where a test is absent), keyed
// by a weight type with no space in it, and a model_size only beside a decode (tg) result.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>

#include "sim/cli/runtime_cmds.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  static const std::string dir = [] {
    const std::string d = fuzz::work_dir() + "/llama_bench";
    std::filesystem::create_directories(d);
    return d;
  }();
  fuzz::input_file(data, size, "llama_bench/results.csv");
  std::map<std::string, cli::GgufSpeed> speeds;
  std::ostringstream notes;
  if (!fuzz::accepts([&] { speeds = cli::read_llama_bench(dir, 2, notes); })) return 0;
  for (const auto& [type, s] : speeds) {
    if (type.find(' ') != std::string::npos) fuzz::fail("a weight type with a space: '" + type + "'");
    for (const double v : {s.prefill, s.decode}) {
      if (!std::isfinite(v) || v < 0) fuzz::fail("a tok/s that is not a finite number >= 0 for " + type);
    }
    if (s.prefill == 0 && s.decode == 0) fuzz::fail("a weight type with neither test: " + type);
    if (s.model_bytes < 0 || (s.model_bytes > 0 && s.decode == 0)) fuzz::fail("a model_size without a decode row: " + type);
  }
  return 0;
}
