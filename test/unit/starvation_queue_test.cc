#include "common/starvation_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <unordered_map>

#include "test/unit/test_config.h"

namespace planc {
namespace {

constexpr uint32_t kFirst = 1, kMax = 0x03ff0000;  // Slurm's defaults
constexpr time_t kNow = 1'800'000'000;
constexpr time_t kAfter = 30 * 60;

PlancConfig cfg() { return conf("StarvationThreshold=30min"); }

PendingJob p3(uint32_t id, PendingReason r, time_t eligible) {
  return PendingJob{id, TierId::kP3, r, eligible, 8};
}

TEST(StarvationDueTest, AJobWaitingForTheClusterIsDueWhenItsThresholdHasPassed) {
  const PlancConfig c = cfg();
  // Eligible 10 min ago: due 20 min and a second from now (more than 30 min).
  EXPECT_EQ(starvation_due(c, p3(1, PendingReason::kResources, kNow - 600), kNow),
            kNow - 600 + kAfter + 1);
  // Starved already (but not upgraded: the share, the per-interval limit):
  // due since its threshold passed, so the next scan looks again, the
  // longest waiting first.
  EXPECT_EQ(starvation_due(c, p3(1, PendingReason::kPriority, kNow - kAfter - 5), kNow), kNow - 4);
  // Starved but larger than the free attempts' whole share: looked at
  // again a minute on, out of the way of those that can have an attempt.
  EXPECT_EQ(starvation_due(c, p3(1, PendingReason::kPriority, kNow - kAfter - 5), kNow, 4),
            kNow + StarvationQueue::kRecheckSeconds);
  // At exactly the threshold it has not starved yet: due a second later.
  EXPECT_EQ(starvation_due(c, p3(1, PendingReason::kPriority, kNow - kAfter), kNow), kNow + 1);
}

TEST(StarvationDueTest, AJobWaitingForAReasonOfItsOwnIsLookedAtAgainAMinuteOn) {
  const PlancConfig c = cfg();
  for (PendingReason r :
       {PendingReason::kHeld, PendingReason::kDependency, PendingReason::kBeginTime,
        PendingReason::kAccountLimit, PendingReason::kNone, PendingReason::kOther})
    EXPECT_EQ(starvation_due(c, p3(1, r, kNow - 3 * kAfter), kNow),
              kNow + StarvationQueue::kRecheckSeconds)
        << reason_name(r);
  EXPECT_EQ(starvation_due(c, p3(1, PendingReason::kResources, 0), kNow),
            kNow + StarvationQueue::kRecheckSeconds)
      << "no eligible time known";
}

TEST(StarvationDueTest, ARunningJobCanStarveOnlyAThresholdAfterARequeue) {
  EXPECT_EQ(starvation_due_running(cfg(), TierId::kP3, kNow), kNow + kAfter + 1);
  // A tier's own StarveAfter wins over StarvationThreshold.
  const PlancConfig c = conf("StarvationThreshold=30min\nTier=P3 StarveAfter=10min");
  EXPECT_EQ(starvation_due_running(c, TierId::kP3, kNow), kNow + 601);
  EXPECT_EQ(starvation_due(c, p3(1, PendingReason::kResources, kNow), kNow), kNow + 601);
  // A short StarveAfter (a test's, a compressed replay's) is also how soon
  // a job held back by its own reason is looked at again.
  const PlancConfig s = conf("StarvationThreshold=20s");
  EXPECT_EQ(starvation_due(s, p3(1, PendingReason::kHeld, kNow - 100), kNow), kNow + 21);
}

TEST(StarvationQueueTest, WalksFirstThenLooksOnlyAtTheJobsDueAndTheNewIds) {
  StarvationQueue q;
  EXPECT_TRUE(q.walk_due(kNow, 50, kFirst, kMax)) << "nothing known yet";
  q.walked(kNow, 50, {{7, kNow + 100}, {3, kNow + 10}, {9, kNow + 10}}, {20});
  EXPECT_EQ(q.size(), 3u);
  EXPECT_FALSE(q.walk_due(kNow + 5, 50, kFirst, kMax));
  EXPECT_TRUE(q.new_ids(50, kFirst, kMax).empty());
  EXPECT_EQ(q.new_ids(53, kFirst, kMax), (std::vector<IdRange>{{50, 52}}));
  EXPECT_TRUE(q.take_due(kNow + 9).empty());
  EXPECT_EQ(q.take_due(kNow + 10), (std::vector<uint32_t>{3, 9}));
  EXPECT_EQ(q.size(), 1u) << "taken until scheduled again";
  q.schedule(3, kNow + 50);
  q.looked(53);
  EXPECT_TRUE(q.new_ids(53, kFirst, kMax).empty());
  EXPECT_EQ(q.take_due(kNow + 60), (std::vector<uint32_t>{3}));
  EXPECT_EQ(q.take_due(kNow + 1000), (std::vector<uint32_t>{7}));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.marked(), (std::set<uint32_t>{20}));
}

TEST(StarvationQueueTest, AScanTakesTheLongestWaitingFirstAndAtMostItsShare) {
  StarvationQueue q;
  q.walked(kNow, 50, {{1, kNow - 30}, {2, kNow - 10}, {3, kNow - 20}, {4, kNow + 5}}, {});
  EXPECT_EQ(q.take_due(kNow, 2), (std::vector<uint32_t>{1, 3}));
  // Not upgraded (the share is full): back in their places.
  q.schedule(1, kNow - 30);
  q.schedule(3, kNow - 20);
  EXPECT_EQ(q.take_due(kNow + 1, 2), (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(q.take_due(kNow + 1, 2), (std::vector<uint32_t>{2}));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(StarvationQueue::take_at_most(conf("StarvationMaxPerInterval=10")), 256u);
  EXPECT_EQ(StarvationQueue::take_at_most(conf("StarvationMaxPerInterval=100")), 400u);
}

TEST(StarvationQueueTest, ScheduleMovesAJobItHolds) {
  StarvationQueue q;
  q.walked(kNow, 50, {{7, kNow + 100}}, {});
  q.schedule(7, kNow + 5);
  q.schedule(7, kNow + 5);
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.take_due(kNow + 5), (std::vector<uint32_t>{7})) << "once, at its new time";
  EXPECT_TRUE(q.take_due(kNow + 100).empty()) << "not at its old one";
}

TEST(StarvationQueueTest, AJobMovedAwayAndBackIsTakenOnce) {
  StarvationQueue q;
  q.walked(kNow, 50, {{7, kNow + 10}, {8, kNow + 20}}, {});
  q.schedule(7, kNow + 100);
  q.schedule(7, kNow + 10);  // two heap entries at kNow + 10 now
  EXPECT_EQ(q.take_due(kNow + 10), (std::vector<uint32_t>{7}));
  EXPECT_EQ(q.take_due(kNow + 100), (std::vector<uint32_t>{8}));
  EXPECT_EQ(q.size(), 0u);
  // Taken, then put back: held again, once.
  q.schedule(7, kNow + 30);
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.take_due(kNow + 1000), (std::vector<uint32_t>{7}));
}

TEST(StarvationQueueTest, JobsDueAtOnceComeInTheOrderTheyWereScheduled) {
  StarvationQueue q;
  // A walk lists jobs in slurmctld's order, not by id; a job listed twice
  // keeps its last due time.
  q.walked(kNow, 50, {{30, kNow}, {10, kNow}, {20, kNow}, {10, kNow + 5}}, {});
  EXPECT_EQ(q.size(), 3u);
  // An id below those held (the id space wrapped).
  q.schedule(5, kNow);
  EXPECT_EQ(q.take_due(kNow), (std::vector<uint32_t>{30, 20, 5}));
  EXPECT_EQ(q.take_due(kNow + 5), (std::vector<uint32_t>{10}));
}

TEST(StarvationQueueTest, AJobMovedAwayAndBackGoesBehindTheOthersOfItsTime) {
  StarvationQueue q;
  q.walked(kNow, 50, {{1, kNow}, {2, kNow}}, {});
  q.schedule(1, kNow + 100);
  q.schedule(1, kNow);
  EXPECT_EQ(q.take_due(kNow), (std::vector<uint32_t>{2, 1}));
}

TEST(StarvationQueueTest, JobsPutBackAtTheSameDueTimeGoBehindTheOthers) {
  // A scan that takes at most 2 of 3 starved jobs due at the same second
  // (a bulk submission) and puts both back comes to the third next.
  StarvationQueue q;
  q.walked(kNow, 50, {{1, kNow - 10}, {2, kNow - 10}, {3, kNow - 10}}, {});
  EXPECT_EQ(q.take_due(kNow, 2), (std::vector<uint32_t>{1, 2}));
  q.schedule(1, kNow - 10);
  q.schedule(2, kNow - 10);
  EXPECT_EQ(q.take_due(kNow, 2), (std::vector<uint32_t>{3, 1}));
}

// The queue as it was built first (a multimap by due time and a hash map
// by id), as the reference the flat one must agree with call by call.
class ReferenceQueue {
 public:
  void walked(const std::vector<StarvationQueue::Entry>& jobs) {
    by_due_.clear();
    due_of_.clear();
    for (const auto& e : jobs) schedule(e.job_id, e.due);
  }
  std::vector<uint32_t> take_due(time_t now, size_t limit) {
    std::vector<uint32_t> out;
    auto end = by_due_.upper_bound(now);
    auto it = by_due_.begin();
    for (; it != end && out.size() < limit; ++it) {
      out.push_back(it->second);
      due_of_.erase(it->second);
    }
    by_due_.erase(by_due_.begin(), it);
    return out;
  }
  void schedule(uint32_t job_id, time_t due) {
    auto [it, added] = due_of_.try_emplace(job_id, due);
    if (!added) {
      if (it->second == due) return;
      auto range = by_due_.equal_range(it->second);
      for (auto j = range.first; j != range.second; ++j)
        if (j->second == job_id) {
          by_due_.erase(j);
          break;
        }
      it->second = due;
    }
    by_due_.emplace(due, job_id);
  }
  size_t size() const { return due_of_.size(); }

 private:
  std::multimap<time_t, uint32_t> by_due_;
  std::unordered_map<uint32_t, time_t> due_of_;
};

// Random walks, takes and moves, ids rising as slurmctld hands them out
// and, in the second half, wrapped below those held: the same jobs, in the
// same order, after every call.
TEST(StarvationQueueTest, AgreesWithTheReferenceCallByCall) {
  std::mt19937 rng(20261205);
  auto pick = [&rng](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  StarvationQueue q;
  ReferenceQueue ref;
  time_t t = kNow;
  uint32_t next = 100000;
  uint32_t low = 1;
  for (int step = 0; step < 60000; step++) {
    const uint32_t op = pick(0, 999);
    if (op < 2) {
      std::vector<StarvationQueue::Entry> jobs;
      const uint32_t n = pick(0, 3000);
      for (uint32_t i = 0; i < n; i++)
        jobs.push_back({pick(next - 5000, next), t + static_cast<time_t>(pick(0, 8)) - 4});
      q.walked(t, next, jobs, {});
      ref.walked(jobs);
    } else if (op < 300) {
      const size_t limit = pick(0, 300);
      t += pick(0, 3);
      ASSERT_EQ(q.take_due(t, limit), ref.take_due(t, limit)) << "step " << step;
    } else {
      uint32_t id;
      if (op < 600)
        id = pick(next - 60, next);  // a job it may hold: moved, or put back
      else if (op < 800 || step < 30000)
        id = ++next;  // a new id
      else
        id = low++;  // a new id after the id space wrapped
      // Few distinct due times: many ties, whose order is checked too.
      const time_t due = t + 5 * static_cast<time_t>(pick(0, 8)) - 2;
      q.schedule(id, due);
      ref.schedule(id, due);
    }
    ASSERT_EQ(q.size(), ref.size()) << "step " << step;
  }
  EXPECT_GT(low, StarvationQueue::kRecentMax) << "ids below those held were merged in";
  EXPECT_EQ(q.take_due(t + 1000), ref.take_due(t + 1000, SIZE_MAX));
}

TEST(StarvationQueueTest, TakenPlacesAndStaleEntriesDoNotPileUp) {
  StarvationQueue q;
  std::vector<StarvationQueue::Entry> jobs;
  for (uint32_t id = 1; id <= 100; id++) jobs.push_back({id, kNow + id});
  q.walked(kNow, 101, jobs, {});
  // Scans take some and put them back later; jobs move again and again
  // (each move leaves a stale heap entry); new ids come and are taken for
  // good (each leaves a taken place by id).
  time_t t = kNow;
  uint32_t next = 101;
  for (int scan = 0; scan < 3000; scan++, t += 30) {
    for (uint32_t id : q.take_due(t, 20))
      if (id <= 100) q.schedule(id, t + 600);
    for (uint32_t id = 1; id <= 100; id += 7) q.schedule(id, t + 300 + scan % 2);
    q.schedule(next++, t);
  }
  const size_t held = q.size();
  EXPECT_GE(held, 100u);
  EXPECT_LE(q.slots(), 4 * held + 1024);
  // Everything still comes out once.
  std::vector<uint32_t> all = q.take_due(t + 100000);
  EXPECT_EQ(all.size(), held);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.front(), 1u);
  EXPECT_EQ(q.size(), 0u);
}

TEST(StarvationQueueTest, WalksAgainEveryWalkIntervalAndWhenItCannotKeepUp) {
  StarvationQueue q;
  q.walked(kNow, 50, {}, {});
  EXPECT_FALSE(q.walk_due(kNow + StarvationQueue::kWalkSeconds - 1, 50, kFirst, kMax));
  EXPECT_TRUE(q.walk_due(kNow + StarvationQueue::kWalkSeconds, 50, kFirst, kMax));
  EXPECT_TRUE(q.walk_due(kNow - 1, 50, kFirst, kMax)) << "the clock went back";
  EXPECT_TRUE(q.walk_due(kNow + 1, 50 + StarvationQueue::kMaxNewIds + 1, kFirst, kMax))
      << "too many new ids";
  EXPECT_FALSE(q.walk_due(kNow + 1, 50 + StarvationQueue::kMaxNewIds, kFirst, kMax));
  EXPECT_TRUE(q.walk_due(kNow + 1, kMax, kFirst, kMax)) << "an id outside the id space";
  q.forget();
  EXPECT_TRUE(q.walk_due(kNow + 1, 50, kFirst, kMax)) << "planc.conf changed";
  // Wrapped from MaxJobId to FirstJobId: the ids after 97, then from 5.
  StarvationQueue w;
  w.walked(kNow, 98, {}, {});
  EXPECT_FALSE(w.walk_due(kNow + 1, 8, 5, 100));
  EXPECT_EQ(w.new_ids(8, 5, 100), (std::vector<IdRange>{{98, 99}, {5, 7}}));
}

TEST(StarvationQueueTest, AWalkReplacesWhatTheQueueHeld) {
  StarvationQueue q;
  q.walked(kNow, 50, {{7, kNow + 100}, {8, kNow}}, {20, 21});
  q.walked(kNow + 60, 60, {{9, kNow + 70}}, {21});
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.take_due(kNow + 1000), (std::vector<uint32_t>{9}));
  EXPECT_EQ(q.marked(), (std::set<uint32_t>{21}));
  EXPECT_EQ(q.last_walk(), kNow + 60);
  q.mark(22);
  q.unmark(21);
  EXPECT_EQ(q.marked(), (std::set<uint32_t>{22}));
}

}  // namespace
}  // namespace planc
