#include <fmt/format.h>

#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "models/llm/hf_config.h"
#include "models/precision/quantize.h"
#include "models/runtime/model.h"

namespace rlsim::models {
namespace {

namespace fs = std::filesystem;

float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

/// IEEE binary16 -> binary32 through the project's FP16 codec (models/precision, exhaustively
/// tested), tabulated once: every half value is exact in float.
float f16_to_float(std::uint16_t h) {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t c = 0; c < 65536; ++c) t[c] = static_cast<float>(decode(Element::kFp16, c));
    return t;
  }();
  return table[h];
}

// ---- llama2.c --------------------------------------------------------------------------------

class Reader {
 public:
  Reader(std::string path, std::uint64_t size, std::ifstream& in) : path_(std::move(path)), size_(size), in_(in) {}
  void floats(float* dst, std::uint64_t count, const std::string& tensor) {
    const std::uint64_t bytes = count * sizeof(float);
    check(bytes, tensor);
    in_.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in_) throw ModelFileError(fmt::format("{}: read error in tensor '{}'", path_, tensor));
    offset_ += bytes;
  }
  void matrix(MatrixRM& m, Eigen::Index rows, Eigen::Index cols, const std::string& tensor) {
    check(static_cast<std::uint64_t>(rows * cols) * sizeof(float), tensor);  // before allocating
    m.resize(rows, cols);
    floats(m.data(), static_cast<std::uint64_t>(rows * cols), tensor);
  }
  void vector(VectorF& v, Eigen::Index n, const std::string& tensor) {
    check(static_cast<std::uint64_t>(n) * sizeof(float), tensor);
    v.resize(n);
    floats(v.data(), static_cast<std::uint64_t>(n), tensor);
  }
  void skip(std::uint64_t bytes, const std::string& tensor) {
    check(bytes, tensor);
    in_.seekg(static_cast<std::streamoff>(bytes), std::ios::cur);
    offset_ += bytes;
  }
  std::uint64_t offset() const { return offset_; }
  void set_offset(std::uint64_t o) { offset_ = o; }
  // Throws when `bytes` at the current offset run past the end of the file.
  void check(std::uint64_t bytes, const std::string& tensor) const {
    if (offset_ + bytes > size_) {
      throw ModelFileError(fmt::format("{}: truncated in tensor '{}' (needs {} bytes at offset {}, the file has {})", path_,
                                       tensor, bytes, offset_, size_));
    }
  }

 private:
  std::string path_;
  std::uint64_t size_;
  std::ifstream& in_;
  std::uint64_t offset_ = 0;
};

// ---- safetensors -----------------------------------------------------------------------------

struct TensorInfo {
  std::string file, dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // absolute file offsets
};

std::map<std::string, TensorInfo> read_safetensors_header(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ModelFileError(file.string() + ": cannot open");
  const std::uint64_t size = fs::file_size(file);
  if (size < 8) throw ModelFileError(fmt::format("{}: {} bytes, too short for a safetensors header", file.string(), size));
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (n > size - 8) {
    throw ModelFileError(
        fmt::format("{}: safetensors header of {} bytes does not fit in the {}-byte file", file.string(), n, size));
  }
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw ModelFileError(fmt::format("{}: safetensors header is not JSON: {}", file.string(), e.what()));
  }
  if (!j.is_object()) throw ModelFileError(file.string() + ": safetensors header is not a JSON object");
  const std::uint64_t data = 8 + n;
  std::map<std::string, TensorInfo> out;
  for (const auto& [name, t] : j.items()) {
    if (name == "__metadata__") continue;
    try {
      TensorInfo info{file.string(), t.at("dtype").get<std::string>(), t.at("shape").get<std::vector<std::int64_t>>(), 0, 0};
      const auto offsets = t.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > size - data) {
        throw ModelFileError(
            fmt::format("{}: tensor '{}': data_offsets outside the file's {} data bytes", file.string(), name, size - data));
      }
      info.begin = data + offsets[0];
      info.end = data + offsets[1];
      out.emplace(name, std::move(info));
    } catch (const nlohmann::json::exception& e) {
      throw ModelFileError(fmt::format("{}: tensor '{}': {}", file.string(), name, e.what()));
    }
  }
  return out;
}

class SafetensorsModel {
 public:
  explicit SafetensorsModel(const fs::path& dir) {
    const fs::path single = dir / "model.safetensors";
    const fs::path index = dir / "model.safetensors.index.json";
    std::error_code ec;  // an unreadable or impossible name is a missing file here
    if (fs::exists(index, ec)) {
      std::ifstream f(index);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(f);
      } catch (const std::exception& e) {
        throw ModelFileError(fmt::format("{}: {}", index.string(), e.what()));
      }
      if (!j.contains("weight_map")) throw ModelFileError(index.string() + ": missing key 'weight_map'");
      std::map<std::string, std::map<std::string, TensorInfo>> shards;
      for (const auto& [name, shard] : j["weight_map"].items()) {
        const std::string s = shard.get<std::string>();
        if (!shards.count(s)) shards[s] = read_safetensors_header(dir / s);
        const auto it = shards[s].find(name);
        if (it == shards[s].end())
          throw ModelFileError(fmt::format("{}: tensor '{}' listed in the index is missing", (dir / s).string(), name));
        tensors_[name] = it->second;
      }
    } else if (fs::exists(single, ec)) {
      tensors_ = read_safetensors_header(single);
    } else {
      throw ModelFileError(dir.string() + ": no model.safetensors or model.safetensors.index.json");
    }
  }

  bool has(const std::string& name) const { return tensors_.count(name) > 0; }

  /// Reads tensor `name` with the expected shape into `dst` (converted to FP32).
  void read(const std::string& name, std::vector<std::int64_t> shape, float* dst) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw ModelFileError(fmt::format("missing tensor '{}'", name));
    const TensorInfo& t = it->second;
    if (t.shape != shape) {
      throw ModelFileError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", t.file, name, fmt::join(t.shape, ", "),
                                       fmt::join(shape, ", ")));
    }
    std::uint64_t count = 1;
    for (auto d : shape) count *= static_cast<std::uint64_t>(d);
    const int width = t.dtype == "F32" ? 4 : (t.dtype == "BF16" || t.dtype == "F16") ? 2 : 0;
    if (width == 0)
      throw ModelFileError(fmt::format("{}: tensor '{}' has dtype {} (expected F32, BF16 or F16)", t.file, name, t.dtype));
    if (t.end - t.begin != count * static_cast<std::uint64_t>(width)) {
      throw ModelFileError(fmt::format("{}: tensor '{}' spans {} bytes, its shape and dtype need {}", t.file, name,
                                       t.end - t.begin, count * static_cast<std::uint64_t>(width)));
    }
    std::ifstream in(t.file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(t.begin));
    if (width == 4) {
      in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(count * 4));
    } else {
      std::vector<std::uint16_t> buf(count);
      in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(count * 2));
      const bool bf16 = t.dtype == "BF16";
      for (std::uint64_t i = 0; i < count; ++i) dst[i] = bf16 ? bf16_to_float(buf[i]) : f16_to_float(buf[i]);
    }
    if (!in) throw ModelFileError(fmt::format("{}: read error in tensor '{}'", t.file, name));
  }

  void matrix(const std::string& name, MatrixRM& m, Eigen::Index rows, Eigen::Index cols) const {
    m.resize(rows, cols);
    read(name, {rows, cols}, m.data());
  }
  void vector(const std::string& name, VectorF& v, Eigen::Index n) const {
    v.resize(n);
    read(name, {n}, v.data());
  }

 private:
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace

std::int64_t TransformerConfig::parameters() const {
  const std::int64_t d = dim, hd = head_dim, q = std::int64_t{heads} * hd, kv = std::int64_t{kv_heads} * hd;
  std::int64_t layer = 2 * d + d * q + 2 * d * kv + q * d;  // norms, wq, wk and wv, wo
  if (qkv_bias) layer += q + 2 * kv;
  if (qk_norm) layer += 2 * hd;
  layer += experts > 0 ? experts * d + std::int64_t{experts} * 3 * d * expert_hidden_dim : 3 * d * hidden_dim;
  const std::int64_t table = std::int64_t{vocab} * d;
  return table + (tied_embeddings ? 0 : table) + d + std::int64_t{layers} * layer;
}

std::int64_t ModelWeights::parameters() const {
  std::int64_t n = embedding.size() + final_norm.size() + lm_head.size();
  for (const auto& l : layers) {
    n += l.attn_norm.size() + l.ffn_norm.size() + l.wq.size() + l.wk.size() + l.wv.size() + l.wo.size() + l.bq.size() +
         l.bk.size() + l.bv.size() + l.q_norm.size() + l.k_norm.size() + l.w_gate.size() + l.w_up.size() + l.w_down.size() +
         l.router.size();
    for (const ExpertWeights& e : l.experts) n += e.w_gate.size() + e.w_up.size() + e.w_down.size();
  }
  return n;
}

namespace {

// llama2.c's header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative: an
// unshared classifier follows), seq_len, as int32.
using Llama2cHeader = std::array<std::int32_t, 7>;
constexpr std::uint64_t kLlama2cHeaderBytes = sizeof(Llama2cHeader);

// The configuration `h` announces, checked (sizes in 1..2^20, heads dividing dim, kv heads
// dividing heads, an even head size); throws ModelFileError naming `path` and every field.
TransformerConfig llama2c_config(const std::string& path, const Llama2cHeader& h) {
  TransformerConfig c;
  c.name = fs::path(path).stem().string();
  c.dim = h[0], c.hidden_dim = h[1], c.layers = h[2], c.heads = h[3], c.kv_heads = h[4];
  c.tied_embeddings = h[5] > 0;
  // A negative vocab_size means an unshared classifier follows; -2^31 has no positive int.
  const std::int64_t vocab = h[5] > 0 ? h[5] : -static_cast<std::int64_t>(h[5]);
  c.vocab = vocab > std::numeric_limits<int>::max() ? 0 : static_cast<int>(vocab);  // 0: rejected below
  c.max_seq = h[6];
  const auto bad = [&](const std::string& what) {
    return ModelFileError(
        fmt::format("{}: corrupt llama2.c header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, "
                    "vocab_size {}, seq_len {}): {}",
                    path, h[0], h[1], h[2], h[3], h[4], h[5], h[6], what));
  };
  constexpr int kLimit = 1 << 20;
  for (int v : {c.dim, c.hidden_dim, c.layers, c.heads, c.kv_heads, c.vocab, c.max_seq}) {
    if (v <= 0 || v > kLimit) throw bad("every size must be in 1..2^20");
  }
  if (c.dim % c.heads != 0) throw bad("n_heads must divide dim");
  if (c.heads % c.kv_heads != 0) throw bad("n_kv_heads must divide n_heads");
  c.head_dim = c.dim / c.heads;
  if (c.head_dim % 2 != 0) throw bad("head size must be even (RoPE rotates pairs)");
  c.rope_interleaved = true;
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  return c;
}

// Throws ModelFileError unless the file's `size` is exactly what `c` announces: the tensors in
// file order (llama2.c's export: each tensor for all layers together) with their sizes in floats,
// checked before anything is allocated (a header may announce terabytes), so truncation and
// trailing garbage are both caught.
void check_llama2c_size(const std::string& path, const TransformerConfig& c, std::uint64_t size) {
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  const std::uint64_t d = u(c.dim), hd = u(c.head_dim), kv = u(c.kv_heads) * hd, f = u(c.hidden_dim), L = u(c.layers);
  const std::uint64_t vocab_d = u(c.vocab) * d;
  const std::pair<const char*, std::uint64_t> layout[] = {{"token_embedding", vocab_d},
                                                          {"rms_att_weight", L * d},
                                                          {"wq", L * d * d},
                                                          {"wk", L * kv * d},
                                                          {"wv", L * kv * d},
                                                          {"wo", L * d * d},
                                                          {"rms_ffn_weight", L * d},
                                                          {"w1", L * f * d},
                                                          {"w2", L * d * f},
                                                          {"w3", L * f * d},
                                                          {"rms_final_weight", d},
                                                          {"freq_cis", u(c.max_seq) * hd},
                                                          {"wcls", c.tied_embeddings ? 0 : vocab_d}};
  std::uint64_t expected = kLlama2cHeaderBytes;
  for (const auto& [tensor, count] : layout) {
    const std::uint64_t bytes = count * sizeof(float);
    if (expected + bytes > size) {
      throw ModelFileError(fmt::format("{}: truncated in tensor '{}' (needs {} bytes at offset {}, the file has {})", path,
                                       tensor, bytes, expected, size));
    }
    expected += bytes;
  }
  if (size != expected) {
    throw ModelFileError(
        fmt::format("{}: {} bytes, the header announces {} ({} trailing bytes)", path, size, expected, size - expected));
  }
}

}  // namespace

ModelWeights load_llama2c(const std::string& path, const BeforeTensors& before_tensors) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFileError(path + ": cannot open");
  const std::uint64_t size = fs::file_size(path);
  Llama2cHeader h{};
  if (size < kLlama2cHeaderBytes)
    throw ModelFileError(fmt::format("{}: {} bytes, too short for the {}-byte llama2.c header", path, size, kLlama2cHeaderBytes));
  in.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(kLlama2cHeaderBytes));
  ModelWeights w;
  w.config = llama2c_config(path, h);
  const TransformerConfig& c = w.config;
  check_llama2c_size(path, c, size);
  if (before_tensors) before_tensors(c);
  const Eigen::Index d = c.dim, hd = c.head_dim, kv = static_cast<Eigen::Index>(c.kv_heads) * hd, f = c.hidden_dim, L = c.layers;
  Reader r(path, size, in);
  r.set_offset(kLlama2cHeaderBytes);
  r.matrix(w.embedding, c.vocab, d, "token_embedding");
  w.layers.resize(static_cast<std::size_t>(L));
  // llama2.c stores each tensor for all layers contiguously (the order check_llama2c_size checks).
  for (auto& l : w.layers) r.vector(l.attn_norm, d, "rms_att_weight");
  for (auto& l : w.layers) r.matrix(l.wq, d, d, "wq");
  for (auto& l : w.layers) r.matrix(l.wk, kv, d, "wk");
  for (auto& l : w.layers) r.matrix(l.wv, kv, d, "wv");
  for (auto& l : w.layers) r.matrix(l.wo, d, d, "wo");
  for (auto& l : w.layers) r.vector(l.ffn_norm, d, "rms_ffn_weight");
  for (auto& l : w.layers) r.matrix(l.w_gate, f, d, "w1");
  for (auto& l : w.layers) r.matrix(l.w_down, d, f, "w2");
  for (auto& l : w.layers) r.matrix(l.w_up, f, d, "w3");
  r.vector(w.final_norm, d, "rms_final_weight");
  r.skip(static_cast<std::uint64_t>(c.max_seq) * static_cast<std::uint64_t>(hd) * sizeof(float), "freq_cis");
  if (!c.tied_embeddings) r.matrix(w.lm_head, c.vocab, d, "wcls");
  return w;
}

TransformerConfig read_hf_config(const std::string& path) {
  HfConfig h;
  try {
    h = read_hf_config_json(path);
  } catch (const HfConfigError& e) {
    throw ModelFileError(e.what());
  }
  const std::string type = h.model_type.empty() ? "llama" : h.model_type;
  if (type != "llama" && type != "qwen2" && type != "qwen3" && type != "mistral") {
    throw ModelFileError(fmt::format("{}: model_type '{}' (expected llama, mistral, qwen2 or qwen3)", path, type));
  }
  TransformerConfig c;
  c.name = fs::absolute(fs::path(path)).parent_path().filename().string();
  c.dim = h.hidden;
  c.hidden_dim = h.intermediate;
  c.layers = h.layers;
  c.heads = h.heads;
  c.kv_heads = h.kv_heads;
  c.vocab = h.vocab;
  c.head_dim = h.head_dim;
  c.max_seq = h.max_position;
  c.norm_eps = h.rms_norm_eps;
  c.rope_theta = h.rope_theta;
  c.tied_embeddings = h.tied_embeddings;
  c.qkv_bias = h.qkv_bias;
  c.qk_norm = type == "qwen3";
  c.bos = h.bos;
  c.eos = h.eos;
  c.rope_interleaved = false;
  return c;
}

ModelWeights load_hf(const std::string& dir_name, const BeforeTensors& before_tensors) {
  const fs::path dir(dir_name);
  ModelWeights w;
  w.config = read_hf_config((dir / "config.json").string());
  w.config.name = dir.filename().string();
  const TransformerConfig& c = w.config;
  if (before_tensors) before_tensors(c);
  const SafetensorsModel st(dir);
  const Eigen::Index d = c.dim, q = static_cast<Eigen::Index>(c.heads) * c.head_dim,
                     kv = static_cast<Eigen::Index>(c.kv_heads) * c.head_dim, ff = c.hidden_dim;
  try {
    st.matrix("model.embed_tokens.weight", w.embedding, c.vocab, d);
    w.layers.resize(static_cast<std::size_t>(c.layers));
    for (int i = 0; i < c.layers; ++i) {
      LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
      const std::string p = fmt::format("model.layers.{}.", i);
      st.vector(p + "input_layernorm.weight", l.attn_norm, d);
      st.vector(p + "post_attention_layernorm.weight", l.ffn_norm, d);
      st.matrix(p + "self_attn.q_proj.weight", l.wq, q, d);
      st.matrix(p + "self_attn.k_proj.weight", l.wk, kv, d);
      st.matrix(p + "self_attn.v_proj.weight", l.wv, kv, d);
      st.matrix(p + "self_attn.o_proj.weight", l.wo, d, q);
      if (c.qkv_bias) {
        st.vector(p + "self_attn.q_proj.bias", l.bq, q);
        st.vector(p + "self_attn.k_proj.bias", l.bk, kv);
        st.vector(p + "self_attn.v_proj.bias", l.bv, kv);
      }
      if (c.qk_norm) {
        st.vector(p + "self_attn.q_norm.weight", l.q_norm, c.head_dim);
        st.vector(p + "self_attn.k_norm.weight", l.k_norm, c.head_dim);
      }
      st.matrix(p + "mlp.gate_proj.weight", l.w_gate, ff, d);
      st.matrix(p + "mlp.up_proj.weight", l.w_up, ff, d);
      st.matrix(p + "mlp.down_proj.weight", l.w_down, d, ff);
    }
    st.vector("model.norm.weight", w.final_norm, d);
    if (!c.tied_embeddings) st.matrix("lm_head.weight", w.lm_head, c.vocab, d);
  } catch (const ModelFileError& e) {
    const std::string msg = e.what();
    throw ModelFileError(msg.rfind("missing tensor", 0) == 0 ? dir.string() + ": " + msg : msg);
  }
  return w;
}

ModelWeights synthetic_weights(const TransformerConfig& c, std::uint64_t seed, float stddev) {
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.head_dim <= 0 || c.vocab <= 0) {
    throw std::invalid_argument("synthetic_weights: sizes must be positive");
  }
  check_moe_config(c);
  ModelWeights w;
  w.config = c;
  std::uint64_t stream = 0;
  // One generator per tensor (seed, tensor index), so a tensor's values do not depend on the
  // shapes of the tensors before it.
  auto rnd = [&](Eigen::Index rows, Eigen::Index cols) {
    std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                      static_cast<std::uint32_t>(stream++)};
    std::mt19937 gen(seq);
    std::normal_distribution<float> nd(0.0f, stddev);
    MatrixRM m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = nd(gen);
    return m;
  };
  const Eigen::Index d = c.dim, q = static_cast<Eigen::Index>(c.heads) * c.head_dim,
                     kv = static_cast<Eigen::Index>(c.kv_heads) * c.head_dim;
  w.embedding = rnd(c.vocab, d);
  for (int i = 0; i < c.layers; ++i) {
    LayerWeights l;
    l.attn_norm = l.ffn_norm = VectorF::Ones(d);
    l.wq = rnd(q, d), l.wk = rnd(kv, d), l.wv = rnd(kv, d), l.wo = rnd(d, q);
    if (c.qkv_bias) l.bq = VectorF::Zero(q), l.bk = VectorF::Zero(kv), l.bv = VectorF::Zero(kv);
    if (c.qk_norm) l.q_norm = l.k_norm = VectorF::Ones(c.head_dim);
    if (c.experts > 0) {
      l.router = rnd(c.experts, d);
      for (int e = 0; e < c.experts; ++e) {
        ExpertWeights ew;
        ew.w_gate = rnd(c.expert_hidden_dim, d), ew.w_up = rnd(c.expert_hidden_dim, d), ew.w_down = rnd(d, c.expert_hidden_dim);
        l.experts.push_back(std::move(ew));
      }
    } else {
      l.w_gate = rnd(c.hidden_dim, d), l.w_up = rnd(c.hidden_dim, d), l.w_down = rnd(d, c.hidden_dim);
    }
    w.layers.push_back(std::move(l));
  }
  w.final_norm = VectorF::Ones(d);
  if (!c.tied_embeddings) w.lm_head = rnd(c.vocab, d);
  return w;
}

void check_moe_config(const TransformerConfig& c) {
  if (c.experts < 0 ||
      (c.experts > 0 && (c.experts_per_token < 1 || c.experts_per_token > c.experts || c.expert_hidden_dim <= 0))) {
    throw std::invalid_argument(
        fmt::format("{}: an MoE config needs 1 <= experts_per_token <= experts and expert_hidden_dim > 0 (got {}, {}, {})",
                    c.name, c.experts_per_token, c.experts, c.expert_hidden_dim));
  }
}

TransformerConfig synthetic_moe_config() {
  TransformerConfig c;
  c.name = "synthetic-moe";
  c.dim = 128;
  c.hidden_dim = 128;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 32;
  c.vocab = 512;
  c.max_seq = 256;
  c.rope_interleaved = false;
  c.tied_embeddings = false;
  c.experts = 8;
  c.experts_per_token = 2;
  c.expert_hidden_dim = 64;
  return c;
}

ModelWeights load_model(const std::string& path, const BeforeTensors& before_tensors) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_hf(path, before_tensors);
  return load_llama2c(path, before_tensors);
}

}  // namespace rlsim::models
