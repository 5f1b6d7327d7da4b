// What slurmdbd recorded of each run of each job, read through libslurmdb's
// public C API (slurmdb_jobs_get): every field of a Segment comes from a
// member of slurmdbd's own job record, never from text, so nothing a user
// puts in a job name (newlines, sacct's delimiters) can shift a field or
// forge a record.  No Slurm header here: tools/slurmdbd_runs.cc is the one
// file of planc-bill that includes slurm/slurmdb.h.
//
// Not thread-safe (libslurm keeps global state); one call at a time.
#ifndef PLANC_TOOLS_SLURMDBD_RUNS_H_
#define PLANC_TOOLS_SLURMDBD_RUNS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/billing.h"
#include "common/result.h"
#include "common/run_journal.h"

namespace planc {

// This cluster as slurmctld describes it (slurm_load_ctl_conf): needs a
// running slurmctld and the SLURM_CONF planc-bill runs with.
struct SlurmSite {
  std::string cluster;
  std::string state_save_location;
};
Result<SlurmSite> load_slurm_site();

// The runs slurmctld has going now (running, suspended or completing),
// from slurm_load_jobs.
Result<std::set<RunKey>> slurmctld_current_runs(const std::string& cluster);

// The runs of `cluster` that slurmdbd has for jobs eligible in [start, end]
// (what `sacct --duplicates -X -a -S -E` selects):
//   ended    one Segment per run that has ended, with slurmdbd's start and
//            end times (not truncated to the window); `segment` numbers a
//            job's runs in start order among those returned; the job name
//            is as slurmdbd stored it;
//   unended  every run slurmdbd has a start but no end for: still running,
//            or a "runaway" (its end never reached slurmdbd: `sacctmgr show
//            runawayjobs`).
struct DbdRuns {
  std::vector<Segment> ended;
  std::set<RunKey> unended;
};
Result<DbdRuns> slurmdbd_runs(const std::string& cluster, int64_t start, int64_t end);

}  // namespace planc

#endif  // PLANC_TOOLS_SLURMDBD_RUNS_H_
