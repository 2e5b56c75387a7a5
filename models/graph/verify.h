// Verification of the unified-precision condition (Jet-RL, arXiv 2601.14243): the rollout
// engine's inference graph must embed into the trainer's forward graph -- an injective map of
// operators that preserves every tensor edge -- with equal operator kinds and value-equivalent
// precision on every edge. Then the rollout samples from exactly the policy the trainer scores.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "models/graph/graph.h"
#include "models/llm/arch.h"

namespace rlsim::models {

/// One edge (or operator) of the inference graph that breaks the condition.
struct Mismatch {
  std::string op;  // the consuming inference operator, e.g. "layers.3.mlp.gate_proj"
  OpKind kind = OpKind::kLinear;
  std::string tensor;  // its operand slot ("input", "weight", "key" ...); "" for an operator
  TensorRole role = TensorRole::kActivation;
  std::string train;      // training precision, "absent" when training has no counterpart
  std::string inference;  // inference precision ("-" for an operator)
  std::string reason;     // one line
  int layer = -1;
  // Edge endpoints by name (for marking the DOT views); empty when there is no such edge.
  std::string train_src, train_dst;
  std::vector<std::string> infer_path;  // inference operators along the edge: src, [kv write, read,] dst
};

/// How the inference operators were mapped onto training operators.
enum class MatchMethod : std::uint8_t {
  kNameAnchored,  // linear-time pass: same names (graphs from the same builder)
  kVf2,           // boost::vf2_subgraph_mono with kind / layer / operand-slot predicates
};

struct VerifyResult {
  bool consistent = false;
  std::vector<Mismatch> mismatches;  // inference graph order (operators, then their input edges)
  MatchMethod method = MatchMethod::kNameAnchored;
  std::string note;  // why VF2 was used, or why no embedding exists
  std::size_t train_vertices = 0, train_edges = 0, infer_vertices = 0, infer_edges = 0;  // as given
};

struct VerifyOptions {
  /// Wall-clock budget of each VF2 search, seconds. VF2 is exponential in the worst case; the
  /// name-anchored pass avoids it for graphs from the same builder.
  double vf2_budget_s = 10.0;
  bool force_vf2 = false;  // skip the name-anchored pass (tests compare the two)
};

/// The inference graph with every KV-cache store contracted: each path producer -> kv_write ->
/// kv_read -> consumer becomes one edge producer -> consumer carrying the read->consumer edge's
/// slot and precision, role kv, and a KvStore recording the cache format and whether the cache
/// holds exactly the values the producer wrote (cache format == producer->kv_write format).
/// Throws GraphError when a kv_read does not read exactly one kv_write, or a kv_write has not
/// exactly one producer.
PrecisionGraph contract_kv_cache(const PrecisionGraph& inference);

/// Whether an inference tensor carries the same values as the training tensor it maps to:
/// same element and scaling (block shapes included), same accumulate type, and -- for a KV-cache
/// edge -- a lossless store, or the same lossy store on both sides (a trainer emulating the cache). Quantisation mode, storage
/// type and compute type do not matter for values: fake int4/group32 (BF16 storage, BF16 GEMM) equals real int4/group32 (packed,
/// dequantised to a BF16 GEMM), and FP8 values give exact products on either FP8 or BF16 tensor cores. On a mismatch, `reason`
/// (when not null) receives a one-line explanation.
bool value_equivalent(const TensorEdge& train, const TensorEdge& inference, std::string* reason);

/// Decides whether `inference` embeds into `training` with value-equivalent precision and lists
/// every mismatching edge and every inference operator with no training counterpart.
///
/// KV-cache stores are contracted first (contract_kv_cache; in the training graph too, when it has
/// any). When every operator name is unique in
/// both graphs and either both come from the rlsim builder or every inference name exists in
/// training with the same kind, operators are mapped by name in one linear pass. Otherwise
/// boost::vf2_subgraph_mono searches a structural embedding (kind, layer when both graphs give
/// one, operand slot); if it maps every edge with value-equivalent precision the verdict is
/// consistent, else a second search with the precision in the edge predicate (budget 1 s) looks for
/// an embedding that matches; failing that, the structural embedding's mismatches are reported.
/// Throws GraphError from contract_kv_cache.
VerifyResult verify(const PrecisionGraph& training, const PrecisionGraph& inference, const VerifyOptions& options = {});

/// Builds both graphs of a model (training: forward + backward under `training`; inference under
/// `rollout`, whose kv_cache the caller has already overridden) and verifies them.
VerifyResult verify_recipes(const ModelArch& arch, const Recipe& training, const Recipe& rollout);

/// Mismatches with the same kind, slot, role, precisions and reason, counted.
struct MismatchGroup {
  OpKind kind = OpKind::kLinear;
  std::string tensor;
  TensorRole role = TensorRole::kActivation;
  std::string train, inference, reason;
  std::size_t count = 0;
  std::string example;  // the first operator of the group
};

/// Groups by (kind, tensor, role, train, inference, reason), in order of first appearance.
std::vector<MismatchGroup> group_mismatches(const std::vector<Mismatch>& mismatches);

}  // namespace rlsim::models
