// Everything preempt/planc remembers about preemptions, and what it must do
// next.
//
// Pure: no Slurm, no threads, no clock of its own.  Time comes in as
// milliseconds since the epoch (wall clock, as Slurm's own times are), so
// unit tests drive it with a fake clock.  preempt/planc owns one tracker,
// guarded by its mutex; Slurm's callbacks report events to it and the
// plugin's worker thread asks it what to do (plan()), does it through
// Slurm, and reports back (done()).
//
// A preemption's life:
//   start()        Slurm asks for the victim's grace time (GRACE_TIME): the
//                  preemption is counted (the per-job cap) and, with a
//                  grace, remembered until the grace ends; without one, the
//                  victim is watched for kNoGraceKillAfterMs in case it
//                  outlives Slurm's SIGTERM.
//   run_ended()    the victim's run ends inside slurmctld (its completion
//                  path): during the grace that is the victim's own doing
//                  (it checkpointed and exited, crashed, was cancelled),
//                  and the policy decides what it becomes (judge_run_end).
//   plan()/done()  the worker, every tick: end graces on time, call a
//                  preemption off when its preemptor is gone or runs
//                  without the victim, SIGKILL a no-grace victim still
//                  dying, requeue a victim that ended during its grace,
//                  let a robbed preemptor preempt again.
// Everything but the no-grace kills is saved in the state file
// (serialize/parse), so a restarted slurmctld resumes graces on time.
//
// Slurm does not tell GRACE_TIME which job is the preemptor; the plugin
// passes the preemptor of the last preemptable() call (Slurm asks
// preemptable() for the candidates of one preemptor and then preempts the
// chosen ones under the same hold of the job write lock).  0 means unknown:
// such a preemption is never called off.
#ifndef PLANC_COMMON_PREEMPTION_TRACKER_H_
#define PLANC_COMMON_PREEMPTION_TRACKER_H_

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/preempt_policy.h"
#include "common/result.h"

namespace planc {

using TimeMs = int64_t;  // milliseconds since the epoch

// How long a victim without grace may take to die of Slurm's SIGTERM before
// the plugin SIGKILLs it (Slurm alone: at least 5 s, slurmd's
// MAX(KillWait, 5)).
inline constexpr TimeMs kNoGraceKillAfterMs = 500;
// A preemptor still waiting this long after its preemption is left to
// Slurm (something else holds it back).
inline constexpr time_t kPreemptorWatchSeconds = 600;
// The grace ends this long after its start (in ms) plus the grace.  Slurm
// is told one second more (kSlurmGraceExtraSeconds) and compares its
// end_time in whole seconds (now >= end_time), so its own scheduling passes
// never end a grace before the plugin does: timed from the truncated second,
// a 30 s grace could be 29.1 s.  When the worker ends a grace it brings
// Slurm's end_time forward to that moment (slurm::end_grace).
// The slack also covers the SIGTERM's way out: it leaves through
// slurmctld's agent after the grace's start is taken, and may wait there
// for the scheduling pass that started the preemption.
inline constexpr TimeMs kGraceSlackMs = 200;
inline constexpr uint32_t kSlurmGraceExtraSeconds = 1;

// What slurmctld shows of one watched job (the adapter reads it under the
// job read lock).
struct JobView {
  enum class State : uint8_t { kGone, kPending, kRunning, kCompleting, kFinished };
  State state = State::kGone;
  bool in_preemption = false;        // a victim: Slurm's preempt_time is set
  bool preempted_state = false;      // its base state is PREEMPTED
  bool waits_on_preemption = false;  // a preemptor: pending with preempt_start_time set
  bool cancelled = false;            // finished as CANCELLED
  bool held = false;                 // pending and held (scontrol hold: priority 0)
  uint32_t run = 0;                  // Slurm's restart count: which run this is
  // A preemptor: the tiers its QoS now may preempt (TierTable::
  // preempt_mask), and that QoS's tier (nullopt: not a Plan C tier, or
  // not looked at).  All bits by default (not looked at).
  uint8_t preempts = 0xff;
  std::optional<TierId> tier;
};

struct TrackerAction {
  enum class Kind : uint8_t {
    kEndGrace,          // the grace is over: kill, then requeue or cancel (Slurm's preemption)
    kCallOff,           // the preemptor no longer needs the victim: give it its run back
    kKill,              // SIGKILL a no-grace victim still dying
    kRequeue,           // requeue a victim that ended on its own during its grace
    kReleasePreemptor,  // its victims are gone but it still waits: let it preempt again
  };
  Kind kind;
  uint32_t job_id = 0;     // the victim; the preemptor for kReleasePreemptor
  uint32_t preemptor = 0;  // kEndGrace, kCallOff
  std::string reason;      // kCallOff: "job 10 was cancelled"
  // The victim's preemption, for its note (kEndGrace, kCallOff, kRequeue);
  // when == 0 if the tracker never saw it start (a state file lost).
  PreemptionEvent event;
  bool operator==(const TrackerAction&) const = default;
};

class PreemptionTracker {
 public:
  PreemptionTracker(uint32_t max_count, uint32_t window_seconds)
      : ledger_(max_count, window_seconds) {}

  // --- the per-job cap (hot path: no allocation) ---
  const PreemptLedger& ledger() const { return ledger_; }
  bool capped(uint32_t job_id, time_t now) const { return ledger_.capped(job_id, now); }

  // PreemptMaxCount and PreemptWindow of a reloaded planc.conf.
  void set_limits(uint32_t max_count, uint32_t window_seconds) {
    ledger_.set_limits(max_count, window_seconds);
  }

  // --- events from Slurm's callbacks ---

  // A preemption starts at e.when (seconds) / now_ms.  Counts it and returns
  // the event completed with count_in_window and capped_until, for the note.
  PreemptionEvent start(PreemptionEvent e, TimeMs now_ms);
  // Slurm asks again to preempt run `run` of `job_id`, whose grace this
  // tracker started and still runs: the controller now in charge lost
  // the preemption (a backup that took over from a job state saved before
  // it, a controller SIGKILLed within its state save's few seconds).  The
  // grace goes on from its first start: not counted again, no second
  // SIGTERM, its preemptor now `preemptor`.  Returns the milliseconds left
  // of it (0 when over), or nullopt when it is not such a grace.
  std::optional<TimeMs> resume_grace(uint32_t job_id, uint32_t run, uint32_t preemptor,
                                     TierId preemptor_tier, TimeMs now_ms);

  // The run of `job_id` ended inside slurmctld while Slurm's preempt_time
  // was set.  `requeueable`: Slurm may requeue the job.  Returns what the
  // policy makes of it and, for the owner's note, the preemption it ended
  // (nullopt when the tracker has none in grace for it, e.g. Slurm's own
  // preemption completing, or the record of a requeue the worker asked
  // for: see kDuplicate).
  struct RunEnd {
    enum class Kind : uint8_t {
      kNone,        // nothing to change
      kSlurmEnded,  // Slurm ended the grace itself (a scheduling pass got there
                    // first): the note's final word is still the plugin's, and
                    // the victim is watched for its SIGKILL as a graceless one
      kDuplicate,   // the record Slurm writes again when the worker requeues (kRequeue)
      kTreatAsPreempted,
      kFinished,
      kCancelledInGrace,
    };
    Kind kind = Kind::kNone;
    std::optional<PreemptionEvent> event;
  };
  RunEnd run_ended(uint32_t job_id, RunEndVerdict verdict, bool requeueable, TimeMs now_ms);

  // --- the worker ---

  // The jobs whose state plan() needs.
  std::vector<uint32_t> watched() const;
  // Counts the changes Slurm's callbacks make (start(), run_ended()).  The
  // worker reads it with watched() and again before plan(): a change
  // between the two (a scheduling pass preempting while the worker waits
  // for the job lock) makes its view stale, and it looks again.
  uint64_t version() const { return version_; }
  // What to do now.  `seen` holds every job of watched() (kGone for one
  // slurmctld no longer has); a job missing from it was not looked at (its
  // preemption started after watched(): Slurm's scheduling pass preempts
  // while the worker waits for the job lock) and is left for the next
  // plan().  Drops what needs no more watching (an ended preemptor, a
  // victim that is over).
  std::vector<TrackerAction> plan(TimeMs now_ms, const std::map<uint32_t, JobView>& seen);
  // The worker did (happened) or could not do an action.  kCallOff that
  // happened takes the preemption back from the ledger; kEndGrace or
  // kCallOff that did not happen (the job changed meanwhile) stays for the
  // next plan().
  void done(const TrackerAction& a, bool happened);
  // Marks a kRequeue as under way: the record Slurm writes while the
  // worker requeues is then a kDuplicate.  Cleared by done().
  void requeuing(uint32_t job_id);
  // When plan() next has something due (a grace deadline, a kill), or
  // nullopt.  Robbed preemptors and requeues are found on ticks.
  std::optional<TimeMs> next_due() const;
  // Whether anything is in flight (the worker then ticks often).
  bool busy() const { return !victims_.empty() || !preemptors_.empty(); }

  // Preempted --spot-fallback jobs being requeued: the worker moves each
  // to its fallback tier once it is pending again.  Job id -> the restart
  // count of the run that was preempted.  Saved with the rest, so a
  // restart between a preemption and its requeue keeps the move.
  void expect_fallback(uint32_t job_id, uint32_t run) {
    fallbacks_[job_id] = run;
    dirty_ = true;
  }
  void fallback_settled(uint32_t job_id) { dirty_ = fallbacks_.erase(job_id) || dirty_; }
  const std::map<uint32_t, uint32_t>& fallbacks() const { return fallbacks_; }

  // Ledger housekeeping: drop preemptions that left the window, and jobs
  // that ended (`ended`: from the jobs in the ledger, those Slurm no longer
  // runs or holds).
  void prune(time_t now) { ledger_.prune(now); }
  void forget(const std::vector<uint32_t>& ended);

  // Changed since the last serialize().
  bool dirty() const { return dirty_; }
  // The state file's text (common/state_file.h framing): the ledger, the
  // preemptions in grace, the ones whose requeue is pending, and the
  // preemptors in flight.  Clears dirty().
  std::string serialize();
  // Reads that text, and version 1 files (the ledger alone).
  static Result<PreemptionTracker> parse(std::string_view text, uint32_t max_count,
                                         uint32_t window_seconds);

  // Whether `candidate` is one of `preemptor`'s victims still in their
  // grace; nullopt when `preemptor` has none in its grace (preempt/planc
  // then offers it those victims only: docs/design.md, "A preemptor keeps
  // the nodes it is clearing").
  std::optional<bool> own_victim_in_grace(uint32_t preemptor, uint32_t candidate) const;

  // For tests and logs.
  size_t in_grace() const;
  bool operator==(const PreemptionTracker& o) const {
    return ledger_ == o.ledger_ && victims_ == o.victims_ && preemptors_ == o.preemptors_;
  }

 private:
  enum class Phase : uint8_t {
    kGrace,           // in its grace; ends at event.when + grace
    kKillCheck,       // no grace: SIGKILL at kill_due if still dying (not saved)
    kRequeuePending,  // ended on its own during the grace; to be requeued
    kRequeuing,       // the worker is requeueing it now
  };
  struct Victim {
    PreemptionEvent event;
    Phase phase = Phase::kGrace;
    TimeMs kill_due = 0;
    bool operator==(const Victim&) const = default;
  };
  struct Preemptor {
    // Its victims and the run of each it preempted: a victim requeued and
    // started again is a new run, not the one whose resources it waits for.
    std::vector<std::pair<uint32_t, uint32_t>> victims;
    time_t since = 0;
    bool operator==(const Preemptor&) const = default;
  };
  static TimeMs grace_end_ms(const PreemptionEvent& e) {
    // Without its millisecond start (a grace read from an older state
    // file) it is timed from the end of its second, never short.
    const TimeMs started = e.when_ms
                               ? std::max<TimeMs>(e.when_ms, static_cast<TimeMs>(e.when) * 1000)
                               : (static_cast<TimeMs>(e.when) + 1) * 1000;
    return started + static_cast<TimeMs>(e.grace_seconds) * 1000 + kGraceSlackMs;
  }
  // Forgets victim `job_id`; and, unless `keep_for_preemptor`, takes it
  // off its preemptor's list.  Kept there, a victim whose grace ended
  // holds its preemptor back until it is seen gone (plan()): while it
  // completes its nodes are not free, and a preemptor released then
  // preempts a second set of runs elsewhere.
  void drop_victim(uint32_t job_id, bool keep_for_preemptor = false);

  PreemptLedger ledger_;
  std::map<uint32_t, Victim> victims_;
  uint64_t version_ = 0;  // not saved: only compared within one pass
  std::map<uint32_t, Preemptor> preemptors_;
  std::map<uint32_t, uint32_t> fallbacks_;
  bool dirty_ = false;
};

}  // namespace planc

#endif  // PLANC_COMMON_PREEMPTION_TRACKER_H_
