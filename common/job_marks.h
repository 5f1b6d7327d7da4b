// Marks Plan C leaves in a job's AdminComment for people and for billing.
//
// The free-attempt mark: a P3 job that starved is moved to P2 for one free
// attempt (slurmctld/planc, common/starvation.h).  The job carries the mark
// in its AdminComment for as long as that attempt is pending or running and
// when its run segment ends, so
//   - the owner reads it in `scontrol show job` and `sacct -o AdminComment`
//     (22.05's slurmdbd stores AdminComment with every run's end record,
//     never SystemComment), and
//   - jobcomp/planc charges that segment nothing: it calls
//     has_free_attempt_mark(job->admin_comment) at the end of each segment.
// Once the attempt is over and the job is back in P3 the mark is gone.
//
// Format (one line, the tag first):
//   [planc:free-attempt] upgraded from P3 (p3-spot) to P2 (p2-spot) at
//   2026-11-30T01:47:12Z after 31 min waiting for Resources; this attempt is
//   not billed
// The mark runs from the tag to the next " | " or the end of the comment;
// other text (an admin's note, preempt/planc's "planc: preempted ..." note)
// is kept beside it, joined by " | ".
//
// Pure functions on strings; safe from any thread.
#ifndef PLANC_COMMON_JOB_MARKS_H_
#define PLANC_COMMON_JOB_MARKS_H_

#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/config.h"

namespace planc {

inline constexpr std::string_view kFreeAttemptTag = "[planc:free-attempt]";
// Joins the mark and any other text in an AdminComment.
inline constexpr std::string_view kMarkSeparator = " | ";

// Any Plan C mark: "[planc:<kind>] text", from its tag to the next " | " or
// the end.  The functions below are these three for one tag.
std::optional<std::string_view> find_tagged_mark(std::string_view admin_comment,
                                                 std::string_view tag);
// `admin_comment` with `mark` (which starts with `tag`) in place of the old
// mark of that tag, or in front when there was none; other text kept.
std::string with_tagged_mark(std::string_view admin_comment, std::string_view tag,
                             std::string_view mark);
// `admin_comment` without the mark of that tag (and its separator).
std::string without_tagged_mark(std::string_view admin_comment, std::string_view tag);

// True iff the tag occurs anywhere in `admin_comment`.
bool has_free_attempt_mark(std::string_view admin_comment);

// The mark's text, tag first.  `reason` is Slurm's name of the pending
// reason ("Resources", "Priority").
// `nice_added`: the Nice slurmctld/planc added so that the attempt queues
// below the paying jobs of the tier it is lent (0: none, not said).
std::string free_attempt_mark(const PlancConfig& cfg, TierId from, TierId to, time_t upgraded_at,
                              uint32_t waited_seconds, std::string_view reason,
                              int64_t nice_added = 0);
// The Nice the mark says was added ("(Nice +N)"), 0 without one.
int64_t free_attempt_nice(std::string_view admin_comment);

// `admin_comment` with `mark` in front of what was there (an old mark is
// replaced, other text kept).
std::string add_free_attempt_mark(std::string_view admin_comment, std::string_view mark);

// `admin_comment` without the mark (and its separator); other text kept.
std::string remove_free_attempt_mark(std::string_view admin_comment);

// The tiers the job was upgraded from and to, read back from the mark
// ("upgraded from P3 (...) to P2 (...)"); nullopt without a readable mark.
std::optional<std::pair<TierId, TierId>> free_attempt_tiers(std::string_view admin_comment);

// When the job was upgraded, read back from the mark; nullopt without a
// mark or when the mark's time cannot be read.
std::optional<time_t> free_attempt_upgraded_at(std::string_view admin_comment);

// The spot-fallback mark (--spot-fallback, issue 15): a P2 or P3 job whose
// preempted run comes back in its account's guaranteed tier.  Set at
// submission:
//   [planc:fallback] a preempted run comes back in P1 (p1-guaranteed)
// and, once preempt/planc has moved the requeued job (its QoS changed, so
// squeue shows it and the next run is billed at that tier's price):
//   [planc:fallback] preempted as P3 at 2026-12-01T04:00:00Z; requeued in
//   P1 (p1-guaranteed), billed at P1's price from the next run
// or, when Slurm refused the move (the account may no longer use the tier):
//   [planc:fallback] preempted as P3 at T; not moved to P1 (p1-guaranteed):
//   <why>; the job stays in P3
inline constexpr std::string_view kFallbackTag = "[planc:fallback]";
std::string fallback_mark(const PlancConfig& cfg, TierId to);
// The tier a job with a mark not yet acted on falls back to.
std::optional<TierId> fallback_pending(std::string_view admin_comment);
std::string fallback_done_mark(const PlancConfig& cfg, TierId from, TierId to, time_t at);
std::string fallback_refused_mark(const PlancConfig& cfg, TierId from, TierId to, time_t at,
                                  std::string_view why);

// What preempt/planc writes into AdminComment when it preempts a job whose
// AdminComment is `current`: its note replaces an earlier Plan C note,
// Plan C's marks ([planc:...]) are kept in front of it, and an admin's own
// text is never overwritten (nullopt: leave AdminComment as it is).
std::optional<std::string> admin_comment_with_note(std::string_view current, std::string_view note);

}  // namespace planc

#endif  // PLANC_COMMON_JOB_MARKS_H_
