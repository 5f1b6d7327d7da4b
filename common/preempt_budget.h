// The P3 preemption budget: section 9's "P3 preemption rate under 10% an
// hour" made a limit preempt/planc keeps, when planc.conf asks for it
// (P3PreemptMaxPercent; off by default).
//
// The rule: a preemption of a run that counts as P3 (a P3 job, or a P3 job
// on its free attempt as P2) may start at `now` only while
//     preemptions of such runs started in (now - window, now]  <
//     floor(percent x the P3 runs running now / 100).
// Why "running now": a run running at `now` is counted in the hour that
// contains `now` (it ends in that hour or still runs at its end), so if
// every preemption keeps to this rule, no clock hour's rate (preempted runs
// over the runs that ended in it or still run at its end, as the replay
// and the recording rule count it) passes `percent`, whatever the hour's
// boundaries.  The window is a sliding one for the same reason.
//
// Who spends it: a P2 preemptor may take a P3 victim only while the budget
// lasts, and only where the victims it needs fit in what is left
// (p3_budget_covers below): Slurm offers it every running P3 run while
// any of the budget is left, ranks them by the node they free
// (NodeCrowding), and it takes those of a node that frees its GPUs with no
// more preemptions than remain.  (Offering only the first N P3 runs of
// slurmctld's job list, N the budget left, gave a P2 job arbitrary
// candidates that seldom freed a node: with one preemption left it
// waited beside a node held by one P3 run.)  A guaranteed (P0/P1)
// preemptor's start is the SLA's and is never refused: once the budget is
// spent (or a smaller soft share of it, P3PreemptSoftPercent) it takes P2 victims (their grace fits
// the 40 s) before P3 ones (victim_class_now(), and the fewest P3 runs first in the node key:
// NodeCrowding::Ask::p3_first), and its P3 victims are counted all the same.  The
// soft share would keep a reserve for guaranteed jobs with no P2 victim in reach; on the
// steady-state replay half the budget did not lower the worst P3 hour and lost more P2 work
// (docs/design.md), so it is off by default.
//
// Pure and not thread-safe: preempt/planc guards it with its mutex.
#ifndef PLANC_COMMON_PREEMPT_BUDGET_H_
#define PLANC_COMMON_PREEMPT_BUDGET_H_

#include <cstdint>
#include <ctime>
#include <deque>
#include <optional>
#include <utility>

#include <string>
#include <string_view>

#include "common/preempt_policy.h"  // counts_in_window
#include "common/result.h"

namespace planc {

class PreemptBudget {
 public:
  PreemptBudget(uint32_t percent, uint32_t window_seconds)
      : percent_(percent), window_(window_seconds) {}
  // A reloaded planc.conf: applies at once to the preemptions kept.
  void set_limits(uint32_t percent, uint32_t window_seconds) {
    percent_ = percent;
    window_ = window_seconds;
  }
  bool enabled() const { return percent_ > 0; }

  // A preemption of a P3-counted run of `job_id` started at `now`.
  void record(uint32_t job_id, time_t now);
  // Takes back the one of `job_id` recorded at `when` (a preemption called
  // off before its grace ended); false when there was none.
  bool unrecord(uint32_t job_id, time_t when);
  // Started within the window ending at `now` (a time in the future, the
  // clock having gone back, still counts).
  uint32_t used(time_t now) const;
  // How many more may start at `now` with `p3_running` P3-counted runs
  // running; nullopt when there is no limit (off, or the count unknown:
  // slurmctld/planc, which counts them, is not running or has not sampled).
  std::optional<uint32_t> remaining(time_t now, std::optional<uint32_t> p3_running) const;
  // Whether the preemptions in the window have reached `percent` (at most
  // the budget's) of `p3_running`: false with no budget or no count.  At
  // the budget's own percent, the same as remaining() == 0.
  bool reached(uint32_t percent, time_t now, std::optional<uint32_t> p3_running) const;
  // Drops what has left the window.
  void prune(time_t now);
  size_t size() const { return started_.size(); }

  // Saved in StateSaveLocation (planc_p3_budget) so that a restart or a
  // backup controller taking over counts the hour's preemptions on: a
  // self-checking file (common/state_file.h).  serialize() clears dirty().
  std::string serialize();
  static Result<PreemptBudget> parse(std::string_view text, uint32_t percent,
                                     uint32_t window_seconds);
  // Changed since the last serialize().
  bool dirty() const { return dirty_; }

 private:
  bool in_window(time_t t, time_t now) const { return counts_in_window(t, now, window_); }
  // `percent` of `p3_running`, rounded down: the preemptions it allows.
  static uint64_t share(uint32_t percent, uint32_t p3_running) {
    return uint64_t{percent} * p3_running / 100;
  }
  uint32_t percent_;
  uint32_t window_;
  std::deque<std::pair<time_t, uint32_t>> started_;  // (when, job id), oldest first
  bool dirty_ = false;
};

// Whether a P2 preemptor with `left` P3 preemptions left may take a P3
// candidate when `runs_per_node` runs must go on each of the `nodes` nodes
// it needs (the count NodeCrowding works out for the candidate's best
// node): the most it may take is runs_per_node x nodes.
inline bool p3_budget_covers(uint32_t runs_per_node, uint32_t nodes, uint32_t left) {
  return uint64_t{runs_per_node} * (nodes ? nodes : 1) <= left;
}

// The victim class preempt/planc ranks a candidate by (common/preempt_policy.h
// victim_rank): the tier's VictimClass, except that a P3-counted run is
// taken after P2 ones (`p2_class` + 1, at most 3) for a guaranteed
// preemptor once the budget's soft share is reached (P3PreemptSoftPercent).
uint8_t victim_class_now(uint8_t tier_class, bool counts_as_p3, bool soft_reached,
                         uint8_t p2_class);

}  // namespace planc

#endif  // PLANC_COMMON_PREEMPT_BUDGET_H_
