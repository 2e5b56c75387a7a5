// Drift YAML (`rlsim drift FILE`): every key read as the command reads it, and each pair parsed.
#include <cstdint>

#include "analysis/drift.h"
#include "sim/cli/drift_cmds.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  cli::DriftCliOptions o;
  o.file = fuzz::input_file(data, size, "drift.yaml");
  if (!fuzz::accepts([&] { cli::merge_drift_file(o); })) return 0;
  for (const auto& p : o.pairs) fuzz::accepts([&] { (void)analysis::parse_drift_pair(p); });
  return 0;
}
