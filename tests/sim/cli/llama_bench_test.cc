// llama-bench's JSON output as bench runtime reads it (sim/cli/llama_bench): the -o json array and
// the -o jsonl lines, the best sample against the mean, and what is refused.
#include "sim/cli/llama_bench.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "sim/scenario/scenario.h"

namespace rlsim::cli {
namespace {

// One test object as llama-bench 2026 prints it (a subset of its fields), with `extra` fields.
std::string test_object(const std::string& type, int n_prompt, int n_gen, const std::string& extra = "") {
  return fmt::format(
      R"({{"model_type": "llama 135M {}", "model_size": 89941248, "n_threads": 2, "n_prompt": {}, "n_gen": {}, "avg_ts": 150.5{}}})",
      type, n_prompt, n_gen, extra);
}

// The message of the sim::ScenarioError `text` raises, or "" when it parses.
std::string refusal(const std::string& text) {
  try {
    parse_llama_bench_json(text, "out.json");
  } catch (const sim::ScenarioError& e) {
    return e.what();
  }
  return "";
}

TEST(LlamaBenchJson, ArrayGivesEveryTestWithItsBestSample) {
  const std::string text =
      fmt::format("[\n  {},\n  {}\n]\n", test_object("Q4_0", 512, 0, R"(, "samples_ts": [140.0, 161.25, 150.0])"),
                  test_object("Q4_0", 0, 128));
  const auto tests = parse_llama_bench_json(text, "out.json");
  ASSERT_EQ(tests.size(), 2u);
  EXPECT_EQ(tests[0].type, "Q4_0");
  EXPECT_EQ(tests[0].n_prompt, 512);
  EXPECT_EQ(tests[0].n_gen, 0);
  EXPECT_EQ(tests[0].n_threads, 2);
  EXPECT_DOUBLE_EQ(tests[0].avg_ts, 150.5);
  ASSERT_TRUE(tests[0].best_ts.has_value());
  EXPECT_DOUBLE_EQ(*tests[0].best_ts, 161.25);
  EXPECT_EQ(tests[0].model_size, 89941248);
  EXPECT_EQ(tests[0].where, "out.json: test 1");
  EXPECT_FALSE(tests[1].best_ts.has_value());  // no samples_ts: the mean stands
  EXPECT_EQ(tests[1].where, "out.json: test 2");
}

TEST(LlamaBenchJson, JsonlLinesAreNamedByLine) {
  const std::string text = fmt::format("{}\n\n{}\n", test_object("BF16", 0, 64), test_object("Q8_0", 0, 64));
  const auto tests = parse_llama_bench_json(text, "out.jsonl");
  ASSERT_EQ(tests.size(), 2u);
  EXPECT_EQ(tests[0].type, "BF16");
  EXPECT_EQ(tests[1].type, "Q8_0");
  EXPECT_EQ(tests[1].where, "out.jsonl:3");
  EXPECT_TRUE(parse_llama_bench_json("[]", "empty.json").empty());
  EXPECT_TRUE(parse_llama_bench_json("", "empty.jsonl").empty());
}

TEST(LlamaBenchJson, RefusesWhatIsNotLlamaBenchOutput) {
  EXPECT_EQ(refusal("[{\"model_type\": \"x Q4_0\""), "out.json: not a JSON array of llama-bench tests (llama-bench -o json)");
  EXPECT_EQ(refusal("{\"a\": 1}\nnot json\n"), "out.json:1: expected the field 'model_type' (llama-bench -o json output)");
  EXPECT_EQ(refusal(fmt::format("{}\nnot json\n", test_object("Q4_0", 0, 1))),
            "out.json:2: not a JSON object (llama-bench -o jsonl)");
  EXPECT_EQ(refusal("[1]"), "out.json: test 1: expected an object (a llama-bench -o json test)");
  EXPECT_EQ(refusal(fmt::format("[{}]", test_object("Q4_0", -1, 1))),
            "out.json: test 1: expected n_prompt an integer >= 0, got -1");
  EXPECT_EQ(refusal(fmt::format("[{}]", test_object("Q4_0", 0, 1, R"(, "samples_ts": [])"))),
            "out.json: test 1: expected samples_ts a non-empty array of tok/s, got []");
  EXPECT_EQ(refusal(fmt::format("[{}]", test_object("Q4_0", 0, 1, R"(, "samples_ts": [1, "2"])"))),
            "out.json: test 1: expected samples_ts a positive number of tok/s, got \"2\"");
  EXPECT_EQ(refusal("[{\"model_type\": 7, \"n_prompt\": 0, \"n_gen\": 1, \"n_threads\": 2, \"avg_ts\": 1}]"),
            "out.json: test 1: expected model_type a string, got 7");
  EXPECT_EQ(refusal("[{\"model_type\": \"x\", \"n_prompt\": 0, \"n_gen\": 1, \"n_threads\": 0, \"avg_ts\": 1}]"),
            "out.json: test 1: expected n_threads an integer >= 1, got 0");
  EXPECT_EQ(refusal("[{\"model_type\": \"x\", \"n_prompt\": 0, \"n_gen\": 1, \"n_threads\": 1, \"avg_ts\": 0}]"),
            "out.json: test 1: expected avg_ts a positive number of tok/s, got 0");
}

}  // namespace
}  // namespace rlsim::cli
