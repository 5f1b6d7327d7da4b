// jobcomp/planc: one bill per run segment, in PostgreSQL, exactly once.
//
// Inside slurmctld:
//   jobcomp_p_log_record  (job write lock held) turns the job into a Segment
//                         and appends one checksummed line to the current
//                         spool file: one write(2), no database, no lookup.
//                         A line in the page cache survives a SIGKILL of
//                         slurmctld.
//   worker thread         every second closes the current spool file (a new
//                         one takes the appends), fsyncs it, prices its
//                         segments (common/billing.h) and writes them to
//                         PostgreSQL in one transaction per batch
//                         (common/bill_store.h), then deletes the file.
//                         PostgreSQL down: files wait and are retried with
//                         backoff; slurmctld does not notice.
// The spool's files (common/spool.h) live in planc.conf's SpoolDir (read
// at start; default StateSaveLocation/planc_jobcomp/), named by sequence.
// After a crash every remaining file is replayed; the bill key (cluster,
// job id, start time) makes a replay write nothing twice.  PostgreSQL's
// answer decides (common/result.h): a bill refused as data (kRefused) is
// set aside in <file>.rejected, anything else (kRetryable) keeps the file
// for the next try.
//
// In `sacct -c` (the client), jobcomp_p_get_jobs reads bills back through
// the same connection string, as the user who runs sacct: PostgreSQL's
// row-level security decides what that user sees.
#include "plugins/slurm_compat.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/bill_store.h"
#include "common/billing.h"
#include "common/metrics_snapshot.h"
#include "common/spool.h"
#include "common/state_file.h"
#include "plugins/jobcomp_sacct.h"
#include "plugins/mutex.h"
#include "plugins/planc_shared.h"
#include "plugins/slurm_adapter.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] = "Plan C billing to PostgreSQL";
PLANC_EXPORT const char plugin_type[] = "jobcomp/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

using planc::Bill;
using planc::Segment;

constexpr auto kMetricsInterval = std::chrono::seconds(5);

bool g_in_ctld = false;
// The prices bills are made with: only the worker reads it, and swaps in a
// reloaded planc.conf.  null: planc.conf failed (segments wait in the
// spool until a valid file is in place).
std::shared_ptr<const planc::PlancConfig> g_config;
// Each planc.conf loaded since slurmctld started, from when it was in
// force (worker only): a run is priced with the prices in force when it
// ended, also when its bill is stored later (PostgreSQL was down).
std::vector<std::pair<time_t, std::shared_ptr<const planc::PlancConfig>>> g_configs;

const planc::PlancConfig& config_at(int64_t end_time) {
  for (auto it = g_configs.rbegin(); it != g_configs.rend(); ++it)
    if (it->first <= end_time) return *it->second;
  return *g_configs.front().second;  // ended before slurmctld started
}

// The spool's directory (common/spool.h), set by init() before the worker
// starts and never changed after: SpoolDir applies at the next restart.
std::unique_ptr<planc::Spool> g_spool;
// The default place, when SpoolDir is elsewhere: files a start without
// planc.conf (or before SpoolDir was set) left there are replayed too.
std::unique_ptr<planc::Spool> g_default_spool;
std::string g_spool_setting;  // SpoolDir as planc.conf had it at start
std::string g_metrics_path;   // StateSaveLocation/planc_metrics_jobcomp

// The append side.  log_record holds g_spool_mu around one write(2) only;
// the worker around swapping files, never across an open, fsync or close.
planc::Mutex g_spool_mu;
planc::RecordAppender g_appender GUARDED_BY(g_spool_mu);
uint64_t g_seq GUARDED_BY(g_spool_mu) = 0;   // number of g_appender's file
time_t g_opened GUARDED_BY(g_spool_mu) = 0;  // when g_appender's file was started
// For the metrics snapshot: run segments ended per QoS (count, seconds),
// and segments appended, since slurmctld started.
struct RunCount {
  uint64_t segments = 0, seconds = 0;
};
std::map<std::string, RunCount> g_runs_by_qos GUARDED_BY(g_spool_mu);
uint64_t g_appended GUARDED_BY(g_spool_mu) = 0;

// A closed spool file waiting to be stored (worker only).
struct PendingFile {
  const planc::Spool* spool;
  uint64_t seq;
  time_t since;  // when its first record was written, at the latest
};

// preempt/planc's completion hook (plugins/planc_shared.h), looked up on
// first use and again at most every 10 s while missing (PreemptType may be
// another plugin).  Only touched in log_record (job write lock).
planc_preempt_run_end_fn g_run_end = nullptr;
planc_market_run_end_fn g_market_run_end = nullptr;  // slurmctld/planc's, looked up with it
time_t g_run_end_lookup_at = 0;

// Start of the current size of each resized running job: Slurm moves
// resize_time to the moment of a resize before it logs the size that ended.
// Only touched in log_record (slurmctld's job write lock).
std::unordered_map<uint32_t, time_t> g_size_start;

// The worker.
planc::Mutex g_mu;
std::condition_variable_any g_cv;
std::string g_conninfo GUARDED_BY(g_mu);
bool g_stop GUARDED_BY(g_mu) = false;
// `scontrol reconfigure` calls set_location(): look at planc.conf at once.
bool g_reconfigured GUARDED_BY(g_mu) = false;
std::thread* g_worker = nullptr;  // never destroyed at exit: see plugins/worker_thread.h

// Closes the current spool file and starts the next; returns the closed
// file's number (and when it was started in *opened), or 0 when it was
// empty and stays current.  The new file is created and the old one
// fsynced and closed outside g_spool_mu, so log_record never waits for the
// disk.
uint64_t rotate(time_t* opened) {
  uint64_t next_seq;
  {
    planc::MutexLock l(g_spool_mu);
    if (g_appender.idle()) return 0;
    next_seq = g_seq + 1;
  }
  auto next = g_spool->create(next_seq);
  if (!next.ok()) {
    error("%s: %s; bills stay in the current spool file", plugin_type, next.error().c_str());
    return 0;
  }
  planc::AppendFile old;
  uint64_t old_seq;
  std::deque<std::string> retry;
  {
    planc::MutexLock l(g_spool_mu);
    old = g_appender.replace(std::move(next).value());
    old_seq = g_seq;
    g_seq = next_seq;
    *opened = g_opened;
    g_opened = time(nullptr);
    retry = g_appender.take_waiting();
  }
  // Records whose write failed earlier (disk full) go to the closed file.
  std::string problem;
  std::deque<std::string> left = g_spool->finish(std::move(old), std::move(retry), &problem);
  if (!left.empty()) {
    error("%s: %zu segment(s) still not in the spool (%s); kept in memory, retrying", plugin_type,
          left.size(), problem.c_str());
    planc::MutexLock l(g_spool_mu);
    g_appender.put_back(std::move(left));
  } else if (!problem.empty()) {
    error("%s: %s", plugin_type, problem.c_str());
  }
  return old_seq;
}

Bill price(Segment s) {
  if (s.user.empty()) s.user = planc::slurm::user_name(s.uid);
  planc::make_text_valid_utf8(&s);
  return planc::price_segment(config_at(s.end_time), s);
}

// Stores one closed spool file and says what happened.  false: PostgreSQL
// (or the disk) failed, *problem says why; the file stays for the next try.
bool store_file(planc::BillStore& store, const PendingFile& f, std::string* problem,
                planc::BillingCounters* counts, uint64_t* processed) {
  // PostgreSQL's answer decides (common/bill_store.h): kRefused bills are
  // set aside, anything else keeps the file for the next try.
  auto write = [&store](const planc::BillBatch& bills) { return store.write(bills); };
  auto r = f.spool->store(f.seq, price, write, planc::kBillsPerTransaction, "jobcomp");
  if (!r.ok() && r.code() == planc::ErrorCode::kNotFound) {
    // Removed by hand meanwhile: nothing to store, nothing to wait for.
    error("%s: %s; skipped", plugin_type, r.error().c_str());
    return true;
  }
  if (!r.ok()) {
    *problem = r.error();
    return false;
  }
  const std::string path = f.spool->path(f.seq);
  counts->bills_written += r.value().fresh;
  counts->bills_rejected += r.value().rejected.size();
  *processed += r.value().records + r.value().damaged.size();
  for (const planc::SpoolDamage& d : r.value().damaged)
    error("%s: %s line %zu: %s; skipped (run planc-bill reconcile to find the segment)",
          plugin_type, path.c_str(), d.line_no, d.error.c_str());
  for (const planc::SpoolRejected& x : r.value().rejected)
    error(
        "%s: PostgreSQL refused the bill of JobId=%u start %s (%s); record kept in %s, "
        "fix and replay it with planc-bill reconcile --fill",
        plugin_type, x.seg.job_id, planc::pg_timestamp(x.seg.start_time).c_str(), x.error.c_str(),
        f.spool->rejected_path(f.seq).c_str());
  if (!r.value().remove_error.empty())
    error("%s: %s (its bills are stored; remove it by hand)", plugin_type,
          r.value().remove_error.c_str());
  debug("%s: stored %zu bill(s) from %s, %zu new", plugin_type, r.value().records, path.c_str(),
        r.value().fresh);
  return true;
}

// A spool file from before the restart: its first record is no younger
// than its last change.
time_t file_time(const planc::Spool& spool, uint64_t seq) {
  struct stat st;
  return stat(spool.path(seq).c_str(), &st) == 0 ? st.st_mtime : time(nullptr);
}

// The metrics snapshot for planc-exporter (common/metrics_snapshot.h),
// written by the worker outside every slurmctld lock.
void write_metrics(planc::BillingCounters c, uint64_t processed,
                   const std::vector<PendingFile>& pending) {
  std::map<std::string, RunCount> runs;
  uint64_t appended;
  time_t current_opened;
  bool current_idle;
  {
    planc::MutexLock l(g_spool_mu);
    runs = g_runs_by_qos;
    appended = g_appended;
    current_opened = g_opened;
    current_idle = g_appender.idle();
  }
  const time_t now = time(nullptr);
  for (const auto& [qos, n] : runs) {
    const planc::Tier* t = g_config ? g_config->tiers.find_by_qos(qos) : nullptr;
    if (!t) continue;  // not a Plan C tier: not in the per-tier figures
    c.segments_ended[planc::tier_index(t->id)] += n.segments;
    c.segment_seconds[planc::tier_index(t->id)] += n.seconds;
  }
  c.backlog_records =
      appended + c.backlog_records > processed ? appended + c.backlog_records - processed : 0;
  time_t oldest = current_idle ? now : current_opened;
  for (const PendingFile& f : pending) oldest = std::min(oldest, f.since);
  c.oldest_backlog_age = now - oldest;
  planc::MetricsSnapshot snap;
  snap.source = "jobcomp";
  snap.written = now;
  planc::add_billing_samples(c, &snap);
  if (auto err = planc::write_file_atomically(g_metrics_path, planc::serialize_snapshot(snap),
                                              planc::Durability::kNoSync))
    error("%s: metrics snapshot: %s", plugin_type, err->c_str());
}

// fini() must not wait for a long backlog: the spool keeps what is left.
bool stopping() {
  planc::MutexLock l(g_mu);
  return g_stop;
}

// Adds the hours of the bills stored since the last time to
// planc.usage_hourly (common/bill_store.h, rollup()), a transaction at a
// time until none is left.  false: PostgreSQL failed, *problem says why;
// the next pass tries again.
bool roll_up(planc::BillStore& store, std::string* problem) {
  while (!stopping()) {
    auto r = store.rollup(planc::kRollupBillsPerTransaction);
    if (!r.ok()) {
      *problem = "adding bills to the hourly totals: " + r.error();
      return false;
    }
    if (r.value().bills)
      debug("%s: %zu bill(s) added to %zu hourly row(s), up to bill number %lld", plugin_type,
            r.value().bills, r.value().hour_rows, static_cast<long long>(r.value().last_seq));
    if (!r.value().bills) return true;
  }
  return true;
}

void worker(std::vector<PendingFile> pending, planc::ConfigWatch watch) {
  using Clock = std::chrono::steady_clock;
  std::unique_ptr<planc::BillStore> store;
  std::string store_conninfo;
  planc::RetryBackoff backoff;  // while PostgreSQL is unreachable
  bool config_logged = false, spool_dir_logged = false;
  // Metrics: counters since start; backlog_records starts as the records
  // of the files left from before the restart.
  planc::BillingCounters counts;
  uint64_t processed = 0;
  for (const PendingFile& f : pending)
    if (auto r = f.spool->read(f.seq); r.ok())
      counts.backlog_records += r.value().records.size() + r.value().damaged.size();
  auto next_store = Clock::now();
  auto next_metrics = Clock::now();
  // Bills stored whose hours are not in the hourly totals yet (at start:
  // perhaps, from before a crash).
  bool rollup_owed = true;
  planc::MutexLock l(g_mu);
  while (!g_stop) {
    // Wakes for the next store attempt (backoff while PostgreSQL is
    // down) and for the metrics, which go on while it is down.
    auto until = std::min(next_store, next_metrics);
    while (!g_stop && !g_reconfigured && g_cv.wait_until(l, until) == std::cv_status::no_timeout) {
    }
    if (g_stop) break;
    std::string conninfo = g_conninfo;
    bool force = g_reconfigured;
    g_reconfigured = false;
    l.unlock();
    // A run that ends from now on is priced with the new file.
    if (auto cfg = planc::slurm::reload_plugin_config(plugin_type, &watch, force)) {
      g_config = cfg;
      g_configs.emplace_back(time(nullptr), cfg);
      if (!spool_dir_logged && cfg->spool_dir != g_spool_setting) {
        info("%s: SpoolDir changed in planc.conf; the spool stays in %s until slurmctld restarts",
             plugin_type, g_spool->dir().c_str());
        spool_dir_logged = true;
      }
    }
    if (force || Clock::now() >= next_store) {
      time_t opened = 0;
      if (uint64_t seq = rotate(&opened)) pending.push_back({g_spool.get(), seq, opened});
      if (!g_config) {
        if (!config_logged)
          error(
              "%s: planc.conf did not load; segments are kept in %s and billed once a valid "
              "planc.conf is in place",
              plugin_type, g_spool->dir().c_str());
        config_logged = true;
      } else if (!pending.empty() || rollup_owed) {
        if (!store || conninfo != store_conninfo) {
          store = std::make_unique<planc::BillStore>(conninfo);
          store_conninfo = conninfo;
        }
        std::string problem;
        while (!pending.empty() && !stopping() &&
               store_file(*store, pending.front(), &problem, &counts, &processed))
          pending.erase(pending.begin());
        // The hours of what was stored go into the hourly totals once the
        // spool is drained, so that a backlog's bills are added up together.
        if (problem.empty() && pending.empty())
          rollup_owed = !roll_up(*store, &problem);
        else
          rollup_owed = true;
        if (problem.empty()) {
          if (backoff.succeeded())
            info("%s: PostgreSQL reachable again; spool drained", plugin_type);
        } else {
          counts.database_errors++;
          bool log = false;
          int wait = backoff.failed(time(nullptr), &log);
          if (log)
            error("%s: %s; %zu spool file(s) kept in %s, retrying every %d s", plugin_type,
                  problem.c_str(), pending.size(), g_spool->dir().c_str(), wait);
        }
      }
      next_store = Clock::now() + std::chrono::seconds(backoff.wait_seconds());
    }
    if (Clock::now() >= next_metrics) {
      write_metrics(counts, processed, pending);
      next_metrics = Clock::now() + kMetricsInterval;
    }
    l.lock();
  }
}

}  // namespace

PLANC_EXPORT int init(void) {
  try {
    g_in_ctld = running_in_slurmctld();
    if (!g_in_ctld) return SLURM_SUCCESS;  // sacct -c: only get_jobs is used
    // A bad planc.conf must not lose bills: keep spooling (in the default
    // place), bill later.
    g_config = planc::slurm::load_plugin_config(plugin_type);
    g_configs.clear();
    if (g_config) g_configs.emplace_back(0, g_config);
    const std::string default_dir =
        std::string(slurm_conf.state_save_location ? slurm_conf.state_save_location : ".") + "/" +
        planc::kSpoolDirName;
    g_spool_setting = g_config ? g_config->spool_dir : "";
    g_metrics_path = planc::snapshot_path(
        slurm_conf.state_save_location ? slurm_conf.state_save_location : ".", "jobcomp");
    g_spool =
        std::make_unique<planc::Spool>(g_spool_setting.empty() ? default_dir : g_spool_setting);
    if (auto r = g_spool->make_dir(); !r.ok()) {
      error("%s: %s; %s", plugin_type, r.error().c_str(),
            g_spool_setting.empty()
                ? "fix StateSaveLocation's permissions"
                : "create it (owned by SlurmUser, mode 700) or fix SpoolDir in planc.conf");
      return SLURM_ERROR;
    }
    auto found = g_spool->pending();
    if (!found.ok()) {
      error("%s: %s", plugin_type, found.error().c_str());
      return SLURM_ERROR;
    }
    std::vector<PendingFile> pending;
    for (uint64_t seq : found.value())
      pending.push_back({g_spool.get(), seq, file_time(*g_spool, seq)});
    const uint64_t first_seq = found.value().empty() ? 1 : found.value().back() + 1;
    g_default_spool.reset();
    if (g_spool->dir() != default_dir) {
      g_default_spool = std::make_unique<planc::Spool>(default_dir);
      auto left = g_default_spool->pending();
      if (left.ok())
        for (uint64_t seq : left.value())
          pending.push_back({g_default_spool.get(), seq, file_time(*g_default_spool, seq)});
    }
    auto file = g_spool->create(first_seq);
    if (!file.ok()) {
      error("%s: %s", plugin_type, file.error().c_str());
      return SLURM_ERROR;
    }
    {
      planc::MutexLock l(g_spool_mu);
      g_appender.replace(std::move(file).value());
      g_seq = first_seq;
      g_opened = time(nullptr);
    }
    if (!pending.empty())
      info("%s: %zu spool file(s) from before the restart will be (re)stored", plugin_type,
           pending.size());
    {
      planc::MutexLock l(g_mu);
      g_stop = false;
    }
    g_worker = planc::start_worker("planc_jobcomp", worker, std::move(pending),
                                   planc::ConfigWatch(planc::slurm::planc_conf_file(), g_config));
    verbose("%s loaded, spool %s", plugin_type, g_spool->dir().c_str());
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: init failed: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

PLANC_EXPORT int fini(void) {
  try {
    {
      planc::MutexLock l(g_mu);
      g_stop = true;
    }
    g_cv.notify_all();
    planc::join_worker(g_worker);
    planc::AppendFile last;
    size_t lost;
    std::string problem;
    {
      planc::MutexLock l(g_spool_mu);
      last = g_appender.release(&lost, &problem);
    }
    if (lost)
      error("%s: %zu segment(s) could not be spooled at shutdown (%s)", plugin_type, lost,
            problem.c_str());
    if (auto r = planc::close_append_file(planc::posix_file_system(), last, true); !r.ok())
      error("%s: %s", plugin_type, r.error().c_str());
  } catch (const std::exception& e) {
    error("%s: fini: %s", plugin_type, e.what());
  }
  g_config.reset();
  g_configs.clear();
  return SLURM_SUCCESS;
}

// Called at start and on every `scontrol reconfigure`.
PLANC_EXPORT int jobcomp_p_set_location(char* location) {
  {
    planc::MutexLock l(g_mu);
    g_conninfo = location ? location : "";
    g_reconfigured = true;
  }
  g_cv.notify_one();
  return SLURM_SUCCESS;
}

PLANC_EXPORT int jobcomp_p_log_record(job_record_t* job) {
  try {
    if (!g_in_ctld || !job) return SLURM_SUCCESS;
    // First preempt/planc: a run that ended during its grace may become
    // PREEMPTED (or COMPLETED) here, before it is billed and before Slurm's
    // accounting record, which follows this callback.
    if ((!g_run_end || !g_market_run_end) && time(nullptr) - g_run_end_lookup_at >= 10) {
      g_run_end_lookup_at = time(nullptr);
      g_run_end = reinterpret_cast<planc_preempt_run_end_fn>(
          planc::find_plugin_symbol(PLANC_PREEMPT_OBJECT, PLANC_PREEMPT_RUN_END_SYMBOL));
      g_market_run_end = planc::find_market_run_end();
    }
    const int run_end = g_run_end ? g_run_end(job) : 0;
    if (run_end & kRunEndDuplicate) return SLURM_SUCCESS;  // already billed
    Segment seg = planc::slurm::segment_of(job);
    seg.preempted = run_end & kRunEndPreempted;
    // Then the market: the run is billed at what its life says now (seg
    // holds its AdminComment); a requeue makes it bid again, held at once.
    if (g_market_run_end) g_market_run_end(job);
    auto size = g_size_start.find(job->job_id);
    if (IS_JOB_RESIZING(job)) {
      seg.start_time = size != g_size_start.end() ? size->second : job->start_time;
      g_size_start[job->job_id] = job->resize_time;
    } else if (size != g_size_start.end()) {
      g_size_start.erase(size);
    }
    std::string line = planc::serialize_segment(seg);
    planc::MutexLock l(g_spool_mu);
    auto r = g_appender.append(std::move(line));
    RunCount& runs = g_runs_by_qos[seg.qos];
    runs.segments++;
    runs.seconds += static_cast<uint64_t>(std::max<int64_t>(0, seg.end_time - seg.start_time));
    g_appended++;
    // Disk full or the like: kept in memory; the worker retries (and logs).
    if (!r.ok() && g_appender.waiting() == 1)
      error("%s: %pJ not in the spool yet (%s); kept in memory until it can be written",
            plugin_type, job, r.error().c_str());
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: %pJ not recorded: %s", plugin_type, job, e.what());
    return SLURM_ERROR;
  }
}

PLANC_EXPORT List jobcomp_p_get_jobs(slurmdb_job_cond_t* job_cond) {
  try {
    std::string conninfo;
    {
      planc::MutexLock l(g_mu);
      conninfo = g_conninfo;
    }
    return planc::jobcomp::sacct_jobs(conninfo, job_cond);
  } catch (const std::exception& e) {
    error("%s: get_jobs: %s", plugin_type, e.what());
    return nullptr;
  }
}
