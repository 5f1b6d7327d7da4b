#include <gtest/gtest.h>

#include "common/starvation.h"
#include "test/unit/test_config.h"

namespace planc {
namespace {

PlancConfig cfg() { return conf("StarvationThreshold=30min\nStarvationMaxPerInterval=3"); }

constexpr time_t kNow = 1796000000;

TEST(StarvationTest, ThresholdEdgesAndReasons) {
  struct Case {
    const char* what;
    PendingJob job;
    bool starving;
  };
  const time_t t = kNow - 1800;  // exactly the threshold ago
  using R = PendingReason;
  const Case cases[] = {
      {"exactly 30 min: not yet", {1, TierId::kP3, R::kResources, t}, false},
      {"30 min 1 s", {1, TierId::kP3, R::kResources, t - 1}, true},
      {"29 min 59 s", {1, TierId::kP3, R::kResources, t + 1}, false},
      {"waiting for priority counts", {1, TierId::kP3, R::kPriority, t - 60}, true},
      {"held does not", {1, TierId::kP3, R::kHeld, t - 3600}, false},
      {"dependency does not", {1, TierId::kP3, R::kDependency, t - 3600}, false},
      {"begin time does not", {1, TierId::kP3, R::kBeginTime, t - 3600}, false},
      {"account limits do not", {1, TierId::kP3, R::kAccountLimit, t - 3600}, false},
      {"no reason yet does not", {1, TierId::kP3, R::kNone, t - 3600}, false},
      {"other reasons do not", {1, TierId::kP3, R::kOther, t - 3600}, false},
      {"unknown eligible time", {1, TierId::kP3, R::kResources, 0}, false},
      {"eligible in the future (clock step)", {1, TierId::kP3, R::kResources, kNow + 5}, false},
      {"P2 is not upgraded", {1, TierId::kP2, R::kResources, t - 3600}, false},
      {"P0 is not upgraded", {1, TierId::kP0, R::kResources, t - 3600}, false},
  };
  PlancConfig c = cfg();
  for (const Case& k : cases) EXPECT_EQ(is_starving(c, k.job, kNow), k.starving) << k.what;
}

TEST(StarvationTest, LongestWaitFirstAtMostNPerInterval) {
  using R = PendingReason;
  std::vector<PendingJob> jobs = {
      {10, TierId::kP3, R::kResources, kNow - 2000},
      {11, TierId::kP3, R::kPriority, kNow - 5000},
      {12, TierId::kP3, R::kHeld, kNow - 9000},  // not counted
      {13, TierId::kP3, R::kResources, kNow - 3000},
      {14, TierId::kP3, R::kResources, kNow - 3000},  // tie with 13: lower id first
      {15, TierId::kP3, R::kResources, kNow - 100},   // not yet
  };
  struct Case {
    const char* text;
    std::vector<uint32_t> ids;
  };
  const Case cases[] = {
      {"StarvationThreshold=30min\nStarvationMaxPerInterval=3", {11, 13, 14}},
      {"StarvationThreshold=30min\nStarvationMaxPerInterval=10", {11, 13, 14, 10}},
      {"StarvationThreshold=30min\nStarvationMaxPerInterval=1", {11}},
      {"StarvationThreshold=1h\nStarvationMaxPerInterval=10", {11}},
      {"StarvationThreshold=2h\nStarvationMaxPerInterval=10", {}},
  };
  for (const Case& k : cases) {
    auto ups = select_upgrades(conf(k.text), jobs, kNow);
    std::vector<uint32_t> ids;
    for (const Upgrade& u : ups) ids.push_back(u.job_id);
    EXPECT_EQ(ids, k.ids) << k.text;
  }
  auto ups = select_upgrades(cfg(), jobs, kNow);
  ASSERT_FALSE(ups.empty());
  EXPECT_EQ(ups[0].waited_seconds, 5000u);
  EXPECT_EQ(ups[0].reason, R::kPriority);
  EXPECT_EQ(reason_name(ups[0].reason), "Priority");
}

TEST(StarvationTest, FreeAttemptsTogetherHoldAtMostTheirShare) {
  using R = PendingReason;
  // Longest waiting first: 11 (8 GPUs), 13 (4), 14 (2), 10 (1); 16 asks
  // more than the share ever allows.
  std::vector<PendingJob> jobs = {
      {10, TierId::kP3, R::kResources, kNow - 2000, 1},
      {11, TierId::kP3, R::kPriority, kNow - 5000, 8},
      {13, TierId::kP3, R::kResources, kNow - 3000, 4},
      {14, TierId::kP3, R::kResources, kNow - 3000, 2},
      {16, TierId::kP3, R::kResources, kNow - 9000, 64},
  };
  PlancConfig c = conf("StarvationThreshold=30min\nStarvationMaxPerInterval=10");
  EXPECT_EQ(c.starvation_max_share_percent, 10u) << "the default";
  EXPECT_EQ(free_attempt_cap(c, 320), 32u);
  EXPECT_EQ(free_attempt_cap(c, 0), 0u) << "pool not known yet: no GPU job";
  struct Case {
    const char* what;
    FreeAttemptShare share;
    std::vector<uint32_t> ids;
  };
  const Case cases[] = {
      {"room for all but the one larger than the share", {32, 0}, {11, 13, 14, 10}},
      {"room for 13 GPUs: 11 and 13 would be 12, then 14 passes", {32, 19}, {11, 13}},
      {"11 does not fit: nobody passes it", {32, 25}, {}},
      {"the share is full", {32, 32}, {}},
      {"pool not known", {0, 0}, {}},
  };
  for (const Case& k : cases) {
    std::vector<uint32_t> ids;
    for (const Upgrade& u : select_upgrades(c, jobs, kNow, k.share)) ids.push_back(u.job_id);
    EXPECT_EQ(ids, k.ids) << k.what;
  }
  // A job without GPUs always fits.
  std::vector<PendingJob> cpu = {{20, TierId::kP3, R::kResources, kNow - 5000, 0}};
  EXPECT_EQ(select_upgrades(c, cpu, kNow, {0, 0}).size(), 1u);
  auto bad = parse_config("StarvationMaxPercent=0", "test.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("StarvationMaxPercent"), std::string::npos) << bad.error();
  EXPECT_EQ(conf("StarvationMaxPercent=100").starvation_max_share_percent, 100u);
}

TEST(StarvationTest, MarkedJobs) {
  const time_t up = kNow - 600;
  struct Case {
    const char* what;
    MarkedJob job;
    MarkAction action;
  };
  const Case cases[] = {
      {"still waiting in P2", {1, TierId::kP2, kNow - 4000, up}, MarkAction::kKeep},
      {"requeued after the attempt", {1, TierId::kP2, up + 300, up}, MarkAction::kBack},
      {"submitted the same second as the upgrade", {1, TierId::kP2, up, up}, MarkAction::kKeep},
      {"moved to P3 by someone", {1, TierId::kP3, kNow - 4000, up}, MarkAction::kDropMark},
      {"moved to P1 by an operator", {1, TierId::kP1, kNow - 4000, up}, MarkAction::kDropMark},
      // A planc.conf where P2 starves into P1: the mark says so.
      {"P2 to P1, requeued",
       {1, TierId::kP1, up + 300, up, TierId::kP2, TierId::kP1},
       MarkAction::kBack},
      {"P2 to P1, in P2 again",
       {1, TierId::kP2, up + 300, up, TierId::kP2, TierId::kP1},
       MarkAction::kDropMark},
      {"unreadable mark time", {1, TierId::kP2, kNow, 0}, MarkAction::kKeep},
  };
  for (const Case& k : cases) EXPECT_EQ(decide_marked(k.job), k.action) << k.what;
}

// Which tier starves into which, and after how long, is planc.conf's.
TEST(StarvationTest, TierRulesFromPlancConf) {
  auto job = [](TierId t, time_t waited) {
    return PendingJob{7, t, PendingReason::kResources, kNow - waited};
  };
  struct Case {
    const char* text;
    PendingJob job;
    bool starving;
  };
  const Case cases[] = {
      {"", job(TierId::kP3, 1801), true},
      {"", job(TierId::kP2, 99999), false},  // P2 starves into nothing by default
      {"Tier=P3 StarveInto=none", job(TierId::kP3, 99999), false},
      {"Tier=P3 StarveAfter=10min", job(TierId::kP3, 601), true},
      {"Tier=P3 StarveAfter=10min", job(TierId::kP3, 600), false},
      {"Tier=P2 StarveInto=P1 StarveAfter=1h", job(TierId::kP2, 3601), true},
  };
  for (const Case& c : cases) {
    PlancConfig k = conf(c.text);
    EXPECT_EQ(is_starving(k, c.job, kNow), c.starving) << c.text;
  }
  auto ups = select_upgrades(conf("Tier=P2 StarveInto=P1"), {job(TierId::kP2, 1801)}, kNow);
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(ups[0].from, TierId::kP2);
  EXPECT_EQ(ups[0].to, TierId::kP1);
}

}  // namespace
}  // namespace planc
