// A P2 job's life in the spot market (policy 000, section 5): the one owner
// of everything the market decides about one job.  Pure: no Slurm header,
// no clock (every function takes `now`), no I/O.
//
// The life is kept in the job's AdminComment as the market's mark
// (serialize_life / parse_life), written and read only through this file:
// the mark is the state, so a slurmctld restart, a failover or a crash
// loses nothing.  slurmctld/planc's market unit, job_submit/planc and the
// job-begin and run-end hooks compute what the life becomes from the job
// as slurmctld shows it (MarketFacts) and write it back under the job
// lock, merged with whatever else the comment holds.
//
// The states:
//   waiting   it bids: held by the market until a round matches it.  `bid`
//             is its price (none: the list price, paying the round's);
//             `reason` why it waits, since when (`since`); `owner_hold`:
//             its owner (or an operator) holds it too, so it takes part in
//             no round until released.
//   matched   it won a round at `at`: its run number `run` pays `price`
//             per card-hour, for the request it won with (`shape`), if it
//             starts by `start_by` (one interval after the round); the
//             market released it.
//   locked    --lock-price: its run `run` from `begin` pays `price` (the
//             floor when it was booked at `at`), for `shape` (recorded at
//             the market's first look: a submission does not know its
//             account, partition or GPU count yet).  Not held.
//   released  not held by the market although it waits: the market closed
//             (Market=no) while it waited, or an operator released it by
//             hand.  Its next run (`run`) starts outside the rounds.
//   outside   a run (`run`) that started outside every round (released by
//             an operator, or a race the market lost): it pays the floor of
//             its GPU type when it started (`price`), never less.
//
// What moves a life is a named event (MarketEvent), from one of four
// places: a submission (job_submit/planc), an update (job_submit/planc's
// job_modify: hold, release, a change of QoS, GPUs, nodes, account,
// partition or begin time), a run's start or end (slurmctld's job-begin
// hook, jobcomp/planc's run-end hook: every requeue ends a run, even of a
// finished job) and the market unit's own look at the job (reconcile):
// the facts it finds (a run number that moved on, a request that changed,
// a win not started within an interval, the market opened or closed) and
// each round's result (after_round).
#ifndef PLANC_COMMON_MARKET_LIFE_H_
#define PLANC_COMMON_MARKET_LIFE_H_

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "common/config.h"

namespace planc {

struct MarketFloors;  // common/market.h

// What a win or a lock was for: a change of any of these sends the job back
// to bid.  gpu_type is lower-case, "" when the job names none.
struct MarketShape {
  uint32_t gpus = 0;
  uint32_t nodes = 0;
  std::string gpu_type;
  std::string account;
  std::string partition;
  bool operator==(const MarketShape&) const = default;
};

enum class MarketState : uint8_t { kWaiting, kMatched, kLocked, kReleased, kOutside };

// Why a life is what it is: for `waiting` why it waits (how it came to bid,
// or what its last round said); for `released` and `outside` why.
enum class MarketReason : uint8_t {
  kNew,            // submitted into P2
  kMovedIn,        // moved into P2 by an update of its QoS
  kJoined,         // found in P2 without a life (submitted while the market was closed)
  kRequeued,       // a run ended and it was requeued: a win or lock covers one run
  kChanged,        // its request changed after a win or a lock
  kExpired,        // won, but did not start within one interval
  kLockDropped,    // its --begin moved out of what the price was locked for
  kOutbid,         // its round: higher bids took the room
  kNoRoom,         // its round: it did not fit in what was offered
  kTooLarge,       // its round: more GPUs than P2 can have while guaranteed work runs
  kHeldForLarger,  // its round: the room was kept for a larger bid waiting longer
  kBelowFloor,     // its round: its bid is below the floor
  kBeginTime,      // not eligible: its --begin has not come
  kDependency,     // not eligible: it waits on a dependency
  kOwnerHeld,      // not eligible: its owner holds it
  kMarketClosed,   // released: Market=no
  kOperator,       // released by an operator; or a run that started so
  kNotMatched,     // outside: it started while it waited for a round
};
std::string_view reason_name(MarketReason r);

struct MarketLife {
  MarketState state = MarketState::kWaiting;
  MarketReason reason = MarketReason::kNew;
  std::optional<Micros> bid;  // --bid; none: the list price
  bool owner_hold = false;    // waiting: its owner or an operator holds it too
  time_t since = 0;           // waiting, released: since when `reason` holds
  Micros price = 0;           // matched, locked, outside
  time_t at = 0;              // matched: the round; locked: booked; outside: started
  time_t start_by = 0;        // matched: starts by then, or bids again
  time_t begin = 0;           // locked: its --begin
  uint32_t run = 0;           // matched, locked, released, outside: the run it is for
  MarketShape shape;          // matched, locked
  bool operator==(const MarketLife&) const = default;
};

// --- the mark ------------------------------------------------------------------
// One line from the tag to the next " | ", key=value words after the state:
//   [planc:market] waiting bid=15.00 currency=CNY reason=outbid since=2026-12-01T01:15:00Z
//   [planc:market] matched price=9.00 currency=CNY round=2026-12-01T01:15:00Z
//       start-by=2026-12-01T01:30:00Z run=0 gpus=8 nodes=1 type=h800 account=acct-spot
//       partition=gpu bid=15.00
//   [planc:market] locked price=10.00 currency=CNY booked=... begin=... run=0 gpus=...
//   [planc:market] released reason=market-closed since=... run=0 bid=list currency=CNY
//   [planc:market] outside price=10.00 currency=CNY started=... run=1 reason=operator
// `bid=list`: no bid.  `hold=owner` when the owner holds a waiting bid.
// Prices in whole cents; account and partition with anything but
// [A-Za-z0-9._-] escaped as %XX; `type=any` when the job names no type.
inline constexpr std::string_view kMarketTag = "[planc:market]";
std::string serialize_life(const MarketLife& life, std::string_view currency);
// The life in `admin_comment`, if its mark is there and whole.
std::optional<MarketLife> parse_life(std::string_view admin_comment);
// `admin_comment` with the life's mark in place of the old one (in front
// when there was none); other text kept.  None: the mark removed.
std::string with_life(std::string_view admin_comment, const std::optional<MarketLife>& life,
                      std::string_view currency);
// The words a user reads (planc-bill market, sbatch's note), e.g.
//   "bid 15.00 CNY/card-hour; waiting for a round: outbid in the last one (rounds every 15 min)"
//   "bid 15.00 CNY/card-hour; matched at 9.00 CNY/card-hour in the round at T for its run 0"
std::string describe_life(const MarketLife& life, std::string_view currency,
                          uint32_t interval_seconds);

// --- the job as slurmctld shows it -----------------------------------------------
struct MarketFacts {
  enum class Phase : uint8_t { kPending, kRunning, kFinished };
  Phase phase = Phase::kPending;
  bool in_market_tier = false;  // its QoS is the market's tier's (P2)
  bool free_attempt = false;    // a starved job on its free P2 attempt: not sold
  uint32_t run = 0;             // Slurm's restart count: one more per requeue
  MarketShape shape;
  time_t begin = 0;           // --begin (0: none)
  bool held = false;          // priority 0, anyone's hold
  bool requeue_held = false;  // held by Slurm's requeuehold (the owner's hold)
  bool dependency = false;    // waits on a dependency not met yet
};

// The market as the caller sees it when it decides.
struct MarketContext {
  bool open = false;  // Market=yes
  time_t now = 0;
  uint32_t interval = 900;      // MarketInterval
  uint32_t lock_ahead = 86400;  // a lock's --begin at most this far after booking
  // The floors now (slurmctld/planc's); null while unknown (it has not
  // sampled yet): then the floor at no vacancy from `prices` and `market`.
  const MarketFloors* floors = nullptr;
  const Prices* prices = nullptr;
  const MarketConfig* market = nullptr;
  std::optional<Micros> floor(std::string_view gpu_type) const;
};

// --- events ----------------------------------------------------------------------
enum class MarketEvent : uint8_t {
  kNone,
  kSubmitted,        // a new P2 job bids (or books with --lock-price)
  kMovedIn,          // an update moved it into P2: it bids
  kJoined,           // in P2 without a life (the market opened): it bids
  kLeft,             // no longer in P2: the market forgets it (and releases its hold)
  kMarketClosed,     // Market=no: released
  kMarketOpened,     // Market=yes again: a released job bids
  kWon,              // a round matched it
  kLost,             // a round did not (its reason changed)
  kRequeued,         // a run ended and it was requeued: it bids again
  kChanged,          // its request changed after a win or lock: it bids again
  kExpired,          // a win not started within an interval: it bids again
  kRecorded,         // a lock's request recorded at the market's first look
  kLockMoved,        // a lock's --begin moved within what was locked: kept
  kLockDropped,      // a lock's --begin moved out of it: it bids
  kOwnerHeld,        // its owner (or an operator) held a bid: out of the rounds
  kOwnerReleased,    // ... and released it: it bids again
  kOperatorRelease,  // an operator released a bid by hand: runs outside the rounds
  kStartedOutside,   // a run started outside every round: the floor
  kHeldAgain,        // a bid found without the market's hold: held again
};
std::string_view event_name(MarketEvent e);

// What the caller does to Slurm's hold: keep it, hold, release, or hand
// the hold to the job's owner (the market closes on a job its owner held
// too: theirs to release, as on any job).
enum class HoldAction : uint8_t { kKeep, kHold, kRelease, kGiveToOwner };

struct MarketStep {
  MarketEvent event = MarketEvent::kNone;
  std::optional<MarketLife> life;  // the new life (none: no market life, mark removed)
  HoldAction hold = HoldAction::kKeep;
};

// The market unit's look at a job (each sample for the jobs it watches, at
// each round and at its first sight of a job).  `life`: the job's life now
// (none: no mark).  The step's event is kNone when nothing changes.
MarketStep reconcile(const std::optional<MarketLife>& life, const MarketFacts& f,
                     const MarketContext& ctx);

// A run starts (slurmctld's job-begin hook, job write lock held): a run
// in the market tier while the market is open that no win, lock or
// release covers is recorded as started outside the rounds, at the floor.
MarketStep on_start(const std::optional<MarketLife>& life, const MarketFacts& f,
                    const MarketContext& ctx);

// A run of the job ends (jobcomp/planc's run-end hook, after the run is
// billed), `requeued`: it will wait again (a requeue by anyone, a
// preemption's requeue, a node failure's).  A requeued job in the market
// tier bids again, held at once (before Slurm could start it).
MarketStep on_run_end(const std::optional<MarketLife>& life, const MarketFacts& f, bool requeued,
                      const MarketContext& ctx);

// An update of the job (job_submit/planc's job_modify, job write lock held).
struct MarketUpdate {
  enum class Who : uint8_t { kOwner, kCoordinator, kOperator, kMarket } who = Who::kOwner;
  bool into_market = false;     // its QoS changes to the market tier's from another
  bool out_of_market = false;   // its QoS changes from the market tier's to another
  bool shape_changed = false;   // GPUs, GPU type, nodes, account or partition
  std::optional<time_t> begin;  // a new --begin
  bool hold = false;            // scontrol hold
  bool release = false;         // scontrol release
  bool array = false;           // the job is an array, or a heterogeneous job
};
struct MarketUpdateVerdict {
  std::optional<std::string> refusal;  // refuse the update with this text
  MarketStep step;                     // the life to write now (step.event != kNone)
  bool hold = false;                   // add a hold to the update (priority 0)
  bool cancel_release = false;         // take the release out of the update
  std::string log;                     // what slurmctld's log says of it ("" nothing)
};
MarketUpdateVerdict on_update(const std::optional<MarketLife>& life, const MarketFacts& before,
                              const MarketUpdate& u, uint32_t job_id, const MarketContext& ctx);

// A round's result for a bid: won at `pays`, or lost for `reason`.
MarketStep after_round(const MarketLife& life, const MarketFacts& f, bool won, Micros pays,
                       MarketReason reason, time_t round_at, const MarketContext& ctx);

// Whether a bid takes part in a round (its own facts; the floor is the
// round's business): none when it does, else why not.
std::optional<MarketReason> ineligible(const MarketLife& life, const MarketFacts& f, time_t now);

// What run `run` of the job pays per card-hour, and how the bill says it
// ("matched", "locked", "outside a round, the floor"): none when no win,
// lock or outside start covers that run (the tier's fixed price then).
struct RunPrice {
  Micros price = 0;
  std::string how;
};
std::optional<RunPrice> run_price(const MarketLife& life, uint32_t run);

// A --lock-price booking's --begin: none when acceptable, else the refusal.
std::optional<std::string> lock_begin_refusal(time_t begin, time_t now, uint32_t interval,
                                              uint32_t lock_ahead);

}  // namespace planc

#endif  // PLANC_COMMON_MARKET_LIFE_H_
