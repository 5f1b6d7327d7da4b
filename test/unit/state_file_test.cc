// State files at start: a first start, an unreadable file and a corrupt one
// are told apart, and the last two are never taken for a first start.
#include "common/state_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "test/unit/temp_dir.h"

namespace planc {
namespace {

namespace fs = std::filesystem;

Result<int> parse_number(const std::string& text) {
  uint64_t records = 0;
  auto body = unframe_state(text, "test v1", &records);
  if (!body.ok()) return Result<int>::failure(ErrorCode::kCorrupt, body.error());
  return static_cast<int>(records);
}

LoadedState<int> load(const std::string& path) {
  return load_state_file<int>(
      path, 1800000000, parse_number, [] { return -1; }, "starting from nothing");
}

TEST(StateFileTest, FirstStartIsQuiet) {
  TempDir d;
  auto r = read_state_file(d.path + "/none");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), ErrorCode::kNotFound);
  auto l = load(d.path + "/none");
  EXPECT_EQ(l.value, -1);
  EXPECT_EQ(l.problem, "");
}

TEST(StateFileTest, GoodFileIsRead) {
  TempDir d;
  std::string path = d.path + "/state";
  ASSERT_FALSE(write_file_atomically(path, frame_state("test v1", "a\nb\n", 2)));
  auto l = load(path);
  EXPECT_EQ(l.value, 2);
  EXPECT_EQ(l.problem, "");
}

TEST(StateFileTest, UnreadableFileIsReportedAndKept) {
  TempDir d;
  std::string path = d.path + "/state";
  // A directory where the file should be: open() works, read() fails
  // (EISDIR), whoever runs the test (root reads a mode 000 file).
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  auto r = read_state_file(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), ErrorCode::kUnreadable);
  EXPECT_EQ(r.error(), "cannot read " + path + ": Is a directory");
  auto l = load(path);
  EXPECT_EQ(l.value, -1);
  EXPECT_EQ(l.problem, path + " is unreadable (cannot read " + path +
                           ": Is a directory); moved "
                           "aside to " +
                           path + ".bad-1800000000; starting from nothing");
  EXPECT_TRUE(fs::is_directory(path + ".bad-1800000000"));
  EXPECT_FALSE(fs::exists(path));
  if (geteuid() != 0) {  // as a normal user, mode 000 is unreadable too
    ASSERT_FALSE(write_file_atomically(path, "x"));
    chmod(path.c_str(), 0);
    EXPECT_EQ(read_state_file(path).code(), ErrorCode::kUnreadable);
  }
}

TEST(StateFileTest, CorruptFileIsReportedAndKept) {
  TempDir d;
  std::string path = d.path + "/state";
  std::string good = frame_state("test v1", "a\nb\n", 2);
  ASSERT_FALSE(write_file_atomically(path, good.substr(0, good.size() - 5)));
  auto l = load(path);
  EXPECT_EQ(l.value, -1);
  EXPECT_EQ(l.problem.rfind(path + " is corrupt (", 0), 0u) << l.problem;
  EXPECT_NE(l.problem.find("; moved aside to " + path + ".bad-1800000000; starting from nothing"),
            std::string::npos)
      << l.problem;
  EXPECT_TRUE(fs::exists(path + ".bad-1800000000"));
}

}  // namespace
}  // namespace planc
