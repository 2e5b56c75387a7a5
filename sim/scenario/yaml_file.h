// Reading a YAML input file (scenario, study) with errors reported the one way rlsim reports bad
// input: file:line:column and what went wrong.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>
#include <vector>

namespace rlsim::sim {

/// The whole text of the input file `path`; `what` names it in messages ("scenario file", "verl
/// console log"). Throws ScenarioError "PATH: cannot open WHAT (REASON)", REASON the system's.
std::string read_input_file(const std::string& path, const std::string& what);

/// Throws ScenarioError at FILE:LINE:COLUMN (column in bytes) for the first byte of `text` that
/// does not start or continue a well-formed UTF-8 sequence (Unicode 15, table 3-7: no overlong
/// forms, no surrogates, nothing above U+10FFFF), or that begins a character outside YAML's
/// printable set (YAML 1.2, 5.1: C0 controls but tab, LF and CR; DEL; C1 controls but NEL;
/// U+FFFE, U+FFFF). YAML text must be Unicode (5.2), and every string read from it may reach a
/// JSON output, which must be UTF-8 (yaml-cpp turns some control characters into bytes that
/// are not).
void require_yaml_text(std::string_view text, const std::string& file);

/// Reads and parses the YAML file `path`; `what` names it in messages ("scenario file", "study
/// file"). Throws ScenarioError: "PATH: cannot open WHAT" when it cannot be read, or
/// "PATH:LINE:COLUMN: YAML syntax error: ..." (1-based) when it does not parse, or
/// require_yaml_text's error.
YAML::Node load_yaml_file(const std::string& path, const std::string& what);

/// The YAML input files rlsim reads, each by its own command: a scenario (`rlsim run`, `verify`,
/// `validate`), a study (`rlsim plan`), a drift file (`rlsim drift`), a train file (`rlsim train`).
enum class InputKind { kScenario, kStudy, kDrift, kTrain };

/// Reads and parses the input file `path` of `kind` (load_yaml_file, the file named as its kind:
/// "scenario file", "study file", ...). Also throws ScenarioError "PATH:1:1: this is a KIND (KEYS),
/// not a WHAT; run it with `rlsim COMMAND PATH`" when the file is a mapping with top-level keys
/// only another kind has (a study's base and sweep; a drift file's pairs; a train file's task or
/// training_precision; a scenario's cluster, workload or placement) and none of `kind`'s.
/// Anything else (not a mapping, no telling keys) is left to the reader's own errors.
YAML::Node load_input_file(const std::string& path, InputKind kind);

}  // namespace rlsim::sim
