// The shell of a launch script, read as far as an import needs it: the words of each command
// after the shell's quote removal and variable and array expansion, with the line each word
// came from. `rlsim import verl` and `rlsim import slime` both read their scripts through it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace rlsim::analysis {

/// A word of a command, after quote removal and expansion, and the 1-based script line it
/// starts on (0 for words given on rlsim's own command line).
struct ShellWord {
  std::string text;
  int line = 0;
};

/// A command of a script (one logical line): its words and the line it starts on.
struct ShellCommand {
  std::vector<ShellWord> words;
  int line = 0;
};

/// A launch imported as an rlsim scenario.
struct ImportedScenario {
  std::string yaml;                   // an rlsim scenario, each value commented with the launch's key behind it
  std::vector<std::string> warnings;  // keys that change performance but rlsim does not model, assumptions made
  std::vector<std::string> ignored;   // keys without effect on step time (paths, logging, learning rate, ...)
};

/// The text of an imported scenario: YAML lines, each value followed by a comment naming the
/// launch's key behind it, the comments aligned in one column.
class ScenarioText {
 public:
  /// Appends `text` (a YAML line without its newline) and, when not empty, `comment` ("# ...").
  void line(const std::string& text, const std::string& comment = "");
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

/// Reads a launch script as the shell would, as far as a launch command's words go:
/// - a logical line joins physical lines ending in a backslash, and lines inside an open quote
///   or an open array `NAME=( ... )` (comments inside an array are dropped);
/// - words are split as the shell splits them: single quotes literal, double quotes with
///   backslash escapes of `"`, `\`, `$` and a backtick, backslash escapes outside quotes, `#`
///   at a word's start a comment;
/// - assignments (`NAME=value`, `export NAME=value`, `NAME+=value`, arrays `NAME=(a b ...)` and
///   `NAME+=(...)`) are recorded and substituted into later lines: `$NAME`, `${NAME}`,
///   `${NAME:-default}`, integer `$((A * B))`, and `${NAME[@]}` / `"${NAME[@]}"` as one word per
///   element. A variable the script never assigns (the environment's, a sourced file's) stays
///   as written (`${NAME}`, `${ARGS[@]}`), as does a command substitution `$(...)`: an error only
///   where an importer needs its value.
/// Returns every command that is not an assignment, in order. Throws sim::ScenarioError naming
/// `file`:line for an unterminated quote, `${`, `$((` or `$(`.
std::vector<ShellCommand> read_shell_script(const std::string& text, const std::string& file);

/// A launch's command: the script's one command with a word that `is_entry` picks (the entry
/// point: `verl.trainer.main_ppo`, `train.py`), and that word's index among its words.
struct LaunchCommand {
  ShellCommand command;
  std::size_t entry = 0;
};

/// Reads `text` (read_shell_script) and finds its launch command. Throws sim::ScenarioError
/// naming `file` for a script without one ("no `what` command (`example` ...)") and `file`:line
/// for a second one (import one launch at a time).
LaunchCommand find_launch_command(const std::string& text, const std::string& file, bool (*is_entry)(const ShellWord&),
                                  const std::string& what, const std::string& example);

/// True when `word` is an expansion the script could not resolve: a variable it never assigns,
/// an unknown array (`${ARGS[@]}`) or a command substitution.
bool unresolved_expansion(const std::string& word);

/// Throws sim::ScenarioError at `file`:line (line 0: the file alone) with `what`.
[[noreturn]] void fail_at(const std::string& file, int line, const std::string& what);

/// The whole of `text` as an integer (decimal), or nullopt (empty, trailing characters, out of range).
std::optional<long long> parse_integer(const std::string& text);

/// The whole of `text` as a number (strtod's syntax), or nullopt.
std::optional<double> parse_number(const std::string& text);

/// `text` with ASCII letters lower-cased.
std::string ascii_lower(std::string text);

/// The last component of a path, lower-cased; trailing slashes ignored (`/root/Qwen3-8B-FP8/` ->
/// `qwen3-8b-fp8`).
std::string path_name_lower(const std::string& path);

/// True for a word that ends a command's arguments: a pipe, a redirection, `&&`, `;` or `&`.
bool ends_command(const std::string& word);

/// One setting of a launch as an importer reads it: the value's text, the script line it came
/// from (0: a default or rlsim's command line), how messages show it (`data.x=5`, `--flag 5`) and
/// how to give it after the script instead (`rlsim import verl SCRIPT data.x=VALUE`).
struct LaunchSetting {
  std::string text;
  int line = 0;
  std::string shown, give_after;
};

/// The setting's text. Throws sim::ScenarioError at `file`:line when it is an expansion the script
/// does not resolve (unresolved_expansion), saying how to give the value instead.
std::string setting_text(const LaunchSetting& s, const std::string& file);

/// The setting as an integer (parse_integer); errors as setting_text, or "expected an integer".
long long setting_integer(const LaunchSetting& s, const std::string& file);

/// The setting as a number (parse_number); errors as setting_text, or "expected a number".
double setting_number(const LaunchSetting& s, const std::string& file);

/// The catalog model named by a checkpoint path's last component, case-insensitive
/// (`/models/Qwen3-8B` -> qwen3-8b); a catalog name followed by '-' and a suffix matches too, the
/// longest such name winning (`Qwen3-8B-Base` -> qwen3-8b). "" when none matches.
std::string catalog_model_for_path(const std::string& path);

}  // namespace rlsim::analysis
