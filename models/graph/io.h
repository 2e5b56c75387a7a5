// Precision-flow graphs in and out: GraphML (Boost's read_graphml / write_graphml), so a graph
// dumped from a training framework or rollout engine can be checked, and Graphviz DOT views with
// mismatching edges in red.
#pragma once

#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "models/graph/graph.h"
#include "models/graph/verify.h"

namespace rlsim::models {

/// Writes `g` as GraphML. Node attributes: name (string), kind (op_kind_name), layer (int, -1
/// outside the decoder layers). Edge attributes: tensor (operand slot), role (role_name), format
/// (Format::str, e.g. "fp8-e4m3/group1x128"), mode ("real" | "fake"), storage, accumulate
/// (element names), compute (compute type name: fp32, bf16, fp16, fp8, int8, fp4). Graph
/// attributes: builder, model, recipe, side. KV-cache stores appear as kv_write / kv_read nodes.
void write_graphml(std::ostream& out, const PrecisionGraph& g);

/// Reads a GraphML graph with the attributes write_graphml writes. Required: node name and kind,
/// edge tensor, role and format; optional with defaults: layer (-1), mode (real), storage (the
/// format's element; bf16 when fake), compute (the element's native tensor-core type; bf16 when
/// fake), accumulate (fp32), graph attributes (empty). Throws GraphError naming `file`, and the
/// node or edge (by position and name), for XML or GraphML syntax errors, undirected graphs,
/// unknown attributes, missing required attributes and unknown kind / role / format / element
/// names.
PrecisionGraph read_graphml(std::istream& in, const std::string& file);

/// read_graphml on a file; throws GraphError when it cannot be opened.
PrecisionGraph read_graphml_file(const std::string& path);

/// Which elements of a graph to draw in red: edge keys (src, dst, tensor) and operator names.
struct DotMarks {
  std::set<std::string> edges;      // dot_edge_key(src, dst, tensor)
  std::set<std::string> operators;  // operator names
};

std::string dot_edge_key(const std::string& src, const std::string& dst, const std::string& tensor);

/// The red marks of the mismatches on the training graph (`training` true) or on the inference
/// graph as given, before KV-cache contraction (a mismatching KV edge marks its producer ->
/// kv_write -> kv_read -> consumer path).
DotMarks mismatch_marks(const std::vector<Mismatch>& mismatches, bool training);

struct DotOptions {
  /// false: collapse decoder layers with identical structure, precisions and marks into one
  /// ("layers.{1-60}.self_attn.q_proj") and routed experts into one ("experts.*", with a count);
  /// true: every operator and tensor.
  bool full = false;
  std::string title;
};

/// Writes `g` as Graphviz DOT (boost::write_graphviz): operators as boxes (parameters as notes,
/// backward operators dashed), tensors labelled "slot: precision", marked elements in red.
void write_dot(std::ostream& out, const PrecisionGraph& g, const DotMarks& marks, const DotOptions& options = {});

}  // namespace rlsim::models
