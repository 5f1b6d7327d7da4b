#include "common/infusion.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

std::vector<ServingPool> pools(uint32_t p1, uint32_t p3) {
  return {{"maas-guaranteed", TierId::kP1, 1, 0, 8, p1}, {"maas-spot", TierId::kP3, 1, 0, 8, p3}};
}

TEST(InfusionTest, TheBandDecidesWhichPoolGrows) {
  InfusionController c{InfusionSettings{}};
  auto d = c.decide(0, 2, 32, {}, pools(0, 0));  // 6.2% idle
  EXPECT_EQ(d.action, InfusionAction::kGrow);
  EXPECT_EQ(d.pool, "maas-guaranteed");
  EXPECT_FALSE(d.market_round);
  EXPECT_EQ(d.reason, "idle 6.2% above 5.0%: grow the P1 pool (maas-guaranteed)");
  InfusionController c2{InfusionSettings{}};
  d = c2.decide(0, 6, 32, {}, pools(0, 0));  // 18.7%
  EXPECT_EQ(d.pool, "maas-spot");
  InfusionController c3{InfusionSettings{}};
  d = c3.decide(0, 12, 32, {}, pools(0, 0));  // 37.5%: and a market round at once
  EXPECT_EQ(d.pool, "maas-spot");
  EXPECT_TRUE(d.market_round);
  EXPECT_EQ(c3.decide(1, 12, 32, {}, pools(1, 0)).market_round, false) << "once per crossing";
  EXPECT_EQ(c3.decide(2, 8, 32, {}, pools(1, 0)).market_round, false) << "25% < 30% - 2%";
  EXPECT_TRUE(c3.decide(3, 12, 32, {}, pools(1, 0)).market_round);
  // Nothing idle enough, or no room for a replica: nothing.
  InfusionController c4{InfusionSettings{}};
  EXPECT_EQ(c4.decide(0, 1, 32, {}, pools(0, 0)).action, InfusionAction::kNone);
  auto big = pools(0, 0);
  big[0].gpus_per_replica = 4;
  EXPECT_EQ(c4.decide(0, 3, 32, {}, big).action, InfusionAction::kNone);
}

TEST(InfusionTest, CooldownAndTheHourlyLimit) {
  InfusionController c{InfusionSettings{}};
  uint32_t p1 = 0;
  time_t t = 0;
  std::vector<time_t> ops;
  // Idle stays at 25%: it would grow every minute.
  for (; t < 3600; t += 60) {
    auto d = c.decide(t, 8, 32, {}, pools(p1, 0));
    if (d.action == InfusionAction::kNone) continue;
    c.done(t, d);
    ops.push_back(t);
  }
  ASSERT_EQ(ops.size(), 4u) << "the hourly limit stops a fifth";
  for (size_t i = 1; i < ops.size(); i++) EXPECT_GE(ops[i] - ops[i - 1], 300);
  EXPECT_EQ(c.ops_last_hour(3599), 4u);
  EXPECT_EQ(c.next_allowed(3599), 3600);  // the first leaves the hour
  auto held = c.decide(3599, 8, 32, {}, pools(0, 4));
  EXPECT_EQ(held.action, InfusionAction::kNone);
  EXPECT_EQ(held.reason,
            "idle 25.0% above 15.0%: grow the P3 pool, held 1 s by the hourly limit (4 an hour)");
  EXPECT_EQ(c.decide(3600, 8, 32, {}, pools(0, 4)).action, InfusionAction::kGrow);
}

TEST(InfusionTest, FlappingAroundAThresholdStaysWithinTheLimit) {
  InfusionController c{InfusionSettings{}};
  uint32_t p3 = 0, ops = 0;
  // Idle swings between 17% and 11% every 30 s for an hour.
  for (time_t t = 0; t < 3600; t += 30) {
    const uint32_t idle = (t / 30) % 2 ? 36 : 55;  // of 320: 11.2% / 17.2%
    auto d = c.decide(t, idle, 320, {}, pools(0, p3));
    if (d.action == InfusionAction::kGrow) p3++;
    if (d.action == InfusionAction::kShrink) p3--;
    if (d.action != InfusionAction::kNone) ops++;
    c.done(t, d);
  }
  EXPECT_LE(ops, 4u);
}

TEST(InfusionTest, HysteresisAndShrinking) {
  InfusionController c{InfusionSettings{}};
  // 14% idle: below 15% but not below 15% - 2%: the P3 pool keeps its replicas.
  EXPECT_EQ(c.decide(0, 14, 100, {}, pools(0, 3)).action, InfusionAction::kGrow)
      << "14% is above 5%: the P1 pool grows";
  InfusionController k{InfusionSettings{}};
  auto full_p1 = pools(8, 3);
  EXPECT_EQ(k.decide(0, 14, 100, {}, full_p1).action, InfusionAction::kNone);
  auto d = k.decide(0, 12, 100, {}, full_p1);
  EXPECT_EQ(d.action, InfusionAction::kShrink);
  EXPECT_EQ(d.pool, "maas-spot");
  // Never below the minimum.
  auto at_min = pools(0, 2);
  at_min[1].min_replicas = 2;
  EXPECT_EQ(k.decide(0, 0, 100, {}, at_min).action, InfusionAction::kNone);
}

TEST(InfusionTest, GuaranteedWorkWaitingTakesP1BackAtOnce) {
  InfusionController c{InfusionSettings{}};
  c.done(0, c.decide(0, 8, 32, {}, pools(0, 0)));  // grew at 0: cooldown until 300
  auto d = c.decide(10, 0, 32, {true, true}, pools(1, 0));
  EXPECT_EQ(d.action, InfusionAction::kShrink);
  EXPECT_TRUE(d.reclaim);
  EXPECT_EQ(d.pool, "maas-guaranteed");
  c.done(10, d);
  EXPECT_EQ(c.ops_last_hour(10), 1u) << "a reclaim is not a scale operation";
  // While guaranteed work waits, no pool grows and none shrinks by the
  // idle share, whatever is being freed for it (reclaim: false).
  InfusionController g{InfusionSettings{}};
  EXPECT_EQ(g.decide(0, 3, 32, {true, false}, pools(0, 0)).action, InfusionAction::kNone);
  EXPECT_EQ(g.decide(0, 12, 32, {true, false}, pools(0, 0)).action, InfusionAction::kNone)
      << "not the P3 pool either";
  auto d0 = g.decide(0, 0, 32, {true, false}, pools(2, 2));
  EXPECT_EQ(d0.action, InfusionAction::kNone) << "0% idle: no voluntary shrink while it waits";
  EXPECT_EQ(d0.reason, "idle 0.0%: guaranteed jobs wait; no pool grows or shrinks meanwhile");
  // A reclaim takes a replica even from a pool at its minimum.
  auto at_min = pools(2, 0);
  at_min[0].min_replicas = 2;
  EXPECT_EQ(g.decide(0, 0, 32, {true, true}, at_min).action, InfusionAction::kShrink);
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

TEST(InfusedMarkTest, WrittenAndReadBack) {
  const std::string m = infused_mark("maas-guaranteed", TierId::kP1, 30);
  EXPECT_EQ(m,
            "[planc:infused] pool maas-guaranteed: a replica capacity infusion added (P1, drain "
            "grace 30 s)");
  auto r = read_infused_mark(m);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->pool, "maas-guaranteed");
  EXPECT_EQ(r->tier, TierId::kP1);
  EXPECT_EQ(r->drain_grace_seconds, 30u);
  r = read_infused_mark(infused_mark("spot", TierId::kP3, 0) + " | other text");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->pool, "spot");
  EXPECT_EQ(r->tier, TierId::kP3);
  EXPECT_EQ(r->drain_grace_seconds, 0u);
  EXPECT_FALSE(read_infused_mark("[planc:market] bid 9.00 CNY/card-hour"));
  EXPECT_FALSE(read_infused_mark("my job " + m)) << "the mark is at the front";
  EXPECT_FALSE(read_infused_mark("[planc:infused] pool "));
  EXPECT_FALSE(read_infused_mark(m.substr(0, m.size() - 3)));  // torn: no grace
}

TEST(InfusionTest, NewSettingsKeepTheOperationsDone) {
  InfusionController c{InfusionSettings{}};
  auto d = c.decide(0, 2, 32, {}, pools(0, 0));
  c.done(0, d);
  InfusionSettings s;
  s.cooldown_seconds = 10;
  c.configure(s);
  EXPECT_EQ(c.ops_last_hour(5), 1u);
  EXPECT_EQ(c.next_allowed(5), 10);
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

// Idle that swings across the P1 threshold every sample for two hours: the
// pool grows and shrinks, but never more than 4 times in any hour, and
// never closer than the cooldown.
TEST(InfusionTest, FlappingIdleGivesAtMostFourOperationsAnHour) {
  InfusionController c{InfusionSettings{}};
  std::vector<ServingPool> p = {{"api", TierId::kP1, 1, 0, 8, 0}};
  std::vector<time_t> ops;
  for (time_t t = 0; t < 2 * 3600; t += 5) {
    const uint32_t idle = (t / 5) % 2 ? 3 : 1;  // 9.4% then 3.1% of 32
    auto d = c.decide(t, idle, 32, {}, p);
    if (d.action == InfusionAction::kNone) continue;
    p[0].replicas += d.action == InfusionAction::kGrow ? 1 : -1;
    c.done(t, d);
    ops.push_back(t);
  }
  ASSERT_GE(ops.size(), 4u);  // it did act
  for (size_t i = 0; i < ops.size(); i++) {
    if (i) EXPECT_GE(ops[i] - ops[i - 1], 300);
    size_t in_hour = 0;
    for (time_t o : ops) in_hour += o > ops[i] - 3600 && o <= ops[i];
    EXPECT_LE(in_hour, 4u) << "at " << ops[i];
  }
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

TEST(InfusionTest, TheLimitsHourIsASettingForReplays) {
  InfusionSettings s;
  s.cooldown_seconds = 1;
  s.limit_window_seconds = 30;  // a replay at k = 120: an hour of trace time
  InfusionController c{s};
  std::vector<ServingPool> p = {{"api", TierId::kP1, 1, 0, 8, 0}};
  int ops = 0;
  for (time_t t = 0; t < 30; t += 5) {
    auto d = c.decide(t, 16, 32, {}, p);
    if (d.action == InfusionAction::kNone) continue;
    p[0].replicas++;
    c.done(t, d);
    ops++;
  }
  EXPECT_EQ(ops, 4);  // at 0, 5, 10, 15; then the limit
  EXPECT_EQ(c.next_allowed(25), 30);
  EXPECT_EQ(c.decide(30, 16, 32, {}, p).action, InfusionAction::kGrow);
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

using W = GuaranteedWait;

TEST(InfusionDemandTest, OnlyJobsThatGivingReplicasBackWouldLetStart) {
  // 32 GPUs, the cap 25; P0/P1 hold 24, 16 of them infused P1 replicas.
  const std::optional<uint64_t> cap = 25;
  auto d = reclaimable_demand({{1, 8, W::kCapLimit},         // 24 - 16 + 8 <= 25: counts
                               {2, 32, W::kCapLimit},        // larger than the cap: never
                               {3, 8, W::kResources},        // counts
                               {4, 8, W::kNotYet},           // just submitted: counts
                               {5, 8, W::kUnavailableNode},  // -w a drained node: never
                               {6, 8, W::kOtherLimit},       // a per-user limit: never
                               {7, 8, W::kHeld},             // held
                               {8, 8, W::kDependency},       // dependency
                               {9, 8, W::kBeginTime},        // --begin
                               {10, 30, W::kResources},      // larger than the cap
                               {11, 0, W::kResources}},      // no GPU
                              cap, 24, 16);
  EXPECT_EQ(d.gpus, 24u);
  EXPECT_EQ(d.jobs, (std::vector<uint32_t>{1, 3, 4}));
  // The cap's wait only counts when the replicas' GPUs would bring it under.
  EXPECT_EQ(reclaimable_demand({{1, 8, W::kCapLimit}}, cap, 24, 0).gpus, 0u);
  // No cap (GuaranteedPartition unset): any size waiting for resources.
  EXPECT_EQ(reclaimable_demand({{10, 30, W::kResources}}, std::nullopt, 0, 0).gpus, 30u);
}

TEST(InfusionVictimTest, NeverOneAlreadyEndingNewestFirst) {
  std::vector<ReplicaView> r = {{10, "api", true, false},
                                {11, "api", true, false},
                                {12, "api", true, true},    // ending
                                {13, "api", false, false},  // pending
                                {14, "spot", true, false}};
  EXPECT_EQ(shrink_victim(r, "api", true), 11u) << "reclaim: the newest running not ending";
  EXPECT_EQ(shrink_victim(r, "api", false), 13u) << "shrink: pending first";
  r[3].ending = true;
  EXPECT_EQ(shrink_victim(r, "api", false), 11u);
  r[0].ending = r[1].ending = true;
  EXPECT_FALSE(shrink_victim(r, "api", true)) << "every running replica is ending already";
  EXPECT_FALSE(shrink_victim(r, "none", false));
  // A pool removed from planc.conf: its replicas are drained.
  std::vector<ServingPool> pools = {{"api", TierId::kP1, 1, 0, 8, 2}};
  EXPECT_EQ(orphan_replicas(r, pools), (std::vector<uint32_t>{14}));
}

TEST(InfusionTest, PendingReplicasAreTheOnesNotStartedAndNotEnding) {
  std::vector<ReplicaView> r = {{10, "api", true, false},
                                {11, "api", false, false},
                                {12, "api", false, true},
                                {13, "spot", false, false}};
  EXPECT_EQ(pending_replicas(r), (std::vector<uint32_t>{11, 13}));
  r[1].ending = r[3].running = true;
  EXPECT_TRUE(pending_replicas(r).empty());
}

TEST(InfusionTest, TheHysteresisIsAtLeastOneReplicasShare) {
  // 8-GPU replicas on 32 GPUs: a replica is 25% of the pool.  At 0% idle a
  // shrink would leave 25% idle, above 5%: the next grow would undo it.
  InfusionController c{InfusionSettings{}};
  std::vector<ServingPool> p = {{"api", TierId::kP1, 8, 0, 4, 3}};
  EXPECT_EQ(c.decide(0, 0, 32, {}, p).action, InfusionAction::kNone);
  // Grow and shrink on a swinging idle never alternate.
  InfusionSettings s;
  s.cooldown_seconds = 2;
  s.max_ops_per_hour = 1000;
  InfusionController fast{s};
  p[0].replicas = 0;
  uint32_t used = 8;  // an ordinary job holds 8 of 32
  int grows = 0, shrinks = 0;
  for (time_t t = 0; t < 600; t += 5) {
    const uint32_t idle = 32 - used - 8 * p[0].replicas;
    auto d = fast.decide(t, idle, 32, {}, p);
    if (d.action == InfusionAction::kGrow) p[0].replicas++, grows++;
    if (d.action == InfusionAction::kShrink) p[0].replicas--, shrinks++;
    fast.done(t, d);
  }
  EXPECT_EQ(grows, 3);
  EXPECT_EQ(shrinks, 0);
}

}  // namespace
}  // namespace planc

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "common/file_system.h"
#include "test/unit/temp_dir.h"

namespace planc {
namespace {

// A pool's script: read only when root owns it (and its directory) and
// nobody else may write either; never through a symbolic link.
TEST(TrustedScriptTest, OnlyARootOwnedScriptNobodyElseCanWrite) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (chown)";
  TempDir d;
  ASSERT_EQ(chmod(d.path.c_str(), 0755), 0);
  const std::string s = d.path + "/serve.sh";
  std::ofstream(s) << "#!/bin/sh\nsleep 1\n";
  ASSERT_EQ(chmod(s.c_str(), 0755), 0);
  std::string text;
  EXPECT_FALSE(read_trusted_script(s, &text));
  EXPECT_EQ(text, "#!/bin/sh\nsleep 1\n");
  const std::string fix = ": chown root " + s + " and chmod go-w it (and its directory)";
  ASSERT_EQ(chmod(s.c_str(), 0775), 0);
  EXPECT_EQ(*read_trusted_script(s, &text),
            "Script=" + s + " is writable by group or others" + fix);
  ASSERT_EQ(chmod(s.c_str(), 0755), 0);
  ASSERT_EQ(chown(s.c_str(), 65534, 65534), 0);
  EXPECT_EQ(
      *read_trusted_script(s, &text),
      "Script=" + s + " is owned by uid 65534, not root: slurmctld runs it for the pool" + fix);
  ASSERT_EQ(chown(s.c_str(), 0, 0), 0);
  const std::string link = d.path + "/link.sh";
  ASSERT_EQ(symlink(s.c_str(), link.c_str()), 0);
  EXPECT_EQ(*read_trusted_script(link, &text),
            "Script=" + link + " is a symbolic link: give the script's own path: chown root " +
                link + " and chmod go-w it (and its directory)");
  ASSERT_EQ(chmod(d.path.c_str(), 0777), 0);
  EXPECT_EQ(*read_trusted_script(s, &text),
            "Script=" + s + ": its directory " + d.path +
                " is writable by group or others, so others could replace the script" + fix);
  EXPECT_TRUE(read_trusted_script(d.path + "/none.sh", &text));
}

}  // namespace
}  // namespace planc
