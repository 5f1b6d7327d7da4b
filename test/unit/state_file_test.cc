// State files at start: a first start, an unreadable file and a corrupt one
// are told apart, and the last two are never taken for a first start.
#include "common/state_file.h"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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

TEST(StateFileTest, NoSyncReplacesByExchangeAndLeavesNothingBehind) {
  TempDir d;
  std::string path = d.path + "/snapshot";
  ASSERT_FALSE(write_file_atomically(path, "first\n", Durability::kNoSync));  // nothing to exchange
  // A reader holding the old file keeps reading it whole.
  std::ifstream old(path);
  ASSERT_FALSE(write_file_atomically(path, "second\n", Durability::kNoSync));
  ASSERT_FALSE(write_file_atomically(path, "third\n", Durability::kNoSync));
  std::string held;
  std::getline(old, held);
  EXPECT_EQ(held, "first");
  auto r = read_state_file(path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value(), "third\n");
  EXPECT_FALSE(fs::exists(path + ".new"));
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()), 1);
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
}

// Drops the capabilities that let root read any file from this process's
// effective set: what a slurmctld running as SlurmUser=slurm has.
bool drop_file_read_override() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH}) data[0].effective &= ~(1u << cap);
  return syscall(SYS_capset, &header, data) == 0;
}

TEST(StateFileTest, Mode000FileIsUnreadableNotAFirstStart) {
  TempDir d;
  std::string path = d.path + "/state";
  ASSERT_FALSE(write_file_atomically(path, frame_state("test v1", "a\n", 1)));
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  // In a child, so the test process keeps its capabilities (the tests run
  // as root here; a normal user needs no dropping).
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (geteuid() == 0 && !drop_file_read_override()) _exit(2);
    auto r = read_state_file(path);
    bool want = !r.ok() && r.code() == ErrorCode::kUnreadable &&
                r.error() == "cannot open " + path + ": Permission denied";
    auto l = load(path);
    want = want && l.value == -1 &&
           l.problem == path + " is unreadable (cannot open " + path +
                            ": Permission denied); moved aside to " + path +
                            ".bad-1800000000; starting from nothing";
    if (!want) fprintf(stderr, "read: %s\nload: %s\n", r.error().c_str(), l.problem.c_str());
    _exit(want ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: could not drop CAP_DAC_OVERRIDE";
  EXPECT_TRUE(fs::exists(path + ".bad-1800000000"));
  EXPECT_FALSE(fs::exists(path));
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
