// The P2 spot market (policy 000, section 5; issue 15): the floor that
// follows vacancy, the clearing every MarketInterval, and the checks of a
// bid at submit.  Pure: no Slurm header, no clock; prices are integers in
// micro-units of planc.conf's Currency per card-hour, like the bills.
//
// The floor.  It starts at CardHourPriceFloor and moves with the vacancy
// measured over the last interval (time-weighted: common/idle_meter.h), by
// MarketFloorCurve: points "vacancy:multiplier", joined by straight lines
// and flat beyond the first and the last.  The default has the policy's
// point, 30% idle lowers the floor by 20%:
//     MarketFloorCurve=0:1.0,0.3:0.8,0.6:0.6
// It never goes below MarketMinFraction (0.30, the policy's "always at
// least 3 zhe") of the list price, nor above the list price.
//
// The clearing, each round, one market per GPU type (plan_round below):
//   - Capacity: the GPUs that neither guaranteed jobs (P0, P1) nor running
//     P2 jobs hold, less what is set aside for winners of earlier rounds
//     not started yet and for price locks whose --begin has come; P3 jobs
//     count as free, since P2 preempts them.  Reachable: what P2 could
//     have once every P2 run ended (the GPUs guaranteed work does not hold).
//   - Only eligible bids take part: --begin reached, dependencies met, not
//     held by their owner.  A bid below the floor waits for it to fall.
//   - Ranked by bid (none: the list price), highest first; ties by
//     submission, then job id.  In that order each bid wins when it fits
//     in what is left.  A bid that does not fit is passed over ("no
//     room"): it does not stop smaller, lower bids from winning what is
//     left.  One that asks for more than is reachable cannot win while
//     guaranteed work holds the GPUs ("too large") and takes no part in
//     the pricing.
//   - The large-bid rule (as Slurm's backfill reserves for its top job):
//     the highest-ranked bid that has lost for lack of room for at least
//     MarketReserveAfter (and fits in what is reachable) gets the room
//     that is left: no lower bid wins in its market until it fits ("held
//     for a larger bid"), so the GPUs P2 runs give back add up for it
//     round after round.  Example: 32 GPUs, a guaranteed job on 8; a
//     32-GPU bid is too large (24 reachable) and two 1-GPU bids win.  The
//     guaranteed job ends: 32 reachable, 30 offered; the big bid loses
//     for room, and MarketReserveAfter later it holds the room: the
//     1-GPU jobs' GPUs come back to it and it wins the round after they
//     end, while new small bids wait behind it.
//   - Each winner pays the highest losing bid that could have used what it
//     got (ranked after it, asking at most its GPUs plus what is left
//     unsold), or the floor when there is none: a bid that could never
//     have had those GPUs sets no price.  Never more than its own bid.  A
//     winner's own bid never sets what it pays, so bidding what the
//     capacity is worth to you is safe.  When every winner displaces the
//     same bids this is one uniform price, the usual case.
//   - The round's clearing price is the highest price a winner pays;
//     a round nobody wins has none.
//   - A winner that has not started within one interval bids again
//     (common/market_life.h), so an unstarted win never keeps its GPUs
//     out of later rounds for long.
//   - A job booked with --lock-price takes part in no round: from its
//     --begin it waits as any P2 job does, its GPUs set aside for one
//     interval, and pays its locked price (the floor when booked).
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
#include "common/idle_meter.h"
#include "common/market_life.h"

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
  // At each sample of the pool (`meter` has it): returns true when a round
  // set new floors from the vacancy since the last one (since the keeper
  // started, for the first).
  bool sample(time_t now, const IdleMeter& meter, const PlancConfig& cfg);
  const MarketFloors& floors() const { return floors_; }
  // A round at the next sample, not at the next multiple of the interval
  // (capacity infusion: idle above InfusionIdleMarket); later rounds keep
  // the interval's clock.
  void ask_round(time_t now) { floors_.next_round = std::min(floors_.next_round, now); }

 private:
  void set(const PlancConfig& cfg, uint32_t vacancy);
  time_t since_ = 0;  // the last round (or the start)
  MarketFloors floors_;
};

struct MarketBid {
  uint32_t job_id = 0;
  uint32_t gpus = 0;
  std::optional<Micros> bid;  // per card-hour; none: bids the list price
  time_t submitted = 0;
  std::string gpu_type;  // the type it asks for (gpu_type_of), "" for none
  // Not eligible this round (begin time, dependency, its owner's hold):
  // takes no part; the result says why.
  std::optional<MarketReason> ineligible;
  time_t no_room_since = 0;  // losing for lack of room since (0: it was not)
};

enum class BidOutcome : uint8_t {
  kWon,
  kOutbid,         // nothing was left when its turn came
  kNoRoom,         // it did not fit in what was left
  kBelowFloor,     // waits for the floor to fall to its bid
  kTooLarge,       // more GPUs than P2 can reach while guaranteed work runs
  kHeldForLarger,  // the room is held for a larger bid ranked above it
  kNotEligible,    // took no part (MarketBid::ineligible says why)
};
// The reason a losing bid's life records (common/market_life.h).
MarketReason loss_reason(BidOutcome o, const MarketBid& b);

struct BidResult {
  uint32_t job_id = 0;
  uint32_t index = 0;  // in plan_round's `bids`
  BidOutcome outcome = BidOutcome::kOutbid;
  Micros ranked_at = 0;  // its bid, or the list price
  Micros pays = 0;       // winners: what it pays per card-hour
};

struct MarketRound {
  uint32_t capacity = 0;   // GPUs offered
  uint32_t reachable = 0;  // GPUs P2 could have (not held by guaranteed work)
  uint32_t allocated = 0;
  Micros floor = 0, list = 0;
  std::optional<Micros> clearing;  // the highest a winner pays; none: nobody won
  uint32_t held_for = 0;           // the job the room is held for (0: none)
  // The winners and the bids passed over in rank order, then the bids
  // outbid, below the floor and not eligible (in no particular order).
  std::vector<BidResult> results;
};

// One market.  `reserve_after`: MarketReserveAfter, seconds.
MarketRound clear_market(const std::vector<MarketBid>& bids, uint32_t capacity, uint32_t reachable,
                         Micros floor, Micros list, time_t now, uint32_t reserve_after);

// One market per GPU type.  A bid that names a type ("--gres=gpu:h800:8")
// bids in that type's market, at that type's floor and list price, for the
// GPUs of that type; a bid naming none bids in the "default" market, at
// the default floor and list price, for whatever GPUs are left once the
// typed markets have cleared (it may run on any type).  A node counts as
// of a type when every GPU it has is of that type (gres.conf Type=), which
// is how GPU clusters are built; GPUs of nodes with mixed or no types are
// offered only to the default market.  The vacancy that moves the floors
// is the whole pool's.  On a cluster without GPU types there is one
// market, "default".
struct MarketOffer {
  // GPUs of each type on nodes of one type, less what guaranteed and P2
  // jobs hold there (may be negative: clamped to 0 when cleared).
  std::map<std::string, int64_t> by_type;
  int64_t total = 0;  // every GPU free for P2, typed or not, the same way
  // What P2 could have: the same without P2's own runs.
  std::map<std::string, int64_t> reachable_by_type;
  int64_t reachable_total = 0;
};
// GPUs held back from the round: a winner of an earlier round not started
// yet, or a price lock whose --begin has come.
struct SetAside {
  uint32_t gpus = 0;
  std::string gpu_type;
};
struct TypedRound {
  std::string gpu_type;  // lower-case, or "default"
  MarketRound round;     // results[].index: in plan_round's `bids`
};
struct RoundPlanInput {
  const std::vector<MarketBid>* bids = nullptr;
  MarketOffer offer;
  std::vector<SetAside> set_aside;
  const MarketFloors* floors = nullptr;
  const Prices* prices = nullptr;
  time_t now = 0;
  uint32_t reserve_after = 3600;
};
// Typed markets in name order, then "default" (only when it has bids or
// there is no typed market).  Floors from `floors` (the default floor for
// a type without a price of its own), lists from CardHourPrice.
std::vector<TypedRound> plan_round(const RoundPlanInput& in);

// The GPU type a job's TRES request names ("gres:gpu:h800:8",
// "gres/gpu:h800=8", lower-cased), or "" when it names none.
std::string gpu_type_of(std::string_view tres);

// User text fit for a log line or a message: printable ASCII only (anything
// else as '?'), at most `max` characters then "...".
std::string printable(std::string_view s, size_t max = 64);

// What job_submit checks of the market options.  Each error says what was
// wrong and what to do; `note` is told to an accepted job (a bid below the
// floor).  `bid_text` is --bid as given ("" when absent).
struct MarketRequest {
  std::string bid_text;
  bool lock_price = false;
  time_t begin = 0;  // --begin; 0 when absent
  bool spot_fallback = false;
  bool market_open = false;  // Market=yes
  bool array = false;        // a job array or a heterogeneous job
  std::string tier;          // "P0".."P3"
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
  uint32_t interval_seconds = 900;
  // The expected interruption (planc.p2_runs over the bills): P2 run
  // segments that ended in the window, preempted ones, their mean length.
  struct Interruption {
    std::string error;  // the bills could not be read: why
    uint32_t window_hours = 24;
    int64_t runs = 0, preempted = 0;
    double mean_run_seconds = 0;
  };
  std::optional<Interruption> interruption;
  // The caller's own jobs with a market life (squeue, see
  // parse_own_market_jobs): job id, Slurm's compact state, the life.
  struct OwnJob {
    std::string job_id, state;
    MarketLife life;
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
