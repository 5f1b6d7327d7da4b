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
