// The `rlsim` executable. Exit status (SCENARIO.md): 0 success; 1 a check the command exists to
// make failed; 2 bad input (file:line:column where there is one); 3 internal error (a bug); 4 an
// output could not be written (the environment's error); 128 + signal when SIGINT / SIGTERM
// stopped it.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "analysis/drift.h"
#include "analysis/output_dir.h"
#include "analysis/report.h"
#include "analysis/validation.h"
#include "models/graph/graph.h"
#include "models/precision/recipe.h"
#include "models/runtime/model.h"
#include "sim/cli/drift_cmds.h"
#include "sim/cli/host_bench.h"
#include "sim/cli/import_cmds.h"
#include "sim/cli/messages.h"
#include "sim/cli/plan_cmds.h"
#include "sim/cli/precision_cmds.h"
#include "sim/cli/runtime_cmds.h"
#include "sim/cli/sim_bench.h"
#include "sim/cli/train_cmds.h"
#include "sim/cli/validate_cmds.h"
#include "sim/cli/verify_cmds.h"
#include "sim/engine/stop.h"
#include "sim/pipeline/pipeline.h"
#include "sim/scenario/calibration.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/units.h"

namespace {

using namespace rlsim;

struct RunOptions {
  std::string scenario = "scenarios/default.yaml";
  std::string out;
  std::vector<std::string> set;
  bool print_config = false;
  bool quiet = false;
  bool no_plots = false;
  bool no_trace = false;
  std::int64_t seed = -1;
  int steps = 0;
  std::string calibration;
};

int cmd_run(const RunOptions& o) {
  std::vector<std::string> overrides = o.set;
  if (o.seed >= 0) overrides.push_back("seed=" + std::to_string(o.seed));
  if (o.steps > 0) overrides.push_back("steps=" + std::to_string(o.steps));
  const sim::Calibration calibration = o.calibration.empty() ? sim::builtin_calibration() : sim::load_calibration(o.calibration);
  sim::Scenario s = sim::load_scenario(o.scenario, overrides, "--set", &calibration);
  // Set directly, not as YAML overrides: a path may hold characters YAML would interpret.
  if (!o.out.empty()) s.output.dir = o.out;
  if (o.no_plots) s.output.plots = false;
  if (o.no_trace) s.output.trace = false;
  if (o.print_config) {
    std::cout << sim::resolved_yaml(s);
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const analysis::PrecisionFlowVerdict flow = analysis::check_precision_flow(s);
  bool progress_shown = false;
  const analysis::RunSummary summary = analysis::run_to_directory(s.output.dir, s, flow, [&](int done, int total) {
    if (o.quiet || (elapsed() < 1.0 && !progress_shown)) return;
    progress_shown = true;
    std::cerr << fmt::format("rlsim: simulated step {}/{} ({:.1f} s)\n", done, total, elapsed());
  });
  if (!o.quiet) {
    analysis::print_summary(std::cout, s, summary);
    std::cout << fmt::format("  outputs: {}/ (summary.json, steps.csv, phases.csv, memory.csv, requests.csv{}{})\n", s.output.dir,
                             s.output.trace ? ", trace.json" : "", s.output.plots ? ", timeline.png, memory.png" : "");
    std::cout << fmt::format("  simulated {} events in {:.3f} s wall\n", summary.events, elapsed());
  }
  return 0;
}

int cmd_catalog(const std::string& what) {
  if (what == "devices") {
    std::cout << fmt::format("{:<14} {:>9} {:>10} {:>9} {:>9} {:>9}  {:<15}  {}\n", "device", "memory", "HBM", "bf16", "fp8",
                             "fp4", "topology", "scale-up / scale-out");
    for (const auto& name : sim::catalog_device_names()) {
      const auto d = sim::catalog_device(name);
      auto rate = [&](models::ComputeType c) {
        const auto it = d.flops_per_s.find(c);
        return it == d.flops_per_s.end() ? std::string("-") : fmt::format("{:g}T", it->second / 1e12);
      };
      std::cout << fmt::format("{:<14} {:>9} {:>10} {:>9} {:>9} {:>9}  {:<15}  {} / {}\n", name,
                               sim::format_quantity(d.memory_bytes, sim::Dimension::kBytes),
                               sim::format_quantity(d.memory_bandwidth_bytes_per_s, sim::Dimension::kBandwidth),
                               rate(models::ComputeType::kBf16), rate(models::ComputeType::kFp8), rate(models::ComputeType::kFp4),
                               d.topology, sim::format_quantity(d.intra_node.bandwidth_bytes_per_s, sim::Dimension::kBandwidth),
                               sim::format_quantity(d.inter_node.bandwidth_bytes_per_s, sim::Dimension::kBandwidth));
    }
  } else if (what == "models") {
    std::cout << fmt::format("{:<18} {:>7} {:>7} {:>6} {:>6} {:>5} {:>12} {:>12} {:>14}\n", "model", "layers", "hidden", "heads",
                             "kv", "moe", "params (B)", "active (B)", "KV B/token");
    for (const auto& name : sim::catalog_model_names()) {
      const auto m = sim::catalog_model(name);
      std::cout << fmt::format("{:<18} {:>7} {:>7} {:>6} {:>6} {:>5} {:>12.2f} {:>12.2f} {:>14}\n", name, m.layers, m.hidden,
                               m.heads, m.kv_heads, m.moe ? fmt::format("{}/{}", m.moe->active, m.moe->experts) : "-",
                               static_cast<double>(m.params().total()) / 1e9, static_cast<double>(m.active_params()) / 1e9,
                               m.kv_elements_per_token() * 2);
    }
  } else if (what == "recipes") {
    std::cout << fmt::format("{:<17} {:<24} {:<22} {:<8} {:<5}  {}\n", "recipe", "linear weight", "linear activation", "kv",
                             "mode", "source");
    for (const auto& r : models::builtin_recipes()) {
      std::cout << fmt::format("{:<17} {:<24} {:<22} {:<8} {:<5}  {}\n", r.name, r.linear.weight.str(), r.linear.activation.str(),
                               r.kv_cache.str(), r.mode == models::QuantMode::kReal ? "real" : "fake", r.source);
    }
  } else if (what == "formats") {
    cli::print_formats(std::cout);
  }
  return 0;
}

int cmd_bench(const std::string& what, int repeat, cli::BenchRuntimeOptions bo, cli::BenchReloadOptions ro, int jobs,
              std::int64_t max_requests) {
  if (what == "quantize") return cli::bench_quantize(repeat, std::cout);
  if (what == "plan") return cli::bench_plan(jobs, repeat, std::cout);
  if (what == "reload") {
    ro.threads = bo.threads;
    ro.shape = bo.shape;
    ro.batch_invariant = bo.batch_invariant;
    return cli::bench_reload(ro, std::cout, std::cerr);
  }
  if (what == "runtime") {
    bo.repeat = repeat;
    return cli::bench_runtime(bo, std::cout, std::cerr);
  }
  if (what == "verify") return cli::bench_verify(repeat, std::cout);
  if (what == "host") {
    if (ro.model.empty())
      throw sim::ScenarioError("rlsim bench host: --model is required (e.g. ../shared/models/stories260K/stories260K.bin)");
    return cli::bench_host(ro.model, repeat, std::cout);
  }
  if (what != "sim")
    throw sim::ScenarioError("rlsim bench: unknown benchmark '" + what +
                             "' (available: sim, quantize, verify, runtime, reload, plan, host)");
  return cli::bench_sim(repeat, max_requests, std::cout);
}

// Options of `rlsim bench` (what to run and each benchmark's own).
struct BenchArgs {
  std::string what = "sim";
  int repeat = 3;
  cli::BenchRuntimeOptions runtime;
  cli::BenchReloadOptions reload;
  int jobs = 0;
  std::int64_t max_requests = 10'000'000;
  CLI::Option* precision = nullptr;  // --precision, shared by runtime and reload
};

// `rlsim run`: simulate a scenario.
CLI::App* add_run(CLI::App& app, RunOptions& ro) {
  auto* run = app.add_subcommand("run", "Simulate the RL steps of a scenario file and write summary, CSVs, trace and plots");
  run->add_option("scenario", ro.scenario, "Scenario YAML file")->capture_default_str();
  run->add_option("--out,-o", ro.out, "Output directory (default: output.dir of the scenario, else out/<file stem>)");
  run->add_option("--set,-s", ro.set, "Override a scenario key: dotted.key=value (YAML value), repeatable")->take_all();
  run->add_option("--seed", ro.seed, "Override the scenario's seed");
  run->add_option("--steps", ro.steps, "Override the number of RL steps")->check(CLI::PositiveNumber);
  run->add_flag("--print-config", ro.print_config, "Print the fully resolved scenario (every default explicit) and exit");
  run->add_flag("--no-plots", ro.no_plots, "Do not draw timeline.png and memory.png");
  run->add_flag("--no-trace", ro.no_trace, "Do not write trace.json");
  run->add_flag("--quiet,-q", ro.quiet, "Print nothing on success");
  run->add_option("--calibration", ro.calibration,
                  "Cost-model parameters from FILE (rlsim calibrate's calibration.yaml) instead of the built-in fit");
  return run;
}

// `rlsim catalog`: list a built-in catalog.
CLI::App* add_catalog(CLI::App& app, std::string& catalog_what) {
  auto* catalog = app.add_subcommand("catalog", "List the built-in catalogs");
  catalog->add_option("what", catalog_what, "devices | models | recipes | formats")
      ->check(CLI::IsMember({"devices", "models", "recipes", "formats"}))
      ->capture_default_str();
  return catalog;
}

// `rlsim bench`: the built-in benchmarks.
CLI::App* add_bench(CLI::App& app, BenchArgs& a) {
  auto* bench = app.add_subcommand(
      "bench", "Run a built-in benchmark and print measured figures (sim, quantize, verify: one core; runtime: --threads)");
  bench
      ->add_option(
          "what", a.what,
          "sim: 10 steps of a 1,024-device async pipeline, then `rlsim run` of the default scenario at 10^4 .. "
          "--max-requests requests (wall, requests/s, peak RSS); quantize: GB/s of quantising a 4096 x 4096 BF16 matrix to each "
          "format; verify: build and verify the precision-flow graphs of deepseek-v3 and kimi-k2; runtime: DRAM read "
          "bandwidth, batch-1 decode tok/s (with its fraction of the weight-read roofline, the GEMV calls' fixed cost and "
          "stream rate, the threads' cache-line round trip) and 512-token prefill tok/s per precision on synthetic weights (on a "
          "CPU with AMX, also the prefill without it); reload: the quantised weight reload "
          "lifecycle (restore, load, quantise, transform) for --cycles cycles, per-stage times and bytes, checked bit for bit "
          "against a fresh load; plan: a 1,000-point capacity-planning study of Qwen3-8B on up to 64 devices, points/s on "
          "--jobs threads")
      ->check(CLI::IsMember({"sim", "quantize", "verify", "runtime", "reload", "plan", "host"}))
      ->capture_default_str();
  bench->add_option(
      "--shape", a.runtime.shape,
      "runtime, reload: Hugging Face config.json whose shapes to use with synthetic weights (runtime default: SmolLM2-135M)");
  a.precision = bench
                    ->add_option("--precision", a.runtime.precisions,
                                 "runtime, reload: fp32 or recipes to measure (reload default: fp8-block)")
                    ->delimiter(',')
                    ->capture_default_str();
  bench
      ->add_option("--max-requests", a.max_requests,
                   "sim: largest run of the scaling series (10^4, 10^5, ... up to it; below 10^4: none)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{100'000'000}))
      ->capture_default_str();
  bench->add_option("--model", a.reload.model,
                    "reload: llama2.c checkpoint, Hugging Face directory, or synthetic-moe (a small MoE with synthetic weights)");
  bench->add_option("--cycles", a.reload.cycles, "reload: reload cycles")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  bench
      ->add_option("--check-every", a.reload.check_every,
                   "reload: also compare with a fresh engine every K cycles (0: after the last only)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  bench
      ->add_option("--perturbation", a.reload.perturbation,
                   "reload: relative size of the seeded weight update per cycle (rms of the update / rms of the tensor)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  bench->add_option("--seed", a.reload.seed, "reload: seed of the weight updates and probe tokens")->capture_default_str();
  bench->add_option("--threads", a.runtime.threads, "runtime: OpenMP threads")->check(CLI::Range(1, 1024))->capture_default_str();
  bench->add_option("--decode-tokens", a.runtime.decode_tokens, "runtime: decode steps timed per run")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  bench->add_option("--prefill-tokens", a.runtime.prefill_tokens, "runtime: prompt length of the prefill")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  bench->add_flag("--batch-invariant", a.runtime.batch_invariant,
                  "runtime: also time the batch-invariant kernels (ratio to the default kernels)");
  bench->add_option("--compare-gguf", a.runtime.compare_gguf,
                    "runtime: folder of llama-bench results (-o csv: its mean repetition; -o json: its best), e.g. -p 512 -n "
                    "128 on BF16, Q8_0 and Q4_0 models of the same shapes (docs/baseline/smollm2_random_gguf.py), or with "
                    "--llama-bench the folder of those GGUF files; prints each recipe's prefill and decode ratio to its weight "
                    "class, then llama.cpp's own decode roofline from the files' model_size");
  bench->add_option("--llama-bench", a.runtime.llama_bench,
                    "runtime: llama.cpp's llama-bench, run by rlsim on each --compare-gguf GGUF file right after the recipes "
                    "of its weight class (same -t, -p, -n as --threads, --prefill-tokens, --decode-tokens; -r --repeat; its "
                    "best repetition), so both are timed in the same minute");
  bench->add_option("--jobs,-j", a.jobs, "plan: parallel jobs (0: all cores)")->check(CLI::Range(0, 4096))->capture_default_str();
  bench->add_option("--repeat", a.repeat, "Runs to time (the best is reported)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  return bench;
}

// `rlsim quantize`: numbers through a format.
CLI::App* add_quantize(CLI::App& app, cli::QuantizeOptions& qo) {
  auto* quant = app.add_subcommand(
      "quantize", "Quantise numbers read from stdin to a format; print the dequantised values, then saturated count and SQNR");
  quant
      ->add_option("--format,-f", qo.format,
                   "Format: <element>[/<scaling>] or mxfp8 | mxfp4 | nvfp4 (elements: " + models::element_names() + ", e8m0)")
      ->required();
  quant->add_option("--scaling", qo.scaling,
                    "Scaling for a bare element: tensor, channel, token, group1xN, blockMxN, groupN, mx32, nv16");
  quant->add_option("--shape", qo.shape, "Tensor shape R,C (C = the reduction dimension blocks run along); default 1,N");
  quant->add_flag("--codes", qo.codes, "Print each element's code in hex after its value");
  quant->footer("Example: echo '1 1000 -0.3 nan' | rlsim quantize --format fp8-e4m3 --codes");
  return quant;
}

// `rlsim verify`: the unified-precision condition.
CLI::App* add_verify(CLI::App& app, cli::VerifyOptions& vo) {
  auto* verify = app.add_subcommand(
      "verify",
      "Check the unified-precision condition: does the rollout (inference) graph embed in the training forward graph with "
      "value-equivalent precision on every edge? Exit 0 consistent, 1 inconsistent, 2 bad input");
  verify->add_option("scenario", vo.scenario, "Scenario YAML file (model, training.precision, rollout.precision and kv_cache)");
  verify->add_option("--set,-s", vo.set, "Override a scenario key: dotted.key=value (YAML value), repeatable")->take_all();
  verify->add_option("--train", vo.train_graphml, "Training graph as GraphML (instead of a scenario; needs --infer)");
  verify->add_option("--infer", vo.infer_graphml, "Inference graph as GraphML (instead of a scenario; needs --train)");
  verify->add_option("--json", vo.json, "Write the verdict and every mismatch as JSON to FILE");
  verify->add_option("--dot", vo.dot_dir, "Write training.dot and inference.dot (Graphviz; mismatching edges in red) into DIR");
  verify->add_flag("--full", vo.full, "DOT: draw every layer and expert (default: collapse identical layers and experts)");
  verify->add_option("--graphml", vo.graphml_dir, "Write training.graphml and inference.graphml into DIR");
  verify->add_option("--vf2-budget", vo.vf2_budget_s, "Seconds each VF2 search may take when names do not anchor the graphs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  verify->add_flag("--quiet,-q", vo.quiet, "Print only the verdict line");
  verify->footer(
      "Examples:\n  rlsim verify scenarios/verify-qwen3-8b-bf16-train-fp8-block-rollout.yaml --json mismatches.json --dot "
      "graphs/\n"
      "  rlsim verify --train training.graphml --infer inference.graphml");
  return verify;
}

// `rlsim generate`: text from a real small model.
CLI::App* add_generate(CLI::App& app, cli::GenerateOptions& go) {
  auto* gen = app.add_subcommand(
      "generate", "Generate text with a real small model (llama2.c checkpoint or Hugging Face directory) in any precision");
  gen->add_option("--model,-m", go.model, "llama2.c checkpoint file or Hugging Face model directory")->required();
  gen->add_option("--tokenizer,-z", go.tokenizer,
                  "Tokenizer: llama2.c tok*.bin or tokenizer.json (default: found beside the model)");
  gen->add_option("--precision,-p", go.precision, "fp32 (reference) or a recipe: " + models::recipe_names())
      ->capture_default_str();
  gen->add_option("--prompt,-i", go.prompt, "Prompt text (BOS is prepended)");
  gen->add_option("--temperature,-t", go.temperature, "Sampling temperature; 0 is greedy")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  gen->add_option("--top-p", go.top_p, "Nucleus sampling: keep the most likely tokens up to this probability")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  gen->add_option("--steps,-n", go.steps, "Positions to fill, prompt included (llama2.c -n)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  gen->add_option("--seed", go.seed, "Sampling seed")->capture_default_str();
  gen->add_flag("--quiet,-q", go.quiet, "No tokens/s line on stderr");
  gen->footer("Example: rlsim generate --model ../shared/models/stories260K/stories260K.bin --temperature 0 --steps 200");
  return gen;
}

// `rlsim drift`: training-inference mismatch on a real model.
CLI::App* add_drift(CLI::App& app, cli::DriftCliOptions& dro) {
  auto* drift = app.add_subcommand(
      "drift",
      "Measure the training-inference mismatch on a real model: the rollout recipe samples with the decode path (KV cache), the "
      "training recipe scores the same tokens with the prefill path; log-prob mismatch, KL, TIS clipping vs rollout length");
  const analysis::DriftOptions kDriftDefaults;
  drift->add_option("file", dro.file,
                    fmt::format("Drift file (YAML) with any of the options below as keys: {}; options given here override it",
                                fmt::join(cli::drift_file_keys(), ", ")));
  drift->add_option("--model,-m", dro.model, "llama2.c checkpoint file or Hugging Face model directory");
  drift->add_option("--tokenizer,-z", dro.tokenizer, "Tokenizer (default: found beside the model)");
  drift
      ->add_option("--pairs", dro.pairs,
                   "TRAIN:ROLLOUT pairs, comma-separated; each side fp32 or a recipe (" + models::recipe_names() +
                       "), optionally +kv=FORMAT for its KV cache (e.g. fp8-block:fp8-block+kv=fp8-e4m3)")
      ->delimiter(',');
  drift
      ->add_option("--lengths", dro.lengths,
                   fmt::format("Response lengths to report, ascending (default {}); all samples run to the longest",
                               fmt::join(kDriftDefaults.lengths, ",")))
      ->delimiter(',');
  drift->add_option("--prompts", dro.prompts,
                    fmt::format("Prompts (default {}; built-in story openings, cycled, or --prompt-file lines)",
                                analysis::kDefaultDriftPrompts));
  drift->add_option("--prompt-file", dro.prompt_file, "Prompts, one per line (BOS is prepended)");
  drift->add_option("--samples", dro.samples,
                    fmt::format("Continuations sampled per prompt (default {})", kDriftDefaults.samples));
  drift->add_option(
      "--temperature,-t", dro.temperature,
      fmt::format("Sampling temperature > 0; log-probabilities are of logits / T (default {})", kDriftDefaults.temperature));
  drift->add_option("--seed", dro.seed, fmt::format("Sampling and bootstrap seed (default {})", kDriftDefaults.seed));
  drift->add_flag("--batch-invariant", dro.batch_invariant,
                  "Batch-invariant kernels on both sides: same reduction order in prefill and decode (identical recipes then "
                  "give delta = 0)");
  drift->add_option("--tis-cap", dro.tis_cap,
                    fmt::format("Cap C of token-level truncated importance sampling (default {})", kDriftDefaults.tis_cap));
  drift->add_option(
      "--bootstrap", dro.bootstrap,
      fmt::format("Bootstrap resamples of sequences for the 95 % intervals (default {}; 0: none)", kDriftDefaults.bootstrap));
  drift->add_option("--out,-o", dro.out, "Output directory (default: the file's out:, else out/<file stem>, else out/drift)");
  drift->add_flag("--no-plots", dro.no_plots, "Write the CSVs only");
  drift->add_flag("--quiet,-q", dro.quiet, "Print nothing on success");
  drift->footer(
      "Outputs: drift.csv (train,rollout,length,metric,value,ci_low,ci_high), per_token.csv, drift_vs_length.png, "
      "drift_vs_position.png, "
      "delta_histogram.png.\nExamples:\n  rlsim drift scenarios/drift-stories260k.yaml\n"
      "  rlsim drift --model ../shared/models/stories260K/stories260K.bin --pairs bf16:bf16,bf16:fp8-block --lengths 32,64,128 "
      "--prompts 4 --samples 4\n");
  return drift;
}

// `rlsim train`: GRPO on the host with a quantised rollout recipe.
CLI::App* add_train(CLI::App& app, cli::TrainCliOptions& to) {
  auto* train = app.add_subcommand(
      "train",
      "Real RL on the host: a GRPO loop on a real small model whose rollouts run in one recipe and whose trainer (FP32 master "
      "weights, AdamW) runs its forward in another; the new weights reach the rollout engine every step through the reload "
      "path. Per step: reward, KL(rollout || trainer), importance weights, gradient norm, entropy and measured phase times");
  train->add_option("files", to.files, fmt::format("Train files (YAML); keys: {}", fmt::join(cli::train_file_keys(), ", ")))
      ->required();
  train->add_option("--seeds", to.seeds, "Run every file once per seed (comma-separated; default: each file's seed)")
      ->delimiter(',');
  train->add_option("--steps", to.steps, "Override the file's steps");
  train->add_option("--out,-o", to.out, "Output directory (default: the file's out:, else out/<file stem>)");
  train->add_flag("--no-plots", to.no_plots, "Write the CSV only");
  train->add_flag("--quiet,-q", to.quiet, "Print nothing on success");
  train->footer(
      "Outputs: per run <file stem>/seed<N>/steps.csv and run.json; study.csv, summary.csv, reward.png, mismatch.png, "
      "phase_time.png.\nExamples:\n  rlsim train scenarios/train-lipogram-bf16.yaml\n"
      "  rlsim train scenarios/train-lipogram-*.yaml --seeds 1,2,3 --out docs/train-study");
  return train;
}

// `rlsim import verl|slime`: another framework's launch into a scenario.
struct ImportCommands {
  CLI::App* verl = nullptr;
  CLI::App* slime = nullptr;
};
ImportCommands add_import(CLI::App& app, cli::ImportOptions& vo, cli::ImportOptions& so) {
  auto* imp = app.add_subcommand("import", "Import another framework's launch as an rlsim scenario");
  imp->require_subcommand(1);
  auto common = [](CLI::App* c, cli::ImportOptions& o) {
    c->add_option("--device", o.device, "Catalog device of the cluster (rlsim catalog devices)")->capture_default_str();
    c->add_option("--model-config", o.model_config, "config.json of the model when its path matches no catalog model");
    c->add_option("--out,-o", o.out, "Scenario file to write (default: stdout)");
  };
  ImportCommands c;
  c.verl = imp->add_subcommand(
      "verl",
      "A verl launch script (python3 -m verl.trainer.main_ppo KEY=VALUE ...) or its Hydra overrides, into a scenario: verl's "
      "defaults for every key not given (--config-name ppo_megatron_trainer for Megatron's), a comment naming the verl key "
      "behind each value, warnings for keys that change performance but are not modelled");
  c.verl->add_option("args", vo.args, "SCRIPT, then KEY=VALUE overrides applied after it (or overrides alone, after --)");
  common(c.verl, vo);
  c.verl->add_option("--log", vo.log,
                     "A verl console log of the run: the prompt and response length distributions reproduce its "
                     "prompt_length/mean|max and response_length/mean|clip_ratio");
  c.verl->footer(
      "Examples:\n  rlsim import verl run_qwen3_8b_grpo.sh --device h100-sxm --out qwen3-8b.yaml\n"
      "  rlsim import verl -- data.train_batch_size=512 actor_rollout_ref.model.path=Qwen/Qwen3-8B");
  c.slime = imp->add_subcommand(
      "slime",
      "A slime launch script (python3 train.py|train_async.py --flag value ..., bash arrays of flags expanded) or its flags, "
      "into a scenario: slime's, Megatron's and SGLang's defaults for every flag not given, a comment naming the flag behind "
      "each value, warnings for flags that change performance but are not modelled");
  c.slime->add_option("args", so.args, "SCRIPT, then -- and --flag value overrides applied after it (or flags alone, after --)");
  common(c.slime, so);
  c.slime->footer(
      "Examples:\n  rlsim import slime scripts/run-qwen3-4B.sh --device h100-sxm --out qwen3-4b.yaml\n"
      "  rlsim import slime run-qwen3-4B.sh -- --rollout-num-gpus-per-engine 1 --n-samples-per-prompt 16");
  return c;
}

// `rlsim plan`: capacity-planning studies.
CLI::App* add_plan(CLI::App& app, cli::PlanOptions& po) {
  auto* plan = app.add_subcommand(
      "plan",
      "Capacity planning: simulate every point of a study (the cartesian product of swept scenario keys over a base scenario), "
      "rank them by the objective under the constraints and recommend one; results.csv, plan.json, step-time heatmap, memory-fit "
      "map, Pareto front. Under mpirun (MPI build) the points are split across the ranks");
  plan->add_option("study", po.study, "Study YAML file: base, sweep, objective, constraints (SCENARIO.md, Study files)")
      ->required();
  plan->add_option("--out,-o", po.out, "Output directory (default: output.dir of the study, else out/<study file stem>)");
  plan->add_option("--jobs,-j", po.jobs, "Parallel jobs (0: all cores; under MPI: the cores of the node / its ranks)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  plan->add_option("--set,-s", po.set,
                   "Override a key of every point's scenario: dotted.key=value (YAML value), repeatable; e.g. --set steps=1")
      ->take_all();
  plan->add_option("--heatmap", po.heatmap,
                   "The heatmap's x and y sweep keys (default: plots.heatmap of the study, else the first two swept)")
      ->delimiter(',');
  plan->add_option("--top", po.top, "Ranked rows to print (0: all)")->capture_default_str();
  plan->add_flag("--no-plots", po.no_plots, "Write results.csv and plan.json only");
  plan->add_flag("--quiet,-q", po.quiet, "Print only the recommended line");
  plan->add_option("--calibration", po.calibration,
                   "Cost-model parameters from FILE (rlsim calibrate's calibration.yaml) instead of the built-in fit");
  plan->footer(
      "Exit status: 0 (also when no point meets the constraints: 'recommended: none'), 2 bad study or base scenario.\n"
      "Examples:\n  rlsim plan scenarios/study-kimi-k2-rollout-h200.yaml\n"
      "  rlsim plan scenarios/study-qwen3-8b-h200-vs-ascend-950.yaml --jobs 2 --set steps=1 --out out/q8\n"
      "  mpirun -n 4 rlsim plan scenarios/study-rollout-length-qwen3-8b.yaml");
  return plan;
}

// `rlsim validate`: records against their published figures.
CLI::App* add_validate(CLI::App& app, cli::ValidateOptions& vao) {
  auto* validate = app.add_subcommand(
      "validate",
      "Simulate validation records (scenarios that mirror published RL runs, with the figures they published) and compare: "
      "predicted vs published with the relative error and whether it is within the record's band; validation.csv and a "
      "parity plot. Exit 1 when a figure is out of band");
  validate->add_option("records", vao.records,
                       "Record files (default: every record in the repository's scenarios/ and scenarios/validation/)");
  validate->add_option("--out,-o", vao.out, "Output directory")->capture_default_str();
  validate->add_option("--calibration", vao.calibration, "Cost-model parameters from FILE instead of the built-in fit");
  validate->add_option("--jobs,-j", vao.jobs, "Records simulated in parallel (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  validate->add_flag("--no-plots", vao.no_plots, "Write validation.csv only");
  validate->add_flag("--quiet,-q", vao.quiet, "Print only the statistics line");
  validate->footer(
      "A record is a scenario file with a validation: block (source, assumptions, figures); see README.md, 'Validation and "
      "calibration'.\nExamples:\n  rlsim validate\n  rlsim validate scenarios/validation/nemo-rl-llama3.1-8b-h100-16.yaml --out "
      "out/v\n");
  return validate;
}

// `rlsim calibrate`: fit the cost model to the records.
CLI::App* add_calibrate(CLI::App& app, cli::CalibrateOptions& cao) {
  auto* calibrate = app.add_subcommand(
      "calibrate",
      "Fit the cost model's free parameters (achieved HBM and tensor-core fractions per device, GEMM efficiency per training "
      "backend, engine overheads, MoE grouped-GEMM efficiency, per-step overhead) to validation records by least squares on "
      "log error (Eigen's Levenberg-Marquardt), with a leave-one-out check; writes calibration.yaml");
  calibrate->add_option("records", cao.records, "Record files (default: every record in the repository)");
  calibrate->add_option("--out,-o", cao.out, "Output directory (calibration.yaml, calibration.csv)")->capture_default_str();
  calibrate->add_option("--start", cao.start,
                        "Calibration to start from (default: every fitted parameter at its prior, the rest built-in)");
  calibrate->add_option("--verl-log", cao.verl_log,
                        "A verl console log of the run the one scenario given describes: fit what it identifies (its phase "
                        "times: timing_s/gen, old_log_prob, ref, update_actor, step) from the built-in calibration; prints "
                        "measured vs predicted per phase before and after");
  calibrate->add_option("--jobs,-j", cao.jobs, "Threads (0: all cores)")->check(CLI::Range(0, 4096))->capture_default_str();
  calibrate->add_flag("--no-loo", cao.no_loo, "Skip the leave-one-out refits");
  calibrate->add_flag("--quiet,-q", cao.quiet, "Print only the summary lines");
  return calibrate;
}

// `rlsim import verl|slime SCRIPT -- OVERRIDES...`: the words after `--` are the launch's own
// (slime's start with --), taken out of argv here (argc shortened to end before `--`) because
// CLI11 fills a positional once. Empty for every other command.
std::vector<std::string> take_import_overrides(int& argc, char** argv) {
  std::vector<std::string> overrides;
  if (argc > 2 && std::string_view(argv[1]) == "import") {
    for (int i = 2; i < argc; ++i) {
      if (std::string_view(argv[i]) != "--") continue;
      overrides.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  return overrides;
}

// What `command` returns, or the exit status of what it threw with its one line on stderr: bad
// input 2, an output that could not be written 4, a stop signal 128 + its number, anything else
// an internal error, 3 (the statuses the --help footer lists).
template <typename Command>
int exit_status_of(Command&& command) {
  try {
    return command();
  } catch (const sim::ScenarioError& e) {
    std::cerr << cli::input_error_line(e);
    return 2;
  } catch (const models::ModelFileError& e) {
    std::cerr << cli::input_error_line(e);
    return 2;
  } catch (const models::GraphError& e) {
    std::cerr << cli::input_error_line(e);
    return 2;
  } catch (const analysis::OutputError& e) {
    std::cerr << cli::output_error_line(e);
    return 4;
  } catch (const std::filesystem::filesystem_error& e) {  // the environment's, wherever it surfaced
    std::cerr << cli::output_error_line(e);
    return 4;
  } catch (const sim::Interrupted& e) {
    std::cerr << cli::interrupted_line(e);
    return 128 + e.signal_number();
  } catch (const std::exception& e) {
    std::cerr << cli::internal_error_line(e);
    return 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "rlsim: discrete-event simulator of LLM reinforcement-learning pipelines with numeric precision as a first-class input"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "rlsim 0.1.0");
  app.footer(
      "Exit status: 0 success, 1 a check failed, 2 bad input, 3 internal error (a bug), 4 an output could not be written "
      "(disk full, read-only, permission: the path and the reason are named), 130/143 stopped by SIGINT/SIGTERM.\nScenario "
      "format: see README.md and "
      "SCENARIO.md.");

  RunOptions ro;
  std::string catalog_what = "devices";
  BenchArgs ba;
  cli::QuantizeOptions qo;
  cli::VerifyOptions vo;
  cli::GenerateOptions go;
  cli::DriftCliOptions dro;
  cli::PlanOptions po;
  cli::ValidateOptions vao;
  cli::CalibrateOptions cao;
  CLI::App* run = add_run(app, ro);
  CLI::App* catalog = add_catalog(app, catalog_what);
  CLI::App* bench = add_bench(app, ba);
  CLI::App* quant = add_quantize(app, qo);
  CLI::App* verify = add_verify(app, vo);
  CLI::App* gen = add_generate(app, go);
  CLI::App* drift = add_drift(app, dro);
  cli::TrainCliOptions tro;
  CLI::App* train = add_train(app, tro);
  cli::ImportOptions ivo, iso;
  const ImportCommands imports = add_import(app, ivo, iso);
  CLI::App* plan = add_plan(app, po);
  CLI::App* validate = add_validate(app, vao);
  CLI::App* calibrate = add_calibrate(app, cao);

  sim::install_stop_handlers();
  const std::vector<std::string> import_overrides = take_import_overrides(argc, argv);
  try {
    app.parse(argc, argv);
    ivo.args.insert(ivo.args.end(), import_overrides.begin(), import_overrides.end());
    iso.args.insert(iso.args.end(), import_overrides.begin(), import_overrides.end());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return exit_status_of([&] {
    if (*run) return cmd_run(ro);
    if (*catalog) return cmd_catalog(catalog_what);
    if (*bench) {
      if (ba.precision->count() > 0) ba.reload.precisions = ba.runtime.precisions;
      return cmd_bench(ba.what, ba.repeat, ba.runtime, ba.reload, ba.jobs, ba.max_requests);
    }
    if (*quant) return cli::cmd_quantize(qo, std::cin, std::cout);
    if (*verify) return cli::cmd_verify(vo, std::cout);
    if (*gen) return cli::cmd_generate(go, std::cout, std::cerr);
    if (*drift) return cli::cmd_drift(dro, std::cout, std::cerr);
    if (*train) return cli::cmd_train(tro, std::cout, std::cerr);
    if (*imports.verl) return cli::cmd_import_verl(ivo, std::cout, std::cerr);
    if (*imports.slime) return cli::cmd_import_slime(iso, std::cout, std::cerr);
    if (*plan) return cli::cmd_plan(po, std::cout, std::cerr);
    if (*validate) return cli::cmd_validate(vao, std::cout, std::cerr);
    if (*calibrate) return cli::cmd_calibrate(cao, std::cout, std::cerr);
    return 0;
  });
}
