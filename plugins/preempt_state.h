// preempt/planc's state and its worker: what the entry points in
// preempt_planc.cc share.  Plugin-internal (includes Slurm's headers).
//
// Locks: Slurm's entry points hold slurmctld's job lock; Plugin::mu is
// always taken after slurmctld's locks and never held across a call into
// Slurm or any I/O.
#ifndef PLANC_PLUGINS_PREEMPT_STATE_H_
#define PLANC_PLUGINS_PREEMPT_STATE_H_

#include "plugins/slurm_compat.h"

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/preempt_budget.h"
#include "common/preemption_tracker.h"
#include "plugins/config_watch.h"
#include "plugins/mutex.h"
#include "plugins/planc_shared.h"
#include "plugins/slurm_adapter_preempt.h"

namespace planc::preempt {

// The P3 budget's file in StateSaveLocation.
inline constexpr const char kBudgetFile[] = "planc_p3_budget";

// Nothing counted yet, under `cfg`'s limits (a first start, a backup on
// standby, a file that cannot be used).
inline planc::PreemptionTracker fresh_tracker(const planc::PlancConfig& cfg) {
  return planc::PreemptionTracker(cfg.preempt_max_count, cfg.preempt_window_seconds);
}
inline planc::PreemptBudget fresh_budget(const planc::PlancConfig& cfg) {
  return planc::PreemptBudget(cfg.p3_preempt_max_percent, cfg.p3_preempt_window_seconds);
}

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
  Plugin(std::shared_ptr<const planc::PlancConfig> c, std::string path, planc::PreemptionTracker t,
         std::string budget_file, planc::PreemptBudget b)
      : watch(planc::slurm::planc_conf_file(), c),
        state_path(std::move(path)),
        budget_path(std::move(budget_file)),
        tracker(std::move(t)),
        budget(std::move(b)) {
    policies.push_back(std::make_unique<Policy>(std::move(c)));
    policy.store(policies.back().get());
  }

  // The policy in force, read without a lock by Slurm's callbacks; a
  // reload (the worker) stores a new one.  Replaced policies are kept until
  // fini(): a callback may still be reading one, and reloads are rare.
  std::atomic<const Policy*> policy{nullptr};
  std::vector<std::unique_ptr<Policy>> policies;  // worker only (and fini)
  planc::ConfigWatch watch;                       // worker only
  const std::string state_path;
  // The P3 budget's preemptions of the window (common/preempt_budget.h).
  const std::string budget_path;
  // The metrics snapshot for planc-exporter (common/metrics_snapshot.h).
  const std::string metrics_path = planc::slurm::state_file_path("planc_metrics_preempt");

  // Held from taking the state's text to writing its files (never with
  // slurmctld's locks or mu held while waiting for it), so the worker's
  // write cannot land after, and undo, give_up_control()'s.
  planc::Mutex write_mu;
  planc::Mutex mu;
  planc::PreemptionTracker tracker GUARDED_BY(mu);
  // On standby: this slurmctld is a backup controller not in control (or
  // one that gave control up).  The worker then does nothing with jobs
  // and writes no file: the state and metrics files are the controller's
  // in control (planc_preempt_control_v1, take_control, give_up_control).
  bool standby GUARDED_BY(mu) = false;
  // The P3 preemption budget (common/preempt_budget.h), saved in
  // budget_path as the tracker is in state_path.
  planc::PreemptBudget budget GUARDED_BY(mu);
  // Preemptions started since slurmctld started, by the victim's tier.
  std::array<uint64_t, planc::kTierCount> preemptions_started GUARDED_BY(mu){};
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
  // slurmctld/planc's answer whether infusion gives replicas back for a
  // guaranteed job (planc_reclaiming_for_v1): looked up by the worker,
  // read by preemptable().
  std::atomic<planc_reclaiming_for_fn> reclaiming_for{nullptr};
  std::atomic<planc_market_notice_fn> market_notice{nullptr};
  std::atomic<planc_p3_running_fn> p3_running{nullptr};
  // The budget as the hot paths read it (only under slurmctld's job lock):
  // the preemptor it was last worked out for (0: none, worked out again at
  // the next ask), the P3 preemptions left to it (UINT32_MAX: no limit),
  // and whether its soft share is reached (the victim rank of a
  // guaranteed preemptor's candidates).  Worked out again for each new
  // preemptor, each second and after each preemption it counts.
  uint32_t budget_preemptor = 0;
  time_t budget_at = 0;
  uint32_t budget_left = 0;
  // For a P2 preemptor that needs whole nodes or GPUs on a node: its
  // nodes, and the P3 candidates it was offered under the limit; whether
  // each may go is decided at PREEMPT_DATA_MODE, by how many runs its best
  // node needs to go (p3_budget_covers).  Otherwise budget_by_node is
  // false and the first budget_left P3 candidates are offered.
  bool budget_by_node = false;
  uint32_t budget_nodes = 1;
  std::unordered_set<uint32_t> budget_offered;
  std::atomic<bool> p3_soft_reached{false};
  planc::TierId last_preemptor_tier = planc::TierId::kP0;
  // The candidates per node of the preemptor being looked at, for one that
  // needs whole nodes or GPUs on a node (victim rank).  Filled under
  // slurmctld's job write lock; read (and worked out, closed) also from
  // PREEMPT_DATA_MODE, which squeue's job packing asks under the read
  // lock, from several threads at once: hence its own mutex.
  planc::Mutex crowding_mu;
  planc::NodeCrowding crowding GUARDED_BY(crowding_mu);
};

// The policy in force (lock-free).
inline const Policy& policy(const Plugin& p) { return *p.policy.load(std::memory_order_acquire); }

// The preemption state saved in StateSaveLocation, or a fresh one (a first
// start, or a file that cannot be used: logged, moved aside).
planc::PreemptionTracker load_state(const planc::PlancConfig& cfg, const std::string& path);
bool write_state(const Plugin& p, const std::string& text);
// The same for the P3 budget (planc_p3_budget).
planc::PreemptBudget load_budget(const planc::PlancConfig& cfg, const std::string& path);
bool write_budget(const Plugin& p, const std::string& text);

// This slurmctld takes control: the saved state is read again (a backup
// taking over, or a primary back after a backup held control, finds what
// the last controller saved) and the worker acts on it.  No slurmctld lock
// held; reads the state file.
void take_control(Plugin& p);
// This slurmctld gives control up (or stops): the state is saved and the
// plugin stands by with nothing counted.  No slurmctld lock held.
void give_up_control(Plugin& p);

// The worker thread's body, until p.stop.
void run_worker(Plugin* p);

// The P3 budget's remaining count at `now` (nullopt: no limit).
std::optional<uint32_t> budget_remaining(Plugin& p, time_t now) REQUIRES(p.mu);
// The same, and sets p.p3_soft_reached (the budget's soft share reached,
// P3PreemptSoftPercent), which the victim rank reads.  Only
// with slurmctld's job lock held (preemptable(), GRACE_TIME), so the rank
// never changes while Slurm sorts the candidates.
std::optional<uint32_t> refresh_budget(Plugin& p, time_t now) REQUIRES(p.mu);

// Slurm's GRACE_TIME question: a preemption of `job` starts.  Returns the
// grace in seconds.  Slurm's job write lock held.
uint32_t start_preemption(Plugin& p, job_record_t* job);

// The run of `job` ended with its preemption in progress (see
// plugins/planc_shared.h).  Returns kRunEnd* flags.  Job write lock held.
int run_ended(Plugin& p, job_record_t* job);

}  // namespace planc::preempt

#endif  // PLANC_PLUGINS_PREEMPT_STATE_H_
