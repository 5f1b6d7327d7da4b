// job_submit/planc: Plan C tiers at submit time.
//
// Maps the tier name a user typed in --qos to its canonical QoS, fills in
// the association's default tier, refuses unknown tiers and tiers the
// account may not use with a message sbatch prints, and makes preemptible
// jobs requeueable.  All decisions are in common/submit_policy.*.
//
// slurmctld calls job_submit/job_modify with its config, job, node and
// partition read locks held and serialises them (job_submit.c's context
// lock); each call takes the configuration in force, an immutable
// snapshot.  Slurm 22.05 does not reload job_submit plugins on `scontrol
// reconfigure`, so a small thread of the plugin's own watches planc.conf
// and swaps in a new snapshot when it changes (plugins/config_watch.h).
#include "plugins/slurm_compat.h"

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "common/job_marks.h"
#include "common/market.h"
#include "common/preempt_policy.h"
#include "common/spot_cap.h"
#include "common/submit_policy.h"
#include "plugins/mutex.h"
#include "plugins/planc_shared.h"
#include "plugins/slurm_adapter_submit.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] = "Plan C tiers at submit time";
PLANC_EXPORT const char plugin_type[] = "job_submit/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

// What the entry points and the watcher thread share.  On the heap, made by
// init() and deleted by fini() once the watcher has stopped: slurmctld
// 22.05 calls job_submit plugins' fini() only when built with
// MEMORY_LEAK_DEBUG (controller.c), so at a normal exit the watcher still
// waits on it while static objects are destroyed; never destroying it keeps
// it valid to the end.
struct Shared {
  planc::Mutex mu;
  std::shared_ptr<const planc::PlancConfig> config GUARDED_BY(mu);
  std::condition_variable_any cv;
  bool stop GUARDED_BY(mu) = false;
};
Shared* g = nullptr;
std::thread* g_worker = nullptr;  // never destroyed at exit: see plugins/worker_thread.h

std::shared_ptr<const planc::PlancConfig> config() {
  planc::MutexLock l(g->mu);
  return g->config;
}

void note_cap_routing(const planc::PlancConfig& cfg) {
  if (cfg.guaranteed_partition.empty())
    info(
        "%s: GuaranteedPartition is not set: P0/P1 jobs are not routed and the %u%% "
        "guaranteed GPU cap is NOT enforced",
        plugin_type, cfg.guaranteed_cap_percent);
}

void watch_config(Shared* sh, planc::ConfigWatch watch) {
  Shared& s = *sh;
  planc::MutexLock l(s.mu);
  while (!s.stop) {
    auto until = std::chrono::steady_clock::now() + planc::kConfigCheckInterval;
    while (!s.stop && s.cv.wait_until(l, until) == std::cv_status::no_timeout) {
    }
    if (s.stop) break;
    l.unlock();
    auto cfg = planc::slurm::reload_plugin_config(plugin_type, &watch);
    if (cfg) note_cap_routing(*cfg);
    l.lock();
    if (cfg) s.config = std::move(cfg);
  }
}

// slurmctld/planc's spot-use query (plugins/planc_shared.h).  It loads after
// this plugin, so it is looked up on first need, again at most every 10 s
// while missing.  job_submit calls are serialised by slurmctld.
planc_spot_used_fn g_spot_used = nullptr;
planc_spot_refused_fn g_spot_refused = nullptr;  // found with g_spot_used
time_t g_spot_lookup_at = 0;
bool g_spot_warned = false;

int refuse(const planc::SubmitDecision& d, char** err_msg) {
  if (err_msg) *err_msg = xstrdup(d.message.c_str());
  debug("%s: refused: %s", plugin_type, d.message.c_str());
  switch (d.error) {
    case planc::SubmitError::kWrongPartition:
      return ESLURM_INVALID_PARTITION_NAME;
    case planc::SubmitError::kSpotCap:
      return ESLURM_ACCOUNTING_POLICY;
    case planc::SubmitError::kFreeAttempt:
    case planc::SubmitError::kMarketHeld:
      return ESLURM_ACCESS_DENIED;
    default:
      return ESLURM_INVALID_QOS;
  }
}

// The daily spot cap: a job for a capped tier whose account has used up
// today's card-hours is refused.  Without slurmctld/planc nothing is
// counted, so nothing is refused (logged once).
void check_spot_cap(const planc::PlancConfig& cfg, const planc::SubmitRequest& req,
                    planc::SubmitDecision* d) {
  const std::string& account = req.account;
  if (!d->ok() || !d->tier || !planc::spot_capped(cfg, d->tier->id) || account.empty()) return;
  time_t now = time(nullptr);
  if (!g_spot_used && now - g_spot_lookup_at >= 10) {
    g_spot_lookup_at = now;
    g_spot_used = planc::find_spot_used();
    g_spot_refused = planc::find_spot_refused();
  }
  uint64_t used = 0;
  if (!g_spot_used || !g_spot_used(account.c_str(), planc::tier_index(d->tier->id), now, &used)) {
    if (!g_spot_warned)
      error(
          "%s: SpotCap%s is set but slurmctld/planc is not running (SlurmctldPlugstack=planc): "
          "the daily spot cap is NOT enforced",
          plugin_type, d->tier->label.c_str());
    g_spot_warned = true;
    return;
  }
  planc::apply_spot_cap(cfg, planc::entitlement_of(req), used, now, d);
  if (d->error == planc::SubmitError::kSpotCap && g_spot_refused)
    g_spot_refused(planc::tier_index(d->tier->id));
}

// The P2 market (spank/planc's options, Market=yes): the options checked
// against the job's tier, the market's prices and the account's guaranteed
// tiers; a P2 job in an open market is held for the next round with the
// market's mark in its AdminComment (common/market.h), and told so.
planc_market_floor_fn g_market_floor = nullptr;
time_t g_market_lookup_at = 0;

struct MarketAnswer {
  bool ok = true;
  std::string error;     // refused: for the user
  std::string note;      // accepted: for the user
  std::string mark;      // the market's mark for the job's AdminComment
  bool hold = false;     // held for the next round
  std::string fallback;  // the spot-fallback mark (common/job_marks.h)
};

MarketAnswer check_market(const planc::PlancConfig& cfg, const planc::SubmitRequest& req,
                          const planc::SubmitDecision& d, const planc::slurm::MarketOptions& opt) {
  MarketAnswer a;
  if (!d.tier) return a;
  const bool p2 = d.tier->id == planc::TierId::kP2;
  if (!opt.any && !(cfg.market.enabled && p2)) return a;
  auto refuse = [&](std::string why) {
    a.ok = false;
    a.error = std::move(why);
    return a;
  };
  const time_t now = time(nullptr);
  planc::MarketRequest r;
  r.bid_text = opt.bid.value_or("");
  if (opt.bid && r.bid_text.empty()) r.bid_text = " ";  // --bid= : not a price
  r.lock_price = opt.lock_price;
  r.begin = opt.begin;
  r.spot_fallback = opt.spot_fallback;
  r.tier = d.tier->label;
  r.currency = cfg.prices.currency;
  auto list = cfg.prices.card_hour.find(opt.gpu_type);
  r.list = list != cfg.prices.card_hour.end() ? list->second : cfg.prices.default_card_hour;
  r.floor = planc::market_floor(cfg.prices.card_hour_floor, r.list, 0, cfg.market);
  if (!g_market_floor && now - g_market_lookup_at >= 10) {
    g_market_lookup_at = now;
    g_market_floor = planc::find_market_floor();
  }
  int64_t floor = 0, next_round = 0;
  const bool running = g_market_floor && g_market_floor(opt.gpu_type.c_str(), &floor, &next_round);
  if (running) r.floor = floor;
  const planc::Entitlement ent = planc::entitlement_of(req);
  const planc::Tier* fallback = planc::advised_tier(cfg, d.tier->id, ent);
  r.has_guaranteed_alternative = fallback && (!ent.known || ent.allows(*fallback));
  r.account = req.account;
  planc::MarketCheck c = planc::check_market_request(r, now, cfg.market);
  if (!c.ok) return refuse(c.error);
  // --spot-fallback needs no market: preempt/planc acts on its mark.
  if (opt.spot_fallback) {
    a.fallback = planc::fallback_mark(cfg, fallback->id);
    a.note = "--spot-fallback: a preempted run of this job comes back in " + fallback->label +
             " (" + fallback->qos + "), billed at " + fallback->label + "'s price from then on";
  }
  const char* option = opt.lock_price ? "--lock-price" : opt.bid ? "--bid" : nullptr;
  if (!option && !(cfg.market.enabled && p2)) return a;
  if (!cfg.market.enabled)
    return refuse("the P2 spot market is not open on this cluster (planc.conf Market=no): leave " +
                  std::string(option) + " out, and the job takes the P2 price");
  if (!running) {
    if (option)
      return refuse(
          "the P2 spot market is not running: slurmctld/planc, which holds its rounds, is not "
          "loaded (SlurmctldPlugstack=planc); leave " +
          std::string(option) + " out, and the job takes the P2 price");
    return a;  // no rounds: the job is not held
  }
  auto join = [&](std::string text) { a.note = a.note.empty() ? text : text + "; " + a.note; };
  if (opt.lock_price) {
    a.mark = planc::market_mark_locked(r.floor, cfg.prices.currency, now);
    join("P2 spot market: price locked at " + planc::format_micros(r.floor) + " " +
         cfg.prices.currency + "/card-hour (the floor now) for its runs from " +
         planc::format_utc(opt.begin) +
         "; no round: the job starts at its --begin time as P2 "
         "capacity allows");
    return a;
  }
  a.mark = planc::market_mark_waiting(c.bid, cfg.prices.currency, next_round);
  a.hold = true;
  std::string text =
      "P2 spot market: " +
      (c.bid
           ? "your bid " + planc::format_micros(*c.bid) + " " + cfg.prices.currency + "/card-hour"
           : "no bid: the round's price, at most the list price " + planc::format_micros(r.list)) +
      "; the job waits for the round at " + planc::format_utc(next_round) + " (floor now " +
      planc::format_micros(r.floor) + ")";
  if (!c.note.empty()) text += "; " + c.note;
  join(std::move(text));
  return a;
}

int internal_error(const char* where, const char* what, char** err_msg) {
  error("%s: internal error in %s: %s", plugin_type, where, what);
  if (err_msg)
    *err_msg = xstrdup(
        "job_submit/planc internal error; the job was not changed. "
        "Please report it to your administrator (see slurmctld log)");
  return SLURM_ERROR;
}
}  // namespace

PLANC_EXPORT int init(void) {
  try {
    auto cfg = planc::slurm::load_plugin_config(plugin_type);
    if (!cfg) return SLURM_ERROR;
    note_cap_routing(*cfg);
    g = new Shared;
    {
      planc::MutexLock l(g->mu);
      g->config = cfg;
    }
    g_worker = planc::start_worker("planc_submit", watch_config, g,
                                   planc::ConfigWatch(planc::slurm::planc_conf_file(), cfg));
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: init failed: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

PLANC_EXPORT int fini(void) {
  if (!g) return SLURM_SUCCESS;
  {
    planc::MutexLock l(g->mu);
    g->stop = true;
  }
  g->cv.notify_all();
  planc::join_worker(g_worker);
  delete g;
  g = nullptr;
  return SLURM_SUCCESS;
}

PLANC_EXPORT int job_submit(job_desc_msg_t* job_desc, uint32_t submit_uid, char** err_msg) {
  (void)submit_uid;  // the job's owner (job_desc->user_id) decides entitlement
  try {
    const auto snapshot = config();
    const planc::PlancConfig& cfg = *snapshot;
    planc::SubmitRequest req = planc::slurm::submit_request(cfg, job_desc);
    planc::SubmitDecision d = planc::decide_submit(cfg, req);
    check_spot_cap(cfg, req, &d);
    if (!d.ok()) return refuse(d, err_msg);
    MarketAnswer m = check_market(cfg, req, d, planc::slurm::market_options(job_desc));
    if (!m.ok) {
      if (err_msg) *err_msg = xstrdup(m.error.c_str());
      debug("%s: refused: %s", plugin_type, m.error.c_str());
      return ESLURM_INVALID_QOS;
    }
    planc::slurm::apply_decision(d, job_desc);
    if (!m.mark.empty()) planc::slurm::mark_for_market(m.mark, m.hold, job_desc);
    if (!m.fallback.empty()) planc::slurm::mark_for_fallback(m.fallback, job_desc);
    if (!m.note.empty() && err_msg) *err_msg = xstrdup(m.note.c_str());
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    return internal_error("job_submit", e.what(), err_msg);
  } catch (...) {
    return internal_error("job_submit", "unknown exception", err_msg);
  }
}

#if PLANC_JOB_MODIFY_HAS_ERR_MSG
PLANC_EXPORT int job_modify(job_desc_msg_t* job_desc, job_record_t* job_ptr, uint32_t submit_uid,
                            char** err_msg) {
#else
PLANC_EXPORT int job_modify(job_desc_msg_t* job_desc, job_record_t* job_ptr, uint32_t submit_uid) {
  char** err_msg = nullptr;
#endif
  try {
    const auto snapshot = config();
    const planc::PlancConfig& cfg = *snapshot;
    if (cfg.market.enabled) {
      if (auto comment = planc::slurm::owner_release_comment(job_desc, job_ptr, submit_uid)) {
        if (auto why = planc::market_release_refusal(*comment, job_ptr->job_id,
                                                     cfg.market.interval_seconds)) {
          info("%s: release of %pJ by uid %u refused: %s", plugin_type, job_ptr, submit_uid,
               why->c_str());
          planc::SubmitDecision d;
          d.error = planc::SubmitError::kMarketHeld;
          d.message = *why;
          return refuse(d, err_msg);
        }
      }
    }
    planc::SubmitRequest req = planc::slurm::modify_request(cfg, job_desc, job_ptr, submit_uid);
    planc::SubmitDecision d = planc::decide_modify(cfg, req);
    if (!req.privileged && !req.requested_qos.empty()) check_spot_cap(cfg, req, &d);
    if (!d.ok()) {
      // 22.05 cannot pass the text to scontrol; keep it in the log at info
      // so an admin asked "why was my update refused" can find it.
      info("%s: update of %pJ by uid %u refused: %s", plugin_type, job_ptr, submit_uid,
           d.message.c_str());
      return refuse(d, err_msg);
    }
    planc::slurm::apply_decision(d, job_desc);
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    return internal_error("job_modify", e.what(), err_msg);
  } catch (...) {
    return internal_error("job_modify", "unknown exception", err_msg);
  }
}
