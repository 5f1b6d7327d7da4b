#include "common/job_watch.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

constexpr uint32_t kFirst = 1, kMax = 0x03ff0000;  // Slurm's defaults

TEST(NewIdRangesTest, TheIdsHandedOutSinceTheLastSample) {
  EXPECT_TRUE(new_id_ranges(10, 11, kFirst, kMax).empty());
  EXPECT_EQ(new_id_ranges(10, 14, kFirst, kMax), (std::vector<IdRange>{{11, 13}}));
  EXPECT_EQ(id_count(new_id_ranges(10, 14, kFirst, kMax)), 3u);
}

TEST(NewIdRangesTest, WrapsFromMaxJobIdToFirstJobId) {
  // MaxJobId=100, FirstJobId=5: ids 5..99.  Seen up to 97, next is 8.
  EXPECT_EQ(new_id_ranges(97, 8, 5, 100), (std::vector<IdRange>{{98, 99}, {5, 7}}));
  EXPECT_EQ(new_id_ranges(99, 6, 5, 100), (std::vector<IdRange>{{5, 5}}));
  EXPECT_EQ(new_id_ranges(97, 5, 5, 100), (std::vector<IdRange>{{98, 99}}));
  EXPECT_EQ(id_count(new_id_ranges(97, 8, 5, 100)), 5u);
}

TEST(JobWatchTest, WalksUntilItKnowsTheJobs) {
  JobWatch w;
  EXPECT_TRUE(w.plan({}, 50, kFirst, kMax, true).walk);
  w.sampled({7, 3, 7}, 50);
  EXPECT_EQ(w.size(), 2u);
  auto p = w.plan({12, 3}, 53, kFirst, kMax, true);
  EXPECT_FALSE(p.walk);
  EXPECT_EQ(p.ids, (std::vector<uint32_t>{3, 7, 12}));  // watched and started, once each
  EXPECT_EQ(p.new_ids, (std::vector<IdRange>{{50, 52}}));
  EXPECT_TRUE(w.plan({}, 50, kFirst, kMax, true).new_ids.empty());
}

TEST(JobWatchTest, FallsBackToAWalk) {
  JobWatch w;
  w.sampled({}, 50);
  EXPECT_TRUE(w.plan({}, 50, kFirst, kMax, false).walk) << "no job-begin hook of ours";
  EXPECT_TRUE(w.plan({}, 50 + JobWatch::kMaxNewIds + 1, kFirst, kMax, true).walk)
      << "too many new ids";
  EXPECT_FALSE(w.plan({}, 50 + JobWatch::kMaxNewIds, kFirst, kMax, true).walk);
  EXPECT_TRUE(w.plan({}, kMax + 7, kFirst, kMax, true).walk) << "a federation's ids";
  w.lost_starts();
  EXPECT_TRUE(w.plan({}, 50, kFirst, kMax, true).walk);
  // A cluster with no job yet: next is FirstJobId, nothing seen, walk (of nothing).
  JobWatch fresh;
  fresh.sampled({}, kFirst);
  EXPECT_TRUE(fresh.plan({}, kFirst, kFirst, kMax, true).walk);
}

TEST(JobWatchTest, AScanReplacesTheIdsButNotTheNewIdMark) {
  JobWatch w;
  w.sampled({3, 7}, 50);
  w.rescanned({9, 4});
  auto p = w.plan({}, 52, kFirst, kMax, true);
  EXPECT_EQ(p.ids, (std::vector<uint32_t>{4, 9}));
  EXPECT_EQ(p.new_ids, (std::vector<IdRange>{{50, 51}}));
}

}  // namespace
}  // namespace planc
