// slurmctld/planc's part of the adapter (plugins/slurm_adapter.h): defined
// in slurm_adapter_ctld.cc, linked into slurmctld/planc only.
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_CTLD_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_CTLD_H_

#include "plugins/slurm_adapter.h"

#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/infusion.h"
#include "common/job_watch.h"
#include "common/market_life.h"
#include "common/metrics_snapshot.h"
#include "common/spot_cap.h"
#include "common/starvation.h"

namespace planc::slurm {

// The facts of the starvation rule for every job in slurmctld's list:
// pending jobs of a tier that starves into another (StarveInto) into
// `starvable`, running ones into `running` (with their tier), the ids of
// jobs carrying the free-attempt mark into `marked_ids` and the pending ones
// among them into `marked`, and the ids the 5 s sample watches (running in
// a tier, pending in a guaranteed one) into `watch`: the same walk serves
// both.  Returns how many pending jobs it looked at.  REQUIRES the job read
// lock; allocates only for the jobs it returns.
// `free_attempt_gpus`: the GPUs asked by jobs carrying the mark, pending or
// running (`gpu_pos`: the gres/gpu TRES position, < 0 unknown).
struct StarvationFacts {
  std::vector<PendingJob> starvable;
  std::vector<std::pair<uint32_t, TierId>> running;
  std::vector<MarkedJob> marked;
  std::vector<uint32_t> marked_ids;
  uint64_t free_attempt_gpus = 0;
};
size_t collect_pending(const QosTierCache& tiers, int gpu_pos, StarvationFacts* facts,
                       std::vector<uint32_t>* watch);
// The same facts for the jobs named (`ids`, then every id in `ranges`) and
// for the marked jobs `marked_ids` (common/starvation_queue.h): what the
// scan looks at between walks.  Returns how many job records it looked up.
// REQUIRES the job read lock.
size_t look_up_starvation(const QosTierCache& tiers, int gpu_pos, const std::vector<uint32_t>& ids,
                          const std::vector<IdRange>& ranges, const std::set<uint32_t>& marked_ids,
                          StarvationFacts* facts);

// The same facts for one job (nullopt: gone, or not pending).  REQUIRES the
// job read or write lock.
std::optional<PendingJob> pending_job(const QosTierCache& tiers, uint32_t job_id);
std::optional<MarkedJob> marked_job(const QosTierCache& tiers, uint32_t job_id);

// One job of `job_id`: the job itself, or, when it is the record of several
// pending tasks of an array, its first pending task, split off into a
// record of its own (as `scontrol update jobid=<array>_<task>` does; the
// array's record keeps the other tasks and its id).  Returns the job id
// of that one job, 0 when the split failed.  REQUIRES the job write lock.
uint32_t one_job_of(uint32_t job_id);

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
  TierId tier = TierId::kP1;
  bool running = false;
  bool ending = false;               // running in a preemption's grace (Slurm ends it)
  uint32_t gpus = 0;                 // requested (tres_req_cnt at `gpu_tres_pos`)
  uint32_t drain_grace_seconds = 0;  // from its mark
};
// The replicas, and the guaranteed (P0, P1) jobs other than replicas that
// wait, each with why (common/infusion.h reclaimable_demand decides which
// count).
struct InfusionJobs {
  std::vector<ReplicaJob> replicas;
  std::vector<PendingGuaranteed> guaranteed_waiting;
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
  // Pending jobs of the market's tier (P2) the market should look at: no
  // market life yet, or one that is not a bid the market holds.
  std::vector<uint32_t> market_ids;
  // By node index: whether a running guaranteed job of those looked at
  // holds any of the node (every running job is watched).
  std::vector<bool> guaranteed_nodes;
};
void sample_jobs(const QosTierCache& tiers, int gpu_tres_pos, const std::vector<uint32_t>& tracked,
                 const JobWatch::Plan& plan, const std::vector<uint32_t>& replica_ids,
                 JobSample* out);

// Packing guaranteed work (planc.conf PackGuaranteed, common/placement.h).
// Each node's weight should be steered_weight(on, its slurm.conf weight,
// whether a running guaranteed job holds it).  Slurm.conf's weight is the
// node record's, or, once a reconfigure has copied a weight set here into
// it, the one remembered for the node.
//
// Whether any node's weight differs from what it should be, `holds` by
// node index.  REQUIRES the node read lock.
bool weights_to_steer(bool on, const std::vector<bool>& holds);
// Sets every node's weight to what it should be, where it differs, a node
// held when one of `job_ids` (the guaranteed jobs running at the sample
// and the jobs started since; each looked up again here) runs on it, and
// through update_node() as `scontrol update nodename=... weight=` does.
// Returns the nodes changed; a refusal from Slurm leaves `*why`.
// REQUIRES the job read and node write locks (update_node() rearranges the
// config records).
size_t steer_weights(const QosTierCache& tiers, bool on, const std::vector<uint32_t>& job_ids,
                     std::string* why);
// The same for the nodes of `job`, a guaranteed job starting (the
// job-begin hook): each gets the weight of a node holding guaranteed work.
// REQUIRES the job read and node write locks.
size_t steer_weights_of(const job_record_t* job, std::string* why);

// slurmctld's next job id (not taken) and its FirstJobId and MaxJobId.
// REQUIRES the job and federation read locks.
struct JobIdSpace {
  uint32_t next = 0, first = 0, max = 0;
};
JobIdSpace job_id_space();

// Position of gres/gpu in the jobs' TRES arrays, -1 when not configured.
// Takes assoc_mgr's TRES read lock; call with no slurmctld lock held.
int gpu_tres_position();

// The job's AdminComment ("" when none).  REQUIRES the job read lock.
std::string admin_comment(uint32_t job_id);

// A job as the P2 market sees it (common/market_life.h), with what the
// round's record needs: when it was submitted and whose it is (user_name
// may be empty: slurmctld fills it lazily; the caller resolves uid then,
// outside the locks).
struct MarketJobView {
  uint32_t job_id = 0;
  MarketFacts facts;
  std::optional<MarketLife> life;
  time_t submitted = 0;
  uint32_t uid = 0;
  std::string user, account;
};
// Every job in the market's tier (P2) that is pending or running, and every
// other job with a market life: the round's walk.  REQUIRES the job read
// lock.
std::vector<MarketJobView> market_walk(const QosTierCache& tiers, int gpu_tres_pos);
// The same for `ids` (jobs slurmctld no longer knows are left out).
// REQUIRES the job read lock.
std::vector<MarketJobView> market_views(const QosTierCache& tiers, int gpu_tres_pos,
                                        const std::vector<uint32_t>& ids);

// --- capacity infusion ------------------------------------------------------------

// Submits one replica of `pool` through slurmctld's own submit RPC, as
// sbatch would as root with --uid: as the pool's user and account, in
// `qos` (its tier's), with `admin_comment` (the infused mark: only
// SlurmUser and root may set it), --gres=gpu:GpusPerReplica, not
// requeued, its output in the pool's Output= or the user's home directory
// (planc-pool-<name>-<jobid>.out), PLANC_POOL, PLANC_TIER and
// PLANC_DRAIN_SECONDS in its environment.  job_submit/planc sees it as
// any submission.  Call with NO slurmctld lock held: it waits for
// slurmctld to handle the RPC.  The new job id, or 0 with `*why` set.
// The script is read through common/file_system.h read_trusted_script:
// refused unless root owns it and nobody else may write it.
uint32_t submit_replica(const PoolConfig& pool, const std::string& qos,
                        const std::string& admin_comment, uint32_t drain_seconds, std::string* why);
// scancel --signal=SIG --full for a running job (its batch script and every
// step); SIGKILL cancels it.  Through the RPC: call with NO slurmctld lock
// held.  A Slurm error code.
int signal_job_rpc(uint32_t job_id, uint16_t signal);

}  // namespace planc::slurm

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_CTLD_H_
