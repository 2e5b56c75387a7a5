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

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.flush();
  if (!out) throw std::runtime_error(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
}

void write_file(const fs::path& path, const std::string& text) {
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::string tmp_name = ".";  // built stepwise: GCC 12 warns (-Wrestrict, false positive) on "." + string&&
  tmp_name += path.filename().string();
  tmp_name += ".tmp";
  const fs::path tmp = parent / tmp_name;
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    out.flush();
    if (!out) {
      const std::string why = std::strerror(errno);
      std::error_code ec;
      fs::remove(tmp, ec);
      throw std::runtime_error(fmt::format("cannot write {}: {}", path.string(), why));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    throw std::runtime_error(fmt::format("cannot write {}: {}", path.string(), ec.message()));
  }
}

void write_directory(const fs::path& dir_in, const std::function<void(const fs::path& tmp)>& fill) {
  // "out/x/" names the folder x, like "out/x".
  const fs::path dir = dir_in.has_filename() ? dir_in : dir_in.parent_path();
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent);
  std::string tmp_name = ".";  // built stepwise: GCC 12 warns (-Wrestrict, false positive) on "." + string&&
  tmp_name += dir.filename().string();
  tmp_name += ".tmp";
  const fs::path tmp = parent / tmp_name;
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  try {
    fill(tmp);
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace rlsim::analysis
