// llama2.c checkpoint (model.bin): the header's sizes must be checked against the file before
// anything is allocated; a checkpoint that loads has tensors of the shapes its header gives.
#include <cstdint>

#include "models/runtime/model.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  models::ModelWeights w;
  if (!fuzz::accepts([&] { w = models::load_llama2c(fuzz::input_file(data, size, "model.bin")); })) return 0;
  const auto& c = w.config;
  if (c.dim <= 0 || c.layers <= 0 || c.vocab <= 0 || static_cast<int>(w.layers.size()) != c.layers)
    fuzz::fail("a checkpoint loaded with inconsistent sizes");
  if (w.embedding.rows() != c.vocab || w.embedding.cols() != c.dim) fuzz::fail("embedding shape differs from the header");
  return 0;
}
