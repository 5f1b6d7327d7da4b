// The run-start journal: one record per run slurmctld starts, so that a run
// which reached the nodes is known somewhere even when slurmctld is
// SIGKILLed before it saves its state or hands the start to slurmdbd.
//
// Who writes, when: slurmctld/planc appends one record from slurmctld's
// job-begin hook, when Slurm has given the run its nodes and start time and
// before the launch is queued for slurmd, so a run cannot reach a node
// without its record in the page cache first.  A record is the run's
// Segment as it begins (state RUNNING, end_time 0), in the spool's record
// format (serialize_segment, common/record.h), written with one write(2)
// (common/append_file.h, the spool's own append):
// what jobcomp_p_log_record does at the run's end.  A page-cache write
// survives a SIGKILL of slurmctld.  A crash of the machine itself can lose
// what the kernel had not written back yet (about 30 s): the file being
// appended to is not fsynced, so that no append waits for an fsync under
// slurmctld's locks; a day's file is fsynced when the next day's starts.
// Who reads: `planc-bill reconcile`, which lists starts that neither a bill
// nor slurmdbd knows (unrecorded_starts below).
//
// Files: <StateSaveLocation>/planc_starts/YYYYMMDD.starts, one per UTC
// day of writing, kept kJournalKeepDays days.  Pure; thread-safe.
#ifndef PLANC_COMMON_RUN_JOURNAL_H_
#define PLANC_COMMON_RUN_JOURNAL_H_

#include <compare>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/billing.h"

namespace planc {

inline constexpr const char* kJournalDir = "planc_starts";
inline constexpr int64_t kJournalKeepDays = 40;

// "20261130.starts": the file records written at `unix_time` go to.
std::string journal_file_name(int64_t unix_time);
// The files that can hold starts in [start, end]: one day more on each
// side (a record is written to the file of the moment it is written).
std::vector<std::string> journal_files_for(int64_t start, int64_t end);
// A journal file name older than kJournalKeepDays at `now`; false for any
// other name (never delete what is not ours).
bool journal_file_expired(std::string_view name, int64_t now);

// All intact records of a journal file's text; `damaged` counts lines that
// failed their checksum or did not parse.
struct JournalRead {
  std::vector<Segment> starts;
  size_t damaged = 0;
};
JournalRead read_journal(std::string_view text);

// A run, named as bills and slurmdbd name it.
struct RunKey {
  std::string cluster;
  uint32_t job_id = 0;
  int64_t start_time = 0;
  auto operator<=>(const RunKey&) const = default;
};

// The journal's starts in [from, to] that are not in `known` (the runs that
// have a bill or a slurmdbd record): runs a controller crash hid.  Each
// run once, oldest first.
std::vector<Segment> unrecorded_starts(const std::vector<Segment>& journal,
                                       const std::set<RunKey>& known, int64_t from, int64_t to);

}  // namespace planc

#endif  // PLANC_COMMON_RUN_JOURNAL_H_
