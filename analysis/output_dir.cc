#include "analysis/output_dir.h"

#include <csv.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace rlsim::analysis {

namespace fs = std::filesystem;

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out(s.size() * 2 + 2, '\0');
  const std::size_t n = csv_write(out.data(), out.size(), s.data(), s.size());
  out.resize(n);
  return out;
}

namespace {

// The system's reason for the last failed stream operation (EIO when the library left none).
std::string last_reason() { return std::strerror(errno != 0 ? errno : EIO); }

[[noreturn]] void fail(const fs::path& path, const std::string& why) {
  throw OutputError(fmt::format("cannot write {}: {}", path.string(), why));
}

// `text` into `path`; false with errno's reason in `why` when opening, writing or closing fails.
bool put(const fs::path& path, const std::string& text, std::string& why) {
  errno = 0;
  std::ofstream out(path, std::ios::binary);
  if (!out.is_open()) {
    why = last_reason();
    return false;
  }
  out << text;
  out.flush();
  out.close();  // a full disk may show only here
  if (!out) {
    why = last_reason();
    return false;
  }
  return true;
}

// ".NAME.tmp" beside `path`.
fs::path temporary_sibling(const fs::path& path) {
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return parent / fmt::format(".{}.tmp", path.filename().string());
}

}  // namespace

void write_text(const fs::path& path, const std::string& text) {
  std::string why;
  if (!put(path, text, why)) fail(path, why);
}

void write_file(const fs::path& path, const std::string& text) {
  std::error_code ec;
  if (path.has_parent_path()) {
    fs::create_directories(path.parent_path(), ec);
    if (ec) fail(path, ec.message());
  }
  const fs::path tmp = temporary_sibling(path);
  std::string why;
  if (!put(tmp, text, why)) {
    fs::remove(tmp, ec);
    fail(path, why);
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    fail(path, ec.message());
  }
}

void write_directory(const fs::path& dir_in, const std::function<void(const fs::path& tmp)>& fill) {
  // "out/x/" names the folder x, like "out/x".
  const fs::path dir = dir_in.has_filename() ? dir_in : dir_in.parent_path();
  const fs::path tmp = temporary_sibling(dir);
  std::error_code ec;
  if (dir.has_parent_path()) {
    fs::create_directories(dir.parent_path(), ec);
    if (ec) fail(dir, ec.message());
  }
  fs::remove_all(tmp, ec);  // a killed run's leftovers
  if (ec) fail(tmp, ec.message());
  fs::create_directories(tmp, ec);
  if (ec) fail(dir, ec.message());
  try {
    fill(tmp);
    fs::remove_all(dir, ec);
    if (ec) fail(dir, ec.message());
    fs::rename(tmp, dir, ec);
    if (ec) fail(dir, ec.message());
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    fail(e.path1().empty() ? dir : e.path1(), e.code().message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace rlsim::analysis
