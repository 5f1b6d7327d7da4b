// The P2 spot market (policy 000, section 5; issue 15): the floor that
// follows vacancy, the clearing every MarketInterval, and the checks of a
// bid at submit.  Pure: no Slurm header, no clock; prices are integers in
// micro-units of planc.conf's Currency per card-hour, like the bills.
//
// The floor.  It starts at CardHourPriceFloor and moves with the vacancy
// measured over the last interval (time-weighted: VacancyMeter), by
// MarketFloorCurve: points "vacancy:multiplier", joined by straight lines
// and flat beyond the first and the last.  The default has the policy's
// point, 30% idle lowers the floor by 20%:
//     MarketFloorCurve=0:1.0,0.3:0.8,0.6:0.6
// It never goes below MarketMinFraction (0.30, the policy's "always at
// least 3 zhe") of the list price, nor above the list price.
//
// The clearing: a uniform price set by the first bid that does not get in.
//   - Capacity: the GPUs that neither guaranteed jobs (P0, P1) nor running
//     P2 jobs hold; P3 jobs count as free, since P2 preempts them.
//   - A waiting P2 job takes part when its bid is at least the floor; a job
//     with no bid bids the list price (it takes the clearing price, never
//     more than list).  Bids below the floor wait for the floor to fall.
//   - Ranked by bid, highest first; ties by submission, then job id.
//   - Winners are taken in that order while they fit; the first that does
//     not fit ends the round (no smaller, lower bid jumps it: highest bid
//     first means that), and it and every bid after it lose.
//   - Every winner pays the clearing price: the highest losing bid, or the
//     floor when every taking part bid won; never less than the floor.
//     A winner's own bid never sets what it pays (it only decides whether it
//     wins), so bidding what the capacity is worth to you is safe: bidding
//     less can only lose you a round you would have paid less than your
//     value for; bidding more can only win you one at a price above it.
//     (Pay-as-bid rewards guessing the others' bids; a second price per
//     winner differs from this only when several winners would each pay a
//     different losing bid, which one uniform price makes simpler to show.)
//   - A job booked with --lock-price pays its locked price (the floor when
//     it was booked) instead, whatever the round's price.
#ifndef PLANC_COMMON_MARKET_H_
#define PLANC_COMMON_MARKET_H_

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"

namespace planc {

// "0:1.0,0.3:0.8" -> points; nullopt with `*why` set when malformed
// (vacancies must rise, each within 0..1, multipliers within 0..10).
std::optional<std::vector<FloorPoint>> parse_floor_curve(std::string_view s, std::string* why);
std::string format_floor_curve(const std::vector<FloorPoint>& curve);

// The lowest price the market ever takes: MarketMinFraction of list.
Micros market_minimum(Micros list, const MarketConfig& m);
// The floor at this vacancy (per mille of the pool idle over the interval).
Micros market_floor(Micros base_floor, Micros list, uint32_t vacancy_permille,
                    const MarketConfig& m);

// Idle GPU-seconds over GPU-seconds in the pool between take()s, from
// samples of (time, idle GPUs, pool GPUs); each sample's figures hold until
// the next one.
class VacancyMeter {
 public:
  void observe(time_t now, uint32_t idle, uint32_t pool);
  // Per mille over [the last take(), now]; nullopt when nothing was seen.
  std::optional<uint32_t> take(time_t now);

 private:
  void advance(time_t now);
  bool seen_ = false;
  time_t last_ = 0;
  uint32_t idle_ = 0, pool_ = 0;
  double idle_seconds_ = 0, pool_seconds_ = 0;
};

// The floors as slurmctld/planc keeps them: fed the pool's samples, it
// sets the floors at each round (every MarketInterval, on the multiples of
// it since the epoch: :00, :15, :30, :45) from the vacancy since the last
// round.  Until the first round, and per GPU type: CardHourPriceFloor
// clamped to the type's minimum and list (the curve at no vacancy).
// The first round after `now`: rounds are on the multiples of
// MarketInterval since the epoch (:00, :15, :30, :45 by default).
time_t next_round_after(time_t now, uint32_t interval_seconds);

struct MarketFloors {
  time_t at = 0;  // the round that set them (0: none yet)
  time_t next_round = 0;
  std::optional<uint32_t> vacancy;  // per mille, over the last interval
  Micros default_floor = 0;         // for a GPU type not in CardHourPrice
  std::map<std::string, Micros> by_type;
};
class FloorKeeper {
 public:
  FloorKeeper(time_t now, const PlancConfig& cfg);
  // A pool sample.  Returns true when a round set new floors.
  bool sample(time_t now, uint32_t idle, uint32_t pool, const PlancConfig& cfg);
  const MarketFloors& floors() const { return floors_; }
  // A round at the next sample, not at the next multiple of the interval
  // (capacity infusion: idle above InfusionIdleMarket); later rounds keep
  // the interval's clock.
  void ask_round(time_t now) { floors_.next_round = std::min(floors_.next_round, now); }

 private:
  void set(const PlancConfig& cfg, uint32_t vacancy);
  VacancyMeter meter_;
  MarketFloors floors_;
};

struct MarketBid {
  uint32_t job_id = 0;
  uint32_t gpus = 0;
  std::optional<Micros> bid;     // per card-hour; none: bids the list price
  std::optional<Micros> locked;  // --lock-price: pays this
  time_t submitted = 0;
  std::string gpu_type;  // the type it asks for (gpu_type_of), "" for none
};

enum class BidOutcome : uint8_t {
  kWon,
  kOutbid,      // ranked after the first bid that did not fit
  kNoRoom,      // the first that did not fit
  kBelowFloor,  // waits for the floor to fall to its bid
};

struct BidResult {
  uint32_t job_id = 0;
  uint32_t index = 0;  // in clear_market's `bids`
  BidOutcome outcome = BidOutcome::kOutbid;
  Micros ranked_at = 0;  // its bid, or the list price
  Micros pays = 0;       // winners: the clearing price or its locked price
};

struct MarketRound {
  uint32_t capacity = 0;  // GPUs offered
  uint32_t allocated = 0;
  Micros floor = 0, list = 0;
  Micros clearing = 0;
  // The winners and the first loser in rank order, then the other bids
  // outbid, then the bids below the floor (those two in no particular order).
  std::vector<BidResult> results;
};

MarketRound clear_market(const std::vector<MarketBid>& bids, uint32_t capacity, Micros floor,
                         Micros list);

// One market per GPU type.  A bid that names a type ("--gres=gpu:h800:8")
// bids in that type's market, at that type's floor and list price, for the
// GPUs of that type; a bid naming none bids in the "default" market, at
// the default floor and list price, for whatever GPUs are left once the
// typed markets have cleared (it may run on any type).  A node counts as
// of a type when every GPU it has is of that type (gres.conf Type=), which
// is how GPU clusters are built; GPUs of nodes with mixed or no types are
// offered only to the default market.  The vacancy that moves the floors
// is the whole pool's.  On a cluster without GPU types there is one
// market, "default", as before.
struct MarketOffer {
  // GPUs of each type on nodes of one type, less what guaranteed and P2
  // jobs hold there and what matched or locked jobs asking for the type
  // set aside (may be negative: clamped to 0 when cleared).
  std::map<std::string, int64_t> by_type;
  int64_t total = 0;  // every GPU free for P2, typed or not, the same way
};
struct TypedRound {
  std::string gpu_type;  // lower-case, or "default"
  MarketRound round;     // results[].index: in clear_markets' `bids`
};
// Typed markets in name order, then "default" (only when it has bids or
// there is no typed market).  Floors from `floors` (the default floor for
// a type without a price of its own), lists from CardHourPrice.
std::vector<TypedRound> clear_markets(const std::vector<MarketBid>& bids, const MarketOffer& offer,
                                      const MarketFloors& floors, const Prices& prices);

// The GPU type a job's TRES request names ("gres:gpu:h800:8",
// "gres/gpu:h800=8", lower-cased), or "" when it names none.
std::string gpu_type_of(std::string_view tres);

// What job_submit checks of the market options.  Each error says what was
// wrong and what to do; `note` is told to an accepted job (a bid below the
// floor).  `bid_text` is --bid as given ("" when absent).
struct MarketRequest {
  std::string bid_text;
  bool lock_price = false;
  time_t begin = 0;  // --begin; 0 when absent
  bool spot_fallback = false;
  std::string tier;  // "P0".."P3"
  std::string currency;
  Micros list = 0, floor = 0;
  bool has_guaranteed_alternative = false;  // the account may use its Alternative tier
  std::string account;
};
struct MarketCheck {
  bool ok = true;
  std::string error;
  std::string note;
  std::optional<Micros> bid;
};
MarketCheck check_market_request(const MarketRequest& r, time_t now, const MarketConfig& m);

// The market's mark in a P2 job's AdminComment: what the owner reads in
// `scontrol show job` and `sacct -o AdminComment`, what slurmctld/planc
// reads its bid from at each round and jobcomp/planc the matched price
// from when the run ends.  One line, the tag first, up to the next " | "
// (other text in the comment is kept):
//   [planc:market] bid 15.00 CNY/card-hour; waiting for the round at 2026-12-01T01:00:00Z
//   [planc:market] no bid (the clearing price, at most list); waiting for ...
//   [planc:market] bid 15.00 CNY/card-hour; matched at 9.00 CNY/card-hour in the round at T
//   [planc:market] bid 9.00 CNY/card-hour; not matched (no room; the last round cleared at
//       9.00); rounds every 15 min, the next at :00, :15, :30 or :45 UTC
//   [planc:market] bid 5.00 CNY/card-hour; below the floor 6.00; rounds every 15 min, ...
// A bid that loses again the same way keeps its text: a round updates only
// the jobs whose mark changes (the cadence, not the next round's clock
// time, is in the text; `planc-bill market` shows that time).
inline constexpr std::string_view kMarketTag = "[planc:market]";
//   [planc:market] locked at 10.00 CNY/card-hour, the floor when booked at
//       2026-12-01T04:00:00Z; no round: it runs from its --begin time
// A locked booking takes part in no round: from its --begin time it waits
// as any P2 job does (its GPUs set aside from the rounds' capacity) and
// pays its locked price.
struct MarketMark {
  std::optional<Micros> bid;
  std::optional<Micros> matched;  // the price it won at
  std::optional<Micros> locked;   // --lock-price: the floor at booking
};
std::optional<MarketMark> read_market_mark(std::string_view admin_comment);
// A job's owner releasing it by hand (scontrol release) while it bids in
// the market would run it outside every round, at the fixed P2 price: the
// refusal's text when `admin_comment` has a bid not matched yet (not a
// locked booking, which is not held), none otherwise.
std::optional<std::string> market_release_refusal(std::string_view admin_comment, uint32_t job_id,
                                                  uint32_t interval_seconds);
std::string market_mark_locked(Micros price, const std::string& currency, time_t booked_at);
std::string market_mark_waiting(std::optional<Micros> bid, const std::string& currency,
                                time_t next_round);
std::string market_mark_result(const BidResult& r, std::optional<Micros> bid,
                               const MarketRound& round, const std::string& currency, time_t at,
                               uint32_t interval_seconds);
// "rounds every 15 min, the next at :00, :15, :30 or :45 UTC"; for other
// intervals "rounds every 20 s (planc-bill market shows the next)".
std::string round_cadence(uint32_t interval_seconds);
// `admin_comment` with `mark` in place of an old market mark (in front).
std::string with_market_mark(std::string_view admin_comment, std::string_view mark);

// What `planc-market status` shows, read from slurmctld/planc's section of
// `scontrol show config` (its own Key = Value lines: no user text).
struct MarketStatus {
  bool found = false;  // slurmctld/planc's section was there
  bool open = false;   // Market=yes
  std::string currency;
  struct Price {
    std::string gpu_type;  // "default" for types without a price of their own
    Micros floor = 0, list = 0;
  };
  std::vector<Price> prices;
  std::string vacancy, last_round, next_round, interval, curve, min_fraction, last_clearing;
  // The expected interruption (planc.p2_runs over the bills): P2 run
  // segments that ended in the window, preempted ones, their mean length.
  struct Interruption {
    std::string error;  // the bills could not be read: why
    uint32_t window_hours = 24;
    int64_t runs = 0, preempted = 0;
    double mean_run_seconds = 0;
  };
  std::optional<Interruption> interruption;
  // The caller's own jobs with a market mark (squeue, see
  // parse_own_market_jobs): job id, Slurm's compact state, the mark.
  struct OwnJob {
    std::string job_id, state;
    std::string mark;   // the mark's text after its tag
    MarketMark prices;  // read from it
  };
  std::optional<std::vector<OwnJob>> own_jobs;
};
// The squeue -O format parse_own_market_jobs reads: fixed widths, the
// AdminComment last (set by SlurmUser and admins only: no user text).
std::string own_jobs_format();
std::vector<MarketStatus::OwnJob> parse_own_market_jobs(std::string_view squeue_out);
MarketStatus parse_market_status(std::string_view scontrol_show_config);
// The text the customer sees (policy 000, section 5), or JSON.
std::string format_market_status(const MarketStatus& s, bool json);

}  // namespace planc

#endif  // PLANC_COMMON_MARKET_H_
