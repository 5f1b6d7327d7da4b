// Marks Plan C leaves on a job for other parts of the suite to read.
// The starvation upgrade (slurmctld/planc) puts the free-attempt mark in the
// job's AdminComment; billing (jobcomp/planc) charges nothing for a run
// segment that ends while the mark is there.  Pure; thread-safe.
#ifndef PLANC_COMMON_JOB_MARKS_H_
#define PLANC_COMMON_JOB_MARKS_H_

#include <string_view>

namespace planc {

inline constexpr std::string_view kFreeAttemptTag = "[planc:free-attempt]";

// True iff the tag occurs anywhere in the AdminComment.
inline bool has_free_attempt_mark(std::string_view admin_comment) {
  return admin_comment.find(kFreeAttemptTag) != std::string_view::npos;
}

}  // namespace planc

#endif  // PLANC_COMMON_JOB_MARKS_H_
