// slurmctld/planc: Plan C's periodic work inside slurmctld
// (SlurmctldPlugstack=planc).
//
//   starvation upgrade  every StarvationInterval, P3 jobs that have waited
//                       longer than StarvationThreshold for the cluster get
//                       one free attempt as P2 (common/starvation.h); the
//                       attempt is marked in AdminComment
//                       (common/job_marks.h) and undone when it ends by
//                       requeue;
//   daily spot cap      every few seconds, the running spot jobs' card-seconds
//                       per account and tier (common/spot_cap.h), kept in
//                       StateSaveLocation/planc_spot_state; job_submit/planc
//                       asks for them through planc_spot_used_v1() and
//                       counts its refusals through planc_spot_refused_v1().
//   run-start journal   every run slurmctld starts is appended, as it
//                       starts, to StateSaveLocation/planc_starts/
//                       (common/run_journal.h) from the job-begin hook:
//                       one write(2) under slurmctld's locks, like
//                       jobcomp/planc's spool.  The worker starts a new
//                       file each UTC day (fsyncing the old one) and
//                       removes files past kJournalKeepDays.
//   market records      each P2 market round (common/market_record.h) is
//                       written to StateSaveLocation/planc_market/ right
//                       after its clearing; a second thread, the recorder,
//                       stores the files in PostgreSQL (planc.market_round,
//                       planc.market_bid: sql/0006) and removes them.
//   metrics snapshot    after each spot sample, the pool's GPUs and jobs
//                       per tier, idle-threshold crossings, starvation and
//                       reload counters, for planc-exporter
//                       (StateSaveLocation/planc_metrics_slurmctld).
//
// One worker thread.  It never holds a slurmctld lock across I/O: a scan
// takes the job read lock, collects the facts and releases it; each change
// is then made through slurmctld's own update_job() under the write locks an
// update RPC takes (as slurmctld/nonstop does), one job per lock hold.
// The state file is written outside every lock.
#include "plugins/slurm_compat.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "common/append_file.h"
#include "common/infusion.h"
#include "common/job_marks.h"
#include "common/market.h"
#include "common/market_record.h"
#include "common/market_store.h"
#include "common/preempt_policy.h"  // format_utc
#include "common/run_journal.h"
#include "common/spool.h"  // RetryBackoff
#include "common/spot_cap.h"
#include "common/starvation.h"
#include "common/state_file.h"
#include "plugins/mutex.h"
#include "plugins/planc_shared.h"
#include "plugins/slurm_adapter_ctld.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] =
    "Plan C controller: starvation upgrade, daily spot cap, run-start journal";
PLANC_EXPORT const char plugin_type[] = "slurmctld/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

using planc::TierId;

constexpr const char* kStateFile = "planc_spot_state";
// How often running spot jobs are sampled.  Between samples job_submit's
// view is extrapolated exactly; only a job that ends is counted to the
// last sample when Slurm forgets its end time (requeue).
constexpr int kSpotSampleSeconds = 5;

// The configuration in force and the QoS lookup over its tiers.  Set by
// init(); after that only the worker reads them, and replaces them when
// planc.conf changes.  `scontrol show config` reads g_shown.
std::shared_ptr<const planc::PlancConfig> g_config;
std::unique_ptr<planc::QosTierCache> g_tiers;
planc::Mutex g_shown_mu;
std::shared_ptr<const planc::PlancConfig> g_shown GUARDED_BY(g_shown_mu);
std::string g_state_path;
std::string g_metrics_path;  // StateSaveLocation/planc_metrics_slurmctld
// Worker only; never destroyed (slurmctld may exit without fini() while
// the worker runs: plugins/worker_thread.h).
planc::SlaTracker& g_sla = *new planc::SlaTracker;

planc::Mutex g_mu;
std::condition_variable_any g_cv;
bool g_stop GUARDED_BY(g_mu) = false;
std::thread* g_worker = nullptr;  // never destroyed at exit: see plugins/worker_thread.h

// Only the worker touches the ledger; job_submit reads snapshots.
std::unique_ptr<planc::SpotLedger> g_ledger;
planc::Mutex g_usage_mu;
std::shared_ptr<const planc::SpotUsage> g_usage GUARDED_BY(g_usage_mu);
std::atomic<bool> g_running{false};

// For `scontrol show config` and the benchmark.
std::atomic<uint64_t> g_upgrades{0}, g_reverts{0}, g_scans{0};
// Spot-cap refusals by tier, counted by job_submit/planc through
// planc_spot_refused_v1() (plugins/planc_shared.h).
std::array<std::atomic<uint64_t>, planc::kTierCount> g_spot_refusals{};
std::atomic<uint64_t> g_total_scan_usec{0}, g_last_scan_usec{0}, g_max_scan_usec{0},
    g_last_scan_jobs{0};
// The 5 s sample (test/bench/bench-exporter): how long it held the job and
// node read locks walking the jobs (from holding them, as the scan is
// timed: its cost to the rest of slurmctld), how long it waited for them
// (the scheduler or backfill held them; no cost to them), and how long the
// metrics snapshot took to build and write (outside every lock).
std::atomic<uint64_t> g_samples{0}, g_sample_lock_usec{0}, g_sample_max_lock_usec{0},
    g_sample_lock_wait_usec{0}, g_metrics_write_usec{0};
// Which jobs the sample looks at (common/job_watch.h): the worker's alone.
// The job-begin hook queues the ids of jobs that start in g_started; the
// sample takes them while it holds the job read lock, so no start falls
// between.  Lock order: slurmctld's locks, then g_started_mu.
constexpr size_t kMaxStarted = 100000;
planc::JobWatch g_watch;
planc::Mutex g_started_mu;
std::vector<uint32_t> g_started GUARDED_BY(g_started_mu);
bool g_started_lost GUARDED_BY(g_started_mu) = false;
std::atomic<uint64_t> g_sample_visited{0}, g_sample_walks{0}, g_watched{0};

// The P2 market's floors (common/market.h): the worker's keeper, and what
// it last set, for job_submit/planc (planc_market_floor_v1), the snapshot
// and `scontrol show config`.  Null while the market is closed.
std::unique_ptr<planc::FloorKeeper> g_floor_keeper;
planc::Mutex g_floors_mu;
std::shared_ptr<const planc::MarketFloors> g_floors GUARDED_BY(g_floors_mu);

std::shared_ptr<const planc::MarketFloors> market_floors() {
  planc::MutexLock l(g_floors_mu);
  return g_floors;
}

std::atomic<uint64_t> g_market_rounds{0}, g_market_matched{0}, g_market_updates{0};
// The last round's cost (test/bench/bench-market): the read of the market's
// jobs (job read lock), the clearing itself (no lock), and the updates (job
// write locks, each held for one update), in microseconds.
std::atomic<uint64_t> g_round_read_usec{0}, g_round_clear_usec{0}, g_round_update_usec{0},
    g_round_bids{0}, g_round_total_usec{0};
std::string g_last_clearing GUARDED_BY(g_floors_mu) = "none yet";

// --- market records -----------------------------------------------------------
// A round's record is a file in StateSaveLocation/planc_market/, written
// with fsync by the worker right after the clearing; the recorder thread
// stores the files in PostgreSQL (common/market_store.h), oldest first, and
// removes each once stored.  PostgreSQL down: the files wait and are
// retried with backoff.  A file that does not parse, or that the database
// refuses, is renamed *.rejected and logged once, never retried in a loop.
// Rounds are recorded only where the bills are (JobCompType=jobcomp/planc,
// whose JobCompLoc the recorder connects with, as slurmctld's writer role).
constexpr const char* kMarketDir = "planc_market";
std::string g_market_dir;  // empty: rounds are not recorded
std::string g_market_conninfo, g_cluster;
planc::Mutex g_rec_mu;
std::condition_variable_any g_rec_cv;
bool g_rec_stop GUARDED_BY(g_rec_mu) = false;
bool g_rec_wake GUARDED_BY(g_rec_mu) = false;
std::thread* g_recorder = nullptr;  // never destroyed at exit: see plugins/worker_thread.h
std::atomic<uint64_t> g_rounds_recorded{0}, g_rounds_rejected{0}, g_rounds_waiting{0};

// The worker, after a clearing: the record on disk, then the recorder told.
void record_round(const planc::MarketRoundRecord& rec) {
  if (g_market_dir.empty()) return;
  const std::string path = g_market_dir + "/" + planc::round_file_name(rec);
  if (auto err = planc::write_file_atomically(path, planc::serialize_round(rec))) {
    error("%s: market: the round at %s is not recorded: %s", plugin_type,
          planc::format_utc(rec.at).c_str(), err->c_str());
    return;
  }
  {
    planc::MutexLock l(g_rec_mu);
    g_rec_wake = true;
  }
  g_rec_cv.notify_all();
}

// The round files waiting, oldest first (the name holds the round's time).
std::vector<std::string> round_files() {
  std::vector<std::pair<int64_t, std::string>> found;
  if (DIR* d = opendir(g_market_dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      std::string_view n = e->d_name;
      if (n.size() < 11 || n.substr(0, 6) != "round-" || n.substr(n.size() - 4) != ".rec") continue;
      found.emplace_back(std::strtoll(e->d_name + 6, nullptr, 10), std::string(n));
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

void reject_round_file(const std::string& path, const std::string& why) {
  g_rounds_rejected++;
  const std::string aside = path + ".rejected";
  if (rename(path.c_str(), aside.c_str()) != 0)
    error("%s: market: %s: %s; and it cannot be moved aside: %m", plugin_type, path.c_str(),
          why.c_str());
  else
    error("%s: market: %s: %s; kept as %s, not stored", plugin_type, path.c_str(), why.c_str(),
          aside.c_str());
}

// Stores what waits.  Returns the seconds until the next look.
int drain_rounds(std::unique_ptr<planc::BillStore>& store, planc::RetryBackoff& backoff) {
  std::vector<std::string> files = round_files();
  g_rounds_waiting = files.size();
  for (const std::string& name : files) {
    const std::string path = g_market_dir + "/" + name;
    auto text = planc::read_state_file(path);
    if (!text.ok()) {
      if (text.code() == planc::ErrorCode::kNotFound) continue;
      reject_round_file(path, text.error());
      continue;
    }
    auto rec = planc::parse_round(text.value());
    if (!rec.ok()) {
      reject_round_file(path, "damaged record: " + rec.error());
      continue;
    }
    if (!store) store = std::make_unique<planc::BillStore>(g_market_conninfo);
    auto stored = planc::store_market_round(*store, g_cluster, rec.value());
    if (!stored.ok()) {
      // Unreachable (kRetryable), or a schema or privilege the admin must
      // fix (kInvalid: migration 0006 not applied, the role not a writer):
      // the files wait, as jobcomp/planc's spool does for bills.
      if (stored.code() == planc::ErrorCode::kRetryable ||
          stored.code() == planc::ErrorCode::kInvalid) {
        bool log = false;
        int wait = backoff.failed(time(nullptr), &log);
        if (log)
          error("%s: market: %s; %zu round record(s) kept in %s, retrying every %d s%s",
                plugin_type, stored.error().c_str(), g_rounds_waiting.load(), g_market_dir.c_str(),
                wait,
                stored.code() == planc::ErrorCode::kInvalid
                    ? " (apply the migrations with planc-migrate, and make JobCompLoc's role "
                      "the writer with planc-bill sync-roles --writer)"
                    : "");
        store->disconnect();
        return wait;
      }
      reject_round_file(path, "PostgreSQL refused it: " + stored.error());
      continue;
    }
    if (backoff.succeeded())
      info("%s: market: PostgreSQL reachable again; round records stored", plugin_type);
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      error("%s: market: stored %s but cannot remove it: %m", plugin_type, path.c_str());
    g_rounds_recorded++;
    if (g_rounds_waiting) g_rounds_waiting--;
  }
  return 60;  // a new round wakes the recorder at once
}

void recorder() {
  std::unique_ptr<planc::BillStore> store;
  planc::RetryBackoff backoff;
  int wait = 0;
  planc::MutexLock l(g_rec_mu);
  while (!g_rec_stop) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(wait);
    while (!g_rec_stop && !g_rec_wake &&
           g_rec_cv.wait_until(l, until) == std::cv_status::no_timeout) {
    }
    if (g_rec_stop) break;
    g_rec_wake = false;
    l.unlock();
    try {
      wait = drain_rounds(store, backoff);
    } catch (const std::exception& e) {
      error("%s: market recorder: %s", plugin_type, e.what());
      wait = 30;
    }
    l.lock();
  }
}

// init(): rounds are recorded where the bills are.  Without jobcomp/planc
// the market runs unrecorded, said once.
void start_recorder() {
  planc::slurm::BillSite site = planc::slurm::bill_site();
  if (site.jobcomp_type != "jobcomp/planc") {
    verbose(
        "%s: market rounds are not recorded in PostgreSQL: JobCompType is %s, not "
        "jobcomp/planc",
        plugin_type, site.jobcomp_type.empty() ? "(none)" : site.jobcomp_type.c_str());
    return;
  }
  std::string dir = planc::slurm::state_file_path(kMarketDir);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error(
        "%s: cannot create %s: %m; market rounds are NOT recorded in PostgreSQL (fix "
        "StateSaveLocation's permissions and restart slurmctld)",
        plugin_type, dir.c_str());
    return;
  }
  g_market_dir = dir;
  g_market_conninfo = site.jobcomp_loc;
  g_cluster = site.cluster;
  {
    planc::MutexLock l(g_rec_mu);
    g_rec_stop = false;
    g_rec_wake = false;
  }
  g_recorder = planc::start_worker("planc_market", recorder);
}

void stop_recorder() {
  {
    planc::MutexLock l(g_rec_mu);
    g_rec_stop = true;
  }
  g_rec_cv.notify_all();
  planc::join_worker(g_recorder);
}

// A round's clearing (common/market.h): the P2 jobs held for the market bid
// for the GPUs that neither guaranteed nor P2 jobs hold (nor winners of
// earlier rounds that have not started), one market per GPU type
// (clear_markets); winners are released, every bidder's AdminComment says
// what happened and when the next round is.  Reads under the job read
// lock, then one short update per job, as the starvation scan does.
void clear_round(const planc::PlancConfig& cfg, const planc::MarketFloors& floors,
                 const planc::PoolUsage& pool, int gpu_pos) {
  using Clock = std::chrono::steady_clock;
  auto usec_since = [](Clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
  };
  const auto t_start = Clock::now();
  std::vector<planc::slurm::MarketJob> jobs;
  {
    slurmctld_lock_t read = {.job = READ_LOCK};
    lock_slurmctld(read);
    const auto t = Clock::now();
    jobs = planc::slurm::market_jobs(*g_tiers, gpu_pos);
    g_round_read_usec = usec_since(t);
    unlock_slurmctld(read);
  }
  const auto t_clear = Clock::now();
  planc::MarketOffer offer;
  offer.total = static_cast<int64_t>(pool.pool_gpus);
  for (TierId t : {TierId::kP0, TierId::kP1, TierId::kP2})
    offer.total -= static_cast<int64_t>(pool.allocated_gpus[planc::tier_index(t)]);
  for (const auto& [type, gpus] : pool.typed_gpus) {
    auto held = pool.typed_held.find(type);
    offer.by_type[type] = static_cast<int64_t>(gpus) -
                          static_cast<int64_t>(held != pool.typed_held.end() ? held->second : 0);
  }
  std::vector<planc::MarketBid> bids;
  std::vector<const planc::slurm::MarketJob*> bidder;  // bids[i] is bidder[i]'s
  bids.reserve(jobs.size());
  bidder.reserve(jobs.size());
  for (const auto& j : jobs) {
    if (!j.bidding) {  // matched, or a locked booking whose time has come: set aside
      offer.total -= j.gpus;
      if (auto it = offer.by_type.find(j.gpu_type); it != offer.by_type.end()) it->second -= j.gpus;
      continue;
    }
    bids.push_back({j.job_id, j.gpus, j.bid, std::nullopt, j.submitted, j.gpu_type});
    bidder.push_back(&j);
  }
  std::vector<planc::TypedRound> rounds = planc::clear_markets(bids, offer, floors, cfg.prices);
  g_market_rounds++;
  g_round_clear_usec = usec_since(t_clear);
  if (!g_market_dir.empty()) {
    // Names slurmctld had not filled in, resolved here outside the locks,
    // once per uid: a round's thousands of bids come from a few users.
    std::map<uint32_t, std::string> names;
    auto owner = [&](const planc::slurm::MarketJob* j) {
      if (!j->user.empty()) return std::make_pair(j->user, j->account);
      auto [it, added] = names.try_emplace(j->uid);
      if (added) it->second = planc::slurm::user_name(j->uid);
      return std::make_pair(it->second, j->account);
    };
    for (const planc::TypedRound& t : rounds) {
      // The record's bids are this market's, in its results' order.
      std::vector<planc::MarketBid> own;
      std::vector<std::pair<std::string, std::string>> owners;
      planc::MarketRound r = t.round;
      own.reserve(r.results.size());
      owners.reserve(r.results.size());
      for (planc::BidResult& b : r.results) {
        own.push_back(bids[b.index]);
        owners.push_back(owner(bidder[b.index]));
        b.index = static_cast<uint32_t>(own.size() - 1);
      }
      planc::MarketRoundRecord rec =
          planc::make_round_record(floors.at, floors.vacancy, own, owners, r);
      rec.gpu_type = t.gpu_type;
      record_round(rec);
    }
  }
  g_round_bids = bids.size();
  uint64_t update_usec = 0;
  uint32_t won = 0, results = 0;
  std::string summary;
  for (const planc::TypedRound& t : rounds) {
    const planc::MarketRound& r = t.round;
    uint32_t won_here = 0;
    // Losers' marks by (bid, outcome): thousands of bids share a handful.
    std::map<std::pair<planc::Micros, planc::BidOutcome>, std::string> loser_marks;
    for (const planc::BidResult& b : r.results) {
      const planc::slurm::MarketJob* j = bidder[b.index];
      const bool win = b.outcome == planc::BidOutcome::kWon;
      std::string mark;
      if (win) {
        mark = planc::market_mark_result(b, j->bid, r, cfg.prices.currency, floors.at,
                                         cfg.market.interval_seconds);
      } else {
        std::string& m = loser_marks[{j->bid.value_or(-1), b.outcome}];
        if (m.empty())
          m = planc::market_mark_result(b, j->bid, r, cfg.prices.currency, floors.at,
                                        cfg.market.interval_seconds);
        if (j->admin_held && j->admin_comment == m) continue;  // nothing new to say (the usual)
        mark = m;
      }
      std::string comment = planc::with_market_mark(j->admin_comment, mark);
      // A winner is released; a bidder that did not win is held (an
      // administrator's hold: job_submit/planc's looks like its owner's to
      // Slurm, so an owner could release it before its first round) and its
      // mark updated, only when either changes: a bid that loses again the
      // same way costs the round nothing.
      if (!win && j->admin_held && comment == j->admin_comment) continue;  // nothing new to say
      slurmctld_lock_t locks = planc::slurm::job_update_locks();
      lock_slurmctld(locks);
      const auto tu = Clock::now();
      int rc = win ? planc::slurm::release_job_as_slurm_user(b.job_id, comment.c_str())
                   : planc::slurm::hold_job_as_slurm_user(b.job_id, comment.c_str());
      update_usec += usec_since(tu);
      unlock_slurmctld(locks);
      g_market_updates++;
      if (rc != SLURM_SUCCESS)
        error("%s: market: JobId=%u: %s failed: %s (the next round tries again)", plugin_type,
              b.job_id, win ? "release" : "hold", slurm_strerror(rc));
      else if (win)
        won_here++;
    }
    won += won_here;
    results += static_cast<uint32_t>(r.results.size());
    if (r.results.empty()) continue;
    const std::string type = rounds.size() > 1 ? t.gpu_type + " " : std::string();
    info("%s: market round: %s%zu bid(s) for %u GPU(s), %u matched at %s %s/card-hour (floor %s)",
         plugin_type, type.c_str(), r.results.size(), r.capacity, won_here,
         planc::format_micros(r.clearing).c_str(), cfg.prices.currency.c_str(),
         planc::format_micros(r.floor).c_str());
    if (!summary.empty()) summary += "; ";
    summary += type + planc::format_micros(r.clearing) + " " + cfg.prices.currency +
               "/card-hour at " + planc::format_utc(floors.at) + ", " + std::to_string(won_here) +
               " of " + std::to_string(r.results.size()) + " bid(s) matched";
  }
  g_market_matched += won;
  g_round_update_usec = update_usec;
  g_round_total_usec = usec_since(t_start);
  if (results) {
    planc::MutexLock l(g_floors_mu);
    g_last_clearing = std::move(summary);
  }
  if (won) queue_job_scheduler();
}

// Each sample: the keeper sees the pool; a round (or the market opening,
// closing or its settings changing on reload) publishes the floors, and a
// round clears the bids.
void market_tick(const planc::PlancConfig& cfg, const planc::PoolUsage& pool, bool reloaded,
                 int gpu_pos) {
  const time_t now = time(nullptr);
  if (!cfg.market.enabled) {
    if (g_floor_keeper) {
      g_floor_keeper.reset();
      planc::MutexLock l(g_floors_mu);
      g_floors.reset();
      info("%s: the P2 market is closed (Market=no)", plugin_type);
    }
    return;
  }
  bool changed = false;
  if (!g_floor_keeper || reloaded) {
    if (!g_floor_keeper)
      info("%s: the P2 market is open: a round every %u s", plugin_type,
           cfg.market.interval_seconds);
    g_floor_keeper = std::make_unique<planc::FloorKeeper>(now, cfg);
    changed = true;
  }
  const uint32_t used = pool.allocated_total();
  if (pool.pool_gpus &&
      g_floor_keeper->sample(now, pool.pool_gpus > used ? pool.pool_gpus - used : 0, pool.pool_gpus,
                             cfg)) {
    const planc::MarketFloors& f = g_floor_keeper->floors();
    info("%s: market round: vacancy %s over the interval, floor %s %s per card-hour", plugin_type,
         f.vacancy ? planc::permille_text(*f.vacancy).c_str() : "unknown",
         planc::format_micros(f.default_floor).c_str(), cfg.prices.currency.c_str());
    changed = true;
    clear_round(cfg, f, pool, gpu_pos);
  }
  if (!changed) return;
  auto copy = std::make_shared<const planc::MarketFloors>(g_floor_keeper->floors());
  planc::MutexLock l(g_floors_mu);
  g_floors = std::move(copy);
}

// --- capacity infusion (issue 16) --------------------------------------------
// The controller (common/infusion.h decides): each sample feeds the idle
// window; once the window is covered, one decision per sample, acted on
// through Slurm's own RPCs from this worker with no slurmctld lock held
// (a replica is submitted as sbatch would as root; a shrink sends the
// replica SIGTERM, then SIGKILL after the pool's DrainGrace).  Idle GPUs
// are those neither allocated nor asked for by a pending replica (a
// replica being started is promised its GPUs).  The worker alone touches
// these; `scontrol show config` reads g_infusion_shown.
std::unique_ptr<planc::InfusionController> g_infusion;
planc::IdleWindow g_idle_window;
// Replicas told to drain: job id -> when SIGKILL follows (lost on a
// restart: a replica still running then is drained again if the pool
// still shrinks).
std::map<uint32_t, time_t> g_draining;
// The replicas the last sample saw and those submitted since: the sample
// looks them up by id (a pending P3 replica is not among its watched jobs).
std::vector<uint32_t> g_replica_ids;
std::string g_infusion_held;  // the hold last logged (see infusion_tick)
struct InfusionShown {
  std::string idle = "unknown (the window is not covered yet)";
  std::string last_operation = "none yet";
  std::string replicas;
  time_t next_allowed = 0;
  uint32_t ops_last_hour = 0;
};
planc::Mutex g_infusion_mu;
InfusionShown g_infusion_shown GUARDED_BY(g_infusion_mu);
// Operations by pool and action ("grow", "shrink", "reclaim"), for the metrics.
std::map<std::pair<std::string, std::string>, uint64_t> g_infusion_ops GUARDED_BY(g_infusion_mu);
std::map<std::string, uint32_t> g_infusion_replicas GUARDED_BY(g_infusion_mu);
// The decision pass's cost (test/bench/bench-infusion): passes and their
// whole time (counting the replicas, measuring, deciding; not acting), in
// microseconds.  What it reads the sample gathers in its own walk of the
// watched jobs (SampleLockTotalUsec).
std::atomic<uint64_t> g_infusion_failures{0}, g_infusion_passes{0}, g_infusion_pass_usec{0};

void count_infusion_op(const std::string& pool, const char* action) {
  planc::MutexLock l(g_infusion_mu);
  g_infusion_ops[{pool, action}]++;
}

// SIGKILL to replicas whose drain grace is over (they ended on their own
// by then, usually: the kill then finds nothing, which is fine).
void kill_drained(time_t now) {
  for (auto it = g_draining.begin(); it != g_draining.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    int rc = planc::slurm::signal_job_rpc(it->first, SIGKILL);
    if (rc != SLURM_SUCCESS && rc != ESLURM_ALREADY_DONE && rc != ESLURM_INVALID_JOB_ID)
      error("%s: infusion: JobId=%u: kill after its drain grace failed: %s", plugin_type, it->first,
            slurm_strerror(rc));
    it = g_draining.erase(it);
  }
}

void infusion_tick(const planc::PlancConfig& cfg, const planc::PoolUsage& pool,
                   const planc::slurm::InfusionJobs& jobs, bool reloaded) {
  const time_t now = time(nullptr);
  kill_drained(now);
  if (!cfg.infusion.enabled || cfg.infusion.pools.empty()) {
    g_replica_ids.clear();
    if (g_infusion) {
      g_infusion.reset();
      info(
          "%s: capacity infusion is off (Infusion=no or no Pool= line); replicas already running "
          "keep running",
          plugin_type);
    }
    return;
  }
  if (!g_infusion) {
    g_infusion = std::make_unique<planc::InfusionController>(cfg.infusion.settings);
    info("%s: capacity infusion is on: %zu pool(s), idle measured over %u s", plugin_type,
         cfg.infusion.pools.size(), cfg.infusion.settings.window_seconds);
  } else if (reloaded) {
    g_infusion->configure(cfg.infusion.settings);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<planc::slurm::ReplicaJob>& replicas = jobs.replicas;
  g_replica_ids.clear();
  for (const auto& r : replicas) g_replica_ids.push_back(r.job_id);
  // Replicas per pool (not those draining), and the GPUs pending ones are promised.
  std::vector<planc::ServingPool> pools;
  for (const planc::PoolConfig& p : cfg.infusion.pools)
    pools.push_back({p.name, p.tier, p.gpus_per_replica, p.min_replicas, p.max_replicas, 0});
  uint64_t promised = 0, draining = 0;
  for (const auto& r : replicas) {
    if (g_draining.count(r.job_id)) {
      if (r.running) draining += r.gpus;
      continue;
    }
    for (planc::ServingPool& sp : pools)
      if (sp.name == r.pool) sp.replicas++;
    if (!r.running) promised += r.gpus;
  }
  const uint64_t used = pool.allocated_total() + promised;
  const uint64_t idle_now = pool.pool_gpus > used ? pool.pool_gpus - used : 0;
  g_idle_window.observe(now, static_cast<uint32_t>(idle_now),
                        static_cast<uint32_t>(pool.pool_gpus));
  // Guaranteed work waits for more GPUs than it can have without taking
  // replicas back: the idle ones, within the 80% cap when it is on, and
  // those of replicas already draining or of jobs Slurm is preempting.
  // Then a replica is reclaimed at once, one a sample (not while enough
  // already drain).
  uint64_t open = idle_now;
  if (!cfg.guaranteed_partition.empty()) {
    const uint64_t cap = pool.pool_gpus * cfg.guaranteed_cap_percent / 100;
    const uint64_t held = pool.allocated_gpus[planc::tier_index(TierId::kP0)] +
                          pool.allocated_gpus[planc::tier_index(TierId::kP1)];
    open = std::min(open, cap > held ? cap - held : 0);
  }
  const bool waiting = jobs.guaranteed_waiting_gpus > open + draining + jobs.preempting_gpus;
  {
    std::string text;
    for (const planc::ServingPool& sp : pools)
      text += (text.empty() ? "" : ",") + sp.name + "=" + std::to_string(sp.replicas);
    planc::MutexLock l(g_infusion_mu);
    g_infusion_shown.replicas = text;
    for (const planc::ServingPool& sp : pools) g_infusion_replicas[sp.name] = sp.replicas;
  }
  auto m = g_idle_window.measure(now, cfg.infusion.settings.window_seconds);
  std::optional<planc::InfusionDecision> decided;
  if (m) decided = g_infusion->decide(now, m->idle_gpus, m->pool_gpus, waiting, pools);
  g_infusion_passes++;
  g_infusion_pass_usec += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  if (!decided) return;
  const planc::InfusionDecision& d = *decided;
  {
    planc::MutexLock l(g_infusion_mu);
    g_infusion_shown.idle = std::to_string(m->idle_gpus) + " of " + std::to_string(m->pool_gpus) +
                            " GPUs over the last " +
                            std::to_string(cfg.infusion.settings.window_seconds) + " s";
    g_infusion_shown.ops_last_hour = g_infusion->ops_last_hour(now);
    g_infusion_shown.next_allowed = g_infusion->next_allowed(now);
  }
  if (d.market_round) {
    if (cfg.market.enabled && g_floor_keeper) {
      g_floor_keeper->ask_round(now);
      info("%s: infusion: idle %u of %u GPUs, above InfusionIdleMarket %s: a P2 market round now",
           plugin_type, m->idle_gpus, m->pool_gpus,
           planc::permille_text(cfg.infusion.settings.market_idle_permille).c_str());
    } else {
      info(
          "%s: infusion: idle %u of %u GPUs, above InfusionIdleMarket %s: no market round "
          "(Market=no)",
          plugin_type, m->idle_gpus, m->pool_gpus,
          planc::permille_text(cfg.infusion.settings.market_idle_permille).c_str());
    }
  }
  if (d.action == planc::InfusionAction::kNone) {
    // An operation the hourly limit holds back: said once when that starts
    // (not every sample), again when what is held back changes (the
    // cooldown's holds are routine and not logged).
    const size_t held = d.reason.find(", held ");
    const size_t colon = d.reason.find(": ");
    std::string kind;
    if (held != std::string::npos && colon < held &&
        d.reason.find("by the hourly limit", held) != std::string::npos)
      kind = d.reason.substr(colon + 2, held - colon - 2);
    if (!kind.empty() && kind != g_infusion_held)
      info("%s: infusion: %s", plugin_type, d.reason.c_str());
    g_infusion_held = std::move(kind);
    return;
  }
  g_infusion_held.clear();
  const planc::PoolConfig* pc = nullptr;
  for (const planc::PoolConfig& p : cfg.infusion.pools)
    if (p.name == d.pool) pc = &p;
  if (!pc) return;
  uint32_t now_replicas = 0;
  for (const planc::ServingPool& sp : pools)
    if (sp.name == d.pool) now_replicas = sp.replicas;
  std::string did;
  if (d.action == planc::InfusionAction::kGrow) {
    std::string why;
    const uint32_t drain = pc->drain_grace_seconds > 2 ? pc->drain_grace_seconds - 2 : 0;
    uint32_t id = planc::slurm::submit_replica(
        *pc, cfg.tiers.tier(pc->tier).qos,
        planc::infused_mark(pc->name, pc->tier, pc->drain_grace_seconds), drain, &why);
    if (!id) {
      g_infusion_failures++;
      error(
          "%s: infusion: %s: could not add a replica to pool %s: %s (tried again after the "
          "cooldown)",
          plugin_type, d.reason.c_str(), pc->name.c_str(), why.c_str());
      g_infusion->done(now, d);  // a failing submission waits for the cooldown too
      return;
    }
    g_replica_ids.push_back(id);
    did = "grew pool " + pc->name + " to " + std::to_string(now_replicas + 1) +
          " replica(s) (JobId=" + std::to_string(id) + ")";
    count_infusion_op(pc->name, "grow");
  } else {
    // The newest replica goes first: pending before running when the pool
    // shrinks (no server interrupted), running first when guaranteed work
    // waits (only a running one frees GPUs).
    const planc::slurm::ReplicaJob* victim = nullptr;
    for (const auto& r : replicas) {
      if (r.pool != pc->name || g_draining.count(r.job_id)) continue;
      if (!victim) {
        victim = &r;
        continue;
      }
      const bool better_state =
          d.reclaim ? r.running && !victim->running : !r.running && victim->running;
      if (better_state || (victim->running == r.running && r.job_id > victim->job_id)) victim = &r;
    }
    if (!victim) return;
    int rc;
    if (!victim->running) {
      rc = planc::slurm::signal_job_rpc(victim->job_id, SIGKILL);
    } else {
      rc = planc::slurm::signal_job_rpc(victim->job_id, SIGTERM);
      if (rc == SLURM_SUCCESS) g_draining[victim->job_id] = now + pc->drain_grace_seconds;
    }
    if (rc != SLURM_SUCCESS) {
      g_infusion_failures++;
      error("%s: infusion: %s: JobId=%u: %s failed: %s", plugin_type, d.reason.c_str(),
            victim->job_id, victim->running ? "SIGTERM" : "cancel", slurm_strerror(rc));
      return;
    }
    did = std::string(d.reclaim ? "gave back" : "shrank") + " pool " + pc->name + " to " +
          std::to_string(now_replicas - 1) +
          " replica(s) (JobId=" + std::to_string(victim->job_id) +
          (victim->running ? " SIGTERM, killed after its drain grace of " +
                                 std::to_string(pc->drain_grace_seconds) + " s"
                           : " cancelled before it started") +
          ")";
    count_infusion_op(pc->name, d.reclaim ? "reclaim" : "shrink");
  }
  g_infusion->done(now, d);
  info("%s: infusion: %s: %s; %u operation(s) in the last hour of at most %u", plugin_type,
       did.c_str(), d.reason.c_str(), g_infusion->ops_last_hour(now),
       cfg.infusion.settings.max_ops_per_hour);
  planc::MutexLock l(g_infusion_mu);
  g_infusion_shown.last_operation = planc::format_utc(now) + ": " + did + ": " + d.reason;
  g_infusion_shown.ops_last_hour = g_infusion->ops_last_hour(now);
  g_infusion_shown.next_allowed = g_infusion->next_allowed(now);
}

// --- run-start journal --------------------------------------------------------
// Lines whose write(2) failed (disk full) wait here, in order, at most this
// many; the worker retries them.
constexpr size_t kJournalMaxUnwritten = 100000;

std::string g_journal_dir;  // empty: the journal is off
// The day's file and the starts not written yet (common/append_file.h):
// the hook holds g_journal_mu around one write(2), the worker around
// swapping files and retrying, never across an open, fsync or close.
planc::Mutex g_journal_mu;
planc::RecordAppender g_journal GUARDED_BY(g_journal_mu);
planc_job_begin_fn g_prev_job_begin = nullptr;
std::atomic<uint64_t> g_journal_records{0}, g_journal_dropped{0};
std::atomic<uint64_t> g_journal_total_usec{0}, g_journal_max_usec{0}, g_journal_slow{0};
constexpr uint64_t kJournalSlowUsec = 1000;  // counted in RunJournalOver1ms

planc::Result<planc::AppendFile> open_journal(const std::string& name) {
  return planc::open_append_file(planc::posix_file_system(), g_journal_dir + "/" + name);
}

// slurmctld's job-begin hook (job and node write locks held): one record,
// one write(2) under g_journal_mu, nothing else.
void on_job_begin(job_record_t* job) {
  if (g_prev_job_begin) g_prev_job_begin(job);
  try {
    {
      planc::MutexLock l(g_started_mu);
      if (g_started.size() < kMaxStarted)
        g_started.push_back(job->job_id);
      else
        g_started_lost = true;
    }
    auto t0 = std::chrono::steady_clock::now();
    planc::Segment begun = planc::slurm::segment_of(job);
    begun.end_time = 0;  // not ended: segment_of reads the expected end
    std::string line = planc::serialize_segment(begun);
    bool first_failure = false, dropped = false;
    std::string problem;
    {
      planc::MutexLock l(g_journal_mu);
      dropped = g_journal.waiting() >= kJournalMaxUnwritten;
      if (!dropped) {
        auto r = g_journal.append(std::move(line));
        first_failure = !r.ok() && g_journal.waiting() == 1;
        if (first_failure) problem = r.error();
      }
    }
    if (first_failure)
      error(
          "%s: cannot append the start of %pJ to the run-start journal in %s (%s); kept in "
          "memory until it can",
          plugin_type, job, g_journal_dir.c_str(), problem.c_str());
    if (dropped) g_journal_dropped++;
    uint64_t usec = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    g_journal_records++;
    g_journal_total_usec += usec;
    if (usec > g_journal_max_usec) g_journal_max_usec = usec;
    if (usec > kJournalSlowUsec) g_journal_slow++;
  } catch (const std::exception& e) {
    error("%s: start of %pJ not journaled: %s", plugin_type, job, e.what());
  }
}

void prune_journal(time_t now) {
  DIR* d = opendir(g_journal_dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d))
    if (planc::journal_file_expired(e->d_name, now) &&
        unlink((g_journal_dir + "/" + e->d_name).c_str()) != 0)
      error("%s: cannot remove %s/%s: %m", plugin_type, g_journal_dir.c_str(), e->d_name);
  closedir(d);
}

// Worker: a new file at the UTC day's change, retried lines, fsync.
void journal_tick(bool* hook_warned) {
  if (g_journal_dir.empty()) return;
  if (planc_job_begin_hook() != on_job_begin && !*hook_warned) {
    error(
        "%s: another plugin replaced the job-begin hook; run starts are no longer journaled "
        "(list planc after nonstop in SlurmctldPlugstack)",
        plugin_type);
    *hook_warned = true;
  }
  time_t now = time(nullptr);
  const std::string want = g_journal_dir + "/" + planc::journal_file_name(now);
  bool change;
  {
    planc::MutexLock l(g_journal_mu);
    change = want != g_journal.file().path || !g_journal.file().is_open();
  }
  planc::AppendFile next;
  if (change) {
    auto r = open_journal(planc::journal_file_name(now));  // outside the lock: may touch the disk
    if (r.ok())
      next = std::move(r).value();
    else
      error("%s: %s; run starts stay in the current file", plugin_type, r.error().c_str());
  }
  planc::AppendFile old;
  size_t left;
  std::string problem;
  {
    planc::MutexLock l(g_journal_mu);
    if (next.is_open()) old = g_journal.replace(std::move(next));
    if (auto r = g_journal.flush_waiting(); !r.ok()) problem = r.error();
    left = g_journal.waiting();
  }
  if (left)
    error("%s: %zu run start(s) still not in the journal (%s); retrying", plugin_type, left,
          problem.c_str());
  // The file being appended to is never fsynced: an append waiting behind
  // an fsync of its own file would wait under slurmctld's locks.  Its
  // records survive a SIGKILL of slurmctld in the page cache and reach the
  // disk with the kernel's writeback (about 30 s); a closed day's file is
  // fsynced here.
  if (old.is_open()) {
    if (auto r = planc::close_append_file(planc::posix_file_system(), old, true); !r.ok())
      error("%s: %s", plugin_type, r.error().c_str());
    prune_journal(now);
  }
}

// init(): the directory, today's file, the hook.  A journal that cannot be
// set up is logged and left off; the rest of the plugin works.
void start_journal() {
  std::string dir = planc::slurm::state_file_path(planc::kJournalDir);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error(
        "%s: cannot create %s: %m; run starts are NOT journaled, so a controller crash can "
        "hide runs (fix StateSaveLocation's permissions and restart slurmctld)",
        plugin_type, dir.c_str());
    return;
  }
  g_journal_dir = dir;
  auto file = open_journal(planc::journal_file_name(time(nullptr)));
  if (!file.ok())
    error("%s: %s; run starts kept in memory until it can", plugin_type, file.error().c_str());
  {
    planc::MutexLock l(g_journal_mu);
    if (file.ok()) g_journal.replace(std::move(file).value());
  }
  prune_journal(time(nullptr));
  g_prev_job_begin = planc_set_job_begin_hook(on_job_begin);
}

void stop_journal() {
  if (planc_job_begin_hook() == on_job_begin) planc_set_job_begin_hook(g_prev_job_begin);
  planc::AppendFile last;
  size_t lost;
  std::string problem;
  {
    planc::MutexLock l(g_journal_mu);
    last = g_journal.release(&lost, &problem);
  }
  if (lost)
    error("%s: %zu run start(s) could not be journaled at shutdown (%s)", plugin_type, lost,
          problem.c_str());
  if (auto r = planc::close_append_file(planc::posix_file_system(), last, true); !r.ok())
    error("%s: %s", plugin_type, r.error().c_str());
}

slurmctld_lock_t job_read_lock() { return {.job = READ_LOCK}; }

std::string comment_after_upgrade(uint32_t job_id, const planc::Upgrade& u, time_t now) {
  std::string mark = planc::free_attempt_mark(*g_config, u.from, u.to, now, u.waited_seconds,
                                              planc::reason_name(u.reason));
  return planc::add_free_attempt_mark(planc::slurm::admin_comment(job_id), mark);
}

// One job per lock hold; the facts are read again under the write lock, so
// a job that started, was held or changed tier since the scan is skipped.
bool upgrade(const planc::Upgrade& planned) {
  const planc::PlancConfig& cfg = *g_config;
  slurmctld_lock_t locks = planc::slurm::job_update_locks();
  lock_slurmctld(locks);
  time_t now = time(nullptr);
  auto job = planc::slurm::pending_job(*g_tiers, planned.job_id);
  int rc = SLURM_SUCCESS;
  bool done = false;
  planc::Upgrade u = planned;
  if (job && planc::is_starving(cfg, *job, now)) {
    u.waited_seconds = static_cast<uint32_t>(now - job->eligible_since);
    u.reason = job->reason;
    std::string comment = comment_after_upgrade(u.job_id, u, now);
    rc = planc::slurm::update_job_as_slurm_user(u.job_id, cfg.tiers.tier(u.to).qos.c_str(),
                                                comment.c_str());
    done = rc == SLURM_SUCCESS;
  }
  unlock_slurmctld(locks);
  const char* from = cfg.tiers.tier(u.from).label.c_str();
  const char* to = cfg.tiers.tier(u.to).label.c_str();
  if (done)
    info("%s: JobId=%u upgraded from %s to %s (free attempt) after waiting %u s for %s",
         plugin_type, u.job_id, from, to, u.waited_seconds,
         std::string(planc::reason_name(u.reason)).c_str());
  else if (rc != SLURM_SUCCESS)
    error("%s: JobId=%u: upgrade to %s failed: %s (tried again next interval)", plugin_type,
          u.job_id, to, slurm_strerror(rc));
  return done;
}

// A marked pending job whose attempt is over (requeued) goes back to the
// tier it came from; one moved to another tier by someone loses the mark.
bool settle_mark(uint32_t job_id) {
  const planc::PlancConfig& cfg = *g_config;
  slurmctld_lock_t locks = planc::slurm::job_update_locks();
  lock_slurmctld(locks);
  auto job = planc::slurm::marked_job(*g_tiers, job_id);
  planc::MarkAction action = job ? planc::decide_marked(*job) : planc::MarkAction::kKeep;
  const TierId from = job ? job->from : TierId::kP3, to = job ? job->to : TierId::kP2;
  int rc = SLURM_SUCCESS;
  if (action != planc::MarkAction::kKeep) {
    std::string comment = planc::remove_free_attempt_mark(planc::slurm::admin_comment(job_id));
    const char* qos =
        action == planc::MarkAction::kBack ? cfg.tiers.tier(from).qos.c_str() : nullptr;
    rc = planc::slurm::update_job_as_slurm_user(job_id, qos, comment.c_str());
  }
  unlock_slurmctld(locks);
  if (action == planc::MarkAction::kKeep) return false;
  if (rc != SLURM_SUCCESS) {
    error("%s: JobId=%u: ending its free attempt failed: %s (tried again next interval)",
          plugin_type, job_id, slurm_strerror(rc));
    return false;
  }
  if (action == planc::MarkAction::kBack)
    info("%s: JobId=%u: free %s attempt ended by requeue; back in %s, waiting time restarts",
         plugin_type, job_id, cfg.tiers.tier(to).label.c_str(), cfg.tiers.tier(from).label.c_str());
  else
    info("%s: JobId=%u left %s during its free attempt; free-attempt mark removed", plugin_type,
         job_id, cfg.tiers.tier(to).label.c_str());
  return true;
}

void starvation_scan() {
  const planc::PlancConfig& cfg = *g_config;
  std::vector<planc::PendingJob> starvable;
  std::vector<planc::MarkedJob> marked;
  std::vector<uint32_t> watch;
  // Timed from holding the lock (not waiting for it): the scan's cost to
  // the rest of slurmctld.
  slurmctld_lock_t read = job_read_lock();
  lock_slurmctld(read);
  auto t0 = std::chrono::steady_clock::now();
  size_t seen = planc::slurm::collect_pending(*g_tiers, &starvable, &marked, &watch);
  unlock_slurmctld(read);
  g_watch.rescanned(std::move(watch));
  std::vector<planc::Upgrade> todo = planc::select_upgrades(cfg, starvable, time(nullptr));
  uint64_t usec = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  g_scans++;
  g_total_scan_usec += usec;
  g_last_scan_usec = usec;
  g_last_scan_jobs = seen;
  if (usec > g_max_scan_usec) g_max_scan_usec = usec;
  debug("%s: scan of %zu pending jobs (%zu may starve, %zu marked) took %lu us; %zu to upgrade",
        plugin_type, seen, starvable.size(), marked.size(), static_cast<unsigned long>(usec),
        todo.size());

  bool changed = false;
  for (const planc::MarkedJob& m : marked)
    if (planc::decide_marked(m) != planc::MarkAction::kKeep && settle_mark(m.job_id)) {
      changed = true;
      g_reverts++;
    }
  for (const planc::Upgrade& u : todo)
    if (upgrade(u)) {
      changed = true;
      g_upgrades++;
    }
  if (changed) {
    schedule_job_save();  // both only signal other threads
    queue_job_scheduler();
  }
}

std::unique_ptr<planc::SpotLedger> load_spot_state(const planc::PlancConfig& cfg) {
  auto rule = planc::SpotDayRule::of(cfg);
  auto loaded = planc::load_state_file<planc::SpotLedger>(
      g_state_path, time(nullptr),
      [&](const std::string& text) { return planc::SpotLedger::parse(text, rule); },
      [&] { return planc::SpotLedger(rule); }, "today's spot use restarts from zero");
  if (!loaded.problem.empty())
    error("%s: %s", plugin_type, loaded.problem.c_str());
  else if (loaded.value.as_of())
    info("%s: spot use restored from %s (as of %s)", plugin_type, g_state_path.c_str(),
         planc::format_utc(loaded.value.as_of()).c_str());
  return std::make_unique<planc::SpotLedger>(std::move(loaded.value));
}

void publish_usage() {
  auto u = std::make_shared<const planc::SpotUsage>(g_ledger->usage());
  planc::MutexLock l(g_usage_mu);
  g_usage = std::move(u);
}

// Returns the state file's new text when it changed.  `*pool` gets the
// pool's usage, read in the same lock hold.
std::string spot_sample(int* gpu_pos, const std::string& last_written, planc::PoolUsage* pool,
                        planc::slurm::InfusionJobs* infusion) {
  if (*gpu_pos < 0) *gpu_pos = planc::slurm::gpu_tres_position();
  std::vector<uint32_t> tracked = g_ledger->tracked_ids();
  const bool hook_ours = planc_job_begin_hook() == on_job_begin;
  planc::slurm::JobSample sample;
  slurmctld_lock_t read = {.job = READ_LOCK, .node = READ_LOCK, .fed = READ_LOCK};
  const auto t0 = std::chrono::steady_clock::now();
  lock_slurmctld(read);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<uint32_t> started;
  {
    planc::MutexLock l(g_started_mu);
    started.swap(g_started);
    if (g_started_lost) g_watch.lost_starts();
    g_started_lost = false;
  }
  const planc::slurm::JobIdSpace ids = planc::slurm::job_id_space();
  const planc::JobWatch::Plan plan = g_watch.plan(started, ids.next, ids.first, ids.max, hook_ours);
  planc::slurm::sample_jobs(*g_tiers, *gpu_pos, tracked, plan, g_replica_ids, &sample);
  unlock_slurmctld(read);
  using std::chrono::duration_cast, std::chrono::microseconds;
  const uint64_t usec = duration_cast<microseconds>(std::chrono::steady_clock::now() - t1).count();
  g_watch.sampled(std::move(sample.watch), ids.next);
  g_samples++;
  g_sample_visited += sample.visited;
  if (sample.walked) g_sample_walks++;
  g_watched = g_watch.size();
  g_sample_lock_wait_usec += duration_cast<microseconds>(t1 - t0).count();
  g_sample_lock_usec += usec;
  if (usec > g_sample_max_lock_usec.load()) g_sample_max_lock_usec = usec;
  *pool = sample.pool;
  *infusion = std::move(sample.infusion);
  g_sla.observe(g_config->sla_start_seconds, sample.guaranteed_running, sample.guaranteed_held,
                sample.guaranteed_pending);
  g_ledger->sample(time(nullptr), sample.spot_running, sample.spot_ended);
  publish_usage();
  std::string text = g_ledger->serialize();
  return text == last_written ? std::string() : text;
}

// The metrics snapshot planc-exporter reads (common/metrics_snapshot.h),
// written outside every lock after each sample.
void write_metrics(const planc::PoolUsage& pool, const planc::IdleCrossings& idle,
                   const planc::ConfigWatch& watch) {
  const auto t0 = std::chrono::steady_clock::now();
  planc::MetricsSnapshot s;
  s.source = "slurmctld";
  s.written = time(nullptr);
  planc::add_pool_samples(pool, idle, &s);
  g_sla.add_samples(&s);
  s.samples.push_back(
      {"planc_starvation_upgrades_total", {}, static_cast<double>(g_upgrades.load())});
  s.samples.push_back(
      {"planc_starvation_reverts_total", {}, static_cast<double>(g_reverts.load())});
  for (int t = 0; t < planc::kTierCount; t++)
    s.samples.push_back({"planc_spot_cap_refusals_total",
                         {{"tier", "P" + std::to_string(t)}},
                         static_cast<double>(g_spot_refusals[t].load())});
  if (auto f = market_floors()) {
    auto price = [](planc::Micros m) { return static_cast<double>(m) / planc::kMicrosPerUnit; };
    s.samples.push_back(
        {"planc_market_floor_price", {{"gpu_type", "default"}}, price(f->default_floor)});
    for (const auto& [type, floor] : f->by_type)
      s.samples.push_back({"planc_market_floor_price", {{"gpu_type", type}}, price(floor)});
    if (f->vacancy) s.samples.push_back({"planc_market_vacancy_ratio", {}, *f->vacancy / 1000.0});
    s.samples.push_back(
        {"planc_market_next_round_timestamp_seconds", {}, static_cast<double>(f->next_round)});
  }
  {
    planc::MutexLock l(g_infusion_mu);
    for (const auto& [key, n] : g_infusion_ops)
      s.samples.push_back({"planc_infusion_operations_total",
                           {{"pool", key.first}, {"action", key.second}},
                           static_cast<double>(n)});
    for (const auto& [name, n] : g_infusion_replicas)
      s.samples.push_back({"planc_infusion_replicas", {{"pool", name}}, static_cast<double>(n)});
  }
  s.samples.push_back(
      {"planc_config_reloads_total", {{"result", "ok"}}, static_cast<double>(watch.reloaded())});
  s.samples.push_back(
      {"planc_config_reloads_total", {{"result", "failed"}}, static_cast<double>(watch.refused())});
  if (auto err = planc::write_file_atomically(g_metrics_path, planc::serialize_snapshot(s),
                                              planc::Durability::kNoSync))
    error("%s: metrics snapshot: %s", plugin_type, err->c_str());
  g_metrics_write_usec +=
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
}

// A changed planc.conf applies from the next sample and scan on.  The spot
// day (SpotCapResetTime, SpotCapTimeZone, SpotCapDayLength) is the one
// the counters were started with until slurmctld restarts.
// Returns true when a new planc.conf is in force.
bool reload(planc::ConfigWatch* watch) {
  auto cfg = planc::slurm::reload_plugin_config(plugin_type, watch);
  if (!cfg) return false;
  g_tiers = std::make_unique<planc::QosTierCache>(cfg->tiers);
  g_config = cfg;
  planc::MutexLock l(g_shown_mu);
  g_shown = cfg;
  return true;
}

void worker(planc::ConfigWatch watch) {
  using Clock = std::chrono::steady_clock;
  auto next_scan = Clock::now() + std::chrono::seconds(g_config->starvation_interval_seconds);
  auto next_sample = Clock::now();
  int gpu_pos = -1;
  std::string written;
  bool hook_warned = false;
  bool reloaded_since_sample = false;
  planc::IdleCrossings idle;
  planc::MutexLock l(g_mu);
  while (!g_stop) {
    while (!g_stop &&
           g_cv.wait_until(l, std::min(next_scan, next_sample)) == std::cv_status::no_timeout) {
    }
    if (g_stop) break;
    l.unlock();
    try {
      const bool reloaded = reload(&watch);
      // A reload between two samples is the next sample's news: the
      // market and infusion act on settings only at a sample (the
      // market's floors and the controller's limits were left as they
      // were when planc.conf changed between samples).
      reloaded_since_sample = reloaded_since_sample || reloaded;
      const planc::PlancConfig& cfg = *g_config;
      auto now = Clock::now();
      // A shorter StarvationInterval applies now, not after the old one.
      if (reloaded)
        next_scan =
            std::min(next_scan, now + std::chrono::seconds(cfg.starvation_interval_seconds));
      if (now >= next_sample) {
        next_sample = now + std::chrono::seconds(kSpotSampleSeconds);
        journal_tick(&hook_warned);
        planc::PoolUsage pool;
        planc::slurm::InfusionJobs infusion_jobs;
        std::string text = spot_sample(&gpu_pos, written, &pool, &infusion_jobs);
        if (pool.pool_gpus)
          idle.observe(1.0 - static_cast<double>(pool.allocated_total()) /
                                 static_cast<double>(pool.pool_gpus));
        infusion_tick(cfg, pool, infusion_jobs, reloaded_since_sample);
        market_tick(cfg, pool, reloaded_since_sample, gpu_pos);
        reloaded_since_sample = false;
        write_metrics(pool, idle, watch);
        if (!text.empty()) {
          if (auto err = planc::write_file_atomically(g_state_path, text))
            error("%s: %s", plugin_type, err->c_str());
          else
            written = std::move(text);
        }
      }
      if (now >= next_scan) {
        next_scan = now + std::chrono::seconds(cfg.starvation_interval_seconds);
        starvation_scan();
      }
    } catch (const std::exception& e) {
      error("%s: worker: %s", plugin_type, e.what());
    }
    l.lock();
  }
}

void add_pair(List pairs, const char* name, const std::string& value) {
  auto* kp = static_cast<config_key_pair_t*>(xmalloc(sizeof(config_key_pair_t)));
  kp->name = xstrdup(name);
  kp->value = xstrdup(value.c_str());
  list_append(pairs, kp);
}

}  // namespace

PLANC_EXPORT int planc_spot_used_v1(const char* account, int tier, int64_t now, uint64_t* used) {
  if (!g_running.load() || !account || tier < 0 || tier >= planc::kTierCount || !used) return 0;
  try {
    std::shared_ptr<const planc::SpotUsage> u;
    {
      planc::MutexLock l(g_usage_mu);
      u = g_usage;
    }
    if (!u) return 0;
    *used = u->used(account, static_cast<TierId>(tier), static_cast<time_t>(now));
    return 1;
  } catch (...) {
    return 0;
  }
}

PLANC_EXPORT int planc_market_floor_v1(const char* gpu_type, int64_t* floor, int64_t* next_round) {
  if (!g_running.load() || !floor || !next_round) return 0;
  try {
    auto f = market_floors();
    if (!f) return 0;
    auto it = f->by_type.find(planc::ascii_lower(gpu_type ? gpu_type : ""));
    *floor = it != f->by_type.end() ? it->second : f->default_floor;
    *next_round = f->next_round;
    return 1;
  } catch (...) {
    return 0;
  }
}

PLANC_EXPORT void planc_spot_refused_v1(int tier) {
  if (tier >= 0 && tier < planc::kTierCount) g_spot_refusals[tier]++;
}

PLANC_EXPORT int init(void) {
  try {
    g_config = planc::slurm::load_plugin_config(plugin_type);
    if (!g_config) return SLURM_ERROR;
    g_state_path = planc::slurm::state_file_path(kStateFile);
    g_metrics_path = planc::slurm::state_file_path("planc_metrics_slurmctld");
    g_tiers = std::make_unique<planc::QosTierCache>(g_config->tiers);
    {
      planc::MutexLock l(g_shown_mu);
      g_shown = g_config;
    }
    g_ledger = load_spot_state(*g_config);
    publish_usage();
    start_journal();
    start_recorder();
    {
      planc::MutexLock l(g_mu);
      g_stop = false;
    }
    g_worker = planc::start_worker("planc_ctld", worker,
                                   planc::ConfigWatch(planc::slurm::planc_conf_file(), g_config));
    g_running = true;
    verbose(
        "%s loaded: starvation threshold %u s, checked every %u s, at most %u a time; "
        "spot caps P2 %s, P3 %s, day starts %s",
        plugin_type, g_config->starvation_threshold_seconds, g_config->starvation_interval_seconds,
        g_config->starvation_max_per_interval,
        planc::describe_spot_cap(*g_config, TierId::kP2).c_str(),
        planc::describe_spot_cap(*g_config, TierId::kP3).c_str(),
        planc::describe_spot_day(*g_config).c_str());
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: init failed: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

PLANC_EXPORT int fini(void) {
  g_running = false;
  try {
    {
      planc::MutexLock l(g_mu);
      g_stop = true;
    }
    g_cv.notify_all();
    planc::join_worker(g_worker);
    stop_recorder();
    stop_journal();
    if (g_ledger) {
      if (auto err = planc::write_file_atomically(g_state_path, g_ledger->serialize()))
        error("%s: %s", plugin_type, err->c_str());
    }
  } catch (const std::exception& e) {
    error("%s: fini: %s", plugin_type, e.what());
  }
  {
    planc::MutexLock l(g_usage_mu);
    g_usage.reset();
  }
  g_ledger.reset();
  g_tiers.reset();
  g_config.reset();
  {
    planc::MutexLock l(g_shown_mu);
    g_shown.reset();
  }
  return SLURM_SUCCESS;
}

PLANC_EXPORT void slurmctld_plugstack_p_get_config(config_plugin_params_t* p) {
  try {
    std::shared_ptr<const planc::PlancConfig> shown;
    {
      planc::MutexLock l(g_shown_mu);
      shown = g_shown;
    }
    if (!shown) return;
    const planc::PlancConfig& cfg = *shown;
    xstrcat(p->name, plugin_type);
    auto secs = [](uint64_t s) { return std::to_string(s) + " s"; };
    add_pair(p->key_pairs, "StarvationThreshold", secs(cfg.starvation_threshold_seconds));
    add_pair(p->key_pairs, "StarvationInterval", secs(cfg.starvation_interval_seconds));
    add_pair(p->key_pairs, "StarvationMaxPerInterval",
             std::to_string(cfg.starvation_max_per_interval));
    add_pair(p->key_pairs, "SpotCapP2", planc::describe_spot_cap(cfg, TierId::kP2));
    add_pair(p->key_pairs, "SpotCapP3", planc::describe_spot_cap(cfg, TierId::kP3));
    add_pair(p->key_pairs, "SpotCapResetTime", planc::format_time_of_day(cfg.spot_reset_seconds));
    add_pair(p->key_pairs, "SpotCapTimeZone",
             "UTC" + planc::format_utc_offset(cfg.spot_utc_offset_seconds));
    add_pair(p->key_pairs, "SpotCapDayLength", secs(cfg.spot_day_seconds));
    add_pair(p->key_pairs, "Market", cfg.market.enabled ? "yes" : "no");
    if (cfg.market.enabled) {
      add_pair(p->key_pairs, "MarketInterval", secs(cfg.market.interval_seconds));
      add_pair(p->key_pairs, "MarketMinFraction", planc::permille_text(cfg.market.min_permille));
      add_pair(p->key_pairs, "MarketFloorCurve", planc::format_floor_curve(cfg.market.floor_curve));
      if (auto f = market_floors()) {
        std::string floors = "default=" + planc::format_micros(f->default_floor);
        for (const auto& [type, floor] : f->by_type)
          floors += "," + type + "=" + planc::format_micros(floor);
        add_pair(p->key_pairs, "MarketFloor", floors + " " + cfg.prices.currency + "/card-hour");
        std::string lists = "default=" + planc::format_micros(cfg.prices.default_card_hour);
        for (const auto& [type, list] : cfg.prices.card_hour)
          lists += "," + type + "=" + planc::format_micros(list);
        add_pair(p->key_pairs, "MarketListPrice", lists + " " + cfg.prices.currency + "/card-hour");
        add_pair(p->key_pairs, "MarketVacancy",
                 f->vacancy ? planc::permille_text(*f->vacancy) : "unknown");
        add_pair(p->key_pairs, "MarketLastRound", f->at ? planc::format_utc(f->at) : "none yet");
        add_pair(p->key_pairs, "MarketNextRound", planc::format_utc(f->next_round));
        {
          planc::MutexLock l(g_floors_mu);
          add_pair(p->key_pairs, "MarketLastClearing", g_last_clearing);
        }
        add_pair(p->key_pairs, "MarketRounds", std::to_string(g_market_rounds.load()));
        add_pair(p->key_pairs, "MarketMatched", std::to_string(g_market_matched.load()));
        add_pair(p->key_pairs, "MarketJobUpdates", std::to_string(g_market_updates.load()));
        add_pair(p->key_pairs, "MarketRoundBids", std::to_string(g_round_bids.load()));
        add_pair(p->key_pairs, "MarketRoundReadUsec", std::to_string(g_round_read_usec.load()));
        add_pair(p->key_pairs, "MarketRoundClearUsec", std::to_string(g_round_clear_usec.load()));
        add_pair(p->key_pairs, "MarketRoundUpdateUsec", std::to_string(g_round_update_usec.load()));
        add_pair(p->key_pairs, "MarketRoundTotalUsec", std::to_string(g_round_total_usec.load()));
        add_pair(p->key_pairs, "MarketRoundsRecorded",
                 g_market_dir.empty() ? std::string("off (JobCompType is not jobcomp/planc)")
                                      : std::to_string(g_rounds_recorded.load()));
        add_pair(p->key_pairs, "MarketRoundsWaiting", std::to_string(g_rounds_waiting.load()));
        add_pair(p->key_pairs, "MarketRoundsRejected", std::to_string(g_rounds_rejected.load()));
      }
    }
    add_pair(p->key_pairs, "Infusion", cfg.infusion.enabled ? "yes" : "no");
    if (cfg.infusion.enabled) {
      planc::MutexLock l(g_infusion_mu);
      const InfusionShown& is = g_infusion_shown;
      add_pair(p->key_pairs, "InfusionIdle", is.idle);
      add_pair(p->key_pairs, "InfusionReplicas", is.replicas.empty() ? "none" : is.replicas);
      add_pair(p->key_pairs, "InfusionLastOperation", is.last_operation);
      add_pair(p->key_pairs, "InfusionNextAllowed",
               is.next_allowed ? planc::format_utc(is.next_allowed) : "now");
      add_pair(p->key_pairs, "InfusionOperationsLastHour",
               std::to_string(is.ops_last_hour) + " of at most " +
                   std::to_string(cfg.infusion.settings.max_ops_per_hour));
      add_pair(p->key_pairs, "InfusionFailures", std::to_string(g_infusion_failures.load()));
      add_pair(p->key_pairs, "InfusionPasses", std::to_string(g_infusion_passes.load()));
      add_pair(p->key_pairs, "InfusionPassTotalUsec", std::to_string(g_infusion_pass_usec.load()));
    }
    add_pair(p->key_pairs, "StarvationUpgrades", std::to_string(g_upgrades.load()));
    add_pair(p->key_pairs, "StarvationReverts", std::to_string(g_reverts.load()));
    add_pair(p->key_pairs, "ScanCount", std::to_string(g_scans.load()));
    add_pair(p->key_pairs, "ScanLastPendingJobs", std::to_string(g_last_scan_jobs.load()));
    add_pair(p->key_pairs, "ScanLastUsec", std::to_string(g_last_scan_usec.load()));
    add_pair(p->key_pairs, "ScanMaxUsec", std::to_string(g_max_scan_usec.load()));
    add_pair(p->key_pairs, "ScanTotalUsec", std::to_string(g_total_scan_usec.load()));
    add_pair(p->key_pairs, "SampleCount", std::to_string(g_samples.load()));
    add_pair(p->key_pairs, "SampleLockTotalUsec", std::to_string(g_sample_lock_usec.load()));
    add_pair(p->key_pairs, "SampleLockMaxUsec", std::to_string(g_sample_max_lock_usec.load()));
    add_pair(p->key_pairs, "SampleJobsVisitedTotal", std::to_string(g_sample_visited.load()));
    add_pair(p->key_pairs, "SampleWalks", std::to_string(g_sample_walks.load()));
    add_pair(p->key_pairs, "SampleWatchedJobs", std::to_string(g_watched.load()));
    add_pair(p->key_pairs, "SampleLockWaitTotalUsec",
             std::to_string(g_sample_lock_wait_usec.load()));
    add_pair(p->key_pairs, "MetricsWriteTotalUsec", std::to_string(g_metrics_write_usec.load()));
    add_pair(p->key_pairs, "RunJournal",
             g_journal_dir.empty() ? "off (see slurmctld's log)" : g_journal_dir);
    add_pair(p->key_pairs, "RunJournalRecords", std::to_string(g_journal_records.load()));
    add_pair(p->key_pairs, "RunJournalDropped", std::to_string(g_journal_dropped.load()));
    add_pair(p->key_pairs, "RunJournalMaxUsec", std::to_string(g_journal_max_usec.load()));
    add_pair(p->key_pairs, "RunJournalOver1ms", std::to_string(g_journal_slow.load()));
    add_pair(p->key_pairs, "RunJournalTotalUsec", std::to_string(g_journal_total_usec.load()));
  } catch (const std::exception& e) {
    error("%s: get_config: %s", plugin_type, e.what());
  }
}
