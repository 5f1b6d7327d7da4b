// slurmctld/planc's capacity infusion (issue 16; plugins/ctld_state.h).
// The controller (common/infusion.h decides): each sample feeds the idle
// window; once the window is covered, one decision per sample, acted on
// through Slurm's own RPCs from this worker with no slurmctld lock held
// (a replica is submitted as sbatch would as root; a shrink sends the
// replica SIGTERM, then SIGKILL after the pool's DrainGrace).  Idle GPUs
// are those neither allocated nor asked for by a pending replica (a
// replica being started is promised its GPUs).  The worker alone touches
// the controller's state; `scontrol show config` and the metrics read
// c.infusion_shown, c.infusion_ops and c.infusion_replicas (infusion_mu).
#include "plugins/ctld_state.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <optional>

#include "common/file_system.h"     // read_trusted_script
#include "common/preempt_policy.h"  // format_utc

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
// by then, usually: the kill then finds nothing, which is fine).  A killed
// replica stays in c.draining (its deadline 0: killed) until the sample no
// longer sees it running: it is ending, never picked again.
void kill_drained(Controller& c, time_t now) {
  for (auto& [id, when] : c.draining) {
    if (!when || when > now) continue;
    int rc = planc::slurm::signal_job_rpc(id, SIGKILL);
    if (rc != SLURM_SUCCESS && rc != ESLURM_ALREADY_DONE && rc != ESLURM_INVALID_JOB_ID)
      error("%s: infusion: JobId=%u: kill after its drain grace failed: %s", plugin_type, id,
            slurm_strerror(rc));
    when = 0;
  }
}

// Forgets the replicas drained that no longer run.
void forget_ended(Controller& c, const std::vector<planc::slurm::ReplicaJob>& replicas) {
  for (auto it = c.draining.begin(); it != c.draining.end();) {
    bool runs = false;
    for (const auto& r : replicas) runs = runs || (r.job_id == it->first && r.running);
    it = runs ? std::next(it) : c.draining.erase(it);
  }
}

// After the drain grace, what a replica's node needs to be free again
// (the kill, the epilog, the scheduler's next pass): how long a guaranteed
// job a replica was drained for is kept from preempting anything else.
constexpr time_t kReclaimCleanupSeconds = 20;

// Starts draining a replica: SIGTERM, SIGKILL after `grace` (a pending one
// is cancelled).  Returns Slurm's error code.
int drain(Controller& c, const planc::slurm::ReplicaJob& r, uint32_t grace, time_t now) {
  if (!r.running) return planc::slurm::signal_job_rpc(r.job_id, SIGKILL);
  const int rc = planc::slurm::signal_job_rpc(r.job_id, SIGTERM);
  if (rc == SLURM_SUCCESS) c.draining[r.job_id] = now + grace;
  return rc;
}

// The pools this slurmctld may run (planc.conf's, less those it refuses:
// run as root or as the SlurmUser, or whose Script others could change),
// checked when planc.conf changes; a refusal is logged when it starts.
std::vector<const planc::PoolConfig*> usable_pools(Controller& c, const planc::PlancConfig& cfg,
                                                   bool reloaded) {
  if (reloaded || !c.pools_checked) {
    std::map<std::string, std::string> refused;
    const std::string slurm_user = slurm_conf.slurm_user_name ? slurm_conf.slurm_user_name : "";
    for (const planc::PoolConfig& p : cfg.infusion.pools) {
      std::string script;
      if (auto why = planc::pool_user_refusal(p, slurm_user))
        refused[p.name] = *why;
      else if (auto bad = planc::read_trusted_script(p.script, &script))
        refused[p.name] = "pool '" + p.name + "': " + *bad;
    }
    for (const auto& [name, why] : refused)
      if (c.refused_pools[name] != why)
        error("%s: infusion: %s; the pool is not used (its replicas are drained)", plugin_type,
              why.c_str());
    c.refused_pools = std::move(refused);
    c.pools_checked = true;
  }
  std::vector<const planc::PoolConfig*> out;
  for (const planc::PoolConfig& p : cfg.infusion.pools)
    if (!c.refused_pools.count(p.name)) out.push_back(&p);
  return out;
}

// Keeps preempt/planc from adding victims for `jobs` until `until`
// (planc_reclaiming_for_v1); none: forgets them all.
void reclaim_for(Controller& c, const std::vector<uint32_t>& jobs, time_t until)
    EXCLUDES(c.reclaim_mu) {
  planc::MutexLock l(c.reclaim_mu);
  const time_t now = time(nullptr);
  for (auto it = c.reclaiming_for.begin(); it != c.reclaiming_for.end();)
    it = it->second <= now ? c.reclaiming_for.erase(it) : std::next(it);
  for (uint32_t id : jobs) c.reclaiming_for[id] = std::max(c.reclaiming_for[id], until);
  c.any_reclaim = !c.reclaiming_for.empty();
}

}  // namespace

std::optional<time_t> infusion_next_kill(const Controller& c) {
  std::optional<time_t> at;
  for (const auto& [id, when] : c.draining)
    if (when) at = std::min(at.value_or(when), when);
  return at;
}

bool reclaiming_for(Controller& c, uint32_t job_id, time_t now) {
  planc::MutexLock l(c.reclaim_mu);
  auto it = c.reclaiming_for.find(job_id);
  return it != c.reclaiming_for.end() && it->second > now;
}

void infusion_tick(Controller& c, const planc::PlancConfig& cfg, const planc::PoolUsage& pool,
                   const planc::slurm::InfusionJobs& jobs, bool reloaded,
                   bool guaranteed_submitted) {
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
  const std::vector<const planc::PoolConfig*> usable = usable_pools(c, cfg, reloaded);
  const std::vector<planc::slurm::ReplicaJob>& replicas = jobs.replicas;
  forget_ended(c, replicas);
  c.replica_ids.clear();
  for (const auto& r : replicas) c.replica_ids.push_back(r.job_id);
  // Replicas per pool (not those ending: draining, or in a preemption),
  // and the GPUs ending ones are freeing (pending ones' are promised: the
  // worker's idle meter counts them busy).
  std::vector<planc::ServingPool> pools;
  for (const planc::PoolConfig* p : usable)
    pools.push_back({p->name, p->tier, p->gpus_per_replica, p->min_replicas, p->max_replicas, 0});
  std::vector<planc::ReplicaView> views;
  uint64_t freeing = 0, p1_replica_gpus = 0;
  for (const auto& r : replicas) {
    const bool ending = r.ending || c.draining.count(r.job_id);
    views.push_back({r.job_id, r.pool, r.running, ending});
    if (r.running && r.tier == TierId::kP1) p1_replica_gpus += r.gpus;
    if (ending) {
      if (r.running && !r.ending) freeing += r.gpus;  // in a preemption: preempting_gpus has it
      continue;
    }
    for (planc::ServingPool& sp : pools)
      if (sp.name == r.pool) sp.replicas++;
  }
  freeing += jobs.preempting_gpus;
  // Replicas of a pool planc.conf no longer has (or that it refuses):
  // drained, with the drain grace their mark says.
  for (uint32_t id : planc::orphan_replicas(views, pools)) {
    for (const auto& r : replicas)
      if (r.job_id == id && drain(c, r, r.drain_grace_seconds, now) == SLURM_SUCCESS) {
        info(
            "%s: infusion: JobId=%u: a replica of pool %s, which planc.conf no longer has (or "
            "slurmctld refuses): drained (%s)",
            plugin_type, id, r.pool.c_str(),
            r.running
                ? ("SIGTERM, killed after " + std::to_string(r.drain_grace_seconds) + " s").c_str()
                : "cancelled before it started");
        if (r.running) freeing += r.gpus;
      }
  }
  const uint64_t idle_now = c.idle.idle_now();
  // Guaranteed work that giving replicas back would let start
  // (reclaimable_demand): while it waits nothing grows or shrinks by the
  // idle share; when it needs more than is idle within the 80% cap plus
  // what is being freed already (replicas draining, jobs in a preemption's
  // grace), one P1 replica is given back now.
  uint64_t open = idle_now;
  std::optional<uint64_t> cap;
  const uint64_t held = pool.allocated_gpus[planc::tier_index(TierId::kP0)] +
                        pool.allocated_gpus[planc::tier_index(TierId::kP1)];
  if (!cfg.guaranteed_partition.empty()) {
    cap = pool.pool_gpus * cfg.guaranteed_cap_percent / 100;
    open = std::min(open, *cap > held ? *cap - held : 0);
  }
  const planc::GuaranteedDemand demand =
      planc::reclaimable_demand(jobs.guaranteed_waiting, cap, held, p1_replica_gpus);
  planc::GuaranteedNeed need;
  // (A guaranteed job just submitted may not show yet: it holds growth.)
  need.waiting = demand.gpus > 0 || guaranteed_submitted;
  need.reclaim = demand.gpus > open + freeing;
  // A replica not started yet only competes with what waits: cancelled.
  if (demand.gpus > 0)
    for (uint32_t id : planc::pending_replicas(views))
      for (const auto& r : replicas)
        if (r.job_id == id && drain(c, r, 0, now) == SLURM_SUCCESS) {
          info(
              "%s: infusion: JobId=%u: a pending replica of pool %s cancelled: guaranteed jobs "
              "wait for GPUs (the pool grows again from idle GPUs when nothing guaranteed waits)",
              plugin_type, id, r.pool.c_str());
          for (planc::ServingPool& sp : pools)
            if (sp.name == r.pool && sp.replicas) sp.replicas--;
          for (planc::ReplicaView& v : views)
            if (v.job_id == id) v.ending = true;
          c.idle.observe(now, c.idle.idle_now() + r.gpus, c.idle.pool_now());  // no longer promised
        }
  {
    std::string text;
    for (const planc::ServingPool& sp : pools)
      text += (text.empty() ? "" : ",") + sp.name + "=" + std::to_string(sp.replicas);
    planc::MutexLock l(c.infusion_mu);
    c.infusion_shown.replicas = text;
    for (const planc::ServingPool& sp : pools) {
      c.infusion_replicas[sp.name] = sp.replicas;
      // Every pool's counters exist from 0: rate() and increase() see its
      // first operation, and a quiet pool shows 0, not nothing.
      for (const char* action : {"grow", "shrink", "reclaim"})
        c.infusion_ops.try_emplace({sp.name, action}, 0);
    }
  }
  auto m = c.idle.measure(now, cfg.infusion.settings.window_seconds);
  // Giving back does not wait for the idle window: it is not about idle.
  std::optional<planc::InfusionDecision> decided;
  if (m || need.reclaim)
    decided = c.infusion->decide(now, m ? m->idle_gpus : 0, m ? m->pool_gpus : 0, need, pools);
  c.stats.infusion_passes++;
  c.stats.infusion_pass_usec += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  // What is being freed now covers what waits: no other victim for those
  // jobs until the replicas' nodes are free again.
  auto protect = [&](uint64_t freeing_now) {
    time_t until = 0;
    for (const auto& [id, when] : c.draining) until = std::max(until, when);
    // (A protection given ends at its own time: after the replica's kill
    // its node still completes, and what waits no longer shows as freed.)
    if (need.waiting && demand.gpus <= open + freeing_now && (until || freeing_now))
      reclaim_for(c, demand.jobs, std::max(until, now) + kReclaimCleanupSeconds);
    else
      reclaim_for(c, {}, 0);  // only forgets the protections that ended
  };
  if (!decided) {
    protect(freeing);
    return;
  }
  const planc::InfusionDecision& d = *decided;
  if (m) {
    planc::MutexLock l(c.infusion_mu);
    c.infusion_shown.idle = std::to_string(m->idle_gpus) + " of " + std::to_string(m->pool_gpus) +
                            " GPUs over the last " +
                            std::to_string(cfg.infusion.settings.window_seconds) + " s";
    show_limits(c, now);
  }
  if (d.market_round && m) {
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
    protect(freeing);
    // An operation the hourly limit holds back, or every operation held
    // while guaranteed work waits: said once when that starts (not every
    // sample), again when what is held back changes (the cooldown's holds
    // are routine and not logged).
    InfusionHeldKey key{d.held, d.held_action, d.held_tier};
    if (d.held == planc::InfusionHold::kCooldown || d.held == planc::InfusionHold::kNone)
      key = InfusionHeldKey{};
    if (key.held != planc::InfusionHold::kNone && !(key == c.infusion_held))
      info("%s: infusion: %s", plugin_type, d.reason.c_str());
    c.infusion_held = key;
    return;
  }
  c.infusion_held = InfusionHeldKey{};
  const planc::PoolConfig* pc = nullptr;
  for (const planc::PoolConfig* p : usable)
    if (p->name == d.pool) pc = p;
  if (!pc) return;
  uint32_t now_replicas = 0;
  for (const planc::ServingPool& sp : pools)
    if (sp.name == d.pool) now_replicas = sp.replicas;
  std::string did;
  if (d.action == planc::InfusionAction::kGrow) {
    std::string why;
    const uint32_t drain_seconds = pc->drain_grace_seconds > 2 ? pc->drain_grace_seconds - 2 : 0;
    uint32_t id = planc::slurm::submit_replica(
        *pc, cfg.tiers.tier(pc->tier).qos,
        planc::infused_mark(pc->name, pc->tier, pc->drain_grace_seconds), drain_seconds, &why);
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
    // Its GPUs are promised from now: the idle meter hears it now, not at
    // the next sample (a decision meanwhile would count them idle).
    c.idle.observe(
        now,
        c.idle.idle_now() > pc->gpus_per_replica ? c.idle.idle_now() - pc->gpus_per_replica : 0,
        c.idle.pool_now());
    did = "grew pool " + pc->name + " to " + std::to_string(now_replicas + 1) +
          " replica(s) (JobId=" + std::to_string(id) + ")";
    count_infusion_op(c, pc->name, "grow");
  } else {
    const auto victim_id = planc::shrink_victim(views, pc->name, d.reclaim);
    const planc::slurm::ReplicaJob* victim = nullptr;
    for (const auto& r : replicas)
      if (victim_id && r.job_id == *victim_id) victim = &r;
    if (!victim) {
      protect(freeing);
      return;
    }
    const int rc = drain(c, *victim, pc->drain_grace_seconds, now);
    if (rc != SLURM_SUCCESS) {
      c.stats.infusion_failures++;
      error("%s: infusion: %s: JobId=%u: %s failed: %s", plugin_type, d.reason.c_str(),
            victim->job_id, victim->running ? "SIGTERM" : "cancel", slurm_strerror(rc));
      protect(freeing);
      return;
    }
    if (victim->running) freeing += victim->gpus;
    did = std::string(d.reclaim ? "gave back" : "shrank") + " pool " + pc->name + " to " +
          std::to_string(now_replicas - 1) +
          " replica(s) (JobId=" + std::to_string(victim->job_id) +
          (victim->running ? " SIGTERM, killed after its drain grace of " +
                                 std::to_string(pc->drain_grace_seconds) + " s"
                           : " cancelled before it started") +
          ")";
    count_infusion_op(c, pc->name, d.reclaim ? "reclaim" : "shrink");
  }
  protect(freeing);
  c.infusion->done(now, d);
  info("%s: infusion: %s: %s; %u operation(s) in the last hour of at most %u", plugin_type,
       did.c_str(), d.reason.c_str(), c.infusion->ops_last_hour(now),
       cfg.infusion.settings.max_ops_per_hour);
  planc::MutexLock l(c.infusion_mu);
  c.infusion_shown.last_operation = planc::format_utc(now) + ": " + did + ": " + d.reason;
  show_limits(c, now);
}

}  // namespace planc::ctld
