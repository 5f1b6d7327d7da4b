// The one place that knows which Slurm release Plan C is built against.
//
// Every plugin includes Slurm's internal headers through this file, inside
// extern "C".  Differences between releases (entry point signatures, struct
// fields) are expressed here as macros and small inline helpers, so a port
// to a later Slurm touches this file and the adapter, never policy code.
// Built and tested against Debian bookworm's Slurm 22.05.8.
#ifndef PLANC_PLUGINS_SLURM_COMPAT_H_
#define PLANC_PLUGINS_SLURM_COMPAT_H_

// The order matters to Slurm's headers (config.h first, slurm_xlator.h
// before the rest): clang-format must not sort it.
// clang-format off
extern "C" {
#include "config.h"  // Slurm's own, from its configured source tree
#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"
#include "src/common/slurm_xlator.h"
#include "src/common/assoc_mgr.h"
#include "src/common/gres.h"
#include "src/common/parse_time.h"
#include "src/common/run_in_daemon.h"
#include "src/common/slurm_jobcomp.h"
#include "src/common/log.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"
#include "src/slurmctld/slurmctld.h"
#include "src/slurmctld/agent.h"
#include "src/slurmctld/burst_buffer.h"
#include "src/slurmctld/locks.h"
#include "src/slurmctld/job_scheduler.h"
#include "src/slurmctld/preempt.h"
#include "src/slurmctld/slurmctld_plugstack.h"
#include "src/slurmctld/state_save.h"
}
// clang-format on

#if SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(22, 5, 0)
#error "Plan C needs Slurm 22.05 or later"
#endif

// 23.02 added `char **err_msg` to job_submit's job_modify().  In 22.05 an
// update can only be refused with an error code, whose text scontrol prints.
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
#define PLANC_JOB_MODIFY_HAS_ERR_MSG 1
#else
#define PLANC_JOB_MODIFY_HAS_ERR_MSG 0
#endif

// Whether slurmctld has loaded its jobs: 22.05's controller starts its RPC
// thread (slurmctld_config.thread_id_rpc) only after read_slurm_conf() has
// built the job table and read the saved jobs, and clears it when it stops
// being the primary (controller.c).  Plugins are loaded earlier.
inline bool planc_jobs_loaded() { return slurmctld_config.thread_id_rpc != (pthread_t)0; }

// Whether this slurmctld started as a backup controller (its host is not
// the first SlurmctldHost).  22.05 sets slurmctld_primary before it loads
// the preempt plugin and leaves it at 0 after a takeover (controller.c):
// it says how the process started, not whether it is in control now.  A
// backup loads the preempt plugin at its start and its generic plugins
// (slurmctld_plugstack) only when it takes control, unloading them when it
// gives control back.  While it waits its own RPC thread runs, so
// planc_jobs_loaded() is true then too, over an empty job table.
inline bool planc_started_as_backup() { return slurmctld_primary == 0; }

// The job-begin hook.  22.05's slurmctld calls nonstop_ops.job_begin(job)
// from select_nodes() (src/slurmctld/node_scheduler.c) for every run it
// starts, with the job and node write locks held, once the run has its
// nodes and start time and before its launch is queued for slurmd.  It is
// one pointer for all plugins: slurmctld/nonstop sets it in its init(), so
// a plugin loaded after Plan C's replaces Plan C's hook (Plan C chains the
// one it finds).  Returns the hook it replaces.
using planc_job_begin_fn = void (*)(job_record_t*);
inline planc_job_begin_fn planc_set_job_begin_hook(planc_job_begin_fn fn) {
  planc_job_begin_fn prev = nonstop_ops.job_begin;
  nonstop_ops.job_begin = fn;
  return prev;
}
inline planc_job_begin_fn planc_job_begin_hook() { return nonstop_ops.job_begin; }

// Exported plugin symbols.  A namespace-scope const has internal linkage in
// C++ even inside extern "C" {}, so each one is declared extern "C" itself
// and made visible despite -fvisibility=hidden.
#define PLANC_EXPORT extern "C" __attribute__((visibility("default")))

#endif  // PLANC_PLUGINS_SLURM_COMPAT_H_
