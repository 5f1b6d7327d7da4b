// The only code that reads Slurm's job structures and translates them into
// Plan C core types (common/).  Runs inside slurmctld, under the locks its
// caller holds; nothing here blocks or takes a lock of its own beyond
// assoc_mgr's read locks, which slurmctld takes in the same order.
//
// This header is the part more than one plugin uses.  Each plugin's own
// part has a header and a file of its own, linked only into that plugin
// (Makefile.am):
//   slurm_adapter_submit.h   job_submit/planc
//   slurm_adapter_preempt.h  preempt/planc
//   slurm_adapter_ctld.h     slurmctld/planc
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_H_

#include "plugins/slurm_compat.h"  // Slurm's headers, in the order they need

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/billing.h"
#include "common/config.h"
#include "common/infusion.h"
#include "common/tier.h"
#include "plugins/config_watch.h"

namespace planc::slurm {

// --- every plugin: slurm_adapter_job.cc -----------------------------------------
// libslurm only, no symbol of slurmctld's own: jobcomp/planc links it and
// is also loaded by `sacct -c`.

// Loads planc.conf (beside slurm.conf, or $PLANC_CONF).  On failure logs
// one error line "<plugin_type>: <file>:<line>: key '<Key>': ..." and
// returns nullptr; the caller fails init().
std::shared_ptr<const PlancConfig> load_plugin_config(const char* plugin_type);

// The planc.conf the plugins read (beside slurm.conf, or $PLANC_CONF).
std::string planc_conf_file();

// The login name of `uid` (getpwuid_r: may ask NSS, so never under a
// slurmctld lock), or the number as text when it has none.
std::string user_name(uint32_t uid);

// The new planc.conf when it changed and is valid (see
// plugins/config_watch.h), logged as "<plugin_type>: reloaded <file>" with
// its policy warnings; nullptr otherwise, a bad file logged once as
// "<plugin_type>: <file>:<line>: key '<Key>': ...; the configuration loaded
// before stays in force".  Call it from the plugin's own thread.
std::shared_ptr<const PlancConfig> reload_plugin_config(const char* plugin_type, ConfigWatch* watch,
                                                        bool force = false);

// The run segment that just ended, as jobcomp sees the job in
// job_completion_logger (job write lock held); also the run that begins,
// as slurmctld/planc's job-begin hook sees it (job and node write locks
// held: nodes, start time and gres set; state RUNNING, allocated TRES not
// yet).  Copies strings only: no lookups, no I/O (user names come from
// job->user_name, which slurmctld may not have filled in yet; a missing
// one is resolved later, outside the lock).
Segment segment_of(const job_record_t* job);

// --- preempt/planc and slurmctld/planc: slurm_adapter.cc ------------------------

// fn(i, gpus) for each node index i the job holds, with the GPUs it was
// allocated there (0 on a node where it has none; Slurm's NO_VAL and
// no-consume markers count as none); of `type` only, unless empty (GPUs
// allocated without a type count as any type).  REQUIRES the job read
// lock.
void for_each_node_gpus(const job_record_t* job, const std::string& type,
                        const std::function<void(uint32_t, uint64_t)>& fn);

// fn(i) for each node index i the job holds (none when it holds none).
// REQUIRES the job read lock.
void for_each_node(const job_record_t* job, const std::function<void(uint32_t)>& fn);

// <StateSaveLocation>/<name>: where a plugin keeps its state file.
std::string state_file_path(const char* name);

// Where the bills go: slurm.conf's JobCompType, JobCompLoc (jobcomp/planc's
// connection string) and ClusterName.  Reads slurm_conf; call from init()
// or with the config read lock.
struct BillSite {
  std::string jobcomp_type, jobcomp_loc, cluster;
};
BillSite bill_site();

// The tier of a job, from its QoS record; nullptr when the job's QoS is not
// a tier.  No allocation: safe on the preemption hot path.
const Tier* job_tier(const PlancConfig& cfg, const job_record_t* job);

// The same through a QosTierCache (common/tier.h): the hot-path version.
inline const Tier* job_tier(const QosTierCache& cache, const job_record_t* job) {
  if (!job || !job->qos_ptr) return nullptr;
  return cache.lookup(job->qos_ptr->id, job->qos_ptr->name);
}

// Whether `job` is held (scontrol hold, a held submission, requeuehold):
// Slurm keeps a held job at priority 0.  REQUIRES the job read lock.
inline bool is_held(const job_record_t* job) { return job->priority == 0; }

// The infused mark in the job's AdminComment, if any.  REQUIRES the job
// read lock; a pointer test and a prefix compare for any other job.
std::optional<InfusedMark> infused_mark_of(const job_record_t* job);
// Whether the job is on a free attempt (carries the free-attempt mark).
// REQUIRES the job read lock.
bool on_free_attempt(const job_record_t* job);
// The tier a job of tier `tier` counts in for the spot cap and the P3
// preemption budget: a free attempt in the tier it came from.  REQUIRES
// the job read lock.
TierId counted_tier_of(const job_record_t* job, TierId tier);

// Sets a job's QoS and AdminComment through slurmctld's own update path
// (update_job(), as `scontrol update` as SlurmUser would: job_submit's
// job_modify, limits, and the new QoS sent to slurmdbd).  `qos` or
// `admin_comment` nullptr: left as it is.  Returns a Slurm error code.
// REQUIRES the locks of an update RPC: config read, job and node write,
// partition and federation read.
int update_job_as_slurm_user(uint32_t job_id, const char* qos, const char* admin_comment);
// The same, setting the job's Nice too (the value `scontrol update
// Nice=` takes).
int update_job_as_slurm_user(uint32_t job_id, const char* qos, const char* admin_comment,
                             int64_t nice);
// A job's priority and Nice (nullopt: no such job).  `fixed`: an
// administrator set its priority, Nice does not move it.  REQUIRES the job
// read lock.
struct JobPriority {
  uint32_t priority = 0;
  int64_t nice = 0;
  bool fixed = false;
};
std::optional<JobPriority> job_priority(uint32_t job_id);
// The same, releasing the job's hold (priority recomputed by Slurm), or
// holding it (an administrator's hold: its owner cannot release it).
int release_job_as_slurm_user(uint32_t job_id, const char* admin_comment);
int hold_job_as_slurm_user(uint32_t job_id, const char* admin_comment);

// The slurmctld locks a plugin thread takes to change jobs (requeue, kill,
// comments, QoS): job and node write, conf, partition and federation read.
inline slurmctld_lock_t job_update_locks() {
  return {.conf = READ_LOCK,
          .job = WRITE_LOCK,
          .node = WRITE_LOCK,
          .part = READ_LOCK,
          .fed = READ_LOCK};
}

}  // namespace planc::slurm

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_H_
