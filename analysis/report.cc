#include "analysis/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <system_error>

#include "analysis/output_dir.h"
#include "analysis/plots.h"
#include "models/graph/verify.h"
#include "sim/scenario/units.h"

namespace rlsim::analysis {
namespace {

namespace fs = std::filesystem;
using sim::Dimension;
using sim::format_quantity;

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double max_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

std::vector<double> phase_values(const sim::SimResult& r, const std::string& phase) {
  std::vector<double> v;
  for (const auto& st : r.steps) {
    const auto it = st.phase_s.find(phase);
    v.push_back(it == st.phase_s.end() ? 0.0 : it->second);
  }
  return v;
}

std::vector<double> step_values(const sim::SimResult& r) {
  std::vector<double> v;
  for (const auto& st : r.steps) v.push_back(st.step_s());
  return v;
}

std::string bottleneck(const sim::Scenario& s, const sim::SimResult& r) {
  if (!r.fits()) return "memory: " + r.oom->reason;
  std::string best;
  double best_v = -1;
  for (const auto& p : sim::kPhases) {
    const double v = mean_of(phase_values(r, p));
    if (v > best_v) {
      best_v = v;
      best = p;
    }
  }
  const double step = mean_of(step_values(r));
  std::string why;
  if (best == "rollout") {
    const bool mem = r.decode_memory_bound_s >= r.decode_compute_bound_s;
    why = mem ? fmt::format("decode is memory-bound (weights {} + KV reads per iteration at {} x {:.2f})",
                            format_quantity(r.rollout_cost.weight_bytes_per_device, Dimension::kBytes),
                            format_quantity(s.cluster.device.memory_bandwidth_bytes_per_s, Dimension::kBandwidth),
                            s.rollout.efficiency.memory)
              : "decode is compute-bound";
    if (r.kv_limited) why += fmt::format("; KV capacity limits the batch to {} sequences", r.max_running);
  } else if (best == "actor_update" || best == "old_logprob" || best == "reference") {
    why = fmt::format(
        "training GEMMs at {} x {:.2f} on {} devices",
        format_quantity(s.cluster.device.rate(s.training.precision.linear.compute(s.training.precision.mode)), Dimension::kFlops),
        s.training.efficiency.compute, s.placement.train_devices);
  }
  return fmt::format("{} ({:.0f} % of the step){}", best, step > 0 ? 100.0 * best_v / step : 0.0, why.empty() ? "" : ": " + why);
}

}  // namespace

models::Recipe rollout_recipe(const sim::Scenario& s) { return s.rollout.precision; }

PrecisionFlowVerdict check_precision_flow(const sim::Scenario& s) {
  const models::VerifyResult v = models::verify_recipes(s.model, s.training.precision, rollout_recipe(s));
  PrecisionFlowVerdict out;
  out.verdict = v.consistent ? "consistent" : "inconsistent";
  out.mismatches = v.mismatches.size();
  std::map<std::string, std::size_t> index;
  for (const auto& m : v.mismatches) {
    const std::string key = m.tensor.empty() ? std::string(models::op_kind_name(m.kind))
                                             : fmt::format("{} {}", models::op_kind_name(m.kind), m.tensor);
    const auto [it, fresh] = index.emplace(key, out.groups.size());
    if (fresh) out.groups.emplace_back(key, 0);
    ++out.groups[it->second].second;
  }
  return out;
}

void add_warnings(const sim::Scenario& s, sim::SimResult& r) {
  if (!r.fits()) return;
  const int per_engine = (s.workload.sequences_per_step() + r.engines - 1) / r.engines;
  if (r.kv_limited) {
    r.warnings.push_back(
        fmt::format("KV capacity ({:.0f} tokens per engine) limits the batch to {} sequences "
                    "(max_num_seqs {}, {} sequences per engine)",
                    r.kv_capacity_tokens, r.max_running, s.rollout.max_num_seqs, per_engine));
  } else if (per_engine > s.rollout.max_num_seqs) {
    r.warnings.push_back(fmt::format("max_num_seqs ({}) limits the batch: {} sequences per engine wait their turn",
                                     s.rollout.max_num_seqs, per_engine));
  }
  std::int64_t pre = 0;
  for (const auto& st : r.steps) pre += st.preemptions;
  if (pre > 0) {
    r.warnings.push_back(fmt::format("{} preemptions (KV cache full; sequences recomputed)", pre));
  }
  const auto cap = s.workload.response_tokens.kind == sim::LengthDist::Kind::kLognormal ? s.workload.response_tokens.max : 0;
  if (cap > 0) {
    std::int64_t truncated = 0;
    for (const auto& q : r.requests) truncated += q.response_tokens >= cap ? 1 : 0;
    if (truncated > 0) {
      r.warnings.push_back(fmt::format("{} of {} responses hit the {}-token limit (truncated, as max_response_length does)",
                                       truncated, r.requests.size(), cap));
    }
  }
  if (s.cluster.device.effective(s.rollout.precision.linear.compute(s.rollout.precision.mode)) !=
      s.rollout.precision.linear.compute(s.rollout.precision.mode)) {
    r.warnings.push_back(fmt::format("{} has no {} tensor cores: rollout GEMMs run on {}", s.cluster.device.name,
                                     models::compute_name(s.rollout.precision.linear.compute(s.rollout.precision.mode)),
                                     models::compute_name(r.rollout_cost.compute_type)));
  }
}

nlohmann::json summary_json(const sim::Scenario& s, const sim::SimResult& r, const PrecisionFlowVerdict& flow) {
  using nlohmann::json;
  json j;
  j["scenario"] = s.name;
  j["steps"] = static_cast<int>(r.steps.size());
  j["fits"] = r.fits();
  const auto steps = step_values(r);
  j["step_time_s"] = {{"mean", mean_of(steps)}, {"max", max_of(steps)}};
  json phases = json::object();
  json phases_max = json::object();
  for (const auto& p : sim::kPhases) {
    phases[p] = mean_of(phase_values(r, p));
    phases_max[p] = max_of(phase_values(r, p));
  }
  j["phases_s"] = phases;
  j["phases_max_s"] = phases_max;
  const double step_mean = mean_of(steps);
  j["rollout_share"] = step_mean > 0 ? mean_of(phase_values(r, "rollout")) / step_mean : 0.0;
  std::int64_t tokens = 0;
  double wall = 0;
  for (const auto& st : r.steps) {
    tokens += st.generated_tokens;
    wall += st.step_s();
  }
  j["generated_tokens_per_s"] = wall > 0 ? static_cast<double>(tokens) / wall : 0.0;
  j["peak_memory_bytes"] = {{"rollout", r.peak_rollout_bytes}, {"training", r.peak_training_bytes}};
  j["device_memory_bytes"] = s.cluster.device.memory_bytes;
  json by_kind = json::object();
  for (const auto& [key, count] : flow.groups) by_kind[key] = count;
  j["verify"] = {{"verdict", flow.verdict}, {"mismatches", flow.mismatches}, {"by_kind", by_kind}};
  j["warnings"] = r.warnings;
  if (r.oom) {
    json b = json::object();
    for (const auto& [tag, bytes] : r.oom->breakdown) b[tag] = bytes;
    j["oom"] = {{"role", r.oom->role},
                {"device_group", r.oom->device_group},
                {"reason", r.oom->reason},
                {"capacity_bytes", r.oom->capacity_bytes},
                {"required_bytes", r.oom->required_bytes},
                {"breakdown", b}};
  }
  std::int64_t pre = 0;
  for (const auto& st : r.steps) pre += st.preemptions;
  j["preemptions"] = pre;
  j["bottleneck"] = bottleneck(s, r);
  j["rollout"] = {{"engines", r.engines},
                  {"tensor_parallel", s.rollout.tensor_parallel},
                  {"precision", s.rollout.precision.name},
                  {"kv_cache", s.rollout.precision.kv_cache.str()},
                  {"compute_type", std::string(models::compute_name(r.rollout_cost.compute_type))},
                  {"weight_bytes_per_device", r.rollout_cost.weight_bytes_per_device},
                  {"kv_capacity_tokens_per_engine", r.kv_capacity_tokens},
                  {"max_running_sequences", r.max_running},
                  {"kv_limited", r.kv_limited}};
  j["weight_sync_s"] = {{"gather", r.sync.gather}, {"transfer", r.sync.transfer}, {"quantize", r.sync.quantize},
                        {"repack", r.sync.repack}, {"load", r.sync.load},         {"total", r.sync.total()}};
  j["idle_ratio"] = {{"rollout", r.rollout_idle_ratio()}, {"trainer", r.trainer_idle_ratio()}};
  {
    double sum = 0, seqs = 0, stale = 0;
    int worst = 0;
    std::int64_t interrupted = 0;
    for (const auto& st : r.steps) {
      const double n = static_cast<double>(s.workload.sequences_per_step());
      sum += st.staleness_mean * n;
      seqs += n;
      stale += static_cast<double>(st.stale_sequences);
      worst = std::max(worst, st.staleness_max);
      interrupted += st.interruptions;
    }
    j["staleness"] = {{"mean", seqs > 0 ? sum / seqs : 0.0},
                      {"max", worst},
                      {"stale_fraction", seqs > 0 ? stale / seqs : 0.0},
                      {"partial_rollout_interruptions", interrupted}};
  }
  j["tokens"] = {
      {"generated", r.tokens_generated}, {"recomputed", r.tokens_recomputed}, {"left_in_flight_sequences", r.left_in_flight}};
  j["events"] = r.events;
  j["schedule"] = std::string(sim::schedule_name(s.schedule.mode));
  j["placement"] = std::string(sim::placement_name(s.placement.mode));
  return j;
}

void print_summary(std::ostream& out, const sim::Scenario& s, const sim::SimResult& r, const PrecisionFlowVerdict& flow) {
  out << fmt::format("rlsim: {}\n", s.name);
  out << fmt::format("  model {} ({:.2f} B params, {:.2f} B active) on {} x {} x {} ({}, {})\n", s.model.name,
                     static_cast<double>(s.model.params().total()) / 1e9, static_cast<double>(s.model.active_params()) / 1e9,
                     s.cluster.nodes, s.cluster.devices_per_node, s.cluster.device.name, sim::placement_name(s.placement.mode),
                     sim::schedule_name(s.schedule.mode));
  out << fmt::format("  rollout {} (kv {}), {} engines x TP{}; training {} on {} devices\n", s.rollout.precision.name,
                     s.rollout.precision.kv_cache.str(), r.engines, s.rollout.tensor_parallel, s.training.precision.name,
                     s.placement.train_devices);
  if (!r.fits()) {
    out << "  DOES NOT FIT: " << r.oom->reason << "\n";
    for (const auto& [tag, bytes] : r.oom->breakdown) {
      out << fmt::format("    {:<22} {:>12}\n", tag, format_quantity(bytes, Dimension::kBytes));
    }
  }
  if (!r.steps.empty()) {
    out << fmt::format("  {:<14} {:>12} {:>12}\n", "phase", "mean s", "max s");
    for (const auto& p : sim::kPhases) {
      const auto v = phase_values(r, p);
      out << fmt::format("  {:<14} {:>12.2f} {:>12.2f}\n", p, mean_of(v), max_of(v));
    }
    const auto st = step_values(r);
    out << fmt::format("  {:<14} {:>12.2f} {:>12.2f}\n", "step", mean_of(st), max_of(st));
    const auto j = summary_json(s, r, flow);
    out << fmt::format("  rollout share {:.1f} %, generated {:.0f} tokens/s, {} preemptions\n",
                       100.0 * j["rollout_share"].get<double>(), j["generated_tokens_per_s"].get<double>(),
                       j["preemptions"].get<std::int64_t>());
    out << fmt::format(
        "  idle ratio: rollout devices {:.1f} %, trainer {:.1f} %; staleness of consumed samples: mean {:.2f}, max {}\n",
        100 * r.rollout_idle_ratio(), 100 * r.trainer_idle_ratio(), j["staleness"]["mean"].get<double>(),
        j["staleness"]["max"].get<int>());
  }
  const double cap = s.cluster.device.memory_bytes;
  if (!r.steps.empty())
    out << fmt::format("  peak memory per device: rollout {} / {} ({:.0f} %), training {} / {} ({:.0f} %)\n",
                       format_quantity(r.peak_rollout_bytes, Dimension::kBytes), format_quantity(cap, Dimension::kBytes),
                       100 * r.peak_rollout_bytes / cap, format_quantity(r.peak_training_bytes, Dimension::kBytes),
                       format_quantity(cap, Dimension::kBytes), 100 * r.peak_training_bytes / cap);
  out << "  bottleneck: " << bottleneck(s, r) << "\n";
  const auto& pf = flow;
  if (pf.verdict == "inconsistent") {
    std::string parts;
    for (const auto& [key, count] : pf.groups) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", key, count);
    out << fmt::format("  precision flow: inconsistent, {} mismatching edges ({}); details: rlsim verify {}\n", pf.mismatches,
                       parts, s.file);
  } else if (pf.verdict == "consistent") {
    out << "  precision flow: consistent (the rollout graph embeds in the training forward graph with equal precision on every "
           "edge)\n";
  }
  for (const auto& w : r.warnings) out << "  warning: " << w << "\n";
}

std::string chrome_trace(const sim::Scenario& s, const sim::SimResult& r, const sim::RecordingSink& trace) {
  using nlohmann::json;
  json events = json::array();
  std::map<std::string, int> tids;
  auto tid_of = [&](const std::string& track) {
    auto [it, inserted] = tids.emplace(track, static_cast<int>(tids.size()) + 1);
    if (inserted) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", it->second}, {"args", {{"name", track}}}});
    }
    return it->second;
  };
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"args", {{"name", s.name}}}});
  for (const auto& sp : trace.spans) {
    json args = json::object();
    for (const auto& [k, v] : sp.args) args[k] = v;
    events.push_back({{"ph", "X"},
                      {"name", sp.name},
                      {"cat", sp.category},
                      {"pid", 1},
                      {"tid", tid_of(sp.track)},
                      {"ts", static_cast<double>(sp.start) / 1e3},
                      {"dur", static_cast<double>(sp.duration) / 1e3},
                      {"args", args}});
  }
  for (const auto& l : r.ledgers) {
    for (const auto& e : l.events()) {
      events.push_back({{"ph", "C"},
                        {"name", "memory " + l.group()},
                        {"pid", 1},
                        {"ts", static_cast<double>(e.time) / 1e3},
                        {"args", {{"GB", e.total_bytes / 1e9}}}});
    }
  }
  json root = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return root.dump(1) + "\n";
}

void write_outputs(const std::string& dir, const sim::Scenario& s, sim::SimResult& r, const PrecisionFlowVerdict& flow,
                   const sim::RecordingSink& trace) {
  write_directory(dir, [&](const fs::path& tmp) {
    // Plots first: a failure to draw becomes a warning in summary.json, not a lost run.
    if (s.output.plots) {
      std::string why;
      if (!plot_timeline(tmp / "timeline.png", s, r, &why)) r.warnings.push_back("timeline.png not drawn: " + why);
      if (!plot_memory(tmp / "memory.png", s, r, &why)) r.warnings.push_back("memory.png not drawn: " + why);
    }
    {
      // SCENARIO.md's columns in their order, then rlsim's step_overhead_s.
      std::string t =
          "step,step_time_s,rollout_s,old_logprob_s,reference_s,actor_update_s,weight_sync_s,offload_s,generated_tokens,"
          "step_overhead_s\n";
      auto phase = [](const sim::StepRecord& st, const std::string& p) {
        const auto it = st.phase_s.find(p);
        return it == st.phase_s.end() ? 0.0 : it->second;
      };
      for (const auto& st : r.steps) {
        t += fmt::format("{},{:.6f}", st.step, st.step_s());
        for (const auto& p : sim::kPhases) {
          if (p != "step_overhead") t += fmt::format(",{:.6f}", phase(st, p));
        }
        t += fmt::format(",{},{:.6f}\n", st.generated_tokens, phase(st, "step_overhead"));
      }
      write_text(tmp / "steps.csv", t);
    }
    {
      std::string t = "step,phase,role,start_s,end_s,duration_s\n";
      for (const auto& p : r.phases) {
        t += fmt::format("{},{},{},{:.6f},{:.6f},{:.6f}\n", p.step, p.phase, p.role, sim::to_seconds(p.start),
                         sim::to_seconds(p.end), p.seconds());
      }
      write_text(tmp / "phases.csv", t);
    }
    {
      std::string t = "time_s,device_group,tag,delta_bytes,total_bytes,capacity_bytes\n";
      for (const auto& l : r.ledgers) {
        for (const auto& e : l.events()) {
          t += fmt::format("{:.6f},{},{},{:.0f},{:.0f},{:.0f}\n", sim::to_seconds(e.time), csv_field(l.group()), e.tag,
                           e.delta_bytes, e.total_bytes, l.capacity());
        }
      }
      write_text(tmp / "memory.csv", t);
    }
    {
      std::string t =
          "step,index,engine,prompt_tokens,response_tokens,admit_s,first_token_s,finish_s,preemptions,group,policy_version,"
          "staleness,interruptions\n";
      for (const auto& q : r.requests) {
        t += fmt::format("{},{},{},{},{},{:.6f},{:.6f},{:.6f},{},{},{},{},{}\n", q.step, q.index, q.engine, q.prompt_tokens,
                         q.response_tokens, sim::to_seconds(q.admit_ns), sim::to_seconds(q.first_token_ns),
                         sim::to_seconds(q.finish_ns), q.preemptions, q.group, q.version, q.step - q.version, q.interruptions);
      }
      write_text(tmp / "requests.csv", t);
    }
    if (s.output.trace) write_text(tmp / "trace.json", chrome_trace(s, r, trace));
    write_text(tmp / "summary.json", summary_json(s, r, flow).dump(2) + "\n");
  });
}

}  // namespace rlsim::analysis
