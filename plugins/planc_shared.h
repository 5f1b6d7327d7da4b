// What one Plan C plugin offers another inside slurmctld.
//
// Slurm loads each plugin with dlopen(RTLD_LOCAL), so plugins cannot link
// against each other.  A plugin finds another's exported function at run
// time with find_plugin_symbol(): it looks for the loaded object among the
// process's objects and takes a reference to it (dlopen RTLD_NOLOAD), so
// the code stays mapped even after Slurm unloads the plugin; the function
// then answers "unknown" / does nothing.
//   planc_spot_used_v1        slurmctld/planc's daily spot-cap counters,
//                             read by job_submit/planc;
//   planc_market_floor_v1     the P2 market's floor, read by job_submit/planc;
//   planc_spot_refused_v1     counts a spot-cap refusal of job_submit/planc
//                             in slurmctld/planc's metrics;
//   planc_preempt_run_end_v1  preempt/planc's completion hook, called by
//                             jobcomp/planc;
//   planc_market_run_end_v1   slurmctld/planc's market hook for the same
//                             moment, called by jobcomp/planc after billing;
//   planc_market_notice_v1    job_submit/planc (an update) and preempt/planc
//                             (a fallback's move) tell the market to look
//                             at a job now;
//   planc_sample_now_v1       job_submit/planc: a guaranteed job was
//                             submitted (infusion gives GPUs back now);
//   planc_reclaiming_for_v1   preempt/planc asks whether infusion is giving
//                             replicas back for a guaranteed job (job id
//                             0: for any job);
//   planc_p3_running_v1       the runs counting as P3 at slurmctld/planc's
//                             last sample, read by preempt/planc's P3
//                             preemption budget;
//   planc_preempt_control_v1  slurmctld/planc tells preempt/planc that this
//                             slurmctld takes control (its init) or gives it
//                             up (its fini): a backup controller's
//                             preempt/planc waits on standby until then.
#ifndef PLANC_PLUGINS_PLANC_SHARED_H_
#define PLANC_PLUGINS_PLANC_SHARED_H_

#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>

// Card-seconds `account` has used in tier `tier` (0..3) in the spot day
// containing `now`, counting running jobs.  Returns 1 and sets *used when
// known, 0 when slurmctld/planc is not running (not configured, shutting
// down).  Thread-safe, non-blocking (a short mutex, no I/O).
typedef int (*planc_spot_used_fn)(const char* account, int tier, int64_t now, uint64_t* used);
#define PLANC_SPOT_USED_SYMBOL "planc_spot_used_v1"
// Counts one submission or QoS update refused by the spot cap in tier
// `tier` (0..3).  Thread-safe, lock-free.
typedef void (*planc_spot_refused_fn)(int tier);
#define PLANC_SPOT_REFUSED_SYMBOL "planc_spot_refused_v1"
// The P2 market's current floor for a GPU type ("" or unknown: the default
// list price's), micro-units per card-hour, and when its next round is
// (Unix time).  Returns 1 and sets both when the market is open
// (Market=yes) and slurmctld/planc runs, else 0.  Thread-safe,
// non-blocking (a short mutex).
typedef int (*planc_market_floor_fn)(const char* gpu_type, int64_t* floor, int64_t* next_round);
#define PLANC_MARKET_FLOOR_SYMBOL "planc_market_floor_v1"
#define PLANC_SLURMCTLD_OBJECT "slurmctld_planc.so"
// The market looks at `job_id` at once (its life may have moved: an
// update, a fallback's move).  Thread-safe, non-blocking (a short mutex,
// wakes slurmctld/planc's worker).
typedef void (*planc_market_notice_fn)(uint32_t job_id);
#define PLANC_MARKET_NOTICE_SYMBOL "planc_market_notice_v1"
// slurmctld/planc samples the jobs at once (at most every 200 ms).
// Thread-safe, non-blocking.
typedef void (*planc_sample_now_fn)(void);
#define PLANC_SAMPLE_NOW_SYMBOL "planc_sample_now_v1"
// 1 while capacity infusion is giving replicas back for guaranteed job
// `job_id` (its GPUs are being freed: nothing else need be preempted for
// it), else 0.  Lock-free when nothing is given back; else a short mutex.
typedef int (*planc_reclaiming_for_fn)(uint32_t job_id);
#define PLANC_RECLAIMING_FOR_SYMBOL "planc_reclaiming_for_v1"
// The runs counting as P3 (P3 jobs, and P3 jobs on a free attempt) that
// were running at slurmctld/planc's last sample (every 5 s), or -1 before
// its first sample.  Lock-free.
typedef int64_t (*planc_p3_running_fn)(void);
#define PLANC_P3_RUNNING_SYMBOL "planc_p3_running_v1"
// The market's part of a run's end (job write lock held, in the
// completion path, after jobcomp/planc billed the run): a requeued P2 job
// bids again, held at once.  Non-blocking.
typedef void (*planc_market_run_end_fn)(void* job_record);
#define PLANC_MARKET_RUN_END_SYMBOL "planc_market_run_end_v1"

// preempt/planc's hook in slurmctld's completion path, called by
// jobcomp/planc's log_record (job write lock held) for every run that ends,
// before the run is billed and before Slurm's accounting record: a run that
// ended while its preemption was in progress is what the policy says it is
// (judge_run_end).  The job record may be changed (its state, the owner's
// note).  Returns kRunEnd* flags.  Non-blocking (a short mutex).
typedef int (*planc_preempt_run_end_fn)(void* job_record);
#define PLANC_PREEMPT_RUN_END_SYMBOL "planc_preempt_run_end_v1"
#define PLANC_PREEMPT_OBJECT "preempt_planc.so"
// This slurmctld takes control (`in_control` 1: slurmctld/planc's init(),
// before the scheduler starts) or gives it up (0: its fini(), after the
// scheduler stopped).  preempt/planc reads its saved state on taking
// control and saves it and stands by on giving it up, so a backup
// controller's copy neither acts on nor overwrites the primary's state.
// Blocks for the state file's read or write; no slurmctld lock held.
typedef void (*planc_preempt_control_fn)(int in_control);
#define PLANC_PREEMPT_CONTROL_SYMBOL "planc_preempt_control_v1"
// The run was ended by a preemption: bill it as preempted.
inline constexpr int kRunEndPreempted = 1;
// A record Slurm writes again while preempt/planc requeues the job: the
// run is already billed.
inline constexpr int kRunEndDuplicate = 2;

namespace planc {

// `symbol` in the loaded Plan C plugin `object` (e.g. "slurmctld_planc.so"),
// or nullptr when that plugin is not loaded.  Walks the loaded objects (no
// file I/O) and keeps a reference to the object (see above).
inline void* find_plugin_symbol(const char* object, const char* symbol) {
  struct Want {
    std::string suffix;
    std::string path;
  } want{std::string("/") + object, ""};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* arg) {
        auto* w = static_cast<Want*>(arg);
        const char* name = info->dlpi_name;
        size_t n = name ? std::strlen(name) : 0, m = w->suffix.size();
        if (n < m || std::strcmp(name + n - m, w->suffix.c_str())) return 0;
        w->path = name;
        return 1;
      },
      &want);
  if (want.path.empty()) return nullptr;
  void* handle = dlopen(want.path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return nullptr;
  // The reference is kept on purpose (see above).
  return dlsym(handle, symbol);
}

// A call of the loaded slurmctld/planc, or nullptr when it is not loaded.
template <typename Fn>
inline Fn find_ctld_call(const char* symbol) {
  return reinterpret_cast<Fn>(find_plugin_symbol(PLANC_SLURMCTLD_OBJECT, symbol));
}
inline planc_spot_used_fn find_spot_used() {
  return find_ctld_call<planc_spot_used_fn>(PLANC_SPOT_USED_SYMBOL);
}
inline planc_market_floor_fn find_market_floor() {
  return find_ctld_call<planc_market_floor_fn>(PLANC_MARKET_FLOOR_SYMBOL);
}
inline planc_market_notice_fn find_market_notice() {
  return find_ctld_call<planc_market_notice_fn>(PLANC_MARKET_NOTICE_SYMBOL);
}
inline planc_sample_now_fn find_sample_now() {
  return find_ctld_call<planc_sample_now_fn>(PLANC_SAMPLE_NOW_SYMBOL);
}
inline planc_reclaiming_for_fn find_reclaiming_for() {
  return find_ctld_call<planc_reclaiming_for_fn>(PLANC_RECLAIMING_FOR_SYMBOL);
}
inline planc_p3_running_fn find_p3_running() {
  return find_ctld_call<planc_p3_running_fn>(PLANC_P3_RUNNING_SYMBOL);
}
inline planc_market_run_end_fn find_market_run_end() {
  return find_ctld_call<planc_market_run_end_fn>(PLANC_MARKET_RUN_END_SYMBOL);
}
inline planc_spot_refused_fn find_spot_refused() {
  return find_ctld_call<planc_spot_refused_fn>(PLANC_SPOT_REFUSED_SYMBOL);
}
// preempt/planc's control switch, or nullptr when another preempt plugin
// is loaded.
inline planc_preempt_control_fn find_preempt_control() {
  return reinterpret_cast<planc_preempt_control_fn>(
      find_plugin_symbol(PLANC_PREEMPT_OBJECT, PLANC_PREEMPT_CONTROL_SYMBOL));
}

}  // namespace planc

#endif  // PLANC_PLUGINS_PLANC_SHARED_H_
