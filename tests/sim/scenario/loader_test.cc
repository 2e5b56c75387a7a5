#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "models/runtime/model.h"
#include "sim/scenario/calibration.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/study.h"
#include "sim/scenario/units.h"

namespace rlsim::sim {
namespace {

namespace fs = std::filesystem;

// A scenario file written into a fresh temporary directory.
class TempScenario {
 public:
  explicit TempScenario(const std::string& text, const std::string& name = "s.yaml") {
    dir_ = fs::temp_directory_path() / ("rlsim_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(dir_);
    path_ = (dir_ / name).string();
    std::ofstream(path_) << text;
  }
  ~TempScenario() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& path() const { return path_; }
  fs::path dir() const { return dir_; }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
  std::string path_;
};

const char* kMinimal = R"(name: minimal
model: qwen3-8b
cluster:
  device: h100-sxm
  nodes: 1
  devices_per_node: 8
workload:
  prompts_per_step: 4
  samples_per_prompt: 2
  prompt_tokens: {dist: fixed, value: 100}
  response_tokens: {dist: fixed, value: 200}
)";

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  TempScenario t(text);
  try {
    load_scenario(t.path(), overrides);
  } catch (const ScenarioError& e) {
    std::string msg = e.what();
    // Strip the temporary path so tests can compare the location (and a command naming it).
    for (auto pos = msg.find(t.path()); pos != std::string::npos; pos = msg.find(t.path(), pos))
      msg.replace(pos, t.path().size(), "FILE");
    return msg;
  }
  return "no error";
}

TEST(Units, ParseQuantities) {
  EXPECT_DOUBLE_EQ(parse_quantity("96 GB", Dimension::kBytes), 96e9);
  EXPECT_DOUBLE_EQ(parse_quantity("512 MiB", Dimension::kBytes), 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_quantity("4.8 TB/s", Dimension::kBandwidth), 4.8e12);
  EXPECT_DOUBLE_EQ(parse_quantity("400 Gb/s", Dimension::kBandwidth), 50e9);
  EXPECT_DOUBLE_EQ(parse_quantity("2 us", Dimension::kTime), 2e-6);
  EXPECT_DOUBLE_EQ(parse_quantity("900 s", Dimension::kTime), 900.0);
  EXPECT_DOUBLE_EQ(parse_quantity("989 TFLOPS", Dimension::kFlops), 989e12);
  EXPECT_DOUBLE_EQ(parse_quantity("1e3GB", Dimension::kBytes), 1e12);
  EXPECT_THROW(parse_quantity("96", Dimension::kBytes), std::invalid_argument);       // no unit
  EXPECT_THROW(parse_quantity("96 GB/s", Dimension::kBytes), std::invalid_argument);  // wrong dimension
  EXPECT_THROW(parse_quantity("-1 GB", Dimension::kBytes), std::invalid_argument);
  EXPECT_THROW(parse_quantity("GB", Dimension::kBytes), std::invalid_argument);
  // Written in a named unit, read back to the same value.
  EXPECT_EQ(quantity_in(512.0 * 1024 * 1024, Dimension::kBytes, "MiB"), "512 MiB");
  EXPECT_EQ(quantity_in(2e-6, Dimension::kTime, "us"), "2 us");
  EXPECT_EQ(quantity_in(4.8e12, Dimension::kBandwidth, "GB/s"), "4800 GB/s");
  EXPECT_DOUBLE_EQ(parse_quantity(quantity_in(989e12, Dimension::kFlops, "TFLOPS"), Dimension::kFlops), 989e12);
  EXPECT_THROW(quantity_in(1.0, Dimension::kBytes, "GB/s"), std::invalid_argument);  // not a unit of bytes
}

TEST(Loader, MinimalScenarioGetsDefaults) {
  TempScenario t(kMinimal, "minimal.yaml");
  const Scenario s = load_scenario(t.path());
  EXPECT_EQ(s.name, "minimal");
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(s.cluster.devices(), 8);
  EXPECT_EQ(s.placement.rollout_devices, 8);
  EXPECT_EQ(s.rollout.precision.name, "bf16");
  EXPECT_EQ(s.rollout.max_num_seqs, 256);
  EXPECT_DOUBLE_EQ(s.rollout.memory_utilization, 0.85);
  EXPECT_DOUBLE_EQ(s.cluster.device.memory_bytes, 80e9);
  EXPECT_DOUBLE_EQ(s.cluster.intra_node.bandwidth_bytes_per_s, 450e9);
  EXPECT_EQ(s.output.dir, (fs::path("out") / "minimal").string());
  // Efficiencies come from the built-in calibration: device compute fraction x backend dense GEMM.
  const auto& cal = sim::builtin_calibration();
  EXPECT_DOUBLE_EQ(s.training.efficiency.compute, cal.device(s.cluster.device.name).compute * cal.fsdp.dense);
  EXPECT_DOUBLE_EQ(s.rollout.efficiency.memory, cal.device(s.cluster.device.name).memory);
  EXPECT_DOUBLE_EQ(s.training.step_overhead_s, cal.step_overhead_s);
  EXPECT_EQ(s.workload.sequences_per_step(), 8);
}

TEST(Loader, UnknownKeyNamesFileLineColumn) {
  const std::string e = error_of(std::string(kMinimal) + "rollout:\n  tensor_paralel: 2\n");
  EXPECT_EQ(e.rfind("FILE:13:3: unknown key 'rollout.tensor_paralel'", 0), 0u) << e;
  EXPECT_NE(e.find("tensor_parallel"), std::string::npos) << "should list the valid keys: " << e;
}

// Each command's reader tells a file meant for another command by the keys only that kind has,
// and names the command to run it with; a file with none of the telling keys (or with its own
// kind's) gets the reader's own errors.
TEST(Loader, FileOfAnotherCommandNamesThatCommand) {
  EXPECT_EQ(error_of("name: d\nmodel: m.bin\npairs: [bf16:bf16]\n"),
            "FILE:1:1: this is a drift file (pairs:), not a scenario; run it with `rlsim drift FILE`");
  EXPECT_EQ(error_of("model: m.bin\ntask: lipogram-e\ntraining_precision: bf16\n"),
            "FILE:1:1: this is a train file (task:, training_precision:), not a scenario; run it with `rlsim train FILE`");
  EXPECT_EQ(error_of("base: b.yaml\nsweep: {}\n"),
            "FILE:1:1: this is a study file (base:, sweep:), not a scenario; run it with `rlsim plan FILE`");
  // base without sweep is not a study; pairs beside a scenario's own keys is the scenario's typo.
  EXPECT_EQ(error_of("base: b.yaml\n" + std::string(kMinimal)).rfind("FILE:1:1: unknown key 'base'", 0), 0u);
  EXPECT_EQ(error_of(std::string(kMinimal) + "pairs: 1\n").rfind("FILE:12:1: unknown key 'pairs'", 0), 0u);
  TempScenario scenario(kMinimal);
  try {
    load_study(scenario.path());
    ADD_FAILURE() << "a scenario read as a study";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()),
              scenario.path() + ":1:1: this is a scenario (cluster:, workload:), not a study file; run it with `rlsim run " +
                  scenario.path() + "`");
  }
}

// YAML must be Unicode, and its strings reach JSON outputs: a byte that is not well-formed
// UTF-8 is bad input at its line and column (a study with one ended in an internal error when
// plan.json was written, found by tests/fuzz).
TEST(Loader, InvalidUtf8IsRejectedAtItsByte) {
  const std::string e = error_of(std::string(kMinimal) + "name: caf\xc3\xa9 \xff\n");
  EXPECT_EQ(e.rfind("FILE:12:13: not valid UTF-8 (byte 0xFF)", 0), 0u) << e;  // column in bytes
  const std::string name = std::string(kMinimal) + "name: ";
  // Well-formed: 2-, 3- and 4-byte sequences at their bounds (U+00A0: the 2-byte range below it holds the C1 controls).
  for (const char* ok :
       {"\xc2\xa0", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_EQ(error_of(name + ok + "\n"), "no error") << ok;
  }
  // Overlong forms, a surrogate, above U+10FFFF, a lone continuation byte, a truncated sequence.
  for (const char* bad : {"\xc0\xaf", "\xc1\xbf", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80",
                          "\xf5\x80\x80\x80", "\x80", "\xe2\x82"}) {
    EXPECT_NE(error_of(name + bad + "\n").find("not valid UTF-8"), std::string::npos) << bad;
  }
  EXPECT_NE(error_of(kMinimal, {"name=\xfe"}).find("not valid UTF-8"), std::string::npos);
  // YAML's printable set: no C0 controls but tab, LF, CR; no DEL, no C1 controls but NEL, no
  // U+FFFE / U+FFFF (a study with a U+0001 in its name reached plan.json as invalid UTF-8).
  for (const char* ok : {"a\tb", "\xc2\x85", "\xc2\xa0", "\xef\xbf\xbd"}) EXPECT_EQ(error_of(name + ok + "\n"), "no error") << ok;
  for (const char* bad : {"a\x01", "\x7f", "\xc2\x80", "\xc2\x9f", "\xef\xbf\xbe", "\xef\xbf\xbf"}) {
    EXPECT_NE(error_of(name + bad + "\n").find("control character"), std::string::npos) << bad;
  }
}

TEST(Loader, NumberWithoutUnitIsRejected) {
  const std::string e = error_of(std::string(kMinimal) + "weight_sync:\n  bucket: 512\n");
  EXPECT_EQ(e.rfind("FILE:13:11: 'weight_sync.bucket': '512' has no unit", 0), 0u) << e;
}

TEST(Loader, UnknownDeviceListsCatalog) {
  std::string text = kMinimal;
  text.replace(text.find("h100-sxm"), 8, "h1000");
  const std::string e = error_of(text);
  EXPECT_EQ(e.rfind("FILE:4:11: unknown device 'h1000'", 0), 0u) << e;
  EXPECT_NE(e.find("h200"), std::string::npos) << e;
}

TEST(Loader, MissingRequiredKey) {
  std::string text = kMinimal;
  text.replace(text.find("  nodes: 1\n"), 11, "");
  EXPECT_NE(error_of(text).find("missing required key 'cluster.nodes'"), std::string::npos) << error_of(text);
}

TEST(Loader, BadValuesAreLocated) {
  EXPECT_NE(error_of(std::string(kMinimal) + "steps: many\n").find("FILE:12:8: 'steps' must be an integer"), std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "rollout: {precision: fp7}\n").find("unknown recipe 'fp7'"), std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "rollout: {tensor_parallel: 3}\n").find("must divide the 8 rollout devices"),
            std::string::npos);
  // rollout.data_parallel: the engine is TP x DP devices; EP divides it, and the engine divides the rollout devices.
  EXPECT_NE(error_of(std::string(kMinimal) + "rollout: {tensor_parallel: 2, data_parallel: 3}\n")
                .find("FILE:12:46: rollout.tensor_parallel x data_parallel (2 x 3) must divide the 8 rollout devices"),
            std::string::npos)
      << error_of(std::string(kMinimal) + "rollout: {tensor_parallel: 2, data_parallel: 3}\n");
  std::string moe = kMinimal;
  moe.replace(moe.find("qwen3-8b"), 8, "qwen3-30b-a3b");
  EXPECT_NE(error_of(moe + "rollout: {tensor_parallel: 2, data_parallel: 2, expert_parallel: 8}\n")
                .find("rollout.expert_parallel (8) must divide the engine's tensor_parallel x data_parallel = 4 devices"),
            std::string::npos);
  EXPECT_EQ(error_of(moe + "rollout: {tensor_parallel: 2, data_parallel: 4, expert_parallel: 8}\n"), "no error");
  EXPECT_NE(error_of(std::string(kMinimal) + "rollout: {data_parallel: 0}\n").find("data_parallel"), std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "schedule: {mode: one-step-off}\n").find("needs placement.mode: disaggregated"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "rollout: {expert_parallel: 2, tensor_parallel: 2}\n").find("needs an MoE model"),
            std::string::npos);
  EXPECT_NE(error_of("name: [unclosed\n").find("YAML syntax error"), std::string::npos);
  // DeepSpeed's CPU Adam belongs to ZeRO-Offload (fsdp), in the training section and in a critic.
  const std::string ds = "training: {backend: megatron, optimizer: {cpu_adam: true, cpu_adam_kernel: deepspeed}}\n";
  EXPECT_EQ(error_of(std::string(kMinimal) + ds).rfind("FILE:12:21: training.backend: megatron with", 0), 0u)
      << error_of(std::string(kMinimal) + ds);
  EXPECT_EQ(error_of(std::string(kMinimal) + "training: {optimizer: {cpu_adam: true, cpu_adam_kernel: deepspeed}}\n"),
            "no error");
  EXPECT_NE(error_of(std::string(kMinimal) + "training: {optimizer: {cpu_adam: true, cpu_adam_kernel: deepspeed}}\n"
                                             "algorithm: {name: ppo, critic: {backend: megatron}}\n")
                .find("algorithm.critic.backend: megatron with training.optimizer.cpu_adam_kernel: deepspeed"),
            std::string::npos);
}

TEST(Loader, RecipeNeedsAComputeRateOnTheDevice) {
  std::string text = kMinimal;
  text.replace(text.find("  device: h100-sxm\n"), 19,
               "  device: {name: fp8only, memory: 64 GB, memory_bandwidth: 2 TB/s, compute: {fp8: 1000 TFLOPS}}\n");
  EXPECT_NE(error_of(text).find("device 'fp8only' has no compute rate usable for the rollout recipe 'bf16'"), std::string::npos)
      << error_of(text);
  TempScenario t(text);
  EXPECT_NO_THROW(load_scenario(t.path(), {"rollout.precision=fp8-block", "training.precision=fp8-block"}));
  // A PPO critic's own recipe is checked the same way, at its precision key.
  const std::string critic = text +
                             "rollout: {precision: fp8-block}\ntraining: {precision: fp8-block}\n"
                             "algorithm: {name: ppo, critic: {precision: bf16}}\n";
  EXPECT_NE(
      error_of(critic).find("FILE:14:44: device 'fp8only' has no compute rate usable for the algorithm.critic recipe 'bf16'"),
      std::string::npos)
      << error_of(critic);
}

TEST(Loader, OverridesApplyAndReportThemselves) {
  TempScenario t(kMinimal);
  const Scenario s =
      load_scenario(t.path(), {"rollout.precision=int4-w4a16-g32", "cluster.nodes=2", "rollout.tensor_parallel=2"});
  EXPECT_EQ(s.rollout.precision.name, "int4-w4a16-g32");
  EXPECT_EQ(s.cluster.devices(), 16);
  EXPECT_EQ(s.rollout.tensor_parallel, 2);
  EXPECT_EQ(error_of(kMinimal, {"rollout.precison=fp8-block"}).rfind("--set rollout.precison=fp8-block: unknown key", 0), 0u);
  EXPECT_EQ(error_of(kMinimal, {"cluster.nodes=two"}).rfind("--set cluster.nodes=two: 'cluster.nodes' must be an integer", 0),
            0u);
  EXPECT_NE(error_of(kMinimal, {"novalue"}).find("expected dotted.key=value"), std::string::npos);
}

// The location of an error is data as well as text, so callers (rlsim plan) restate it without
// parsing the message.
TEST(Loader, ErrorsCarryTheirLocation) {
  TempScenario t(std::string(kMinimal) + "rollout:\n  tensor_paralel: 2\n");
  try {
    load_scenario(t.path());
    ADD_FAILURE() << "no error";
  } catch (const ScenarioKeyError& e) {
    EXPECT_EQ(e.where().file, t.path());
    EXPECT_EQ(e.where().line, 13);
    EXPECT_EQ(e.where().column, 3);
    EXPECT_EQ(e.where().key, "rollout.tensor_paralel");
    EXPECT_TRUE(e.where().override_text.empty());
    EXPECT_EQ(e.detail().rfind("unknown key 'rollout.tensor_paralel'", 0), 0u) << e.detail();
    EXPECT_EQ(std::string(e.what()), e.where().prefix() + e.detail());
  }
  TempScenario ok(kMinimal);
  try {
    load_scenario(ok.path(), {"cluster.nodes=two"}, "sweep");
    ADD_FAILURE() << "no error";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.where().key, "cluster.nodes");
    EXPECT_EQ(e.where().override_text, "cluster.nodes=two");
    EXPECT_EQ(e.where().override_label, "sweep");
    EXPECT_EQ(e.where().line, 0) << "an override has no line in the file";
    EXPECT_EQ(e.where().prefix(), "sweep cluster.nodes=two: ");
  }
}

TEST(Loader, InlineRecipeOverridesBase) {
  TempScenario t(
      std::string(kMinimal) +
      "rollout:\n  precision:\n    base: fp8-block\n    kv_cache: fp8-e4m3/tensor\n    lm_head: {weight: fp8-e4m3/channel}\n");
  const Scenario s = load_scenario(t.path());
  EXPECT_EQ(s.rollout.precision.linear.weight.str(), "fp8-e4m3/block128x128");
  EXPECT_EQ(s.rollout.precision.kv_cache.str(), "fp8-e4m3/tensor");
  EXPECT_EQ(s.rollout.precision.lm_head.weight.str(), "fp8-e4m3/channel");
  EXPECT_EQ(s.rollout.precision.lm_head.activation.str(), "bf16");
}

TEST(Loader, InlineDeviceAndModel) {
  TempScenario t(R"(name: inline
model:
  name: my-30b-a3b
  layers: 48
  hidden: 2048
  intermediate: 6144
  heads: 32
  kv_heads: 4
  head_dim: 128
  vocab: 151936
  tied_embeddings: false
  moe: {experts: 128, active: 8, expert_intermediate: 768, shared_experts: 0, dense_layers: 0}
cluster:
  device:
    name: h20
    memory: 96 GB
    memory_bandwidth: 4.0 TB/s
    compute: {bf16: 148 TFLOPS, fp8: 296 TFLOPS}
    intra_node: {bandwidth: 450 GB/s, latency: 2 us}
    inter_node: {bandwidth: 50 GB/s, latency: 5 us}
  nodes: 1
  devices_per_node: 8
workload:
  prompts_per_step: 1
  samples_per_prompt: 1
  prompt_tokens: {dist: uniform, min: 10, max: 20}
  response_tokens: {dist: lognormal, median: 100, sigma: 0.5, max: 400}
)");
  const Scenario s = load_scenario(t.path());
  EXPECT_EQ(s.model.params().total(), sim::catalog_model("qwen3-30b-a3b").params().total());
  EXPECT_DOUBLE_EQ(s.cluster.device.rate(models::ComputeType::kFp8), 296e12);
  EXPECT_DOUBLE_EQ(s.cluster.device.memory_bytes, 96e9);
  EXPECT_EQ(s.cluster.device.topology, "unspecified");
  // A topology outside the list is located; a known one is kept.
  std::string text = std::string(kMinimal);
  text.replace(text.find("  device: h100-sxm\n"), 19,
               "  device: {name: x, topology: nvlinkk, memory: 80 GB, memory_bandwidth: 3 TB/s, compute: {bf16: 900 TFLOPS}}\n");
  EXPECT_NE(error_of(text).find("unknown topology 'nvlinkk' (one of nvswitch, pcie, infinity-fabric, hccs, ub, shared-memory)"),
            std::string::npos)
      << error_of(text);
}

// The catalog's devices (issue 26's A100 / A800 / H800 / L20 / MI300X / MI325X / GB200 / Ascend
// 910B / Atlas A3 die beside the earlier ones): each loads, states its topology, and keeps its
// datasheet figures in the relations the datasheets give.
TEST(Catalog, DevicesStateTheirTopologyAndDatasheetFigures) {
  for (const std::string& name : catalog_device_names()) {
    EXPECT_NE(catalog_device(name).topology, "unspecified") << name;
  }
  for (const char* name :
       {"a100-40gb", "a100-80gb", "a800", "h800", "l20", "mi300x", "mi325x", "gb200", "ascend-910b", "atlas-a3-die"}) {
    const models::Device d = catalog_device(name);
    EXPECT_GT(d.memory_bytes, 0) << name;
    EXPECT_GT(d.rate(models::ComputeType::kBf16), 0) << name;
  }
  // A800 = A100 80GB with NVLink cut from 600 to 400 GB/s; A100 has no FP8 (falls back to BF16).
  EXPECT_DOUBLE_EQ(catalog_device("a800").memory_bandwidth_bytes_per_s, catalog_device("a100-80gb").memory_bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(catalog_device("a800").intra_node.bandwidth_bytes_per_s * 1.5,
                   catalog_device("a100-80gb").intra_node.bandwidth_bytes_per_s);
  EXPECT_EQ(*catalog_device("a100-80gb").effective(models::ComputeType::kFp8), models::ComputeType::kBf16);
  // L20 has no NVLink: its scale-up link is PCIe. MI325X = MI300X compute with more, faster HBM.
  EXPECT_EQ(catalog_device("l20").topology, "pcie");
  EXPECT_LT(catalog_device("l20").intra_node.bandwidth_bytes_per_s, 32e9);
  EXPECT_DOUBLE_EQ(catalog_device("mi325x").rate(models::ComputeType::kFp8),
                   catalog_device("mi300x").rate(models::ComputeType::kFp8));
  EXPECT_GT(catalog_device("mi325x").memory_bytes, catalog_device("mi300x").memory_bytes);
  // The Atlas A3 die is half of the 910C card, as frameworks see it (64 GB per device).
  EXPECT_DOUBLE_EQ(catalog_device("atlas-a3-die").memory_bytes * 2, catalog_device("ascend-910c").memory_bytes);
  EXPECT_DOUBLE_EQ(catalog_device("atlas-a3-die").rate(models::ComputeType::kBf16) * 2,
                   catalog_device("ascend-910c").rate(models::ComputeType::kBf16));
}

TEST(Loader, HfConfigOfSmolLM2) {
  const fs::path cfg = fs::path(RLSIM_SHARED_DIR) / "models/smollm2-135m-tokenizer/config.json";
  if (!fs::exists(cfg)) GTEST_SKIP() << "shared models not present at " << cfg;
  TempScenario t(std::string(kMinimal).replace(std::string(kMinimal).find("model: qwen3-8b"), 15,
                                               "model: {hf_config: " + fs::absolute(cfg).string() + "}"));
  const Scenario s = load_scenario(t.path());
  EXPECT_EQ(s.model.layers, 30);
  EXPECT_EQ(s.model.hidden, 576);
  EXPECT_EQ(s.model.kv_heads, 3);
  EXPECT_EQ(s.model.head_dim, 64);
  EXPECT_TRUE(s.model.tied_embeddings);
  // SmolLM2-135M has 134,515,008 parameters (model card).
  EXPECT_EQ(s.model.params().total(), 134515008);
}

TEST(Loader, HfConfigErrorsNameTheFile) {
  TempScenario t("{}");
  const auto cfg = (t.dir() / "config.json").string();
  std::ofstream(cfg) << R"({"hidden_size": 64})";
  try {
    model_from_hf_config(cfg);
    FAIL() << "expected an error";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: missing integer key 'num_hidden_layers'"), std::string::npos) << e.what();
  }
}

// One config.json reader: the simulator's architecture and the runtime's configuration agree,
// including the Qwen2 family's q/k/v biases (implied by model_type unless attention_bias says).
TEST(Loader, HfConfigOneReaderForSimulatorAndRuntime) {
  TempScenario t("{}");
  const auto cfg = (t.dir() / "config.json").string();
  for (const auto& [extra, bias] :
       std::vector<std::pair<std::string, bool>>{{R"("model_type": "qwen2")", true},
                                                 {R"("model_type": "qwen2", "attention_bias": false)", false},
                                                 {R"("model_type": "llama")", false},
                                                 {R"("model_type": "llama", "attention_bias": true)", true}}) {
    std::ofstream(cfg) << "{" << extra
                       << R"(, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "vocab_size": 100})";
    const models::ModelArch a = model_from_hf_config(cfg);
    const models::TransformerConfig r = models::read_hf_config(cfg);
    EXPECT_EQ(a.qkv_bias, bias) << extra;
    EXPECT_EQ(r.qkv_bias, bias) << extra;
    EXPECT_EQ(a.head_dim, r.head_dim);
    EXPECT_EQ(a.kv_heads, r.kv_heads);
  }
}

TEST(Distribution, CsvColumnAndErrors) {
  TempScenario t(std::string(kMinimal).replace(std::string(kMinimal).find("{dist: fixed, value: 200}"), 25,
                                               "{dist: csv, file: lengths.csv, column: response_length}"));
  std::ofstream(t.dir() / "lengths.csv") << "id,response_length\n1,100\n2,\"300\"\n3,500\n";
  const Scenario s = load_scenario(t.path());
  EXPECT_EQ(s.workload.response_tokens.samples, (std::vector<std::int64_t>{100, 300, 500}));
  EXPECT_DOUBLE_EQ(s.workload.response_tokens.mean(), 300.0);
  Rng rng(3);
  for (int i = 0; i < 100; ++i) {
    const auto v = s.workload.response_tokens.sample(rng);
    EXPECT_TRUE(v == 100 || v == 300 || v == 500);
  }
  std::ofstream(t.dir() / "lengths.csv") << "id,response_length\n1,100\n2,abc\n";
  try {
    load_scenario(t.path());
    FAIL();
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("lengths.csv:3: column 'response_length' must hold a positive integer"),
              std::string::npos)
        << e.what();
  }
}

TEST(Distribution, LognormalMedianAndTruncation) {
  LengthDist d;
  d.kind = LengthDist::Kind::kLognormal;
  d.median = 3000;
  d.sigma = 0.9;
  d.max = 20480;
  Rng rng(11);
  std::vector<std::int64_t> v;
  for (int i = 0; i < 20001; ++i) v.push_back(d.sample(rng));
  std::nth_element(v.begin(), v.begin() + 10000, v.end());
  EXPECT_NEAR(static_cast<double>(v[10000]), 3000.0, 90.0);  // sample median within 3 %
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 20480);   // P(X > 20480) = 1.7 %: hits the cap
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 1);
}

TEST(Loader, ResolvedYamlReloads) {
  TempScenario t(kMinimal);
  const Scenario s = load_scenario(t.path(), {"rollout.precision=fp8-block"});
  TempScenario again(resolved_yaml(s));
  const Scenario s2 = load_scenario(again.path());
  EXPECT_EQ(s2.rollout.precision, s.rollout.precision);
  EXPECT_EQ(s2.model.params().total(), s.model.params().total());
  EXPECT_DOUBLE_EQ(s2.cluster.device.memory_bandwidth_bytes_per_s, s.cluster.device.memory_bandwidth_bytes_per_s);
  EXPECT_EQ(resolved_yaml(s2), resolved_yaml(s));
}

}  // namespace
}  // namespace rlsim::sim
