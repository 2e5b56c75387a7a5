#include "analysis/launch_script.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <sstream>

#include "sim/scenario/scenario.h"

namespace rlsim::analysis {

void fail_at(const std::string& file, int line, const std::string& what) {
  sim::InputLocation where;
  where.file = file;
  where.line = line;
  where.column = line > 0 ? 1 : 0;
  throw sim::ScenarioError(where, what);
}

std::optional<long long> parse_integer(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
  return x;
}

std::optional<double> parse_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (errno == ERANGE || end != text.c_str() + text.size()) return std::nullopt;
  return x;
}

std::string ascii_lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string path_name_lower(const std::string& path) {
  std::string last = path;
  while (!last.empty() && last.back() == '/') last.pop_back();
  if (const auto slash = last.find_last_of('/'); slash != std::string::npos) last = last.substr(slash + 1);
  return ascii_lower(last);
}

bool ends_command(const std::string& w) {
  return w == "|" || w == "2>&1" || w.starts_with(">") || w.starts_with("2>") || w == "&&" || w == ";" || w == "&";
}

std::string setting_text(const LaunchSetting& s, const std::string& file) {
  if (unresolved_expansion(s.text))
    fail_at(file, s.line,
            fmt::format("{}: the variable is not assigned in the script (assign it there, or give it after the script: {})",
                        s.shown, s.give_after));
  return s.text;
}

long long setting_integer(const LaunchSetting& s, const std::string& file) {
  if (const auto x = parse_integer(setting_text(s, file))) return *x;
  fail_at(file, s.line, s.shown + ": expected an integer");
}

double setting_number(const LaunchSetting& s, const std::string& file) {
  if (const auto x = parse_number(setting_text(s, file))) return *x;
  fail_at(file, s.line, s.shown + ": expected a number");
}

std::string catalog_model_for_path(const std::string& path) {
  const std::string last = path_name_lower(path);
  std::string best;
  for (const std::string& name : sim::catalog_model_names()) {
    if (last == name) return name;
    if (last.starts_with(name + "-") && name.size() > best.size()) best = name;
  }
  return best;
}

void ScenarioText::line(const std::string& text, const std::string& comment) {
  constexpr int kCommentColumn = 44;  // the comments of value lines start here
  text_ += comment.empty() ? text + "\n" : fmt::format("{:<{}} {}\n", text, kCommentColumn, comment);
}

bool unresolved_expansion(const std::string& word) {
  return word.find("${") != std::string::npos || word.find("$(") != std::string::npos ||
         (word.size() > 1 && word[0] == '$' && (std::isalpha(static_cast<unsigned char>(word[1])) || word[1] == '_'));
}

namespace {

// A logical line of the script, the physical line it starts on and the offsets in its text
// where each following physical line starts.
struct Line {
  std::string text;
  int line = 0;
  std::vector<std::size_t> breaks;
  int line_at(std::size_t offset) const {
    return line + static_cast<int>(std::upper_bound(breaks.begin(), breaks.end(), offset) - breaks.begin());
  }
};

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Where a physical line leaves the shell: inside a quote, or inside parentheses (an array).
struct OpenState {
  char quote = 0;
  int depth = 0;
};

void scan_line(const std::string& s, OpenState& st) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (st.quote == '\'') {
      if (c == '\'') st.quote = 0;
    } else if (st.quote == '"') {
      if (c == '\\')
        ++i;
      else if (c == '"')
        st.quote = 0;
    } else if (c == '\\') {
      ++i;
    } else if (c == '\'' || c == '"') {
      st.quote = c;
    } else if (c == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(s[i - 1])) || s[i - 1] == '(')) {
      return;  // a comment: the rest of the physical line
    } else if (c == '(') {
      ++st.depth;
    } else if (c == ')') {
      st.depth = std::max(0, st.depth - 1);
    }
  }
}

std::vector<Line> logical_lines(const std::string& text) {
  std::vector<Line> out;
  std::istringstream in(text);
  std::string raw;
  Line cur;
  OpenState st;
  bool open = false;
  int n = 0;
  while (std::getline(in, raw)) {
    ++n;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    if (!open) {
      cur = Line{"", n, {}};
      open = true;
    } else {
      cur.breaks.push_back(cur.text.size());
    }
    scan_line(raw, st);
    if (!raw.empty() && raw.back() == '\\' && st.quote != '\'') {
      cur.text += raw.substr(0, raw.size() - 1) + " ";
      continue;
    }
    cur.text += raw;
    if (st.quote != 0 || st.depth > 0) {
      cur.text += '\n';  // a quote or an array goes on; a newline ends a comment inside it
      continue;
    }
    out.push_back(cur);
    open = false;
  }
  if (open) out.push_back(cur);
  return out;
}

using Vars = std::map<std::string, std::string>;
using Arrays = std::map<std::string, std::vector<ShellWord>>;  // elements with the lines they were written on

// Shell integer arithmetic of `$(( ... ))`: + - * / and parentheses over integers and variable
// names; nullopt when the text is not such an expression or names an unknown variable.
class Arithmetic {
 public:
  Arithmetic(const std::string& text, const Vars& vars) : t_(text), vars_(vars) {}
  std::optional<long long> eval() {
    const auto v = sum();
    skip();
    if (!v || i_ != t_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  std::optional<long long> atom() {
    skip();
    if (i_ < t_.size() && t_[i_] == '(') {
      ++i_;
      const auto v = sum();
      skip();
      if (!v || i_ >= t_.size() || t_[i_] != ')') return std::nullopt;
      ++i_;
      return v;
    }
    if (i_ < t_.size() && t_[i_] == '$') ++i_;
    const std::size_t start = i_;
    while (i_ < t_.size() && name_char(t_[i_])) ++i_;
    const std::string word = t_.substr(start, i_ - start);
    if (word.empty()) return std::nullopt;
    if (std::isdigit(static_cast<unsigned char>(word[0]))) return parse_integer(word);
    const auto it = vars_.find(word);
    return it == vars_.end() ? std::nullopt : parse_integer(it->second);
  }
  std::optional<long long> product() {
    auto v = atom();
    while (v) {
      skip();
      if (i_ >= t_.size() || (t_[i_] != '*' && t_[i_] != '/')) break;
      const char op = t_[i_++];
      const auto r = atom();
      if (!r || (op == '/' && *r == 0)) return std::nullopt;
      v = op == '*' ? *v * *r : *v / *r;
    }
    return v;
  }
  std::optional<long long> sum() {
    auto v = product();
    while (v) {
      skip();
      if (i_ >= t_.size() || (t_[i_] != '+' && t_[i_] != '-')) break;
      const char op = t_[i_++];
      const auto r = product();
      if (!r) return std::nullopt;
      v = op == '+' ? *v + *r : *v - *r;
    }
    return v;
  }
  const std::string& t_;
  const Vars& vars_;
  std::size_t i_ = 0;
};

// The index of the `closer` matching the `opener` at `open` (nested pairs and quoted text
// skipped), or npos: ')' of `$(`, '}' of `${`.
std::size_t closing(const std::string& s, std::size_t open, char opener, char closer) {
  int depth = 0;
  char quote = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == '\\' && quote == '"')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == opener) {
      ++depth;
    } else if (c == closer && --depth == 0) {
      return i;
    }
  }
  return std::string::npos;
}

// Splits a logical line into words, expanding as the shell does (see read_shell_script).
class WordSplitter {
 public:
  WordSplitter(const Line& l, const Vars& vars, const Arrays& arrays, const std::string& file)
      : l_(l), s_(l.text), vars_(vars), arrays_(arrays), file_(file) {}

  std::vector<ShellWord> split() {
    for (i_ = 0; i_ < s_.size(); ++i_) {
      const char c = s_[i_];
      if (!in_word_ && quote_ == 0) start_ = i_;
      if (quote_ == '\'') {
        if (c == '\'')
          quote_ = 0;
        else
          cur_ += c;
        continue;
      }
      if (c == '\\') {
        escape();
        continue;
      }
      if (c == '$' && expand()) continue;
      if (quote_ == '"') {
        if (c == '"')
          quote_ = 0;
        else
          cur_ += c;
        continue;
      }
      if (c == '\'' || c == '"') {
        quote_ = c;
        in_word_ = true;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        end_word();
      } else if (c == '#' && !in_word_) {
        const auto nl = s_.find('\n', i_);
        if (nl == std::string::npos) break;
        i_ = nl;  // a comment ends at the newline (inside an array)
      } else {
        cur_ += c;
        in_word_ = true;
      }
    }
    if (quote_) fail_at(file_, l_.line, fmt::format("unterminated {} quote", quote_));
    end_word();
    return std::move(words_);
  }

 private:
  void end_word() {
    if (in_word_ && !cur_.empty()) words_.push_back({cur_, word_line_ > 0 ? word_line_ : l_.line_at(start_)});
    cur_.clear();
    in_word_ = false;
    word_line_ = 0;
  }
  // A backslash: outside quotes the next character is literal; inside double quotes only for
  // the characters the shell escapes there.
  void escape() {
    in_word_ = true;
    if (i_ + 1 >= s_.size()) {
      cur_ += '\\';
      return;
    }
    const char next = s_[i_ + 1];
    if (quote_ == '"' && next != '"' && next != '\\' && next != '$' && next != '`') {
      cur_ += '\\';
      return;
    }
    cur_ += next;
    ++i_;
  }
  // A '$' at i_: expands what follows it; false when it is a literal '$'.
  bool expand() {
    const std::size_t i = i_;
    if (i + 1 >= s_.size()) return false;
    const char next = s_[i + 1];
    if (next == '@' || next == '*') {
      append_word("$@");  // the script's own arguments: not known here
      i_ = i + 1;
      return true;
    }
    if (s_.compare(i, 3, "$((") == 0) {
      const auto close = s_.find("))", i + 3);
      if (close == std::string::npos) fail_at(file_, l_.line_at(i), "unterminated $((...))");
      const std::string expr = s_.substr(i + 3, close - i - 3);
      const auto v = Arithmetic(expr, vars_).eval();
      append_word(v ? std::to_string(*v) : "$((" + expr + "))");
      i_ = close + 1;
      return true;
    }
    if (next == '(') {
      const auto close = closing(s_, i + 1, '(', ')');
      if (close == std::string::npos) fail_at(file_, l_.line_at(i), "unterminated $(...)");
      append_word(s_.substr(i, close - i + 1));  // a command's output: not known here
      i_ = close;
      return true;
    }
    if (next == '{') {
      const auto close = closing(s_, i + 1, '{', '}');
      if (close == std::string::npos) fail_at(file_, l_.line_at(i), "unterminated ${...}");
      braced(s_.substr(i + 2, close - i - 2));
      i_ = close;
      return true;
    }
    if (!name_char(next)) return false;
    std::size_t j = i + 1;
    while (j < s_.size() && name_char(s_[j])) ++j;
    const std::string name = s_.substr(i + 1, j - i - 1);
    if (const auto it = vars_.find(name); it != vars_.end()) {
      append_word(it->second);
    } else if (const auto a = arrays_.find(name); a != arrays_.end()) {
      append_word(a->second.empty() ? "" : a->second.front().text);
    } else {
      append_word("${" + name + "}");  // from the environment: unknown here
    }
    i_ = j - 1;
    return true;
  }
  // `${inner}`: NAME, NAME:-default, NAME[@], NAME[*], NAME[k].
  void braced(std::string inner) {
    const auto bracket = inner.find('[');
    if (bracket != std::string::npos && inner.back() == ']') {
      const std::string name = inner.substr(0, bracket), index = inner.substr(bracket + 1, inner.size() - bracket - 2);
      const auto a = arrays_.find(name);
      if (a == arrays_.end()) {
        append_word("${" + inner + "}");
      } else if (index == "@" || index == "*") {
        append_elements(a->second);
      } else if (const auto k = parse_integer(index); k && *k >= 0 && static_cast<std::size_t>(*k) < a->second.size()) {
        append_word(a->second[static_cast<std::size_t>(*k)].text);
      }
      return;
    }
    std::optional<std::string> dflt;
    if (const auto colon = inner.find(":-"); colon != std::string::npos) {
      dflt = expand_text(inner.substr(colon + 2));  // a word of its own: quotes and variables inside
      inner.resize(colon);
    }
    if (const auto it = vars_.find(inner); it != vars_.end()) {
      append_word(it->second);
    } else if (const auto a = arrays_.find(inner); a != arrays_.end()) {
      append_word(a->second.empty() ? "" : a->second.front().text);
    } else if (dflt) {
      append_word(*dflt);
    } else {
      append_word("${" + inner + "}");
    }
  }
  // `text` expanded as words of the same line, joined by spaces.
  std::string expand_text(const std::string& text) const {
    Line sub{text, l_.line_at(i_), {}};
    std::string out;
    for (const ShellWord& w : WordSplitter(sub, vars_, arrays_, file_).split()) out += (out.empty() ? "" : " ") + w.text;
    return out;
  }
  void append_word(const std::string& text) {
    cur_ += text;
    in_word_ = true;
  }
  // An array's elements, one word each (the first joined to the text before, as the shell
  // does), each word keeping the line its element was written on.
  void append_elements(const std::vector<ShellWord>& elements) {
    for (std::size_t k = 0; k < elements.size(); ++k) {
      if (k > 0) {
        words_.push_back({cur_, word_line_});
        cur_.clear();
      }
      append_word(elements[k].text);
      word_line_ = elements[k].line;
    }
  }

  const Line& l_;
  const std::string& s_;
  const Vars& vars_;
  const Arrays& arrays_;
  const std::string& file_;
  std::vector<ShellWord> words_;
  std::string cur_;
  std::size_t i_ = 0, start_ = 0;
  int word_line_ = 0;  // the line of the array element the word holds (0: where the word starts)
  bool in_word_ = false;
  char quote_ = 0;
};

// Records the assignments of a command made only of assignments (after export, local, declare
// and their options); false when it is another command.
bool record_assignments(const std::vector<ShellWord>& w, Vars& vars, Arrays& arrays) {
  std::size_t i = 0;
  if (!w.empty() && (w[0].text == "export" || w[0].text == "local" || w[0].text == "readonly" || w[0].text == "declare" ||
                     w[0].text == "typeset")) {
    ++i;
    while (i < w.size() && w[i].text.starts_with("-")) ++i;
  }
  if (i >= w.size()) return false;
  struct Assign {
    std::string name;
    bool append = false;
    std::vector<ShellWord> values;
    bool array = false;
  };
  std::vector<Assign> found;
  while (i < w.size()) {
    const std::string& word = w[i].text;
    const auto eq = word.find('=');
    if (eq == std::string::npos || eq == 0) return false;
    Assign a;
    a.append = word[eq - 1] == '+';
    a.name = word.substr(0, a.append ? eq - 1 : eq);
    if (a.name.empty() || !std::all_of(a.name.begin(), a.name.end(), name_char) ||
        std::isdigit(static_cast<unsigned char>(a.name[0])))
      return false;
    std::string value = word.substr(eq + 1);
    if (value.starts_with("(")) {  // an array: its elements run to the word with an unbalanced ')'
      a.array = true;
      value.erase(0, 1);
      for (;;) {
        const bool closed = std::count(value.begin(), value.end(), ')') > std::count(value.begin(), value.end(), '(');
        if (closed) value.pop_back();
        if (!value.empty()) a.values.push_back({value, w[i].line});
        if (closed || ++i >= w.size()) break;
        value = w[i].text;
      }
    } else {
      a.values.push_back({value, w[i].line});
    }
    found.push_back(std::move(a));
    ++i;
  }
  for (auto& a : found) {
    if (a.array) {
      auto& dst = arrays[a.name];
      if (!a.append) dst.clear();
      dst.insert(dst.end(), a.values.begin(), a.values.end());
      vars.erase(a.name);
    } else {
      vars[a.name] = (a.append ? vars[a.name] : "") + a.values.front().text;
      arrays.erase(a.name);
    }
  }
  return true;
}

}  // namespace

std::vector<ShellCommand> read_shell_script(const std::string& text, const std::string& file) {
  Vars vars;
  Arrays arrays;
  std::vector<ShellCommand> out;
  for (const Line& line : logical_lines(text)) {
    std::vector<ShellWord> words = WordSplitter(line, vars, arrays, file).split();
    if (words.empty() || record_assignments(words, vars, arrays)) continue;
    out.push_back({std::move(words), line.line});
  }
  return out;
}

LaunchCommand find_launch_command(const std::string& text, const std::string& file, bool (*is_entry)(const ShellWord&),
                                  const std::string& what, const std::string& example) {
  std::optional<LaunchCommand> found;
  for (ShellCommand& command : read_shell_script(text, file)) {
    const auto entry = std::find_if(command.words.begin(), command.words.end(), is_entry);
    if (entry == command.words.end()) continue;
    if (found) fail_at(file, command.line, fmt::format("a second {} command (import one launch at a time)", what));
    const auto index = static_cast<std::size_t>(entry - command.words.begin());
    found = LaunchCommand{std::move(command), index};
  }
  if (!found) fail_at(file, 0, fmt::format("no {} command ({} ...) in the script", what, example));
  return std::move(*found);
}

}  // namespace rlsim::analysis
