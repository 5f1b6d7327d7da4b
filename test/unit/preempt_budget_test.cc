#include "common/preempt_budget.h"

#include <gtest/gtest.h>

#include "common/config.h"

namespace planc {
namespace {

constexpr time_t kT0 = 1790000000;

TEST(PreemptBudgetTest, OffOrUnknownCountMeansNoLimit) {
  PreemptBudget off(0, 3600);
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.remaining(kT0, 100), std::nullopt);
  PreemptBudget on(10, 3600);
  EXPECT_EQ(on.remaining(kT0, std::nullopt), std::nullopt)
      << "slurmctld/planc has not counted the P3 runs: no limit rather than a guess";
}

TEST(PreemptBudgetTest, AllowsTheShareOfTheRunsRunningRoundedDown) {
  PreemptBudget b(10, 3600);
  EXPECT_EQ(b.remaining(kT0, 0), 0u);
  EXPECT_EQ(b.remaining(kT0, 9), 0u) << "10% of 9 runs is no whole preemption";
  EXPECT_EQ(b.remaining(kT0, 10), 1u);
  EXPECT_EQ(b.remaining(kT0, 43), 4u);
  b.record(1, kT0);
  b.record(2, kT0 + 10);
  EXPECT_EQ(b.used(kT0 + 10), 2u);
  EXPECT_EQ(b.remaining(kT0 + 10, 43), 2u);
  b.record(3, kT0 + 20);
  b.record(4, kT0 + 30);
  EXPECT_EQ(b.remaining(kT0 + 30, 43), 0u);
  b.record(5, kT0 + 40);  // a guaranteed preemptor's P3 victim: counted all the same
  EXPECT_EQ(b.remaining(kT0 + 40, 43), 0u) << "never below zero";
  EXPECT_EQ(b.remaining(kT0 + 40, 60), 1u) << "more P3 runs, more budget";
}

TEST(PreemptBudgetTest, TheSoftShareIsReachedBeforeTheBudgetIsSpent) {
  PreemptBudget b(10, 3600);
  EXPECT_FALSE(b.reached(5, kT0, std::nullopt)) << "no count: nothing reached";
  EXPECT_FALSE(PreemptBudget(0, 3600).reached(0, kT0, 50)) << "no budget: nothing reached";
  EXPECT_TRUE(b.reached(5, kT0, 19)) << "5% of 19 runs is none: reached at once";
  EXPECT_FALSE(b.reached(5, kT0, 43)) << "5% of 43 is 2, none used";
  b.record(1, kT0);
  EXPECT_FALSE(b.reached(5, kT0 + 1, 43));
  b.record(2, kT0 + 2);
  EXPECT_TRUE(b.reached(5, kT0 + 2, 43)) << "two of 2 used";
  EXPECT_EQ(b.remaining(kT0 + 2, 43), 2u) << "while P2 jobs still have two";
  EXPECT_FALSE(b.reached(10, kT0 + 2, 43));
  EXPECT_FALSE(b.reached(50, kT0 + 2, 43)) << "never beyond the budget's own share";
  EXPECT_TRUE(b.reached(0, kT0 + 2, 43)) << "0: always";
  for (uint32_t run = 0; run <= 100; ++run)
    for (uint32_t used = 0; used < 8; ++used) {
      PreemptBudget u(10, 3600);
      for (uint32_t i = 0; i < used; ++i) u.record(i + 1, kT0);
      EXPECT_EQ(u.reached(10, kT0, run), u.remaining(kT0, run) == 0u) << run << " " << used;
    }
}

// A P2 preemptor takes a P3 candidate only when the runs its nodes need
// to go fit in what is left, on every node it needs.
TEST(PreemptBudgetTest, AP2PreemptorTakesOnlyWhatTheBudgetCovers) {
  EXPECT_TRUE(p3_budget_covers(1, 1, 1));
  EXPECT_FALSE(p3_budget_covers(2, 1, 1));
  EXPECT_FALSE(p3_budget_covers(1, 2, 1));
  EXPECT_TRUE(p3_budget_covers(2, 2, 4));
  EXPECT_FALSE(p3_budget_covers(3, 2, 5));
  EXPECT_TRUE(p3_budget_covers(0, 1, 0));  // a node that needs no run to go
  EXPECT_TRUE(p3_budget_covers(1, 0, 1));  // no node count: one node
  EXPECT_FALSE(p3_budget_covers(UINT32_MAX, UINT32_MAX, UINT32_MAX));  // no overflow
}

TEST(PreemptBudgetTest, APreemptionLeavesTheWindowExactlyAtItsEnd) {
  PreemptBudget b(10, 3600);
  b.record(1, kT0);
  EXPECT_EQ(b.used(kT0 + 3599), 1u);
  EXPECT_EQ(b.used(kT0 + 3600), 0u);
  EXPECT_EQ(b.used(kT0 - 60), 1u) << "the clock went back: still counted";
  b.prune(kT0 + 3599);
  EXPECT_EQ(b.size(), 1u);
  b.prune(kT0 + 3600);
  EXPECT_EQ(b.size(), 0u);
}

TEST(PreemptBudgetTest, ACalledOffPreemptionIsTakenBack) {
  PreemptBudget b(10, 3600);
  b.record(7, kT0);
  b.record(8, kT0);
  EXPECT_FALSE(b.unrecord(7, kT0 + 1));
  EXPECT_TRUE(b.unrecord(7, kT0));
  EXPECT_FALSE(b.unrecord(7, kT0));
  EXPECT_EQ(b.used(kT0), 1u);
}

TEST(PreemptBudgetTest, ReloadedLimitsApplyToWhatIsKept) {
  PreemptBudget b(10, 3600);
  b.record(1, kT0);
  b.set_limits(10, 60);
  EXPECT_EQ(b.used(kT0 + 60), 0u);
  b.set_limits(0, 60);
  EXPECT_FALSE(b.enabled());
}

// The claim in preempt_budget.h: a run running at the moment of each
// preemption is counted in the clock hour containing it, so a schedule
// that keeps to the rule keeps every hour's rate (preempted runs ended in
// it over runs ended in it or running at its end) at or under the share,
// wherever the hours' boundaries fall.  Checked on a made-up day: P3 runs
// of 10-90 min arriving all day, a preemptor trying to take one every
// 2 min, each preemption taken only when remaining() allows it.
TEST(PreemptBudgetTest, KeepingToTheRuleKeepsEveryClockHourUnderTheShare) {
  struct Run {
    time_t start, end;
    bool preempted;
  };
  for (time_t offset : {0, 600, 1799, 3599}) {
    PreemptBudget b(10, 3600);
    std::vector<Run> runs;
    uint32_t seed = 12345;
    auto rnd = [&seed](uint32_t n) {
      seed = seed * 1103515245u + 12345u;
      return (seed >> 16) % n;
    };
    const time_t day = 86400;
    for (time_t t = 0; t < day; t += 30) {
      const time_t now = kT0 + t;
      if (rnd(3) == 0) runs.push_back({now, now + 600 + rnd(4800), false});
      if (t % 120 == 0) {
        uint32_t running = 0;
        Run* victim = nullptr;
        for (Run& r : runs)
          if (r.start <= now && now < r.end && !r.preempted) {
            running++;
            victim = &r;
          }
        auto left = b.remaining(now, running);
        ASSERT_TRUE(left.has_value());
        if (victim && *left > 0) {
          b.record(1, now);
          victim->end = now;  // no grace: the run ends as it is preempted
          victim->preempted = true;
        }
      }
    }
    for (time_t a = kT0 + offset; a + 3600 <= kT0 + day; a += 3600) {
      const time_t end = a + 3600;
      uint32_t ran = 0, preempted = 0;
      for (const Run& r : runs) {
        if (a < r.end && r.end <= end) {
          ran++;
          preempted += r.preempted;
        } else if (r.start <= end && end < r.end) {
          ran++;
        }
      }
      EXPECT_LE(preempted * 100, 10 * ran)
          << "hour from +" << (a - kT0) << " s: " << preempted << " of " << ran;
    }
  }
}

TEST(PreemptBudgetTest, SavedAndReadBackItCountsTheSame) {
  PreemptBudget b(10, 3600);
  EXPECT_FALSE(b.dirty());
  b.record(7, kT0);
  b.record(8, kT0 + 5);
  b.record(9, kT0 + 5);
  EXPECT_TRUE(b.dirty());
  std::string text = b.serialize();
  EXPECT_FALSE(b.dirty());
  auto r = PreemptBudget::parse(text, 10, 3600);
  ASSERT_TRUE(r.ok()) << r.error();
  PreemptBudget back = std::move(r).value();
  EXPECT_FALSE(back.dirty());
  EXPECT_EQ(back.size(), 3u);
  EXPECT_EQ(back.used(kT0 + 5), 3u);
  EXPECT_EQ(back.remaining(kT0 + 5, 43), 1u);
  EXPECT_TRUE(back.unrecord(8, kT0 + 5)) << "each preemption keeps its job and time";
  EXPECT_EQ(back.serialize(), PreemptBudget::parse(back.serialize(), 10, 3600).value().serialize());
  // Only a change makes it dirty: a prune that drops nothing does not.
  back.prune(kT0 + 10);
  EXPECT_FALSE(back.dirty());
  back.prune(kT0 + 3600);
  EXPECT_TRUE(back.dirty());
}

TEST(PreemptBudgetTest, ATruncatedOrAlteredFileIsRefused) {
  PreemptBudget b(10, 3600);
  b.record(7, kT0);
  b.record(8, kT0 + 1);
  const std::string text = b.serialize();
  EXPECT_FALSE(PreemptBudget::parse(text.substr(0, text.size() - 10), 10, 3600).ok());
  std::string altered = text;
  altered[altered.find("S ") + 2] = '2';
  auto r = PreemptBudget::parse(altered, 10, 3600);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("not a valid Plan C P3 budget file"), std::string::npos) << r.error();
  EXPECT_FALSE(
      PreemptBudget::parse("planc-preempt-state v5\nend 0 0000000000000000\n", 10, 3600).ok());
  EXPECT_TRUE(PreemptBudget::parse(PreemptBudget(10, 3600).serialize(), 10, 3600).ok());
}

TEST(PreemptBudgetTest, ASpentBudgetRanksP3AfterP2) {
  // The policy's classes: P3 1, P2 2.
  EXPECT_EQ(victim_class_now(1, true, false, 2), 1);
  EXPECT_EQ(victim_class_now(1, true, true, 2), 3);
  EXPECT_EQ(victim_class_now(2, false, true, 2), 2) << "a P2 run keeps its class";
  EXPECT_EQ(victim_class_now(1, false, true, 2), 1) << "not a P3-counted run";
}

TEST(PreemptBudgetTest, PlancConfKeys) {
  auto d = parse_config("", "planc.conf");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().p3_preempt_max_percent, 0u) << "off unless asked for";
  EXPECT_EQ(d.value().p3_preempt_window_seconds, 3600u);
  auto c = parse_config("P3PreemptMaxPercent=10\nP3PreemptWindow=30min\n", "planc.conf");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c.value().p3_preempt_max_percent, 10u);
  EXPECT_EQ(c.value().p3_preempt_window_seconds, 1800u);
  EXPECT_EQ(c.value().p3_soft_percent(), 10u) << "the budget's own share unless set";
  auto soft = parse_config("P3PreemptMaxPercent=10\nP3PreemptSoftPercent=0\n", "planc.conf");
  ASSERT_TRUE(soft.ok()) << soft.error();
  EXPECT_EQ(soft.value().p3_soft_percent(), 0u);
  auto over = parse_config("P3PreemptMaxPercent=10\nP3PreemptSoftPercent=40\n", "planc.conf");
  ASSERT_TRUE(over.ok()) << over.error();
  EXPECT_EQ(over.value().p3_soft_percent(), 10u) << "at most the budget's";
  auto half = parse_config("P3PreemptMaxPercent=10\nP3PreemptSoftPercent=5\n", "planc.conf");
  ASSERT_TRUE(half.ok()) << half.error();
  EXPECT_EQ(half.value().p3_soft_percent(), 5u);
  auto bad_soft = parse_config("P3PreemptMaxPercent=10\nP3PreemptSoftPercent=101\n", "planc.conf");
  ASSERT_FALSE(bad_soft.ok());
  EXPECT_NE(bad_soft.error().find("P3PreemptSoftPercent"), std::string::npos) << bad_soft.error();
  auto bad = parse_config("P3PreemptMaxPercent=110\n", "planc.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("P3PreemptMaxPercent"), std::string::npos) << bad.error();
  EXPECT_NE(bad.error().find("0 to 100"), std::string::npos) << bad.error();
}

}  // namespace
}  // namespace planc
