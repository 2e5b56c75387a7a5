// Hugging Face tokenizer.json (byte-level BPE): a tokenizer that loads encodes and decodes text.
#include <cstdint>
#include <memory>

#include "models/runtime/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  std::unique_ptr<models::Tokenizer> tok;
  if (!fuzz::accepts([&] { tok = models::load_tokenizer(fuzz::input_file(data, size, "tokenizer.json"), 49152); })) return 0;
  fuzz::exercise_tokenizer(*tok, "Once upon a time, \xc3\xa9\n\t  x");
  return 0;
}
