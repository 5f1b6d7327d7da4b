// job_submit/planc's part of the adapter (plugins/slurm_adapter.h):
// defined in slurm_adapter_submit.cc, linked into job_submit/planc only.
// Called from job_submit()/job_modify() under slurmctld's read locks.
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_SUBMIT_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_SUBMIT_H_

#include "plugins/slurm_adapter.h"

#include <ctime>
#include <optional>
#include <string>

#include "common/market_life.h"
#include "common/submit_policy.h"

namespace planc::slurm {

// Fills a SubmitRequest for a new job from its description and its
// association in slurmdbd's cache.  Takes assoc_mgr read locks briefly.
SubmitRequest submit_request(const PlancConfig& cfg, const job_desc_msg_t* desc);

// The same for an update of an existing job.
SubmitRequest modify_request(const PlancConfig& cfg, const job_desc_msg_t* desc,
                             const job_record_t* job, uint32_t submit_uid);

// Writes a successful decision into the job description.
void apply_decision(const SubmitDecision& d, job_desc_msg_t* desc);

// The P2 market's options as spank/planc passed them (the job's SPANK
// job-control environment: PLANC_BID, PLANC_LOCK_PRICE,
// PLANC_SPOT_FALLBACK), with --begin and the GPU type the job asks for.
struct MarketOptions {
  bool any = false;
  std::optional<std::string> bid;
  bool lock_price = false, spot_fallback = false;
  time_t begin = 0;
  std::string gpu_type;
  bool array = false;  // a job array, or a part of a heterogeneous job
  bool held = false;   // submitted held (sbatch -H): its owner's hold
};
MarketOptions market_options(const job_desc_msg_t* desc);

// What an update of a job (`desc`, after job_submit/planc's decision was
// applied: its QoS is canonical) does as the market sees it: who asks,
// whether it moves the job into or out of `market_tier`'s QoS, changes what
// a win or a lock was for (GPUs, GPU type, nodes, account, partition) or
// its --begin, holds or releases it.  Updates as SlurmUser are the
// market's own.  REQUIRES the job read lock.
MarketUpdate market_update(const PlancConfig& cfg, const job_desc_msg_t* desc,
                           const job_record_t* job, uint32_t submit_uid);
// Applies a verdict's changes to the update: a hold added, a release taken
// out.
void apply_market_verdict(const MarketUpdateVerdict& v, job_desc_msg_t* desc);
// Puts the market's life in a new job's AdminComment and, when `hold`,
// holds it for the market's next round.
void mark_for_market(const MarketLife& life, const std::string& currency, bool hold,
                     job_desc_msg_t* desc);
// Whether a new job is a replica capacity infusion submits (its infused
// mark set by slurmctld/planc: users cannot set AdminComment).
bool is_replica_submission(const job_desc_msg_t* desc);
// Puts the spot-fallback mark (common/job_marks.h) in a new job's
// AdminComment and makes it requeue when preempted.
void mark_for_fallback(const std::string& mark, job_desc_msg_t* desc);

}  // namespace planc::slurm

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_SUBMIT_H_
