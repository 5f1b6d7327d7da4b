// preempt/planc's part of the adapter (plugins/slurm_adapter.h): defined
// in slurm_adapter_preempt.cc, linked into preempt/planc only.
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_PREEMPT_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_PREEMPT_H_

#include "plugins/slurm_adapter.h"

#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/preempt_policy.h"
#include "common/preemption_tracker.h"

namespace planc::slurm {

// The tier of each of `ids`: the tier it runs as, except that a job on a
// free attempt is in the tier it was upgraded from (a starved P3 job on
// its P2 attempt is a P3 job); jobs Slurm no longer knows, or in no tier,
// are left out.  REQUIRES the job read lock.
std::map<uint32_t, TierId> tiers_of(const QosTierCache& tiers, const std::vector<uint32_t>& ids);

// --spot-fallback (common/job_marks.h): a requeued job whose mark names
// its fallback tier moves to that tier's QoS (as SlurmUser), its mark says
// so, and a free-attempt mark goes.  `run`: the restart count of the run
// that was preempted.  kNotYet: its requeue is not done yet; kMissed: it
// runs again already (it falls back at its next preemption); kGone:
// nothing to do (ended, its preemption called off, no pending mark).  When
// Slurm refuses the move, the mark says why and the job stays.  Job update
// locks held.
struct FallbackResult {
  enum class Kind : uint8_t { kNotYet, kMoved, kRefused, kMissed, kGone } kind = Kind::kGone;
  TierId from = TierId::kP3, to = TierId::kP1;
  std::string why;
};
FallbackResult apply_fallback(const PlancConfig& cfg, const QosTierCache& tiers, uint32_t job_id,
                              uint32_t run, time_t now);
// Whether the job's AdminComment has a spot-fallback mark not yet acted on.
bool fallback_pending(const job_record_t* job);

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

// True once slurmctld runs as the primary controller with its jobs loaded.
// A plugin's thread starts in init(), before slurmctld has read its state:
// until then the job table does not exist (find_job_record() divides by
// its size, zero) and Slurm's view of any job is meaningless.
bool jobs_loaded();

// True when this slurmctld started as a backup controller: it is not in
// control until slurmctld/planc says so (planc_preempt_control_v1).
bool started_as_backup();

// What Slurm does to a preempted job: requeue when it may be requeued
// (job_submit/planc makes spot jobs requeueable unless --no-requeue), else
// cancel.  REQUIRES the job read lock.
bool requeues(const job_record_t* job);
std::optional<bool> requeues(uint32_t job_id);

// Whether a pending preemptor needs whole nodes: --exclusive, or at least
// as many GPUs per node as the largest node of its partition has
// (--gres=gpu:N and --gpus-per-node per node; --gpus=N over its minimum
// node count).  REQUIRES the job, node and partition read locks; not
// thread-safe (a cache): call only under slurmctld's job write lock.
bool needs_whole_nodes(const job_record_t* job);
// The nodes a pending job needs at least: -N (1 when not given), or more
// when its GPUs (gpus_per_node_asked() on each of them) do not fit on that
// many of its partition's largest nodes.  REQUIRES the job, node and
// partition read locks.
uint32_t nodes_asked(const job_record_t* job);
// GPUs per node a pending preemptor asks for (--gres=gpu:N and
// --gpus-per-node; --gpus=N over its minimum node count; 0: none).
// REQUIRES the job read lock.
uint64_t gpus_per_node_asked(const job_record_t* job);
// The GPU type a job asks for (--gres=gpu:a100:4); empty when it names
// none.  REQUIRES the job read lock.
std::string gpu_type_asked(const job_record_t* job);
// Node `node`'s GPUs (of `type`, unless empty): all, and those not
// allocated; when `preemptor` could run there (in its partition, neither
// down nor drained), nullopt otherwise.  REQUIRES the job and node read
// locks.
struct NodeGpuCount {
  uint64_t total = 0, free = 0;
};
std::optional<NodeGpuCount> node_gpus_for(const job_record_t* preemptor, const std::string& type,
                                          uint32_t node);
// Nodes slurmctld knows (the size of every node bitmap).
size_t node_count();

// SIGTERM to the job's batch script, as `scancel -b` sends it: Slurm's own
// grace signal (preempt.c) reaches the job's steps but not the batch
// script, which is where most jobs trap SIGTERM to checkpoint.  REQUIRES
// the job write lock.
void sigterm_batch_script(job_record_t* job);

// Of `ids`, the jobs that have ended (finished, or no longer in
// slurmctld).  REQUIRES the job read lock.
std::vector<uint32_t> ended_jobs(const std::vector<uint32_t>& ids);

// Which Plan C tiers the job's account may use, from its association in
// slurmctld's assoc_mgr cache (takes assoc_mgr's association and QoS read
// locks briefly, after slurmctld's: the order slurmctld itself uses).
// REQUIRES the job read lock.
Entitlement entitlement_of(const PlancConfig& cfg, const job_record_t* job);

// What slurmctld shows of each of `ids` (one slurmctld no longer has: kGone),
// their tiers from `tiers` (over cfg.tiers).  REQUIRES the job read lock.
std::map<uint32_t, JobView> view_jobs(const std::vector<uint32_t>& ids, const PlancConfig& cfg,
                                      const QosTierCache& tiers);

// Writes the owner's note: SystemComment, and AdminComment for sacct
// (22.05's slurmdbd stores AdminComment with each run's end record, never
// SystemComment), keeping a free-attempt mark and never overwriting an
// admin's own comment.  REQUIRES the job write lock.
void set_owner_note(job_record_t* job, const std::string& note);

// The policy's "kill at the end of the grace", now: SIGKILL the batch
// script's process group and steps, then Slurm's own preemption
// (slurm_job_preempt: requeue or cancel) in the same lock hold, so the
// dying script's completion cannot be taken for a normal end; the
// preemptor's preempt_start_time is stamped as node_scheduler.c does, so
// the next pass waits for these resources.  Writes `note` first, so the
// PREEMPTED record carries it.  Slurm's end_time (kSlurmGraceExtraSeconds
// past the tracker's deadline, in whole seconds) is brought forward to now,
// so the grace ends when the tracker says; a call more than that second and
// the second's truncation early is refused.  false when the job is no
// longer running in a preemption.  REQUIRES an update's write locks
// (config read, job and node write, partition and federation read).
bool end_grace(uint32_t victim, uint32_t preemptor, const std::string& note);

// Calls a preemption off: the victim, still running in its grace, gets its
// run back (preempt_time cleared, end time from its time limit again) and
// `note`.  false when it is no longer in its grace.  REQUIRES the job
// write lock.
bool call_off(uint32_t victim, const std::string& note);

// Requeues, as a preemption, a victim whose run ended during its grace
// (job_requeue() as SlurmUser, preempt=true: Slurm records the run as
// PREEMPTED once more and queues the job again).  Returns Slurm's error
// code.  REQUIRES the write locks of a requeue RPC (job and node write,
// partition and federation read).
int requeue_preempted(uint32_t victim);

// Whether Slurm has started a preemption for pending `job` and still
// waits for it (its preempt_start_time is set).  REQUIRES the job read
// lock.
bool preemption_started_for(const job_record_t* job);

// A pending preemptor whose victims are gone may preempt again now: clears
// its preempt_start_time.  false when it no longer waits.  REQUIRES the
// job write lock.
bool release_preemptor(uint32_t preemptor);

// How a run of a job with a preemption in progress ended, from its record
// in slurmctld's completion path.  REQUIRES the job write lock.
RunEndFacts run_end_facts(const job_record_t* job);
// "by its owner" or "by uid N" for a job cancelled during its grace.
std::string cancelled_by(const job_record_t* job);
// Rewrites what a run that ended during its grace ended as: PREEMPTED
// (treated as preempted) or COMPLETED (GraceFinishedExitCode), keeping
// the state flags (COMPLETING) and the exit code.  REQUIRES the job write
// lock; call before Slurm's accounting record of the run (jobcomp's
// callback is: job_completion_logger() calls it just before
// jobacct_storage_g_job_complete()).
void set_run_end_state(job_record_t* job, RunEndVerdict verdict);

// Queues the signal to slurmd on each of the job's nodes through
// slurmctld's agent, as job_signal() does, whatever state the job is in
// now (a preempted job is already requeued or cancelled: job_signal()
// would refuse it).  REQUIRES the job read lock (the agent looks the job
// up).
void signal_nodes(const JobSignal& s);

}  // namespace planc::slurm

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_PREEMPT_H_
