// The P2 market's part of the adapter: a job's market life
// (common/market_life.h) as slurmctld's job record shows it, and the one
// place that writes it back.  Linked into job_submit/planc (job_modify),
// slurmctld/planc (the market unit, the job-begin hook, the run-end hook)
// and preempt/planc (a fallback's move).
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_MARKET_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_MARKET_H_

#include "plugins/slurm_compat.h"

#include <optional>
#include <string_view>

#include "common/config.h"
#include "common/market_life.h"
#include "common/tier.h"

namespace planc::slurm {

// The job as the market sees it.  `tier`: the job's tier (job_tier), null
// when its QoS is none; `gpu_pos`: gres/gpu's place in the jobs' TRES
// arrays (< 0: unknown, no GPUs counted).  REQUIRES the job read lock.
MarketFacts market_facts(const Tier* tier, const job_record_t* job, int gpu_pos);

// The job's life (its market mark), none without a whole one.  REQUIRES
// the job read lock.
std::optional<MarketLife> market_life(const job_record_t* job);

// Writes the life into the job's AdminComment, merged with what the
// comment holds now (other marks, an admin's text), or removes the mark
// (none); the job's state is saved with slurmctld's next state save.
// The only writer of the market's mark.  REQUIRES the job write lock.
void set_market_life(job_record_t* job, const std::optional<MarketLife>& life,
                     std::string_view currency);

// The market's hold (priority 0) or its release, through slurmctld's own
// update path as SlurmUser (job_modify sees it as the market's own
// update).  kKeep: nothing.  A Slurm error code.  REQUIRES the locks of
// an update RPC (plugins/slurm_adapter.h job_update_locks).
int apply_market_hold(uint32_t job_id, HoldAction hold);

// Holds a job in the middle of slurmctld's own completion or requeue path
// (the run-end hook), where no update RPC may run: priority 0, an
// administrator's hold.  REQUIRES the job write lock.
void hold_in_place(job_record_t* job);

// The market takes over a hold its owner released (a release taken out of
// the owner's update): the hold is the market's from now on (an
// administrator's: Slurm forgets "requeued in held state").  REQUIRES the
// job write lock.
void take_over_hold(job_record_t* job);

// Slurm tests a job's dependencies only when the job is not held: the
// market tests those of the bids it holds, as the scheduler would (their
// state is updated in the job).  True while one is not met yet.  REQUIRES
// the job write lock.
bool dependency_waits(job_record_t* job);

// Whether a run that ends now waits again (the job write lock held, in
// the completion path): requeued by anyone, a preemption's requeue, a
// node failure's requeue.
bool run_requeues(const job_record_t* job);

}  // namespace planc::slurm

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_MARKET_H_
