// slurmctld/planc's P2 market (plugins/ctld_state.h): the floors, set by
// the floor keeper (common/market.h) from the pool each sample, and each
// round's clearing.  The worker's, except market_floors().
#include "plugins/ctld_state.h"

#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "common/preempt_policy.h"  // format_utc

namespace planc::ctld {
namespace {

using planc::TierId;

// A round's clearing (common/market.h): the P2 jobs held for the market bid
// for the GPUs that neither guaranteed nor P2 jobs hold (nor winners of
// earlier rounds that have not started), one market per GPU type
// (clear_markets); winners are released, every bidder's AdminComment says
// what happened and when the next round is.  Reads under the job read
// lock, then one short update per job, as the starvation scan does.
void clear_round(Controller& c, const planc::PlancConfig& cfg, const planc::MarketFloors& floors,
                 const planc::PoolUsage& pool, int gpu_pos) EXCLUDES(c.floors_mu, c.rec_mu) {
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
    jobs = planc::slurm::market_jobs(*c.tiers, gpu_pos);
    c.stats.round_read_usec = usec_since(t);
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
  c.stats.market_rounds++;
  c.stats.round_clear_usec = usec_since(t_clear);
  if (!c.market_dir.empty()) {
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
      c.stats.market_updates++;
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

// Each sample: the keeper sees the pool; a round (or the market opening,
// closing or its settings changing on reload) publishes the floors, and a
// round clears the bids.
void market_tick(Controller& c, const planc::PlancConfig& cfg, const planc::PoolUsage& pool,
                 bool reloaded, int gpu_pos) {
  const time_t now = time(nullptr);
  if (!cfg.market.enabled) {
    if (c.floor_keeper) {
      c.floor_keeper.reset();
      planc::MutexLock l(c.floors_mu);
      c.floors.reset();
      info("%s: the P2 market is closed (Market=no)", plugin_type);
    }
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
  const uint32_t used = pool.allocated_total();
  if (pool.pool_gpus &&
      c.floor_keeper->sample(now, pool.pool_gpus > used ? pool.pool_gpus - used : 0, pool.pool_gpus,
                             cfg)) {
    const planc::MarketFloors& f = c.floor_keeper->floors();
    info("%s: market round: vacancy %s over the interval, floor %s %s per card-hour", plugin_type,
         f.vacancy ? planc::permille_text(*f.vacancy).c_str() : "unknown",
         planc::format_micros(f.default_floor).c_str(), cfg.prices.currency.c_str());
    changed = true;
    clear_round(c, cfg, f, pool, gpu_pos);
  }
  if (!changed) return;
  auto copy = std::make_shared<const planc::MarketFloors>(c.floor_keeper->floors());
  planc::MutexLock l(c.floors_mu);
  c.floors = std::move(copy);
}

}  // namespace planc::ctld
