// job_submit/planc's part of the adapter (plugins/slurm_adapter.h):
// defined in slurm_adapter_submit.cc, linked into job_submit/planc only.
// Called from job_submit()/job_modify() under slurmctld's read locks.
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_SUBMIT_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_SUBMIT_H_

#include "plugins/slurm_adapter.h"

#include <ctime>
#include <optional>
#include <string>

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
};
MarketOptions market_options(const job_desc_msg_t* desc);

// An update that releases a held pending job (scontrol release sends
// priority INFINITE) by someone who is not an operator, SlurmUser or root:
// the job's AdminComment (it says whether the job bids in the market);
// none for any other update.  slurmctld/planc's own releases are
// SlurmUser's.  REQUIRES the job read lock.
std::optional<std::string> owner_release_comment(const job_desc_msg_t* desc,
                                                 const job_record_t* job, uint32_t submit_uid);
// Puts the market's `mark` in a new job's AdminComment and, when `hold`,
// holds it for the market's next round.
void mark_for_market(const std::string& mark, bool hold, job_desc_msg_t* desc);
// Puts the spot-fallback mark (common/job_marks.h) in a new job's
// AdminComment and makes it requeue when preempted.
void mark_for_fallback(const std::string& mark, job_desc_msg_t* desc);

}  // namespace planc::slurm

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_SUBMIT_H_
