#include "sim/cli/verify_cmds.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <ostream>

#include "analysis/output_dir.h"
#include "analysis/report.h"
#include "analysis/verify_outputs.h"
#include "models/graph/build.h"
#include "models/graph/io.h"
#include "models/graph/verify.h"
#include "sim/scenario/scenario.h"

namespace rlsim::cli {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string graph_line(const models::PrecisionGraph& g) {
  return fmt::format("{} operators, {} tensors", boost::num_vertices(g), boost::num_edges(g));
}

std::string truncate(const std::string& s, std::size_t width) { return s.size() <= width ? s : s.substr(0, width - 3) + "..."; }

// Throws ScenarioError unless `o` names exactly one source: a scenario, or both GraphML files.
void check_verify_sources(const VerifyOptions& o) {
  const bool from_graphml = !o.train_graphml.empty() || !o.infer_graphml.empty();
  if (from_graphml) {
    if (o.train_graphml.empty() || o.infer_graphml.empty()) {
      throw sim::ScenarioError("rlsim verify: --train and --infer go together (training and inference GraphML files)");
    }
    if (!o.scenario.empty()) throw sim::ScenarioError("rlsim verify: give a scenario file or --train/--infer, not both");
  } else if (o.scenario.empty()) {
    throw sim::ScenarioError("rlsim verify: give a scenario file, or --train A.graphml --infer B.graphml");
  }
}

// The verdict line, and (unless `quiet`) one line per group of mismatches.
void print_verdict(std::ostream& out, const models::VerifyResult& r, bool quiet) {
  if (r.consistent) {
    out << "consistent: the inference graph embeds in the training forward graph with value-equivalent precision on every edge\n";
    return;
  }
  const auto groups = models::group_mismatches(r.mismatches);
  out << fmt::format("inconsistent: {} mismatching {} in {} {}\n", r.mismatches.size(),
                     r.mismatches.size() == 1 ? "edge" : "edges", groups.size(), groups.size() == 1 ? "group" : "groups");
  if (quiet) return;
  out << fmt::format("  {:<16} {:<15} {:<10} {:>6}  {:<26} {:<26} {}\n", "operator kind", "tensor", "role", "count", "training",
                     "inference", "reason (first operator)");
  for (const auto& g : groups) {
    out << fmt::format("  {:<16} {:<15} {:<10} {:>6}  {:<26} {:<26} {} ({})\n", models::op_kind_name(g.kind),
                       g.tensor.empty() ? "-" : g.tensor, g.tensor.empty() ? "-" : std::string(models::role_name(g.role)),
                       g.count, truncate(g.train, 26), truncate(g.inference, 26), g.reason, g.example);
  }
}

// The --json, --dot and --graphml outputs, and (unless quiet) the line naming them.
void write_verify_files(const VerifyOptions& o, const models::VerifyResult& r, const models::PrecisionGraph& train,
                        const models::PrecisionGraph& infer, const std::string& title, std::ostream& out) {
  analysis::VerifyOutputPaths paths;
  paths.json = o.json;
  paths.dot_dir = o.dot_dir;
  paths.graphml_dir = o.graphml_dir;
  paths.full_dot = o.full;
  paths.title = title;
  analysis::write_verify_outputs(paths, r, train, infer);
  if (o.quiet || (o.json.empty() && o.dot_dir.empty() && o.graphml_dir.empty())) return;
  std::string files;
  if (!o.json.empty()) files += " " + o.json;
  if (!o.dot_dir.empty()) files += fmt::format(" {}/{{training,inference}}.dot", o.dot_dir);
  if (!o.graphml_dir.empty()) files += fmt::format(" {}/{{training,inference}}.graphml", o.graphml_dir);
  out << "  wrote" << files << "\n";
}

}  // namespace

int cmd_verify(const VerifyOptions& o, std::ostream& out) {
  check_verify_sources(o);
  const bool from_graphml = !o.train_graphml.empty();
  const auto t_build = Clock::now();
  std::optional<sim::Scenario> s;
  std::optional<models::Recipe> rollout;
  if (!from_graphml) {
    s.emplace(sim::load_scenario(o.scenario, o.set));
    rollout.emplace(analysis::rollout_recipe(*s));
  }
  // Each graph is initialised from the call that makes it: Boost 1.74's adjacency_list has no move
  // constructor or move assignment, so assigning a returned graph would copy every operator and
  // tensor and then free the temporary (a quarter of this command's time on DeepSeek-V3).
  const models::PrecisionGraph train =
      from_graphml ? models::read_graphml_file(o.train_graphml)
                   : models::build_precision_graph(s->model, s->training.precision, models::GraphSide::kTraining);
  const models::PrecisionGraph infer = from_graphml
                                           ? models::read_graphml_file(o.infer_graphml)
                                           : models::build_precision_graph(s->model, *rollout, models::GraphSide::kInference);
  std::string title;
  if (from_graphml) {
    title = fmt::format("{} vs {}", o.train_graphml, o.infer_graphml);
    if (!o.quiet) {
      out << fmt::format("rlsim verify: training {} ({}); inference {} ({})\n", o.train_graphml, graph_line(train),
                         o.infer_graphml, graph_line(infer));
    }
  } else {
    title = fmt::format("{}: training {} / rollout {} (KV {})", s->model.name, s->training.precision.name, rollout->name,
                        rollout->kv_cache.str());
    if (!o.quiet) {
      out << fmt::format("rlsim verify: {} ({})\n", s->name, o.scenario);
      out << fmt::format("  model {}; training {}: forward + backward, {}; rollout {} with KV cache {}: {}\n", s->model.name,
                         s->training.precision.name, graph_line(train), rollout->name, rollout->kv_cache.str(),
                         graph_line(infer));
    }
  }
  const double build_s = since(t_build);

  models::VerifyOptions vo;
  vo.vf2_budget_s = o.vf2_budget_s;
  const auto t_verify = Clock::now();
  const models::VerifyResult r = models::verify(train, infer, vo);
  const double verify_s = since(t_verify);
  if (!o.quiet) {
    out << fmt::format(
        "  matched {} in {:.3f} s (graphs built or read in {:.3f} s){}\n",
        r.method == models::MatchMethod::kNameAnchored ? "by operator name (linear pass)" : "by VF2 subgraph monomorphism",
        verify_s, build_s, r.note.empty() ? "" : "; " + r.note);
  }

  print_verdict(out, r, o.quiet);
  write_verify_files(o, r, train, infer, title, out);
  return r.consistent ? 0 : 1;
}

int bench_verify(int repeat, std::ostream& out) {
  out << "rlsim bench verify: build both precision-flow graphs and verify (name-anchored pass), one core, best of " << repeat
      << "\n";
  struct Pair {
    const char* train;
    const char* rollout;
  };
  for (const char* model : {"deepseek-v3", "kimi-k2"}) {
    const models::ModelArch arch = sim::catalog_model(model);
    for (const Pair p : {Pair{"fp8-block", "fp8-block"}, Pair{"bf16", "fp8-block"}}) {
      const models::Recipe& tr = models::builtin_recipe(p.train);
      const models::Recipe& ro = models::builtin_recipe(p.rollout);
      double best_build = 1e300, best_verify = 1e300, best_total = 1e300;
      std::size_t tv = 0, te = 0, iv = 0, ie = 0, mismatches = 0;
      for (int i = 0; i < repeat; ++i) {
        const auto t0 = Clock::now();
        const models::PrecisionGraph t = models::build_precision_graph(arch, tr, models::GraphSide::kTraining);
        const models::PrecisionGraph g = models::build_precision_graph(arch, ro, models::GraphSide::kInference);
        const double build = since(t0);
        const auto t1 = Clock::now();
        const models::VerifyResult r = models::verify(t, g);
        const double verify = since(t1);
        best_build = std::min(best_build, build);
        best_verify = std::min(best_verify, verify);
        best_total = std::min(best_total, build + verify);
        tv = r.train_vertices, te = r.train_edges, iv = r.infer_vertices, ie = r.infer_edges, mismatches = r.mismatches.size();
      }
      out << fmt::format(
          "  {:<12} train {:<9} rollout {:<9}: training {} vertices, {} edges; inference {} vertices, {} edges; "
          "{} mismatches; build {:.3f} s, verify {:.3f} s, total {:.3f} s (target: under 1 s)\n",
          model, p.train, p.rollout, tv, te, iv, ie, mismatches, best_build, best_verify, best_total);
    }
  }
  return 0;
}

}  // namespace rlsim::cli
