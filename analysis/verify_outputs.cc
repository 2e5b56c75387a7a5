#include "analysis/verify_outputs.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "analysis/output_dir.h"
#include "models/graph/io.h"

namespace rlsim::analysis {

namespace {

std::string verdict_json(const models::VerifyResult& r) {
  nlohmann::json j;
  j["verdict"] = r.consistent ? "consistent" : "inconsistent";
  nlohmann::json list = nlohmann::json::array();
  for (const auto& m : r.mismatches) {
    list.push_back({{"operator", m.op},
                    {"kind", std::string(models::op_kind_name(m.kind))},
                    {"tensor", m.tensor},
                    {"role", m.tensor.empty() ? "" : std::string(models::role_name(m.role))},
                    {"train", m.train},
                    {"inference", m.inference},
                    {"reason", m.reason},
                    {"layer", m.layer}});
  }
  j["mismatches"] = std::move(list);
  j["method"] = r.method == models::MatchMethod::kNameAnchored ? "name-anchored" : "vf2";
  j["training"] = {{"operators", r.train_vertices}, {"tensors", r.train_edges}};
  j["inference"] = {{"operators", r.infer_vertices}, {"tensors", r.infer_edges}};
  return j.dump(1) + "\n";
}

}  // namespace

bool write_verify_outputs(const VerifyOutputPaths& paths, const models::VerifyResult& r, const models::PrecisionGraph& train,
                          const models::PrecisionGraph& infer) {
  namespace fs = std::filesystem;
  std::vector<std::pair<fs::path, std::string>> files;
  if (!paths.json.empty()) files.emplace_back(paths.json, verdict_json(r));
  for (const bool training : {true, false}) {
    const models::PrecisionGraph& g = training ? train : infer;
    if (!paths.dot_dir.empty()) {
      std::ostringstream dot;
      models::DotOptions d;
      d.full = paths.full_dot;
      d.title = fmt::format("{} graph: {}", training ? "training" : "inference", paths.title);
      models::write_dot(dot, g, models::mismatch_marks(r.mismatches, training), d);
      files.emplace_back(fs::path(paths.dot_dir) / (training ? "training.dot" : "inference.dot"), dot.str());
    }
    if (!paths.graphml_dir.empty()) {
      std::ostringstream xml;
      models::write_graphml(xml, g);
      files.emplace_back(fs::path(paths.graphml_dir) / (training ? "training.graphml" : "inference.graphml"), xml.str());
    }
  }
  if (files.empty()) return false;
  write_files(files);
  return true;
}

}  // namespace rlsim::analysis
