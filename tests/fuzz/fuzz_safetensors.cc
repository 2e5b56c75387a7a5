// safetensors (model.safetensors beside a fixed tiny Llama config.json): header length, JSON
// header, dtypes, shapes and data offsets against the file and the config.
#include <cstdint>

#include "models/runtime/model.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  static const bool config_ready = [] {
    fuzz::input_file(
        R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8, "intermediate_size": 16,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16,
 "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2})",
        "config.json");
    return true;
  }();
  (void)config_ready;
  fuzz::input_file(data, size, "model.safetensors");
  fuzz::accepts([&] { (void)models::load_hf(fuzz::work_dir()); });
  return 0;
}
