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
// Capacity infusion (ctld_infusion.cc) sizes the serving pools, and the
// market (ctld_market.cc) clears the P2 bids each round.
//
// One worker thread.  It never holds a slurmctld lock across I/O: a scan
// takes the job read lock, collects the facts and releases it; each change
// is then made through slurmctld's own update_job() under the write locks an
// update RPC takes (as slurmctld/nonstop does), one job per lock hold.
// The state file is written outside every lock.
//
// This file holds Slurm's entry points, the planc_*_v1 calls and the
// worker loop; the state they share and the file of each role are in
// plugins/ctld_state.h.
#include "plugins/slurm_compat.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <thread>

#include "common/preempt_policy.h"  // format_utc
#include "common/spot_cap.h"
#include "common/state_file.h"
#include "plugins/ctld_state.h"
#include "plugins/planc_shared.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] =
    "Plan C controller: starvation upgrade, daily spot cap, run-start journal";
PLANC_EXPORT const char plugin_type[] = "slurmctld/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

using planc::TierId;
using planc::ctld::Controller;

constexpr const char* kStateFile = "planc_spot_state";
// How often running spot jobs are sampled.  Between samples job_submit's
// view is extrapolated exactly; only a job that ends is counted to the
// last sample when Slurm forgets its end time (requeue).
constexpr int kSpotSampleSeconds = 5;
// A sample asked for between two samples (a notice, a guaranteed
// submission) comes at most this soon after the last one.
constexpr auto kMinSampleGap = std::chrono::milliseconds(200);
// job_submit/planc asks for a sample before Slurm has made the job (the
// submit hook runs under a read lock, the job is made under the write lock
// that follows): a guaranteed submission is sampled at once and again this
// long after, when the job exists.
constexpr auto kSubmitFollowUp = std::chrono::seconds(1);
using Clock = std::chrono::steady_clock;

// The controller (plugins/ctld_state.h): made by the first init(), never
// freed.
std::atomic<Controller*> g_ctl{nullptr};

}  // namespace

namespace planc::ctld {

Controller* controller() { return g_ctl.load(std::memory_order_acquire); }

namespace {

// A changed planc.conf applies from the next sample and scan on.  The spot
// day (SpotCapResetTime, SpotCapTimeZone, SpotCapDayLength) is the one
// the counters were started with until slurmctld restarts.
// Returns true when a new planc.conf is in force.
bool reload(Controller& c, planc::ConfigWatch* watch) {
  auto cfg = planc::slurm::reload_plugin_config(plugin_type, watch);
  if (!cfg) return false;
  c.tiers = std::make_unique<planc::QosTierCache>(cfg->tiers);
  c.config = cfg;
  planc::MutexLock l(c.shown_mu);
  c.shown = cfg;
  return true;
}

// The earliest moment the worker must act on its own: the next sample, the
// next scan, a drain grace that ends (its SIGKILL is due to the second).
Clock::time_point next_wake(const Controller& c, Clock::time_point next_scan,
                            Clock::time_point next_sample,
                            std::optional<Clock::time_point> follow_up) {
  auto at = std::min(next_scan, next_sample);
  if (follow_up) at = std::min(at, *follow_up);
  if (auto due = infusion_next_kill(c)) {
    const auto in = std::chrono::seconds(std::max<time_t>(0, *due - time(nullptr)));
    at = std::min(at, Clock::now() + in);
  }
  return at;
}

void worker(Controller* cp, planc::ConfigWatch watch) {
  Controller& c = *cp;
  auto next_scan = Clock::now() + std::chrono::seconds(c.config->starvation_interval_seconds);
  auto next_sample = Clock::now();
  auto last_sample = Clock::now() - std::chrono::seconds(kSpotSampleSeconds);
  int gpu_pos = -1;
  std::string written;
  bool hook_warned = false;
  bool reloaded_since_sample = false;
  std::optional<Clock::time_point> follow_up;
  planc::MutexLock l(c.mu);
  while (!c.stop) {
    while (!c.stop && c.notices.empty() && !c.sample_now &&
           c.cv.wait_until(l, next_wake(c, next_scan, next_sample, follow_up)) ==
               std::cv_status::no_timeout) {
    }
    if (c.stop) break;
    // What job_submit/planc told: the market looks at those jobs, and a
    // guaranteed submission is sampled now (infusion gives GPUs back at
    // submission, not at the next sample); at most every kMinSampleGap.
    std::vector<uint32_t> notices;
    notices.swap(c.notices);
    const bool asked = c.sample_now || !notices.empty();
    if (c.sample_now) follow_up = Clock::now() + kSubmitFollowUp;
    c.sample_now = false;
    l.unlock();
    try {
      const bool reloaded = reload(c, &watch);
      // A reload between two samples is the next sample's news: the
      // market and infusion act on settings only at a sample (the
      // market's floors and the controller's limits were left as they
      // were when planc.conf changed between samples).
      reloaded_since_sample = reloaded_since_sample || reloaded;
      const planc::PlancConfig& cfg = *c.config;
      auto now = Clock::now();
      // A shorter StarvationInterval applies now, not after the old one;
      // the jobs' due times were worked out with the old thresholds, so
      // the next scan walks every job.
      if (reloaded) {
        next_scan =
            std::min(next_scan, now + std::chrono::seconds(cfg.starvation_interval_seconds));
        c.starving.forget();
      }
      if (asked) next_sample = std::min(next_sample, last_sample + kMinSampleGap);
      if (follow_up && now >= *follow_up) {
        next_sample = std::min(next_sample, now);
        follow_up.reset();
      }
      const bool drain_due = infusion_next_kill(c) && *infusion_next_kill(c) <= time(nullptr);
      if (now >= next_sample || drain_due) {
        if (now >= next_sample) {
          next_sample = now + std::chrono::seconds(kSpotSampleSeconds);
          last_sample = now;
        }
        journal_tick(c, &hook_warned);
        planc::PoolUsage pool;
        planc::slurm::InfusionJobs infusion_jobs;
        std::vector<uint32_t> market_ids;
        std::string text = spot_sample(c, &gpu_pos, written, &pool, &infusion_jobs, &market_ids);
        // The one idle meter: GPUs neither allocated nor promised to a
        // replica Slurm has not started yet.
        uint64_t busy = pool.allocated_total();
        for (const auto& r : infusion_jobs.replicas)
          if (!r.running) busy += r.gpus;
        c.idle.keep_for(cfg.market.interval_seconds + kSpotSampleSeconds);
        c.idle.observe(time(nullptr),
                       static_cast<uint32_t>(pool.pool_gpus > busy ? pool.pool_gpus - busy : 0),
                       static_cast<uint32_t>(pool.pool_gpus));
        // The market first: it opens (its floor keeper) before infusion
        // may ask it for a round, which comes at the next sample.
        market_ids.insert(market_ids.end(), notices.begin(), notices.end());
        notices.clear();
        market_tick(c, cfg, pool, reloaded_since_sample, gpu_pos, std::move(market_ids));
        infusion_tick(c, cfg, pool, infusion_jobs, reloaded_since_sample, follow_up.has_value());
        reloaded_since_sample = false;
        write_metrics(c, pool, watch);
        if (!text.empty()) {
          if (auto err = planc::write_file_atomically(c.state_path, text))
            error("%s: %s", plugin_type, err->c_str());
          else
            written = std::move(text);
        }
      }
      if (now >= next_scan) {
        next_scan = now + std::chrono::seconds(cfg.starvation_interval_seconds);
        starvation_scan(c);
      }
    } catch (const std::exception& e) {
      error("%s: worker: %s", plugin_type, e.what());
    }
    l.lock();
    // Told between two samples but not sampled yet (the gap): kept.
    c.notices.insert(c.notices.end(), notices.begin(), notices.end());
    if (!notices.empty()) {
      // Wait for the gap, not for a wake-up that already came.
      l.unlock();
      std::this_thread::sleep_until(last_sample + kMinSampleGap);
      l.lock();
    }
  }
}

}  // namespace
}  // namespace planc::ctld

PLANC_EXPORT int planc_spot_used_v1(const char* account, int tier, int64_t now, uint64_t* used) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !cp->running.load() || !account || tier < 0 || tier >= planc::kTierCount || !used)
    return 0;
  Controller& c = *cp;
  try {
    std::shared_ptr<const planc::SpotUsage> u;
    {
      planc::MutexLock l(c.usage_mu);
      u = c.usage;
    }
    if (!u) return 0;
    *used = u->used(account, static_cast<TierId>(tier), static_cast<time_t>(now));
    return 1;
  } catch (...) {
    return 0;
  }
}

PLANC_EXPORT int planc_market_floor_v1(const char* gpu_type, int64_t* floor, int64_t* next_round) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !cp->running.load() || !floor || !next_round) return 0;
  try {
    auto f = planc::ctld::market_floors(*cp);
    if (!f) return 0;
    auto it = f->by_type.find(planc::ascii_lower(gpu_type ? gpu_type : ""));
    *floor = it != f->by_type.end() ? it->second : f->default_floor;
    *next_round = f->next_round;
    return 1;
  } catch (...) {
    return 0;
  }
}

PLANC_EXPORT void planc_market_notice_v1(uint32_t job_id) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !cp->running.load()) return;
  {
    planc::MutexLock l(cp->mu);
    cp->notices.push_back(job_id);
  }
  cp->cv.notify_one();
}

PLANC_EXPORT void planc_sample_now_v1(void) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !cp->running.load()) return;
  {
    planc::MutexLock l(cp->mu);
    cp->sample_now = true;
  }
  cp->cv.notify_one();
}

PLANC_EXPORT int planc_reclaiming_for_v1(uint32_t job_id) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !cp->any_reclaim.load(std::memory_order_relaxed)) return 0;
  if (!job_id) return 1;
  return planc::ctld::reclaiming_for(*cp, job_id, time(nullptr)) ? 1 : 0;
}

PLANC_EXPORT int64_t planc_p3_running_v1(void) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !cp->running.load()) return -1;
  return cp->p3_running.load(std::memory_order_relaxed);
}

PLANC_EXPORT void planc_market_run_end_v1(void* record) {
  Controller* cp = planc::ctld::controller();
  if (!cp || !record) return;
  try {
    planc::ctld::market_on_run_end(*cp, static_cast<job_record_t*>(record));
  } catch (const std::exception& e) {
    error("%s: market: run end: %s", plugin_type, e.what());
  }
}

PLANC_EXPORT void planc_spot_refused_v1(int tier) {
  // Counted once init() has made the controller: a refusal needs the spot
  // usage planc_spot_used_v1 gives only after init().
  Controller* cp = planc::ctld::controller();
  if (cp && tier >= 0 && tier < planc::kTierCount) cp->stats.spot_refusals[tier]++;
}

// slurmctld calls this plugin's init() when it takes control (at its start
// as the primary, or a backup's takeover) and fini() when it gives control
// up or stops: preempt/planc, loaded in a backup from its start, learns it
// here (plugins/planc_shared.h).
namespace {
void tell_preempt(bool in_control) {
  if (auto control = planc::find_preempt_control()) control(in_control ? 1 : 0);
}
}  // namespace

PLANC_EXPORT int init(void) {
  tell_preempt(true);
  try {
    // Made by the first init(); a later one (slurmctld the primary again)
    // finds it as it was left (plugins/ctld_state.h).
    Controller* cp = g_ctl.load();
    if (!cp) {
      cp = new Controller;
      g_ctl.store(cp);
    }
    Controller& c = *cp;
    c.config = planc::slurm::load_plugin_config(plugin_type);
    if (!c.config) return SLURM_ERROR;
    c.state_path = planc::slurm::state_file_path(kStateFile);
    c.metrics_path = planc::slurm::state_file_path("planc_metrics_slurmctld");
    c.tiers = std::make_unique<planc::QosTierCache>(c.config->tiers);
    {
      planc::MutexLock l(c.shown_mu);
      c.shown = c.config;
    }
    c.ledger = planc::ctld::load_spot_state(c, *c.config);
    planc::ctld::publish_usage(c);
    planc::ctld::start_journal(c);
    planc::ctld::start_recorder(c);
    {
      planc::MutexLock l(c.mu);
      c.stop = false;
    }
    c.worker = planc::start_worker("planc_ctld", planc::ctld::worker, &c,
                                   planc::ConfigWatch(planc::slurm::planc_conf_file(), c.config));
    c.running = true;
    verbose(
        "%s loaded: starvation threshold %u s, checked every %u s, at most %u a time; "
        "spot caps P2 %s, P3 %s, day starts %s",
        plugin_type, c.config->starvation_threshold_seconds, c.config->starvation_interval_seconds,
        c.config->starvation_max_per_interval,
        planc::describe_spot_cap(*c.config, TierId::kP2).c_str(),
        planc::describe_spot_cap(*c.config, TierId::kP3).c_str(),
        planc::describe_spot_day(*c.config).c_str());
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: init failed: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

PLANC_EXPORT int fini(void) {
  Controller* cp = g_ctl.load();
  if (!cp) return SLURM_SUCCESS;  // init() never ran
  Controller& c = *cp;
  c.running = false;
  try {
    {
      planc::MutexLock l(c.mu);
      c.stop = true;
    }
    c.cv.notify_all();
    planc::join_worker(c.worker);
    planc::ctld::stop_recorder(c);
    planc::ctld::stop_journal(c);
    if (c.ledger) {
      if (auto err = planc::write_file_atomically(c.state_path, c.ledger->serialize()))
        error("%s: %s", plugin_type, err->c_str());
    }
  } catch (const std::exception& e) {
    error("%s: fini: %s", plugin_type, e.what());
  }
  {
    planc::MutexLock l(c.usage_mu);
    c.usage.reset();
  }
  c.ledger.reset();
  c.tiers.reset();
  c.config.reset();
  {
    planc::MutexLock l(c.shown_mu);
    c.shown.reset();
  }
  tell_preempt(false);
  return SLURM_SUCCESS;
}

PLANC_EXPORT void slurmctld_plugstack_p_get_config(config_plugin_params_t* p) {
  try {
    if (Controller* c = planc::ctld::controller()) planc::ctld::show_config(*c, p);
  } catch (const std::exception& e) {
    error("%s: get_config: %s", plugin_type, e.what());
  }
}
