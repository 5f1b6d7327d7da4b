// The metrics snapshot the plugins write and planc-exporter reads: round
// trip, damage detected, label values that would break a line, the idle
// crossings, and a catalog that follows Prometheus's naming rules.
#include "common/metrics_snapshot.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

namespace planc {
namespace {

MetricsSnapshot sample() {
  MetricsSnapshot s;
  s.source = "slurmctld";
  s.written = 1800000000;
  s.samples = {{"planc_pool_gpus", {}, 32},
               {"planc_allocated_gpus", {{"tier", "P2"}}, 0.5},
               {"planc_x", {{"account", "acct a=b%c\n"}, {"tier", ""}}, 1e18}};
  return s;
}

TEST(MetricsSnapshotTest, RoundTripsEveryValueAndLabel) {
  std::string text = serialize_snapshot(sample());
  auto back = parse_snapshot(text);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back.value(), sample());
  // One line per sample; an odd account name cannot add one.
  EXPECT_NE(text.find("account=acct%20a%3Db%25c%0A tier=%\n"), std::string::npos) << text;
}

TEST(MetricsSnapshotTest, DamageIsCorruptNeverPartial) {
  std::string good = serialize_snapshot(sample());
  std::string flipped = good;
  flipped[good.find("32")] = '4';
  for (const std::string& bad : {good.substr(0, good.size() - 3), flipped, std::string(""),
                                 std::string("planc-metrics v2\n")}) {
    auto r = parse_snapshot(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.code(), ErrorCode::kCorrupt);
  }
}

TEST(MetricsSnapshotTest, PathIsPerSource) {
  EXPECT_EQ(snapshot_path("/var/spool/slurmctld", "preempt"),
            "/var/spool/slurmctld/planc_metrics_preempt");
}

TEST(IdleCrossingsTest, CountsEachThresholdCrossedEitherWay) {
  IdleCrossings idle;
  idle.observe(0.50);  // the first sample only sets the side
  EXPECT_EQ(idle.crossings(0) + idle.crossings(1) + idle.crossings(2), 0u);
  idle.observe(0.10);  // below 30% and 15%, still above 5%
  EXPECT_EQ(idle.crossings(0), 0u);
  EXPECT_EQ(idle.crossings(1), 1u);
  EXPECT_EQ(idle.crossings(2), 1u);
  idle.observe(0.05);  // at 5%: counts as at or above, no crossing
  idle.observe(0.0);   // full: crosses 5%
  idle.observe(0.0);
  EXPECT_EQ(idle.crossings(0), 1u);
  idle.observe(0.30);  // back up to 30%: crosses all three
  EXPECT_EQ(idle.crossings(0), 2u);
  EXPECT_EQ(idle.crossings(1), 2u);
  EXPECT_EQ(idle.crossings(2), 2u);
  EXPECT_EQ(IdleCrossings::threshold_label(1), "0.15");
}

TEST(PoolSamplesTest, EveryTierAndThresholdHasASample) {
  PoolUsage u;
  u.pool_gpus = 32;
  u.allocated_gpus[0] = 8;
  u.allocated_gpus[3] = 4;
  u.running_jobs[3] = 4;
  EXPECT_EQ(u.allocated_total(), 12u);
  MetricsSnapshot s;
  add_pool_samples(u, IdleCrossings(), &s);
  ASSERT_EQ(s.samples.size(), 1u + 2 * 4 + 3);
  EXPECT_EQ(s.samples[0], (MetricSample{"planc_pool_gpus", {}, 32}));
  EXPECT_EQ(s.samples[7], (MetricSample{"planc_allocated_gpus", {{"tier", "P3"}}, 4}));
  for (const MetricSample& m : s.samples) EXPECT_NE(find_metric(m.name), nullptr) << m.name;
}

TEST(MetricCatalogTest, NamesFollowPrometheusConventions) {
  std::set<std::string_view> seen;
  for (const MetricInfo& m : metric_catalog()) {
    EXPECT_TRUE(seen.insert(m.name).second) << "twice: " << m.name;
    EXPECT_TRUE(std::regex_match(std::string(m.name), std::regex("planc_[a-z0-9_]+"))) << m.name;
    bool total = m.name.size() > 6 && m.name.substr(m.name.size() - 6) == "_total";
    EXPECT_EQ(total, m.type == MetricType::kCounter)
        << m.name << ": _total if and only if a counter";
    EXPECT_GT(m.help.size(), 20u) << m.name;
  }
}

}  // namespace
}  // namespace planc
