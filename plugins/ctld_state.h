// slurmctld/planc's state and the functions of its roles: what the entry
// points in slurmctld_planc.cc, the worker and the recorder share.
// Plugin-internal (includes Slurm's headers).  One file per role:
//   ctld_starvation.cc      the starvation scan and the 5 s spot-cap sample
//                           (which also steers PackGuaranteed's node weights)
//   ctld_journal.cc         the run-start journal and the job-begin hook
//   ctld_market.cc          the P2 market's floors and its rounds' clearing
//   ctld_market_recorder.cc the recorder thread: round records to PostgreSQL
//   ctld_infusion.cc        capacity infusion's controller
//   ctld_metrics.cc         the metrics snapshot for planc-exporter
//   ctld_show_config.cc     what `scontrol show config` shows
//   slurmctld_planc.cc      Slurm's entry points, planc_*_v1, the worker loop
//
// Threads: Slurm's (init, fini, get_config's RPC, the job-begin hook under
// the job and node write locks, job_submit/planc's calls of planc_*_v1),
// the worker ("planc_ctld": samples, scans, market, infusion, journal
// files, metrics) and the recorder ("planc_market").
//
// Locks: each Mutex below guards the fields after it (GUARDED_BY, checked
// by `make thread-safety-check`).  Every one is a leaf, taken after
// slurmctld's locks when those are held (the job-begin hook, the sample,
// job_submit/planc's planc_*_v1 calls) and never held while taking a
// slurmctld lock or another of these mutexes.  Each is held for a few
// field accesses, never across an open, an fsync or a database call;
// journal_mu also around the journal's write(2)s (the hook's one, the
// worker's retries).  mu and rec_mu guard the threads' stop and wake-up
// flags; each thread waits on its condition variable with its own.
#ifndef PLANC_PLUGINS_CTLD_STATE_H_
#define PLANC_PLUGINS_CTLD_STATE_H_

#include "plugins/slurm_compat.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/append_file.h"
#include "common/idle_meter.h"
#include "common/infusion.h"
#include "common/job_watch.h"
#include "common/market.h"
#include "common/market_record.h"
#include "common/metrics_snapshot.h"
#include "common/spot_cap.h"
#include "common/starvation_queue.h"
#include "plugins/config_watch.h"
#include "plugins/mutex.h"
#include "plugins/slurm_adapter_ctld.h"

namespace planc::ctld {

// The job-begin hook queues at most this many started job ids between two
// samples; past it the sample walks every job (JobWatch::lost_starts).
inline constexpr size_t kMaxStarted = 100000;

// Counters for `scontrol show config`, the metrics snapshot and the
// benchmarks.  Lock-free atomics, written by the threads named below and
// read by any.
struct CtldStats {
  // The starvation scan (worker): free attempts started and ended, scans,
  // and their cost from holding the job read lock.
  std::atomic<uint64_t> upgrades{0}, reverts{0}, scans{0};
  // GPUs the free attempts held at the last scan (pending and running).
  std::atomic<uint64_t> free_attempt_gpus{0};
  std::atomic<uint64_t> total_scan_usec{0}, last_scan_usec{0}, max_scan_usec{0}, last_scan_jobs{0};
  // The scans that walked every job (common/starvation_queue.h), and their
  // part of total_scan_usec; the jobs the queue holds.
  std::atomic<uint64_t> scan_walks{0}, scan_walk_usec{0}, scan_last_walk_usec{0}, scan_queued{0};
  // Spot-cap refusals by tier, counted by job_submit/planc through
  // planc_spot_refused_v1() (plugins/planc_shared.h).
  std::array<std::atomic<uint64_t>, planc::kTierCount> spot_refusals{};
  // The 5 s sample (worker; test/bench/bench-exporter): how long it held
  // the job and node read locks walking the jobs (from holding them, as the
  // scan is timed: its cost to the rest of slurmctld), how long it waited
  // for them (the scheduler or backfill held them; no cost to them), and
  // how long the metrics snapshot took to build and write (outside every
  // lock); which jobs it looked at (common/job_watch.h).
  std::atomic<uint64_t> samples{0}, sample_lock_usec{0}, sample_max_lock_usec{0},
      sample_lock_wait_usec{0}, metrics_write_usec{0};
  std::atomic<uint64_t> sample_visited{0}, sample_walks{0}, watched{0};
  // The market (worker): rounds, winners, job updates, and the last round's
  // cost (test/bench/bench-market): the read of the market's jobs (job read
  // lock), the clearing itself (no lock), and the updates (job write locks,
  // each held for one update), in microseconds.
  std::atomic<uint64_t> market_rounds{0}, market_matched{0}, market_updates{0};
  // The clearing is plan_round alone; preparing is building its bids from
  // the jobs read (no lock).
  std::atomic<uint64_t> round_prepare_usec{0};
  std::atomic<uint64_t> round_read_usec{0}, round_clear_usec{0}, round_update_usec{0},
      round_bids{0}, round_total_usec{0};
  // Round records (recorder): stored, set aside, waiting.
  std::atomic<uint64_t> rounds_recorded{0}, rounds_rejected{0}, rounds_waiting{0};
  // Capacity infusion (worker): failed operations, and the decision pass's
  // cost (test/bench/bench-infusion): passes and their whole time (counting
  // the replicas, measuring, deciding; not acting), in microseconds.  What
  // it reads the sample gathers in its own walk of the watched jobs
  // (SampleLockTotalUsec).
  std::atomic<uint64_t> infusion_failures{0}, infusion_passes{0}, infusion_pass_usec{0};
  // Packing guaranteed work (PackGuaranteed): node weights changed, by the
  // sample (worker) and the job-begin hook.
  std::atomic<uint64_t> weight_changes{0};
  // The run-start journal (the job-begin hook, under slurmctld's locks).
  std::atomic<uint64_t> journal_records{0}, journal_dropped{0};
  std::atomic<uint64_t> journal_total_usec{0}, journal_max_usec{0}, journal_slow{0};
};

// An infusion operation held back, as last logged (each is said once).
struct InfusionHeldKey {
  planc::InfusionHold held = planc::InfusionHold::kNone;
  planc::InfusionAction action = planc::InfusionAction::kNone;
  planc::TierId tier = planc::TierId::kP1;
  bool operator==(const InfusionHeldKey&) const = default;
};

// Capacity infusion as `scontrol show config` shows it.
struct InfusionShown {
  std::string idle = "unknown (the window is not covered yet)";
  std::string last_operation = "none yet";
  std::string replicas;
  time_t next_allowed = 0;
  uint32_t ops_last_hour = 0;
};

// Everything the plugin holds.  Made on the heap by the first init() and
// never freed: slurmctld may exit without calling fini() while the worker
// runs (plugins/worker_thread.h), and a later init() (slurmctld becoming
// the primary again) finds it as the file-scope variables it replaces
// were left: counters and the worker's bookkeeping carry over.
struct Controller {
  // --- set by init() before any thread starts; read-only while they run ---
  std::string state_path;    // StateSaveLocation/planc_spot_state
  std::string metrics_path;  // StateSaveLocation/planc_metrics_slurmctld
  // Round records (start_recorder): the directory (empty: rounds are not
  // recorded), JobCompLoc's connection string and ClusterName.
  std::string market_dir, market_conninfo, cluster;
  std::string journal_dir;                      // empty: the journal is off
  planc_job_begin_fn prev_job_begin = nullptr;  // the hook ours chains

  // Whether init() succeeded and fini() has not run: planc_*_v1 answer
  // only then.
  std::atomic<bool> running{false};
  CtldStats stats;
  // Runs counting as P3 at the last sample (-1: none yet), for
  // preempt/planc's P3 preemption budget (planc_p3_running_v1).
  std::atomic<int64_t> p3_running{-1};
  // Whether a node's weight may differ from slurm.conf's: PackGuaranteed
  // steered it (the worker or the job-begin hook).  The sample puts the
  // weights back when packing is off, then clears it.
  std::atomic<bool> steered{false};

  // --- the worker's alone (and init()'s and fini()'s while it does not run) ---
  // The configuration in force and the QoS lookup over its tiers; the
  // worker replaces both when planc.conf changes.
  std::shared_ptr<const planc::PlancConfig> config;
  std::unique_ptr<planc::QosTierCache> tiers;
  planc::SlaTracker sla;
  std::unique_ptr<planc::SpotLedger> ledger;
  planc::JobWatch watch;            // which jobs the sample looks at
  planc::StarvationQueue starving;  // which jobs the scan looks at (worker)
  // The P2 market's floors (common/market.h); null while the market is
  // closed.
  std::unique_ptr<planc::FloorKeeper> floor_keeper;
  // Whether the market was open at the last sample (none: not looked yet):
  // a change makes the market look at every job of its tier.
  std::optional<bool> market_open;
  // Winners of a round not started yet: looked at each sample (their win
  // expires one interval after the round).
  std::set<uint32_t> market_watch;
  // Capacity infusion (common/infusion.h): the controller, the idle window,
  // replicas told to drain (job id -> when SIGKILL follows; lost on a
  // restart: a replica still running then is drained again if the pool
  // still shrinks), the replicas the last sample saw and those submitted
  // since (the sample looks them up by id: a pending P3 replica is not
  // among its watched jobs), and the hold last logged (see infusion_tick).
  std::unique_ptr<planc::InfusionController> infusion;
  // The pool's idle GPUs, sampled each sample (common/idle_meter.h): the
  // market's vacancy, infusion's idle share and the metrics' crossings.
  planc::IdleMeter idle;
  std::map<uint32_t, time_t> draining;
  std::vector<uint32_t> replica_ids;
  InfusionHeldKey infusion_held;
  // Pools slurmctld refuses to run (name -> why), checked when planc.conf
  // changes.
  std::map<std::string, std::string> refused_pools;
  bool pools_checked = false;

  // gres/gpu's place in the jobs' TRES arrays, once the worker has found it
  // (-1 before): for the job-begin and run-end hooks.
  std::atomic<int> gpu_pos{-1};

  // --- the worker's stop flag, and what wakes it before its next sample:
  // jobs job_submit/planc tells the market about (planc_market_notice_v1)
  // and a sample asked for now (planc_sample_now_v1: a guaranteed job
  // submitted, which infusion may have to give GPUs back for) ---
  planc::Mutex mu;
  std::condition_variable_any cv;
  bool stop GUARDED_BY(mu) = false;
  std::vector<uint32_t> notices GUARDED_BY(mu);
  bool sample_now GUARDED_BY(mu) = false;
  std::thread* worker = nullptr;  // never destroyed at exit: plugins/worker_thread.h

  // --- the configuration `scontrol show config` shows (the worker's
  // config, published) ---
  planc::Mutex shown_mu;
  std::shared_ptr<const planc::PlancConfig> shown GUARDED_BY(shown_mu);

  // --- the spot usage job_submit/planc reads (planc_spot_used_v1): the
  // ledger's snapshot after each sample ---
  planc::Mutex usage_mu;
  std::shared_ptr<const planc::SpotUsage> usage GUARDED_BY(usage_mu);

  // --- jobs started since the last sample: the job-begin hook queues
  // their ids, the sample takes them while it holds the job read lock, so
  // no start falls between.  Taken under slurmctld's locks. ---
  planc::Mutex started_mu;
  std::vector<uint32_t> started GUARDED_BY(started_mu);
  bool started_lost GUARDED_BY(started_mu) = false;  // kMaxStarted passed

  // --- the market's floors as last set, for job_submit/planc
  // (planc_market_floor_v1), the snapshot and `scontrol show config`
  // (null while the market is closed), and the last clearing's summary ---
  planc::Mutex floors_mu;
  std::shared_ptr<const planc::MarketFloors> floors GUARDED_BY(floors_mu);
  std::string last_clearing GUARDED_BY(floors_mu) = "none yet";

  // --- the recorder's stop and wake-up flags ---
  planc::Mutex rec_mu;
  std::condition_variable_any rec_cv;
  bool rec_stop GUARDED_BY(rec_mu) = false;
  bool rec_wake GUARDED_BY(rec_mu) = false;
  std::thread* recorder = nullptr;  // never destroyed at exit: plugins/worker_thread.h

  // --- capacity infusion as shown and counted: `scontrol show config`,
  // and operations by (pool, action: "grow", "shrink", "reclaim") and
  // replicas by pool for the metrics ---
  planc::Mutex infusion_mu;
  InfusionShown infusion_shown GUARDED_BY(infusion_mu);
  std::map<std::pair<std::string, std::string>, uint64_t> infusion_ops GUARDED_BY(infusion_mu);
  std::map<std::string, uint32_t> infusion_replicas GUARDED_BY(infusion_mu);

  // --- the guaranteed jobs capacity infusion gives replicas back for, until
  // when (the replica's drain grace and its node's cleanup): preempt/planc
  // asks (planc_reclaiming_for_v1) before it lets such a job preempt
  // anything else, so one replica drained is not followed by another
  // victim while its node completes.  Taken under slurmctld's locks. ---
  planc::Mutex reclaim_mu;
  std::map<uint32_t, time_t> reclaiming_for GUARDED_BY(reclaim_mu);
  std::atomic<bool> any_reclaim{false};  // reclaiming_for is not empty: the hot path's test

  // --- the journal's day file and the starts not written yet
  // (common/append_file.h): the hook holds journal_mu around one write(2),
  // the worker around swapping files and retrying, never across an open,
  // fsync or close.  Taken under slurmctld's locks. ---
  planc::Mutex journal_mu;
  planc::RecordAppender journal GUARDED_BY(journal_mu);
};

// The controller init() made, or nullptr before the first init().  For the
// job-begin hook and planc_*_v1, which Slurm and job_submit/planc call
// without a context.
Controller* controller();

// --- starvation and spot cap: ctld_starvation.cc (worker) --------------------

// One starvation scan: free attempts started and ended.
void starvation_scan(Controller& c);
// The spot ledger saved in c.state_path, or a fresh one (logged).
std::unique_ptr<planc::SpotLedger> load_spot_state(const Controller& c,
                                                   const planc::PlancConfig& cfg);
// Publishes the ledger's usage for planc_spot_used_v1.
void publish_usage(Controller& c) EXCLUDES(c.usage_mu);
// The 5 s sample: the spot ledger, the SLA, which jobs to watch.  Returns
// the state file's new text when it changed.  `*pool` gets the pool's
// usage and `*infusion` what capacity infusion needs, read in the same lock
// hold.  `*gpu_pos`: gres/gpu's TRES position, looked up the first time.
// `*market_ids`: pending jobs of the market's tier it should look at.
std::string spot_sample(Controller& c, int* gpu_pos, const std::string& last_written,
                        planc::PoolUsage* pool, planc::slurm::InfusionJobs* infusion,
                        std::vector<uint32_t>* market_ids) EXCLUDES(c.started_mu, c.usage_mu);

// --- the run-start journal: ctld_journal.cc ----------------------------------

// init(): the directory, today's file, the job-begin hook.  A journal that
// cannot be set up is logged and left off.
void start_journal(Controller& c) EXCLUDES(c.journal_mu);
// fini(): the hook given back, the last file closed.
void stop_journal(Controller& c) EXCLUDES(c.journal_mu);
// Worker, each sample: a new file at the UTC day's change, retried lines,
// fsync of the closed file.
void journal_tick(Controller& c, bool* hook_warned) EXCLUDES(c.journal_mu);
// Whether slurmctld's job-begin hook is still ours.
bool journal_hook_ours();

// --- the P2 market: ctld_market.cc (worker) ----------------------------------

// The floors last set (null while the market is closed).
std::shared_ptr<const planc::MarketFloors> market_floors(Controller& c) EXCLUDES(c.floors_mu);
// Each sample: the floor keeper sees the pool; a round (or the market
// opening, closing or its settings changing on reload) publishes the
// floors, and a round clears the bids.  Between rounds the market looks
// at `look_at` (what the sample found, what job_submit/planc told) and at
// the winners not started yet; when it opens or closes, at every job of
// its tier.
void market_tick(Controller& c, const planc::PlancConfig& cfg, const planc::PoolUsage& pool,
                 bool reloaded, int gpu_pos, std::vector<uint32_t> look_at)
    EXCLUDES(c.floors_mu, c.rec_mu, c.shown_mu);
// slurmctld's job-begin hook (job and node write locks): a P2 run that no
// win, lock or release covers starts outside the rounds, at the floor.
void market_on_job_begin(Controller& c, job_record_t* job) EXCLUDES(c.shown_mu, c.floors_mu);
// jobcomp/planc's run-end hook (job write lock, in the completion path,
// after the run is billed): a requeued P2 job bids again, held at once.
void market_on_run_end(Controller& c, job_record_t* job) EXCLUDES(c.shown_mu, c.floors_mu);

// --- round records: ctld_market_recorder.cc ----------------------------------

// init(): starts the recorder where the bills are (JobCompType=jobcomp/planc).
void start_recorder(Controller& c) EXCLUDES(c.rec_mu);
void stop_recorder(Controller& c) EXCLUDES(c.rec_mu);
// The worker, after a clearing: the record on disk, then the recorder told.
void record_round(Controller& c, const planc::MarketRoundRecord& rec) EXCLUDES(c.rec_mu);

// --- capacity infusion: ctld_infusion.cc (worker) ----------------------------

// Each sample: acts on the controller's decision.  `guaranteed_submitted`:
// a guaranteed job was submitted and this sample may not see it yet
// (planc_sample_now_v1 comes before Slurm makes the job): nothing grows
// or shrinks by the idle share until the sample that sees it.
void infusion_tick(Controller& c, const planc::PlancConfig& cfg, const planc::PoolUsage& pool,
                   const planc::slurm::InfusionJobs& jobs, bool reloaded, bool guaranteed_submitted)
    EXCLUDES(c.infusion_mu, c.reclaim_mu);
// When the next replica's drain grace ends (its SIGKILL is due); none.
std::optional<time_t> infusion_next_kill(const Controller& c);
// Whether infusion gives replicas back for guaranteed job `job_id` now
// (preempt/planc: no other victim for it meanwhile).
bool reclaiming_for(Controller& c, uint32_t job_id, time_t now) EXCLUDES(c.reclaim_mu);

// --- the metrics snapshot: ctld_metrics.cc (worker) --------------------------

// Written outside every lock after each sample.
void write_metrics(Controller& c, const planc::PoolUsage& pool, const planc::ConfigWatch& watch)
    EXCLUDES(c.floors_mu, c.infusion_mu);

// --- `scontrol show config`: ctld_show_config.cc -----------------------------

// slurmctld_plugstack_p_get_config's key/value pairs (an RPC thread).
void show_config(Controller& c, config_plugin_params_t* p)
    EXCLUDES(c.shown_mu, c.floors_mu, c.infusion_mu);

}  // namespace planc::ctld

#endif  // PLANC_PLUGINS_CTLD_STATE_H_
