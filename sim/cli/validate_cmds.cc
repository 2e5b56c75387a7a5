#include "sim/cli/validate_cmds.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "analysis/calibrate.h"
#include "analysis/output_dir.h"
#include "analysis/validation.h"
#include "analysis/verl_import.h"
#include "sim/scenario/calibration.h"
#include "sim/scenario/units.h"
#include "sim/scenario/yaml_file.h"

namespace rlsim::cli {

namespace {

int cores(int jobs) { return jobs > 0 ? jobs : std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

std::vector<analysis::ValidationRecord> load_records(const std::vector<std::string>& files, const sim::Calibration& c) {
  std::vector<std::string> paths = files;
  if (paths.empty()) {
    const auto dir = analysis::default_scenarios_dir();
    paths = analysis::repository_records(dir);
    if (paths.empty())
      throw sim::ScenarioError(
          fmt::format("{}: no validation records found (scenario files with a validation: block)", dir.string()));
  }
  std::vector<analysis::ValidationRecord> out;
  for (const auto& p : paths) out.push_back(analysis::load_record(p, c));
  return out;
}

std::string show_param(const analysis::CalibrationParameter& p, double v) {
  return p.unit == "s" ? sim::format_quantity(v, sim::Dimension::kTime) : fmt::format("{:.4g}", v);
}

}  // namespace

int cmd_validate(const ValidateOptions& o, std::ostream& out, std::ostream& err) {
  const sim::Calibration cal = o.calibration.empty() ? sim::builtin_calibration() : sim::load_calibration(o.calibration);
  const auto records = load_records(o.records, cal);
  const auto sims = analysis::simulate_records(records, nullptr, cores(o.jobs));
  const auto outcomes = analysis::compare(records, sims);
  const auto st = analysis::validation_stats(outcomes);
  std::vector<std::string> warnings;
  analysis::write_validation(o.out, outcomes, !o.no_plots, &warnings);
  for (const auto& w : warnings) err << "rlsim: warning: " << w << "\n";
  if (o.quiet) {
    out << fmt::format("{} records, {} figures, {} out of band; step time |error| median {:.1f} %, worst {:.1f} %\n",
                       records.size(), st.figures, st.out_of_band, 100 * st.step_median, 100 * st.step_worst);
  } else {
    out << fmt::format("rlsim validate: {} records, calibration {}\n", records.size(), cal.source);
    analysis::print_validation(out, outcomes, st);
    out << fmt::format("outputs: {}/ (validation.csv{})\n", o.out, o.no_plots ? "" : ", parity.png");
  }
  return st.out_of_band == 0 ? 0 : 1;
}

namespace {

// A scenario and a verl console log as a validation record: the scenario's text with a
// `validation:` block of the log's phase times, written beside it (its relative paths hold) and
// removed when this goes.
class LogRecord {
 public:
  LogRecord(const std::string& scenario, const std::string& log) {
    const std::string text = sim::read_input_file(scenario, "scenario file");
    if (analysis::has_validation_block(scenario))
      throw sim::ScenarioError(scenario + ": already a validation record; --verl-log takes a plain scenario");
    const auto times = analysis::verl_log_phase_times(sim::read_input_file(log, "verl console log"), log);
    std::string block = fmt::format("\nvalidation:\n  source: \"verl console log {}\"\n  figures:\n", log);
    for (const auto& [figure, seconds] : times)
      block += fmt::format("    - {{figure: {}, published: {:.6g} s, tolerance: 0.25}}\n", figure, seconds);
    const std::filesystem::path p(scenario);
    path_ = (p.parent_path() / fmt::format(".{}.verl-log.yaml", p.stem().string())).string();
    analysis::write_text(path_, text + (text.empty() || text.back() == '\n' ? "" : "\n") + block);
  }
  ~LogRecord() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  LogRecord(const LogRecord&) = delete;
  LogRecord& operator=(const LogRecord&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Measured vs predicted per figure of one record, before (the start calibration) and after.
void print_before_after(std::ostream& out, const std::vector<analysis::FigureOutcome>& before,
                        const std::vector<analysis::FigureOutcome>& after) {
  out << fmt::format("{:<22} {:>12} {:>12} {:>8} {:>12} {:>8}\n", "figure", "measured s", "before s", "error", "after s",
                     "error");
  for (std::size_t i = 0; i < before.size() && i < after.size(); ++i) {
    out << fmt::format("{:<22} {:>12.2f} {:>12.2f} {:>+7.1f}% {:>12.2f} {:>+7.1f}%\n", before[i].figure, before[i].published,
                       before[i].predicted, 100 * before[i].error, after[i].predicted, 100 * after[i].error);
  }
}

// The leave-one-out outcome of the fit's figure `f`, or null when the fit left none.
const analysis::FigureOutcome* loo_of(const analysis::CalibrationFit& fit, const analysis::FigureOutcome& f) {
  const auto it =
      std::find_if(fit.loo.begin(), fit.loo.end(), [&](const auto& l) { return l.record == f.record && l.figure == f.figure; });
  return it == fit.loo.end() ? nullptr : &*it;
}

// Where parameter i's figures come from, joined with ", " (empty when no record constrains it).
std::string constrained_by(const analysis::CalibrationFit& fit, std::size_t i) {
  return fmt::format("{}", fmt::join(fit.constrained_by[i], ", "));
}

// The comment lines at the head of calibration.yaml: the records fitted and each parameter's value.
std::vector<std::string> calibration_header(const std::vector<analysis::ValidationRecord>& records,
                                            const std::vector<analysis::CalibrationParameter>& params,
                                            const analysis::CalibrationFit& fit) {
  std::vector<std::string> names;
  for (const auto& r : records) names.push_back(r.name);
  std::vector<std::string> header{
      "rlsim calibration: the cost model's free parameters (sim/scenario/calibration.h), fitted by `rlsim calibrate`",
      fmt::format(
          "over {} validation records ({} time figures; least squares on log error with a weak prior, Eigen LM):", records.size(),
          std::count_if(fit.outcomes.begin(), fit.outcomes.end(), [](const auto& x) { return x.is_time; })),
      "  " + fmt::format("{}", fmt::join(names, ", "))};
  for (std::size_t i = 0; i < params.size(); ++i) {
    header.push_back(fmt::format("{} = {} (bounds {} .. {}, prior {}; constrained by: {})", params[i].name,
                                 show_param(params[i], fit.values[i]), show_param(params[i], params[i].lower),
                                 show_param(params[i], params[i].upper), show_param(params[i], params[i].prior),
                                 fit.constrained_by[i].empty() ? "no record (stays near its prior)" : constrained_by(fit, i)));
  }
  header.push_back("Devices, backends and engines not listed keep the 'other' values and the defaults below.");
  return header;
}

// parameters.csv: one row per fitted parameter.
std::string parameters_csv(const std::vector<analysis::CalibrationParameter>& params, const analysis::CalibrationFit& fit) {
  std::string csv = "parameter,value,lower,upper,prior,constrained_by\n";
  for (std::size_t i = 0; i < params.size(); ++i) {
    csv += fmt::format("{},{:.6g},{:.6g},{:.6g},{:.6g},{}\n", params[i].name, fit.values[i], params[i].lower, params[i].upper,
                       params[i].prior, analysis::csv_field(constrained_by(fit, i)));
  }
  return csv;
}

// records.csv: every time figure at the fitted values and from its leave-one-out refit.
std::string records_csv(const analysis::CalibrationFit& fit) {
  std::string csv = "record,figure,published,fit_predicted,fit_error,loo_predicted,loo_error\n";
  for (const auto& f : fit.outcomes) {
    if (!f.is_time) continue;
    const analysis::FigureOutcome* l = loo_of(fit, f);
    csv +=
        fmt::format("{},{},{:.6g},{:.6g},{:.4f},{},{}\n", f.record, f.figure, f.published, f.predicted, f.error,
                    l == nullptr ? "" : fmt::format("{:.6g}", l->predicted), l == nullptr ? "" : fmt::format("{:.4f}", l->error));
  }
  return csv;
}

// The console tables: each parameter, then each time figure (and ratio figure) with its errors.
void print_fit(std::ostream& out, const std::vector<analysis::CalibrationParameter>& params,
               const analysis::CalibrationFit& fit) {
  out << fmt::format("{:<36} {:>12} {:>12} {:>12} {:>12}  {}\n", "parameter", "fitted", "lower", "upper", "prior",
                     "constrained by");
  for (std::size_t i = 0; i < params.size(); ++i) {
    out << fmt::format("{:<36} {:>12} {:>12} {:>12} {:>12}  {}\n", params[i].name, show_param(params[i], fit.values[i]),
                       show_param(params[i], params[i].lower), show_param(params[i], params[i].upper),
                       show_param(params[i], params[i].prior), fit.constrained_by[i].empty() ? "-" : constrained_by(fit, i));
  }
  out << fmt::format("\n{:<44} {:<34} {:>11} {:>9} {:>9}\n", "record", "time figure", "published", "fit err", "LOO err");
  for (const auto& f : fit.outcomes) {
    if (!f.is_time && f.figure.find(" / ") == std::string::npos) continue;
    const analysis::FigureOutcome* l = loo_of(fit, f);
    out << fmt::format("{:<44} {:<34} {:>11.4g} {:>+8.1f}% {:>9}\n", f.record, f.figure, f.published, 100 * f.error,
                       l == nullptr ? "-" : fmt::format("{:+.1f}%", 100 * l->error));
  }
}

// The closing lines: the fit's step-time errors, and the leave-one-out ones when there are any.
void print_fit_errors(std::ostream& out, const analysis::CalibrationFit& fit) {
  const auto st = analysis::validation_stats(fit.outcomes);
  std::vector<double> loo_step;
  for (const auto& l : fit.loo) {
    if (l.figure == "step_time") loo_step.push_back(std::abs(l.error));
  }
  std::sort(loo_step.begin(), loo_step.end());
  const double loo_median = loo_step.empty()      ? 0.0
                            : loo_step.size() % 2 ? loo_step[loo_step.size() / 2]
                                                  : 0.5 * (loo_step[loo_step.size() / 2 - 1] + loo_step[loo_step.size() / 2]);
  out << fmt::format("fit: step time |error| median {:.1f} %, worst {:.1f} %; {} of {} figures out of band\n",
                     100 * st.step_median, 100 * st.step_worst, st.out_of_band, st.figures);
  if (!fit.loo.empty()) {
    out << fmt::format("leave-one-out: step time |error| median {:.1f} %, worst {:.1f} %\n", 100 * loo_median,
                       loo_step.empty() ? 0.0 : 100 * loo_step.back());
  }
}

}  // namespace

int cmd_calibrate(const CalibrateOptions& o_in, std::ostream& out, std::ostream& err) {
  const auto t0 = std::chrono::steady_clock::now();
  CalibrateOptions o = o_in;
  std::optional<LogRecord> log_record;
  if (!o.verl_log.empty()) {
    if (o.records.size() != 1) throw sim::ScenarioError("rlsim calibrate --verl-log: give exactly one scenario, the run's");
    log_record.emplace(o.records.front(), o.verl_log);
    o.records = {log_record->path()};
    o.no_loo = true;  // one record: nothing to leave out
  }
  sim::Calibration start = o.start.empty() ? sim::builtin_calibration() : sim::load_calibration(o.start);
  const auto records = load_records(o.records, start);
  const auto params = analysis::calibration_parameters(records);
  // Without --start every fitted parameter starts at its documented prior, so that refitting
  // the built-in calibration (itself a fit) does not walk from one local optimum to the next. A
  // single run's log adjusts the built-in fit instead.
  if (o.start.empty() && o.verl_log.empty()) {
    for (const auto& p : params) p.ref(start) = p.prior;
  }
  std::vector<analysis::FigureOutcome> before;
  if (log_record) before = analysis::compare(records, analysis::simulate_records(records, nullptr, cores(o.jobs)));
  analysis::CalibrateOptions co;
  co.jobs = cores(o.jobs);
  co.leave_one_out = !o.no_loo;
  if (!o.quiet) co.progress = [&](const std::string& s) { err << "rlsim calibrate: " << s << "\n"; };
  const auto fit = analysis::calibrate(records, params, start, co);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  analysis::write_directory(o.out, [&](const std::filesystem::path& tmp) {
    analysis::write_text(tmp / "calibration.yaml",
                         sim::calibration_yaml(fit.calibration, calibration_header(records, params, fit)));
    analysis::write_text(tmp / "parameters.csv", parameters_csv(params, fit));
    analysis::write_text(tmp / "records.csv", records_csv(fit));
  });
  if (log_record && !o.quiet) {
    out << fmt::format("rlsim calibrate --verl-log {}: the run's phases, measured vs predicted\n", o.verl_log);
    print_before_after(out, before, fit.outcomes);
    out << "\n";
  }
  if (!o.quiet) print_fit(out, params, fit);
  print_fit_errors(out, fit);
  out << fmt::format("wrote {}/calibration.yaml, parameters.csv, records.csv ({:.1f} s, {} evaluations)\n", o.out, wall,
                     fit.evaluations);
  return 0;
}

}  // namespace rlsim::cli
