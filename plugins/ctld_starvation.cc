// slurmctld/planc's starvation upgrade and daily spot cap
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
#include "plugins/ctld_state.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/job_marks.h"
#include "common/preempt_policy.h"  // format_utc
#include "common/starvation.h"
#include "common/state_file.h"

namespace planc::ctld {
namespace {

using planc::TierId;

slurmctld_lock_t job_read_lock() { return {.job = READ_LOCK}; }

std::string comment_after_upgrade(const Controller& c, uint32_t job_id, const planc::Upgrade& u,
                                  time_t now, int64_t nice_added) {
  std::string mark = planc::free_attempt_mark(*c.config, u.from, u.to, now, u.waited_seconds,
                                              planc::reason_name(u.reason), nice_added);
  return planc::add_free_attempt_mark(planc::slurm::admin_comment(job_id), mark);
}

// One job per lock hold; the facts are read again under the write lock, so
// a job that started, was held or changed tier since the scan is skipped.
// The QoS goes first (Slurm recomputes the priority), then the Nice that
// takes the new QoS's part of it off again: the attempt queues where it
// queued in its own tier, below every paying job of the tier it is lent.
// An array's pending tasks share one record until they start: the attempt
// goes to its first pending task alone, split off (each task is a job with
// one attempt of its own, and the share counts each); the others stay in
// their tier.  Returns the id of the job upgraded, 0 when none was.
uint32_t upgrade(Controller& c, const planc::Upgrade& planned) {
  const planc::PlancConfig& cfg = *c.config;
  slurmctld_lock_t locks = planc::slurm::job_update_locks();
  lock_slurmctld(locks);
  time_t now = time(nullptr);
  auto job = planc::slurm::pending_job(*c.tiers, planned.job_id);
  int rc = SLURM_SUCCESS;
  bool done = false;
  int64_t nice_added = 0;
  planc::Upgrade u = planned;
  const bool starving = job && planc::is_starving(cfg, *job, now);
  if (starving) {
    u.waited_seconds = static_cast<uint32_t>(now - job->eligible_since);
    u.reason = job->reason;
    u.job_id = planc::slurm::one_job_of(planned.job_id);
    if (!u.job_id) rc = ESLURM_INVALID_JOB_ID;
  }
  if (starving && u.job_id) {
    const auto before = planc::slurm::job_priority(u.job_id);
    std::string comment = comment_after_upgrade(c, u.job_id, u, now, 0);
    rc = planc::slurm::update_job_as_slurm_user(u.job_id, cfg.tiers.tier(u.to).qos.c_str(),
                                                comment.c_str());
    done = rc == SLURM_SUCCESS;
    const auto after = planc::slurm::job_priority(u.job_id);
    if (done && before && after && !after->fixed && after->priority > before->priority) {
      nice_added = static_cast<int64_t>(after->priority) - before->priority;
      comment = comment_after_upgrade(c, u.job_id, u, now, nice_added);
      const int nrc = planc::slurm::update_job_as_slurm_user(u.job_id, nullptr, comment.c_str(),
                                                             after->nice + nice_added);
      if (nrc != SLURM_SUCCESS) {
        error(
            "%s: JobId=%u: its free attempt's Nice +%lld was refused: %s (it queues with the "
            "paying jobs of its new tier)",
            plugin_type, u.job_id, static_cast<long long>(nice_added), slurm_strerror(nrc));
        nice_added = 0;
      }
    }
  }
  unlock_slurmctld(locks);
  const char* from = cfg.tiers.tier(u.from).label.c_str();
  const char* to = cfg.tiers.tier(u.to).label.c_str();
  if (done)
    info("%s: JobId=%u upgraded from %s to %s (free attempt) after waiting %u s for %s; Nice +%lld",
         plugin_type, u.job_id, from, to, u.waited_seconds,
         std::string(planc::reason_name(u.reason)).c_str(), static_cast<long long>(nice_added));
  else if (rc != SLURM_SUCCESS)
    error("%s: JobId=%u: upgrade to %s failed: %s (tried again next interval)", plugin_type,
          planned.job_id, to, slurm_strerror(rc));
  if (done && u.job_id != planned.job_id)
    info(
        "%s: JobId=%u is a task of array JobId=%u, split off for its free attempt; the array's "
        "other pending tasks stay in %s",
        plugin_type, u.job_id, planned.job_id, from);
  return done ? u.job_id : 0;
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
    const std::string before = planc::slurm::admin_comment(job_id);
    std::string comment = planc::remove_free_attempt_mark(before);
    const char* qos =
        action == planc::MarkAction::kBack ? cfg.tiers.tier(from).qos.c_str() : nullptr;
    // The Nice the attempt added comes off with the mark.
    const int64_t added = planc::free_attempt_nice(before);
    const auto prio = planc::slurm::job_priority(job_id);
    if (added > 0 && prio)
      rc = planc::slurm::update_job_as_slurm_user(job_id, qos, comment.c_str(),
                                                  std::max<int64_t>(0, prio->nice - added));
    else
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
  planc::StarvationQueue& q = c.starving;
  planc::slurm::StarvationFacts f;
  std::vector<uint32_t> watch;
  // Timed from holding the lock (not waiting for it): the scan's cost to
  // the rest of slurmctld.
  slurmctld_lock_t read = job_read_lock();
  lock_slurmctld(read);
  auto t0 = std::chrono::steady_clock::now();
  const time_t now = time(nullptr);
  const planc::slurm::JobIdSpace ids = planc::slurm::job_id_space();
  const bool walk = q.walk_due(now, ids.next, ids.first, ids.max);
  size_t seen;
  if (walk) {
    seen = planc::slurm::collect_pending(*c.tiers, c.gpu_pos.load(), &f, &watch);
  } else {
    const std::vector<uint32_t> due = q.take_due(now, planc::StarvationQueue::take_at_most(cfg));
    seen = planc::slurm::look_up_starvation(
        *c.tiers, c.gpu_pos.load(), due, q.new_ids(ids.next, ids.first, ids.max), q.marked(), &f);
  }
  unlock_slurmctld(read);
  // The free attempts' share of the pool (the worker's last sample).
  const planc::FreeAttemptShare share{planc::free_attempt_cap(cfg, c.idle.pool_now()),
                                      f.free_attempt_gpus};
  if (walk) {
    c.watch.rescanned(std::move(watch));
    std::vector<planc::StarvationQueue::Entry> entries;
    entries.reserve(f.starvable.size() + f.running.size());
    for (const planc::PendingJob& j : f.starvable)
      entries.push_back({j.job_id, planc::starvation_due(cfg, j, now, share.cap_gpus)});
    for (const auto& [id, tier] : f.running)
      entries.push_back({id, planc::starvation_due_running(cfg, tier, now)});
    q.walked(now, ids.next, entries, f.marked_ids);
  } else {
    for (const planc::PendingJob& j : f.starvable)
      q.schedule(j.job_id, planc::starvation_due(cfg, j, now, share.cap_gpus));
    for (const auto& [id, tier] : f.running)
      q.schedule(id, planc::starvation_due_running(cfg, tier, now));
    // The marked jobs were all looked up (those no longer pending or
    // running, or no longer marked, leave; new ones were among the ids).
    q.marked_now(f.marked_ids);
    q.looked(ids.next);
  }
  std::vector<planc::Upgrade> todo = planc::select_upgrades(cfg, f.starvable, now, share);
  c.stats.free_attempt_gpus = f.free_attempt_gpus;
  uint64_t usec = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  c.stats.scans++;
  c.stats.total_scan_usec += usec;
  c.stats.last_scan_usec = usec;
  c.stats.last_scan_jobs = seen;
  c.stats.scan_queued = q.size();
  if (walk) {
    c.stats.scan_walks++;
    c.stats.scan_walk_usec += usec;
    c.stats.scan_last_walk_usec = usec;
  }
  if (usec > c.stats.max_scan_usec) c.stats.max_scan_usec = usec;
  debug("%s: scan %s %zu jobs (%zu may starve, %zu marked) took %lu us; %zu to upgrade",
        plugin_type, walk ? "walked" : "looked at", seen, f.starvable.size(), f.marked.size(),
        static_cast<unsigned long>(usec), todo.size());

  bool changed = false;
  for (const planc::MarkedJob& m : f.marked)
    if (planc::decide_marked(m) != planc::MarkAction::kKeep && settle_mark(c, m.job_id)) {
      changed = true;
      c.stats.reverts++;
      // Back in its own tier (or another) with its clock restarted.
      q.unmark(m.job_id);
      q.schedule(m.job_id, now);
    }
  for (const planc::Upgrade& u : todo)
    if (const uint32_t id = upgrade(c, u)) {
      changed = true;
      c.stats.upgrades++;
      q.mark(id);
      // An array's other pending tasks keep starving on its record.
      if (id != u.job_id) q.schedule(u.job_id, now);
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

namespace {

// Packing guaranteed work: sets the nodes' weights (common/placement.h),
// the nodes held by the guaranteed jobs the sample saw running and by the
// jobs started since (each looked up again: the job-begin hook, which
// queues them, runs under the node write lock, held here).
void steer_guaranteed(Controller& c, bool pack, const std::vector<planc::GuaranteedRun>& running) {
  std::vector<uint32_t> ids;
  for (const planc::GuaranteedRun& r : running) ids.push_back(r.job_id);
  std::string problem;
  size_t changed = 0;
  slurmctld_lock_t write = {.job = READ_LOCK, .node = WRITE_LOCK};
  lock_slurmctld(write);
  try {
    {
      planc::MutexLock l(c.started_mu);
      ids.insert(ids.end(), c.started.begin(), c.started.end());
    }
    changed = planc::slurm::steer_weights(*c.tiers, pack, ids, &problem);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  unlock_slurmctld(write);
  c.stats.weight_changes += changed;
  if (pack)
    c.steered = true;
  else if (problem.empty())
    c.steered = false;  // every weight is slurm.conf's again
  if (!problem.empty()) error("%s: packing guaranteed work: %s", plugin_type, problem.c_str());
}

}  // namespace

std::string spot_sample(Controller& c, int* gpu_pos, const std::string& last_written,
                        planc::PoolUsage* pool, planc::slurm::InfusionJobs* infusion,
                        std::vector<uint32_t>* market_ids) {
  if (*gpu_pos < 0) *gpu_pos = planc::slurm::gpu_tres_position();
  std::vector<uint32_t> tracked = c.ledger->tracked_ids();
  const bool hook_ours = journal_hook_ours();
  planc::slurm::JobSample sample;
  // Packing guaranteed work: whether a node's weight is off, from what the
  // sample sees (steer_guaranteed then sets it under the write lock).
  const bool pack = c.config->pack_guaranteed;
  const bool steer = pack || c.steered.load();
  bool to_steer = false;
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
  try {
    planc::slurm::sample_jobs(*c.tiers, *gpu_pos, tracked, plan, c.replica_ids, &sample);
    to_steer = steer && planc::slurm::weights_to_steer(pack, sample.guaranteed_nodes);
  } catch (...) {
    unlock_slurmctld(read);
    throw;
  }
  unlock_slurmctld(read);
  if (to_steer)
    steer_guaranteed(c, pack, sample.guaranteed_running);
  else if (steer && !pack)
    c.steered = false;  // every weight is slurm.conf's again
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
  *market_ids = std::move(sample.market_ids);
  c.gpu_pos = *gpu_pos;
  c.sla.observe(c.config->sla_start_seconds, sample.guaranteed_running, sample.guaranteed_held,
                sample.guaranteed_pending);
  c.ledger->sample(time(nullptr), sample.spot_running, sample.spot_ended);
  c.p3_running.store(
      std::count_if(sample.spot_running.begin(), sample.spot_running.end(),
                    [](const planc::RunningSpotJob& r) { return r.tier == planc::TierId::kP3; }),
      std::memory_order_relaxed);
  publish_usage(c);
  std::string text = c.ledger->serialize();
  return text == last_written ? std::string() : text;
}

}  // namespace planc::ctld
