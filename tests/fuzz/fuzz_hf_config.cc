// Hugging Face config.json, through both readers: the simulator's (models/llm: architecture for
// the cost model) and the runtime's (models/runtime: a model to run).
#include <cstdint>

#include "models/llm/hf_config.h"
#include "models/runtime/model.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  const std::string path = fuzz::input_file(data, size, "config.json");
  fuzz::accepts([&] { (void)models::read_hf_config_json(path); });
  fuzz::accepts([&] { (void)models::read_hf_config(path); });
  return 0;
}
