// preempt/planc: the Plan C preemption policy, a drop-in for preempt/qos.
//
// Slurm keeps the candidate search and the locks (src/slurmctld/preempt.c);
// this plugin answers its questions from common/preempt_policy.*:
//   preemptable   the tier matrix from planc.conf, and the per-job cap
//                 (at most PreemptMaxCount preemptions in PreemptWindow);
//   MODE          requeue when the job is requeueable, else cancel;
//                 guaranteed tiers OFF (never preempted);
//   PRIO          the victim order (a job already in grace first, then P3,
//                 fewest recent preemptions, shortest current run in
//                 clock minutes);
//   GRACE_TIME    asked exactly once when a preemption starts: the tier's
//                 grace, and the moment the preemption is counted and the
//                 owner's note (SystemComment) is written.
// All entry points run inside slurmctld with its job lock held.  The
// ledger has its own mutex, always taken after slurmctld's locks and never
// held across I/O; a background thread writes the state file, forgets
// jobs that have ended, ends grace periods on time (kill, then wake the
// scheduler), and lets a preemptor whose freed resources went to another
// job preempt again at once (see g_in_flight).
#include "plugins/slurm_compat.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/job_marks.h"
#include "common/preempt_policy.h"
#include "common/state_file.h"
#include "plugins/slurm_adapter.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] = "Plan C tiered preemption";
PLANC_EXPORT const char plugin_type[] = "preempt/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

using planc::PreemptLedger;
using planc::Tier;
using planc::TierId;

std::shared_ptr<const planc::PlancConfig> g_config;
std::unique_ptr<planc::QosTierCache> g_tiers;  // over g_config->tiers
std::string g_state_path;

std::mutex g_mu;
std::unique_ptr<PreemptLedger> g_ledger;  // GUARDED_BY(g_mu)
bool g_dirty = false;                     // GUARDED_BY(g_mu)
// Wakes the worker before its next tick: set for a new grace deadline (it
// may come before the tick) and at stop.  A preemption without grace does
// not wake it: that would happen inside slurmctld's scheduling cycle, and
// the woken worker would take the CPU from the cycle, which holds the job
// write lock (on bench-preempt this alone made main cycles 1.5-2.6x longer
// in wall time than preempt/qos's at the same CPU time per cycle).
bool g_wake = false;                      // GUARDED_BY(g_mu)
// True while the worker sleeps its long (idle) sleep: the first preemption
// after a quiet spell wakes it, the rest of a burst waits for its tick.
bool g_worker_idle = false;               // GUARDED_BY(g_mu)
// Victims without grace that get a SIGKILL if Slurm's SIGTERM has not ended
// them by `due`; see grace_and_count.
struct PendingKill {
  planc::slurm::JobSignal signal;
  std::chrono::steady_clock::time_point due;
};
std::vector<PendingKill> g_kills;  // GUARDED_BY(g_mu)
// How long a victim without grace may take to die of Slurm's SIGTERM
// before the worker SIGKILLs it (Slurm alone: at least 5 s).
constexpr auto kNoGraceKillAfter = std::chrono::milliseconds(500);
// The jobs g_ledger may hold, readable without g_mu: the preemptable check
// and the victim rank take the lock only for those.  Written under g_mu.
planc::LedgerFilter g_in_ledger;
bool g_stop = false;                      // GUARDED_BY(g_mu)
// Ends of grace periods in progress.  Slurm finishes a preemption only when
// the scheduler next tries the preemptor after the grace has run out, which
// can be a whole sched_interval (60 s by default) later; the worker wakes
// the scheduler at each deadline instead.
struct GraceEnd {
  time_t deadline;
  uint32_t victim;
  uint32_t preemptor;  // 0: unknown
  bool operator<(const GraceEnd& o) const { return deadline < o.deadline; }
};
std::multiset<GraceEnd> g_grace_ends;  // GUARDED_BY(g_mu)
// Preemptions in flight: preemptor -> its victims, from GRACE_TIME until the
// preemptor runs.  When a victim's resources are freed, the next scheduling
// pass may give them to another pending job first (a preemptor higher in
// the queue, say).  The preemptor is then "robbed": Slurm will not let it
// preempt again for KillWait + MessageTimeout after its last preemption
// (node_scheduler.c, `kill_pending`), and as the head of its partition it
// makes every main pass give up on that partition.  Only backfill moves
// on, once per bf_interval, and its burst of preemptions robs the next
// preemptor: starts come in waves.  The worker clears the preemptor's
// preempt_start_time as soon as all its victims are gone (not running, not
// completing), which is exactly when Slurm's wait has nothing left to wait
// for.  See README, "Robbed preemptors".
struct InFlight {
  std::vector<uint32_t> victims;
  time_t since;
};
std::map<uint32_t, InFlight> g_in_flight;  // GUARDED_BY(g_mu)
std::condition_variable g_cv;
std::thread* g_worker = nullptr;  // never destroyed at exit: see plugins/worker_thread.h

// The preemptor of the latest preemptable() call.  Slurm asks preemptable()
// for every candidate of one preemptor and then preempts the chosen ones,
// all under one hold of the job write lock, so at GRACE_TIME this names the
// job that caused the preemption.  Only touched under slurmctld's job lock.
uint32_t g_last_preemptor = 0;
TierId g_last_preemptor_tier = TierId::kP0;

constexpr const char* kStateFile = "planc_preempt_state";

// Killing the batch script alone (KILL_JOB_BATCH: slurmstepd kill()s only
// the shell's pid) orphans everything the script started: the children are
// re-parented to init, proctrack/linuxproc no longer finds them, and they
// keep running after Slurm requeues the job.  bench-preempt left one orphan
// `sleep` per P3 victim preempted by preempt/planc (2,296 after 9 runs, none
// after preempt/qos runs).  With KILL_FULL_JOB as well, slurmstepd
// killpg()s the script's process group and slurmd signals the job's other
// steps too, which is what a kill at preemption means.
constexpr uint16_t kBatchProcessGroup = KILL_JOB_BATCH | KILL_FULL_JOB;
constexpr uint16_t kSigkill = SIGKILL;

// Writes the ledger atomically (common/state_file.h); false after logging.
bool write_state(const std::string& text) {
  if (auto err = planc::write_file_atomically(g_state_path, text)) {
    error("%s: cannot save the preemption counts: %s", plugin_type, err->c_str());
    return false;
  }
  return true;
}

std::unique_ptr<PreemptLedger> load_state(const planc::PlancConfig& cfg) {
  auto fresh = std::make_unique<PreemptLedger>(cfg.preempt_max_count, cfg.preempt_window_seconds);
  std::ifstream in(g_state_path, std::ios::binary);
  if (!in) return fresh;  // first start: nothing counted yet
  std::ostringstream ss;
  ss << in.rdbuf();
  auto r = PreemptLedger::parse(ss.str(), cfg.preempt_max_count, cfg.preempt_window_seconds);
  if (!r.ok()) {
    error("%s: ignoring %s: %s; starting with no preemptions counted (the per-job cap "
          "restarts from zero)",
          plugin_type, g_state_path.c_str(), r.error().c_str());
    return fresh;
  }
  info("%s: %zu job(s) with preemptions counted, from %s", plugin_type, r.value().size(),
       g_state_path.c_str());
  return std::make_unique<PreemptLedger>(std::move(r).value());
}

// Forgets jobs that have ended.  Takes slurmctld's job read lock, then the
// ledger mutex (the same order as the entry points).
void forget_ended_jobs() {
  std::vector<uint32_t> ids;
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_ledger->prune(time(nullptr));
    ids = g_ledger->job_ids();
    g_in_ledger.rebuild(ids);
  }
  if (ids.empty()) return;
  std::vector<uint32_t> ended;
  slurmctld_lock_t job_read = {.job = READ_LOCK};
  lock_slurmctld(job_read);
  for (uint32_t id : ids) {
    job_record_t* job = find_job_record(id);
    if (!job || IS_JOB_FINISHED(job)) ended.push_back(id);
  }
  unlock_slurmctld(job_read);
  if (ended.empty()) return;
  std::lock_guard<std::mutex> l(g_mu);
  for (uint32_t id : ended) g_ledger->forget(id);
  g_in_ledger.rebuild(g_ledger->job_ids());
  g_dirty = true;
}

// The policy's "kill at the end of the grace", on time.  Slurm itself
// finishes a preemption only when a later scheduling pass (sched_interval,
// 60 s by default) or job_time_limit() (every 30 s) looks again, and then
// slurmd gives a job that ignored SIGTERM another 5 s (MAX(kill_wait, 5)).
// Here, under the locks job_time_limit() takes: SIGKILL the batch step,
// then requeue or cancel through Slurm's own slurm_job_preempt() in the same
// lock hold (so the dying script's completion cannot be taken for a normal
// end), and stamp the preemptor's preempt_start_time as node_scheduler.c
// does, so the next pass waits for these resources instead of choosing
// another victim.  Then wake the scheduler.
void end_grace(const std::vector<GraceEnd>& due) {
  slurmctld_lock_t lock = {.conf = READ_LOCK, .job = WRITE_LOCK, .node = WRITE_LOCK,
                           .part = READ_LOCK, .fed = READ_LOCK};
  lock_slurmctld(lock);
  time_t now = time(nullptr);
  for (const GraceEnd& g : due) {
    job_record_t* job = find_job_record(g.victim);
    if (!job || !IS_JOB_RUNNING(job) || !job->preempt_time || now < job->end_time) continue;
    job_record_t* preemptor = g.preemptor ? find_job_record(g.preemptor) : nullptr;
    if (job->batch_flag) job_signal(job, kSigkill, kBatchProcessGroup, 0, false);
    slurm_job_preempt(job, preemptor, slurm_job_preempt_mode(job), false);
    if (preemptor && IS_JOB_PENDING(preemptor) && preemptor->details)
      preemptor->details->preempt_start_time = now;
  }
  unlock_slurmctld(lock);
  schedule(false);  // only signals the scheduler thread
}

// Preemptors whose victims are all gone but which still pend with a
// preemption in progress: their freed resources went to another job.  A
// read-locked look first (the usual case: nothing to do), then the write
// lock only to clear what was found, re-checked under it.
bool waits_on_preemption(const job_record_t* preemptor) {
  return preemptor && IS_JOB_PENDING(preemptor) && preemptor->details &&
         preemptor->details->preempt_start_time;
}

bool victims_gone(const InFlight& f) {
  for (uint32_t id : f.victims) {
    job_record_t* v = find_job_record(id);
    if (v && (IS_JOB_RUNNING(v) || IS_JOB_COMPLETING(v) || IS_JOB_SUSPENDED(v))) return false;
  }
  return true;
}

void release_robbed(std::map<uint32_t, InFlight> in_flight) {
  std::vector<uint32_t> done, found;
  slurmctld_lock_t job_read = {.job = READ_LOCK};
  lock_slurmctld(job_read);
  time_t now = time(nullptr);
  for (const auto& [id, f] : in_flight) {
    if (!waits_on_preemption(find_job_record(id)) || now - f.since > 600)
      done.push_back(id);  // started, ended, or given up on: nothing to watch
    else if (victims_gone(f))
      found.push_back(id);
  }
  unlock_slurmctld(job_read);
  if (!found.empty()) {
    bool released = false;
    slurmctld_lock_t job_write = {.job = WRITE_LOCK};
    lock_slurmctld(job_write);
    for (uint32_t id : found) {
      job_record_t* p = find_job_record(id);
      if (!waits_on_preemption(p) || !victims_gone(in_flight[id])) continue;
      debug("%s: %pJ: the resources its preemption freed went to another job; it may "
            "preempt again now",
            plugin_type, p);
      p->details->preempt_start_time = 0;
      done.push_back(id);
      released = true;
    }
    unlock_slurmctld(job_write);
    if (released) queue_job_scheduler();
  }
  if (done.empty()) return;
  std::lock_guard<std::mutex> l(g_mu);
  for (uint32_t id : done) {
    auto it = g_in_flight.find(id);
    // A newer preemption by the same job replaced the entry: keep that one.
    if (it != g_in_flight.end() && it->second.since == in_flight[id].since) g_in_flight.erase(it);
  }
}

// Queues the SIGKILLs of victims without grace (see grace_and_count), under
// the job read lock the agent needs to look the jobs up.
void send_kills(const std::vector<PendingKill>& kills) {
  slurmctld_lock_t job_read = {.job = READ_LOCK};
  lock_slurmctld(job_read);
  for (const auto& k : kills) {
    // Still being killed: its processes outlived the SIGTERM.  Ended, or
    // (after a requeue) running again: nothing to do.
    job_record_t* job = find_job_record(k.signal.job_id);
    if (job && IS_JOB_COMPLETING(job)) {
      debug("%s: %pJ still ends %lld ms after SIGTERM: SIGKILL", plugin_type, job,
            static_cast<long long>(kNoGraceKillAfter.count()));
      planc::slurm::signal_nodes(k.signal);
    }
  }
  unlock_slurmctld(job_read);
}

// The state file is written at most this often: a burst of preemptions is
// one write (with fsync), not one each.  A crash loses at most the last
// second's counts.
constexpr auto kStateWriteInterval = std::chrono::seconds(1);

void worker() {
  using Clock = std::chrono::system_clock;
  time_t last_sweep = time(nullptr);
  auto last_write = std::chrono::steady_clock::now() - kStateWriteInterval;
  std::unique_lock<std::mutex> l(g_mu);
  while (!g_stop) {
    // While preemptions are in flight, look for robbed preemptors often:
    // every pass it is robbed costs a scheduling pass.
    bool busy = !g_in_flight.empty() || !g_kills.empty() || g_dirty;
    g_worker_idle = !busy;
    auto wake = Clock::now() + (busy ? std::chrono::milliseconds(200)
                                     : std::chrono::milliseconds(5000));
    if (!g_grace_ends.empty())
      wake = std::min(wake, Clock::from_time_t(g_grace_ends.begin()->deadline) +
                                std::chrono::milliseconds(50));
    g_cv.wait_until(l, wake, [] { return g_stop || g_wake; });
    g_wake = false;
    g_worker_idle = false;
    if (g_stop) break;
    if (!g_kills.empty()) {
      std::vector<PendingKill> due;
      auto now = std::chrono::steady_clock::now();
      auto keep = std::partition(g_kills.begin(), g_kills.end(),
                                 [now](const PendingKill& k) { return k.due > now; });
      due.assign(keep, g_kills.end());
      g_kills.erase(keep, g_kills.end());
      if (!due.empty()) {
        l.unlock();
        send_kills(due);
        l.lock();
      }
    }
    std::vector<GraceEnd> grace_over;
    while (!g_grace_ends.empty() && g_grace_ends.begin()->deadline <= time(nullptr)) {
      grace_over.push_back(*g_grace_ends.begin());
      g_grace_ends.erase(g_grace_ends.begin());
    }
    if (!grace_over.empty()) {
      l.unlock();
      end_grace(grace_over);
      l.lock();
    }
    if (!g_in_flight.empty()) {
      std::map<uint32_t, InFlight> copy = g_in_flight;
      l.unlock();
      release_robbed(std::move(copy));
      l.lock();
    }
    if (time(nullptr) - last_sweep >= 60) {
      l.unlock();
      forget_ended_jobs();
      last_sweep = time(nullptr);
      l.lock();
    }
    if (!g_dirty || std::chrono::steady_clock::now() - last_write < kStateWriteInterval)
      continue;
    std::string text = g_ledger->serialize();
    g_dirty = false;
    l.unlock();
    write_state(text);  // outside every lock
    last_write = std::chrono::steady_clock::now();
    l.lock();
  }
}

// What Slurm does to a victim: requeue when the job may be requeued, else
// cancel.  One place, so the owner's note says what PREEMPT_DATA_MODE chose.
bool requeues(const job_record_t* job) { return job->details && job->details->requeue; }

uint32_t grace_and_count(job_record_t* job) {
  const planc::PlancConfig& cfg = *g_config;
  const Tier* victim = planc::slurm::job_tier(*g_tiers, job);
  if (!victim) return 0;
  time_t now = time(nullptr);
  planc::PreemptionEvent e;
  e.victim_job = job->job_id;
  e.victim_tier = victim->id;
  e.when = now;
  e.grace_seconds = victim->grace_seconds;
  e.requeue = requeues(job);
  if (g_last_preemptor && cfg.tiers.can_preempt(g_last_preemptor_tier, victim->id)) {
    e.preemptor_job = g_last_preemptor;
    e.preemptor_tier = g_last_preemptor_tier;
  }
  // No grace means no grace.  Slurm's requeue or cancel, which follows at
  // once, sends SIGTERM; a job that ignores it would get its SIGKILL from
  // slurmd only 5 s later (slurmd/req.c, MAX(kill_wait, 5)), and the
  // preemptor would wait for it.  So the worker SIGKILLs (signal_nodes: the
  // script's process group and the job's steps) a victim still ending
  // kNoGraceKillAfter later.  Not from here: a signal queued inside the
  // scheduling cycle woke slurmctld's agent, whose threads took the CPU
  // from the cycle (which holds the job write lock), and most jobs die of
  // the SIGTERM and need no second message at all.
  std::optional<planc::slurm::JobSignal> kill;
  if (!e.grace_seconds && job->batch_flag) kill = planc::slurm::job_signal_order(job, kSigkill);
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_ledger->record(job->job_id, now);
    g_in_ledger.add(job->job_id);
    e.count_in_window = g_ledger->count_in_window(job->job_id, now);
    if (e.grace_seconds)
      g_grace_ends.insert({now + static_cast<time_t>(e.grace_seconds), job->job_id,
                           e.preemptor_job});
    if (e.preemptor_job) {
      InFlight& f = g_in_flight[e.preemptor_job];
      if (f.since != now) f.victims.clear();  // a new round of preemption
      f.victims.push_back(job->job_id);
      f.since = now;
    }
    g_dirty = true;
    if (kill)
      g_kills.push_back({std::move(*kill), std::chrono::steady_clock::now() + kNoGraceKillAfter});
    // See g_wake: wake the worker for a grace deadline, or when it sleeps
    // its idle sleep (the first preemption of a burst); otherwise its next
    // tick comes within 200 ms.
    wake = e.grace_seconds || g_worker_idle;
    if (wake) {
      g_wake = true;
      g_worker_idle = false;
    }
  }
  if (wake) g_cv.notify_one();
  std::string note = planc::preemption_note(cfg, e);
  xfree(job->system_comment);
  job->system_comment = xstrdup(note.c_str());
  // 22.05's slurmdbd never stores SystemComment, but it stores AdminComment
  // with every run's end record: mirror the note there so `sacct -o
  // AdminComment` shows it on the PREEMPTED row.  An admin's own comment is
  // left alone; a free-attempt mark stays in front, for billing.
  if (auto comment = planc::admin_comment_with_note(
          job->admin_comment ? job->admin_comment : "", note)) {
    xfree(job->admin_comment);
    job->admin_comment = xstrdup(comment->c_str());
  }
  if (job->batch_flag) {
    // Slurm's own grace signal (preempt.c) reaches the job's steps but not
    // the batch script, which is where most jobs trap SIGTERM to
    // checkpoint.  Signal the batch script too, as `scancel -b` does (the
    // shell itself: what it started hears SIGTERM only if it passes it on).
    // Without grace there is no time to act on a SIGTERM: the SIGKILL above.
    if (e.grace_seconds) job_signal(job, SIGTERM, KILL_JOB_BATCH, 0, false);
  }
  info("%s: %pJ (%s) preempted by JobId=%u (%s), grace %u s, %s, preemption %u in window",
       plugin_type, job, victim->label.c_str(), e.preemptor_job,
       e.preemptor_job ? cfg.tiers.tier(e.preemptor_tier).label.c_str() : "?",
       e.grace_seconds, e.requeue ? "requeue" : "cancel", e.count_in_window);
  return e.grace_seconds;
}

}  // namespace

PLANC_EXPORT int init(void) {
  try {
    g_config = planc::slurm::load_plugin_config(plugin_type);
    if (!g_config) return SLURM_ERROR;
    g_state_path = std::string(slurm_conf.state_save_location ? slurm_conf.state_save_location
                                                              : ".") +
                   "/" + kStateFile;
    g_tiers = std::make_unique<planc::QosTierCache>(g_config->tiers);
    g_ledger = load_state(*g_config);
    g_in_ledger.rebuild(g_ledger->job_ids());
    g_stop = false;
    g_worker = planc::start_worker("planc_preempt", worker);
    verbose("%s loaded", plugin_type);
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: init failed: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

// Slurm calls fini() on shutdown, and with all its write locks held when
// PreemptType changes on reconfigure (read_config.c); the worker may be
// waiting for those locks, so change PreemptType only by a restart.
PLANC_EXPORT void fini(void) {
  try {
    planc::stop_worker(g_mu, g_stop, g_cv, g_worker);
    if (g_ledger) write_state(g_ledger->serialize());
  } catch (const std::exception& e) {
    error("%s: fini: %s", plugin_type, e.what());
  }
  g_ledger.reset();
  g_tiers.reset();
  g_config.reset();
}

PLANC_EXPORT bool preempt_p_preemptable(job_record_t* preemptee, job_record_t* preemptor) {
  try {
    const Tier* ee = planc::slurm::job_tier(*g_tiers, preemptee);
    const Tier* er = planc::slurm::job_tier(*g_tiers, preemptor);
    if (!ee || !er || !g_config->tiers.can_preempt(er->id, ee->id)) return false;
    g_last_preemptor = preemptor->job_id;
    g_last_preemptor_tier = er->id;
    if (!g_in_ledger.maybe_contains(preemptee->job_id)) return true;
    std::lock_guard<std::mutex> l(g_mu);
    return !g_ledger->capped(preemptee->job_id, time(nullptr));
  } catch (...) {
    return false;  // when in doubt, preempt nothing
  }
}

PLANC_EXPORT bool preempt_p_job_preempt_check(job_queue_rec_t* preemptor,
                                              job_queue_rec_t* preemptee) {
  return preempt_p_preemptable(preemptee->job_ptr, preemptor->job_ptr);
}

PLANC_EXPORT int preempt_p_get_data(job_record_t* job_ptr, slurm_preempt_data_type_t data_type,
                                    void* data) {
  try {
    switch (data_type) {
      case PREEMPT_DATA_ENABLED:
        *static_cast<bool*>(data) = slurm_conf.preempt_mode != PREEMPT_MODE_OFF;
        return SLURM_SUCCESS;
      case PREEMPT_DATA_MODE: {
        const Tier* t = planc::slurm::job_tier(*g_tiers, job_ptr);
        uint16_t mode = PREEMPT_MODE_OFF;
        if (t && t->preemptible)
          mode = requeues(job_ptr) ? PREEMPT_MODE_REQUEUE : PREEMPT_MODE_CANCEL;
        *static_cast<uint16_t*>(data) = mode;
        return SLURM_SUCCESS;
      }
      case PREEMPT_DATA_PRIO: {
        // A job already in its grace period comes first, so Slurm waits for
        // it instead of preempting yet another job for the same preemptor.
        if (job_ptr->preempt_time) {
          *static_cast<uint32_t*>(data) = planc::kInGraceRank;
          return SLURM_SUCCESS;
        }
        const Tier* t = planc::slurm::job_tier(*g_tiers, job_ptr);
        time_t now = time(nullptr);
        planc::VictimFacts v{t ? t->id : TierId::kP0, 0, 0};
        v.run_minutes = planc::run_minutes(job_ptr->start_time, now);
        if (g_in_ledger.maybe_contains(job_ptr->job_id)) {
          std::lock_guard<std::mutex> l(g_mu);
          v.recent_preemptions = g_ledger->count_in_window(job_ptr->job_id, now);
        }
        *static_cast<uint32_t*>(data) = planc::victim_rank(v);
        return SLURM_SUCCESS;
      }
      case PREEMPT_DATA_GRACE_TIME:
        *static_cast<uint32_t*>(data) = grace_and_count(job_ptr);
        return SLURM_SUCCESS;
    }
    error("%s: unknown preempt data type %d", plugin_type, static_cast<int>(data_type));
    return SLURM_ERROR;
  } catch (const std::exception& e) {
    error("%s: get_data: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}
