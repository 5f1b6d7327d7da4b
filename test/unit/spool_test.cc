// The jobcomp spool as a core unit: append, rotate, replay, set aside.
// Faults (ENOSPC, EIO, short writes, a failing fsync or read) are injected
// through the file-system interface on real files in a temporary directory.
#include "common/spool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "common/append_file.h"
#include "common/config.h"

#include "test/unit/temp_dir.h"

namespace planc {
namespace {

namespace fsys = std::filesystem;

// Real files, with faults on demand.
class FaultyFileSystem : public PosixFileSystem {
 public:
  int write_errno = 0;        // every write fails with this while set
  size_t short_write = 0;     // the next write writes at most this many bytes ...
  int after_short_errno = 0;  // ... and the write after it fails with this (0: succeeds)
  int fsync_errno = 0;
  int read_errno = 0;
  int writes = 0;

  ssize_t write(int fd, const char* data, size_t size) override {
    writes++;
    if (write_errno) return fail(write_errno);
    if (short_write) {
      size_t n = std::min(size, short_write);
      short_write = 0;
      armed_after_short_ = true;
      return PosixFileSystem::write(fd, data, n);
    }
    if (armed_after_short_) {
      armed_after_short_ = false;
      if (after_short_errno) return fail(after_short_errno);
    }
    return PosixFileSystem::write(fd, data, size);
  }
  int fsync(int fd) override {
    return fsync_errno ? fail(fsync_errno) : PosixFileSystem::fsync(fd);
  }
  int read_file(const std::string& path, std::string* out) override {
    return read_errno ? fail(read_errno) : PosixFileSystem::read_file(path, out);
  }

 private:
  static int fail(int err) {
    errno = err;
    return -1;
  }
  bool armed_after_short_ = false;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Segment segment(uint32_t job_id, const std::string& name = "job") {
  Segment s;
  s.cluster = "planc";
  s.job_id = job_id;
  s.start_time = 1'800'000'000 + job_id;
  s.end_time = s.start_time + 60;
  s.qos = "p3-spot";
  s.state = "COMPLETED";
  s.cpus = 1;
  s.job_name = name;
  return s;
}

std::vector<uint32_t> job_ids(const std::vector<SpoolRecord>& records) {
  std::vector<uint32_t> ids;
  for (const SpoolRecord& r : records) ids.push_back(r.seg.job_id);
  return ids;
}

// A spool with file 1 open in an appender, as jobcomp/planc starts.
struct Fixture {
  TempDir dir;
  FaultyFileSystem fs;
  Spool spool{dir.path, fs};
  RecordAppender appender{fs};
  Fixture() { appender.replace(spool.create(1).value()); }
  void append(uint32_t job_id) { (void)appender.append(serialize_segment(segment(job_id))); }
  // The worker's rotation: the next file in, the old one finished.
  std::string rotate(uint64_t next) {
    AppendFile old = appender.replace(spool.create(next).value());
    std::string error;
    appender.put_back(spool.finish(std::move(old), appender.take_waiting(), &error));
    return error;
  }
};

TEST(SpoolTest, AppendRotateReadInOrder) {
  Fixture f;
  for (uint32_t id : {1, 2, 3}) f.append(id);
  EXPECT_EQ(f.fs.writes, 3) << "one write(2) per record";
  EXPECT_FALSE(f.appender.idle());
  EXPECT_EQ(f.rotate(2), "");
  EXPECT_TRUE(f.appender.idle()) << "the new file is empty";
  EXPECT_EQ(f.spool.pending().value(), (std::vector<uint64_t>{1, 2}));
  auto c = f.spool.read(1);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(job_ids(c.value().records), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_TRUE(c.value().damaged.empty());
  EXPECT_EQ(c.value().records[1].line, serialize_segment(segment(2)));
}

// Damage found when reading: each damaged line is named and skipped, the
// rest of the file is read.
struct DamageCase {
  const char* name;
  std::string (*spoil)(const std::string& good);  // the second of three lines
  bool last;                                      // the spoiled line ends the file
  const char* error;
};

TEST(SpoolTest, DamagedLinesAreSkippedAndNamed) {
  const DamageCase cases[] = {
      {"torn last line (a crash in mid-write)",
       [](const std::string& l) { return l.substr(0, l.size() / 2); }, true,
       "no checksum (torn record)"},
      {"CRC failure (a changed byte)",
       [](const std::string& l) {
         std::string s = l;
         s[20] = s[20] == 'x' ? 'y' : 'x';
         return s;
       },
       false, "checksum mismatch"},
      {"unknown record version",
       [](const std::string& l) {
         RecordWriter w("planc-seg-99");
         w.add("x");
         (void)l;
         return w.line();
       },
       false, "unknown record version 'planc-seg-99'"},
      {"empty line", [](const std::string&) { return std::string("\n"); }, false,
       "no checksum (torn record)"},
  };
  for (const DamageCase& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    Spool spool(dir.path);
    std::string text = serialize_segment(segment(1));
    std::string spoiled = c.spoil(serialize_segment(segment(2)));
    if (c.last)
      text += serialize_segment(segment(3)) + spoiled;
    else
      text += spoiled + serialize_segment(segment(3));
    std::ofstream(spool.path(7), std::ios::binary) << text;
    auto r = spool.read(7);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(job_ids(r.value().records), (std::vector<uint32_t>{1, 3}));
    ASSERT_EQ(r.value().damaged.size(), 1u);
    EXPECT_EQ(r.value().damaged[0].line_no, c.last ? 3u : 2u);
    EXPECT_EQ(r.value().damaged[0].error, c.error);
  }
}

// A write that fails: the record is kept in memory, the file is left as it
// was (no fragment), and the record reaches the file at the next rotation.
struct WriteFaultCase {
  const char* name;
  int write_errno;        // every write fails
  size_t short_write;     // or: one short write ...
  int after_short_errno;  // ... then this
  ErrorCode code;
  const char* message;
};

TEST(SpoolTest, WriteFaultsKeepTheRecordAndLeaveNoFragment) {
  const WriteFaultCase cases[] = {
      {"disk full (ENOSPC)", ENOSPC, 0, 0, ErrorCode::kRetryable, "No space left on device"},
      {"I/O error (EIO)", EIO, 0, 0, ErrorCode::kRetryable, "Input/output error"},
      {"quota (EDQUOT)", EDQUOT, 0, 0, ErrorCode::kRetryable, "Disk quota exceeded"},
      {"short write, then ENOSPC", 0, 10, ENOSPC, ErrorCode::kRetryable, "No space left on device"},
      {"short write, then EIO", 0, 25, EIO, ErrorCode::kRetryable, "Input/output error"},
  };
  for (const WriteFaultCase& c : cases) {
    SCOPED_TRACE(c.name);
    Fixture f;
    f.append(1);
    const std::string before = slurp(f.spool.path(1));
    f.fs.write_errno = c.write_errno;
    f.fs.short_write = c.short_write;
    f.fs.after_short_errno = c.after_short_errno;
    auto r = f.appender.append(serialize_segment(segment(2)));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.code(), c.code);
    EXPECT_NE(r.error().find(f.spool.path(1)), std::string::npos) << r.error();
    EXPECT_NE(r.error().find(c.message), std::string::npos) << r.error();
    EXPECT_EQ(f.appender.waiting(), 1u) << "kept, and the first failure (the one to log)";
    EXPECT_EQ(slurp(f.spool.path(1)), before) << "no fragment of the failed record";
    // Later records queue behind it without a write, so order is kept.
    f.fs.write_errno = 0;
    int writes = f.fs.writes;
    EXPECT_FALSE(f.appender.append(serialize_segment(segment(3))).ok());
    EXPECT_EQ(f.fs.writes, writes);
    EXPECT_EQ(f.appender.waiting(), 2u);
    // The disk has room again: the rotation writes them into the closed file.
    EXPECT_EQ(f.rotate(2), "");
    EXPECT_EQ(f.appender.waiting(), 0u);
    EXPECT_EQ(job_ids(f.spool.read(1).value().records), (std::vector<uint32_t>{1, 2, 3}));
  }
}

TEST(SpoolTest, ShortWriteIsCompletedNotLost) {
  Fixture f;
  f.fs.short_write = 7;
  ASSERT_TRUE(f.appender.append(serialize_segment(segment(1))).ok());
  EXPECT_EQ(f.fs.writes, 2);
  EXPECT_EQ(slurp(f.spool.path(1)), serialize_segment(segment(1)));
}

TEST(SpoolTest, RecordsThatStillCannotBeWrittenStayInMemory) {
  Fixture f;
  f.append(1);
  f.fs.write_errno = ENOSPC;
  f.append(2);
  f.append(3);
  std::string error = f.rotate(2);
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  EXPECT_EQ(f.appender.waiting(), 2u) << "back in the appender, in order";
  f.fs.write_errno = 0;
  f.append(4);  // queued behind 2 and 3
  EXPECT_TRUE(f.appender.flush_waiting().ok());
  EXPECT_EQ(job_ids(f.spool.read(2).value().records), (std::vector<uint32_t>{2, 3, 4}));
}

TEST(SpoolTest, FailedFsyncIsReported) {
  Fixture f;
  f.append(1);
  f.fs.fsync_errno = EIO;
  std::string error = f.rotate(2);
  EXPECT_NE(error.find("cannot fsync " + f.spool.path(1) + ": Input/output error"),
            std::string::npos)
      << error;
}

// The bill store, as the worker gives it: bills by key, a replay writes
// nothing twice; refuses (kRefused) job ids in `refuse`, fails (kRetryable)
// while `down`.
struct FakeStore {
  std::set<std::tuple<std::string, uint32_t, int64_t>> keys;
  std::set<uint32_t> refuse;
  bool down = false;
  int calls = 0;
  Result<size_t> write(const std::vector<Bill>& bills) {
    calls++;
    if (down) return Result<size_t>::failure(ErrorCode::kRetryable, "cannot connect to PostgreSQL");
    for (const Bill& b : bills)
      if (refuse.count(b.seg.job_id))
        return Result<size_t>::failure(ErrorCode::kRefused, "invalid byte sequence");
    size_t fresh = 0;
    for (const Bill& b : bills)
      fresh += keys.emplace(b.seg.cluster, b.seg.job_id, b.seg.start_time).second;
    return fresh;
  }
};

Result<SpoolStored> store(const Spool& spool, uint64_t seq, FakeStore& db, size_t batch = 2) {
  PlancConfig cfg;
  return spool.store(
      seq, [&](Segment s) { return price_segment(cfg, s); },
      [&](const BillBatch& b) { return db.write(b.bills); }, batch, "jobcomp");
}

TEST(SpoolTest, ReplayAfterACrashStoresEveryRecordOnce) {
  TempDir dir;
  {
    // slurmctld appends and is killed: nothing closed, nothing fsynced.
    Spool spool(dir.path);
    RecordAppender appender;
    appender.replace(spool.create(1).value());
    for (uint32_t id = 1; id <= 5; id++)
      ASSERT_TRUE(appender.append(serialize_segment(segment(id))).ok());
    // ... and half a record more, as a crash of the machine can leave.
    std::string torn = serialize_segment(segment(6));
    ASSERT_EQ(write(appender.file().fd, torn.data(), torn.size() / 2),
              static_cast<ssize_t>(torn.size() / 2));
  }
  // The restart: every file left is replayed, the torn line skipped.
  Spool spool(dir.path);
  auto pending = spool.pending();
  ASSERT_TRUE(pending.ok()) << pending.error();
  ASSERT_EQ(pending.value(), std::vector<uint64_t>{1});
  // A copy of the same records, as when a file was stored but not yet
  // removed before the crash: the bill key writes nothing twice.
  fsys::copy_file(spool.path(1), spool.path(2));
  FakeStore db;
  auto first = store(spool, 1, db);
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_EQ(first.value().records, 5u);
  EXPECT_EQ(first.value().fresh, 5u);
  ASSERT_EQ(first.value().damaged.size(), 1u);
  EXPECT_EQ(first.value().damaged[0].line_no, 6u);
  auto again = store(spool, 2, db);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().fresh, 0u);
  EXPECT_EQ(db.keys.size(), 5u);
  EXPECT_TRUE(spool.pending().value().empty()) << "stored files are removed";
}

TEST(SpoolTest, RefusedBillIsSetAsideAndTheOthersFlow) {
  Fixture f;
  for (uint32_t id = 1; id <= 5; id++) f.append(id);
  f.rotate(2);
  FakeStore db;
  db.refuse = {4};
  auto r = store(f.spool, 1, db);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().fresh, 4u);
  ASSERT_EQ(r.value().rejected.size(), 1u);
  EXPECT_EQ(r.value().rejected[0].seg.job_id, 4u);
  EXPECT_EQ(r.value().rejected[0].error, "invalid byte sequence");
  EXPECT_EQ(slurp(f.spool.rejected_path(1)), serialize_segment(segment(4)))
      << "the record as it was, ready to be fixed and replayed";
  EXPECT_FALSE(fsys::exists(f.spool.path(1)));
  EXPECT_EQ(f.spool.pending().value(), std::vector<uint64_t>{2}) << ".rejected is not replayed";
}

TEST(SpoolTest, DatabaseDownKeepsTheFile) {
  Fixture f;
  for (uint32_t id = 1; id <= 3; id++) f.append(id);
  f.rotate(2);
  FakeStore db;
  db.down = true;
  auto r = store(f.spool, 1, db);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), ErrorCode::kRetryable);
  EXPECT_EQ(r.error(), "cannot connect to PostgreSQL");
  EXPECT_TRUE(fsys::exists(f.spool.path(1)));
  EXPECT_FALSE(fsys::exists(f.spool.rejected_path(1))) << "nothing set aside for an outage";
  db.down = false;
  auto later = store(f.spool, 1, db);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later.value().fresh, 3u);
}

TEST(SpoolTest, RefusedBillThatCannotBeSetAsideKeepsTheFile) {
  Fixture f;
  f.append(1);
  f.rotate(2);
  FakeStore db;
  db.refuse = {1};
  f.fs.write_errno = ENOSPC;
  auto r = store(f.spool, 1, db);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), ErrorCode::kRetryable);
  EXPECT_NE(r.error().find("cannot set a refused bill aside"), std::string::npos) << r.error();
  EXPECT_TRUE(fsys::exists(f.spool.path(1)));
}

TEST(SpoolTest, ReadErrorsAreToldApart) {
  Fixture f;
  f.append(1);
  f.rotate(2);
  auto gone = f.spool.read(9);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.code(), ErrorCode::kNotFound);
  f.fs.read_errno = EIO;
  auto unreadable = f.spool.read(1);
  ASSERT_FALSE(unreadable.ok());
  EXPECT_EQ(unreadable.code(), ErrorCode::kUnreadable);
  EXPECT_EQ(unreadable.error(), "cannot read " + f.spool.path(1) + ": Input/output error");
  FakeStore db;
  EXPECT_FALSE(store(f.spool, 1, db).ok());
  EXPECT_TRUE(fsys::exists(f.spool.path(1))) << "an unreadable file is never removed";
}

TEST(SpoolTest, PendingListsOnlySpoolFilesInOrder) {
  TempDir dir;
  Spool spool(dir.path);
  for (const char* name : {"000000000010.spool", "000000000002.spool",
                           "000000000002.spool.rejected", "notes.txt", "3.spool~"})
    std::ofstream(dir.path + "/" + name) << "";
  EXPECT_EQ(spool.pending().value(), (std::vector<uint64_t>{2, 10}));
  Spool missing(dir.path + "/nope");
  EXPECT_EQ(missing.pending().code(), ErrorCode::kNotFound);
  ASSERT_TRUE(missing.make_dir().ok());
  EXPECT_TRUE(missing.pending().value().empty());
  auto nested = Spool(dir.path + "/a/b").make_dir();
  ASSERT_FALSE(nested.ok());
  EXPECT_EQ(nested.error(), "cannot create " + dir.path + "/a/b: No such file or directory");
}

TEST(SpoolTest, BackoffDoublesToThirtySecondsAndLogsOnceAMinute) {
  RetryBackoff b;
  EXPECT_EQ(b.wait_seconds(), 1);
  struct Step {
    int64_t at;
    int wait;
    bool log;
  };
  const Step steps[] = {{0, 1, true},    {1, 2, false},   {3, 4, false},  {7, 8, false},
                        {15, 16, false}, {31, 30, false}, {61, 30, true}, {91, 30, false}};
  for (const Step& s : steps) {
    bool log = false;
    EXPECT_EQ(b.failed(s.at, &log), s.wait) << "at " << s.at;
    EXPECT_EQ(log, s.log) << "at " << s.at;
  }
  EXPECT_TRUE(b.succeeded());
  EXPECT_EQ(b.wait_seconds(), 1);
  EXPECT_FALSE(b.succeeded());
}

}  // namespace
}  // namespace planc
