#include "analysis/output_dir.h"

#include <csv.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rlsim::analysis {

namespace fs = std::filesystem;

OutputError::OutputError(const fs::path& path, const std::string& reason)
    : std::runtime_error(fmt::format("cannot write {}: {}", path.string(), reason)), reason_(reason) {}

void output_failed(const fs::path& path, const std::string& reason) { throw OutputError(path, reason); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out(s.size() * 2 + 2, '\0');
  const std::size_t n = csv_write(out.data(), out.size(), s.data(), s.size());
  out.resize(n);
  return out;
}

namespace {

// Bytes a PosixFile gathers before one write(2).
constexpr std::size_t kWriteBufferBytes = std::size_t{1} << 20;

// A file written with open(2)/write(2)/close(2), so every failure carries the call's errno.
class PosixFile final : public WritableFile {
 public:
  PosixFile(fs::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  void append(std::string_view data) override {
    buffer_.append(data);
    if (buffer_.size() >= kWriteBufferBytes) flush();
  }

  void close() override {
    flush();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) output_failed(path_, std::strerror(errno));
  }

 private:
  void flush() {
    if (fd_ < 0) output_failed(path_, std::strerror(EBADF));
    std::size_t done = 0;
    while (done < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        output_failed(path_, std::strerror(errno));
      }
      done += static_cast<std::size_t>(n);
    }
    buffer_.clear();
  }

  fs::path path_;
  int fd_;
  std::string buffer_;
};

class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<WritableFile> create(const fs::path& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) output_failed(path, std::strerror(errno));
    return std::make_unique<PosixFile>(path, fd);
  }
  void create_directories(const fs::path& dir) override {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) output_failed(dir, ec.message());
  }
  void rename(const fs::path& from, const fs::path& to) override {
    std::error_code ec;
    fs::rename(from, to, ec);
    if (ec) output_failed(to, ec.message());
  }
  void remove_all(const fs::path& path) override {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) output_failed(path, ec.message());
  }
  bool exists(const fs::path& path) override {
    std::error_code ec;
    const bool there = fs::exists(path, ec);
    if (ec) output_failed(path, ec.message());
    return there;
  }
};

FileSystem*& installed() {
  static FileSystem* fs = &system_file_system();
  return fs;
}

// ".NAME<suffix>" beside `path` (suffix ".tmp": being written; ".old": the output it replaces).
fs::path sibling(const fs::path& path, std::string_view suffix) {
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return parent / fmt::format(".{}{}", path.filename().string(), suffix);
}

// Removes `path` on a path that is already failing: a second failure must not hide the first.
void remove_quietly(const fs::path& path) noexcept {
  try {
    file_system().remove_all(path);
  } catch (const OutputError&) {
  }
}

void rename_quietly(const fs::path& from, const fs::path& to) noexcept {
  try {
    file_system().rename(from, to);
  } catch (const OutputError&) {
  }
}

}  // namespace

FileSystem& system_file_system() {
  static PosixFileSystem fs;
  return fs;
}

FileSystem& file_system() { return *installed(); }

ScopedFileSystem::ScopedFileSystem(FileSystem& fs) : previous_(installed()) { installed() = &fs; }
ScopedFileSystem::~ScopedFileSystem() { installed() = previous_; }

void write_text(const fs::path& path, const std::string& text) {
  auto file = file_system().create(path);
  file->append(text);
  file->close();
}

void write_files(const std::vector<std::pair<fs::path, std::string>>& files) {
  FileSystem& fsys = file_system();
  std::vector<fs::path> written;  // temporaries
  try {
    for (const auto& [path, text] : files) {
      try {
        if (path.has_parent_path()) fsys.create_directories(path.parent_path());
      } catch (const OutputError& e) {
        output_failed(path, e.reason());
      }
      written.push_back(sibling(path, ".tmp"));
      write_text(written.back(), text);
    }
  } catch (...) {
    for (const auto& t : written) remove_quietly(t);
    throw;
  }
  // Commit: each file's predecessor moves aside before its replacement moves in.
  std::vector<bool> had(files.size(), false);
  std::size_t i = 0;
  bool moved_aside = false;
  try {
    for (; i < files.size(); ++i) {
      const fs::path& path = files[i].first;
      moved_aside = false;
      had[i] = fsys.exists(path);
      if (had[i]) {
        fsys.rename(path, sibling(path, ".old"));
        moved_aside = true;
      }
      fsys.rename(written[i], path);
    }
  } catch (...) {
    // Put back what was replaced, newest first, so the set is the previous one again.
    if (moved_aside) rename_quietly(sibling(files[i].first, ".old"), files[i].first);
    for (std::size_t j = i; j-- > 0;) {
      const fs::path& path = files[j].first;
      if (had[j]) {
        rename_quietly(sibling(path, ".old"), path);
      } else {
        remove_quietly(path);
      }
    }
    for (std::size_t j = i; j < files.size(); ++j) remove_quietly(written[j]);
    throw;
  }
  // A predecessor that cannot be removed is only a leftover: the next write removes it.
  for (std::size_t j = 0; j < files.size(); ++j) {
    if (had[j]) remove_quietly(sibling(files[j].first, ".old"));
  }
}

void write_file(const fs::path& path, const std::string& text) { write_files({{path, text}}); }

void write_directory(const fs::path& dir_in, const std::function<void(const fs::path& tmp)>& fill) {
  // "out/x/" names the folder x, like "out/x".
  const fs::path dir = dir_in.has_filename() ? dir_in : dir_in.parent_path();
  const fs::path tmp = sibling(dir, ".tmp");
  const fs::path old = sibling(dir, ".old");
  FileSystem& fsys = file_system();
  try {
    if (dir.has_parent_path()) fsys.create_directories(dir.parent_path());
  } catch (const OutputError& e) {
    output_failed(dir, e.reason());  // name the output asked for, not the parent that failed
  }
  fsys.remove_all(tmp);  // a killed run's leftovers
  fsys.remove_all(old);
  fsys.create_directories(tmp);
  try {
    fill(tmp);
  } catch (const fs::filesystem_error& e) {
    remove_quietly(tmp);
    output_failed(e.path1().empty() ? dir : e.path1(), e.code().message());
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  bool had = false;
  try {
    had = fsys.exists(dir);
    if (had) fsys.rename(dir, old);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  try {
    fsys.rename(tmp, dir);
  } catch (...) {
    if (had) rename_quietly(old, dir);
    remove_quietly(tmp);
    throw;
  }
  if (had) remove_quietly(old);  // a leftover at worst: the next write to `dir` removes it
}

}  // namespace rlsim::analysis
