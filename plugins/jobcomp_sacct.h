// jobcomp/planc's part in `sacct -c` (jobcomp_p_get_jobs): the bills read
// back from PostgreSQL as the jobcomp records sacct prints.  Runs in the
// client process, as the user who runs sacct: libslurm only, no symbol of
// slurmctld's.
#ifndef PLANC_PLUGINS_JOBCOMP_SACCT_H_
#define PLANC_PLUGINS_JOBCOMP_SACCT_H_

#include "plugins/slurm_compat.h"

#include <string>

namespace planc::jobcomp {

// The bills `job_cond` selects, read through `conninfo` (JobCompLoc) as
// the user running sacct (PostgreSQL's row-level security decides what
// that user sees), as a List of jobcomp_job_rec_t; nullptr when the
// database cannot answer (logged).  May throw.
List sacct_jobs(const std::string& conninfo, slurmdb_job_cond_t* job_cond);

}  // namespace planc::jobcomp

#endif  // PLANC_PLUGINS_JOBCOMP_SACCT_H_
