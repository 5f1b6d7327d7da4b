// preempt/planc's worker and the bookkeeping behind Slurm's GRACE_TIME
// question and the completion hook (plugins/preempt_state.h).  What to do
// and when comes from PreemptionTracker (common/); the Slurm calls are the
// adapter's.
#include "plugins/preempt_state.h"

#include <chrono>
#include <exception>

#include "common/infusion.h"
#include "common/metrics_snapshot.h"
#include "common/preempt_policy.h"
#include "common/state_file.h"
#include "plugins/planc_shared.h"
#include "plugins/worker_thread.h"

namespace planc::preempt {
namespace {

using planc::PreemptionTracker;
using planc::Tier;
using planc::TrackerAction;
using Clock = std::chrono::system_clock;

// The state file is written at most this often: a burst of preemptions is
// one write (with fsync), not one each.  A crash loses at most the last
// second's changes.
constexpr auto kStateWriteInterval = std::chrono::seconds(1);
// While preemptions are in flight the worker looks every tick: each pass a
// robbed preemptor waits costs a scheduling pass.
constexpr auto kBusyTick = std::chrono::milliseconds(200);
constexpr auto kIdleTick = std::chrono::milliseconds(5000);
// How often the metrics snapshot is written (the idle tick's pace).
constexpr auto kMetricsInterval = std::chrono::seconds(5);
// How often one pass takes the jobs' view again when Slurm changed the
// tracker while it was taken.
constexpr int kViewTries = 3;
// A pass that starts or lasts longer than this past its time is logged.
constexpr auto kStallReport = std::chrono::seconds(10);

planc::TimeMs now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

// One planc.conf as the hot paths read it.  Immutable.
}  // namespace

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
      [&] { return fresh_tracker(cfg); },
      "starting with no preemptions counted (the per-job cap restarts from zero) and no grace "
      "in progress");
  if (!loaded.problem.empty())
    error("%s: %s", plugin_type, loaded.problem.c_str());
  else
    info("%s: %zu job(s) with preemptions counted, %zu in their grace, from %s", plugin_type,
         loaded.value.ledger().size(), loaded.value.in_grace(), path.c_str());
  return std::move(loaded.value);
}

bool write_budget(const Plugin& p, const std::string& text) {
  if (auto err = planc::write_file_atomically(p.budget_path, text)) {
    error("%s: cannot save the P3 preemption budget: %s", plugin_type, err->c_str());
    return false;
  }
  return true;
}

planc::PreemptBudget load_budget(const planc::PlancConfig& cfg, const std::string& path) {
  auto loaded = planc::load_state_file<planc::PreemptBudget>(
      path, time(nullptr),
      [&](const std::string& text) {
        return planc::PreemptBudget::parse(text, cfg.p3_preempt_max_percent,
                                           cfg.p3_preempt_window_seconds);
      },
      [&] { return fresh_budget(cfg); }, "the P3 preemption budget counts from now");
  if (!loaded.problem.empty()) error("%s: %s", plugin_type, loaded.problem.c_str());
  return std::move(loaded.value);
}

void take_control(Plugin& p) {
  info("%s: in control: reading the preemption state the last controller saved", plugin_type);
  const planc::PlancConfig& cfg = *policy(p).config;
  PreemptionTracker t = load_state(cfg, p.state_path);
  planc::PreemptBudget b = load_budget(cfg, p.budget_path);
  {
    planc::MutexLock l(p.mu);
    p.tracker = std::move(t);
    p.budget = std::move(b);
    p.kill_orders.clear();
    p.in_ledger.rebuild(p.tracker.ledger().job_ids());
    p.standby = false;
    p.wake = true;
  }
  p.cv.notify_one();
}

void give_up_control(Plugin& p) {
  std::string text, budget;
  size_t counted = 0, in_grace = 0;
  planc::MutexLock w(p.write_mu);
  {
    planc::MutexLock l(p.mu);
    if (p.standby) return;
    text = p.tracker.serialize();
    budget = p.budget.serialize();
    counted = p.tracker.ledger().size();
    in_grace = p.tracker.in_grace();
    const planc::PlancConfig& cfg = *policy(p).config;
    p.tracker = fresh_tracker(cfg);
    p.budget = fresh_budget(cfg);
    p.kill_orders.clear();
    p.in_ledger.rebuild({});
    p.standby = true;
  }
  write_budget(p, budget);
  if (write_state(p, text))
    info("%s: control given up: %zu job(s) with preemptions counted, %zu in their grace, saved",
         plugin_type, counted, in_grace);
}

namespace {

// --- the worker ------------------------------------------------------------------

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
  p.budget.set_limits(cfg->p3_preempt_max_percent, cfg->p3_preempt_window_seconds);
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
  slurmctld_lock_t locks = planc::slurm::job_update_locks();
  lock_slurmctld(locks);
  const time_t now = time(nullptr);
  for (const TrackerAction& a : actions) {
    bool ok = false;
    switch (a.kind) {
      case K::kKill:
        kills.push_back(a);
        continue;
      case K::kEndGrace: {
        bool rq = planc::slurm::requeues(a.job_id).value_or(a.event.requeue);
        planc::PreemptionOutcome o{
            rq ? planc::PreemptionEnd::kRequeued : planc::PreemptionEnd::kCancelled, now, ""};
        ok =
            planc::slurm::end_grace(a.job_id, a.preemptor, planc::preemption_note(cfg, a.event, o));
        reschedule = reschedule || ok;
        break;
      }
      case K::kCallOff: {
        planc::PreemptionOutcome o{planc::PreemptionEnd::kCalledOff, now, a.reason};
        ok = planc::slurm::call_off(a.job_id, planc::preemption_note(cfg, a.event, o));
        if (ok) {
          {
            planc::MutexLock l(p.mu);
            p.budget.unrecord(a.job_id, a.event.when);
          }
          info(
              "%s: JobId=%u: preemption by JobId=%u called off (%s); it keeps running and the "
              "preemption is not counted",
              plugin_type, a.job_id, a.preemptor, a.reason.c_str());
        }
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
          info("%s: JobId=%u ended during its grace: requeued as preempted", plugin_type, a.job_id);
        else
          error("%s: JobId=%u ended during its grace but could not be requeued: %s", plugin_type,
                a.job_id, slurm_strerror(rc));
        break;
      }
      case K::kReleasePreemptor:
        ok = planc::slurm::release_preemptor(a.job_id);
        if (ok)
          debug(
              "%s: JobId=%u: the resources its preemption freed went to another job; it may "
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

// Moves requeued --spot-fallback jobs to their guaranteed tier (one hold of
// the update locks).  Returns the jobs settled: moved, refused or gone.
std::vector<uint32_t> fall_back(Plugin& p, const std::vector<std::pair<uint32_t, uint32_t>>& ids) {
  using K = planc::slurm::FallbackResult::Kind;
  const Policy& pol = policy(p);
  const planc::PlancConfig& cfg = *pol.config;
  std::vector<std::pair<uint32_t, planc::slurm::FallbackResult>> results;
  slurmctld_lock_t locks = planc::slurm::job_update_locks();
  lock_slurmctld(locks);
  for (const auto& [id, run] : ids)
    results.emplace_back(id, planc::slurm::apply_fallback(cfg, pol.tiers, id, run, time(nullptr)));
  unlock_slurmctld(locks);
  std::vector<uint32_t> settled;
  bool moved = false;
  for (const auto& [id, r] : results) {
    if (r.kind == K::kNotYet) continue;
    settled.push_back(id);
    const char* from = cfg.tiers.tier(r.from).label.c_str();
    const char* to = cfg.tiers.tier(r.to).label.c_str();
    if (r.kind == K::kMoved) {
      moved = true;
      info("%s: JobId=%u: preempted as %s with --spot-fallback: requeued in %s (%s)", plugin_type,
           id, from, to, cfg.tiers.tier(r.to).qos.c_str());
    } else if (r.kind == K::kRefused) {
      error(
          "%s: JobId=%u: --spot-fallback: the move from %s to %s was refused (%s); the job "
          "stays in %s and its AdminComment says why",
          plugin_type, id, from, to, r.why.c_str(), from);
    } else if (r.kind == K::kMissed) {
      error(
          "%s: JobId=%u: --spot-fallback: it started again in %s before it could be moved to "
          "%s; it falls back at its next preemption",
          plugin_type, id, from, to);
    }
  }
  if (moved) queue_job_scheduler();  // only signals the scheduler thread
  // The market looks at each at once: a job moved out of P2 is no longer
  // its bid (its hold is released); one that stays bids.
  if (auto notice = p.market_notice.load())
    for (uint32_t id : settled) notice(id);
  return settled;
}

// slurmctld/planc's calls (plugins/planc_shared.h), looked up until found:
// it loads after this plugin.
void find_ctld_calls(Plugin& p) {
  if (!p.reclaiming_for.load()) p.reclaiming_for = planc::find_reclaiming_for();
  if (!p.market_notice.load()) p.market_notice = planc::find_market_notice();
  if (!p.p3_running.load()) p.p3_running = planc::find_p3_running();
}

// Forgets the counts of jobs that have ended.
void forget_ended_jobs(Plugin& p) {
  std::vector<uint32_t> ids;
  {
    planc::MutexLock l(p.mu);
    p.tracker.prune(time(nullptr));
    p.budget.prune(time(nullptr));
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

// The metrics snapshot: the ledger's counts under mu, the jobs' tiers
// under the job read lock, the file written outside every lock.
void write_metrics(Plugin& p) {
  std::vector<uint32_t> ids;
  std::vector<uint32_t> counts;
  std::array<uint64_t, planc::kTierCount> started;
  uint32_t budget_used = 0;
  std::optional<uint32_t> budget_left;
  const time_t now = time(nullptr);
  {
    planc::MutexLock l(p.mu);
    const planc::PreemptLedger& ledger = p.tracker.ledger();
    ids = ledger.job_ids();
    for (uint32_t id : ids) counts.push_back(ledger.count_in_window(id, now));
    started = p.preemptions_started;
    budget_used = p.budget.used(now);
    budget_left = budget_remaining(p, now);
  }
  std::map<uint32_t, planc::TierId> tiers;
  if (!ids.empty()) {  // no lock for an empty ledger, the usual case
    slurmctld_lock_t job_read = {.job = READ_LOCK};
    lock_slurmctld(job_read);
    tiers = planc::slurm::tiers_of(policy(p).tiers, ids);
    unlock_slurmctld(job_read);
  }
  std::vector<std::pair<planc::TierId, uint32_t>> per_job;
  for (size_t i = 0; i < ids.size(); i++)
    if (auto it = tiers.find(ids[i]); it != tiers.end())
      per_job.emplace_back(it->second, counts[i]);
  planc::MetricsSnapshot s;
  s.source = "preempt";
  s.written = now;
  planc::add_preemption_samples(started, per_job, ids.size(), &s);
  s.samples.push_back({"planc_p3_preempt_budget_used", {}, static_cast<double>(budget_used)});
  if (budget_left)
    s.samples.push_back(
        {"planc_p3_preempt_budget_remaining", {}, static_cast<double>(*budget_left)});
  if (auto err = planc::write_file_atomically(p.metrics_path, planc::serialize_snapshot(s),
                                              planc::Durability::kNoSync))
    error("%s: metrics snapshot: %s", plugin_type, err->c_str());
}

}  // namespace

void run_worker(Plugin* pp) {
  Plugin& p = *pp;
  time_t last_sweep = time(nullptr);
  auto last_metrics = std::chrono::steady_clock::now() - kMetricsInterval;
  auto last_write = std::chrono::steady_clock::now() - kStateWriteInterval;
  // Until slurmctld has loaded its jobs and the first snapshot is out, the
  // worker looks every short tick: after a restart the snapshot on disk is
  // the one from before, stale, and planc-exporter reports the source down
  // until this plugin writes again (CI saw it 4 s after a restart, when
  // the other two plugins had written and this one still slept its 5 s).
  bool first_snapshot_written = false;
  planc::MutexLock l(p.mu);
  while (!p.stop) {
    bool busy = p.tracker.busy() || p.tracker.dirty() || !p.tracker.fallbacks().empty();
    p.worker_idle = !busy;
    // The wait runs on the steady clock, as the other plugins' do: a step
    // of the wall clock (NTP on a machine just booted) neither stalls the
    // worker nor wakes it early.  The tracker's due times are wall-clock
    // milliseconds, so they become a delay from now.
    auto wake = std::chrono::steady_clock::now() +
                (busy || (!first_snapshot_written && !p.standby) ? kBusyTick : kIdleTick);
    if (auto due = p.tracker.next_due())
      wake = std::min(wake,
                      std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(std::max<planc::TimeMs>(0, *due - now_ms())));
    while (!p.stop && !p.wake && p.cv.wait_until(l, wake) == std::cv_status::no_timeout) {
    }
    p.wake = false;
    p.worker_idle = false;
    if (p.stop) break;
    const auto pass_start = std::chrono::steady_clock::now();
    if (pass_start - wake > kStallReport)
      error("%s: the worker woke %lld s late (the metrics snapshot and graces waited)", plugin_type,
            static_cast<long long>(
                std::chrono::duration_cast<std::chrono::seconds>(pass_start - wake).count()));
    l.unlock();
    reload(p);
    find_ctld_calls(p);
    l.lock();
    // Nothing about jobs can be known before slurmctld has loaded them
    // (after a restart the tracker may already hold graces); on standby
    // the jobs and the files are another controller's.
    if (!planc::slurm::jobs_loaded() || p.standby) continue;
    // The view is taken without mu (Slurm's callbacks take mu under the job
    // write lock).  A callback meanwhile (a scheduling pass preempting a
    // node's second job, a run ending) makes it stale: look again, a few
    // times at most; a pass that never gets a fresh view plans nothing.
    std::map<uint32_t, planc::JobView> seen;
    bool fresh = false;
    for (int tries = 0; p.tracker.busy() && !fresh && tries < kViewTries; tries++) {
      std::vector<uint32_t> ids = p.tracker.watched();
      const uint64_t version = p.tracker.version();
      l.unlock();
      slurmctld_lock_t job_read = {.job = READ_LOCK};
      lock_slurmctld(job_read);
      {
        const Policy& pol = policy(p);
        seen = planc::slurm::view_jobs(ids, *pol.config, pol.tiers);
      }
      unlock_slurmctld(job_read);
      l.lock();
      fresh = p.tracker.version() == version;
    }
    if (fresh) {
      auto actions = p.tracker.plan(now_ms(), seen);
      if (!actions.empty()) {
        l.unlock();
        carry_out(p, actions);
        l.lock();
      }
    }
    if (!p.tracker.fallbacks().empty()) {
      std::vector<std::pair<uint32_t, uint32_t>> ids(p.tracker.fallbacks().begin(),
                                                     p.tracker.fallbacks().end());
      l.unlock();
      std::vector<uint32_t> settled = fall_back(p, ids);
      l.lock();
      for (uint32_t id : settled) p.tracker.fallback_settled(id);
    }
    if (std::chrono::steady_clock::now() - last_metrics >= kMetricsInterval) {
      l.unlock();
      write_metrics(p);
      first_snapshot_written = true;
      last_metrics = std::chrono::steady_clock::now();
      l.lock();
    }
    if (time(nullptr) - last_sweep >= 60) {
      l.unlock();
      forget_ended_jobs(p);
      last_sweep = time(nullptr);
      l.lock();
    }
    if (auto took = std::chrono::steady_clock::now() - pass_start; took > kStallReport)
      error("%s: one pass of the worker took %lld s (slurmctld's job lock or the disk)",
            plugin_type,
            static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(took).count()));
    if ((!p.tracker.dirty() && !p.budget.dirty()) ||
        std::chrono::steady_clock::now() - last_write < kStateWriteInterval)
      continue;
    l.unlock();
    {
      planc::MutexLock w(p.write_mu);
      std::string text, budget;
      {
        planc::MutexLock again(p.mu);
        if (p.tracker.dirty()) text = p.tracker.serialize();
        if (p.budget.dirty()) budget = p.budget.serialize();
      }
      // Outside mu and slurmctld's locks.
      if (!text.empty()) write_state(p, text);
      if (!budget.empty()) write_budget(p, budget);
    }
    last_write = std::chrono::steady_clock::now();
    l.lock();
  }
}

// --- Slurm's questions -------------------------------------------------------------

namespace {
std::optional<uint32_t> p3_running_now(Plugin& p) {
  if (auto f = p.p3_running.load(std::memory_order_relaxed)) {
    const int64_t n = f();
    if (n >= 0) return static_cast<uint32_t>(n);
  }
  return std::nullopt;
}
}  // namespace

std::optional<uint32_t> budget_remaining(Plugin& p, time_t now) {
  if (!p.budget.enabled()) return std::nullopt;
  return p.budget.remaining(now, p3_running_now(p));
}

std::optional<uint32_t> refresh_budget(Plugin& p, time_t now) {
  if (!p.budget.enabled()) {
    p.p3_soft_reached.store(false, std::memory_order_relaxed);
    return std::nullopt;
  }
  const auto running = p3_running_now(p);
  // The victim rank puts P3 runs after P2 ones from the soft share on.
  p.p3_soft_reached.store(p.budget.reached(policy(p).config->p3_soft_percent(), now, running),
                          std::memory_order_relaxed);
  return p.budget.remaining(now, running);
}

uint32_t start_preemption(Plugin& p, job_record_t* job) {
  const Policy& pol = policy(p);
  const planc::PlancConfig& cfg = *pol.config;
  const Tier* victim = planc::slurm::job_tier(pol.tiers, job);
  if (!victim) return 0;
  // A grace this plugin started and Slurm lost (see resume_grace): it goes
  // on to its first deadline, uncounted again and without a second SIGTERM.
  std::optional<planc::TimeMs> left;
  {
    planc::MutexLock l(p.mu);
    left = p.tracker.resume_grace(job->job_id, job->restart_cnt, p.last_preemptor,
                                  p.last_preemptor_tier, now_ms());
    if (left) {
      p.wake = true;
      p.worker_idle = false;
    }
  }
  if (left) {
    p.cv.notify_one();
    const uint32_t seconds = static_cast<uint32_t>((*left + 999) / 1000);
    info(
        "%s: %pJ preempted again by JobId=%u: its grace began before this slurmctld took "
        "control and goes on (%u s left), not counted again",
        plugin_type, job, p.last_preemptor, seconds);
    return seconds + planc::kSlurmGraceExtraSeconds;
  }
  planc::PreemptionEvent e;
  e.victim_job = job->job_id;
  e.victim_run = job->restart_cnt;
  e.victim_tier = victim->id;
  e.when = time(nullptr);
  e.grace_seconds = victim->grace_seconds;
  e.requeue = planc::slurm::requeues(job);
  // A P1 replica capacity infusion added, reclaimed for guaranteed work:
  // its pool's drain grace, never requeued (issue 16).
  const auto replica =
      victim->id == TierId::kP1 ? planc::slurm::infused_mark_of(job) : std::nullopt;
  if (replica) {
    e.grace_seconds = replica->drain_grace_seconds;
    e.requeue = false;
  }
  if (p.last_preemptor && (cfg.tiers.can_preempt(p.last_preemptor_tier, victim->id) ||
                           (replica && !cfg.tiers.tier(p.last_preemptor_tier).preemptible))) {
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
  if (!e.grace_seconds && job->batch_flag) kill = planc::slurm::job_signal_order(job, SIGKILL);
  // A --spot-fallback job to be requeued: the worker moves it to its
  // guaranteed tier once it is pending again (rare: woken at once).
  const bool fallback = e.requeue && planc::slurm::fallback_pending(job);
  const bool counts_p3 = planc::slurm::counted_tier_of(job, victim->id) == TierId::kP3;
  bool wake;
  {
    planc::MutexLock l(p.mu);
    if (fallback) p.tracker.expect_fallback(job->job_id, job->restart_cnt);
    e = p.tracker.start(e, now_ms());
    p.preemptions_started[planc::tier_index(victim->id)]++;
    if (counts_p3) {
      p.budget.record(job->job_id, e.when);
      refresh_budget(p, e.when);  // the victim rank sees it at once
    }
    // The next preemptable() works the preemptor's budget out again; the
    // other victims of this preemption keep the answer they were given
    // (p3_budget_refuses() answers only within a round).
    if (counts_p3) p.budget_preemptor = 0;
    p.in_ledger.add(job->job_id);
    if (kill) p.kill_orders[job->job_id] = std::move(*kill);
    wake = e.grace_seconds || p.worker_idle || fallback;
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
  // Slurm's deadline a second past the plugin's (kSlurmGraceExtraSeconds):
  // the worker ends the grace on time, to the millisecond.
  return e.grace_seconds ? e.grace_seconds + planc::kSlurmGraceExtraSeconds : 0;
}

int run_ended(Plugin& p, job_record_t* job) {
  using RK = PreemptionTracker::RunEnd::Kind;
  const planc::PlancConfig& cfg = *policy(p).config;
  planc::RunEndFacts facts = planc::slurm::run_end_facts(job);
  planc::RunEndVerdict verdict = planc::judge_run_end(cfg, facts);
  const bool requeue = planc::slurm::requeues(job);
  PreemptionTracker::RunEnd r;
  {
    planc::MutexLock l(p.mu);
    r = p.tracker.run_ended(job->job_id, verdict, requeue, now_ms());
    if (r.kind == RK::kTreatAsPreempted && requeue) p.wake = true;
    // A scheduling pass ended the grace before the worker: Slurm's SIGTERM
    // follows, and the worker's SIGKILL if the job outlives it.
    if (r.kind == RK::kSlurmEnded && job->batch_flag)
      p.kill_orders[job->job_id] = planc::slurm::job_signal_order(job, SIGKILL);
  }
  if (r.kind == RK::kDuplicate) return kRunEndDuplicate;
  if (r.kind == RK::kNone) return 0;
  const time_t now = time(nullptr);
  if (r.kind == RK::kSlurmEnded) {
    planc::PreemptionOutcome o{
        requeue ? planc::PreemptionEnd::kRequeued : planc::PreemptionEnd::kCancelled, now, ""};
    if (r.event) planc::slurm::set_owner_note(job, planc::preemption_note(cfg, *r.event, o));
    return 0;  // PREEMPTED already: Slurm's state says it all
  }
  if (r.kind == RK::kTreatAsPreempted && requeue) p.cv.notify_one();
  planc::slurm::set_run_end_state(job, verdict);
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
}

}  // namespace planc::preempt
