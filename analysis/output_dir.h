// Writing an output directory so that a reader never sees a half-written set of files.
#pragma once

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

namespace rlsim::analysis {

/// An output that could not be written: the environment's error (no space left on the device, a
/// read-only file system, a permission), not the input's and not a bug. The message names the
/// path and the system's reason. The CLI exits 4 on it.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `s` as one CSV field (RFC 4180): as is, or quoted by libcsv's csv_write when it holds a comma,
/// quote or line break.
std::string csv_field(const std::string& s);

/// Writes `text` to `path` (binary, as is). Throws OutputError naming the file and the system's
/// reason on failure.
void write_text(const std::filesystem::path& path, const std::string& text);

/// Writes `text` to `path` through a sibling temporary file `.NAME.tmp` renamed over it, so a reader
/// sees the old file or the whole new one; the parent directory is created when missing. Throws
/// OutputError naming the file and the system's reason; the temporary file is removed.
void write_file(const std::filesystem::path& path, const std::string& text);

/// Calls `fill(tmp)` to write every file into a fresh sibling temporary directory `.NAME.tmp`,
/// then replaces `dir` with it by a rename (an existing `dir` is removed first). A stale
/// temporary directory of a killed run is removed first. When `fill` throws (an OutputError, an
/// sim::Interrupted...), the temporary directory is removed and the exception propagates; `dir`
/// is untouched. A file-system failure of its own is an OutputError.
void write_directory(const std::filesystem::path& dir, const std::function<void(const std::filesystem::path& tmp)>& fill);

}  // namespace rlsim::analysis
