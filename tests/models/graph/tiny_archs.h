// Model architectures small enough for VF2 to embed one graph in another in milliseconds: the
// precision-graph unit tests (graph_test.cc) and the GraphML fuzz harness (tests/fuzz) build
// their graphs from these.
#pragma once

#include "models/llm/arch.h"

namespace rlsim::models::tiny_archs {

/// Two decoder layers, hidden 64, FFN 128, 4 query heads on 2 KV heads (GQA) of 16, vocab 100.
inline ModelArch tiny_dense() {
  ModelArch a;
  a.name = "tiny-dense";
  a.layers = 2;
  a.hidden = 64;
  a.intermediate = 128;
  a.heads = 4;
  a.kv_heads = 2;
  a.head_dim = 16;
  a.vocab = 100;
  return a;
}

/// tiny_dense with an MoE block in its second layer.
inline ModelArch tiny_moe() {
  ModelArch a = tiny_dense();
  a.name = "tiny-moe";
  a.moe = MoeSpec{4, 2, 32, 1, 1};  // 4 experts, top-2, 1 shared expert, first layer dense
  return a;
}

}  // namespace rlsim::models::tiny_archs
