#include "sim/cli/validate_cmds.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "analysis/calibrate.h"
#include "analysis/output_dir.h"
#include "analysis/validation.h"
#include "sim/scenario/calibration.h"
#include "sim/scenario/units.h"

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

int cmd_calibrate(const CalibrateOptions& o, std::ostream& out, std::ostream& err) {
  const auto t0 = std::chrono::steady_clock::now();
  sim::Calibration start = o.start.empty() ? sim::builtin_calibration() : sim::load_calibration(o.start);
  const auto records = load_records(o.records, start);
  const auto params = analysis::calibration_parameters(records);
  // Without --start every fitted parameter starts at its documented prior, so that refitting
  // the built-in calibration (itself a fit) does not walk from one local optimum to the next.
  if (o.start.empty()) {
    for (const auto& p : params) p.ref(start) = p.prior;
  }
  analysis::CalibrateOptions co;
  co.jobs = cores(o.jobs);
  co.leave_one_out = !o.no_loo;
  if (!o.quiet) co.progress = [&](const std::string& s) { err << "rlsim calibrate: " << s << "\n"; };
  const auto fit = analysis::calibrate(records, params, start, co);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

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
                                 fit.constrained_by[i].empty() ? "no record (stays near its prior)"
                                                               : fmt::format("{}", fmt::join(fit.constrained_by[i], ", "))));
  }
  header.push_back("Devices, backends and engines not listed keep the 'other' values and the defaults below.");
  std::string csv = "parameter,value,lower,upper,prior,constrained_by\n";
  for (std::size_t i = 0; i < params.size(); ++i) {
    csv += fmt::format("{},{:.6g},{:.6g},{:.6g},{:.6g},{}\n", params[i].name, fit.values[i], params[i].lower, params[i].upper,
                       params[i].prior, analysis::csv_field(fmt::format("{}", fmt::join(fit.constrained_by[i], ", "))));
  }
  std::string rec_csv = "record,figure,published,fit_predicted,fit_error,loo_predicted,loo_error\n";
  for (const auto& f : fit.outcomes) {
    if (!f.is_time) continue;
    const auto it =
        std::find_if(fit.loo.begin(), fit.loo.end(), [&](const auto& l) { return l.record == f.record && l.figure == f.figure; });
    rec_csv += fmt::format("{},{},{:.6g},{:.6g},{:.4f},{},{}\n", f.record, f.figure, f.published, f.predicted, f.error,
                           it == fit.loo.end() ? "" : fmt::format("{:.6g}", it->predicted),
                           it == fit.loo.end() ? "" : fmt::format("{:.4f}", it->error));
  }
  analysis::write_directory(o.out, [&](const std::filesystem::path& tmp) {
    analysis::write_text(tmp / "calibration.yaml", sim::calibration_yaml(fit.calibration, header));
    analysis::write_text(tmp / "parameters.csv", csv);
    analysis::write_text(tmp / "records.csv", rec_csv);
  });

  if (!o.quiet) {
    out << fmt::format("{:<36} {:>12} {:>12} {:>12} {:>12}  {}\n", "parameter", "fitted", "lower", "upper", "prior",
                       "constrained by");
    for (std::size_t i = 0; i < params.size(); ++i) {
      out << fmt::format("{:<36} {:>12} {:>12} {:>12} {:>12}  {}\n", params[i].name, show_param(params[i], fit.values[i]),
                         show_param(params[i], params[i].lower), show_param(params[i], params[i].upper),
                         show_param(params[i], params[i].prior),
                         fit.constrained_by[i].empty() ? "-" : fmt::format("{}", fmt::join(fit.constrained_by[i], ", ")));
    }
    out << fmt::format("\n{:<44} {:<34} {:>11} {:>9} {:>9}\n", "record", "time figure", "published", "fit err", "LOO err");
    for (const auto& f : fit.outcomes) {
      if (!f.is_time && f.figure.find(" / ") == std::string::npos) continue;
      const auto it = std::find_if(fit.loo.begin(), fit.loo.end(),
                                   [&](const auto& l) { return l.record == f.record && l.figure == f.figure; });
      out << fmt::format("{:<44} {:<34} {:>11.4g} {:>+8.1f}% {:>9}\n", f.record, f.figure, f.published, 100 * f.error,
                         it == fit.loo.end() ? "-" : fmt::format("{:+.1f}%", 100 * it->error));
    }
  }
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
  out << fmt::format("wrote {}/calibration.yaml, parameters.csv, records.csv ({:.1f} s, {} evaluations)\n", o.out, wall,
                     fit.evaluations);
  return 0;
}

}  // namespace rlsim::cli
