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
#include "common/tres_usage.h"

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

// The steps slurmdbd has of each run of the jobs `job_ids` of `cluster`
// eligible in [start, end], for the measured-usage track (planc-bill
// measure): one entry per run that has ended in slurmdbd (runs still
// going, pending or never started are left out), keyed as bills are.
// `names` gets slurmdbd's TRES table, to name the ids of the steps' usage.
struct DbdRunSteps {
  RunKey key;
  int64_t end_time = 0;
  bool ran = false;  // held nodes (a run cancelled while pending did not)
  std::vector<StepUsage> steps;
};
Result<std::vector<DbdRunSteps>> slurmdbd_run_steps(const std::string& cluster,
                                                    const std::vector<uint32_t>& job_ids,
                                                    int64_t start, int64_t end, TresNames* names);

}  // namespace planc

#endif  // PLANC_TOOLS_SLURMDBD_RUNS_H_
