// The only code that reads Slurm's job structures and translates them into
// Plan C core types (common/).  Runs inside slurmctld, under the locks its
// caller holds; nothing here blocks or takes a lock of its own beyond
// assoc_mgr's read locks, which slurmctld takes in the same order.
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_H_

#include "plugins/slurm_compat.h"  // Slurm's headers, in the order they need

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/billing.h"
#include "common/config.h"
#include "common/job_watch.h"
#include "common/metrics_snapshot.h"
#include "common/preempt_policy.h"
#include "common/preemption_tracker.h"
#include "common/spot_cap.h"
#include "common/starvation.h"
#include "common/submit_policy.h"
#include "plugins/config_watch.h"

namespace planc::slurm {

// Defined in slurm_adapter_job.cc (libslurm only): load_plugin_config,
// segment_of.  The rest in slurm_adapter.cc (slurmctld's symbols).

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

// The slurmctld locks a plugin thread takes to change jobs (requeue, kill,
// comments, QoS): job and node write, conf, partition and federation read.
inline slurmctld_lock_t job_update_locks() {
  return {.conf = READ_LOCK,
          .job = WRITE_LOCK,
          .node = WRITE_LOCK,
          .part = READ_LOCK,
          .fed = READ_LOCK};
}

// <StateSaveLocation>/<name>: where a plugin keeps its state file.
std::string state_file_path(const char* name);

// Where the bills go: slurm.conf's JobCompType, JobCompLoc (jobcomp/planc's
// connection string) and ClusterName.  Reads slurm_conf; call from init()
// or with the config read lock.
struct BillSite {
  std::string jobcomp_type, jobcomp_loc, cluster;
};
BillSite bill_site();

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

// --- slurmctld/planc ----------------------------------------------------------

// The facts of the starvation rule for every pending job in slurmctld's
// list: jobs of a tier that starves into another (StarveInto) into
// `starvable`, jobs carrying the free-attempt mark into `marked`, and the
// ids the 5 s sample watches (running in a tier, pending in a guaranteed
// one) into `watch`: the same walk serves both.  Returns how many pending
// jobs it looked at.  REQUIRES the job read lock; allocates only for the
// jobs it returns.
size_t collect_pending(const QosTierCache& tiers, std::vector<PendingJob>* starvable,
                       std::vector<MarkedJob>* marked, std::vector<uint32_t>* watch);

// The same facts for one job (nullopt: gone, or not pending).  REQUIRES the
// job read or write lock.
std::optional<PendingJob> pending_job(const QosTierCache& tiers, uint32_t job_id);
std::optional<MarkedJob> marked_job(const QosTierCache& tiers, uint32_t job_id);

// What slurmctld/planc samples every 5 s, from the jobs `plan` names (a
// walk of every job, or the watched, started and new ids:
// common/job_watch.h):
//   spot_running  every running job of a spot tier, with its GPUs
//                 (`gpu_tres_pos` in tres_alloc_cnt; < 0: unknown, count
//                 0); a free attempt counts in the tier it was upgraded from;
//   spot_ended    for each of `tracked` that is no longer running, its end
//                 time when Slurm still knows it (else 0);
//   pool          the GPUs the nodes have, and per tier (the tier a job
//                 runs as) the running jobs and their allocated GPUs;
//   guaranteed_*  the guaranteed tiers' (not preemptible) jobs for the SLA:
//                 those running, the pending ones (all ids), and those held
//                 back by their own limits with the reason;
//   watch         the ids to keep watching: running in a tier, or pending
//                 in a guaranteed one;
//   visited       job records looked at; walked: whether it walked them all;
//   infusion      what capacity infusion's controller needs (below); the
//                 pending P3 replicas are not watched: `replica_ids` (the
//                 replicas the controller knows of) are looked up too.
// REQUIRES the job and node read locks.
// A pending or running job with an infused mark (common/infusion.h).
struct ReplicaJob {
  uint32_t job_id = 0;
  std::string pool;
  bool running = false;
  uint32_t gpus = 0;  // requested (tres_req_cnt at `gpu_tres_pos`)
};
// The replicas, and the GPUs that guaranteed (P0, P1) jobs other than
// replicas wait for (pending, not held, not waiting on a dependency or
// their --begin; a limit counts: the 80% cap is one).
struct InfusionJobs {
  std::vector<ReplicaJob> replicas;
  uint64_t guaranteed_waiting_gpus = 0;
  uint64_t preempting_gpus = 0;  // held by running jobs in their preemption grace
};
struct JobSample {
  std::vector<RunningSpotJob> spot_running;
  std::map<uint32_t, time_t> spot_ended;
  PoolUsage pool;
  std::vector<GuaranteedRun> guaranteed_running;
  std::vector<HeldBack> guaranteed_held;
  std::vector<uint32_t> guaranteed_pending;
  std::vector<uint32_t> watch;
  uint64_t visited = 0;
  bool walked = false;
  InfusionJobs infusion;
};
void sample_jobs(const QosTierCache& tiers, int gpu_tres_pos, const std::vector<uint32_t>& tracked,
                 const JobWatch::Plan& plan, const std::vector<uint32_t>& replica_ids,
                 JobSample* out);

// slurmctld's next job id (not taken) and its FirstJobId and MaxJobId.
// REQUIRES the job and federation read locks.
struct JobIdSpace {
  uint32_t next = 0, first = 0, max = 0;
};
JobIdSpace job_id_space();

// The tier of each of `ids`: the tier it runs as, except that a job on a
// free attempt is in the tier it was upgraded from (a starved P3 job on
// its P2 attempt is a P3 job); jobs Slurm no longer knows, or in no tier,
// are left out.  REQUIRES the job read lock.
std::map<uint32_t, TierId> tiers_of(const QosTierCache& tiers, const std::vector<uint32_t>& ids);

// Position of gres/gpu in the jobs' TRES arrays, -1 when not configured.
// Takes assoc_mgr's TRES read lock; call with no slurmctld lock held.
int gpu_tres_position();

// The job's AdminComment ("" when none).  REQUIRES the job read lock.
std::string admin_comment(uint32_t job_id);

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

// The P2 market (issue 15): a run matched in a round keeps its price for
// that run only.  A matched job that is preempted and requeued bids again:
// once pending, it is held (as SlurmUser) with its mark back to "waiting
// for the round at T" (the next multiple of MarketInterval), so no later
// run starts at the old price or outside a round.  `run`: the restart
// count of the preempted run.  kNotYet: its requeue is not done yet;
// kMissed: it runs again already (at the old price: its next preemption
// puts it back); kGone: nothing to do.  Job update locks held.
struct RebidResult {
  enum class Kind : uint8_t { kNotYet, kHeld, kFailed, kMissed, kGone } kind = Kind::kGone;
  std::string why;
};
RebidResult hold_for_rebid(const PlancConfig& cfg, uint32_t job_id, uint32_t run, time_t now);
// Whether the job's AdminComment says it was matched in a market round
// (not a --lock-price booking).  REQUIRES the job read lock.
bool market_matched(const job_record_t* job);

// Sets a job's QoS and AdminComment through slurmctld's own update path
// (update_job(), as `scontrol update` as SlurmUser would: job_submit's
// job_modify, limits, and the new QoS sent to slurmdbd).  `qos` or
// `admin_comment` nullptr: left as it is.  Returns a Slurm error code.
// REQUIRES the locks of an update RPC: config read, job and node write,
// partition and federation read.
int update_job_as_slurm_user(uint32_t job_id, const char* qos, const char* admin_comment);
// The same, releasing the job's hold (priority recomputed by Slurm), or
// holding it (an administrator's hold: its owner cannot release it).
int release_job_as_slurm_user(uint32_t job_id, const char* admin_comment);
int hold_job_as_slurm_user(uint32_t job_id, const char* admin_comment);

// The P2 market's jobs (common/market.h's mark in AdminComment) pending in
// a tier's P2 QoS: the bidders (no matched price yet: held for the market,
// or released by their owner before a round: job_submit/planc's hold is,
// to Slurm, the owner's) and those matched and released but not started
// yet (they hold their GPUs for the round).  REQUIRES the job read lock.
struct MarketJob {
  uint32_t job_id = 0;
  uint32_t gpus = 0;     // requested (tres_req_cnt at `gpu_tres_pos`)
  std::string gpu_type;  // the type it asks for (--gres=gpu:h800:8), "" for none
  time_t submitted = 0;
  std::string admin_comment;
  std::optional<Micros> bid;  // from the mark; none: bids the list price
  bool bidding = false;       // else matched, not started
  bool admin_held = false;    // priority 0 by an administrator (a round's hold)
  // The owner, for the round's record (planc.market_bid): user_name may be
  // empty (slurmctld fills it lazily); the caller resolves uid then,
  // outside the locks.
  uint32_t uid = 0;
  std::string user, account;
};
std::vector<MarketJob> market_jobs(const QosTierCache& tiers, int gpu_tres_pos);

// --- capacity infusion (slurmctld/planc) ---------------------------------------

// The infused mark in the job's AdminComment, if any.  REQUIRES the job
// read lock; a pointer test and a prefix compare for any other job.
std::optional<InfusedMark> infused_mark_of(const job_record_t* job);

// Submits one replica of `pool` through slurmctld's own submit RPC, as
// sbatch would as root with --uid: as the pool's user and account, in
// `qos` (its tier's), with `admin_comment` (the infused mark: only
// SlurmUser and root may set it), --gres=gpu:GpusPerReplica, not
// requeued, its output in the pool's Output= or the user's home directory
// (planc-pool-<name>-<jobid>.out), PLANC_POOL, PLANC_TIER and
// PLANC_DRAIN_SECONDS in its environment.  job_submit/planc sees it as
// any submission.  Call with NO slurmctld lock held: it waits for
// slurmctld to handle the RPC.  The new job id, or 0 with `*why` set.
uint32_t submit_replica(const PoolConfig& pool, const std::string& qos,
                        const std::string& admin_comment, uint32_t drain_seconds, std::string* why);
// scancel --signal=SIG --full for a running job (its batch script and every
// step); SIGKILL cancels it.  Through the RPC: call with NO slurmctld lock
// held.  A Slurm error code.
int signal_job_rpc(uint32_t job_id, uint16_t signal);

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

// True once slurmctld runs as the primary controller with its jobs loaded.
// A plugin's thread starts in init(), before slurmctld has read its state:
// until then the job table does not exist (find_job_record() divides by
// its size, zero) and Slurm's view of any job is meaningless.
bool jobs_loaded();

// What Slurm does to a preempted job: requeue when it may be requeued
// (job_submit/planc makes spot jobs requeueable unless --no-requeue), else
// cancel.  REQUIRES the job read lock.
bool requeues(const job_record_t* job);
std::optional<bool> requeues(uint32_t job_id);

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

// What slurmctld shows of each of `ids` (absent ones are gone).
// REQUIRES the job read lock.
std::map<uint32_t, JobView> view_jobs(const std::vector<uint32_t>& ids);

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
// PREEMPTED record carries it.  false when the job is no longer running in
// a preemption whose grace has run out.  REQUIRES an update's write locks
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

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_H_
