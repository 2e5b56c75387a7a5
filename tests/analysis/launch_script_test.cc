// The shell reader behind rlsim import verl|slime: joined lines, quotes and escapes, variables,
// arithmetic, arrays (with comments, appends and command substitutions inside), lines kept.
#include "analysis/launch_script.h"

#include <gtest/gtest.h>

#include "sim/scenario/scenario.h"

namespace rlsim::analysis {
namespace {

std::vector<std::string> texts(const ShellCommand& c) {
  std::vector<std::string> out;
  for (const auto& w : c.words) out.push_back(w.text);
  return out;
}

std::string error_of(const std::string& script) {
  try {
    (void)read_shell_script(script, "s.sh");
  } catch (const sim::ScenarioError& e) {
    return e.what();
  }
  return "no error";
}

TEST(LaunchScript, ArraysExpandToOneWordPerElementWithTheirLines) {
  const std::string script =
      "A=(\n"                                  // 1
      "  --x 1   # a comment (with a paren\n"  // 2
      "  #--y 2\n"                             // 3
      "  --bs 1 2 $(seq 16 8 32)\n"            // 4
      ")\n"                                    // 5
      "A+=(--z \"two words\")\n"               // 6
      "run \"${A[@]}\" ${A[0]} end\n";         // 7
  const auto cmds = read_shell_script(script, "s.sh");
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(texts(cmds[0]),
            (std::vector<std::string>{"run", "--x", "1", "--bs", "1", "2", "$(seq 16 8 32)", "--z", "two words", "--x", "end"}));
  EXPECT_EQ(cmds[0].line, 7);
  EXPECT_EQ(cmds[0].words[1].line, 2);  // --x: where the element was written
  EXPECT_EQ(cmds[0].words[3].line, 4);  // --bs
  EXPECT_EQ(cmds[0].words[7].line, 6);  // --z, appended by +=
  EXPECT_EQ(cmds[0].words[10].line, 7);
}

TEST(LaunchScript, QuotesEscapesVariablesAndArithmetic) {
  const std::string script =
      "export N=4\n"
      "J=\"{\n"
      "  \\\"k\\\": \\\"${N}\\\"\n"
      "}\"\n"
      "D=\"$(cd -- \"$(dirname -- \"${BASH_SOURCE[0]}\")\" && pwd)\"\n"
      "cmd a=$((N * 2 + 1)) b=${UNSET:-dflt} c='$N' d=\"$N\" e=\\$N f=$J \\\n"
      "  g=${ENVVAR} h=$D\n";
  const auto cmds = read_shell_script(script, "s.sh");
  ASSERT_EQ(cmds.size(), 1u);
  const auto w = texts(cmds[0]);
  ASSERT_EQ(w.size(), 9u);
  EXPECT_EQ(w[1], "a=9");
  EXPECT_EQ(w[2], "b=dflt");
  EXPECT_EQ(w[3], "c=$N");  // single quotes: literal
  EXPECT_EQ(w[4], "d=4");
  EXPECT_EQ(w[5], "e=$N");                    // escaped
  EXPECT_EQ(w[6], "f={\n  \"k\": \"4\"\n}");  // a multi-line double-quoted value, escapes removed
  EXPECT_EQ(w[7], "g=${ENVVAR}");             // the environment's: kept, an error only where needed
  EXPECT_TRUE(unresolved_expansion(w[7].substr(2)));
  EXPECT_EQ(w[8].substr(0, 4), "h=$(");  // a command's output: kept
  EXPECT_EQ(cmds[0].words[7].line, 7);   // after the continuation
  EXPECT_FALSE(unresolved_expansion("plain"));
}

TEST(LaunchScript, ErrorsNameTheLine) {
  EXPECT_NE(error_of("ok\ncmd 'open\nmore\n").find("s.sh:2:1: unterminated ' quote"), std::string::npos)
      << error_of("ok\ncmd 'open\nmore\n");
  EXPECT_NE(error_of("cmd ${X\n").find("s.sh:1:1: unterminated ${...}"), std::string::npos);
  EXPECT_NE(error_of("cmd $((1 + 2\n").find("unterminated $((...))"), std::string::npos);
}

TEST(LaunchScript, NumbersAndCatalogNames) {
  EXPECT_EQ(parse_integer("42"), 42);
  EXPECT_FALSE(parse_integer("42x"));
  EXPECT_FALSE(parse_integer(" 42"));
  EXPECT_FALSE(parse_integer("99999999999999999999"));
  EXPECT_DOUBLE_EQ(*parse_number("0.85"), 0.85);
  EXPECT_FALSE(parse_number("0.8.5"));
  EXPECT_EQ(catalog_model_for_path("/root/Qwen3-30B-A3B-FP8/"), "qwen3-30b-a3b");  // longest prefix, not qwen3-30b...
  EXPECT_EQ(catalog_model_for_path("Qwen/Qwen3-8B"), "qwen3-8b");
  EXPECT_EQ(catalog_model_for_path("/m/unknown-7b"), "");
}

}  // namespace
}  // namespace rlsim::analysis
