// The metrics snapshot the plugins write and planc-exporter reads: round
// trip, damage detected, label values that would break a line, the idle
// crossings, and a catalog that follows Prometheus's naming rules.
#include "common/metrics_snapshot.h"

#include <gtest/gtest.h>

#include <map>
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

TEST(PreemptionSamplesTest, MostPerJobAndHowManyJobsPerCount) {
  MetricsSnapshot s;
  add_preemption_samples(
      {0, 0, 7, 12},
      {{TierId::kP2, 1}, {TierId::kP2, 3}, {TierId::kP2, 3}, {TierId::kP3, 6}, {TierId::kP3, 0}}, 5,
      &s);
  std::map<std::string, double> v;
  for (const MetricSample& m : s.samples) {
    std::string key = m.name;
    for (const auto& [k, val] : m.labels) key += " " + k + "=" + val;
    v[key] = m.value;
    EXPECT_NE(find_metric(m.name), nullptr) << m.name;
  }
  EXPECT_EQ(v["planc_preemptions_total tier=P2"], 7);
  EXPECT_EQ(v["planc_preemptions_total tier=P3"], 12);
  EXPECT_EQ(v["planc_preemptions_per_job_24h_max tier=P2"], 3);
  EXPECT_EQ(v["planc_preemptions_per_job_24h_max tier=P3"], 6);
  EXPECT_EQ(v["planc_preemptions_per_job_24h_max tier=P0"], 0);
  EXPECT_EQ(v["planc_preempted_jobs_24h tier=P2 preemptions=1"], 1);
  EXPECT_EQ(v["planc_preempted_jobs_24h tier=P2 preemptions=3"], 2);
  EXPECT_EQ(v["planc_preempted_jobs_24h tier=P3 preemptions=5+"], 1);
  EXPECT_EQ(v["planc_preempted_jobs_24h tier=P3 preemptions=1"], 0) << "0 in the window: none";
  EXPECT_EQ(v["planc_preempt_ledger_jobs"], 5);
}

TEST(BillingSamplesTest, PerTierRunsAndTheBacklog) {
  BillingCounters b;
  b.segments_ended[2] = 3;
  b.segment_seconds[2] = 3 * 3600;
  b.bills_written = 10;
  b.backlog_records = 0;
  b.oldest_backlog_age = 99;
  MetricsSnapshot s;
  add_billing_samples(b, &s);
  std::map<std::string, double> v;
  for (const MetricSample& m : s.samples) {
    EXPECT_NE(find_metric(m.name), nullptr) << m.name;
    v[m.name + (m.labels.empty() ? "" : " " + m.labels[0].second)] = m.value;
  }
  EXPECT_EQ(v["planc_run_segments_ended_total P2"], 3);
  EXPECT_EQ(v["planc_run_segment_seconds_total P2"], 10800);
  EXPECT_EQ(v["planc_run_segments_ended_total P0"], 0);
  EXPECT_EQ(v["planc_bills_written_total"], 10);
  EXPECT_EQ(v["planc_spool_oldest_record_age_seconds"], 0) << "no backlog: no age";
  b.backlog_records = 4;
  MetricsSnapshot s2;
  add_billing_samples(b, &s2);
  EXPECT_EQ(s2.samples.back(), (MetricSample{"planc_spool_oldest_record_age_seconds", {}, 99}));
}

TEST(DatabaseSamplesTest, BilledTotalsPerAccountAndTierAndTheNewestBill) {
  DatabaseFigures d;
  d.totals = {{"planc", "acct spot", "P3", 7200.5, 14400, 30923764531.2, 1.234567, "CNY"},
              {"planc", "acct-x", "", 1, 2, 3, 0, "CNY"}};
  d.unmeasured_7d = 4;
  d.waiting_for_hours = 17;
  d.hours_rolled_up_at = 1800000123;
  d.query_seconds = 0.012;
  MetricsSnapshot s;
  s.source = "database";
  add_database_samples(d, &s);
  std::map<std::string, double> v;
  for (const MetricSample& m : s.samples) {
    const MetricInfo* info = find_metric(m.name);
    ASSERT_NE(info, nullptr) << m.name;
    EXPECT_EQ(info->source, "database") << m.name;
    std::string key = m.name;
    for (const auto& [k, val] : m.labels) key += " " + k + "=" + val;
    v[key] = m.value;
  }
  EXPECT_EQ(v["planc_billed_gpu_seconds_total cluster=planc account=acct spot tier=P3"], 7200.5);
  EXPECT_EQ(v["planc_billed_core_seconds_total cluster=planc account=acct spot tier=P3"], 14400);
  EXPECT_EQ(v["planc_billed_memory_byte_seconds_total cluster=planc account=acct spot tier=P3"],
            30923764531.2);
  EXPECT_EQ(v["planc_billed_amount_total cluster=planc account=acct spot tier=P3 currency=CNY"],
            1.234567)
      << "money's unit is the currency label";
  EXPECT_EQ(v.count("planc_billed_gpu_seconds_total cluster=planc account=acct spot tier=P3 "
                    "currency=CNY"),
            0u)
      << "only the amount has a currency";
  EXPECT_EQ(v["planc_billed_gpu_seconds_total cluster=planc account=acct-x tier=none"], 1)
      << "a QoS that is no tier";
  EXPECT_EQ(v["planc_bills_unmeasured"], 4);
  EXPECT_EQ(v["planc_bills_waiting_for_hourly_totals"], 17);
  EXPECT_EQ(v["planc_hourly_totals_updated_timestamp_seconds"], 1800000123);
  EXPECT_EQ(v["planc_database_query_seconds"], 0.012);
  EXPECT_EQ(v.count("planc_bill_newest_end_timestamp_seconds"), 0u) << "no bill: no sample";
  d.newest_bill_end = 1800000000;
  MetricsSnapshot s2;
  add_database_samples(d, &s2);
  bool seen = false;
  for (const MetricSample& m : s2.samples)
    seen = seen || (m.name == "planc_bill_newest_end_timestamp_seconds" && m.value == 1800000000);
  EXPECT_TRUE(seen);
  // Through the file form and collect_metrics, as the exporter publishes it.
  s2.source = "database";
  s2.written = 1800000000;
  std::vector<std::string> problems;
  auto out = collect_metrics({{"database", serialize_snapshot(s2)}}, 1800000010, 60, &problems);
  EXPECT_TRUE(problems.empty());
  size_t billed = 0;
  for (const ExportedMetric& e : out)
    if (e.info->name == "planc_billed_amount_total") billed = e.samples.size();
  EXPECT_EQ(billed, 2u);
}

TEST(SlaTrackerTest, StartsWithinTheSlaAndHeldBackJobsLeftOut) {
  SlaTracker sla;
  const time_t t0 = 1800000000;
  // 1: eligible at t0, running at t0 + 40: within.  2: at t0 + 41: late.
  // 3: held back by a limit while pending, then started: left out.
  sla.observe(40, {}, {{3, "limit"}}, {1, 2, 3});
  sla.observe(40,
              {{1, TierId::kP0, t0 + 40, t0, t0 - 5},
               {2, TierId::kP1, t0 + 41, t0, t0},
               {3, TierId::kP0, t0 + 1, t0, t0}},
              {}, {});
  // The same runs seen again are not counted again; a requeued job's new
  // run is a new start (begin time 0: from its submission).
  sla.observe(40, {{1, TierId::kP0, t0 + 40, t0, t0 - 5}}, {}, {});
  sla.observe(40, {{1, TierId::kP0, t0 + 500, 0, t0 + 480}}, {}, {});
  MetricsSnapshot s;
  sla.add_samples(&s);
  std::map<std::string, double> v;
  for (const MetricSample& m : s.samples) {
    EXPECT_NE(find_metric(m.name), nullptr) << m.name;
    std::string key = m.name;
    for (const auto& [k, val] : m.labels) key += " " + val;
    v[key] = m.value;
  }
  EXPECT_EQ(v["planc_guaranteed_starts_total P0"], 2);
  EXPECT_EQ(v["planc_guaranteed_starts_within_sla_total P0"], 2);
  EXPECT_EQ(v["planc_guaranteed_starts_total P1"], 1);
  EXPECT_EQ(v["planc_guaranteed_starts_within_sla_total P1"], 0);
  EXPECT_EQ(v["planc_guaranteed_starts_excluded_total P0 limit"], 1);
}

using Reads = std::vector<std::pair<std::string, Result<std::string>>>;

std::map<std::string, std::vector<MetricSample>> by_name(const std::vector<ExportedMetric>& m) {
  std::map<std::string, std::vector<MetricSample>> out;
  for (const ExportedMetric& e : m) out[std::string(e.info->name)] = e.samples;
  return out;
}

TEST(CollectMetricsTest, FreshSourceIsUpWithItsCatalogedSamplesOnly) {
  MetricsSnapshot s = sample();  // planc_x is not cataloged: left out
  Reads reads;
  reads.emplace_back("slurmctld", serialize_snapshot(s));
  std::vector<std::string> problems;
  auto m = by_name(collect_metrics(reads, s.written + 60, 60, &problems));
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(
      m["planc_exporter_source_up"],
      (std::vector<MetricSample>{{"planc_exporter_source_up", {{"source", "slurmctld"}}, 1}}));
  EXPECT_EQ(m["planc_snapshot_age_seconds"][0].value, 60);
  EXPECT_EQ(m["planc_pool_gpus"][0].value, 32);
  EXPECT_EQ(m["planc_allocated_gpus"][0].value, 0.5);
  EXPECT_EQ(m.count("planc_x"), 0u);
}

TEST(CollectMetricsTest, MissingCorruptStaleOrForeignSourcesAreDownWithoutFigures) {
  MetricsSnapshot s = sample();
  std::string good = serialize_snapshot(s);
  MetricsSnapshot other = s;
  other.source = "preempt";
  Reads reads;
  reads.emplace_back("slurmctld", good);  // stale at written + 61
  reads.emplace_back("preempt",
                     Result<std::string>::failure(ErrorCode::kNotFound,
                                                  "cannot open /s/planc_metrics_preempt: "
                                                  "No such file or directory"));
  reads.emplace_back("jobcomp", good.substr(0, good.size() - 2));
  reads.emplace_back("job_submit", serialize_snapshot(other));
  std::vector<std::string> problems;
  auto m = by_name(collect_metrics(reads, s.written + 61, 60, &problems));
  for (const MetricSample& up : m["planc_exporter_source_up"])
    EXPECT_EQ(up.value, 0) << up.labels[0].second;
  EXPECT_EQ(m["planc_exporter_source_up"].size(), 4u);
  EXPECT_EQ(m.count("planc_pool_gpus"), 0u) << "a stale figure is never shown as current";
  // The age is shown where the file could be read.
  EXPECT_EQ(m["planc_snapshot_age_seconds"].size(), 1u);
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_EQ(problems[0], "slurmctld: stale: written 61 s ago (--max-age 60)");
  EXPECT_EQ(problems[1],
            "preempt: cannot open /s/planc_metrics_preempt: No such file or directory");
  EXPECT_EQ(problems[2].rfind("jobcomp: corrupt snapshot: ", 0), 0u) << problems[2];
  EXPECT_EQ(problems[3], "job_submit: the snapshot is preempt's, not job_submit's");
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
