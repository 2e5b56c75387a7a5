// Writing outputs so that a reader never sees a half-written set of files, through one
// injectable file-system interface (leveldb's Env is the model) so tests can fail any write.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rlsim::analysis {

/// An output that could not be written: the environment's error (no space left on the device, a
/// read-only file system, a permission), not the input's and not a bug. The message names the
/// path and the system's reason. The CLI exits 4 on it.
class OutputError : public std::runtime_error {
 public:
  /// what(): "cannot write PATH: REASON".
  OutputError(const std::filesystem::path& path, const std::string& reason);
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

/// Throws OutputError(path, reason).
[[noreturn]] void output_failed(const std::filesystem::path& path, const std::string& reason);

/// A file being written, front to back. Every failure throws OutputError naming the file and the
/// system's reason (strerror of the failing call's errno).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  /// Appends `data` (buffered: a failure may surface at a later append or at close()).
  virtual void append(std::string_view data) = 0;
  /// Writes what is buffered and closes the file; a full disk may show only here.
  virtual void close() = 0;
};

/// The operations rlsim's writers perform on the file system. The process has one
/// (file_system()); tests swap it for one that fails a chosen operation (ScopedFileSystem).
/// Every method throws OutputError naming the path and the system's reason.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  /// Creates (or truncates) `path` for writing.
  virtual std::unique_ptr<WritableFile> create(const std::filesystem::path& path) = 0;
  /// Creates `dir` and its missing parents.
  virtual void create_directories(const std::filesystem::path& dir) = 0;
  /// Renames `from` to `to` (rename(2): atomic within one file system; replaces a file `to`).
  virtual void rename(const std::filesystem::path& from, const std::filesystem::path& to) = 0;
  /// Removes `path` and everything under it; nothing to remove is not an error.
  virtual void remove_all(const std::filesystem::path& path) = 0;
  /// Whether `path` exists (a failure to tell is an OutputError).
  virtual bool exists(const std::filesystem::path& path) = 0;
};

/// The file system the writers use now: the operating system's (POSIX calls), unless a
/// ScopedFileSystem replaced it.
FileSystem& file_system();

/// The operating system's file system, whatever is installed (what a fault injector wraps).
FileSystem& system_file_system();

/// Installs `fs` as file_system() for its lifetime, then restores the previous one (tests).
class ScopedFileSystem {
 public:
  explicit ScopedFileSystem(FileSystem& fs);
  ~ScopedFileSystem();
  ScopedFileSystem(const ScopedFileSystem&) = delete;
  ScopedFileSystem& operator=(const ScopedFileSystem&) = delete;

 private:
  FileSystem* previous_;
};

/// `s` as one CSV field (RFC 4180): as is, or quoted by libcsv's csv_write when it holds a comma,
/// quote or line break.
std::string csv_field(const std::string& s);

/// Writes `text` to `path` (binary, as is) through file_system(). Throws OutputError naming the
/// file and the system's reason.
void write_text(const std::filesystem::path& path, const std::string& text);

/// Writes each (path, text) so that the set changes all at once or not at all: every text goes to
/// a sibling temporary file `.NAME.tmp` first; then each existing file is moved aside to
/// `.NAME.old` and the temporary renamed over it; when a rename fails, the files already replaced
/// are put back. Parent directories are created when missing. Throws OutputError naming the file
/// and the system's reason; temporary files are removed.
void write_files(const std::vector<std::pair<std::filesystem::path, std::string>>& files);

/// write_files() of one file.
void write_file(const std::filesystem::path& path, const std::string& text);

/// Calls `fill(tmp)` to write every file into a fresh sibling temporary directory `.NAME.tmp`,
/// then swaps it in: an existing `dir` is renamed to `.NAME.old`, the temporary directory to
/// `dir`, and the old one removed (put back when the second rename fails). Stale `.NAME.tmp` and
/// `.NAME.old` of a killed run are removed first. When `fill` throws (an OutputError, an
/// sim::Interrupted...), the temporary directory is removed and the exception propagates; `dir`
/// is untouched. A file-system failure of its own is an OutputError.
void write_directory(const std::filesystem::path& dir, const std::function<void(const std::filesystem::path& tmp)>& fill);

}  // namespace rlsim::analysis
