#include "common/run_journal.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

constexpr int64_t kDay0 = 1'796'000'000 - 1'796'000'000 % 86400;  // a UTC midnight (2026-11-30)

// A run as the job-begin hook records it: state RUNNING, not ended.
Segment start(uint32_t job_id, int64_t t, const std::string& name = "job") {
  Segment r;
  r.cluster = "planc";
  r.job_id = job_id;
  r.start_time = t;
  r.uid = 1001;
  r.account = "acct-spot";
  r.qos = "p3-spot";
  r.nodes = "gpu[1-2]";
  r.node_count = 2;
  r.state = "RUNNING";
  r.cpus = 4;
  r.gres = {{"gpu", "h800", 2}};
  r.tres_req = "cpu=4,mem=4G,node=2,billing=4,gres/gpu=2";
  r.job_name = name;
  return r;
}

TEST(RunJournalTest, RecordsReadBackWhateverTheName) {
  Segment forged = start(990001, kDay0 + 1, "forged");
  forged.user = "pcalice";
  const std::string name = "x\n" + serialize_segment(forged) + "\x1f\\t 名字";
  std::string text = serialize_segment(start(42, kDay0 + 10, name));
  JournalRead r = read_journal(text);
  ASSERT_EQ(r.starts.size(), 1u) << "one record, whatever its name holds";
  EXPECT_EQ(r.starts[0], start(42, kDay0 + 10, name));
  EXPECT_EQ(r.damaged, 0u);
}

TEST(RunJournalTest, DamagedLinesAreCountedNotMisread) {
  std::string good = serialize_segment(start(1, kDay0));
  std::string flipped = serialize_segment(start(2, kDay0));
  flipped[16] = flipped[16] == '7' ? '8' : '7';
  std::string torn = serialize_segment(start(3, kDay0)).substr(0, 30);
  JournalRead r = read_journal(good + flipped + "\n" + torn);
  ASSERT_EQ(r.starts.size(), 1u);
  EXPECT_EQ(r.starts[0].job_id, 1u);
  EXPECT_EQ(r.damaged, 2u);
}

TEST(RunJournalTest, FileNamesByUtcDay) {
  EXPECT_EQ(journal_file_name(kDay0), "20261130.starts");
  EXPECT_EQ(journal_file_name(kDay0 + 86399), "20261130.starts");
  EXPECT_EQ(journal_file_name(kDay0 + 86400), "20261201.starts");
  EXPECT_EQ(journal_files_for(kDay0 + 100, kDay0 + 200),
            (std::vector<std::string>{"20261129.starts", "20261130.starts", "20261201.starts"}));
  struct Case {
    const char* name;
    int64_t now;
    bool expired;
  };
  const Case cases[] = {
      {"20261130.starts", kDay0 + 40 * 86400, false},
      {"20261130.starts", kDay0 + 41 * 86400, true},
      {"20261130.starts.bak", kDay0 + 400 * 86400, false},  // not ours
      {"2026113x.starts", kDay0 + 400 * 86400, false},
      {"000000000001.spool", kDay0 + 400 * 86400, false},
  };
  for (const Case& c : cases) EXPECT_EQ(journal_file_expired(c.name, c.now), c.expired) << c.name;
}

TEST(RunJournalTest, UnrecordedStartsAreThoseNoBillOrSlurmdbdKnows) {
  const std::vector<Segment> journal = {
      start(10, kDay0 + 100),  // billed
      start(11, kDay0 + 110),  // slurmdbd has it
      start(12, kDay0 + 120),  // known to neither
      start(12, kDay0 + 120),  // the same start twice: listed once
      start(11, kDay0 + 130),  // job id 11 reused by a later run: that run is not known
      start(13, kDay0 + 999),  // outside the window
  };
  const std::set<RunKey> known = {{"planc", 10, kDay0 + 100}, {"planc", 11, kDay0 + 110}};
  std::vector<Segment> hidden = unrecorded_starts(journal, known, kDay0, kDay0 + 500);
  std::vector<std::pair<uint32_t, int64_t>> got;
  for (const Segment& r : hidden) got.emplace_back(r.job_id, r.start_time - kDay0);
  EXPECT_EQ(got, (std::vector<std::pair<uint32_t, int64_t>>{{12, 120}, {11, 130}}));
}

}  // namespace
}  // namespace planc
