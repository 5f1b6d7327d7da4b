// Capacity infusion (policy 000, section 4; issue 16): idle GPUs grow the
// serving pools, with cooldown.  The decision only; the plugin that acts on
// it is slurmctld/planc (it submits and drains the replica jobs).  Pure: no
// Slurm header, no clock.
//
// Section 4:
//     idle > 5% of capacity:  grow the Plan B guaranteed pool (P1)
//     idle > 15%:             grow the Plan B spot pool (P3)
//     idle > 30%:             open a market auction (P2 spot)
//   at least 5 minutes between two scale operations, at most 4 an hour.
//
// Read here as:
//   - idle is the idle share of the pool's GPUs over the last window (the
//     caller measures it time-weighted: common/idle_meter.h), in per mille;
//   - one scale operation (one replica more or fewer) at a time; the band
//     idle falls in decides which pool grows: above the P3 threshold the
//     P3 pool (preemptible, so cheapest to give back), between the P1 and
//     the P3 threshold the P1 pool.  A pool grows only below its maximum
//     and when a replica fits in the idle GPUs;
//   - a pool shrinks (voluntarily) when idle falls below its threshold minus
//     the hysteresis, P3 first, never below its minimum.  The hysteresis is
//     at least one replica's share of the pool: a shrink that would lift
//     idle back above the threshold would be undone by the next grow;
//   - guaranteed work that reclaiming replicas would let start
//     (reclaimable_demand) stops every grow and every voluntary shrink for
//     as long as it waits, whatever is being freed for it; when it needs
//     more GPUs than are idle within the 80% cap plus those already being
//     freed (replicas draining, jobs in a preemption's grace), the infused
//     P1 pool gives one replica back at once, ignoring the cooldown and the
//     hourly limit (giving back is never held up);
//   - growing and voluntary shrinking wait for the cooldown since the last
//     scale operation and stop at the hourly limit (a rolling hour);
//   - crossing above the market threshold asks for a market round at once;
//     it is not a scale operation (the market has its own interval) and is
//     asked again only after idle has fallen below the threshold minus the
//     hysteresis.
#ifndef PLANC_COMMON_INFUSION_H_
#define PLANC_COMMON_INFUSION_H_

#include <cstdint>
#include <ctime>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/tier.h"

namespace planc {

struct InfusionSettings {
  uint32_t p1_idle_permille = 50;
  uint32_t p3_idle_permille = 150;
  uint32_t market_idle_permille = 300;
  uint32_t hysteresis_permille = 20;
  uint32_t cooldown_seconds = 300;
  uint32_t max_ops_per_hour = 4;
  uint32_t window_seconds = 60;  // idle is measured over this long (InfusionWindow)
  // The "hour" of InfusionMaxPerHour (InfusionLimitWindow): an hour, but
  // shorter in a time-compressed replay (tools/planc-replay), as the
  // other policy clocks are.
  uint32_t limit_window_seconds = 3600;
};

// The mark in an infused replica's AdminComment (set at submission by
// slurmctld/planc as SlurmUser; users cannot set or change it):
//   [planc:infused] pool maas-guaranteed: a replica capacity infusion added (P1, drain grace 30 s)
// preempt/planc reads the pool from it; no other P1 job is ever preempted.
inline constexpr std::string_view kInfusedTag = "[planc:infused]";
std::string infused_mark(const std::string& pool, TierId tier, uint32_t drain_grace_seconds);
// The mark at the front of `admin_comment`, none otherwise (or when
// malformed: then the job is no replica to anyone).
struct InfusedMark {
  std::string pool;
  TierId tier = TierId::kP1;
  uint32_t drain_grace_seconds = 0;
};
std::optional<InfusedMark> read_infused_mark(std::string_view admin_comment);

// A replica is submitted at priority 1 (only an operator may set one) and
// with this Nice, Slurm's largest, so that priority/multifactor computes
// 1 again whenever it recomputes the replica's priority (after a hold and
// a release); job_submit/planc refuses its owner a lower Nice or a
// priority (common/submit_policy.h).
inline constexpr int64_t kReplicaNice = 2147483645;

// P0 keeps its 40 s (issue 16): a P1 replica that infusion added may be
// preempted by a P0 or P1 job that is not itself a replica, with its
// pool's drain grace; no other P1 job is ever preempted (TierTable's
// can_preempt still says so for them).
bool reclaims_replica(TierId preemptor, bool preemptor_is_replica, TierId victim,
                      bool victim_is_replica);

struct ServingPool {
  std::string name;
  TierId tier = TierId::kP1;  // P1 or P3
  uint32_t gpus_per_replica = 1;
  uint32_t min_replicas = 0, max_replicas = 0;
  uint32_t replicas = 0;  // now
};

// Why a pending guaranteed (P0, P1) job waits, as slurmctld says it.
enum class GuaranteedWait : uint8_t {
  kNotYet,           // not looked at by the scheduler yet (just submitted)
  kResources,        // Resources
  kPriority,         // Priority
  kCapLimit,         // the 80% cap: the guaranteed partition QoS's GrpTRES
  kOtherLimit,       // another limit (per user, per account, ...)
  kHeld,             // held
  kDependency,       // a dependency
  kBeginTime,        // its --begin
  kUnavailableNode,  // it asks for a node that is down, drained or not responding
  kOther,
};
struct PendingGuaranteed {
  uint32_t job_id = 0;
  uint32_t gpus = 0;
  GuaranteedWait why = GuaranteedWait::kNotYet;
};
// The guaranteed jobs that giving infused P1 replicas back would let start,
// and the GPUs they ask for: those waiting for Resources or Priority (or
// not looked at yet) that fit under the cap, and those held by the cap
// that the P1 replicas' GPUs would bring under it.  Never a job larger
// than the cap, held, waiting on a dependency, its --begin or another
// limit, or pinned to an unavailable node.  `cap`: the 80% cap in GPUs
// (none: not enforced); `held`: GPUs P0 and P1 jobs hold, replicas
// included; `p1_replica_gpus`: GPUs the infused P1 replicas hold.
struct GuaranteedDemand {
  uint64_t gpus = 0;
  std::vector<uint32_t> jobs;
};
GuaranteedDemand reclaimable_demand(const std::vector<PendingGuaranteed>& pending,
                                    std::optional<uint64_t> cap, uint64_t held,
                                    uint64_t p1_replica_gpus);

// What waiting guaranteed work means for the controller this pass.
struct GuaranteedNeed {
  bool waiting = false;  // some wait that replicas could serve: nothing grows
  bool reclaim = false;  // more than is idle or being freed: give one back now
};

enum class InfusionAction : uint8_t { kNone, kGrow, kShrink };

// What holds an operation the idle share asks for.
enum class InfusionHold : uint8_t { kNone, kCooldown, kHourlyLimit, kGuaranteedWaiting };

struct InfusionDecision {
  InfusionAction action = InfusionAction::kNone;
  std::string pool;
  bool reclaim = false;       // a shrink for waiting guaranteed work
  bool market_round = false;  // ask the market for a round now
  // An operation wanted but held back: by what, and which (a grow or a
  // shrink of the tier's pool); kNone when nothing was wanted.
  InfusionHold held = InfusionHold::kNone;
  InfusionAction held_action = InfusionAction::kNone;
  TierId held_tier = TierId::kP1;
  std::string reason;  // for the log: why, or why not
};

class InfusionController {
 public:
  explicit InfusionController(InfusionSettings s) : s_(s) {}
  // New settings (planc.conf reloaded); the operations done so far still
  // count for the cooldown and the hourly limit.
  void configure(InfusionSettings s) { s_ = s; }

  // `idle_gpus` of `pool_gpus` idle over the window (idle_permille is
  // their ratio), and what guaranteed jobs waiting need.
  InfusionDecision decide(time_t now, uint32_t idle_gpus, uint32_t pool_gpus, GuaranteedNeed need,
                          const std::vector<ServingPool>& pools);
  // The caller did it: a grow or a voluntary shrink counts for the cooldown
  // and the hourly limit, a reclaim does not.
  void done(time_t now, const InfusionDecision& d);

  // For `scontrol show config`: operations in the hour (the limit's
  // window) before `now`, and
  // when the next one may happen (now when nothing holds it).
  uint32_t ops_last_hour(time_t now) const;
  time_t next_allowed(time_t now) const;

 private:
  void forget_before(time_t t);
  // The hysteresis for `p`: InfusionHysteresis, or one replica's share of
  // the pool when that is more.
  uint32_t hysteresis(const ServingPool& p, uint32_t pool_gpus) const;
  const ServingPool* shrinkable(const std::vector<ServingPool>& pools, TierId tier, uint32_t idle,
                                uint32_t threshold, uint32_t pool_gpus) const;
  time_t limit_window() const { return s_.limit_window_seconds ? s_.limit_window_seconds : 3600; }
  InfusionSettings s_;
  std::deque<time_t> ops_;  // scale operations, oldest first
  bool above_market_ = false;
};

// A replica as the controller sees it when it picks one to give back.
struct ReplicaView {
  uint32_t job_id = 0;
  std::string pool;
  bool running = false;
  bool ending = false;  // draining already, in a preemption, or completing
};
// The replica of `pool` a shrink takes: never one already ending; the
// newest first, pending before running when the pool shrinks (no server
// interrupted), running first for a reclaim (only a running one frees
// GPUs).  None when there is no such replica.
std::optional<uint32_t> shrink_victim(const std::vector<ReplicaView>& replicas,
                                      const std::string& pool, bool reclaim);
// Replicas of pools planc.conf no longer has (and not ending yet): the
// controller drains them.
std::vector<uint32_t> orphan_replicas(const std::vector<ReplicaView>& replicas,
                                      const std::vector<ServingPool>& pools);
// Replicas not started yet (and not ending): while guaranteed work waits
// for GPUs the controller cancels them.  A pending replica frees nothing,
// and it would compete with the guaranteed job for the GPUs being freed
// (as a P1 job it may even preempt spot work for them); the pool grows
// again from idle GPUs once nothing guaranteed waits.
std::vector<uint32_t> pending_replicas(const std::vector<ReplicaView>& replicas);

}  // namespace planc

#endif  // PLANC_COMMON_INFUSION_H_
