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
//     caller measures it time-weighted: VacancyMeter, common/market.h), in
//     per mille;
//   - one scale operation (one replica more or fewer) at a time; the band
//     idle falls in decides which pool grows: above the P3 threshold the
//     P3 pool (preemptible, so cheapest to give back), between the P1 and
//     the P3 threshold the P1 pool.  A pool grows only below its maximum
//     and when a replica fits in the idle GPUs;
//   - a pool shrinks (voluntarily) when idle falls below its threshold minus
//     the hysteresis, P3 first, never below its minimum;
//   - guaranteed work waiting shrinks the infused P1 pool at once, ignoring
//     the cooldown and the hourly limit (giving back is never held up);
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

// The idle GPUs over the last `seconds`, time-weighted from samples of
// (time, idle GPUs, pool GPUs), each holding until the next.  Nothing
// until the samples cover the whole window: one sample decides nothing.
class IdleWindow {
 public:
  void observe(time_t now, uint32_t idle, uint32_t pool);
  struct Measure {
    uint32_t idle_gpus = 0, pool_gpus = 0;  // means over the window, rounded down
  };
  std::optional<Measure> measure(time_t now, uint32_t seconds) const;

 private:
  struct Sample {
    time_t at;
    uint32_t idle, pool;
  };
  std::deque<Sample> samples_;  // oldest first
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

enum class InfusionAction : uint8_t { kNone, kGrow, kShrink };

struct InfusionDecision {
  InfusionAction action = InfusionAction::kNone;
  std::string pool;
  bool reclaim = false;       // a shrink for waiting guaranteed work
  bool market_round = false;  // ask the market for a round now
  std::string reason;         // for the log: why, or why not
};

class InfusionController {
 public:
  explicit InfusionController(InfusionSettings s) : s_(s) {}
  // New settings (planc.conf reloaded); the operations done so far still
  // count for the cooldown and the hourly limit.
  void configure(InfusionSettings s) { s_ = s; }

  // `idle_gpus` of `pool_gpus` idle over the window (idle_permille is
  // their ratio), and whether guaranteed jobs wait for GPUs.
  InfusionDecision decide(time_t now, uint32_t idle_gpus, uint32_t pool_gpus,
                          bool guaranteed_waiting, const std::vector<ServingPool>& pools);
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
  time_t limit_window() const { return s_.limit_window_seconds ? s_.limit_window_seconds : 3600; }
  InfusionSettings s_;
  std::deque<time_t> ops_;  // scale operations, oldest first
  bool above_market_ = false;
};

}  // namespace planc

#endif  // PLANC_COMMON_INFUSION_H_
