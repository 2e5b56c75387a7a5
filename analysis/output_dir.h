// Writing an output directory so that a reader never sees a half-written set of files.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace rlsim::analysis {

/// `s` as one CSV field (RFC 4180): as is, or quoted by libcsv's csv_write when it holds a comma,
/// quote or line break.
std::string csv_field(const std::string& s);

/// Writes `text` to `path` (binary, as is). Throws std::runtime_error naming the file and the
/// system's reason on failure.
void write_text(const std::filesystem::path& path, const std::string& text);

/// Writes `text` to `path` through a sibling temporary file `.NAME.tmp` renamed over it, so a reader
/// sees the old file or the whole new one. Throws std::runtime_error naming the file and the
/// system's reason; the temporary file is removed.
void write_file(const std::filesystem::path& path, const std::string& text);

/// Calls `fill(tmp)` to write every file into a fresh sibling temporary directory `.NAME.tmp`,
/// then replaces `dir` with it by a rename (an existing `dir` is removed first). When `fill`
/// throws, the temporary directory is removed and the exception propagates; `dir` is untouched.
void write_directory(const std::filesystem::path& dir, const std::function<void(const std::filesystem::path& tmp)>& fill);

}  // namespace rlsim::analysis
