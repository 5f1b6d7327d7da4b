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

// True iff the tag occurs anywhere in `admin_comment`.
bool has_free_attempt_mark(std::string_view admin_comment);

// The mark's text, tag first.  `reason` is Slurm's name of the pending
// reason ("Resources", "Priority").
std::string free_attempt_mark(const PlancConfig& cfg, TierId from, TierId to, time_t upgraded_at,
                              uint32_t waited_seconds, std::string_view reason);

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

// What preempt/planc writes into AdminComment when it preempts a job whose
// AdminComment is `current`: its note replaces an earlier Plan C note, a
// free-attempt mark is kept in front of it, and an admin's own text is
// never overwritten (nullopt: leave AdminComment as it is).
std::optional<std::string> admin_comment_with_note(std::string_view current, std::string_view note);

}  // namespace planc

#endif  // PLANC_COMMON_JOB_MARKS_H_
