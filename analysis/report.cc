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

std::vector<double> phase_values(const sim::SimResult& r, sim::Phase phase) {
  std::vector<double> v;
  for (const auto& st : r.steps) v.push_back(st.phase_s[phase]);
  return v;
}

std::vector<double> step_values(const sim::SimResult& r) {
  std::vector<double> v;
  for (const auto& st : r.steps) v.push_back(st.step_s());
  return v;
}

std::string bottleneck(const sim::Scenario& s, const sim::SimResult& r) {
  if (!r.fits()) return "memory: " + r.oom->reason;
  sim::Phase best = sim::Phase::kRollout;
  double best_v = -1;
  for (const auto p : sim::phases_of(s)) {
    const double v = mean_of(phase_values(r, p));
    if (v > best_v) {
      best_v = v;
      best = p;
    }
  }
  const double step = mean_of(step_values(r));
  std::string why;
  if (best == sim::Phase::kRollout) {
    const bool mem = r.decode_memory_bound_s >= r.decode_compute_bound_s;
    why = mem ? fmt::format("decode is memory-bound (weights {} + KV reads per iteration at {} x {:.2f})",
                            format_quantity(r.rollout_cost.weight_bytes_per_device, Dimension::kBytes),
                            format_quantity(s.cluster.device.memory_bandwidth_bytes_per_s, Dimension::kBandwidth),
                            s.rollout.efficiency.memory)
              : "decode is compute-bound";
    if (r.kv_limited) why += fmt::format("; KV capacity limits the batch to {} sequences", r.max_running);
  } else if (best == sim::Phase::kActorUpdate || best == sim::Phase::kOldLogprob || best == sim::Phase::kReference) {
    why = fmt::format(
        "training GEMMs at {} x {:.2f} on {} devices",
        format_quantity(s.cluster.device.rate(s.training.precision.linear.compute(s.training.precision.mode)), Dimension::kFlops),
        s.training.efficiency.compute, s.placement.train_devices);
  }
  return fmt::format("{} ({:.0f} % of the step){}", sim::phase_name(best), step > 0 ? 100.0 * best_v / step : 0.0,
                     why.empty() ? "" : ": " + why);
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
                    r.kv_capacity_tokens, r.max_running, s.rollout.engine_max_seqs(), per_engine));
  } else if (per_engine > s.rollout.engine_max_seqs()) {
    r.warnings.push_back(fmt::format("max_num_seqs ({}) limits the batch: {} sequences per engine wait their turn",
                                     s.rollout.engine_max_seqs(), per_engine));
  }
  std::int64_t pre = 0;
  for (const auto& st : r.steps) pre += st.preemptions;
  if (pre > 0) {
    r.warnings.push_back(fmt::format("{} preemptions (KV cache full; sequences recomputed)", pre));
  }
  const auto& resp = s.workload.response_tokens;
  if (resp.kind == sim::LengthDist::Kind::kLognormal && resp.max > 0 && r.responses_at_limit > 0) {
    r.warnings.push_back(fmt::format("{} of {} responses hit the {}-token limit (truncated, as max_response_length does)",
                                     r.responses_at_limit, r.requests_consumed, resp.max));
  }
  if (s.cluster.device.effective(s.rollout.precision.linear.compute(s.rollout.precision.mode)) !=
      s.rollout.precision.linear.compute(s.rollout.precision.mode)) {
    r.warnings.push_back(fmt::format("{} has no {} tensor cores: rollout GEMMs run on {}", s.cluster.device.name,
                                     models::compute_name(s.rollout.precision.linear.compute(s.rollout.precision.mode)),
                                     models::compute_name(r.rollout_cost.compute_type)));
  }
}

RunSummary summarize(const sim::Scenario& s, const sim::SimResult& r, PrecisionFlowVerdict flow) {
  RunSummary u;
  u.scenario = s.name;
  u.steps = static_cast<int>(r.steps.size());
  u.fits = r.fits();
  const auto steps = step_values(r);
  u.step_time_mean_s = mean_of(steps);
  u.step_time_max_s = max_of(steps);
  u.phases = sim::phases_of(s);
  for (const auto p : u.phases) {
    u.phase_mean_s[p] = mean_of(phase_values(r, p));
    u.phase_max_s[p] = max_of(phase_values(r, p));
  }
  u.rollout_share = u.step_time_mean_s > 0 ? u.phase_mean_s[sim::Phase::kRollout] / u.step_time_mean_s : 0.0;
  std::int64_t tokens = 0;
  double wall = 0;
  for (const auto& st : r.steps) {
    tokens += st.generated_tokens;
    wall += st.step_s();
  }
  for (const auto& st : r.steps) u.preemptions += st.preemptions;
  u.generated_tokens_per_s = wall > 0 ? static_cast<double>(tokens) / wall : 0.0;
  u.peak_rollout_bytes = r.peak_rollout_bytes;
  u.peak_training_bytes = r.peak_training_bytes;
  u.peak_critic_bytes = r.peak_critic_bytes;
  u.peak_reward_model_bytes = r.peak_reward_model_bytes;
  u.peak_reference_bytes = r.peak_reference_bytes;
  u.device_memory_bytes = s.cluster.device.memory_bytes;
  u.verify = std::move(flow);
  u.warnings = r.warnings;
  u.oom = r.oom;
  u.bottleneck = bottleneck(s, r);
  u.engines = r.engines;
  u.rollout_tensor_parallel = s.rollout.tensor_parallel;
  u.rollout_data_parallel = s.rollout.data_parallel;
  u.rollout_expert_parallel = s.rollout.expert_parallel;
  u.rollout_precision = s.rollout.precision.name;
  u.kv_cache = s.rollout.precision.kv_cache.str();
  u.compute_type = std::string(models::compute_name(r.rollout_cost.compute_type));
  u.rollout_weight_bytes_per_device = r.rollout_cost.weight_bytes_per_device;
  u.kv_capacity_tokens_per_engine = r.kv_capacity_tokens;
  u.max_running_sequences = r.max_running;
  u.kv_limited = r.kv_limited;
  u.weight_sync = r.sync;
  u.rollout_idle_ratio = r.rollout_idle_ratio();
  u.trainer_idle_ratio = r.trainer_idle_ratio();
  double sum = 0, seqs = 0, stale = 0;
  for (const auto& st : r.steps) {
    const double n = static_cast<double>(s.workload.sequences_per_step());
    sum += st.staleness_mean * n;
    seqs += n;
    stale += static_cast<double>(st.stale_sequences);
    u.staleness_max = std::max(u.staleness_max, st.staleness_max);
    u.partial_rollout_interruptions += st.interruptions;
  }
  u.staleness_mean = seqs > 0 ? sum / seqs : 0.0;
  u.stale_fraction = seqs > 0 ? stale / seqs : 0.0;
  u.tokens_generated = r.tokens_generated;
  u.tokens_recomputed = r.tokens_recomputed;
  u.left_in_flight_sequences = r.left_in_flight;
  u.events = r.events;
  u.schedule = std::string(sim::schedule_name(s.schedule.mode));
  u.placement = std::string(sim::placement_name(s.placement.mode));
  return u;
}

nlohmann::json summary_json(const RunSummary& u) {
  using nlohmann::json;
  json j;
  j["scenario"] = u.scenario;
  j["steps"] = u.steps;
  j["fits"] = u.fits;
  j["step_time_s"] = {{"mean", u.step_time_mean_s}, {"max", u.step_time_max_s}};
  json phases = json::object();
  json phases_max = json::object();
  for (const auto p : u.phases) {
    const std::string name(sim::phase_name(p));
    phases[name] = u.phase_mean_s[p];
    phases_max[name] = u.phase_max_s[p];
  }
  j["phases_s"] = phases;
  j["phases_max_s"] = phases_max;
  j["rollout_share"] = u.rollout_share;
  j["generated_tokens_per_s"] = u.generated_tokens_per_s;
  j["peak_memory_bytes"] = {{"rollout", u.peak_rollout_bytes}, {"training", u.peak_training_bytes}};
  if (u.peak_critic_bytes > 0) j["peak_memory_bytes"]["critic"] = u.peak_critic_bytes;
  if (u.peak_reward_model_bytes > 0) j["peak_memory_bytes"]["reward_model"] = u.peak_reward_model_bytes;
  if (u.peak_reference_bytes > 0) j["peak_memory_bytes"]["reference"] = u.peak_reference_bytes;
  j["device_memory_bytes"] = u.device_memory_bytes;
  json by_kind = json::object();
  for (const auto& [key, count] : u.verify.groups) by_kind[key] = count;
  j["verify"] = {{"verdict", u.verify.verdict}, {"mismatches", u.verify.mismatches}, {"by_kind", by_kind}};
  j["warnings"] = u.warnings;
  if (u.oom) {
    json b = json::object();
    for (const auto& [tag, bytes] : u.oom->breakdown) b[tag] = bytes;
    j["oom"] = {
        {"role", std::string(sim::role_name(u.oom->role))}, {"device_group", u.oom->device_group},     {"reason", u.oom->reason},
        {"capacity_bytes", u.oom->capacity_bytes},          {"required_bytes", u.oom->required_bytes}, {"breakdown", b}};
  }
  j["preemptions"] = u.preemptions;
  j["bottleneck"] = u.bottleneck;
  j["rollout"] = {{"engines", u.engines},
                  {"tensor_parallel", u.rollout_tensor_parallel},
                  {"precision", u.rollout_precision},
                  {"kv_cache", u.kv_cache},
                  {"compute_type", u.compute_type},
                  {"weight_bytes_per_device", u.rollout_weight_bytes_per_device},
                  {"kv_capacity_tokens_per_engine", u.kv_capacity_tokens_per_engine},
                  {"max_running_sequences", u.max_running_sequences},
                  {"kv_limited", u.kv_limited}};
  if (u.rollout_data_parallel > 1) {  // DP-attention engines (written only for them: earlier summaries read as before)
    j["rollout"]["data_parallel"] = u.rollout_data_parallel;
    j["rollout"]["expert_parallel"] = u.rollout_expert_parallel;
  }
  const auto& w = u.weight_sync;
  j["weight_sync_s"] = {{"gather", w.gather}, {"transfer", w.transfer}, {"quantize", w.quantize},
                        {"repack", w.repack}, {"load", w.load},         {"total", w.total()}};
  j["idle_ratio"] = {{"rollout", u.rollout_idle_ratio}, {"trainer", u.trainer_idle_ratio}};
  j["staleness"] = {{"mean", u.staleness_mean},
                    {"max", u.staleness_max},
                    {"stale_fraction", u.stale_fraction},
                    {"partial_rollout_interruptions", u.partial_rollout_interruptions}};
  j["tokens"] = {{"generated", u.tokens_generated},
                 {"recomputed", u.tokens_recomputed},
                 {"left_in_flight_sequences", u.left_in_flight_sequences}};
  j["events"] = u.events;
  j["schedule"] = u.schedule;
  j["placement"] = u.placement;
  return j;
}

void print_summary(std::ostream& out, const sim::Scenario& s, const RunSummary& u) {
  out << fmt::format("rlsim: {}\n", s.name);
  out << fmt::format("  model {} ({:.2f} B params, {:.2f} B active) on {} x {} x {} ({}, {})\n", s.model.name,
                     static_cast<double>(s.model.params().total()) / 1e9, static_cast<double>(s.model.active_params()) / 1e9,
                     s.cluster.nodes, s.cluster.devices_per_node, s.cluster.device.name, u.placement, u.schedule);
  const std::string dp = u.rollout_data_parallel > 1
                             ? fmt::format(" x DP{} (EP{})", u.rollout_data_parallel, u.rollout_expert_parallel)
                             : std::string();
  // A critic, reward model or reference on devices of its own (algorithm.*.placement separate).
  std::string aux;
  for (const auto& [name, m] : {std::pair{"critic", &s.algorithm.critic}, std::pair{"reward model", &s.algorithm.reward_model},
                                std::pair{"reference", &s.algorithm.reference}}) {
    if (*m && (*m)->placement == sim::AuxPlacement::kSeparate) aux += fmt::format(", {} on {}", name, (*m)->devices);
  }
  out << fmt::format("  rollout {} (kv {}), {} engines x TP{}{}; training {} on {} devices{}\n", u.rollout_precision, u.kv_cache,
                     u.engines, u.rollout_tensor_parallel, dp, s.training.precision.name, s.placement.train_devices, aux);
  if (!u.fits) {
    out << "  DOES NOT FIT: " << u.oom->reason << "\n";
    for (const auto& [tag, bytes] : u.oom->breakdown) {
      out << fmt::format("    {:<22} {:>12}\n", tag, format_quantity(bytes, Dimension::kBytes));
    }
  }
  if (u.steps > 0) {
    out << fmt::format("  {:<14} {:>12} {:>12}\n", "phase", "mean s", "max s");
    for (const auto p : u.phases) {
      out << fmt::format("  {:<14} {:>12.2f} {:>12.2f}\n", sim::phase_name(p), u.phase_mean_s[p], u.phase_max_s[p]);
    }
    out << fmt::format("  {:<14} {:>12.2f} {:>12.2f}\n", "step", u.step_time_mean_s, u.step_time_max_s);
    out << fmt::format("  rollout share {:.1f} %, generated {:.0f} tokens/s, {} preemptions\n", 100.0 * u.rollout_share,
                       u.generated_tokens_per_s, u.preemptions);
    out << fmt::format(
        "  idle ratio: rollout devices {:.1f} %, trainer {:.1f} %; staleness of consumed samples: mean {:.2f}, max {}\n",
        100 * u.rollout_idle_ratio, 100 * u.trainer_idle_ratio, u.staleness_mean, u.staleness_max);
    const double cap = u.device_memory_bytes;
    auto peak = [&](const char* name, double bytes) {
      return fmt::format("{} {} / {} ({:.0f} %)", name, format_quantity(bytes, Dimension::kBytes),
                         format_quantity(cap, Dimension::kBytes), 100 * bytes / cap);
    };
    std::string groups = peak("rollout", u.peak_rollout_bytes) + ", " + peak("training", u.peak_training_bytes);
    if (u.peak_critic_bytes > 0) groups += ", " + peak("critic", u.peak_critic_bytes);
    if (u.peak_reward_model_bytes > 0) groups += ", " + peak("reward model", u.peak_reward_model_bytes);
    if (u.peak_reference_bytes > 0) groups += ", " + peak("reference", u.peak_reference_bytes);
    out << "  peak memory per device: " << groups << "\n";
  }
  out << "  bottleneck: " << u.bottleneck << "\n";
  const auto& pf = u.verify;
  if (pf.verdict == "inconsistent") {
    std::string parts;
    for (const auto& [key, count] : pf.groups) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", key, count);
    out << fmt::format("  precision flow: inconsistent, {} mismatching edges ({}); details: rlsim verify {}\n", pf.mismatches,
                       parts, s.file);
  } else if (pf.verdict == "consistent") {
    out << "  precision flow: consistent (the rollout graph embeds in the training forward graph with equal precision on every "
           "edge)\n";
  }
  for (const auto& w : u.warnings) out << "  warning: " << w << "\n";
}

namespace {

// trace.json as nlohmann's dump(1) of {"displayTimeUnit": "ms", "traceEvents": [...]} would
// print it, written one event at a time as the simulation reports it (Chrome's Trace Event
// Format: "M" metadata, "X" complete events, "C" counters; times in microseconds). Engine
// iterations (Span::detail) beyond `max_iterations` are counted, not written.
class ChromeTraceWriter final : public sim::TraceSink {
 public:
  ChromeTraceWriter(WritableFile& out, const std::string& process, std::int64_t max_iterations)
      : out_(out), max_iterations_(max_iterations) {
    out_.append("{\n \"displayTimeUnit\": \"ms\",\n \"traceEvents\": [\n");
    event({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"args", {{"name", process}}}});
  }

  void span(const sim::Span& sp) override {
    if (sp.detail && iterations_++ >= max_iterations_) {
      if (dropped_++ == 0) first_dropped_ = sp.start;
      return;
    }
    nlohmann::json args = nlohmann::json::object();
    for (const auto& [k, v] : sp.args) args[k] = v;
    const int tid = tid_of(sp.track);
    event({{"ph", "X"},
           {"name", sp.name},
           {"cat", sp.category},
           {"pid", 1},
           {"tid", tid},
           {"ts", micros(sp.start)},
           {"dur", micros(sp.duration)},
           {"args", args}});
  }

  void counter(const sim::CounterSample& c) override {
    event({{"ph", "C"},
           {"name", c.name},
           {"pid", 1},
           {"tid", tid_of(c.track)},
           {"ts", micros(c.time)},
           {"args", {{c.name, c.value}}}});
  }

  /// The memory counters of every ledger, then the end of the document.
  void finish(const std::vector<sim::MemoryLedger>& ledgers) {
    for (const auto& l : ledgers) {
      for (const auto& e : l.events()) {
        event({{"ph", "C"},
               {"name", "memory " + l.group()},
               {"pid", 1},
               {"ts", micros(e.time)},
               {"args", {{"GB", e.total_bytes / 1e9}}}});
      }
    }
    out_.append("\n ]\n}\n");
  }

  std::int64_t dropped() const { return dropped_; }
  sim::TimeNs first_dropped() const { return first_dropped_; }

 private:
  static double micros(sim::TimeNs t) { return static_cast<double>(t) / 1e3; }

  int tid_of(const std::string& track) {
    auto [it, inserted] = tids_.emplace(track, static_cast<int>(tids_.size()) + 1);
    if (inserted) event({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", it->second}, {"args", {{"name", track}}}});
    return it->second;
  }

  // One array member: the event's dump(1) indented by the array's two spaces (a JSON string
  // holds no raw line break, so every '\n' of the dump starts a line of the document).
  void event(const nlohmann::json& e) {
    std::string text = e.dump(1);
    line_.clear();
    line_ += events_++ == 0 ? "  " : ",\n  ";
    for (const char c : text) {
      line_ += c;
      if (c == '\n') line_ += "  ";
    }
    out_.append(line_);
  }

  WritableFile& out_;
  std::int64_t max_iterations_;
  std::map<std::string, int> tids_;
  std::int64_t events_ = 0, iterations_ = 0, dropped_ = 0;
  sim::TimeNs first_dropped_ = 0;
  std::string line_;
};

// requests.csv: SCENARIO.md's columns, one row per consumed request.
constexpr std::string_view kRequestsHeader =
    "step,index,engine,prompt_tokens,response_tokens,admit_s,first_token_s,finish_s,preemptions,group,policy_version,"
    "staleness,interruptions\n";

std::string request_row(const sim::Request& q) {
  return fmt::format("{},{},{},{},{},{:.6f},{:.6f},{:.6f},{},{},{},{},{}\n", q.step, q.index, q.engine, q.prompt_tokens,
                     q.response_tokens, sim::to_seconds(q.admit_ns), sim::to_seconds(q.first_token_ns),
                     sim::to_seconds(q.finish_ns), q.preemptions, q.group, q.version, q.step - q.version, q.interruptions);
}

// The files written from the simulation's aggregates, after it ends: plots, steps.csv,
// phases.csv, memory.csv and summary.json.
RunSummary write_aggregates(const fs::path& tmp, const sim::Scenario& s, sim::SimResult& r, const PrecisionFlowVerdict& flow) {
  // Plots first: a failure to draw becomes a warning in summary.json, not a lost run.
  if (s.output.plots) {
    std::string why;
    if (!plot_timeline(tmp / "timeline.png", s, r, &why)) r.warnings.push_back("timeline.png not drawn: " + why);
    if (!plot_memory(tmp / "memory.png", s, r, &why)) r.warnings.push_back("memory.png not drawn: " + why);
  }
  {
    // SCENARIO.md's columns in their order (the run's phases), then rlsim's step_overhead_s.
    const std::vector<sim::Phase> phases = sim::phases_of(s);
    std::string t = "step,step_time_s";
    for (const auto p : phases) {
      if (p != sim::Phase::kStepOverhead) t += fmt::format(",{}_s", sim::phase_name(p));
    }
    t += ",generated_tokens,step_overhead_s\n";
    for (const auto& st : r.steps) {
      t += fmt::format("{},{:.6f}", st.step, st.step_s());
      for (const auto p : phases) {
        if (p != sim::Phase::kStepOverhead) t += fmt::format(",{:.6f}", st.phase_s[p]);
      }
      t += fmt::format(",{},{:.6f}\n", st.generated_tokens, st.phase_s[sim::Phase::kStepOverhead]);
    }
    write_text(tmp / "steps.csv", t);
  }
  {
    std::string t = "step,phase,role,start_s,end_s,duration_s\n";
    for (const auto& p : r.phases) {
      t += fmt::format("{},{},{},{:.6f},{:.6f},{:.6f}\n", p.step, sim::phase_name(p.phase), sim::phase_role(p),
                       sim::to_seconds(p.start), sim::to_seconds(p.end), p.seconds());
    }
    write_text(tmp / "phases.csv", t);
  }
  {
    std::string t = "time_s,device_group,tag,delta_bytes,total_bytes,capacity_bytes\n";
    for (const auto& l : r.ledgers) {
      for (const auto& e : l.events()) {
        t += fmt::format("{:.6f},{},{},{:.0f},{:.0f},{:.0f}\n", sim::to_seconds(e.time), csv_field(l.group()),
                         sim::memory_tag_name(e.tag), e.delta_bytes, e.total_bytes, l.capacity());
      }
    }
    write_text(tmp / "memory.csv", t);
  }
  RunSummary summary = summarize(s, r, flow);
  write_text(tmp / "summary.json", summary_json(summary).dump(2) + "\n");
  return summary;
}

}  // namespace

RunSummary run_to_directory(const std::string& dir, const sim::Scenario& s, const PrecisionFlowVerdict& flow,
                            const sim::ProgressFn& progress) {
  RunSummary summary;
  write_directory(dir, [&](const fs::path& tmp) {
    // requests.csv and trace.json grow as the simulation runs; the rest is written at its end.
    auto requests = file_system().create(tmp / "requests.csv");
    requests->append(kRequestsHeader);
    std::unique_ptr<WritableFile> trace_file;
    std::unique_ptr<ChromeTraceWriter> trace;
    sim::NullSink no_trace;
    if (s.output.trace) {
      trace_file = file_system().create(tmp / "trace.json");
      trace = std::make_unique<ChromeTraceWriter>(*trace_file, s.name, s.output.trace_max_iterations);
    }
    sim::SimResult r = sim::simulate(s, trace ? static_cast<sim::TraceSink&>(*trace) : no_trace, progress,
                                     [&](const sim::Request& q) { requests->append(request_row(q)); });
    requests->close();
    add_warnings(s, r);
    if (trace) {
      trace->finish(r.ledgers);
      trace_file->close();
      if (trace->dropped() > 0) {
        r.warnings.push_back(fmt::format(
            "trace.json holds the first {} engine iterations (output.trace_max_iterations); {} from t = {:.3f} s on are "
            "left out (phases and memory are complete)",
            s.output.trace_max_iterations, trace->dropped(), sim::to_seconds(trace->first_dropped())));
      }
    }
    summary = write_aggregates(tmp, s, r, flow);
  });
  return summary;
}

}  // namespace rlsim::analysis
