// `rlsim quantize` text: the first line is "FORMAT [SCALING [SHAPE]]" (as --format, --scaling,
// --shape; "-" for none), the rest the numbers read from stdin. A quantisation that succeeds
// prints one value line per input number, then the summary line.
#include <cstdint>
#include <sstream>
#include <string>

#include "sim/cli/precision_cmds.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::size_t nl = text.find('\n');
  std::istringstream head(text.substr(0, nl));
  cli::QuantizeOptions o;
  head >> o.format >> o.scaling >> o.shape;
  if (o.scaling == "-") o.scaling.clear();
  if (o.shape == "-") o.shape.clear();
  if (o.format.empty()) return 0;
  std::istringstream in(nl == std::string::npos ? std::string() : text.substr(nl + 1));
  std::ostringstream out;
  if (!fuzz::accepts([&] { cli::cmd_quantize(o, in, out); })) return 0;
  const std::string printed = out.str();
  if (printed.find("summary: ") == std::string::npos) fuzz::fail("quantize printed no summary line");
  return 0;
}
