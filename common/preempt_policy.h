// Plan C preemption policy: who may be chosen as a victim, in which order,
// with how much grace, and what the victim's owner is told.
//
// Pure code: preempt/planc (plugins/preempt_planc.cc) translates Slurm's job
// records into these types.  PreemptLedger holds the per-job preemption
// history behind the "at most N preemptions in any window" cap; it is a
// plain value, not thread-safe: the plugin guards it with its own mutex.
#ifndef PLANC_COMMON_PREEMPT_POLICY_H_
#define PLANC_COMMON_PREEMPT_POLICY_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/result.h"

namespace planc {

// Whether an event at `t` still counts at `now` in a sliding window of
// `window` seconds: while now - t < window, and always when t is in the
// future (the clock went backwards).  The per-job cap's rule and the P3
// preemption budget's (common/preempt_budget.h).
inline bool counts_in_window(time_t t, time_t now, uint32_t window) {
  return t > now || now - t < static_cast<time_t>(window);
}

// The per-job cap.  A preemption at time t counts while now - t < window:
// at exactly `window` seconds after it, it has left the window.  A
// timestamp in the future (the clock went backwards) still counts, so a
// clock step never frees a job early from the cap, and never makes it
// count twice.
class PreemptLedger {
 public:
  PreemptLedger(uint32_t max_count, uint32_t window_seconds)
      : max_count_(max_count), window_(window_seconds) {}

  // Counts one preemption of `job_id` starting at `now`.
  void record(uint32_t job_id, time_t now);
  // Preemptions of `job_id` within the window ending at `now`.
  uint32_t count_in_window(uint32_t job_id, time_t now) const;
  // True when the job may not be chosen as a victim again yet.
  bool capped(uint32_t job_id, time_t now) const {
    return count_in_window(job_id, now) >= max_count_;
  }
  // When the oldest counted preemption leaves the window (0: not capped).
  time_t capped_until(uint32_t job_id, time_t now) const;
  void forget(uint32_t job_id) { history_.erase(job_id); }
  // A reloaded planc.conf's PreemptMaxCount and PreemptWindow: they apply
  // at once to the history kept.
  void set_limits(uint32_t max_count, uint32_t window_seconds) {
    max_count_ = max_count;
    window_ = window_seconds;
  }
  // Takes back the preemption of `job_id` counted at `when` (one called
  // off before its grace ended); false when there was none.
  bool unrecord(uint32_t job_id, time_t when);
  // Drops preemptions that have left the window, and jobs left with none.
  void prune(time_t now);

  std::vector<uint32_t> job_ids() const;
  size_t size() const { return history_.size(); }
  bool operator==(const PreemptLedger& o) const { return history_ == o.history_; }

  // A self-checking text form for the state file: a header, one line per
  // job ("<job id> <unix time>..."), and a trailer with the job count and a
  // checksum, so a truncated or corrupt file is detected, never half-read.
  std::string serialize() const;
  static Result<PreemptLedger> parse(std::string_view text, uint32_t max_count,
                                     uint32_t window_seconds);

 private:
  friend class PreemptionTracker;  // saves the history with its own state
  bool in_window(time_t t, time_t now) const { return counts_in_window(t, now, window_); }
  uint32_t max_count_;
  uint32_t window_;
  std::map<uint32_t, std::vector<time_t>> history_;
};

// Which jobs may have a counted preemption, readable without a lock.
//
// Slurm asks the preemptable check and the victim rank thousands of times
// per scheduling pass (it calls PREEMPT_DATA_PRIO twice per comparison while
// it sorts the candidates, src/slurmctld/preempt.c), almost always about
// jobs the ledger has never seen.  This filter answers "certainly not in the
// ledger" with one relaxed load, so only jobs that may have a history pay for
// the ledger's mutex.  One bit per job id modulo 65,536: a false positive
// only costs a lock, never a wrong answer.
//
// Threads: maybe_contains() from any thread, at any time.  add() and
// rebuild() must be serialized by the caller (the plugin calls them under
// the ledger's mutex).  A job's bit is never cleared while the job is still
// in the ledger: rebuild() stores each word once, already holding the bits
// of every job it keeps.  Visibility of add() to readers in other threads
// comes from the caller's own locking (preempt/planc: slurmctld's job lock
// is held both where a preemption is counted and where the answer is read).
class LedgerFilter {
 public:
  LedgerFilter() {
    for (auto& w : words_) w.store(0, std::memory_order_relaxed);
  }
  bool maybe_contains(uint32_t job_id) const {
    return (words_[word(job_id)].load(std::memory_order_relaxed) >> bit(job_id)) & 1;
  }
  void add(uint32_t job_id) {
    words_[word(job_id)].fetch_or(uint64_t{1} << bit(job_id), std::memory_order_relaxed);
  }
  // Exactly the jobs in `job_ids` afterwards.
  void rebuild(const std::vector<uint32_t>& job_ids);

 private:
  static constexpr size_t kWords = 1024;  // 65,536 bits, 8 KiB
  static size_t word(uint32_t id) { return (id >> 6) % kWords; }
  static uint32_t bit(uint32_t id) { return id & 63; }
  std::array<std::atomic<uint64_t>, kWords> words_;
};

// What the victim order looks at.
struct VictimFacts {
  uint8_t victim_class;         // the tier's VictimClass (1: taken first)
  uint32_t recent_preemptions;  // in the cap's window
  uint32_t run_minutes;         // run_minutes(): the work at risk
  // For a preemptor that needs whole nodes: the candidates on the most
  // crowded of this candidate's nodes; for one that needs GPUs on a node:
  // how many runs must go to free them on this candidate's best node, or
  // kNotNeeded when it is in no node's fewest (NodeCrowding).  0 otherwise.
  uint32_t node_victims = 0;
};

// Which nodes a preemptor clears.  Slurm (select/cons_tres) takes the
// candidates away one at a time in the victim order until the preemptor
// fits, then preempts every candidate taken on the nodes it picked.  In
// the tier order alone those are whichever nodes the P3 runs taken first
// happen to free, often nodes packed with one-GPU runs (on the
// steady-state replay, one 16-GPU P0 job took 7 P3 runs at once while
// nodes held by one 8-GPU job each stood by; one 4-GPU P1 job took three
// 1-GPU runs of one node).  So the candidates of the node that gives the
// preemptor its GPUs with the fewest victims come first, and the tier
// order decides among nodes equal in that:
//   - a preemptor that needs whole nodes (--exclusive, or as many GPUs
//     per node as its partition's largest node has): the fewer candidates
//     on a node, the earlier;
//   - a preemptor that needs `gpus` GPUs on a node: per node, its free
//     GPUs plus those of candidates already in their grace; the fewest
//     candidates whose GPUs make up the rest, and among sets that few the
//     one the victim order prefers (lower class, fewer preemptions,
//     shorter runs); those candidates rank by how many they are, the
//     node's others after everyone (kNotNeeded).  A node with the GPUs
//     free already is held back by something else (cores, memory): its
//     candidates all rank as one victim, and the victim order decides.
//     Nodes that hold work no candidate is part of (guaranteed jobs) come
//     before nodes that do not, whatever the count: such a node can never
//     be cleared for a job that needs whole nodes, while a node held only
//     by spot work can.  (Without it, on the steady-state replay the
//     part-node guaranteed jobs went to the nodes of single big spot runs,
//     every node came to hold a guaranteed job, and 16-GPU P0/P1 jobs
//     waited 70-80 s for two whole nodes.)
// Counted per preemptor from the candidates Slurm offers (preemptable(),
// in one pass over its job list, then sorted with the victim rank).  Jobs
// that are no candidates (a guaranteed job) are not counted: a node
// holding one never comes free, and Slurm moves on to the next.  Cores and
// memory are not looked at: on a GPU node the GPUs run out first.
class NodeCrowding {
 public:
  // What a preemptor needs of each of its nodes.
  struct Ask {
    bool whole_nodes = false;
    uint32_t gpus = 0;     // GPUs on a node, when not whole nodes
    std::string gpu_type;  // of that type only, unless empty
    // Whole nodes: fewer P3 runs on a node first, then fewer runs
    // (crowd()); planc.conf WholeNodeSpareP3.
    bool spare_p3 = false;
    // A guaranteed preemptor once the P3 budget's soft share is reached
    // (P3PreemptSoftPercent): every P3 run it takes passes the hour's
    // target, so the fewest P3 runs come first, before anything else the
    // order looks at: whole nodes, the nodes of fewer P3 runs (a single
    // one counting as one) and then of fewer runs; GPUs on a node, the
    // set of fewest P3 runs, then a node that cannot be cleared anyway,
    // then the fewest runs (fewest_victims()).
    bool p3_first = false;
    bool counts() const { return whole_nodes || gpus; }
  };
  static constexpr uint32_t kNotNeeded = 62;
  // fewest_victims() of a node holding only candidates: kClear + count.
  static constexpr uint32_t kClear = 31;
  // A node's GPUs (of the type the preemptor asks for).
  struct NodeGpus {
    uint32_t total = 0;
    uint32_t free = 0;  // not allocated
  };

  // Slurm offers running `candidate` for `preemptor`.  A new round starts
  // when the preemptor changed, the last round was closed, or the round's
  // first candidate comes again (a single candidate is never sorted);
  // `ask` is asked then.  Whether to add() the candidate's nodes.
  bool offer(uint32_t preemptor, uint32_t candidate, const std::function<Ask()>& ask,
             size_t node_count);
  // A new round of candidates for `preemptor`, on a cluster of
  // `node_count` nodes; nothing is counted unless ask.counts().
  void begin(uint32_t preemptor, Ask ask, size_t node_count);
  // Whether the candidates being offered are still `preemptor`'s round
  // (false once they were sorted: the next offer starts a new round).
  bool collecting_for(uint32_t preemptor) const { return open_ && preemptor_ == preemptor; }
  const Ask& ask() const { return ask_; }
  bool whole_nodes() const { return ask_.whole_nodes; }
  bool gpus_on_a_node() const { return !ask_.whole_nodes && ask_.gpus; }
  // Whole nodes: a candidate on node `node` (node index; one call per
  // node it holds); `p3`: it counts as P3 (free attempts do).
  void add(uint32_t node, bool p3 = false);
  // GPUs on a node: the candidate `job` holds `gpus` GPUs on node `node`,
  // which has `node_gpus` (nullopt: the preemptor cannot use the node);
  // `in_grace`: it is already being preempted; `order`: its victim_rank()
  // without the node key (lower: taken first); `p3`: it counts as P3.
  void add(uint32_t node, uint32_t job, uint32_t gpus, std::optional<NodeGpus> node_gpus,
           bool in_grace, uint32_t order, bool p3 = false);
  // The round's candidates are being sorted.
  void close() { open_ = false; }
  // Whole nodes: candidates on node `node` (0 when not counting).  A
  // candidate's crowd is the largest of its nodes'.
  uint32_t on_node(uint32_t node) const {
    return ask_.whole_nodes && node < per_node_.size() ? per_node_[node] : 0;
  }
  // Whole nodes: node `node`'s key in the victim order (lower: cleared
  // first; below kNotNeeded), 0 when not counting.  on_node(), or with
  // ask().spare_p3 its P3 runs first, a single one counting as none (one
  // run is one run, and the tier order decides between two nodes of one
  // run each), then on_node(); with ask().p3_first its P3 runs first,
  // each counting, then on_node().  A candidate's key is the largest of
  // its nodes'.
  uint32_t crowd(uint32_t node) const;
  // GPUs on a node: how many runs must go for the preemptor's GPUs on
  // the best node `job` is on, when `job` is among them (plus kClear on
  // a node that holds only candidates); kNotNeeded when it is not; 0
  // when not counting.  With ask().p3_first the key of the fewest P3
  // runs first (p3_first_key()).  Worked out at the first call after
  // the round's last add().
  uint32_t fewest_victims(uint32_t job);
  // GPUs on a node: how many runs must go for the preemptor's GPUs on the
  // best node `job` is on (fewest_victims() without the kClear mark; on a
  // node whose GPUs are free already, every candidate on it); nullopt when
  // `job` is not among them or nothing is counted.
  std::optional<uint32_t> runs_to_free(uint32_t job);
  // The preemptor of the latest round.
  uint32_t preemptor() const { return preemptor_; }
  // GPUs on a node with ask().p3_first: the key of a set of `runs` runs,
  // `p3` of them P3 ones, on a node that is `clearable` (holds candidates
  // only): P3 runs, then a node that cannot be cleared before one that
  // can, then runs; below kNotNeeded.
  static uint32_t p3_first_key(uint32_t p3, bool clearable, uint32_t runs);

 private:
  struct Held {
    uint32_t job;
    uint32_t gpus;
    uint32_t order;
    bool p3;
  };
  struct NodeHeld {
    uint32_t total = 0;
    uint32_t free_gpus = 0;  // incl. candidates in their grace
    uint32_t held_gpus = 0;  // candidates' not in their grace
    bool usable = false;
    std::vector<Held> held;
  };
  // A candidate's key and run count, worked out first (nullptr: in no
  // node's fewest).
  struct Mark {
    uint32_t rank;
    uint32_t runs;
  };
  void work_out();
  // work_out() for one node short of `gap` GPUs: marks in `taken` the
  // fewest runs that free them (with ask().p3_first the fewest P3 runs,
  // then the fewest runs), the set the victim order prefers among those;
  // their count in `k`, their P3 runs in `p3`.  False when even every
  // run on it would not.
  bool fewest_set(std::vector<Held>& held, uint64_t gap, std::vector<bool>* taken, size_t* k,
                  size_t* p3) const;
  const Mark* mark_of(uint32_t job);
  // `job` is one of `runs` runs that free a node; `count`: the rank key
  // (runs, plus kClear on a node of candidates only).  The node of the
  // lowest key is kept.
  void mark(uint32_t job, uint32_t count, uint32_t runs);

  uint32_t preemptor_ = 0;
  uint32_t first_ = 0;  // the round's first candidate
  Ask ask_;
  bool open_ = false;
  std::vector<uint16_t> per_node_;
  std::vector<uint16_t> p3_per_node_;  // of per_node_, those that count as P3
  std::vector<uint32_t> touched_;      // nodes counted this round (a cheap reset)
  std::map<uint32_t, NodeHeld> held_;  // GPUs on a node: per node
  std::map<uint32_t, Mark> victims_;   // ... per candidate, worked out
  bool worked_out_ = false;
};

// Whole minutes a job that started at `started` has run at `now`, counted
// on the clock's minute marks (now/60 - started/60), not from the job's own
// start: every running job's count steps up at the same instant, so the
// order of two running jobs never changes while they run.  (Counted from
// each job's start, jobs crossed into their next minute one at a time and
// the order Slurm preempts in shifted from one scheduling pass to the next;
// see docs/design.md, "preempt/planc".)  0 for a job not started or a
// clock gone backwards.
uint32_t run_minutes(time_t started, time_t now);

// Slurm preempts candidates in ascending order of this rank.  (The plugin
// ranks a job already in its grace period 0, before all of these, so one
// preemptor does not start a second preemption while the first runs out.)
// The order:
//   0. for a preemptor that needs whole nodes or GPUs on a node, the
//      candidates of the node it clears with the fewest victims first
//      (NodeCrowding);
//   1. the tier's VictimClass (planc.conf; the policy's: P3 1, P2 2,
//      guaranteed tiers 3, never offered as they are never preempted);
//   2. fewer preemptions in the window first (spreads preemption so no
//      job is hit again and again);
//   3. shorter current run first, in run_minutes() (loses the least work).
uint32_t victim_rank(const VictimFacts& v);
inline constexpr uint32_t kInGraceRank = 0;  // below every victim_rank()

// Which Plan C tiers an account may use: slurmdbd's association QoS list,
// as slurmctld holds it.  `known` is false when slurmctld has no
// association for the job (accounting not enforced): then nothing is
// assumed either way.
struct Entitlement {
  bool known = false;
  std::string account;
  std::vector<std::string> qos;  // tier QoS names the account may use
  bool allows(const Tier& t) const;
};

// The guaranteed tier a job of tier `from` whose account has `ent` is told
// to use to avoid preemption or a spot cap: the tier's Alternative
// (planc.conf; the policy's: P2 -> P0, P3 -> P1) when it is guaranteed and
// the account may use it, else the first guaranteed tier the account may
// use (with an unknown entitlement: the Alternative, else the first
// guaranteed tier).  nullptr when there is none.
const Tier* advised_tier(const PlancConfig& cfg, TierId from, const Entitlement& ent);

// What a spot job's owner is told to do instead, after `lead` (e.g. "To
// avoid preemption retry in a guaranteed tier: "): "--qos=p1-guaranteed"
// (with ` (P1, <product>)` when `with_product`), or, when the account may
// use no guaranteed tier, that it has none and whom to ask.
std::string guaranteed_advice(const PlancConfig& cfg, TierId from, const Entitlement& ent,
                              std::string_view lead, bool with_product);

// What the owner reads in `scontrol show job` (SystemComment) and, once the
// run has ended, `sacct -o AdminComment`.  Written when the preemption
// starts and rewritten when it ends, so it always says what happened.
struct PreemptionEvent {
  uint32_t victim_job = 0;
  uint32_t victim_run = 0;  // which run of it (Slurm's restart count)
  TierId victim_tier = TierId::kP3;
  uint32_t preemptor_job = 0;  // 0: unknown
  TierId preemptor_tier = TierId::kP0;
  time_t when = 0;
  // When the preemption started, in milliseconds since the epoch (0: not
  // known, e.g. read from an older state file; `when` is used then).  The
  // grace is timed from here: `when` is truncated to its second, and a
  // grace timed from it could be up to a second short.
  int64_t when_ms = 0;
  uint32_t grace_seconds = 0;
  bool requeue = false;
  uint32_t count_in_window = 0;  // including this one
  time_t capped_until = 0;       // 0: not capped by this preemption
  // The advice: the guaranteed tier the account may use (-1: none).
  int8_t advised_tier = -1;
  std::string account;
  bool operator==(const PreemptionEvent&) const = default;
};

// How a preemption ended, as far as the victim's run is concerned.
enum class PreemptionEnd : uint8_t {
  kInProgress,        // SIGTERM sent, the grace runs
  kRequeued,          // Slurm requeued it (end of grace, or no grace)
  kCancelled,         // not requeueable: Slurm cancelled it (state PREEMPTED)
  kEndedInGrace,      // ended on its own during the grace: treated as preempted
  kFinishedInGrace,   // exited with GraceFinishedExitCode: completed, billed
  kCancelledInGrace,  // cancelled during the grace (scancel)
  kCalledOff,         // its preemptor no longer needs it: it keeps running
};
struct PreemptionOutcome {
  PreemptionEnd end = PreemptionEnd::kInProgress;
  time_t at = 0;
  // kEndedInGrace/kFinishedInGrace: "exit 0", "signal 9";
  // kCancelledInGrace: "by its owner", "by uid 0";
  // kCalledOff: "job 10 was cancelled".
  std::string detail;
};
std::string preemption_note(const PlancConfig& cfg, const PreemptionEvent& e,
                            const PreemptionOutcome& outcome = {});

// "exit 143" or "signal 9" from a wait status as Slurm keeps it.
std::string describe_wait_status(uint32_t wait_status);

// A run of a job whose preemption was in progress (Slurm's preempt_time
// set) ended, seen from slurmctld's completion path (jobcomp's callback):
// what it ended as in Slurm's eyes.
struct RunEndFacts {
  enum class Ending : uint8_t { kPreempted, kCompleted, kFailed, kCancelled, kNodeFail, kOther };
  Ending ending = Ending::kOther;
  uint32_t wait_status = 0;  // Slurm's job exit_code (a wait status)
};
enum class RunEndVerdict : uint8_t {
  kNotOurs,           // Slurm's own preemption (PREEMPTED) or a node failure
  kTreatAsPreempted,  // ended on its own during the grace: PREEMPTED, requeued if it may be
  kFinished,          // exited with GraceFinishedExitCode: COMPLETED, billed
  kCancelledInGrace,  // scancel during the grace: stays CANCELLED, billed free
};
// The policy: "a job that ends in any way while its preemption is in
// progress is treated as preempted", whether it exits 0, non-zero or by a
// signal, except a job that says it finished its real work by exiting with
// GraceFinishedExitCode, and a job cancelled (its owner or an admin chose
// to end it).
RunEndVerdict judge_run_end(const PlancConfig& cfg, const RunEndFacts& f);

// "2026-11-29T23:40:01Z".
std::string format_utc(time_t t);
// The reverse (UTC, no time zone database needed); none when `s` does not
// start with such a time.
std::optional<time_t> parse_utc(std::string_view s);
// 86400 -> "24 h", 300 -> "5 min", 45 -> "45 s".
std::string format_duration(uint32_t seconds);

}  // namespace planc

#endif  // PLANC_COMMON_PREEMPT_POLICY_H_
