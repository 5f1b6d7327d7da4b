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
#include "common/market_life.h"
#include "common/preempt_policy.h"
#include "common/spot_cap.h"
#include "common/submit_policy.h"
#include "plugins/mutex.h"
#include "plugins/planc_shared.h"
#include "plugins/slurm_adapter_market.h"
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
  debug("%s: refused: %s", plugin_type, planc::printable(d.message, 512).c_str());
  switch (d.error) {
    case planc::SubmitError::kWrongPartition:
      return ESLURM_INVALID_PARTITION_NAME;
    case planc::SubmitError::kSpotCap:
      return ESLURM_ACCOUNTING_POLICY;
    case planc::SubmitError::kFreeAttempt:
    case planc::SubmitError::kMarketHeld:
    case planc::SubmitError::kLowPriority:
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
// tiers; a P2 job in an open market is held for the next round with its
// market life in its AdminComment (common/market_life.h), and told so.
// slurmctld/planc's calls are looked up on first need, again at most every
// 10 s while missing.
planc_market_floor_fn g_market_floor = nullptr;
planc_market_notice_fn g_market_notice = nullptr;
planc_sample_now_fn g_sample_now = nullptr;
time_t g_market_lookup_at = 0;

// Whether slurmctld/planc, which holds the market's rounds, is loaded.
bool ctld_loaded(time_t now) {
  if (!g_market_floor && now - g_market_lookup_at >= 10) {
    g_market_lookup_at = now;
    g_market_floor = planc::find_market_floor();
    g_market_notice = planc::find_market_notice();
    g_sample_now = planc::find_sample_now();
  }
  return g_market_floor != nullptr;
}

struct MarketAnswer {
  bool ok = true;
  std::string error;                      // refused: for the user
  std::string note;                       // accepted: for the user
  std::optional<planc::MarketLife> life;  // the market life for the job's AdminComment
  bool hold = false;                      // held for the next round
  std::string fallback;                   // the spot-fallback mark (common/job_marks.h)
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
  r.market_open = cfg.market.enabled;
  r.array = opt.array;
  r.tier = d.tier->label;
  r.currency = cfg.prices.currency;
  auto list = cfg.prices.card_hour.find(opt.gpu_type);
  r.list = list != cfg.prices.card_hour.end() ? list->second : cfg.prices.default_card_hour;
  // Until slurmctld/planc's first sample the floor is the one at no
  // vacancy; the round checks the bid against the floor of its time.
  r.floor = planc::market_floor(cfg.prices.card_hour_floor, r.list, 0, cfg.market);
  const bool loaded = ctld_loaded(now);
  int64_t floor = 0, next_round = 0;
  if (loaded && g_market_floor(opt.gpu_type.c_str(), &floor, &next_round))
    r.floor = floor;
  else
    next_round = planc::next_round_after(now, cfg.market.interval_seconds);
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
  // An open market nobody runs would price nothing: a P2 job must not
  // pass unpriced.
  if (!loaded)
    return refuse(
        "the P2 spot market is open (planc.conf Market=yes) but slurmctld/planc, which holds its "
        "rounds, is not loaded (SlurmctldPlugstack=planc): a P2 job cannot be priced; ask your "
        "administrator, or submit to another tier");
  auto join = [&](std::string text) { a.note = a.note.empty() ? text : text + "; " + a.note; };
  if (opt.lock_price) {
    planc::MarketLife l;
    l.state = planc::MarketState::kLocked;
    l.price = r.floor;
    l.at = now;
    l.begin = opt.begin;
    a.life = l;  // its request is recorded at the market's first look
    join("P2 spot market: price locked at " + planc::format_micros(r.floor) + " " +
         cfg.prices.currency + "/card-hour (the floor now) for its run from " +
         planc::format_utc(opt.begin) +
         "; no round: the job starts at its --begin time as P2 capacity allows");
    return a;
  }
  planc::MarketLife l;
  l.state = planc::MarketState::kWaiting;
  l.reason = planc::MarketReason::kNew;
  l.bid = c.bid;
  l.since = now;
  l.owner_hold = opt.held;  // sbatch -H: out of the rounds until released
  a.life = l;
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
      debug("%s: refused: %s", plugin_type, planc::printable(m.error, 512).c_str());
      return ESLURM_INVALID_QOS;
    }
    planc::slurm::apply_decision(d, job_desc);
    if (m.life) planc::slurm::mark_for_market(*m.life, cfg.prices.currency, m.hold, job_desc);
    // A guaranteed job: capacity infusion may have to give GPUs back for
    // it, at once rather than at the next sample.
    // (Not a replica infusion submits itself: it knows.)
    if (cfg.infusion.enabled && d.tier && !d.tier->preemptible && ctld_loaded(time(nullptr)) &&
        g_sample_now && !planc::slurm::is_replica_submission(job_desc))
      g_sample_now();
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
    planc::SubmitRequest req = planc::slurm::modify_request(cfg, job_desc, job_ptr, submit_uid);
    planc::SubmitDecision d = planc::decide_modify(cfg, req);
    if (!req.privileged && !req.requested_qos.empty()) check_spot_cap(cfg, req, &d);
    if (!d.ok()) {
      // 22.05 cannot pass the text to scontrol; keep it in the log at info
      // so an admin asked "why was my update refused" can find it.
      info("%s: update of %pJ by uid %u refused: %s", plugin_type, job_ptr, submit_uid,
           planc::printable(d.message, 512).c_str());
      return refuse(d, err_msg);
    }
    planc::slurm::apply_decision(d, job_desc);
    if (cfg.market.enabled) {
      // The market's part, with the QoS canonical (common/market_life.h
      // on_update): a hold or a release of a bid, a move into P2, a change
      // of what a win or a lock was for.
      const time_t now = time(nullptr);
      const planc::MarketUpdate u = planc::slurm::market_update(cfg, job_desc, job_ptr, submit_uid);
      if (u.into_market && !ctld_loaded(now)) {
        planc::SubmitDecision r;
        r.error = planc::SubmitError::kMarketHeld;
        r.message =
            "the P2 spot market is open (planc.conf Market=yes) but slurmctld/planc, which holds "
            "its rounds, is not loaded: a job cannot move into P2 unpriced";
        info("%s: update of %pJ by uid %u refused: %s", plugin_type, job_ptr, submit_uid,
             r.message.c_str());
        return refuse(r, err_msg);
      }
      planc::MarketContext ctx;
      ctx.open = true;
      ctx.now = now;
      ctx.interval = cfg.market.interval_seconds;
      ctx.lock_ahead = cfg.market.lock_ahead_seconds;
      const planc::MarketFacts f =
          planc::slurm::market_facts(planc::slurm::job_tier(cfg, job_ptr), job_ptr, -1);
      const planc::MarketUpdateVerdict v =
          planc::on_update(planc::slurm::market_life(job_ptr), f, u, job_ptr->job_id, ctx);
      if (v.refusal) {
        info("%s: update of %pJ by uid %u refused: %s", plugin_type, job_ptr, submit_uid,
             v.refusal->c_str());
        planc::SubmitDecision r;
        r.error = planc::SubmitError::kMarketHeld;
        r.message = *v.refusal;
        return refuse(r, err_msg);
      }
      if (v.step.event != planc::MarketEvent::kNone)
        planc::slurm::set_market_life(job_ptr, v.step.life, cfg.prices.currency);
      planc::slurm::apply_market_verdict(v, job_desc);
      if (v.cancel_release) planc::slurm::take_over_hold(job_ptr);
      if (!v.log.empty())
        info("%s: market: %s (uid %u's update)", plugin_type, v.log.c_str(), submit_uid);
      // The market looks at the job once the update is done.
      if (u.who != planc::MarketUpdate::Who::kMarket && g_market_notice &&
          (v.step.event != planc::MarketEvent::kNone || u.into_market || u.out_of_market ||
           u.shape_changed || u.begin || u.hold || u.release))
        g_market_notice(job_ptr->job_id);
    }
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    return internal_error("job_modify", e.what(), err_msg);
  } catch (...) {
    return internal_error("job_modify", "unknown exception", err_msg);
  }
}
