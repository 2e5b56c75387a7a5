// Precision-flow graphs (DESIGN.md, "The precision recipe", consumer 2): vertices are operators of
// a transformer's training or inference pass, edges are the tensors between them, each carrying
// the precision its consumer sees. Built on Boost.Graph so Boost's algorithms (VF2 subgraph
// monomorphism, GraphML and Graphviz I/O) apply directly.
//
// Public header of models/graph: graph types here; the builder in build.h, verification in
// verify.h, GraphML / DOT I/O in io.h.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "models/precision/format.h"
#include "models/precision/recipe.h"

namespace rlsim::models {

/// Bad graph input (GraphML that does not parse, an unknown operator kind, a KV-cache read with no
/// write ...). The message names the file and the vertex or edge. The CLI maps it to exit status 2.
class GraphError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Operator kinds. Linear-like kinds (kLinear, kExpertLinear, kRouter, kLmHead) run a GEMM with
/// a weight; kKvWrite / kKvRead exist only in inference graphs (the KV cache between a key/value
/// producer and attention); kDgrad / kWgrad only in training graphs (backward pass).
enum class OpKind : std::uint8_t {
  kParameter,  // a weight tensor (graph input), e.g. "layers.0.mlp.gate_proj.weight"
  kEmbedding,  // token-embedding look-up
  kRmsNorm,
  kLinear,           // attention projections, dense FFN and shared-expert linears
  kExpertLinear,     // routed-expert linears (one vertex per expert and projection)
  kRope,             // rotary position embedding
  kAttentionScores,  // Q K^T
  kSoftmax,          // attention softmax
  kAttentionValue,   // P V
  kKvWrite,          // KV-cache store (inference only)
  kKvRead,           // KV-cache load (inference only)
  kResidualAdd,
  kSiluMul,     // SwiGLU: silu(gate) * up
  kRouter,      // MoE gate linear (router logits)
  kTopK,        // MoE top-k selection and routing weights
  kMoeCombine,  // weighted sum of expert outputs (+ shared experts)
  kLmHead,
  kLogSoftmax,  // token log-probabilities (trainer loss, rollout logprobs)
  kDgrad,       // backward: gradient with respect to an operator's input
  kWgrad,       // backward: gradient with respect to a linear's weight
};

/// What a tensor is.
enum class TensorRole : std::uint8_t { kActivation, kWeight, kGradient, kKv, kRouter };

/// Name of a kind as written in GraphML and reports ("linear", "attention_scores", ...).
std::string_view op_kind_name(OpKind k);
/// Parses a kind name; nullopt when unknown.
std::optional<OpKind> parse_op_kind(std::string_view name);
/// Comma-separated kind names (for error messages).
std::string op_kind_names();
/// Whether the kind runs a GEMM against a weight (linear, expert_linear, router, lm_head).
bool is_linear_like(OpKind k);

std::string_view role_name(TensorRole r);
std::optional<TensorRole> parse_role(std::string_view name);

/// The precision of one tensor as its consumer sees it.
///
/// `format` is the set of values the consumer computes on (element + scaling); `mode` whether
/// they were produced by real quantisation (codes in `storage`) or fake quantisation (quantise-
/// dequantise, stored in BF16); `compute` and `accumulate` are the consuming operator's operand
/// and accumulator types.
struct TensorPrecision {
  Format format{Element::kBf16, {}};
  QuantMode mode = QuantMode::kReal;
  Element storage = Element::kBf16;
  ComputeType compute = ComputeType::kFp32;
  Element accumulate = Element::kFp32;
  bool operator==(const TensorPrecision&) const = default;

  /// "fp8-e4m3/group1x128", or with " (fake)" appended for a fake-quantised tensor.
  std::string str() const;
};

/// An operator.
struct OpVertex {
  std::string name;  // unique within a graph built by rlsim, e.g. "layers.3.mlp.gate_proj"
  OpKind kind = OpKind::kParameter;
  int layer = -1;  // decoder layer index, -1 outside the layers (embedding, lm_head)
};

/// A KV-cache store a tensor passed through on its way from producer to consumer.
struct KvStore {
  Format format;         // what the cache holds
  bool lossless = true;  // the cache holds exactly the values the producer wrote
  std::string write;     // names of the kv_write and kv_read operators it replaced
  std::string read;
};

/// A tensor flowing from its producer to its consumer.
struct TensorEdge {
  std::string tensor;  // the consumer's operand slot: input, weight, query, key, value, probs, ...
  TensorRole role = TensorRole::kActivation;
  TensorPrecision precision;
  /// Set only on an edge that replaced a KV-cache write/read pair (verify.h, contract_kv_cache).
  std::optional<KvStore> kv;
};

/// Graph-level facts, written to GraphML.
struct GraphInfo {
  std::string builder;  // "rlsim" for graphs from build_precision_graph (anchors names), else ""
  std::string model;
  std::string recipe;
  std::string side;  // "training" | "inference" (informative)
};

/// Directed multigraph; vecS vertex storage gives the vertex_index VF2 needs.
using PrecisionGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, OpVertex, TensorEdge, GraphInfo>;
using OpId = PrecisionGraph::vertex_descriptor;
using TensorId = PrecisionGraph::edge_descriptor;

}  // namespace rlsim::models
