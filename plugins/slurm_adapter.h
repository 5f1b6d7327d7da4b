// The only code that reads Slurm's job structures and translates them into
// Plan C core types (common/).  Runs inside slurmctld, under the locks its
// caller holds; nothing here blocks or takes a lock of its own beyond
// assoc_mgr's read locks, which slurmctld takes in the same order.
//
// Include slurm_compat.h before this header.
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_H_

#include <memory>

#include "common/billing.h"
#include "common/config.h"
#include "common/submit_policy.h"

namespace planc::slurm {

// Defined in slurm_adapter_job.cc (libslurm only): load_plugin_config,
// segment_of.  The rest in slurm_adapter.cc (slurmctld's symbols).

// Loads planc.conf (beside slurm.conf, or $PLANC_CONF).  On failure logs
// one error line "<plugin_type>: <file>:<line>: key '<Key>': ..." and
// returns nullptr; the caller fails init().
std::shared_ptr<const PlancConfig> load_plugin_config(const char* plugin_type);

// Fills a SubmitRequest for a new job from its description and its
// association in slurmdbd's cache.  Takes assoc_mgr read locks briefly.
SubmitRequest submit_request(const PlancConfig& cfg, const job_desc_msg_t* desc);

// The same for an update of an existing job.
SubmitRequest modify_request(const PlancConfig& cfg, const job_desc_msg_t* desc,
                             const job_record_t* job, uint32_t submit_uid);

// The tier of a job, from its QoS record; nullptr when the job's QoS is not
// a tier.  No allocation: safe on the preemption hot path.
const Tier* job_tier(const PlancConfig& cfg, const job_record_t* job);

// The same through a QosTierCache (common/tier.h): the hot-path version.
inline const Tier* job_tier(const QosTierCache& cache, const job_record_t* job) {
  if (!job || !job->qos_ptr) return nullptr;
  return cache.lookup(job->qos_ptr->id, job->qos_ptr->name);
}

// The run segment that just ended, as jobcomp sees the job in
// job_completion_logger (job write lock held).  Copies strings only: no
// lookups, no I/O (user names come from job->user_name; a missing one is
// resolved later, outside the lock).
Segment segment_of(const job_record_t* job);

// Writes a successful decision into the job description.
void apply_decision(const SubmitDecision& d, job_desc_msg_t* desc);

}  // namespace planc::slurm

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_H_
