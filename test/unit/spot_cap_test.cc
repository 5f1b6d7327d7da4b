#include <gtest/gtest.h>

#include "common/spot_cap.h"
#include "test/unit/test_config.h"

namespace planc {
namespace {

// 2026-11-30T00:00:00Z.
constexpr time_t kMidnightUtc = 1795996800;

TEST(SpotCapTest, DayBoundaries) {
  struct Case {
    const char* conf;
    time_t t;
    time_t day_start;
  };
  const time_t h = 3600;
  const Case cases[] = {
      // Default: 00:00 at UTC+08:00, i.e. 16:00 UTC the day before.
      {"", kMidnightUtc - 8 * h, kMidnightUtc - 8 * h},
      {"", kMidnightUtc - 8 * h - 1, kMidnightUtc - 32 * h},
      {"", kMidnightUtc + 10 * h, kMidnightUtc - 8 * h},
      {"SpotCapTimeZone=UTC", kMidnightUtc, kMidnightUtc},
      {"SpotCapTimeZone=UTC", kMidnightUtc - 1, kMidnightUtc - 24 * h},
      {"SpotCapTimeZone=UTC\nSpotCapResetTime=04:30", kMidnightUtc + 4 * h + 1800,
       kMidnightUtc + 4 * h + 1800},
      {"SpotCapTimeZone=UTC\nSpotCapResetTime=04:30", kMidnightUtc + 4 * h + 1799,
       kMidnightUtc - 20 * h + 1800},
      // 00:00 at UTC-05:30 is 05:30 UTC.
      {"SpotCapTimeZone=-05:30", kMidnightUtc + 5 * h + 1800, kMidnightUtc + 5 * h + 1800},
      {"SpotCapTimeZone=-05:30", kMidnightUtc + 5 * h, kMidnightUtc - 18 * h - 1800},
      // A short test day: every 60 s from the reset.
      {"SpotCapTimeZone=UTC\nSpotCapDayLength=60", kMidnightUtc + 61, kMidnightUtc + 60},
      {"SpotCapTimeZone=UTC\nSpotCapDayLength=60", kMidnightUtc + 59, kMidnightUtc},
  };
  for (const Case& c : cases) {
    SpotDayRule r = SpotDayRule::of(conf(c.conf));
    EXPECT_EQ(r.start(c.t), c.day_start) << c.conf << " t=" << c.t;
    EXPECT_EQ(r.next_reset(c.t), c.day_start + r.length) << c.conf;
    EXPECT_EQ(r.index(c.day_start), r.index(c.day_start + r.length - 1)) << c.conf;
    EXPECT_EQ(r.index(c.day_start) + 1, r.index(c.day_start + r.length)) << c.conf;
  }
}

SpotDayRule utc_day() { return SpotDayRule::of(conf("SpotCapTimeZone=UTC")); }

RunningSpotJob job(uint32_t id, const char* acct, TierId tier, uint32_t gpus, time_t start) {
  return RunningSpotJob{id, acct, tier, gpus, start};
}

TEST(SpotCapTest, RunningJobsCountSoFar) {
  const time_t t0 = kMidnightUtc + 3600;
  SpotLedger l(utc_day());
  // Started 100 s before the first sample: counted from its start.
  l.sample(t0, {job(1, "a", TierId::kP3, 8, t0 - 100)}, {});
  SpotUsage u = l.usage();
  EXPECT_EQ(u.used("a", TierId::kP3, t0), 800u);
  // Between samples a running job's use is extrapolated.
  EXPECT_EQ(u.used("a", TierId::kP3, t0 + 10), 880u);
  EXPECT_EQ(u.used("a", TierId::kP2, t0 + 10), 0u);
  EXPECT_EQ(u.used("b", TierId::kP3, t0 + 10), 0u);
  // Next sample: 20 s more, and a P2 job of another account.
  l.sample(t0 + 20, {job(1, "a", TierId::kP3, 8, t0 - 100), job(2, "b", TierId::kP2, 2, t0 + 15)},
           {});
  u = l.usage();
  EXPECT_EQ(u.used("a", TierId::kP3, t0 + 20), 960u);
  EXPECT_EQ(u.used("b", TierId::kP2, t0 + 20), 10u);
}

TEST(SpotCapTest, EndedJobsAndRequeue) {
  const time_t t0 = kMidnightUtc + 3600;
  struct Case {
    const char* what;
    std::map<uint32_t, time_t> ended_at;
    uint64_t used;
  };
  const Case cases[] = {
      {"end time known: counted to it", {{1, t0 + 7}}, 8u * 107},
      {"end time unknown (requeued): counted to the last sample", {{1, 0}}, 8u * 100},
      {"job forgotten by Slurm: counted to the last sample", {}, 8u * 100},
      {"end time after now (clock): capped at now", {{1, t0 + 50}}, 8u * 110},
  };
  for (const Case& c : cases) {
    SpotLedger l(utc_day());
    l.sample(t0, {job(1, "a", TierId::kP3, 8, t0 - 100)}, {});
    l.sample(t0 + 10, {}, c.ended_at);
    EXPECT_EQ(l.usage().used("a", TierId::kP3, t0 + 10), c.used) << c.what;
    EXPECT_TRUE(l.tracked_ids().empty()) << c.what;
  }
  // Requeued and started again between samples: the gap is not counted.
  SpotLedger l(utc_day());
  l.sample(t0, {job(1, "a", TierId::kP3, 8, t0 - 100)}, {});
  l.sample(t0 + 30, {job(1, "a", TierId::kP3, 8, t0 + 20)}, {});
  EXPECT_EQ(l.usage().used("a", TierId::kP3, t0 + 30), 8u * 100 + 8u * 10);
}

TEST(SpotCapTest, DayRollStartsFromZero) {
  SpotLedger l(utc_day());
  const time_t before = kMidnightUtc - 100;
  l.sample(before, {job(1, "a", TierId::kP3, 4, before - 1000)}, {});
  SpotUsage u = l.usage();
  EXPECT_EQ(u.used("a", TierId::kP3, before), 4000u);
  // Queried after the reset from the old sample: only the new day's part.
  EXPECT_EQ(u.used("a", TierId::kP3, kMidnightUtc + 10), 40u);
  // Sampled after the reset: the old day is gone, the running job counts
  // from the reset.
  l.sample(kMidnightUtc + 20, {job(1, "a", TierId::kP3, 4, before - 1000)}, {});
  EXPECT_EQ(l.usage().used("a", TierId::kP3, kMidnightUtc + 20), 80u);
  // A job that started yesterday and is first seen today counts from the reset.
  SpotLedger fresh(utc_day());
  fresh.sample(kMidnightUtc + 5, {job(2, "b", TierId::kP2, 1, kMidnightUtc - 5000)}, {});
  EXPECT_EQ(fresh.usage().used("b", TierId::kP2, kMidnightUtc + 5), 5u);
}

TEST(SpotCapTest, ClockBackCountsNothingTwice) {
  const time_t t0 = kMidnightUtc + 3600;
  SpotLedger l(utc_day());
  l.sample(t0, {job(1, "a", TierId::kP3, 1, t0 - 10)}, {});
  l.sample(t0 - 50, {job(1, "a", TierId::kP3, 1, t0 - 10)}, {});
  EXPECT_EQ(l.usage().used("a", TierId::kP3, t0), 10u);
}

TEST(SpotCapTest, StateFileRoundTripAndCorruption) {
  const time_t t0 = kMidnightUtc + 3600;
  SpotLedger l(utc_day());
  l.sample(t0, {job(1, "acct-spot", TierId::kP3, 8, t0 - 100), job(7, "x", TierId::kP2, 1, t0 - 1)},
           {});
  std::string text = l.serialize();
  auto r = SpotLedger::parse(text, utc_day());
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().serialize(), text);
  EXPECT_EQ(r.value().tracked_ids(), (std::vector<uint32_t>{1, 7}));
  // After a restart the running job continues from where it was counted.
  r.value().sample(t0 + 10, {job(1, "acct-spot", TierId::kP3, 8, t0 - 100)}, {});
  EXPECT_EQ(r.value().usage().used("acct-spot", TierId::kP3, t0 + 10), 880u);

  std::string flipped = text;
  flipped[flipped.find("800")] = '9';
  struct Case {
    const char* what;
    std::string text;
    const char* error;
  };
  const Case cases[] = {
      {"empty", "", "bad header"},
      {"preemption file", "planc-preempt-state v1\nend 0 cbf29ce484222325\n", "bad header"},
      {"truncated", text.substr(0, text.size() / 2), "truncated"},
      {"corrupt", flipped, "checksum"},
  };
  for (const Case& c : cases) {
    auto bad = SpotLedger::parse(c.text, utc_day());
    ASSERT_FALSE(bad.ok()) << c.what;
    EXPECT_NE(bad.error().find(c.error), std::string::npos) << c.what << ": " << bad.error();
  }
}

Entitlement ent(const std::string& account, std::vector<std::string> qos, bool known = true) {
  Entitlement e;
  e.known = known;
  e.account = account;
  e.qos = std::move(qos);
  return e;
}

TEST(SpotCapTest, RefusalMessage) {
  PlancConfig c = conf("SpotCapP3=2\nSpotCapP2=unlimited");
  const time_t now = kMidnightUtc + 3600;  // 09:00 at UTC+08:00
  const Entitlement spot_and_api = ent("acct-spot", {"p1-guaranteed", "p3-spot"});
  EXPECT_FALSE(spot_cap_refusal(c, spot_and_api, TierId::kP3, 7199, now));
  EXPECT_FALSE(spot_cap_refusal(c, spot_and_api, TierId::kP2, 1u << 30, now));
  auto msg = spot_cap_refusal(c, spot_and_api, TierId::kP3, 7200, now);
  ASSERT_TRUE(msg);
  EXPECT_EQ(*msg,
            "daily spot cap reached: account acct-spot has used 2.00 of its 2.00 card-hours of "
            "P3 (p3-spot) today, counting running jobs. The cap resets at 2026-12-01 00:00:00 "
            "UTC+08:00 (in 15 h 0 min). To run now, use a guaranteed tier: --qos=p1-guaranteed "
            "(P1, Plan B guaranteed API and internal critical services)");
  PlancConfig p2 = conf("SpotCapP2=0.01");
  auto m2 = spot_cap_refusal(p2, ent("a", {}, false), TierId::kP2, 40, now);
  ASSERT_TRUE(m2);
  EXPECT_NE(m2->find("used 0.011 of its 0.01 card-hours of P2 (p2-spot)"), std::string::npos)
      << *m2;
  EXPECT_NE(m2->find("--qos=p0-lease (P0"), std::string::npos) << *m2;
  // The advice follows the account's entitlement: P2's first choice is
  // P0, but an account with only P1 is told P1, and one with no
  // guaranteed tier whom to ask.
  auto m3 =
      spot_cap_refusal(p2, ent("acct-api", {"p1-guaranteed", "p2-spot"}), TierId::kP2, 40, now);
  ASSERT_TRUE(m3);
  EXPECT_NE(m3->find("To run now, use a guaranteed tier: --qos=p1-guaranteed (P1"),
            std::string::npos)
      << *m3;
  auto m4 = spot_cap_refusal(c, ent("acct-spot", {"p2-spot", "p3-spot"}), TierId::kP3, 7200, now);
  ASSERT_TRUE(m4);
  EXPECT_NE(m4->find("(in 15 h 0 min). account acct-spot may use no guaranteed tier; ask your "
                     "account coordinator for access to p0-lease (P0) or p1-guaranteed (P1)"),
            std::string::npos)
      << *m4;
}

TEST(SpotCapTest, Formatting) {
  EXPECT_EQ(format_card_hours(0), "0.00");
  EXPECT_EQ(format_card_hours(3600), "1.00");
  EXPECT_EQ(format_card_hours(5400), "1.50");
  EXPECT_EQ(format_card_hours(36), "0.01");
  EXPECT_EQ(format_card_hours(40), "0.011");
  EXPECT_EQ(format_utc_offset(8 * 3600), "+08:00");
  EXPECT_EQ(format_utc_offset(-(5 * 3600 + 1800)), "-05:30");
  EXPECT_EQ(format_utc_offset(0), "+00:00");
  EXPECT_EQ(format_time_of_day(16200), "04:30:00");
  EXPECT_EQ(describe_spot_cap(conf("SpotCapP3=2.5"), TierId::kP3), "2.50 card-hours/day");
  EXPECT_EQ(describe_spot_cap(conf(""), TierId::kP2), "unlimited");
  EXPECT_EQ(describe_spot_day(conf("")), "00:00:00 UTC+08:00, every 86400 s");
}

}  // namespace
}  // namespace planc
