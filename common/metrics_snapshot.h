// Plan C's metrics, as the plugins hand them to planc-exporter.
//
// No HTTP server runs inside slurmctld.  Each plugin writes, every few
// seconds and outside slurmctld's locks, a small checksummed snapshot file
// <StateSaveLocation>/planc_metrics_<source> (write_file_atomically); the
// exporter reads the files when Prometheus scrapes it.  A snapshot names
// its source and when it was written, so a stale one is shown as stale
// (planc_exporter_source_up 0), never as fresh figures.
//
// The catalog below is the one list of the metrics: their names, types and
// HELP texts (what exactly is counted).  The exporter publishes only
// cataloged names; `planc-exporter --list-metrics` prints the catalog.
#pragma once

#include <array>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/tier.h"

namespace planc {

enum class MetricType : uint8_t { kCounter, kGauge };

struct MetricInfo {
  std::string_view name;  // planc_..., base units in the name, _total for counters
  MetricType type;
  std::string_view labels;  // the label names, comma-separated ("" for none)
  std::string_view source;  // the snapshot that carries it: "slurmctld", "exporter", ...
  std::string_view help;
};

// Every metric Plan C exports, in the order the exporter prints them.
const std::vector<MetricInfo>& metric_catalog();
// nullptr if `name` is not cataloged.
const MetricInfo* find_metric(std::string_view name);

struct MetricSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the catalog's order
  double value = 0;
  bool operator==(const MetricSample&) const = default;
};

struct MetricsSnapshot {
  std::string source;  // "slurmctld"
  time_t written = 0;  // when the plugin wrote it (its clock)
  std::vector<MetricSample> samples;
  bool operator==(const MetricsSnapshot&) const = default;
};

// The file's text: framed and checksummed (common/state_file.h).  Label
// values are percent-encoded outside [A-Za-z0-9_.:+-] (account names are
// the admins', but a space or '=' must not break a line).
std::string serialize_snapshot(const MetricsSnapshot& s);
// kCorrupt with what is wrong: a torn or damaged file, an unknown version,
// a bad line.  Names are not checked against the catalog here.
Result<MetricsSnapshot> parse_snapshot(std::string_view text);

// preempt/planc's samples: preemptions started per victim tier since
// slurmctld started (`started`, indexed by tier), and per job in the
// ledger its tier and its preemptions within the cap's window
// (PreemptWindow, 24 h): the most any one job has per tier, and how many
// jobs have 1, 2, 3, 4 and 5 or more.
void add_preemption_samples(const std::array<uint64_t, kTierCount>& started,
                            const std::vector<std::pair<TierId, uint32_t>>& per_job,
                            size_t ledger_jobs, MetricsSnapshot* s);

// jobcomp/planc's samples.  Run segments are counted as jobcomp sees them
// end (before they are billed), by tier; the spool's backlog is what has
// been recorded and not yet taken out by the bill writer.
struct BillingCounters {
  std::array<uint64_t, kTierCount> segments_ended{};
  std::array<uint64_t, kTierCount> segment_seconds{};
  uint64_t bills_written = 0;    // new bills PostgreSQL stored
  uint64_t bills_rejected = 0;   // refused by PostgreSQL for their data, set aside
  uint64_t database_errors = 0;  // attempts to store a spool file that failed
  uint64_t backlog_records = 0;
  int64_t oldest_backlog_age = 0;  // seconds; 0 when the backlog is empty
};
void add_billing_samples(const BillingCounters& b, MetricsSnapshot* s);

// What the bill database knows (planc-exporter's "database" source, read
// through planc.metrics_billed(), planc.metrics_bills() and
// planc.metrics_rollup(), schemas 0004, 0008 and 0012): billed usage per
// cluster, account and tier, all time, in base units; the newest bill's
// end; bills not measured yet; bills not yet in the hourly totals.
struct BilledTotal {
  std::string cluster, account, tier;  // tier "" when the QoS is no tier
  double gpu_seconds = 0, core_seconds = 0;
  double memory_byte_seconds = 0;  // allocated bytes x run seconds
  double amount = 0;               // major units of `currency`
  std::string currency;            // the bills' (planc.conf Currency), e.g. "CNY"
};
struct DatabaseFigures {
  std::vector<BilledTotal> totals;
  std::optional<double> newest_bill_end;  // Unix time; none without bills
  uint64_t unmeasured_7d = 0;
  uint64_t waiting_for_hours = 0;  // stored, not yet in planc.usage_hourly
  double hours_rolled_up_at = 0;   // Unix time bills were last added to it
  double query_seconds = 0;
};
void add_database_samples(const DatabaseFigures& d, MetricsSnapshot* s);

// The guaranteed tiers' SLA (policy 9, "P0 SLA attainment"): the share of
// jobs that started within SlaStartSeconds (40 s) of becoming eligible
// (Slurm's begin time: submitted, not held, dependencies met).  Jobs held
// back by their own limits at any sample before they started (a hold, a
// dependency, a begin time, their association's or QoS's limits: the 80%
// cap is a QoS limit) are left out and counted by reason.  Fed by
// slurmctld/planc's 5 s samples: a guaranteed run shorter than a sample
// interval may be missed (not counted either way).
struct GuaranteedRun {
  uint32_t job_id = 0;
  TierId tier = TierId::kP0;
  time_t start = 0;
  time_t eligible = 0;  // 0: unknown: counted as eligible at submission
  time_t submit = 0;
};
struct HeldBack {
  uint32_t job_id = 0;
  std::string reason;  // "held", "dependency", "begin_time", "limit"
};
class SlaTracker {
 public:
  // One sample: the guaranteed jobs running, the pending ones held back by
  // their own limits, and every pending guaranteed job's id.
  void observe(uint32_t sla_seconds, const std::vector<GuaranteedRun>& running,
               const std::vector<HeldBack>& held, const std::vector<uint32_t>& pending);
  void add_samples(MetricsSnapshot* s) const;

 private:
  std::array<uint64_t, kTierCount> starts_{}, within_{};
  std::map<std::pair<int, std::string>, uint64_t> excluded_;  // (tier, reason)
  std::map<uint32_t, std::string> held_;                      // pending, held back at some sample
  std::map<uint32_t, time_t> counted_;                        // running, counted (job -> start)
};

// What the exporter publishes at one scrape, from the snapshot files it
// just read (`reads`: source name and the file's text or why it could not
// be read).  A source is up when its snapshot parses, names that source and
// was written at most `max_age` seconds before `now`; only then are its
// samples published, and only cataloged names from that source.  Every
// source gets planc_exporter_source_up; planc_snapshot_age_seconds when
// the snapshot was readable.  `problems` gets one line per source that is
// down ("slurmctld: /x: stale: written 95 s ago (--max-age 60)").
struct ExportedMetric {
  const MetricInfo* info = nullptr;
  std::vector<MetricSample> samples;
};
std::vector<ExportedMetric> collect_metrics(
    const std::vector<std::pair<std::string, Result<std::string>>>& reads, time_t now,
    uint32_t max_age, std::vector<std::string>* problems);

// The snapshot file of `source` in a state directory.
std::string snapshot_path(std::string_view dir, std::string_view source);

// Counts how often the pool's idle share crosses each threshold (5%, 15%
// and 30% idle by default), in either direction: the capacity-infusion
// triggers to come, and "flapping" when they cross often.  The first
// observation only sets the side.
class IdleCrossings {
 public:
  static constexpr std::array<double, 3> kDefaultThresholds = {0.05, 0.15, 0.30};
  IdleCrossings() = default;
  // `idle_share` in [0, 1]; a share exactly at a threshold counts as at or
  // above it.
  void observe(double idle_share);
  uint64_t crossings(size_t i) const { return counts_[i]; }
  static std::string threshold_label(size_t i);  // "0.05"

 private:
  std::array<uint64_t, 3> counts_{};
  std::array<bool, 3> above_{};
  bool seen_ = false;
};

// What the pool holds now, per tier: jobs running and the GPUs they were
// allocated (fractional GPUs -- MIG, shards -- counted as Slurm's gres/gpu
// TRES counts them).
struct PoolUsage {
  uint64_t pool_gpus = 0;  // GPUs the nodes have (gres/gpu TRES), up or not
  std::array<uint64_t, kTierCount> allocated_gpus{};
  std::array<uint64_t, kTierCount> running_jobs{};
  // GPUs on nodes whose GPUs are all of one type (gres.conf Type=), per
  // type, of those what guaranteed (P0, P1) and P2 jobs hold, and what
  // guaranteed jobs alone hold: the typed P2 markets' offer and what they
  // could reach (common/market.h, plan_round).
  std::map<std::string, uint64_t> typed_gpus, typed_held, typed_guaranteed;
  uint64_t allocated_total() const;
};

// The samples of a PoolUsage plus the idle crossings.
void add_pool_samples(const PoolUsage& u, const IdleCrossings& idle, MetricsSnapshot* s);

}  // namespace planc
