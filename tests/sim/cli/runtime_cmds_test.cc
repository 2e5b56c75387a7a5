// The host facts bench runtime reads (sim/cli/runtime_cmds): the last-level cache from a sysfs
// cache folder, on fake folders written here, and the threads' cache-line hand-over time.
#include "sim/cli/runtime_cmds.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system's temporary one, removed at the end of the test.
class CacheFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("rlsim-llc-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // index`i` with the three files as sysfs writes them (one value and a newline each).
  void add(int i, const std::string& level, const std::string& type, const std::string& size) {
    const fs::path d = dir_ / ("index" + std::to_string(i));
    fs::create_directories(d);
    std::ofstream(d / "level") << level << "\n";
    std::ofstream(d / "type") << type << "\n";
    std::ofstream(d / "size") << size << "\n";
  }
  fs::path dir_;
};

TEST_F(CacheFolder, TheHighestDataOrUnifiedLevelWins) {
  // The Zen 5 VM's folder: L1d 48K, L1i 32K, L2 1024K, L3 32768K.
  add(0, "1", "Data", "48K");
  add(1, "1", "Instruction", "32K");
  add(2, "2", "Unified", "1024K");
  add(3, "3", "Unified", "32768K");
  EXPECT_EQ(last_level_cache_bytes(dir_), std::size_t{32} << 20);
}

TEST_F(CacheFolder, InstructionCachesAndUnreadableEntriesAreSkipped) {
  add(0, "1", "Data", "48K");
  add(1, "4", "Instruction", "999M");  // not a data cache, whatever its level
  add(2, "3", "Unified", "lots");      // no number
  add(3, "x", "Unified", "8M");        // no level
  add(4, "2", "Unified", "2M");        // the M suffix
  EXPECT_EQ(last_level_cache_bytes(dir_), std::size_t{2} << 20);
}

TEST_F(CacheFolder, SizesWithoutASuffixAreBytesAndOtherSuffixesAreSkipped) {
  add(0, "1", "Data", "65536");
  add(1, "2", "Unified", "1G");
  EXPECT_EQ(last_level_cache_bytes(dir_), std::size_t{65536});
}

TEST_F(CacheFolder, NoFolderOrNoCachesGiveZero) {
  EXPECT_EQ(last_level_cache_bytes(dir_), 0u);
  EXPECT_EQ(last_level_cache_bytes(dir_ / "missing"), 0u);
  std::ofstream(dir_ / "uevent") << "x\n";  // sysfs keeps other files beside the index folders
  EXPECT_EQ(last_level_cache_bytes(dir_), 0u);
}

TEST(ThreadHandoff, ARoundTripTakesTimeOnTwoThreadsAndNoneOnOne) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const double ns = thread_handoff_ns(100);
  EXPECT_TRUE(std::isfinite(ns));
  EXPECT_GT(ns, 0.0);
  EXPECT_EQ(thread_handoff_ns(0), 0.0);
  omp_set_num_threads(1);
  EXPECT_EQ(thread_handoff_ns(100), 0.0);
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace rlsim::cli
