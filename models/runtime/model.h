// The real small-model runtime (models/runtime): transformer weights as loaded from llama2.c
// checkpoints or Hugging Face directories, before any precision is applied.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

// GCC 12 flags _mm512_undefined_ps() inside Eigen's AVX-512 kernels as maybe-uninitialized
// wherever Eigen expressions are inlined (GCC bug 105593, a false positive). The pragma has to
// cover the translation units that instantiate them, so it stays in effect after this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

namespace rlsim::models {

/// Bad model or tokenizer file (truncated, corrupt header, wrong size, unknown key). The message
/// names the file and, where there is one, the tensor. The CLI maps it to exit status 2.
class ModelFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Row-major float matrix: weights are [out_features, in_features] (y = W x), activations
/// [tokens, features].
using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using VectorF = Eigen::VectorXf;

/// Architecture of a Llama-family decoder (llama2.c, Llama, Qwen2, Qwen3).
struct TransformerConfig {
  std::string name;
  int dim = 0;         // hidden size
  int hidden_dim = 0;  // SwiGLU intermediate size
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // dim / heads unless the config says otherwise (Qwen3)
  int vocab = 0;
  int max_seq = 0;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  /// llama2.c rotates consecutive pairs (2i, 2i+1) of each head; Hugging Face Llama/Qwen rotate
  /// (i, i + head_dim/2) ("rotate_half").
  bool rope_interleaved = true;
  bool tied_embeddings = true;
  bool qkv_bias = false;  // Qwen2
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k before RoPE
  /// Mixture of experts (Mixtral / Qwen3-MoE FFN): `experts` routed SwiGLU experts of width
  /// expert_hidden_dim per layer, the top experts_per_token of a softmax router, their weights
  /// renormalised to sum 1. experts == 0: the dense SwiGLU FFN of width hidden_dim.
  int experts = 0;
  int experts_per_token = 0;
  int expert_hidden_dim = 0;
  int bos = 1, eos = 2;

  /// Parameters of a model of this shape: what ModelWeights::parameters() counts for weights at
  /// these shapes (embedding, the classifier unless tied, final norm; per layer the two norms,
  /// q/k/v/o, Qwen2's biases, Qwen3's q/k norms, and the dense FFN or the router and experts).
  /// Known before any weight exists, e.g. to check that synthetic weights fit the host.
  std::int64_t parameters() const;
};

/// One routed expert: a SwiGLU FFN.
struct ExpertWeights {
  MatrixRM w_gate, w_up, w_down;  // [expert_hidden, dim], [expert_hidden, dim], [dim, expert_hidden]
};

/// Weights of one decoder layer.
struct LayerWeights {
  VectorF attn_norm, ffn_norm;         // [dim]
  MatrixRM wq, wk, wv, wo;             // [heads*hd, dim], [kv*hd, dim] x2, [dim, heads*hd]
  VectorF bq, bk, bv;                  // Qwen2 biases (empty otherwise)
  VectorF q_norm, k_norm;              // Qwen3 per-head norms [head_dim] (empty otherwise)
  MatrixRM w_gate, w_up, w_down;       // [hidden, dim], [hidden, dim], [dim, hidden] (dense FFN)
  MatrixRM router;                     // MoE: [experts, dim] (empty for a dense FFN)
  std::vector<ExpertWeights> experts;  // MoE: one per routed expert
};

/// A whole model in FP32 (the master weights).
struct ModelWeights {
  TransformerConfig config;
  MatrixRM embedding;  // [vocab, dim]
  std::vector<LayerWeights> layers;
  VectorF final_norm;  // [dim]
  MatrixRM lm_head;    // [vocab, dim]; empty when tied to the embedding
  const MatrixRM& classifier() const { return config.tied_embeddings ? embedding : lm_head; }
  std::int64_t parameters() const;
};

/// Called by the loaders with a model's config once it is read and checked, before any tensor is
/// allocated (e.g. to refuse a model larger than the host's memory: ModelWeights holds
/// config.parameters() FP32 values). Whatever it throws propagates out of the loader unchanged.
using BeforeTensors = std::function<void(const TransformerConfig&)>;

/// Loads a llama2.c checkpoint ("version 0": 7 int32 header dim, hidden_dim, n_layers, n_heads,
/// n_kv_heads, vocab_size (negative: untied classifier follows), seq_len; then float32 tensors;
/// format in ../shared/models/stories260K/README.md). Checks the header (positive sizes, heads
/// dividing dim, kv_heads dividing heads) and that the file holds exactly the tensors it
/// announces. Throws ModelFileError naming the file and the tensor that is cut short.
ModelWeights load_llama2c(const std::string& path, const BeforeTensors& before_tensors = {});

/// Loads a Hugging Face directory: config.json (LlamaForCausalLM, Qwen2ForCausalLM,
/// Qwen3ForCausalLM) and model.safetensors or model.safetensors.index.json with its shards
/// (F32, BF16 or F16 tensors). Checks every safetensors header (JSON length within the file,
/// offsets inside the data, dtype, shape as the config implies). Throws ModelFileError naming the
/// file and the tensor.
ModelWeights load_hf(const std::string& dir, const BeforeTensors& before_tensors = {});

/// Reads a Hugging Face config.json (the keys load_hf() uses; max_seq from
/// max_position_embeddings, default 4096). Throws ModelFileError naming the file and the missing or
/// ill-typed key, an unsupported model_type, non-positive sizes or kv heads not dividing heads.
TransformerConfig read_hf_config(const std::string& path);

/// Synthetic weights at a config's shapes: every matrix N(0, stddev^2) (HF initializer_range,
/// 0.02 for Llama-family configs), norms 1, biases 0; with config.experts > 0 a router and the
/// experts in place of the dense FFN. Deterministic for a seed: each tensor has its own
/// std::mt19937 stream seeded with (seed, tensor index). Throws std::invalid_argument for
/// non-positive sizes or an MoE config whose experts_per_token is not in [1, experts].
ModelWeights synthetic_weights(const TransformerConfig& c, std::uint64_t seed, float stddev = 0.02f);

/// Checks a config's MoE fields: experts >= 0 and, for an MoE (experts > 0), 1 <=
/// experts_per_token <= experts and expert_hidden_dim > 0. Throws std::invalid_argument naming the
/// config and the values.
void check_moe_config(const TransformerConfig& c);

/// A small synthetic MoE configuration for tests and benchmarks ("synthetic-moe"): dim 128,
/// 2 layers, 4 heads of 32 (2 KV heads), 8 experts of width 64, top-2, vocab 512, max_seq 256,
/// Hugging Face RoPE, untied lm_head.
TransformerConfig synthetic_moe_config();

/// Loads either: a directory is a Hugging Face model, a file a llama2.c checkpoint.
ModelWeights load_model(const std::string& path, const BeforeTensors& before_tensors = {});

}  // namespace rlsim::models
