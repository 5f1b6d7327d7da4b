#include "common/metrics_snapshot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/state_file.h"

namespace planc {
namespace {

constexpr std::string_view kHeader = "planc-metrics v1";

using T = MetricType;

// The HELP texts say exactly what is counted; the metric table in
// docs/metrics-and-alerts.md repeats them.
const std::vector<MetricInfo> kCatalog = {
    {"planc_build_info", T::kGauge, "version", "exporter",
     "Always 1; the version label is planc-exporter's release (the plugins of the same "
     "package build share it)."},
    {"planc_exporter_source_up", T::kGauge, "source", "exporter",
     "1 if the source was read and is fresh: a snapshot written within --max-age seconds and "
     "intact; 0 if it is missing, corrupt or stale (its figures are then left out, never "
     "shown as current)."},
    {"planc_snapshot_age_seconds", T::kGauge, "source", "exporter",
     "Seconds since the plugin wrote the snapshot the exporter read (by the file's own "
     "timestamp)."},
    {"planc_pool_gpus", T::kGauge, "", "slurmctld",
     "GPUs the cluster's nodes have (Slurm's gres/gpu TRES, fractional GPUs as Slurm counts "
     "them), whatever the nodes' state."},
    {"planc_allocated_gpus", T::kGauge, "tier", "slurmctld",
     "GPUs allocated to running jobs of the tier (the tier the job runs as: a P3 job on a free "
     "P2 attempt counts as P2), sampled every few seconds."},
    {"planc_jobs_running", T::kGauge, "tier", "slurmctld",
     "Jobs of the tier running at the sample."},
    {"planc_idle_threshold_crossings_total", T::kCounter, "threshold", "slurmctld",
     "Times the pool's idle GPU share (1 - allocated/pool) crossed the threshold, in either "
     "direction, between two samples, since slurmctld started."},
    {"planc_starvation_upgrades_total", T::kCounter, "", "slurmctld",
     "P3 jobs given their free attempt as P2 after waiting past StarvationThreshold, since "
     "slurmctld started."},
    {"planc_starvation_reverts_total", T::kCounter, "", "slurmctld",
     "Free attempts that ended by requeue and went back to their own tier, since slurmctld "
     "started."},
    {"planc_preemptions_total", T::kCounter, "tier", "preempt",
     "Preemptions started (SIGTERM and grace, or requeue or cancel at once), by the victim's "
     "tier, since slurmctld started; one called off before its grace ended is included."},
    {"planc_preemptions_per_job_24h_max", T::kGauge, "tier", "preempt",
     "The most preemptions any one job of the tier, not yet ended, has within the per-job cap's "
     "window (PreemptWindow, 24 h by default)."},
    {"planc_preempted_jobs_24h", T::kGauge, "tier,preemptions", "preempt",
     "Jobs of the tier, not yet ended, with that many preemptions (1, 2, 3, 4, 5+) within the "
     "per-job cap's window (PreemptWindow, 24 h by default); the cap's ledger forgets a job "
     "within a minute of its end."},
    {"planc_preempt_ledger_jobs", T::kGauge, "", "preempt",
     "Jobs the per-job preemption cap's ledger holds (preempted within the window)."},
    {"planc_run_segments_ended_total", T::kCounter, "tier", "jobcomp",
     "Run segments that ended (completed, failed, cancelled, preempted, requeued or resized: "
     "each a bill), by the tier they ran as, since slurmctld started; counted when jobcomp "
     "sees the end, before the bill is stored."},
    {"planc_run_segment_seconds_total", T::kCounter, "tier", "jobcomp",
     "Sum of the lengths (end - start, seconds) of the run segments counted in "
     "planc_run_segments_ended_total; the mean run time is the ratio of their increases."},
    {"planc_bills_written_total", T::kCounter, "", "jobcomp",
     "Bills PostgreSQL stored that it did not have yet, since slurmctld started."},
    {"planc_bills_rejected_total", T::kCounter, "", "jobcomp",
     "Bills PostgreSQL refused for their data (a constraint), set aside in <spool "
     "file>.rejected for planc-bill reconcile --fill."},
    {"planc_database_errors_total", T::kCounter, "", "jobcomp",
     "Attempts to store a spool file that failed (PostgreSQL unreachable or failing); the "
     "file is kept and tried again."},
    {"planc_spool_backlog_records", T::kGauge, "", "jobcomp",
     "Run segments recorded in the spool and not yet taken out by the bill writer (stored, "
     "set aside or skipped as damaged)."},
    {"planc_spool_oldest_record_age_seconds", T::kGauge, "", "jobcomp",
     "Seconds since the oldest spool file still waiting to be stored was started (0 when none "
     "waits): how late the bills are at most."},
    {"planc_guaranteed_starts_total", T::kCounter, "tier", "slurmctld",
     "Jobs of a guaranteed tier (P0, P1) that started and count for the SLA: not held back by "
     "their own limits before they started; since slurmctld started."},
    {"planc_guaranteed_starts_within_sla_total", T::kCounter, "tier", "slurmctld",
     "Of planc_guaranteed_starts_total, those that started within SlaStartSeconds (planc.conf, "
     "40 s) of becoming eligible (Slurm's begin time)."},
    {"planc_guaranteed_starts_excluded_total", T::kCounter, "tier,reason", "slurmctld",
     "Guaranteed jobs that started after being held back by their own limits, left out of the "
     "SLA: reason held, dependency, begin_time or limit (association or QoS limits, the 80% "
     "guaranteed cap among them)."},
    {"planc_config_reloads_total", T::kCounter, "result", "slurmctld",
     "planc.conf changes slurmctld/planc saw: result=\"ok\" put in force, result=\"failed\" "
     "refused (the previous file stays in force; the log names the line)."},
    {"planc_market_floor_price", T::kGauge, "gpu_type", "slurmctld",
     "The P2 market's floor, in the bills' currency per card-hour (gpu_type \"default\" for types "
     "without a CardHourPrice of their own), as the last round set it (Market=yes only)."},
    {"planc_market_vacancy_ratio", T::kGauge, "", "slurmctld",
     "Idle share of the pool's GPUs, time-weighted over the market interval before the last "
     "round: what moved the floor (MarketFloorCurve)."},
    {"planc_market_next_round_timestamp_seconds", T::kGauge, "", "slurmctld",
     "When the P2 market's next round is (Unix time)."},
    {"planc_infusion_operations_total", T::kCounter, "pool,action", "slurmctld",
     "Capacity infusion's operations on the pool since slurmctld started: action=\"grow\" (a "
     "replica submitted), \"shrink\" (one drained: idle fell below its threshold), "
     "\"reclaim\" (one given back to guaranteed work waiting; not limited by the cooldown); 0 "
     "for each pool of planc.conf until its first."},
    {"planc_infusion_replicas", T::kGauge, "pool", "slurmctld",
     "The pool's replicas, pending or running, not draining (Infusion=yes only)."},
    {"planc_p3_preempt_budget_used", T::kGauge, "", "preempt",
     "Preemptions of runs counting as P3 (free attempts included) started within "
     "P3PreemptWindow (planc.conf) before now: what the P3 preemption budget has spent."},
    {"planc_p3_preempt_budget_remaining", T::kGauge, "", "preempt",
     "How many more P3 runs P2 jobs may preempt now: P3PreemptMaxPercent of the P3 runs "
     "running, less planc_p3_preempt_budget_used (absent with no budget)."},
    {"planc_spot_cap_refusals_total", T::kCounter, "tier", "slurmctld",
     "Submissions and QoS updates job_submit/planc refused because the account had used its "
     "daily spot cap (SpotCapP2, SpotCapP3) in the tier, since slurmctld started."},
    {"planc_billed_gpu_seconds_total", T::kCounter, "cluster,account,tier", "database",
     "Card-seconds billed (fractional GPUs by their share), from the bills' hourly totals in "
     "PostgreSQL (planc.usage_hourly), all time; tier is \"none\" for a QoS that is no tier."},
    {"planc_billed_core_seconds_total", T::kCounter, "cluster,account,tier", "database",
     "Core-seconds billed (allocated CPUs x run seconds), from planc.usage_hourly, all time."},
    {"planc_billed_memory_byte_seconds_total", T::kCounter, "cluster,account,tier", "database",
     "Memory byte-seconds billed (allocated memory in bytes x run seconds), from "
     "planc.usage_hourly, all time."},
    {"planc_billed_amount_total", T::kCounter, "cluster,account,tier,currency", "database",
     "Amount billed, in major units of the currency label (planc.conf Currency, as the "
     "cluster's newest bill has it), exact to a micro-unit, from planc.usage_hourly, all time; "
     "unfinished preempted time is 0."},
    {"planc_bill_newest_end_timestamp_seconds", T::kGauge, "", "database",
     "The end of the newest run segment PostgreSQL has a bill for (Unix time; absent when "
     "there is no bill): how far the bills have got."},
    {"planc_bills_unmeasured", T::kGauge, "", "database",
     "Bills of runs that ended in the last 7 days whose measured usage planc-bill measure has "
     "not filled yet."},
    {"planc_bills_waiting_for_hourly_totals", T::kGauge, "", "database",
     "Bills stored but not yet added to the hourly totals (planc.usage_hourly), which the "
     "planc_billed_* counters, planc-bill report and the usage poll read; jobcomp/planc's "
     "writer adds them within seconds of storing them."},
    {"planc_hourly_totals_updated_timestamp_seconds", T::kGauge, "", "database",
     "When bills were last added to the hourly totals (Unix time; the schema's migration "
     "before the first)."},
    {"planc_database_query_seconds", T::kGauge, "", "database",
     "How long the exporter's last reading of the bill database took (it reads in the "
     "background every --database-interval, not at the scrape)."},
};

bool plain(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '+' || c == '-';
}

std::string encode(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (plain(c)) {
      out += c;
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  return out.empty() ? "%" : out;  // "%" alone: the empty value
}

bool hex(char c, int* v) {
  if (c >= '0' && c <= '9')
    *v = c - '0';
  else if (c >= 'A' && c <= 'F')
    *v = c - 'A' + 10;
  else if (c >= 'a' && c <= 'f')
    *v = c - 'a' + 10;
  else
    return false;
  return true;
}

bool decode(std::string_view s, std::string* out) {
  out->clear();
  if (s == "%") return true;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] != '%') {
      if (!plain(s[i])) return false;
      *out += s[i];
      continue;
    }
    int hi, lo;
    if (i + 2 >= s.size() || !hex(s[i + 1], &hi) || !hex(s[i + 2], &lo)) return false;
    *out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

bool valid_name(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); i++) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string format_value(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

const std::vector<MetricInfo>& metric_catalog() { return kCatalog; }

const MetricInfo* find_metric(std::string_view name) {
  for (const MetricInfo& m : kCatalog)
    if (m.name == name) return &m;
  return nullptr;
}

std::string serialize_snapshot(const MetricsSnapshot& s) {
  std::string body =
      "S " + encode(s.source) + " " + std::to_string(static_cast<int64_t>(s.written)) + "\n";
  for (const MetricSample& m : s.samples) {
    body += "M " + m.name + " " + format_value(m.value);
    for (const auto& [k, v] : m.labels) body += " " + k + "=" + encode(v);
    body += "\n";
  }
  return frame_state(kHeader, body, s.samples.size() + 1);
}

Result<MetricsSnapshot> parse_snapshot(std::string_view text) {
  using R = Result<MetricsSnapshot>;
  uint64_t records = 0;
  auto body = unframe_state(text, kHeader, &records);
  if (!body.ok()) return R::failure(ErrorCode::kCorrupt, body.error());
  auto lines = split_lines(body.value());
  if (!lines || lines->empty()) return R::failure(ErrorCode::kCorrupt, "no source line");
  MetricsSnapshot s;
  size_t n = 0;
  for (std::string_view line : *lines) {
    n++;
    auto bad = [&](const std::string& what) {
      return R::failure(ErrorCode::kCorrupt, "line " + std::to_string(n) + ": " + what);
    };
    auto w = split_words(line);
    if (n == 1) {
      uint64_t t = 0;
      if (w.size() != 3 || w[0] != "S" || !decode(w[1], &s.source) || !parse_u64(w[2], &t))
        return bad("expected 'S <source> <time>'");
      s.written = static_cast<time_t>(t);
      continue;
    }
    if (w.size() < 3 || w[0] != "M" || !valid_name(w[1])) return bad("expected 'M <name> <value>'");
    MetricSample m;
    m.name = std::string(w[1]);
    std::string v(w[2]);
    char* end = nullptr;
    m.value = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end || std::isnan(m.value)) return bad("bad value '" + v + "'");
    for (size_t i = 3; i < w.size(); i++) {
      size_t eq = w[i].find('=');
      std::string val;
      if (eq == std::string_view::npos || !valid_name(w[i].substr(0, eq)) ||
          !decode(w[i].substr(eq + 1), &val))
        return bad("bad label '" + std::string(w[i]) + "'");
      m.labels.emplace_back(std::string(w[i].substr(0, eq)), std::move(val));
    }
    s.samples.push_back(std::move(m));
  }
  if (records != n) return R::failure(ErrorCode::kCorrupt, "record count does not match");
  return s;
}

void add_preemption_samples(const std::array<uint64_t, kTierCount>& started,
                            const std::vector<std::pair<TierId, uint32_t>>& per_job,
                            size_t ledger_jobs, MetricsSnapshot* s) {
  constexpr size_t kBuckets = 5;  // 1, 2, 3, 4, 5+
  std::array<uint32_t, kTierCount> most{};
  std::array<std::array<uint64_t, kBuckets>, kTierCount> jobs{};
  for (const auto& [tier, n] : per_job) {
    if (!n) continue;
    const int t = tier_index(tier);
    most[t] = std::max(most[t], n);
    jobs[t][std::min<size_t>(n, kBuckets) - 1]++;
  }
  for (int t = 0; t < kTierCount; t++) {
    const std::string tier = "P" + std::to_string(t);
    s->samples.push_back(
        {"planc_preemptions_total", {{"tier", tier}}, static_cast<double>(started[t])});
    s->samples.push_back(
        {"planc_preemptions_per_job_24h_max", {{"tier", tier}}, static_cast<double>(most[t])});
    for (size_t b = 0; b < kBuckets; b++)
      s->samples.push_back(
          {"planc_preempted_jobs_24h",
           {{"tier", tier},
            {"preemptions", std::to_string(b + 1) + (b + 1 == kBuckets ? "+" : "")}},
           static_cast<double>(jobs[t][b])});
  }
  s->samples.push_back({"planc_preempt_ledger_jobs", {}, static_cast<double>(ledger_jobs)});
}

void add_billing_samples(const BillingCounters& b, MetricsSnapshot* s) {
  for (int t = 0; t < kTierCount; t++) {
    const std::string tier = "P" + std::to_string(t);
    s->samples.push_back({"planc_run_segments_ended_total",
                          {{"tier", tier}},
                          static_cast<double>(b.segments_ended[t])});
    s->samples.push_back({"planc_run_segment_seconds_total",
                          {{"tier", tier}},
                          static_cast<double>(b.segment_seconds[t])});
  }
  s->samples.push_back({"planc_bills_written_total", {}, static_cast<double>(b.bills_written)});
  s->samples.push_back({"planc_bills_rejected_total", {}, static_cast<double>(b.bills_rejected)});
  s->samples.push_back({"planc_database_errors_total", {}, static_cast<double>(b.database_errors)});
  s->samples.push_back({"planc_spool_backlog_records", {}, static_cast<double>(b.backlog_records)});
  s->samples.push_back({"planc_spool_oldest_record_age_seconds",
                        {},
                        static_cast<double>(b.backlog_records ? b.oldest_backlog_age : 0)});
}

void add_database_samples(const DatabaseFigures& d, MetricsSnapshot* s) {
  static constexpr std::array<std::pair<const char*, double BilledTotal::*>, 4> kFields = {{
      {"planc_billed_gpu_seconds_total", &BilledTotal::gpu_seconds},
      {"planc_billed_core_seconds_total", &BilledTotal::core_seconds},
      {"planc_billed_memory_byte_seconds_total", &BilledTotal::memory_byte_seconds},
      {"planc_billed_amount_total", &BilledTotal::amount},
  }};
  for (const auto& [name, field] : kFields)
    for (const BilledTotal& t : d.totals) {
      MetricSample m{name,
                     {{"cluster", t.cluster},
                      {"account", t.account},
                      {"tier", t.tier.empty() ? "none" : t.tier}},
                     t.*field};
      // Money has no base unit, so the currency is a label: a sum by
      // currency never adds two currencies together.
      if (field == &BilledTotal::amount) m.labels.emplace_back("currency", t.currency);
      s->samples.push_back(std::move(m));
    }
  if (d.newest_bill_end)
    s->samples.push_back({"planc_bill_newest_end_timestamp_seconds", {}, *d.newest_bill_end});
  s->samples.push_back({"planc_bills_unmeasured", {}, static_cast<double>(d.unmeasured_7d)});
  s->samples.push_back(
      {"planc_bills_waiting_for_hourly_totals", {}, static_cast<double>(d.waiting_for_hours)});
  s->samples.push_back({"planc_hourly_totals_updated_timestamp_seconds", {}, d.hours_rolled_up_at});
  s->samples.push_back({"planc_database_query_seconds", {}, d.query_seconds});
}

void SlaTracker::observe(uint32_t sla_seconds, const std::vector<GuaranteedRun>& running,
                         const std::vector<HeldBack>& held, const std::vector<uint32_t>& pending) {
  for (const HeldBack& h : held) held_.emplace(h.job_id, h.reason);  // the first reason seen
  std::map<uint32_t, time_t> now_running;
  for (const GuaranteedRun& r : running) {
    now_running[r.job_id] = r.start;
    auto c = counted_.find(r.job_id);
    if (c != counted_.end() && c->second == r.start) continue;  // this run is counted
    const int t = tier_index(r.tier);
    if (auto h = held_.find(r.job_id); h != held_.end()) {
      excluded_[{t, h->second}]++;
      held_.erase(h);
      continue;
    }
    starts_[t]++;
    const time_t eligible = r.eligible ? r.eligible : r.submit;
    if (r.start - eligible <= static_cast<time_t>(sla_seconds)) within_[t]++;
  }
  counted_ = std::move(now_running);
  // A held-back job that is neither pending nor running any more is gone.
  std::vector<uint32_t> sorted = pending;
  std::sort(sorted.begin(), sorted.end());
  for (auto it = held_.begin(); it != held_.end();) {
    if (!std::binary_search(sorted.begin(), sorted.end(), it->first) && !counted_.count(it->first))
      it = held_.erase(it);
    else
      ++it;
  }
}

void SlaTracker::add_samples(MetricsSnapshot* s) const {
  for (int t = 0; t < kTierCount; t++) {
    const std::string tier = "P" + std::to_string(t);
    s->samples.push_back(
        {"planc_guaranteed_starts_total", {{"tier", tier}}, static_cast<double>(starts_[t])});
    s->samples.push_back({"planc_guaranteed_starts_within_sla_total",
                          {{"tier", tier}},
                          static_cast<double>(within_[t])});
  }
  for (const auto& [key, n] : excluded_)
    s->samples.push_back({"planc_guaranteed_starts_excluded_total",
                          {{"tier", "P" + std::to_string(key.first)}, {"reason", key.second}},
                          static_cast<double>(n)});
}

std::vector<ExportedMetric> collect_metrics(
    const std::vector<std::pair<std::string, Result<std::string>>>& reads, time_t now,
    uint32_t max_age, std::vector<std::string>* problems) {
  std::map<std::string_view, std::vector<MetricSample>> by_name;
  for (const auto& [source, text] : reads) {
    std::string problem;
    bool up = false;
    if (!text.ok()) {
      problem = text.error();
    } else if (auto snap = parse_snapshot(text.value()); !snap.ok()) {
      problem = "corrupt snapshot: " + snap.error();
    } else if (snap.value().source != source) {
      problem = "the snapshot is " + snap.value().source + "'s, not " + source + "'s";
    } else {
      const int64_t age = static_cast<int64_t>(now) - static_cast<int64_t>(snap.value().written);
      by_name["planc_snapshot_age_seconds"].push_back(
          {"planc_snapshot_age_seconds", {{"source", source}}, static_cast<double>(age)});
      if (age > static_cast<int64_t>(max_age)) {
        problem = "stale: written " + std::to_string(age) + " s ago (--max-age " +
                  std::to_string(max_age) + ")";
      } else {
        up = true;
        for (const MetricSample& m : snap.value().samples) {
          const MetricInfo* info = find_metric(m.name);
          if (info && info->source == source) by_name[info->name].push_back(m);
        }
      }
    }
    by_name["planc_exporter_source_up"].push_back(
        {"planc_exporter_source_up", {{"source", source}}, up ? 1.0 : 0.0});
    if (!up && problems) problems->push_back(source + ": " + problem);
  }
  std::vector<ExportedMetric> out;
  for (const MetricInfo& info : metric_catalog()) {
    auto it = by_name.find(info.name);
    if (it != by_name.end()) out.push_back({&info, std::move(it->second)});
  }
  return out;
}

std::string snapshot_path(std::string_view dir, std::string_view source) {
  return std::string(dir) + "/planc_metrics_" + std::string(source);
}

void IdleCrossings::observe(double idle_share) {
  for (size_t i = 0; i < kDefaultThresholds.size(); i++) {
    bool above = idle_share >= kDefaultThresholds[i];
    if (seen_ && above != above_[i]) counts_[i]++;
    above_[i] = above;
  }
  seen_ = true;
}

std::string IdleCrossings::threshold_label(size_t i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.2f", kDefaultThresholds[i]);
  return buf;
}

uint64_t PoolUsage::allocated_total() const {
  uint64_t n = 0;
  for (uint64_t g : allocated_gpus) n += g;
  return n;
}

void add_pool_samples(const PoolUsage& u, const IdleCrossings& idle, MetricsSnapshot* s) {
  s->samples.push_back({"planc_pool_gpus", {}, static_cast<double>(u.pool_gpus)});
  for (int t = 0; t < kTierCount; t++) {
    std::string tier = "P" + std::to_string(t);
    s->samples.push_back(
        {"planc_allocated_gpus", {{"tier", tier}}, static_cast<double>(u.allocated_gpus[t])});
    s->samples.push_back(
        {"planc_jobs_running", {{"tier", tier}}, static_cast<double>(u.running_jobs[t])});
  }
  for (size_t i = 0; i < IdleCrossings::kDefaultThresholds.size(); i++)
    s->samples.push_back({"planc_idle_threshold_crossings_total",
                          {{"threshold", IdleCrossings::threshold_label(i)}},
                          static_cast<double>(idle.crossings(i))});
}

}  // namespace planc
