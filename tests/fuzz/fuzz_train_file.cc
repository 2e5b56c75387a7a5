// Train YAML (`rlsim train FILE`): every key read as the command reads it.
#include <cstdint>

#include "sim/cli/train_cmds.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  const std::string path = fuzz::input_file(data, size, "train.yaml");
  fuzz::accepts([&] { (void)cli::read_train_file(path); });
  return 0;
}
