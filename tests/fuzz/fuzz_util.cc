#include "tests/fuzz/fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace rlsim::fuzz {

namespace {

struct WorkDir {
  WorkDir() {
    path = (std::filesystem::temp_directory_path() / ("rlsim_fuzz_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(path);
  }
  ~WorkDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

}  // namespace

const std::string& work_dir() {
  static const WorkDir dir;
  return dir.path;
}

std::string input_file(std::string_view text, const std::string& name) {
  const std::string path = work_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) fail("cannot write " + path);
  return path;
}

std::string input_file(const std::uint8_t* data, std::size_t size, const std::string& name) {
  return input_file(std::string_view(reinterpret_cast<const char*>(data), size), name);
}

void exercise_tokenizer(const models::Tokenizer& tok, std::string_view text) {
  accepts([&] {
    int prev = tok.bos();
    for (const int id : tok.encode(text, true)) {
      (void)tok.decode(prev, id);
      prev = id;
    }
  });
}

void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what.c_str());
  std::abort();
}

}  // namespace rlsim::fuzz
