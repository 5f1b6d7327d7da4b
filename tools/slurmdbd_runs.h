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
#include <string>
#include <vector>

#include "common/billing.h"
#include "common/result.h"

namespace planc {

// This cluster as slurmctld describes it (slurm_load_ctl_conf): needs a
// running slurmctld and the SLURM_CONF planc-bill runs with.
struct SlurmSite {
  std::string cluster;
  std::string state_save_location;
};
Result<SlurmSite> load_slurm_site();

// Every run segment of `cluster` that slurmdbd has for jobs eligible in
// [start, end] (what `sacct --duplicates -X -a -S -E` selects), that has
// ended: one Segment per run, with slurmdbd's start and end times (not
// truncated to the window).  `segment` numbers a job's runs in start order
// among those returned.  The job name is as slurmdbd stored it.
Result<std::vector<Segment>> slurmdbd_runs(const std::string& cluster, int64_t start, int64_t end);

}  // namespace planc

#endif  // PLANC_TOOLS_SLURMDBD_RUNS_H_
