// A precision-flow graph as GraphML (`rlsim verify --train A.graphml --infer B.graphml`), through
// everything the command does with it: read_graphml, then, for a graph it accepts, the check
// against itself and against the training graph of a small built-in model (the name-anchored
// pass, KV-cache contraction and the VF2 search), the mismatch groups, both DOT views and a
// GraphML round trip, which must read back what it wrote (fuzz::fail otherwise: a bug).
#include <cstdint>
#include <sstream>

#include "models/graph/build.h"
#include "models/graph/io.h"
#include "models/graph/verify.h"
#include "models/precision/recipe.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/models/graph/tiny_archs.h"

namespace {
using namespace rlsim::models;

// Two decoder layers (one dense, one MoE with a shared expert), GQA and the backward pass: the
// operators a training graph holds, few enough for VF2 to finish within the harness's budget.
const PrecisionGraph& reference_training_graph() {
  static const PrecisionGraph g =
      build_precision_graph(tiny_archs::tiny_moe(), builtin_recipe("fp8-block"), GraphSide::kTraining);
  return g;
}

void check(const PrecisionGraph& training, const PrecisionGraph& inference) {
  VerifyOptions o;
  o.vf2_budget_s = 0.05;  // a wrong embedding is as good as none here; a crash is what is sought
  const VerifyResult r = verify(training, inference, o);
  (void)group_mismatches(r.mismatches);
  std::ostringstream dot;
  write_dot(dot, training, mismatch_marks(r.mismatches, true));
  write_dot(dot, inference, mismatch_marks(r.mismatches, false), DotOptions{true, "fuzz"});
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  PrecisionGraph g;
  if (!fuzz::accepts([&] {
        const PrecisionGraph read = read_graphml(in, "fuzz.graphml");
        g = read;
      }))
    return 0;
  fuzz::accepts([&] { check(g, g); });
  fuzz::accepts([&] { check(reference_training_graph(), g); });
  std::stringstream xml;
  write_graphml(xml, g);
  PrecisionGraph back;
  if (!fuzz::accepts([&] {
        const PrecisionGraph read = read_graphml(xml, "round-trip.graphml");
        back = read;
      }) ||
      boost::num_vertices(back) != boost::num_vertices(g) || boost::num_edges(back) != boost::num_edges(g)) {
    fuzz::fail("write_graphml wrote what read_graphml does not read back:\n" + xml.str());
  }
  return 0;
}
