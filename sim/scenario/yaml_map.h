// Checked reading of YAML mappings, shared by every rlsim input format read with yaml-cpp
// (scenarios, calibration files, validation records): each key read is marked, unknown keys are
// rejected with the valid ones, and every error names file:line:column (1-based) or the
// override it came from.
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sim/scenario/scenario.h"
#include "sim/scenario/units.h"

namespace rlsim::sim {

[[noreturn]] inline void throw_error(InputLocation where, std::string detail, bool unknown_key) {
  if (unknown_key) throw ScenarioKeyError(std::move(where), std::move(detail));
  throw ScenarioError(std::move(where), std::move(detail));
}

/// Where nodes come from: one file, plus the dotted paths that --set replaced.
struct Source {
  std::string file;
  std::map<std::string, std::string> overrides;  // dotted path -> "path=value"
  std::string label = "--set";                   // how an override is named in messages

  /// Throws ScenarioError (ScenarioKeyError when `unknown_key`) for `what` about `node` at dotted
  /// `path`: located at the override that set `path` (or a parent of it), else at the node's
  /// file:line:column.
  [[noreturn]] void fail(const YAML::Node& node, const std::string& path, const std::string& what,
                         bool unknown_key = false) const {
    InputLocation where;
    where.file = file;
    where.key = path;
    for (const auto& [p, text] : overrides) {
      if (path == p || path.starts_with(p + ".")) {
        where.override_text = text;
        where.override_label = label;
        throw_error(std::move(where), what, unknown_key);
      }
    }
    // An error on a mapping whose members were overridden mentions those overrides.
    std::string with;
    for (const auto& [p, text] : overrides) {
      if (path.empty() || p.starts_with(path + ".")) with += (with.empty() ? " (with " : ", ") + label + " " + text;
    }
    if (!with.empty()) with += ")";
    const YAML::Mark m = node.Mark();
    if (!m.is_null()) {
      where.line = m.line + 1;
      where.column = m.column + 1;
    }
    throw_error(std::move(where), what + with, unknown_key);
  }
};

inline std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

inline std::string child_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

/// A YAML mapping whose keys are checked: each key read is marked, and finish() rejects the rest.
class Map {
 public:
  Map(const Source& src, YAML::Node node, std::string path) : src_(src), node_(std::move(node)), path_(std::move(path)) {
    if (!node_.IsMap()) src_.fail(node_, path_, "'" + path_ + "' must be a mapping of keys");
  }

  bool has(const std::string& key) const { return static_cast<bool>(node_[key]); }

  YAML::Node get(const std::string& key) {
    // A key read after finish() must be one finish() accepted: else every file that sets it
    // would be rejected as unknown (a reader's bug, not bad input).
    if (finished_ && !read_.count(key) && std::find(declared_.begin(), declared_.end(), key) == declared_.end())
      throw std::logic_error("Map: key '" + child_path(path_, key) + "' read after finish() without being one of its keys");
    read_.insert(key);
    return node_[key];
  }

  YAML::Node require(const std::string& key) {
    YAML::Node n = get(key);
    if (!n || n.IsNull()) src_.fail(node_, path_, "missing required key '" + child_path(path_, key) + "'");
    return n;
  }

  std::string path(const std::string& key) const { return child_path(path_, key); }
  const Source& src() const { return src_; }
  const YAML::Node& node() const { return node_; }

  // The text of a key of this mapping; a list or mapping used as a key is bad input.
  std::string key_of(const YAML::Node& key) const {
    if (!key.IsScalar()) src_.fail(key, path_, "a key must be a plain name, not a list or mapping");
    return key.Scalar();
  }

  // Rejects keys that were never read, listing the valid ones; keys read later must be among them.
  void finish(const std::vector<std::string>& valid) {
    finished_ = true;
    declared_ = valid;
    for (const auto& kv : node_) {
      const auto key = key_of(kv.first);
      if (!read_.count(key) && std::find(valid.begin(), valid.end(), key) == valid.end()) {
        src_.fail(kv.first, child_path(path_, key),
                  "unknown key '" + child_path(path_, key) + "' (valid keys here: " + join(valid) + ")", true);
      }
    }
  }

  // Typed readers -------------------------------------------------------------------------
  std::string str(const std::string& key, const std::string& dflt, bool required = false) {
    YAML::Node n = required ? require(key) : get(key);
    if (!n) return dflt;
    if (!n.IsScalar()) src_.fail(n, path(key), "'" + path(key) + "' must be a string");
    return n.Scalar();
  }

  std::int64_t integer(const std::string& key, std::int64_t dflt, std::int64_t lo, std::int64_t hi, bool required = false) {
    YAML::Node n = required ? require(key) : get(key);
    if (!n) return dflt;
    std::int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<std::int64_t>::decode(n, v)) {
      src_.fail(n, path(key), fmt::format("'{}' must be an integer, got '{}'", path(key), scalar_text(n)));
    }
    if (v < lo || v > hi) src_.fail(n, path(key), fmt::format("'{}' must be in [{}, {}], got {}", path(key), lo, hi, v));
    return v;
  }

  double number(const std::string& key, double dflt, double lo, double hi) {
    YAML::Node n = get(key);
    if (!n) return dflt;
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) {
      src_.fail(n, path(key), fmt::format("'{}' must be a number, got '{}'", path(key), scalar_text(n)));
    }
    if (!(v >= lo && v <= hi))
      src_.fail(n, path(key), fmt::format("'{}' must be in [{:g}, {:g}], got {:g}", path(key), lo, hi, v));
    return v;
  }

  bool boolean(const std::string& key, bool dflt) {
    YAML::Node n = get(key);
    if (!n) return dflt;
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      src_.fail(n, path(key), fmt::format("'{}' must be true or false, got '{}'", path(key), scalar_text(n)));
    }
    return v;
  }

  double quantity(const std::string& key, double dflt, Dimension dim, bool required = false) {
    YAML::Node n = required ? require(key) : get(key);
    if (!n) return dflt;
    if (!n.IsScalar()) src_.fail(n, path(key), "'" + path(key) + "' must be a quantity with a unit, e.g. " + example(dim));
    try {
      return parse_quantity(n.Scalar(), dim);
    } catch (const std::invalid_argument& e) {
      src_.fail(n, path(key), "'" + path(key) + "': " + e.what());
    }
  }

  template <typename E>
  E choice(const std::string& key, E dflt, const std::vector<std::pair<std::string, E>>& options) {
    YAML::Node n = get(key);
    if (!n) return dflt;
    std::vector<std::string> names;
    for (const auto& [name, value] : options) {
      if (n.IsScalar() && n.Scalar() == name) return value;
      names.push_back(name);
    }
    src_.fail(n, path(key),
              fmt::format("'{}': unknown value '{}' (expected one of: {})", path(key), scalar_text(n), join(names)));
  }

 private:
  static std::string scalar_text(const YAML::Node& n) { return n.IsScalar() ? n.Scalar() : std::string("<non-scalar>"); }
  static std::string example(Dimension d) {
    switch (d) {
      case Dimension::kBytes:
        return "'96 GB'";
      case Dimension::kBandwidth:
        return "'450 GB/s'";
      case Dimension::kTime:
        return "'2 us'";
      case Dimension::kFlops:
        return "'989 TFLOPS'";
    }
    return "";
  }
  const Source& src_;
  YAML::Node node_;
  std::string path_;
  std::set<std::string> read_;
  bool finished_ = false;
  std::vector<std::string> declared_;  // finish()'s keys
};

}  // namespace rlsim::sim
