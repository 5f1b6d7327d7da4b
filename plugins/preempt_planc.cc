// preempt/planc: the Plan C preemption policy, a drop-in for preempt/qos.
//
// Slurm keeps the candidate search and the locks (src/slurmctld/preempt.c);
// this plugin answers its questions from the core (common/preempt_policy.h,
// common/preemption_tracker.h):
//   preemptable   the tier matrix from planc.conf, and the per-job cap;
//   MODE          requeue when the job is requeueable, else cancel;
//                 guaranteed tiers OFF (never preempted);
//   PRIO          the victim order (a job already in grace first, then P3,
//                 fewest recent preemptions, shortest current run);
//   GRACE_TIME    asked exactly once when a preemption starts: the tier's
//                 grace; the preemption is counted, the owner's note
//                 written and the batch script sent SIGTERM.
// planc_preempt_run_end_v1 is called by jobcomp/planc when any run ends: a
// victim that ends during its grace is what the policy says it is.
// A worker thread carries out what the tracker asks for (end graces on
// time, call preemptions off, kill, requeue, release robbed preemptors) and
// saves the state file.
//
// Locks: Slurm's entry points hold slurmctld's job lock; the plugin's mutex
// is always taken after slurmctld's locks, never held across a call into
// Slurm or any I/O.
#include "plugins/slurm_compat.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "common/preempt_policy.h"
#include "common/preemption_tracker.h"
#include "common/state_file.h"
#include "plugins/config_watch.h"
#include "plugins/mutex.h"
#include "plugins/planc_shared.h"
#include "plugins/slurm_adapter.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] = "Plan C tiered preemption";
PLANC_EXPORT const char plugin_type[] = "preempt/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

using planc::PreemptionTracker;
using planc::Tier;
using planc::TierId;
using planc::TrackerAction;
using Clock = std::chrono::system_clock;

constexpr const char* kStateFile = "planc_preempt_state";
// The state file is written at most this often: a burst of preemptions is
// one write (with fsync), not one each.  A crash loses at most the last
// second's changes.
constexpr auto kStateWriteInterval = std::chrono::seconds(1);
// While preemptions are in flight the worker looks every tick: each pass a
// robbed preemptor waits costs a scheduling pass.
constexpr auto kBusyTick = std::chrono::milliseconds(200);
constexpr auto kIdleTick = std::chrono::milliseconds(5000);

planc::TimeMs now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

// One planc.conf as the hot paths read it.  Immutable.
struct Policy {
  explicit Policy(std::shared_ptr<const planc::PlancConfig> c)
      : config(std::move(c)), tiers(config->tiers) {}
  const std::shared_ptr<const planc::PlancConfig> config;
  const planc::QosTierCache tiers;  // over config->tiers
};

// Everything the plugin holds.  Made by init() and deleted by fini() after
// the worker has stopped; never destroyed at exit, since slurmctld may exit
// without calling fini() (22.05 does for preempt plugins) while the worker
// still runs.
struct Plugin {
  Plugin(std::shared_ptr<const planc::PlancConfig> c, std::string path, PreemptionTracker t)
      : watch(planc::slurm::planc_conf_file(), c), state_path(std::move(path)),
        tracker(std::move(t)) {
    policies.push_back(std::make_unique<Policy>(std::move(c)));
    policy.store(policies.back().get());
  }

  // The policy in force, read without a lock by Slurm's callbacks; a
  // reload (the worker) stores a new one.  Replaced policies are kept until
  // fini(): a callback may still be reading one, and reloads are rare.
  std::atomic<const Policy*> policy{nullptr};
  std::vector<std::unique_ptr<Policy>> policies;  // worker only (and fini)
  planc::ConfigWatch watch;                        // worker only
  const std::string state_path;

  planc::Mutex mu;
  PreemptionTracker tracker GUARDED_BY(mu);
  // SIGKILL orders of graceless victims, captured when they are preempted
  // (their node list is gone once Slurm requeues them).
  std::map<uint32_t, planc::slurm::JobSignal> kill_orders GUARDED_BY(mu);
  // The jobs the ledger may hold, readable without mu by the hot paths.
  // Written under mu.
  planc::LedgerFilter in_ledger;
  std::condition_variable_any cv;
  bool stop GUARDED_BY(mu) = false;
  // Wakes the worker before its tick: a grace deadline to arm, a requeue to
  // do, or the first preemption after a quiet spell.  Not for every
  // preemption: a wake-up from inside the scheduling cycle hands the CPU to
  // the worker while the cycle holds the job write lock (bench-preempt:
  // main cycles 1.5-2.6x longer in wall time at the same CPU).
  bool wake GUARDED_BY(mu) = false;
  bool worker_idle GUARDED_BY(mu) = false;  // sleeping its long sleep
  std::thread* worker = nullptr;

  // The preemptor of the latest preemptable() call: Slurm asks
  // preemptable() for the candidates of one preemptor and then preempts
  // the chosen ones under the same hold of the job write lock, so at
  // GRACE_TIME this names the job that caused the preemption (Slurm does
  // not pass it).  Only touched under slurmctld's job lock.
  uint32_t last_preemptor = 0;
  TierId last_preemptor_tier = TierId::kP0;
};
Plugin* g = nullptr;

bool write_state(const Plugin& p, const std::string& text) {
  if (auto err = planc::write_file_atomically(p.state_path, text)) {
    error("%s: cannot save the preemption state: %s", plugin_type, err->c_str());
    return false;
  }
  return true;
}

PreemptionTracker load_state(const planc::PlancConfig& cfg, const std::string& path) {
  auto loaded = planc::load_state_file<PreemptionTracker>(
      path, time(nullptr),
      [&](const std::string& text) {
        return PreemptionTracker::parse(text, cfg.preempt_max_count, cfg.preempt_window_seconds);
      },
      [&] { return PreemptionTracker(cfg.preempt_max_count, cfg.preempt_window_seconds); },
      "starting with no preemptions counted (the per-job cap restarts from zero) and no grace "
      "in progress");
  if (!loaded.problem.empty())
    error("%s: %s", plugin_type, loaded.problem.c_str());
  else
    info("%s: %zu job(s) with preemptions counted, %zu in their grace, from %s", plugin_type,
         loaded.value.ledger().size(), loaded.value.in_grace(), path.c_str());
  return std::move(loaded.value);
}

// --- the worker ------------------------------------------------------------------

slurmctld_lock_t update_locks() {
  return {.conf = READ_LOCK, .job = WRITE_LOCK, .node = WRITE_LOCK, .part = READ_LOCK,
          .fed = READ_LOCK};
}

const Policy& policy(const Plugin& p) { return *p.policy.load(std::memory_order_acquire); }

// A changed planc.conf: a new policy for what starts from now on; the
// cap's limits apply at once to the counts kept; a grace in progress keeps
// the grace it started with.
void reload(Plugin& p) {
  auto cfg = planc::slurm::reload_plugin_config(plugin_type, &p.watch);
  if (!cfg) return;
  p.policies.push_back(std::make_unique<Policy>(cfg));
  p.policy.store(p.policies.back().get(), std::memory_order_release);
  planc::MutexLock l(p.mu);
  p.tracker.set_limits(cfg->preempt_max_count, cfg->preempt_window_seconds);
}

void send_kills(Plugin& p, const std::vector<TrackerAction>& kills) {
  std::vector<planc::slurm::JobSignal> orders;
  {
    planc::MutexLock l(p.mu);
    for (const auto& a : kills) {
      auto it = p.kill_orders.find(a.job_id);
      if (it == p.kill_orders.end()) continue;
      orders.push_back(std::move(it->second));
      p.kill_orders.erase(it);
    }
  }
  if (orders.empty()) return;
  slurmctld_lock_t job_read = {.job = READ_LOCK};
  lock_slurmctld(job_read);  // the agent looks the jobs up
  for (const auto& o : orders) {
    debug("%s: JobId=%u still ends %lld ms after SIGTERM: SIGKILL", plugin_type, o.job_id,
          static_cast<long long>(planc::kNoGraceKillAfterMs));
    planc::slurm::signal_nodes(o);
  }
  unlock_slurmctld(job_read);
}

// One hold of the update locks for everything else the tracker asked for.
void carry_out(Plugin& p, const std::vector<TrackerAction>& actions) {
  using K = TrackerAction::Kind;
  const planc::PlancConfig& cfg = *policy(p).config;
  std::vector<TrackerAction> kills;
  std::vector<std::pair<TrackerAction, bool>> results;
  bool reschedule = false;
  slurmctld_lock_t locks = update_locks();
  lock_slurmctld(locks);
  const time_t now = time(nullptr);
  for (const TrackerAction& a : actions) {
    bool ok = false;
    switch (a.kind) {
      case K::kKill: kills.push_back(a); continue;
      case K::kEndGrace: {
        bool rq = planc::slurm::requeues(a.job_id).value_or(a.event.requeue);
        planc::PreemptionOutcome o{rq ? planc::PreemptionEnd::kRequeued
                                      : planc::PreemptionEnd::kCancelled, now, ""};
        ok = planc::slurm::end_grace(a.job_id, a.preemptor, planc::preemption_note(cfg, a.event, o));
        reschedule = reschedule || ok;
        break;
      }
      case K::kCallOff: {
        planc::PreemptionOutcome o{planc::PreemptionEnd::kCalledOff, now, a.reason};
        ok = planc::slurm::call_off(a.job_id, planc::preemption_note(cfg, a.event, o));
        if (ok)
          info("%s: JobId=%u: preemption by JobId=%u called off (%s); it keeps running and the "
               "preemption is not counted",
               plugin_type, a.job_id, a.preemptor, a.reason.c_str());
        break;
      }
      case K::kRequeue: {
        {
          planc::MutexLock l(p.mu);
          p.tracker.requeuing(a.job_id);
        }
        int rc = planc::slurm::requeue_preempted(a.job_id);
        ok = rc == SLURM_SUCCESS;
        if (ok)
          info("%s: JobId=%u ended during its grace: requeued as preempted", plugin_type,
               a.job_id);
        else
          error("%s: JobId=%u ended during its grace but could not be requeued: %s",
                plugin_type, a.job_id, slurm_strerror(rc));
        break;
      }
      case K::kReleasePreemptor:
        ok = planc::slurm::release_preemptor(a.job_id);
        if (ok)
          debug("%s: JobId=%u: the resources its preemption freed went to another job; it may "
                "preempt again now",
                plugin_type, a.job_id);
        reschedule = reschedule || ok;
        break;
    }
    results.emplace_back(a, ok);
  }
  unlock_slurmctld(locks);
  send_kills(p, kills);
  {
    planc::MutexLock l(p.mu);
    for (const auto& [a, ok] : results) p.tracker.done(a, ok);
  }
  if (reschedule) queue_job_scheduler();  // only signals the scheduler thread
}

// Forgets the counts of jobs that have ended.
void forget_ended_jobs(Plugin& p) {
  std::vector<uint32_t> ids;
  {
    planc::MutexLock l(p.mu);
    p.tracker.prune(time(nullptr));
    ids = p.tracker.ledger().job_ids();
    p.in_ledger.rebuild(ids);
  }
  if (ids.empty()) return;
  slurmctld_lock_t job_read = {.job = READ_LOCK};
  lock_slurmctld(job_read);
  std::vector<uint32_t> ended = planc::slurm::ended_jobs(ids);
  unlock_slurmctld(job_read);
  if (ended.empty()) return;
  planc::MutexLock l(p.mu);
  p.tracker.forget(ended);
  p.in_ledger.rebuild(p.tracker.ledger().job_ids());
}

void worker(Plugin* pp) {
  Plugin& p = *pp;
  time_t last_sweep = time(nullptr);
  auto last_write = std::chrono::steady_clock::now() - kStateWriteInterval;
  planc::MutexLock l(p.mu);
  while (!p.stop) {
    bool busy = p.tracker.busy() || p.tracker.dirty();
    p.worker_idle = !busy;
    auto wake = Clock::now() + (busy ? kBusyTick : kIdleTick);
    if (auto due = p.tracker.next_due())
      wake = std::min(wake, Clock::time_point(std::chrono::milliseconds(*due)));
    while (!p.stop && !p.wake && p.cv.wait_until(l, wake) == std::cv_status::no_timeout) {
    }
    p.wake = false;
    p.worker_idle = false;
    if (p.stop) break;
    l.unlock();
    reload(p);
    l.lock();
    // Nothing about jobs can be known before slurmctld has loaded them
    // (after a restart the tracker may already hold graces).
    if (!planc::slurm::jobs_loaded()) continue;
    if (p.tracker.busy()) {
      std::vector<uint32_t> ids = p.tracker.watched();
      l.unlock();
      slurmctld_lock_t job_read = {.job = READ_LOCK};
      lock_slurmctld(job_read);
      auto seen = planc::slurm::view_jobs(ids);
      unlock_slurmctld(job_read);
      l.lock();
      auto actions = p.tracker.plan(now_ms(), seen);
      if (!actions.empty()) {
        l.unlock();
        carry_out(p, actions);
        l.lock();
      }
    }
    if (time(nullptr) - last_sweep >= 60) {
      l.unlock();
      forget_ended_jobs(p);
      last_sweep = time(nullptr);
      l.lock();
    }
    if (!p.tracker.dirty() || std::chrono::steady_clock::now() - last_write < kStateWriteInterval)
      continue;
    std::string text = p.tracker.serialize();
    l.unlock();
    write_state(p, text);  // outside every lock
    last_write = std::chrono::steady_clock::now();
    l.lock();
  }
}

// --- Slurm's questions -------------------------------------------------------------

uint32_t grace_and_count(Plugin& p, job_record_t* job) {
  const Policy& pol = policy(p);
  const planc::PlancConfig& cfg = *pol.config;
  const Tier* victim = planc::slurm::job_tier(pol.tiers, job);
  if (!victim) return 0;
  planc::PreemptionEvent e;
  e.victim_job = job->job_id;
  e.victim_tier = victim->id;
  e.when = time(nullptr);
  e.grace_seconds = victim->grace_seconds;
  e.requeue = planc::slurm::requeues(job);
  if (p.last_preemptor && cfg.tiers.can_preempt(p.last_preemptor_tier, victim->id)) {
    e.preemptor_job = p.last_preemptor;
    e.preemptor_tier = p.last_preemptor_tier;
  }
  planc::Entitlement ent = planc::slurm::entitlement_of(cfg, job);
  e.account = ent.account;
  const Tier* advised = planc::advised_tier(cfg, victim->id, ent);
  e.advised_tier = advised ? static_cast<int8_t>(planc::tier_index(advised->id)) : -1;
  // No grace means no grace: Slurm's requeue or cancel, which follows at
  // once, sends SIGTERM, and a victim still dying kNoGraceKillAfterMs later
  // gets SIGKILL from the worker (slurmd alone: 5 s).  Not from here: a
  // signal queued inside the scheduling cycle woke slurmctld's agent, whose
  // threads took the CPU from the cycle.
  std::optional<planc::slurm::JobSignal> kill;
  if (!e.grace_seconds && job->batch_flag)
    kill = planc::slurm::job_signal_order(job, SIGKILL);
  bool wake;
  {
    planc::MutexLock l(p.mu);
    e = p.tracker.start(e, now_ms());
    p.in_ledger.add(job->job_id);
    if (kill) p.kill_orders[job->job_id] = std::move(*kill);
    wake = e.grace_seconds || p.worker_idle;
    if (wake) {
      p.wake = true;
      p.worker_idle = false;
    }
  }
  if (wake) p.cv.notify_one();
  planc::slurm::set_owner_note(job, planc::preemption_note(cfg, e));
  if (e.grace_seconds) planc::slurm::sigterm_batch_script(job);
  info("%s: %pJ (%s) preempted by JobId=%u (%s), grace %u s, %s, preemption %u in window",
       plugin_type, job, victim->label.c_str(), e.preemptor_job,
       e.preemptor_job ? cfg.tiers.tier(e.preemptor_tier).label.c_str() : "?", e.grace_seconds,
       e.requeue ? "requeue" : "cancel", e.count_in_window);
  return e.grace_seconds;
}

}  // namespace

PLANC_EXPORT int init(void) {
  try {
    auto config = planc::slurm::load_plugin_config(plugin_type);
    if (!config) return SLURM_ERROR;
    std::string path = planc::slurm::state_file_path(kStateFile);
    g = new Plugin(config, path, load_state(*config, path));
    {
      planc::MutexLock l(g->mu);
      g->in_ledger.rebuild(g->tracker.ledger().job_ids());
    }
    g->worker = planc::start_worker("planc_preempt", worker, g);
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
  if (!g) return;
  try {
    {
      planc::MutexLock l(g->mu);
      g->stop = true;
    }
    g->cv.notify_all();
    planc::join_worker(g->worker);
    std::string text;
    {
      planc::MutexLock l(g->mu);
      text = g->tracker.serialize();
    }
    write_state(*g, text);
  } catch (const std::exception& e) {
    error("%s: fini: %s", plugin_type, e.what());
  }
  delete g;
  g = nullptr;
}

PLANC_EXPORT bool preempt_p_preemptable(job_record_t* preemptee, job_record_t* preemptor) {
  try {
    const Policy& pol = policy(*g);
    const Tier* ee = planc::slurm::job_tier(pol.tiers, preemptee);
    const Tier* er = planc::slurm::job_tier(pol.tiers, preemptor);
    if (!ee || !er || !pol.config->tiers.can_preempt(er->id, ee->id)) return false;
    g->last_preemptor = preemptor->job_id;
    g->last_preemptor_tier = er->id;
    if (!g->in_ledger.maybe_contains(preemptee->job_id)) return true;
    planc::MutexLock l(g->mu);
    return !g->tracker.capped(preemptee->job_id, time(nullptr));
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
        const Tier* t = planc::slurm::job_tier(policy(*g).tiers, job_ptr);
        uint16_t mode = PREEMPT_MODE_OFF;
        if (t && t->preemptible)
          mode = planc::slurm::requeues(job_ptr) ? PREEMPT_MODE_REQUEUE : PREEMPT_MODE_CANCEL;
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
        const Tier* t = planc::slurm::job_tier(policy(*g).tiers, job_ptr);
        time_t now = time(nullptr);
        planc::VictimFacts v{t ? t->victim_class : uint8_t{3}, 0, 0};
        v.run_minutes = planc::run_minutes(job_ptr->start_time, now);
        if (g->in_ledger.maybe_contains(job_ptr->job_id)) {
          planc::MutexLock l(g->mu);
          v.recent_preemptions = g->tracker.ledger().count_in_window(job_ptr->job_id, now);
        }
        *static_cast<uint32_t*>(data) = planc::victim_rank(v);
        return SLURM_SUCCESS;
      }
      case PREEMPT_DATA_GRACE_TIME:
        *static_cast<uint32_t*>(data) = grace_and_count(*g, job_ptr);
        return SLURM_SUCCESS;
    }
    error("%s: unknown preempt data type %d", plugin_type, static_cast<int>(data_type));
    return SLURM_ERROR;
  } catch (const std::exception& e) {
    error("%s: get_data: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

// See plugins/planc_shared.h.  Called for every run that ends (job write
// lock held): only runs whose preemption was in progress get past the
// first test.
PLANC_EXPORT int planc_preempt_run_end_v1(void* record) {
  auto* job = static_cast<job_record_t*>(record);
  if (!g || !job || !job->preempt_time) return 0;
  try {
    using RK = PreemptionTracker::RunEnd::Kind;
    Plugin& p = *g;
    const planc::PlancConfig& cfg = *policy(p).config;
    planc::RunEndFacts facts = planc::slurm::run_end_facts(job);
    planc::RunEndVerdict verdict = planc::judge_run_end(cfg, facts);
    const bool requeue = planc::slurm::requeues(job);
    PreemptionTracker::RunEnd r;
    {
      planc::MutexLock l(p.mu);
      r = p.tracker.run_ended(job->job_id, verdict, requeue);
      if (r.kind == RK::kTreatAsPreempted && requeue) p.wake = true;
    }
    if (r.kind == RK::kDuplicate) return kRunEndDuplicate;
    if (r.kind == RK::kNone) return 0;
    if (r.kind == RK::kTreatAsPreempted && requeue) p.cv.notify_one();
    planc::slurm::set_run_end_state(job, verdict);
    const time_t now = time(nullptr);
    planc::PreemptionOutcome o{planc::PreemptionEnd::kEndedInGrace, now,
                               planc::describe_wait_status(facts.wait_status)};
    if (r.kind == RK::kFinished) o.end = planc::PreemptionEnd::kFinishedInGrace;
    if (r.kind == RK::kCancelledInGrace)
      o = {planc::PreemptionEnd::kCancelledInGrace, now, planc::slurm::cancelled_by(job)};
    if (r.event) planc::slurm::set_owner_note(job, planc::preemption_note(cfg, *r.event, o));
    info("%s: %pJ ended during its grace (%s): %s", plugin_type, job, o.detail.c_str(),
         r.kind == RK::kFinished           ? "finished (GraceFinishedExitCode), billed"
         : r.kind == RK::kCancelledInGrace ? "cancelled, not billed"
         : requeue                         ? "treated as preempted, to be requeued"
                                           : "treated as preempted");
    return r.kind == RK::kFinished ? 0 : kRunEndPreempted;
  } catch (const std::exception& e) {
    error("%s: run end of %pJ: %s", plugin_type, job, e.what());
    return 0;
  }
}
