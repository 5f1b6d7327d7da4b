// slurmctld/planc: Plan C's periodic work inside slurmctld
// (SlurmctldPlugstack=planc).
//
//   starvation upgrade  every StarvationInterval, P3 jobs that have waited
//                       longer than StarvationThreshold for the cluster get
//                       one free attempt as P2 (common/starvation.h); the
//                       attempt is marked in AdminComment
//                       (common/job_marks.h) and undone when it ends by
//                       requeue;
//   daily spot cap      every few seconds, the running spot jobs' card-seconds
//                       per account and tier (common/spot_cap.h), kept in
//                       StateSaveLocation/planc_spot_state; job_submit/planc
//                       asks for them through planc_spot_used_v1() and
//                       counts its refusals through planc_spot_refused_v1().
//   run-start journal   every run slurmctld starts is appended, as it
//                       starts, to StateSaveLocation/planc_starts/
//                       (common/run_journal.h) from the job-begin hook:
//                       one write(2) under slurmctld's locks, like
//                       jobcomp/planc's spool.  The worker starts a new
//                       file each UTC day (fsyncing the old one) and
//                       removes files past kJournalKeepDays.
//   market records      each P2 market round (common/market_record.h) is
//                       written to StateSaveLocation/planc_market/ right
//                       after its clearing; a second thread, the recorder,
//                       stores the files in PostgreSQL (planc.market_round,
//                       planc.market_bid: sql/0006) and removes them.
//   metrics snapshot    after each spot sample, the pool's GPUs and jobs
//                       per tier, idle-threshold crossings, starvation and
//                       reload counters, for planc-exporter
//                       (StateSaveLocation/planc_metrics_slurmctld).
//
// Capacity infusion (ctld_infusion.cc) sizes the serving pools, and the
// market (ctld_market.cc) clears the P2 bids each round.
//
// One worker thread.  It never holds a slurmctld lock across I/O: a scan
// takes the job read lock, collects the facts and releases it; each change
// is then made through slurmctld's own update_job() under the write locks an
// update RPC takes (as slurmctld/nonstop does), one job per lock hold.
// The state file is written outside every lock.
//
// The state all of this shares is one object, plugins/ctld_state.h.
#include "plugins/slurm_compat.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "common/job_marks.h"
#include "common/market_store.h"
#include "common/preempt_policy.h"  // format_utc
#include "common/run_journal.h"
#include "common/spool.h"  // RetryBackoff
#include "common/spot_cap.h"
#include "common/starvation.h"
#include "common/state_file.h"
#include "plugins/ctld_state.h"
#include "plugins/planc_shared.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] =
    "Plan C controller: starvation upgrade, daily spot cap, run-start journal";
PLANC_EXPORT const char plugin_type[] = "slurmctld/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

using planc::TierId;
using planc::ctld::Controller;

constexpr const char* kStateFile = "planc_spot_state";
// How often running spot jobs are sampled.  Between samples job_submit's
// view is extrapolated exactly; only a job that ends is counted to the
// last sample when Slurm forgets its end time (requeue).
constexpr int kSpotSampleSeconds = 5;

// The controller (plugins/ctld_state.h): made by the first init(), never
// freed.
std::atomic<Controller*> g_ctl{nullptr};

}  // namespace

namespace planc::ctld {

Controller* controller() { return g_ctl.load(std::memory_order_acquire); }

namespace {

// A changed planc.conf applies from the next sample and scan on.  The spot
// day (SpotCapResetTime, SpotCapTimeZone, SpotCapDayLength) is the one
// the counters were started with until slurmctld restarts.
// Returns true when a new planc.conf is in force.
bool reload(Controller& c, planc::ConfigWatch* watch) {
  auto cfg = planc::slurm::reload_plugin_config(plugin_type, watch);
  if (!cfg) return false;
  c.tiers = std::make_unique<planc::QosTierCache>(cfg->tiers);
  c.config = cfg;
  planc::MutexLock l(c.shown_mu);
  c.shown = cfg;
  return true;
}

void worker(Controller* cp, planc::ConfigWatch watch) {
  Controller& c = *cp;
  using Clock = std::chrono::steady_clock;
  auto next_scan = Clock::now() + std::chrono::seconds(c.config->starvation_interval_seconds);
  auto next_sample = Clock::now();
  int gpu_pos = -1;
  std::string written;
  bool hook_warned = false;
  bool reloaded_since_sample = false;
  planc::IdleCrossings idle;
  planc::MutexLock l(c.mu);
  while (!c.stop) {
    while (!c.stop &&
           c.cv.wait_until(l, std::min(next_scan, next_sample)) == std::cv_status::no_timeout) {
    }
    if (c.stop) break;
    l.unlock();
    try {
      const bool reloaded = reload(c, &watch);
      // A reload between two samples is the next sample's news: the
      // market and infusion act on settings only at a sample (the
      // market's floors and the controller's limits were left as they
      // were when planc.conf changed between samples).
      reloaded_since_sample = reloaded_since_sample || reloaded;
      const planc::PlancConfig& cfg = *c.config;
      auto now = Clock::now();
      // A shorter StarvationInterval applies now, not after the old one.
      if (reloaded)
        next_scan =
            std::min(next_scan, now + std::chrono::seconds(cfg.starvation_interval_seconds));
      if (now >= next_sample) {
        next_sample = now + std::chrono::seconds(kSpotSampleSeconds);
        journal_tick(c, &hook_warned);
        planc::PoolUsage pool;
        planc::slurm::InfusionJobs infusion_jobs;
        std::string text = spot_sample(c, &gpu_pos, written, &pool, &infusion_jobs);
        if (pool.pool_gpus)
          idle.observe(1.0 - static_cast<double>(pool.allocated_total()) /
                                 static_cast<double>(pool.pool_gpus));
        infusion_tick(c, cfg, pool, infusion_jobs, reloaded_since_sample);
        market_tick(c, cfg, pool, reloaded_since_sample, gpu_pos);
        reloaded_since_sample = false;
        write_metrics(c, pool, idle, watch);
        if (!text.empty()) {
          if (auto err = planc::write_file_atomically(c.state_path, text))
            error("%s: %s", plugin_type, err->c_str());
          else
            written = std::move(text);
        }
      }
      if (now >= next_scan) {
        next_scan = now + std::chrono::seconds(cfg.starvation_interval_seconds);
        starvation_scan(c);
      }
    } catch (const std::exception& e) {
      error("%s: worker: %s", plugin_type, e.what());
    }
    l.lock();
  }
}

}  // namespace
}  // namespace planc::ctld

// --- ctld_starvation ------------------------------------------------------
// starvation upgrade and daily spot cap
// (plugins/ctld_state.h), both the worker's:
//   starvation upgrade  every StarvationInterval, P3 jobs that have waited
//                       longer than StarvationThreshold for the cluster get
//                       one free attempt as P2 (common/starvation.h); the
//                       attempt is marked in AdminComment
//                       (common/job_marks.h) and undone when it ends by
//                       requeue;
//   daily spot cap      every few seconds, the running spot jobs' card-seconds
//                       per account and tier (common/spot_cap.h), kept in
//                       StateSaveLocation/planc_spot_state; job_submit/planc
//                       asks for them through planc_spot_used_v1() and
//                       counts its refusals through planc_spot_refused_v1().
// A scan takes the job read lock, collects the facts and releases it; each
// change is then made through slurmctld's own update_job() under the write
// locks an update RPC takes (as slurmctld/nonstop does), one job per lock
// hold.
namespace planc::ctld {
namespace {

using planc::TierId;

slurmctld_lock_t job_read_lock() { return {.job = READ_LOCK}; }

std::string comment_after_upgrade(const Controller& c, uint32_t job_id, const planc::Upgrade& u,
                                  time_t now) {
  std::string mark = planc::free_attempt_mark(*c.config, u.from, u.to, now, u.waited_seconds,
                                              planc::reason_name(u.reason));
  return planc::add_free_attempt_mark(planc::slurm::admin_comment(job_id), mark);
}

// One job per lock hold; the facts are read again under the write lock, so
// a job that started, was held or changed tier since the scan is skipped.
bool upgrade(Controller& c, const planc::Upgrade& planned) {
  const planc::PlancConfig& cfg = *c.config;
  slurmctld_lock_t locks = planc::slurm::job_update_locks();
  lock_slurmctld(locks);
  time_t now = time(nullptr);
  auto job = planc::slurm::pending_job(*c.tiers, planned.job_id);
  int rc = SLURM_SUCCESS;
  bool done = false;
  planc::Upgrade u = planned;
  if (job && planc::is_starving(cfg, *job, now)) {
    u.waited_seconds = static_cast<uint32_t>(now - job->eligible_since);
    u.reason = job->reason;
    std::string comment = comment_after_upgrade(c, u.job_id, u, now);
    rc = planc::slurm::update_job_as_slurm_user(u.job_id, cfg.tiers.tier(u.to).qos.c_str(),
                                                comment.c_str());
    done = rc == SLURM_SUCCESS;
  }
  unlock_slurmctld(locks);
  const char* from = cfg.tiers.tier(u.from).label.c_str();
  const char* to = cfg.tiers.tier(u.to).label.c_str();
  if (done)
    info("%s: JobId=%u upgraded from %s to %s (free attempt) after waiting %u s for %s",
         plugin_type, u.job_id, from, to, u.waited_seconds,
         std::string(planc::reason_name(u.reason)).c_str());
  else if (rc != SLURM_SUCCESS)
    error("%s: JobId=%u: upgrade to %s failed: %s (tried again next interval)", plugin_type,
          u.job_id, to, slurm_strerror(rc));
  return done;
}

// A marked pending job whose attempt is over (requeued) goes back to the
// tier it came from; one moved to another tier by someone loses the mark.
bool settle_mark(Controller& c, uint32_t job_id) {
  const planc::PlancConfig& cfg = *c.config;
  slurmctld_lock_t locks = planc::slurm::job_update_locks();
  lock_slurmctld(locks);
  auto job = planc::slurm::marked_job(*c.tiers, job_id);
  planc::MarkAction action = job ? planc::decide_marked(*job) : planc::MarkAction::kKeep;
  const TierId from = job ? job->from : TierId::kP3, to = job ? job->to : TierId::kP2;
  int rc = SLURM_SUCCESS;
  if (action != planc::MarkAction::kKeep) {
    std::string comment = planc::remove_free_attempt_mark(planc::slurm::admin_comment(job_id));
    const char* qos =
        action == planc::MarkAction::kBack ? cfg.tiers.tier(from).qos.c_str() : nullptr;
    rc = planc::slurm::update_job_as_slurm_user(job_id, qos, comment.c_str());
  }
  unlock_slurmctld(locks);
  if (action == planc::MarkAction::kKeep) return false;
  if (rc != SLURM_SUCCESS) {
    error("%s: JobId=%u: ending its free attempt failed: %s (tried again next interval)",
          plugin_type, job_id, slurm_strerror(rc));
    return false;
  }
  if (action == planc::MarkAction::kBack)
    info("%s: JobId=%u: free %s attempt ended by requeue; back in %s, waiting time restarts",
         plugin_type, job_id, cfg.tiers.tier(to).label.c_str(), cfg.tiers.tier(from).label.c_str());
  else
    info("%s: JobId=%u left %s during its free attempt; free-attempt mark removed", plugin_type,
         job_id, cfg.tiers.tier(to).label.c_str());
  return true;
}

}  // namespace

void starvation_scan(Controller& c) {
  const planc::PlancConfig& cfg = *c.config;
  std::vector<planc::PendingJob> starvable;
  std::vector<planc::MarkedJob> marked;
  std::vector<uint32_t> watch;
  // Timed from holding the lock (not waiting for it): the scan's cost to
  // the rest of slurmctld.
  slurmctld_lock_t read = job_read_lock();
  lock_slurmctld(read);
  auto t0 = std::chrono::steady_clock::now();
  size_t seen = planc::slurm::collect_pending(*c.tiers, &starvable, &marked, &watch);
  unlock_slurmctld(read);
  c.watch.rescanned(std::move(watch));
  std::vector<planc::Upgrade> todo = planc::select_upgrades(cfg, starvable, time(nullptr));
  uint64_t usec = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  c.stats.scans++;
  c.stats.total_scan_usec += usec;
  c.stats.last_scan_usec = usec;
  c.stats.last_scan_jobs = seen;
  if (usec > c.stats.max_scan_usec) c.stats.max_scan_usec = usec;
  debug("%s: scan of %zu pending jobs (%zu may starve, %zu marked) took %lu us; %zu to upgrade",
        plugin_type, seen, starvable.size(), marked.size(), static_cast<unsigned long>(usec),
        todo.size());

  bool changed = false;
  for (const planc::MarkedJob& m : marked)
    if (planc::decide_marked(m) != planc::MarkAction::kKeep && settle_mark(c, m.job_id)) {
      changed = true;
      c.stats.reverts++;
    }
  for (const planc::Upgrade& u : todo)
    if (upgrade(c, u)) {
      changed = true;
      c.stats.upgrades++;
    }
  if (changed) {
    schedule_job_save();  // both only signal other threads
    queue_job_scheduler();
  }
}

std::unique_ptr<planc::SpotLedger> load_spot_state(const Controller& c,
                                                   const planc::PlancConfig& cfg) {
  auto rule = planc::SpotDayRule::of(cfg);
  auto loaded = planc::load_state_file<planc::SpotLedger>(
      c.state_path, time(nullptr),
      [&](const std::string& text) { return planc::SpotLedger::parse(text, rule); },
      [&] { return planc::SpotLedger(rule); }, "today's spot use restarts from zero");
  if (!loaded.problem.empty())
    error("%s: %s", plugin_type, loaded.problem.c_str());
  else if (loaded.value.as_of())
    info("%s: spot use restored from %s (as of %s)", plugin_type, c.state_path.c_str(),
         planc::format_utc(loaded.value.as_of()).c_str());
  return std::make_unique<planc::SpotLedger>(std::move(loaded.value));
}

void publish_usage(Controller& c) {
  auto u = std::make_shared<const planc::SpotUsage>(c.ledger->usage());
  planc::MutexLock l(c.usage_mu);
  c.usage = std::move(u);
}

std::string spot_sample(Controller& c, int* gpu_pos, const std::string& last_written,
                        planc::PoolUsage* pool, planc::slurm::InfusionJobs* infusion) {
  if (*gpu_pos < 0) *gpu_pos = planc::slurm::gpu_tres_position();
  std::vector<uint32_t> tracked = c.ledger->tracked_ids();
  const bool hook_ours = journal_hook_ours();
  planc::slurm::JobSample sample;
  slurmctld_lock_t read = {.job = READ_LOCK, .node = READ_LOCK, .fed = READ_LOCK};
  const auto t0 = std::chrono::steady_clock::now();
  lock_slurmctld(read);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<uint32_t> started;
  {
    planc::MutexLock l(c.started_mu);
    started.swap(c.started);
    if (c.started_lost) c.watch.lost_starts();
    c.started_lost = false;
  }
  const planc::slurm::JobIdSpace ids = planc::slurm::job_id_space();
  const planc::JobWatch::Plan plan = c.watch.plan(started, ids.next, ids.first, ids.max, hook_ours);
  planc::slurm::sample_jobs(*c.tiers, *gpu_pos, tracked, plan, c.replica_ids, &sample);
  unlock_slurmctld(read);
  using std::chrono::duration_cast, std::chrono::microseconds;
  const uint64_t usec = duration_cast<microseconds>(std::chrono::steady_clock::now() - t1).count();
  c.watch.sampled(std::move(sample.watch), ids.next);
  c.stats.samples++;
  c.stats.sample_visited += sample.visited;
  if (sample.walked) c.stats.sample_walks++;
  c.stats.watched = c.watch.size();
  c.stats.sample_lock_wait_usec += duration_cast<microseconds>(t1 - t0).count();
  c.stats.sample_lock_usec += usec;
  if (usec > c.stats.sample_max_lock_usec.load()) c.stats.sample_max_lock_usec = usec;
  *pool = sample.pool;
  *infusion = std::move(sample.infusion);
  c.sla.observe(c.config->sla_start_seconds, sample.guaranteed_running, sample.guaranteed_held,
                sample.guaranteed_pending);
  c.ledger->sample(time(nullptr), sample.spot_running, sample.spot_ended);
  publish_usage(c);
  std::string text = c.ledger->serialize();
  return text == last_written ? std::string() : text;
}

}  // namespace planc::ctld

// --- ctld_journal ---------------------------------------------------------
// run-start journal (plugins/ctld_state.h): every run
// slurmctld starts is appended, as it starts, to
// StateSaveLocation/planc_starts/ (common/run_journal.h) from the job-begin
// hook: one write(2) under slurmctld's locks, like jobcomp/planc's spool.
// The worker starts a new file each UTC day (fsyncing the old one) and
// removes files past kJournalKeepDays.  The hook also queues the started
// job's id for the next sample (c.started).
namespace planc::ctld {
namespace {

// Lines whose write(2) failed (disk full) wait here, in order, at most this
// many; the worker retries them.
constexpr size_t kJournalMaxUnwritten = 100000;
constexpr uint64_t kJournalSlowUsec = 1000;  // counted in RunJournalOver1ms

planc::Result<planc::AppendFile> open_journal(const Controller& c, const std::string& name) {
  return planc::open_append_file(planc::posix_file_system(), c.journal_dir + "/" + name);
}

// slurmctld's job-begin hook (job and node write locks held): one record,
// one write(2) under c.journal_mu, nothing else.
void on_job_begin(job_record_t* job) {
  Controller& c = *controller();  // made before the hook was set, never freed
  if (c.prev_job_begin) c.prev_job_begin(job);
  try {
    {
      planc::MutexLock l(c.started_mu);
      if (c.started.size() < kMaxStarted)
        c.started.push_back(job->job_id);
      else
        c.started_lost = true;
    }
    auto t0 = std::chrono::steady_clock::now();
    planc::Segment begun = planc::slurm::segment_of(job);
    begun.end_time = 0;  // not ended: segment_of reads the expected end
    std::string line = planc::serialize_segment(begun);
    bool first_failure = false, dropped = false;
    std::string problem;
    {
      planc::MutexLock l(c.journal_mu);
      dropped = c.journal.waiting() >= kJournalMaxUnwritten;
      if (!dropped) {
        auto r = c.journal.append(std::move(line));
        first_failure = !r.ok() && c.journal.waiting() == 1;
        if (first_failure) problem = r.error();
      }
    }
    if (first_failure)
      error(
          "%s: cannot append the start of %pJ to the run-start journal in %s (%s); kept in "
          "memory until it can",
          plugin_type, job, c.journal_dir.c_str(), problem.c_str());
    if (dropped) c.stats.journal_dropped++;
    uint64_t usec = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    c.stats.journal_records++;
    c.stats.journal_total_usec += usec;
    if (usec > c.stats.journal_max_usec) c.stats.journal_max_usec = usec;
    if (usec > kJournalSlowUsec) c.stats.journal_slow++;
  } catch (const std::exception& e) {
    error("%s: start of %pJ not journaled: %s", plugin_type, job, e.what());
  }
}

void prune_journal(const Controller& c, time_t now) {
  DIR* d = opendir(c.journal_dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d))
    if (planc::journal_file_expired(e->d_name, now) &&
        unlink((c.journal_dir + "/" + e->d_name).c_str()) != 0)
      error("%s: cannot remove %s/%s: %m", plugin_type, c.journal_dir.c_str(), e->d_name);
  closedir(d);
}

}  // namespace

bool journal_hook_ours() { return planc_job_begin_hook() == on_job_begin; }

// Worker: a new file at the UTC day's change, retried lines, fsync.
void journal_tick(Controller& c, bool* hook_warned) {
  if (c.journal_dir.empty()) return;
  if (planc_job_begin_hook() != on_job_begin && !*hook_warned) {
    error(
        "%s: another plugin replaced the job-begin hook; run starts are no longer journaled "
        "(list planc after nonstop in SlurmctldPlugstack)",
        plugin_type);
    *hook_warned = true;
  }
  time_t now = time(nullptr);
  const std::string want = c.journal_dir + "/" + planc::journal_file_name(now);
  bool change;
  {
    planc::MutexLock l(c.journal_mu);
    change = want != c.journal.file().path || !c.journal.file().is_open();
  }
  planc::AppendFile next;
  if (change) {
    // Outside the lock: may touch the disk.
    auto r = open_journal(c, planc::journal_file_name(now));
    if (r.ok())
      next = std::move(r).value();
    else
      error("%s: %s; run starts stay in the current file", plugin_type, r.error().c_str());
  }
  planc::AppendFile old;
  size_t left;
  std::string problem;
  {
    planc::MutexLock l(c.journal_mu);
    if (next.is_open()) old = c.journal.replace(std::move(next));
    if (auto r = c.journal.flush_waiting(); !r.ok()) problem = r.error();
    left = c.journal.waiting();
  }
  if (left)
    error("%s: %zu run start(s) still not in the journal (%s); retrying", plugin_type, left,
          problem.c_str());
  // The file being appended to is never fsynced: an append waiting behind
  // an fsync of its own file would wait under slurmctld's locks.  Its
  // records survive a SIGKILL of slurmctld in the page cache and reach the
  // disk with the kernel's writeback (about 30 s); a closed day's file is
  // fsynced here.
  if (old.is_open()) {
    if (auto r = planc::close_append_file(planc::posix_file_system(), old, true); !r.ok())
      error("%s: %s", plugin_type, r.error().c_str());
    prune_journal(c, now);
  }
}

// init(): the directory, today's file, the hook.  A journal that cannot be
// set up is logged and left off; the rest of the plugin works.
void start_journal(Controller& c) {
  std::string dir = planc::slurm::state_file_path(planc::kJournalDir);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error(
        "%s: cannot create %s: %m; run starts are NOT journaled, so a controller crash can "
        "hide runs (fix StateSaveLocation's permissions and restart slurmctld)",
        plugin_type, dir.c_str());
    return;
  }
  c.journal_dir = dir;
  auto file = open_journal(c, planc::journal_file_name(time(nullptr)));
  if (!file.ok())
    error("%s: %s; run starts kept in memory until it can", plugin_type, file.error().c_str());
  {
    planc::MutexLock l(c.journal_mu);
    if (file.ok()) c.journal.replace(std::move(file).value());
  }
  prune_journal(c, time(nullptr));
  c.prev_job_begin = planc_set_job_begin_hook(on_job_begin);
}

void stop_journal(Controller& c) {
  if (planc_job_begin_hook() == on_job_begin) planc_set_job_begin_hook(c.prev_job_begin);
  planc::AppendFile last;
  size_t lost;
  std::string problem;
  {
    planc::MutexLock l(c.journal_mu);
    last = c.journal.release(&lost, &problem);
  }
  if (lost)
    error("%s: %zu run start(s) could not be journaled at shutdown (%s)", plugin_type, lost,
          problem.c_str());
  if (auto r = planc::close_append_file(planc::posix_file_system(), last, true); !r.ok())
    error("%s: %s", plugin_type, r.error().c_str());
}

}  // namespace planc::ctld

// --- ctld_market ----------------------------------------------------------
// P2 market (plugins/ctld_state.h): the floors, set by
// the floor keeper (common/market.h) from the pool each sample, and each
// round's clearing.  The worker's, except market_floors().
namespace planc::ctld {
namespace {

using planc::TierId;

// A round's clearing (common/market.h): the P2 jobs held for the market bid
// for the GPUs that neither guaranteed nor P2 jobs hold (nor winners of
// earlier rounds that have not started), one market per GPU type
// (clear_markets); winners are released, every bidder's AdminComment says
// what happened and when the next round is.  Reads under the job read
// lock, then one short update per job, as the starvation scan does.
void clear_round(Controller& c, const planc::PlancConfig& cfg, const planc::MarketFloors& floors,
                 const planc::PoolUsage& pool, int gpu_pos) EXCLUDES(c.floors_mu, c.rec_mu) {
  using Clock = std::chrono::steady_clock;
  auto usec_since = [](Clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
  };
  const auto t_start = Clock::now();
  std::vector<planc::slurm::MarketJob> jobs;
  {
    slurmctld_lock_t read = {.job = READ_LOCK};
    lock_slurmctld(read);
    const auto t = Clock::now();
    jobs = planc::slurm::market_jobs(*c.tiers, gpu_pos);
    c.stats.round_read_usec = usec_since(t);
    unlock_slurmctld(read);
  }
  const auto t_clear = Clock::now();
  planc::MarketOffer offer;
  offer.total = static_cast<int64_t>(pool.pool_gpus);
  for (TierId t : {TierId::kP0, TierId::kP1, TierId::kP2})
    offer.total -= static_cast<int64_t>(pool.allocated_gpus[planc::tier_index(t)]);
  for (const auto& [type, gpus] : pool.typed_gpus) {
    auto held = pool.typed_held.find(type);
    offer.by_type[type] = static_cast<int64_t>(gpus) -
                          static_cast<int64_t>(held != pool.typed_held.end() ? held->second : 0);
  }
  std::vector<planc::MarketBid> bids;
  std::vector<const planc::slurm::MarketJob*> bidder;  // bids[i] is bidder[i]'s
  bids.reserve(jobs.size());
  bidder.reserve(jobs.size());
  for (const auto& j : jobs) {
    if (!j.bidding) {  // matched, or a locked booking whose time has come: set aside
      offer.total -= j.gpus;
      if (auto it = offer.by_type.find(j.gpu_type); it != offer.by_type.end()) it->second -= j.gpus;
      continue;
    }
    bids.push_back({j.job_id, j.gpus, j.bid, std::nullopt, j.submitted, j.gpu_type});
    bidder.push_back(&j);
  }
  std::vector<planc::TypedRound> rounds = planc::clear_markets(bids, offer, floors, cfg.prices);
  c.stats.market_rounds++;
  c.stats.round_clear_usec = usec_since(t_clear);
  if (!c.market_dir.empty()) {
    // Names slurmctld had not filled in, resolved here outside the locks,
    // once per uid: a round's thousands of bids come from a few users.
    std::map<uint32_t, std::string> names;
    auto owner = [&](const planc::slurm::MarketJob* j) {
      if (!j->user.empty()) return std::make_pair(j->user, j->account);
      auto [it, added] = names.try_emplace(j->uid);
      if (added) it->second = planc::slurm::user_name(j->uid);
      return std::make_pair(it->second, j->account);
    };
    for (const planc::TypedRound& t : rounds) {
      // The record's bids are this market's, in its results' order.
      std::vector<planc::MarketBid> own;
      std::vector<std::pair<std::string, std::string>> owners;
      planc::MarketRound r = t.round;
      own.reserve(r.results.size());
      owners.reserve(r.results.size());
      for (planc::BidResult& b : r.results) {
        own.push_back(bids[b.index]);
        owners.push_back(owner(bidder[b.index]));
        b.index = static_cast<uint32_t>(own.size() - 1);
      }
      planc::MarketRoundRecord rec =
          planc::make_round_record(floors.at, floors.vacancy, own, owners, r);
      rec.gpu_type = t.gpu_type;
      record_round(c, rec);
    }
  }
  c.stats.round_bids = bids.size();
  uint64_t update_usec = 0;
  uint32_t won = 0, results = 0;
  std::string summary;
  for (const planc::TypedRound& t : rounds) {
    const planc::MarketRound& r = t.round;
    uint32_t won_here = 0;
    // Losers' marks by (bid, outcome): thousands of bids share a handful.
    std::map<std::pair<planc::Micros, planc::BidOutcome>, std::string> loser_marks;
    for (const planc::BidResult& b : r.results) {
      const planc::slurm::MarketJob* j = bidder[b.index];
      const bool win = b.outcome == planc::BidOutcome::kWon;
      std::string mark;
      if (win) {
        mark = planc::market_mark_result(b, j->bid, r, cfg.prices.currency, floors.at,
                                         cfg.market.interval_seconds);
      } else {
        std::string& m = loser_marks[{j->bid.value_or(-1), b.outcome}];
        if (m.empty())
          m = planc::market_mark_result(b, j->bid, r, cfg.prices.currency, floors.at,
                                        cfg.market.interval_seconds);
        if (j->admin_held && j->admin_comment == m) continue;  // nothing new to say (the usual)
        mark = m;
      }
      std::string comment = planc::with_market_mark(j->admin_comment, mark);
      // A winner is released; a bidder that did not win is held (an
      // administrator's hold: job_submit/planc's looks like its owner's to
      // Slurm, so an owner could release it before its first round) and its
      // mark updated, only when either changes: a bid that loses again the
      // same way costs the round nothing.
      if (!win && j->admin_held && comment == j->admin_comment) continue;  // nothing new to say
      slurmctld_lock_t locks = planc::slurm::job_update_locks();
      lock_slurmctld(locks);
      const auto tu = Clock::now();
      int rc = win ? planc::slurm::release_job_as_slurm_user(b.job_id, comment.c_str())
                   : planc::slurm::hold_job_as_slurm_user(b.job_id, comment.c_str());
      update_usec += usec_since(tu);
      unlock_slurmctld(locks);
      c.stats.market_updates++;
      if (rc != SLURM_SUCCESS)
        error("%s: market: JobId=%u: %s failed: %s (the next round tries again)", plugin_type,
              b.job_id, win ? "release" : "hold", slurm_strerror(rc));
      else if (win)
        won_here++;
    }
    won += won_here;
    results += static_cast<uint32_t>(r.results.size());
    if (r.results.empty()) continue;
    const std::string type = rounds.size() > 1 ? t.gpu_type + " " : std::string();
    info("%s: market round: %s%zu bid(s) for %u GPU(s), %u matched at %s %s/card-hour (floor %s)",
         plugin_type, type.c_str(), r.results.size(), r.capacity, won_here,
         planc::format_micros(r.clearing).c_str(), cfg.prices.currency.c_str(),
         planc::format_micros(r.floor).c_str());
    if (!summary.empty()) summary += "; ";
    summary += type + planc::format_micros(r.clearing) + " " + cfg.prices.currency +
               "/card-hour at " + planc::format_utc(floors.at) + ", " + std::to_string(won_here) +
               " of " + std::to_string(r.results.size()) + " bid(s) matched";
  }
  c.stats.market_matched += won;
  c.stats.round_update_usec = update_usec;
  c.stats.round_total_usec = usec_since(t_start);
  if (results) {
    planc::MutexLock l(c.floors_mu);
    c.last_clearing = std::move(summary);
  }
  if (won) queue_job_scheduler();
}

}  // namespace

std::shared_ptr<const planc::MarketFloors> market_floors(Controller& c) {
  planc::MutexLock l(c.floors_mu);
  return c.floors;
}

// Each sample: the keeper sees the pool; a round (or the market opening,
// closing or its settings changing on reload) publishes the floors, and a
// round clears the bids.
void market_tick(Controller& c, const planc::PlancConfig& cfg, const planc::PoolUsage& pool,
                 bool reloaded, int gpu_pos) {
  const time_t now = time(nullptr);
  if (!cfg.market.enabled) {
    if (c.floor_keeper) {
      c.floor_keeper.reset();
      planc::MutexLock l(c.floors_mu);
      c.floors.reset();
      info("%s: the P2 market is closed (Market=no)", plugin_type);
    }
    return;
  }
  bool changed = false;
  if (!c.floor_keeper || reloaded) {
    if (!c.floor_keeper)
      info("%s: the P2 market is open: a round every %u s", plugin_type,
           cfg.market.interval_seconds);
    c.floor_keeper = std::make_unique<planc::FloorKeeper>(now, cfg);
    changed = true;
  }
  const uint32_t used = pool.allocated_total();
  if (pool.pool_gpus &&
      c.floor_keeper->sample(now, pool.pool_gpus > used ? pool.pool_gpus - used : 0, pool.pool_gpus,
                             cfg)) {
    const planc::MarketFloors& f = c.floor_keeper->floors();
    info("%s: market round: vacancy %s over the interval, floor %s %s per card-hour", plugin_type,
         f.vacancy ? planc::permille_text(*f.vacancy).c_str() : "unknown",
         planc::format_micros(f.default_floor).c_str(), cfg.prices.currency.c_str());
    changed = true;
    clear_round(c, cfg, f, pool, gpu_pos);
  }
  if (!changed) return;
  auto copy = std::make_shared<const planc::MarketFloors>(c.floor_keeper->floors());
  planc::MutexLock l(c.floors_mu);
  c.floors = std::move(copy);
}

}  // namespace planc::ctld

// --- ctld_market_recorder -------------------------------------------------
// round records (plugins/ctld_state.h).  A round's record
// is a file in StateSaveLocation/planc_market/, written with fsync by the
// worker right after the clearing; the recorder thread stores the files in
// PostgreSQL (common/market_store.h), oldest first, and removes each once
// stored.  PostgreSQL down: the files wait and are retried with backoff.  A
// file that does not parse, or that the database refuses, is renamed
// *.rejected and logged once, never retried in a loop.  Rounds are recorded
// only where the bills are (JobCompType=jobcomp/planc, whose JobCompLoc the
// recorder connects with, as slurmctld's writer role).
namespace planc::ctld {
namespace {

constexpr const char* kMarketDir = "planc_market";

// The round files waiting, oldest first (the name holds the round's time).
std::vector<std::string> round_files(const Controller& c) {
  std::vector<std::pair<int64_t, std::string>> found;
  if (DIR* d = opendir(c.market_dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      std::string_view n = e->d_name;
      if (n.size() < 11 || n.substr(0, 6) != "round-" || n.substr(n.size() - 4) != ".rec") continue;
      found.emplace_back(std::strtoll(e->d_name + 6, nullptr, 10), std::string(n));
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

void reject_round_file(Controller& c, const std::string& path, const std::string& why) {
  c.stats.rounds_rejected++;
  const std::string aside = path + ".rejected";
  if (rename(path.c_str(), aside.c_str()) != 0)
    error("%s: market: %s: %s; and it cannot be moved aside: %m", plugin_type, path.c_str(),
          why.c_str());
  else
    error("%s: market: %s: %s; kept as %s, not stored", plugin_type, path.c_str(), why.c_str(),
          aside.c_str());
}

// Stores what waits.  Returns the seconds until the next look.
int drain_rounds(Controller& c, std::unique_ptr<planc::BillStore>& store,
                 planc::RetryBackoff& backoff) {
  std::vector<std::string> files = round_files(c);
  c.stats.rounds_waiting = files.size();
  for (const std::string& name : files) {
    const std::string path = c.market_dir + "/" + name;
    auto text = planc::read_state_file(path);
    if (!text.ok()) {
      if (text.code() == planc::ErrorCode::kNotFound) continue;
      reject_round_file(c, path, text.error());
      continue;
    }
    auto rec = planc::parse_round(text.value());
    if (!rec.ok()) {
      reject_round_file(c, path, "damaged record: " + rec.error());
      continue;
    }
    if (!store) store = std::make_unique<planc::BillStore>(c.market_conninfo);
    auto stored = planc::store_market_round(*store, c.cluster, rec.value());
    if (!stored.ok()) {
      // Unreachable (kRetryable), or a schema or privilege the admin must
      // fix (kInvalid: migration 0006 not applied, the role not a writer):
      // the files wait, as jobcomp/planc's spool does for bills.
      if (stored.code() == planc::ErrorCode::kRetryable ||
          stored.code() == planc::ErrorCode::kInvalid) {
        bool log = false;
        int wait = backoff.failed(time(nullptr), &log);
        if (log)
          error("%s: market: %s; %zu round record(s) kept in %s, retrying every %d s%s",
                plugin_type, stored.error().c_str(), c.stats.rounds_waiting.load(),
                c.market_dir.c_str(), wait,
                stored.code() == planc::ErrorCode::kInvalid
                    ? " (apply the migrations with planc-migrate, and make JobCompLoc's role "
                      "the writer with planc-bill sync-roles --writer)"
                    : "");
        store->disconnect();
        return wait;
      }
      reject_round_file(c, path, "PostgreSQL refused it: " + stored.error());
      continue;
    }
    if (backoff.succeeded())
      info("%s: market: PostgreSQL reachable again; round records stored", plugin_type);
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      error("%s: market: stored %s but cannot remove it: %m", plugin_type, path.c_str());
    c.stats.rounds_recorded++;
    if (c.stats.rounds_waiting) c.stats.rounds_waiting--;
  }
  return 60;  // a new round wakes the recorder at once
}

void recorder(Controller* cp) {
  Controller& c = *cp;
  std::unique_ptr<planc::BillStore> store;
  planc::RetryBackoff backoff;
  int wait = 0;
  planc::MutexLock l(c.rec_mu);
  while (!c.rec_stop) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(wait);
    while (!c.rec_stop && !c.rec_wake &&
           c.rec_cv.wait_until(l, until) == std::cv_status::no_timeout) {
    }
    if (c.rec_stop) break;
    c.rec_wake = false;
    l.unlock();
    try {
      wait = drain_rounds(c, store, backoff);
    } catch (const std::exception& e) {
      error("%s: market recorder: %s", plugin_type, e.what());
      wait = 30;
    }
    l.lock();
  }
}

}  // namespace

// The worker, after a clearing: the record on disk, then the recorder told.
void record_round(Controller& c, const planc::MarketRoundRecord& rec) {
  if (c.market_dir.empty()) return;
  const std::string path = c.market_dir + "/" + planc::round_file_name(rec);
  if (auto err = planc::write_file_atomically(path, planc::serialize_round(rec))) {
    error("%s: market: the round at %s is not recorded: %s", plugin_type,
          planc::format_utc(rec.at).c_str(), err->c_str());
    return;
  }
  {
    planc::MutexLock l(c.rec_mu);
    c.rec_wake = true;
  }
  c.rec_cv.notify_all();
}

// init(): rounds are recorded where the bills are.  Without jobcomp/planc
// the market runs unrecorded, said once.
void start_recorder(Controller& c) {
  planc::slurm::BillSite site = planc::slurm::bill_site();
  if (site.jobcomp_type != "jobcomp/planc") {
    verbose(
        "%s: market rounds are not recorded in PostgreSQL: JobCompType is %s, not "
        "jobcomp/planc",
        plugin_type, site.jobcomp_type.empty() ? "(none)" : site.jobcomp_type.c_str());
    return;
  }
  std::string dir = planc::slurm::state_file_path(kMarketDir);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error(
        "%s: cannot create %s: %m; market rounds are NOT recorded in PostgreSQL (fix "
        "StateSaveLocation's permissions and restart slurmctld)",
        plugin_type, dir.c_str());
    return;
  }
  c.market_dir = dir;
  c.market_conninfo = site.jobcomp_loc;
  c.cluster = site.cluster;
  {
    planc::MutexLock l(c.rec_mu);
    c.rec_stop = false;
    c.rec_wake = false;
  }
  c.recorder = planc::start_worker("planc_market", recorder, &c);
}

void stop_recorder(Controller& c) {
  {
    planc::MutexLock l(c.rec_mu);
    c.rec_stop = true;
  }
  c.rec_cv.notify_all();
  planc::join_worker(c.recorder);
}

}  // namespace planc::ctld

// --- ctld_infusion --------------------------------------------------------
// capacity infusion (issue 16; plugins/ctld_state.h).
// The controller (common/infusion.h decides): each sample feeds the idle
// window; once the window is covered, one decision per sample, acted on
// through Slurm's own RPCs from this worker with no slurmctld lock held
// (a replica is submitted as sbatch would as root; a shrink sends the
// replica SIGTERM, then SIGKILL after the pool's DrainGrace).  Idle GPUs
// are those neither allocated nor asked for by a pending replica (a
// replica being started is promised its GPUs).  The worker alone touches
// the controller's state; `scontrol show config` and the metrics read
// c.infusion_shown, c.infusion_ops and c.infusion_replicas (infusion_mu).
namespace planc::ctld {
namespace {

using planc::TierId;

// The controller's hourly limit and cooldown, as `scontrol show config`
// shows them.
void show_limits(Controller& c, time_t now) REQUIRES(c.infusion_mu) {
  c.infusion_shown.ops_last_hour = c.infusion->ops_last_hour(now);
  c.infusion_shown.next_allowed = c.infusion->next_allowed(now);
}

void count_infusion_op(Controller& c, const std::string& pool, const char* action)
    EXCLUDES(c.infusion_mu) {
  planc::MutexLock l(c.infusion_mu);
  c.infusion_ops[{pool, action}]++;
}

// SIGKILL to replicas whose drain grace is over (they ended on their own
// by then, usually: the kill then finds nothing, which is fine).
void kill_drained(Controller& c, time_t now) {
  for (auto it = c.draining.begin(); it != c.draining.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    int rc = planc::slurm::signal_job_rpc(it->first, SIGKILL);
    if (rc != SLURM_SUCCESS && rc != ESLURM_ALREADY_DONE && rc != ESLURM_INVALID_JOB_ID)
      error("%s: infusion: JobId=%u: kill after its drain grace failed: %s", plugin_type, it->first,
            slurm_strerror(rc));
    it = c.draining.erase(it);
  }
}

}  // namespace

void infusion_tick(Controller& c, const planc::PlancConfig& cfg, const planc::PoolUsage& pool,
                   const planc::slurm::InfusionJobs& jobs, bool reloaded) {
  const time_t now = time(nullptr);
  kill_drained(c, now);
  if (!cfg.infusion.enabled || cfg.infusion.pools.empty()) {
    c.replica_ids.clear();
    if (c.infusion) {
      c.infusion.reset();
      info(
          "%s: capacity infusion is off (Infusion=no or no Pool= line); replicas already running "
          "keep running",
          plugin_type);
    }
    return;
  }
  if (!c.infusion) {
    c.infusion = std::make_unique<planc::InfusionController>(cfg.infusion.settings);
    info("%s: capacity infusion is on: %zu pool(s), idle measured over %u s", plugin_type,
         cfg.infusion.pools.size(), cfg.infusion.settings.window_seconds);
  } else if (reloaded) {
    c.infusion->configure(cfg.infusion.settings);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<planc::slurm::ReplicaJob>& replicas = jobs.replicas;
  c.replica_ids.clear();
  for (const auto& r : replicas) c.replica_ids.push_back(r.job_id);
  // Replicas per pool (not those draining), and the GPUs pending ones are promised.
  std::vector<planc::ServingPool> pools;
  for (const planc::PoolConfig& p : cfg.infusion.pools)
    pools.push_back({p.name, p.tier, p.gpus_per_replica, p.min_replicas, p.max_replicas, 0});
  uint64_t promised = 0, draining = 0;
  for (const auto& r : replicas) {
    if (c.draining.count(r.job_id)) {
      if (r.running) draining += r.gpus;
      continue;
    }
    for (planc::ServingPool& sp : pools)
      if (sp.name == r.pool) sp.replicas++;
    if (!r.running) promised += r.gpus;
  }
  const uint64_t used = pool.allocated_total() + promised;
  const uint64_t idle_now = pool.pool_gpus > used ? pool.pool_gpus - used : 0;
  c.idle_window.observe(now, static_cast<uint32_t>(idle_now),
                        static_cast<uint32_t>(pool.pool_gpus));
  // Guaranteed work waits for more GPUs than it can have without taking
  // replicas back: the idle ones, within the 80% cap when it is on, and
  // those of replicas already draining or of jobs Slurm is preempting.
  // Then a replica is reclaimed at once, one a sample (not while enough
  // already drain).
  uint64_t open = idle_now;
  if (!cfg.guaranteed_partition.empty()) {
    const uint64_t cap = pool.pool_gpus * cfg.guaranteed_cap_percent / 100;
    const uint64_t held = pool.allocated_gpus[planc::tier_index(TierId::kP0)] +
                          pool.allocated_gpus[planc::tier_index(TierId::kP1)];
    open = std::min(open, cap > held ? cap - held : 0);
  }
  const bool waiting = jobs.guaranteed_waiting_gpus > open + draining + jobs.preempting_gpus;
  {
    std::string text;
    for (const planc::ServingPool& sp : pools)
      text += (text.empty() ? "" : ",") + sp.name + "=" + std::to_string(sp.replicas);
    planc::MutexLock l(c.infusion_mu);
    c.infusion_shown.replicas = text;
    for (const planc::ServingPool& sp : pools) c.infusion_replicas[sp.name] = sp.replicas;
  }
  auto m = c.idle_window.measure(now, cfg.infusion.settings.window_seconds);
  std::optional<planc::InfusionDecision> decided;
  if (m) decided = c.infusion->decide(now, m->idle_gpus, m->pool_gpus, waiting, pools);
  c.stats.infusion_passes++;
  c.stats.infusion_pass_usec += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  if (!decided) return;
  const planc::InfusionDecision& d = *decided;
  {
    planc::MutexLock l(c.infusion_mu);
    c.infusion_shown.idle = std::to_string(m->idle_gpus) + " of " + std::to_string(m->pool_gpus) +
                            " GPUs over the last " +
                            std::to_string(cfg.infusion.settings.window_seconds) + " s";
    show_limits(c, now);
  }
  if (d.market_round) {
    if (cfg.market.enabled && c.floor_keeper) {
      c.floor_keeper->ask_round(now);
      info("%s: infusion: idle %u of %u GPUs, above InfusionIdleMarket %s: a P2 market round now",
           plugin_type, m->idle_gpus, m->pool_gpus,
           planc::permille_text(cfg.infusion.settings.market_idle_permille).c_str());
    } else {
      info(
          "%s: infusion: idle %u of %u GPUs, above InfusionIdleMarket %s: no market round "
          "(Market=no)",
          plugin_type, m->idle_gpus, m->pool_gpus,
          planc::permille_text(cfg.infusion.settings.market_idle_permille).c_str());
    }
  }
  if (d.action == planc::InfusionAction::kNone) {
    // An operation the hourly limit holds back: said once when that starts
    // (not every sample), again when what is held back changes (the
    // cooldown's holds are routine and not logged).
    const size_t held = d.reason.find(", held ");
    const size_t colon = d.reason.find(": ");
    std::string kind;
    if (held != std::string::npos && colon < held &&
        d.reason.find("by the hourly limit", held) != std::string::npos)
      kind = d.reason.substr(colon + 2, held - colon - 2);
    if (!kind.empty() && kind != c.infusion_held)
      info("%s: infusion: %s", plugin_type, d.reason.c_str());
    c.infusion_held = std::move(kind);
    return;
  }
  c.infusion_held.clear();
  const planc::PoolConfig* pc = nullptr;
  for (const planc::PoolConfig& p : cfg.infusion.pools)
    if (p.name == d.pool) pc = &p;
  if (!pc) return;
  uint32_t now_replicas = 0;
  for (const planc::ServingPool& sp : pools)
    if (sp.name == d.pool) now_replicas = sp.replicas;
  std::string did;
  if (d.action == planc::InfusionAction::kGrow) {
    std::string why;
    const uint32_t drain = pc->drain_grace_seconds > 2 ? pc->drain_grace_seconds - 2 : 0;
    uint32_t id = planc::slurm::submit_replica(
        *pc, cfg.tiers.tier(pc->tier).qos,
        planc::infused_mark(pc->name, pc->tier, pc->drain_grace_seconds), drain, &why);
    if (!id) {
      c.stats.infusion_failures++;
      error(
          "%s: infusion: %s: could not add a replica to pool %s: %s (tried again after the "
          "cooldown)",
          plugin_type, d.reason.c_str(), pc->name.c_str(), why.c_str());
      c.infusion->done(now, d);  // a failing submission waits for the cooldown too
      return;
    }
    c.replica_ids.push_back(id);
    did = "grew pool " + pc->name + " to " + std::to_string(now_replicas + 1) +
          " replica(s) (JobId=" + std::to_string(id) + ")";
    count_infusion_op(c, pc->name, "grow");
  } else {
    // The newest replica goes first: pending before running when the pool
    // shrinks (no server interrupted), running first when guaranteed work
    // waits (only a running one frees GPUs).
    const planc::slurm::ReplicaJob* victim = nullptr;
    for (const auto& r : replicas) {
      if (r.pool != pc->name || c.draining.count(r.job_id)) continue;
      if (!victim) {
        victim = &r;
        continue;
      }
      const bool better_state =
          d.reclaim ? r.running && !victim->running : !r.running && victim->running;
      if (better_state || (victim->running == r.running && r.job_id > victim->job_id)) victim = &r;
    }
    if (!victim) return;
    int rc;
    if (!victim->running) {
      rc = planc::slurm::signal_job_rpc(victim->job_id, SIGKILL);
    } else {
      rc = planc::slurm::signal_job_rpc(victim->job_id, SIGTERM);
      if (rc == SLURM_SUCCESS) c.draining[victim->job_id] = now + pc->drain_grace_seconds;
    }
    if (rc != SLURM_SUCCESS) {
      c.stats.infusion_failures++;
      error("%s: infusion: %s: JobId=%u: %s failed: %s", plugin_type, d.reason.c_str(),
            victim->job_id, victim->running ? "SIGTERM" : "cancel", slurm_strerror(rc));
      return;
    }
    did = std::string(d.reclaim ? "gave back" : "shrank") + " pool " + pc->name + " to " +
          std::to_string(now_replicas - 1) +
          " replica(s) (JobId=" + std::to_string(victim->job_id) +
          (victim->running ? " SIGTERM, killed after its drain grace of " +
                                 std::to_string(pc->drain_grace_seconds) + " s"
                           : " cancelled before it started") +
          ")";
    count_infusion_op(c, pc->name, d.reclaim ? "reclaim" : "shrink");
  }
  c.infusion->done(now, d);
  info("%s: infusion: %s: %s; %u operation(s) in the last hour of at most %u", plugin_type,
       did.c_str(), d.reason.c_str(), c.infusion->ops_last_hour(now),
       cfg.infusion.settings.max_ops_per_hour);
  planc::MutexLock l(c.infusion_mu);
  c.infusion_shown.last_operation = planc::format_utc(now) + ": " + did + ": " + d.reason;
  show_limits(c, now);
}

}  // namespace planc::ctld

// --- ctld_metrics ---------------------------------------------------------
// metrics snapshot (plugins/ctld_state.h): what
// planc-exporter reads (common/metrics_snapshot.h) from
// StateSaveLocation/planc_metrics_slurmctld, written by the worker outside
// every lock after each sample: the pool's GPUs and jobs per tier,
// idle-threshold crossings, the SLA, starvation, spot-cap refusals, the
// market's floors, infusion's operations and replicas, and reloads.
namespace planc::ctld {

void write_metrics(Controller& c, const planc::PoolUsage& pool, const planc::IdleCrossings& idle,
                   const planc::ConfigWatch& watch) {
  const auto t0 = std::chrono::steady_clock::now();
  planc::MetricsSnapshot s;
  s.source = "slurmctld";
  s.written = time(nullptr);
  planc::add_pool_samples(pool, idle, &s);
  c.sla.add_samples(&s);
  s.samples.push_back(
      {"planc_starvation_upgrades_total", {}, static_cast<double>(c.stats.upgrades.load())});
  s.samples.push_back(
      {"planc_starvation_reverts_total", {}, static_cast<double>(c.stats.reverts.load())});
  for (int t = 0; t < planc::kTierCount; t++)
    s.samples.push_back({"planc_spot_cap_refusals_total",
                         {{"tier", "P" + std::to_string(t)}},
                         static_cast<double>(c.stats.spot_refusals[t].load())});
  if (auto f = market_floors(c)) {
    auto price = [](planc::Micros m) { return static_cast<double>(m) / planc::kMicrosPerUnit; };
    s.samples.push_back(
        {"planc_market_floor_price", {{"gpu_type", "default"}}, price(f->default_floor)});
    for (const auto& [type, floor] : f->by_type)
      s.samples.push_back({"planc_market_floor_price", {{"gpu_type", type}}, price(floor)});
    if (f->vacancy) s.samples.push_back({"planc_market_vacancy_ratio", {}, *f->vacancy / 1000.0});
    s.samples.push_back(
        {"planc_market_next_round_timestamp_seconds", {}, static_cast<double>(f->next_round)});
  }
  {
    planc::MutexLock l(c.infusion_mu);
    for (const auto& [key, n] : c.infusion_ops)
      s.samples.push_back({"planc_infusion_operations_total",
                           {{"pool", key.first}, {"action", key.second}},
                           static_cast<double>(n)});
    for (const auto& [name, n] : c.infusion_replicas)
      s.samples.push_back({"planc_infusion_replicas", {{"pool", name}}, static_cast<double>(n)});
  }
  s.samples.push_back(
      {"planc_config_reloads_total", {{"result", "ok"}}, static_cast<double>(watch.reloaded())});
  s.samples.push_back(
      {"planc_config_reloads_total", {{"result", "failed"}}, static_cast<double>(watch.refused())});
  if (auto err = planc::write_file_atomically(c.metrics_path, planc::serialize_snapshot(s),
                                              planc::Durability::kNoSync))
    error("%s: metrics snapshot: %s", plugin_type, err->c_str());
  c.stats.metrics_write_usec +=
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
}

}  // namespace planc::ctld

// --- ctld_show_config -----------------------------------------------------
// part of `scontrol show config` (plugins/ctld_state.h):
// slurmctld_plugstack_p_get_config's key/value pairs, from the
// configuration in force, the market's floors, infusion as shown, and the
// statistics (CtldStats).  Called in an RPC thread.
namespace planc::ctld {
namespace {

using planc::TierId;

void add_pair(List pairs, const char* name, const std::string& value) {
  auto* kp = static_cast<config_key_pair_t*>(xmalloc(sizeof(config_key_pair_t)));
  kp->name = xstrdup(name);
  kp->value = xstrdup(value.c_str());
  list_append(pairs, kp);
}

}  // namespace

void show_config(Controller& c, config_plugin_params_t* p) {
  std::shared_ptr<const planc::PlancConfig> shown;
  {
    planc::MutexLock l(c.shown_mu);
    shown = c.shown;
  }
  if (!shown) return;
  const planc::PlancConfig& cfg = *shown;
  xstrcat(p->name, plugin_type);
  auto secs = [](uint64_t s) { return std::to_string(s) + " s"; };
  add_pair(p->key_pairs, "StarvationThreshold", secs(cfg.starvation_threshold_seconds));
  add_pair(p->key_pairs, "StarvationInterval", secs(cfg.starvation_interval_seconds));
  add_pair(p->key_pairs, "StarvationMaxPerInterval",
           std::to_string(cfg.starvation_max_per_interval));
  add_pair(p->key_pairs, "SpotCapP2", planc::describe_spot_cap(cfg, TierId::kP2));
  add_pair(p->key_pairs, "SpotCapP3", planc::describe_spot_cap(cfg, TierId::kP3));
  add_pair(p->key_pairs, "SpotCapResetTime", planc::format_time_of_day(cfg.spot_reset_seconds));
  add_pair(p->key_pairs, "SpotCapTimeZone",
           "UTC" + planc::format_utc_offset(cfg.spot_utc_offset_seconds));
  add_pair(p->key_pairs, "SpotCapDayLength", secs(cfg.spot_day_seconds));
  add_pair(p->key_pairs, "Market", cfg.market.enabled ? "yes" : "no");
  if (cfg.market.enabled) {
    add_pair(p->key_pairs, "MarketInterval", secs(cfg.market.interval_seconds));
    add_pair(p->key_pairs, "MarketMinFraction", planc::permille_text(cfg.market.min_permille));
    add_pair(p->key_pairs, "MarketFloorCurve", planc::format_floor_curve(cfg.market.floor_curve));
    if (auto f = market_floors(c)) {
      std::string floors = "default=" + planc::format_micros(f->default_floor);
      for (const auto& [type, floor] : f->by_type)
        floors += "," + type + "=" + planc::format_micros(floor);
      add_pair(p->key_pairs, "MarketFloor", floors + " " + cfg.prices.currency + "/card-hour");
      std::string lists = "default=" + planc::format_micros(cfg.prices.default_card_hour);
      for (const auto& [type, list] : cfg.prices.card_hour)
        lists += "," + type + "=" + planc::format_micros(list);
      add_pair(p->key_pairs, "MarketListPrice", lists + " " + cfg.prices.currency + "/card-hour");
      add_pair(p->key_pairs, "MarketVacancy",
               f->vacancy ? planc::permille_text(*f->vacancy) : "unknown");
      add_pair(p->key_pairs, "MarketLastRound", f->at ? planc::format_utc(f->at) : "none yet");
      add_pair(p->key_pairs, "MarketNextRound", planc::format_utc(f->next_round));
      {
        planc::MutexLock l(c.floors_mu);
        add_pair(p->key_pairs, "MarketLastClearing", c.last_clearing);
      }
      add_pair(p->key_pairs, "MarketRounds", std::to_string(c.stats.market_rounds.load()));
      add_pair(p->key_pairs, "MarketMatched", std::to_string(c.stats.market_matched.load()));
      add_pair(p->key_pairs, "MarketJobUpdates", std::to_string(c.stats.market_updates.load()));
      add_pair(p->key_pairs, "MarketRoundBids", std::to_string(c.stats.round_bids.load()));
      add_pair(p->key_pairs, "MarketRoundReadUsec", std::to_string(c.stats.round_read_usec.load()));
      add_pair(p->key_pairs, "MarketRoundClearUsec",
               std::to_string(c.stats.round_clear_usec.load()));
      add_pair(p->key_pairs, "MarketRoundUpdateUsec",
               std::to_string(c.stats.round_update_usec.load()));
      add_pair(p->key_pairs, "MarketRoundTotalUsec",
               std::to_string(c.stats.round_total_usec.load()));
      add_pair(p->key_pairs, "MarketRoundsRecorded",
               c.market_dir.empty() ? std::string("off (JobCompType is not jobcomp/planc)")
                                    : std::to_string(c.stats.rounds_recorded.load()));
      add_pair(p->key_pairs, "MarketRoundsWaiting", std::to_string(c.stats.rounds_waiting.load()));
      add_pair(p->key_pairs, "MarketRoundsRejected",
               std::to_string(c.stats.rounds_rejected.load()));
    }
  }
  add_pair(p->key_pairs, "Infusion", cfg.infusion.enabled ? "yes" : "no");
  if (cfg.infusion.enabled) {
    planc::MutexLock l(c.infusion_mu);
    add_pair(p->key_pairs, "InfusionIdle", c.infusion_shown.idle);
    add_pair(p->key_pairs, "InfusionReplicas",
             c.infusion_shown.replicas.empty() ? "none" : c.infusion_shown.replicas);
    add_pair(p->key_pairs, "InfusionLastOperation", c.infusion_shown.last_operation);
    add_pair(
        p->key_pairs, "InfusionNextAllowed",
        c.infusion_shown.next_allowed ? planc::format_utc(c.infusion_shown.next_allowed) : "now");
    add_pair(p->key_pairs, "InfusionOperationsLastHour",
             std::to_string(c.infusion_shown.ops_last_hour) + " of at most " +
                 std::to_string(cfg.infusion.settings.max_ops_per_hour));
    add_pair(p->key_pairs, "InfusionFailures", std::to_string(c.stats.infusion_failures.load()));
    add_pair(p->key_pairs, "InfusionPasses", std::to_string(c.stats.infusion_passes.load()));
    add_pair(p->key_pairs, "InfusionPassTotalUsec",
             std::to_string(c.stats.infusion_pass_usec.load()));
  }
  add_pair(p->key_pairs, "StarvationUpgrades", std::to_string(c.stats.upgrades.load()));
  add_pair(p->key_pairs, "StarvationReverts", std::to_string(c.stats.reverts.load()));
  add_pair(p->key_pairs, "ScanCount", std::to_string(c.stats.scans.load()));
  add_pair(p->key_pairs, "ScanLastPendingJobs", std::to_string(c.stats.last_scan_jobs.load()));
  add_pair(p->key_pairs, "ScanLastUsec", std::to_string(c.stats.last_scan_usec.load()));
  add_pair(p->key_pairs, "ScanMaxUsec", std::to_string(c.stats.max_scan_usec.load()));
  add_pair(p->key_pairs, "ScanTotalUsec", std::to_string(c.stats.total_scan_usec.load()));
  add_pair(p->key_pairs, "SampleCount", std::to_string(c.stats.samples.load()));
  add_pair(p->key_pairs, "SampleLockTotalUsec", std::to_string(c.stats.sample_lock_usec.load()));
  add_pair(p->key_pairs, "SampleLockMaxUsec", std::to_string(c.stats.sample_max_lock_usec.load()));
  add_pair(p->key_pairs, "SampleJobsVisitedTotal", std::to_string(c.stats.sample_visited.load()));
  add_pair(p->key_pairs, "SampleWalks", std::to_string(c.stats.sample_walks.load()));
  add_pair(p->key_pairs, "SampleWatchedJobs", std::to_string(c.stats.watched.load()));
  add_pair(p->key_pairs, "SampleLockWaitTotalUsec",
           std::to_string(c.stats.sample_lock_wait_usec.load()));
  add_pair(p->key_pairs, "MetricsWriteTotalUsec",
           std::to_string(c.stats.metrics_write_usec.load()));
  add_pair(p->key_pairs, "RunJournal",
           c.journal_dir.empty() ? "off (see slurmctld's log)" : c.journal_dir);
  add_pair(p->key_pairs, "RunJournalRecords", std::to_string(c.stats.journal_records.load()));
  add_pair(p->key_pairs, "RunJournalDropped", std::to_string(c.stats.journal_dropped.load()));
  add_pair(p->key_pairs, "RunJournalMaxUsec", std::to_string(c.stats.journal_max_usec.load()));
  add_pair(p->key_pairs, "RunJournalOver1ms", std::to_string(c.stats.journal_slow.load()));
  add_pair(p->key_pairs, "RunJournalTotalUsec", std::to_string(c.stats.journal_total_usec.load()));
}

}  // namespace planc::ctld

PLANC_EXPORT int planc_spot_used_v1(const char* account, int tier, int64_t now, uint64_t* used) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !cp->running.load() || !account || tier < 0 || tier >= planc::kTierCount || !used)
    return 0;
  Controller& c = *cp;
  try {
    std::shared_ptr<const planc::SpotUsage> u;
    {
      planc::MutexLock l(c.usage_mu);
      u = c.usage;
    }
    if (!u) return 0;
    *used = u->used(account, static_cast<TierId>(tier), static_cast<time_t>(now));
    return 1;
  } catch (...) {
    return 0;
  }
}

PLANC_EXPORT int planc_market_floor_v1(const char* gpu_type, int64_t* floor, int64_t* next_round) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !cp->running.load() || !floor || !next_round) return 0;
  try {
    auto f = planc::ctld::market_floors(*cp);
    if (!f) return 0;
    auto it = f->by_type.find(planc::ascii_lower(gpu_type ? gpu_type : ""));
    *floor = it != f->by_type.end() ? it->second : f->default_floor;
    *next_round = f->next_round;
    return 1;
  } catch (...) {
    return 0;
  }
}

PLANC_EXPORT void planc_spot_refused_v1(int tier) {
  // Counted once init() has made the controller: a refusal needs the spot
  // usage planc_spot_used_v1 gives only after init().
  Controller* cp = planc::ctld::controller();
  if (cp && tier >= 0 && tier < planc::kTierCount) cp->stats.spot_refusals[tier]++;
}

PLANC_EXPORT int init(void) {
  try {
    // Made by the first init(); a later one (slurmctld the primary again)
    // finds it as it was left (plugins/ctld_state.h).
    Controller* cp = g_ctl.load();
    if (!cp) {
      cp = new Controller;
      g_ctl.store(cp);
    }
    Controller& c = *cp;
    c.config = planc::slurm::load_plugin_config(plugin_type);
    if (!c.config) return SLURM_ERROR;
    c.state_path = planc::slurm::state_file_path(kStateFile);
    c.metrics_path = planc::slurm::state_file_path("planc_metrics_slurmctld");
    c.tiers = std::make_unique<planc::QosTierCache>(c.config->tiers);
    {
      planc::MutexLock l(c.shown_mu);
      c.shown = c.config;
    }
    c.ledger = planc::ctld::load_spot_state(c, *c.config);
    planc::ctld::publish_usage(c);
    planc::ctld::start_journal(c);
    planc::ctld::start_recorder(c);
    {
      planc::MutexLock l(c.mu);
      c.stop = false;
    }
    c.worker = planc::start_worker("planc_ctld", planc::ctld::worker, &c,
                                   planc::ConfigWatch(planc::slurm::planc_conf_file(), c.config));
    c.running = true;
    verbose(
        "%s loaded: starvation threshold %u s, checked every %u s, at most %u a time; "
        "spot caps P2 %s, P3 %s, day starts %s",
        plugin_type, c.config->starvation_threshold_seconds, c.config->starvation_interval_seconds,
        c.config->starvation_max_per_interval,
        planc::describe_spot_cap(*c.config, TierId::kP2).c_str(),
        planc::describe_spot_cap(*c.config, TierId::kP3).c_str(),
        planc::describe_spot_day(*c.config).c_str());
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: init failed: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

PLANC_EXPORT int fini(void) {
  Controller* cp = g_ctl.load();
  if (!cp) return SLURM_SUCCESS;  // init() never ran
  Controller& c = *cp;
  c.running = false;
  try {
    {
      planc::MutexLock l(c.mu);
      c.stop = true;
    }
    c.cv.notify_all();
    planc::join_worker(c.worker);
    planc::ctld::stop_recorder(c);
    planc::ctld::stop_journal(c);
    if (c.ledger) {
      if (auto err = planc::write_file_atomically(c.state_path, c.ledger->serialize()))
        error("%s: %s", plugin_type, err->c_str());
    }
  } catch (const std::exception& e) {
    error("%s: fini: %s", plugin_type, e.what());
  }
  {
    planc::MutexLock l(c.usage_mu);
    c.usage.reset();
  }
  c.ledger.reset();
  c.tiers.reset();
  c.config.reset();
  {
    planc::MutexLock l(c.shown_mu);
    c.shown.reset();
  }
  return SLURM_SUCCESS;
}

PLANC_EXPORT void slurmctld_plugstack_p_get_config(config_plugin_params_t* p) {
  try {
    if (Controller* c = planc::ctld::controller()) planc::ctld::show_config(*c, p);
  } catch (const std::exception& e) {
    error("%s: get_config: %s", plugin_type, e.what());
  }
}
