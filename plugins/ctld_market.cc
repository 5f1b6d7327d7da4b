// slurmctld/planc's P2 market (plugins/ctld_state.h): the floors, set by
// the floor keeper (common/market.h) from the pool each sample; the
// market's look at jobs whose life may have moved (common/market_life.h
// reconcile); and each round's clearing (plan_round).  The decisions are
// the core's; this file reads the jobs under the job read lock, decides
// outside every lock, then changes one job per hold of the update locks,
// deciding again from what the job is then (it may have changed since).
// The worker's, except market_floors() and the hooks at the end.
#include "plugins/ctld_state.h"

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/preempt_policy.h"  // format_utc
#include "plugins/slurm_adapter_market.h"

namespace planc::ctld {
namespace {

using planc::MarketEvent;
using planc::MarketStep;
using planc::TierId;
using Clock = std::chrono::steady_clock;

uint64_t usec_since(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}

planc::MarketContext context(const planc::PlancConfig& cfg, const planc::MarketFloors* floors,
                             time_t now) {
  planc::MarketContext x;
  x.open = cfg.market.enabled;
  x.now = now;
  x.interval = cfg.market.interval_seconds;
  x.lock_ahead = cfg.market.lock_ahead_seconds;
  x.floors = floors;
  x.prices = &cfg.prices;
  x.market = &cfg.market;
  return x;
}

// What the log says of a step: one line per event, the job's new life in
// the words its owner reads.
void log_step(const planc::PlancConfig& cfg, uint32_t job_id, const MarketStep& s) {
  if (s.event == MarketEvent::kNone) return;
  const std::string what =
      s.life ? planc::describe_life(*s.life, cfg.prices.currency, cfg.market.interval_seconds)
             : std::string("it left the market");
  if (s.event == MarketEvent::kLost)
    debug("%s: market: JobId=%u %s: %s", plugin_type, job_id,
          std::string(planc::event_name(s.event)).c_str(), what.c_str());
  else
    info("%s: market: JobId=%u %s: %s", plugin_type, job_id,
         std::string(planc::event_name(s.event)).c_str(), what.c_str());
}

// Writes a step into the job (its life, then its hold: job_submit/planc
// tells the market's own hold and release by the life).  REQUIRES the
// update locks.  Returns false when Slurm refused the hold or release (a
// job just submitted has no database index yet): the job keeps the life it
// had, so the next look takes the same step again, and a hold that stayed
// is never mistaken for its owner's.
bool apply(const planc::PlancConfig& cfg, job_record_t* job, const MarketStep& s) {
  const std::optional<planc::MarketLife> before = planc::slurm::market_life(job);
  planc::slurm::set_market_life(job, s.life, cfg.prices.currency);
  const int rc = planc::slurm::apply_market_hold(job->job_id, s.hold);
  if (rc != SLURM_SUCCESS) {
    planc::slurm::set_market_life(job, before, cfg.prices.currency);
    error("%s: market: JobId=%u: %s failed: %s (tried again at the market's next look)",
          plugin_type, job->job_id, s.hold == planc::HoldAction::kHold ? "hold" : "release",
          slurm_strerror(rc));
    return false;
  }
  return true;
}

// The market's look at `views` (read a moment ago): each job whose life
// moves is changed, one per lock hold, after the decision is made again
// from the job as it is under the write lock.  Keeps c.market_watch: the
// matched winners not started yet (their win expires).
// Returns how many jobs it changed.
size_t settle(Controller& c, const planc::PlancConfig& cfg,
              const std::vector<planc::slurm::MarketJobView>& views,
              const planc::MarketFloors* floors, int gpu_pos) {
  size_t changed = 0;
  const time_t now = time(nullptr);
  const planc::MarketContext ctx = context(cfg, floors, now);
  for (const auto& v : views) {
    const bool pending_win = v.life && v.life->state == planc::MarketState::kMatched &&
                             v.facts.phase == planc::MarketFacts::Phase::kPending;
    MarketStep planned = planc::reconcile(v.life, v.facts, ctx);
    if (planned.event == MarketEvent::kNone && planned.hold == planc::HoldAction::kKeep) {
      if (pending_win)
        c.market_watch.insert(v.job_id);
      else
        c.market_watch.erase(v.job_id);
      continue;
    }
    MarketStep done;
    bool watch = false;
    slurmctld_lock_t locks = planc::slurm::job_update_locks();
    lock_slurmctld(locks);
    if (job_record_t* job = find_job_record(v.job_id)) {
      const planc::MarketFacts f =
          planc::slurm::market_facts(planc::slurm::job_tier(*c.tiers, job), job, gpu_pos);
      done = planc::reconcile(planc::slurm::market_life(job), f, ctx);
      // Refused: looked at again between rounds.
      if ((done.event != MarketEvent::kNone || done.hold != planc::HoldAction::kKeep) &&
          !apply(cfg, job, done)) {
        done = MarketStep{};
        watch = true;
      } else {
        watch = done.life && done.life->state == planc::MarketState::kMatched &&
                f.phase == planc::MarketFacts::Phase::kPending;
      }
    }
    unlock_slurmctld(locks);
    c.stats.market_updates++;
    changed++;
    if (watch)
      c.market_watch.insert(v.job_id);
    else
      c.market_watch.erase(v.job_id);
    log_step(cfg, v.job_id, done);
    if (done.hold == planc::HoldAction::kRelease) queue_job_scheduler();
  }
  return changed;
}

// Reads `ids` (or walks every job of the market when `walk`) under the job
// read lock.
std::vector<planc::slurm::MarketJobView> read_market(Controller& c, int gpu_pos, bool walk,
                                                     const std::vector<uint32_t>& ids) {
  slurmctld_lock_t read = {.job = READ_LOCK};
  lock_slurmctld(read);
  auto views = walk ? planc::slurm::market_walk(*c.tiers, gpu_pos)
                    : planc::slurm::market_views(*c.tiers, gpu_pos, ids);
  unlock_slurmctld(read);
  return views;
}

// What a round offers per GPU type, and what it could reach.
planc::MarketOffer offer_of(const planc::PoolUsage& pool) {
  planc::MarketOffer offer;
  auto held = [](const std::map<std::string, uint64_t>& m, const std::string& type) {
    auto it = m.find(type);
    return static_cast<int64_t>(it != m.end() ? it->second : 0);
  };
  const auto alloc = [&](TierId t) {
    return static_cast<int64_t>(pool.allocated_gpus[planc::tier_index(t)]);
  };
  offer.reachable_total =
      static_cast<int64_t>(pool.pool_gpus) - alloc(TierId::kP0) - alloc(TierId::kP1);
  offer.total = offer.reachable_total - alloc(TierId::kP2);
  for (const auto& [type, gpus] : pool.typed_gpus) {
    offer.by_type[type] = static_cast<int64_t>(gpus) - held(pool.typed_held, type);
    offer.reachable_by_type[type] = static_cast<int64_t>(gpus) - held(pool.typed_guaranteed, type);
  }
  return offer;
}

// A round's clearing: the market's walk (every life looked at and settled
// first), then the bids of the waiting jobs planned in the core
// (plan_round) against what the pool offers less what winners not started
// yet and locks whose --begin has come set aside; winners released at
// their price, losers' lives told why only when the reason changes.
void clear_round(Controller& c, const planc::PlancConfig& cfg, const planc::MarketFloors& floors,
                 const planc::PoolUsage& pool, int gpu_pos) EXCLUDES(c.floors_mu, c.rec_mu) {
  const auto t_start = Clock::now();
  const auto t_read = Clock::now();
  std::vector<planc::slurm::MarketJobView> views = read_market(c, gpu_pos, true, {});
  c.stats.round_read_usec = usec_since(t_read);
  // Read again when settling changed something (rare): the bids are the
  // lives now.
  if (settle(c, cfg, views, &floors, gpu_pos)) views = read_market(c, gpu_pos, true, {});
  // Slurm tests no held job's dependencies: the market tests its bids'.
  for (auto& v : views) {
    if (!v.facts.dependency || !v.life || v.life->state != planc::MarketState::kWaiting) continue;
    slurmctld_lock_t locks = planc::slurm::job_update_locks();
    lock_slurmctld(locks);
    if (job_record_t* job = find_job_record(v.job_id))
      v.facts.dependency = planc::slurm::dependency_waits(job);
    unlock_slurmctld(locks);
  }
  const auto t_clear = Clock::now();
  const time_t now = time(nullptr);
  const planc::MarketContext ctx = context(cfg, &floors, now);
  std::vector<planc::MarketBid> bids;
  std::vector<const planc::slurm::MarketJobView*> bidder;  // bids[i] is bidder[i]'s
  bids.reserve(views.size());
  bidder.reserve(views.size());
  planc::RoundPlanInput in;
  for (const auto& v : views) {
    if (!v.life || !v.facts.in_market_tier || v.facts.free_attempt ||
        v.facts.phase != planc::MarketFacts::Phase::kPending)
      continue;
    const planc::MarketLife& l = *v.life;
    if (l.state == planc::MarketState::kMatched && now <= l.start_by) {
      in.set_aside.push_back({v.facts.shape.gpus, v.facts.shape.gpu_type});
    } else if (l.state == planc::MarketState::kLocked && l.begin <= now &&
               now < l.begin + static_cast<time_t>(cfg.market.interval_seconds)) {
      in.set_aside.push_back({v.facts.shape.gpus, v.facts.shape.gpu_type});
    } else if (l.state == planc::MarketState::kWaiting) {
      planc::MarketBid b;
      b.job_id = v.job_id;
      b.gpus = v.facts.shape.gpus;
      b.bid = l.bid;
      b.submitted = v.submitted;
      b.gpu_type = v.facts.shape.gpu_type;
      b.ineligible = planc::ineligible(l, v.facts, now);
      b.no_room_since = l.reason == planc::MarketReason::kNoRoom ? l.since : 0;
      bids.push_back(std::move(b));
      bidder.push_back(&v);
    }
  }
  in.bids = &bids;
  in.offer = offer_of(pool);
  in.floors = &floors;
  in.prices = &cfg.prices;
  in.now = now;
  in.reserve_after = cfg.market.reserve_after_seconds;
  c.stats.round_prepare_usec = usec_since(t_clear);
  const auto t_plan = Clock::now();
  std::vector<planc::TypedRound> rounds = planc::plan_round(in);
  c.stats.market_rounds++;
  c.stats.round_clear_usec = usec_since(t_plan);
  if (!c.market_dir.empty()) {
    // Names slurmctld had not filled in, resolved here outside the locks,
    // once per uid: a round's thousands of bids come from a few users.
    std::map<uint32_t, std::string> names;
    auto owner = [&](const planc::slurm::MarketJobView* j) {
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
      record_round(c, rec);
    }
  }
  c.stats.round_bids = bids.size();
  uint64_t update_usec = 0;
  uint32_t won = 0, results = 0;
  std::string summary;
  for (const planc::TypedRound& t : rounds) {
    const planc::MarketRound& r = t.round;
    uint32_t won_here = 0;
    for (const planc::BidResult& b : r.results) {
      const planc::slurm::MarketJobView& v = *bidder[b.index];
      const bool win = b.outcome == planc::BidOutcome::kWon;
      const MarketStep planned =
          planc::after_round(*v.life, v.facts, win, b.pays,
                             planc::loss_reason(b.outcome, bids[b.index]), floors.at, ctx);
      if (planned.event == MarketEvent::kNone) continue;  // lost again the same way: the usual
      MarketStep done;
      slurmctld_lock_t locks = planc::slurm::job_update_locks();
      lock_slurmctld(locks);
      const auto tu = Clock::now();
      if (job_record_t* job = find_job_record(v.job_id)) {
        // Still the bid the round saw: waiting, pending, the same run.
        const auto life = planc::slurm::market_life(job);
        const planc::MarketFacts f =
            planc::slurm::market_facts(planc::slurm::job_tier(*c.tiers, job), job, gpu_pos);
        if (life && *life == *v.life && f.phase == planc::MarketFacts::Phase::kPending &&
            f.in_market_tier && f.run == v.facts.run && f.shape == v.facts.shape) {
          done = planc::after_round(*life, f, win, b.pays,
                                    planc::loss_reason(b.outcome, bids[b.index]), floors.at, ctx);
          if (!apply(cfg, job, done)) done = MarketStep{};
        }
      }
      update_usec += usec_since(tu);
      unlock_slurmctld(locks);
      c.stats.market_updates++;
      if (done.event == MarketEvent::kWon) {
        won_here++;
        c.market_watch.insert(v.job_id);
      }
      log_step(cfg, v.job_id, done);
    }
    won += won_here;
    results += static_cast<uint32_t>(r.results.size());
    if (r.results.empty()) continue;
    const std::string type = rounds.size() > 1 ? t.gpu_type + " " : std::string();
    const std::string price =
        r.clearing ? planc::format_micros(*r.clearing) + " " + cfg.prices.currency + "/card-hour"
                   : std::string("no clearing price");
    size_t eligible = 0;
    for (const planc::BidResult& b : r.results)
      eligible += b.outcome != planc::BidOutcome::kNotEligible;
    const std::string not_eligible =
        eligible < r.results.size()
            ? " (" + std::to_string(r.results.size() - eligible) + " more not eligible yet)"
            : std::string();
    info("%s: market round: %s%zu bid(s)%s for %u GPU(s), %u matched%s%s (floor %s)%s", plugin_type,
         type.c_str(), eligible, not_eligible.c_str(), r.capacity, won_here,
         r.clearing ? " at " : ": ", price.c_str(), planc::format_micros(r.floor).c_str(),
         r.held_for ? (", the room held for JobId=" + std::to_string(r.held_for)).c_str() : "");
    if (!summary.empty()) summary += "; ";
    summary += type + price + " at " + planc::format_utc(floors.at) + ", " +
               std::to_string(won_here) + " of " + std::to_string(eligible) + " bid(s) matched";
  }
  c.stats.market_matched += won;
  c.stats.round_update_usec = update_usec;
  c.stats.round_total_usec = usec_since(t_start);
  if (results) {
    planc::MutexLock l(c.floors_mu);
    c.last_clearing = std::move(summary);
  }
  if (won) queue_job_scheduler();
}

}  // namespace

std::shared_ptr<const planc::MarketFloors> market_floors(Controller& c) {
  planc::MutexLock l(c.floors_mu);
  return c.floors;
}

void market_tick(Controller& c, const planc::PlancConfig& cfg, const planc::PoolUsage& pool,
                 bool reloaded, int gpu_pos, std::vector<uint32_t> look_at) {
  const time_t now = time(nullptr);
  const bool opened = !c.market_open || *c.market_open != cfg.market.enabled;
  c.market_open = cfg.market.enabled;
  if (!cfg.market.enabled) {
    if (c.floor_keeper) {
      c.floor_keeper.reset();
      {
        planc::MutexLock l(c.floors_mu);
        c.floors.reset();
      }
      info("%s: the P2 market is closed (Market=no)", plugin_type);
    }
    // Closed (or found closed at a start): every bid it held is released.
    if (opened) settle(c, cfg, read_market(c, gpu_pos, true, {}), nullptr, gpu_pos);
    return;
  }
  bool changed = false;
  if (!c.floor_keeper || reloaded) {
    if (!c.floor_keeper)
      info("%s: the P2 market is open: a round every %u s", plugin_type,
           cfg.market.interval_seconds);
    c.floor_keeper = std::make_unique<planc::FloorKeeper>(now, cfg);
    changed = true;
  }
  const bool round = pool.pool_gpus && c.floor_keeper->sample(now, c.idle, cfg);
  if (round || changed) {
    auto copy = std::make_shared<const planc::MarketFloors>(c.floor_keeper->floors());
    planc::MutexLock l(c.floors_mu);
    c.floors = std::move(copy);
  }
  const planc::MarketFloors& f = c.floor_keeper->floors();
  if (round) {
    info("%s: market round: vacancy %s over the interval, floor %s %s per card-hour", plugin_type,
         f.vacancy ? planc::permille_text(*f.vacancy).c_str() : "unknown",
         planc::format_micros(f.default_floor).c_str(), cfg.prices.currency.c_str());
    clear_round(c, cfg, f, pool, gpu_pos);
    return;
  }
  // Opened (or found open at a start): every job of the market looked at.
  if (opened) {
    settle(c, cfg, read_market(c, gpu_pos, true, {}), &f, gpu_pos);
    return;
  }
  // Between rounds: what the sample found, what job_submit/planc told, and
  // the winners not started yet.
  look_at.insert(look_at.end(), c.market_watch.begin(), c.market_watch.end());
  std::sort(look_at.begin(), look_at.end());
  look_at.erase(std::unique(look_at.begin(), look_at.end()), look_at.end());
  if (!look_at.empty()) settle(c, cfg, read_market(c, gpu_pos, false, look_at), &f, gpu_pos);
}

// --- the hooks: slurmctld's threads, under its locks -------------------------

namespace {

// The configuration and floors the hooks decide with (published by the
// worker), or false when slurmctld/planc does not run.
struct HookView {
  std::shared_ptr<const planc::PlancConfig> cfg;
  std::shared_ptr<const planc::MarketFloors> floors;
};
std::optional<HookView> hook_view(Controller& c) EXCLUDES(c.shown_mu, c.floors_mu) {
  if (!c.running.load()) return std::nullopt;
  HookView v;
  {
    planc::MutexLock l(c.shown_mu);
    v.cfg = c.shown;
  }
  if (!v.cfg || !v.cfg->market.enabled) return std::nullopt;
  v.floors = market_floors(c);
  return v;
}

}  // namespace

void market_on_job_begin(Controller& c, job_record_t* job) {
  auto v = hook_view(c);
  if (!v) return;
  const planc::Tier* t = planc::slurm::job_tier(*v->cfg, job);
  if (!t || t->id != TierId::kP2) return;
  const planc::MarketFacts f = planc::slurm::market_facts(t, job, c.gpu_pos.load());
  const auto life = planc::slurm::market_life(job);
  const MarketStep s = planc::on_start(life, f, context(*v->cfg, v->floors.get(), time(nullptr)));
  if (s.event == MarketEvent::kNone) return;
  planc::slurm::set_market_life(job, s.life, v->cfg->prices.currency);
  info("%s: market: %pJ started outside the rounds (%s): billed at the floor %s %s/card-hour",
       plugin_type, job, std::string(planc::reason_name(s.life->reason)).c_str(),
       planc::format_micros(s.life->price).c_str(), v->cfg->prices.currency.c_str());
}

void market_on_run_end(Controller& c, job_record_t* job) {
  auto v = hook_view(c);
  if (!v) return;
  const planc::Tier* t = planc::slurm::job_tier(*v->cfg, job);
  if (!t || t->id != TierId::kP2) return;
  const planc::MarketFacts f = planc::slurm::market_facts(t, job, c.gpu_pos.load());
  const MarketStep s =
      planc::on_run_end(planc::slurm::market_life(job), f, planc::slurm::run_requeues(job),
                        context(*v->cfg, v->floors.get(), time(nullptr)));
  if (s.event != MarketEvent::kNone)
    planc::slurm::set_market_life(job, s.life, v->cfg->prices.currency);
  if (s.hold == planc::HoldAction::kHold) planc::slurm::hold_in_place(job);
  if (s.event != MarketEvent::kNone)
    info("%s: market: %pJ requeued: held, it bids again (a win or a lock covers one run)",
         plugin_type, job);
}

}  // namespace planc::ctld
