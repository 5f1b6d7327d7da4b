// The starvation upgrade: which pending jobs slurmctld/planc moves to a
// free attempt in a higher tier, and which marked jobs go back.
//
// Policy (000, section 8): "P3 queued more than 30 minutes gets a free
// attempt as P2".  Which tier starves into which, and after how long, is
// each tier's StarveInto and StarveAfter in planc.conf (the policy's
// values by default: P3 into P2 after StarvationThreshold).  A job of a
// tier with StarveInto counts as starving when
//   - it is pending for Resources or Priority, i.e. for the cluster, not for
//     a reason of its own (held, a dependency, a begin time, its account's
//     or QoS limits, or no reason yet), and
//   - it has been eligible (Slurm's accrue time: not held, dependencies met,
//     begin time reached) for MORE than its tier's StarveAfter (default
//     StarvationThreshold) seconds; at exactly that it has not starved yet.
// Each interval at most StarvationMaxPerInterval jobs are upgraded, longest
// waiting first (ties: lower job id first).
//
// Free attempts must not cascade (a starved job taking GPUs from other
// spot work, which then starves in turn):
//   - together, pending and running, they hold at most StarvationMaxPercent
//     of the pool's GPUs: an upgrade that would pass it waits, and the
//     longest waiting job that could fit goes first when room appears (a
//     job larger than that share never gets an attempt: it waits in its
//     tier);
//   - a free attempt never preempts (preempt/planc), and it queues below
//     every paying job of the tier it is lent (slurmctld/planc sets its
//     Nice to what the tier's QoS adds to its priority, and takes it off
//     again when the attempt ends).
//
// A job with the free-attempt mark (common/job_marks.h), which names the
// tiers it went from and to:
//   - pending in the "to" tier and requeued after the upgrade (it ran: its
//     submit time is later than the mark's time): the attempt is over,
//     back to the "from" tier with the mark removed and a fresh clock
//     (requeue restarts Slurm's accrue time);
//   - pending in any other tier (someone moved it): the mark is removed;
//   - otherwise (still waiting, running, finished) it is left alone.
//
// Pure functions; the plugin fills the facts from job records.
#ifndef PLANC_COMMON_STARVATION_H_
#define PLANC_COMMON_STARVATION_H_

#include <cstdint>
#include <ctime>
#include <string_view>
#include <vector>

#include "common/config.h"

namespace planc {

enum class PendingReason {
  kNone,       // not yet looked at by the scheduler
  kResources,  // counts
  kPriority,   // counts
  kHeld,       // by the user or an admin
  kDependency,
  kBeginTime,     // --begin, or a requeued job's restart delay
  kAccountLimit,  // association or QoS limits
  kOther,
};

// The reasons that count as starving: waiting for the cluster.
bool reason_counts(PendingReason r);
// Slurm's name of the reason, for the mark and the log ("Resources").
std::string_view reason_name(PendingReason r);

struct PendingJob {
  uint32_t job_id = 0;
  TierId tier = TierId::kP3;
  PendingReason reason = PendingReason::kNone;
  time_t eligible_since = 0;  // 0: unknown (not counted)
  uint32_t gpus = 0;          // asked for
};

// The free attempts' share: at most cap_gpus held by them together
// (held_gpus now).
struct FreeAttemptShare {
  uint64_t cap_gpus = UINT64_MAX;
  uint64_t held_gpus = 0;
};
// StarvationMaxPercent of a pool of `pool_gpus` (0: not known yet, no GPU
// job is upgraded).
uint64_t free_attempt_cap(const PlancConfig& cfg, uint64_t pool_gpus);

struct Upgrade {
  uint32_t job_id;
  uint32_t waited_seconds;
  PendingReason reason;
  TierId from, to;  // to: the tier's StarveInto
};

// How long a job of `tier` may wait before it starves: the tier's
// StarveAfter, else StarvationThreshold.
uint32_t starve_after_seconds(const PlancConfig& cfg, TierId tier);

// True when `job` has starved at `now` (see the header comment).
bool is_starving(const PlancConfig& cfg, const PendingJob& job, time_t now);

// The jobs to upgrade this interval, in order.
std::vector<Upgrade> select_upgrades(const PlancConfig& cfg, const std::vector<PendingJob>& jobs,
                                     time_t now, const FreeAttemptShare& share = {});

// A pending job carrying the free-attempt mark.
struct MarkedJob {
  uint32_t job_id = 0;
  TierId tier = TierId::kP2;                    // its tier now
  time_t submit_time = 0;                       // Slurm resets it on requeue
  time_t upgraded_at = 0;                       // from the mark; 0: unreadable
  TierId from = TierId::kP3, to = TierId::kP2;  // from the mark
};

enum class MarkAction { kKeep, kBack, kDropMark };
MarkAction decide_marked(const MarkedJob& job);

}  // namespace planc

#endif  // PLANC_COMMON_STARVATION_H_
