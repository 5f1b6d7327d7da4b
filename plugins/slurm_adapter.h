// The only code that reads Slurm's job structures and translates them into
// Plan C core types (common/).  Runs inside slurmctld, under the locks its
// caller holds; nothing here blocks or takes a lock of its own beyond
// assoc_mgr's read locks, which slurmctld takes in the same order.
//
// Include slurm_compat.h before this header.
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/billing.h"
#include "common/config.h"
#include "common/spot_cap.h"
#include "common/starvation.h"
#include "common/submit_policy.h"

namespace planc::slurm {

// Defined in slurm_adapter_job.cc (libslurm only): load_plugin_config,
// segment_of.  The rest in slurm_adapter.cc (slurmctld's symbols).

// Loads planc.conf (beside slurm.conf, or $PLANC_CONF).  On failure logs
// one error line "<plugin_type>: <file>:<line>: key '<Key>': ..." and
// returns nullptr; the caller fails init().
std::shared_ptr<const PlancConfig> load_plugin_config(const char* plugin_type);

// <StateSaveLocation>/<name>: where a plugin keeps its state file.
std::string state_file_path(const char* name);

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
// job_completion_logger (job write lock held); also the run that begins,
// as slurmctld/planc's job-begin hook sees it (job and node write locks
// held: nodes, start time and gres set; state RUNNING, allocated TRES not
// yet).  Copies strings only: no lookups, no I/O (user names come from
// job->user_name, which slurmctld may not have filled in yet; a missing
// one is resolved later, outside the lock).
Segment segment_of(const job_record_t* job);

// Writes a successful decision into the job description.
void apply_decision(const SubmitDecision& d, job_desc_msg_t* desc);

// --- slurmctld/planc ----------------------------------------------------------

// The facts of the starvation rule for every pending job in slurmctld's
// list: P3 jobs into `p3`, jobs carrying the free-attempt mark into
// `marked`.  Returns how many pending jobs it looked at.  REQUIRES the job
// read lock; allocates only for the jobs it returns.
size_t collect_pending(const QosTierCache& tiers, std::vector<PendingJob>* p3,
                       std::vector<MarkedJob>* marked);

// The same facts for one job (nullopt: gone, or not pending).  REQUIRES the
// job read or write lock.
std::optional<PendingJob> pending_job(const QosTierCache& tiers, uint32_t job_id);
std::optional<MarkedJob> marked_job(const QosTierCache& tiers, uint32_t job_id);

// Every running job of a spot tier, with its GPUs (`gpu_tres_pos` in
// tres_alloc_cnt; < 0: unknown, count 0), into `running`; for each of
// `tracked` that is no longer running, its end time when Slurm still knows
// it.  A free attempt counts as P3.  REQUIRES the job read lock.
void collect_running_spot(const QosTierCache& tiers, int gpu_tres_pos,
                          const std::vector<uint32_t>& tracked,
                          std::vector<RunningSpotJob>* running, std::map<uint32_t, time_t>* ended);

// Position of gres/gpu in the jobs' TRES arrays, -1 when not configured.
// Takes assoc_mgr's TRES read lock; call with no slurmctld lock held.
int gpu_tres_position();

// The job's AdminComment ("" when none).  REQUIRES the job read lock.
std::string admin_comment(uint32_t job_id);

// Sets a job's QoS and AdminComment through slurmctld's own update path
// (update_job(), as `scontrol update` as SlurmUser would: job_submit's
// job_modify, limits, and the new QoS sent to slurmdbd).  `qos` or
// `admin_comment` nullptr: left as it is.  Returns a Slurm error code.
// REQUIRES the locks of an update RPC: config read, job and node write,
// partition and federation read.
int update_job_as_slurm_user(uint32_t job_id, const char* qos, const char* admin_comment);

// --- preempt/planc ------------------------------------------------------------

// A signal for all of a job's processes (batch script's process group and
// every step), to be sent later: what job_signal(job, sig, KILL_JOB_BATCH |
// KILL_FULL_JOB) would send now.
struct JobSignal {
  uint32_t job_id = 0;
  std::string nodes;  // Slurm host list, e.g. "gpu[1-2]"
  uint16_t protocol_version = 0;
  uint16_t signal = 0;
};

// Captures the job's nodes for signal_nodes().  REQUIRES the job read lock;
// no allocation beyond the node list string, no I/O, nothing queued.
JobSignal job_signal_order(const job_record_t* job, uint16_t signal);

// Queues the signal to slurmd on each of the job's nodes through
// slurmctld's agent, as job_signal() does, whatever state the job is in
// now (a preempted job is already requeued or cancelled: job_signal()
// would refuse it).  REQUIRES the job read lock (the agent looks the job
// up).
void signal_nodes(const JobSignal& s);

}  // namespace planc::slurm

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_H_
