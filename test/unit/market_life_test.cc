// A P2 job's market life (common/market_life.h): the mark written and read
// back, and every transition from each state, with a fake clock.
#include "common/market_life.h"

#include <gtest/gtest.h>

#include "common/market.h"

namespace planc {
namespace {

constexpr Micros U = kMicrosPerUnit;
constexpr time_t T0 = 1796087700;  // 2026-12-01T01:15:00Z
using Phase = MarketFacts::Phase;
using Who = MarketUpdate::Who;

MarketShape shape(uint32_t gpus = 8, std::string type = "h800") {
  return MarketShape{gpus, 1, std::move(type), "acct-spot", "gpu"};
}

MarketFacts pending(uint32_t run = 0, bool held = true) {
  MarketFacts f;
  f.phase = Phase::kPending;
  f.in_market_tier = true;
  f.run = run;
  f.shape = shape();
  f.held = held;
  return f;
}

MarketFacts running(uint32_t run = 0) {
  MarketFacts f = pending(run, false);
  f.phase = Phase::kRunning;
  return f;
}

struct Market {
  MarketFloors floors;
  MarketContext ctx;
  explicit Market(time_t now = T0, bool open = true) {
    floors.default_floor = 10 * U;
    floors.by_type = {{"h800", 12 * U}};
    ctx.open = open;
    ctx.now = now;
    ctx.interval = 900;
    ctx.lock_ahead = 86400;
    ctx.floors = &floors;
  }
};

MarketLife waiting_life(std::optional<Micros> bid = 15 * U, MarketReason why = MarketReason::kNew) {
  MarketLife l;
  l.state = MarketState::kWaiting;
  l.reason = why;
  l.bid = bid;
  l.since = T0 - 60;
  return l;
}

MarketLife matched_life(uint32_t run = 0) {
  MarketLife l;
  l.state = MarketState::kMatched;
  l.bid = 15 * U;
  l.price = 9 * U;
  l.at = T0;
  l.start_by = T0 + 900;
  l.run = run;
  l.shape = shape();
  return l;
}

MarketLife locked_life() {
  MarketLife l;
  l.state = MarketState::kLocked;
  l.price = 10 * U;
  l.at = T0;
  l.begin = T0 + 3600;
  l.shape = shape();
  return l;
}

// --- the mark ------------------------------------------------------------------

TEST(MarketLifeMarkTest, EveryStateWrittenAndReadBack) {
  MarketLife outside;
  outside.state = MarketState::kOutside;
  outside.reason = MarketReason::kOperator;
  outside.price = 12 * U;
  outside.at = T0;
  outside.run = 2;
  MarketLife released = waiting_life(std::nullopt);
  released.state = MarketState::kReleased;
  released.reason = MarketReason::kMarketClosed;
  released.run = 1;
  MarketLife held = waiting_life(9 * U, MarketReason::kNoRoom);
  held.owner_hold = true;
  MarketLife odd = matched_life(3);
  odd.shape.account = "acct spot|x";  // escaped: never a space or " | "
  odd.shape.gpu_type = "";
  for (const MarketLife& l : {waiting_life(), waiting_life(std::nullopt), held, matched_life(),
                              locked_life(), outside, released, odd}) {
    const std::string mark = serialize_life(l, "CNY");
    EXPECT_EQ(mark.find(" | "), std::string::npos) << mark;
    auto back = parse_life("admin: vip | " + mark + " | planc: preempted at T");
    ASSERT_TRUE(back) << mark;
    EXPECT_EQ(*back, l) << mark;
  }
  EXPECT_EQ(serialize_life(waiting_life(), "CNY"),
            "[planc:market] waiting bid=15.00 currency=CNY reason=new since=2026-12-01T01:14:00Z");
  EXPECT_EQ(serialize_life(matched_life(), "CNY"),
            "[planc:market] matched price=9.00 currency=CNY round=2026-12-01T01:15:00Z "
            "start-by=2026-12-01T01:30:00Z run=0 gpus=8 nodes=1 type=h800 account=acct-spot "
            "partition=gpu bid=15.00");
  EXPECT_EQ(serialize_life(held, "CNY"),
            "[planc:market] waiting bid=9.00 currency=CNY reason=no-room "
            "since=2026-12-01T01:14:00Z hold=owner");
}

TEST(MarketLifeMarkTest, ATornOrForeignMarkIsNotALife) {
  for (const char* bad : {
           "",
           "admin: vip",
           "[planc:market]",
           "[planc:market] waiting bid=15.00",                     // no reason, no since
           "[planc:market] bidding bid=15.00 reason=new since=x",  // unknown state
           "[planc:market] waiting bid=15.00 currency=CNY reason=new since=2026-12-01T01:14:00Z "
           "colour=red",                                                          // unknown key
           "[planc:market] matched price=9.00 round=2026-12-01T01:15:00Z run=0",  // no shape
           "[planc:market] waiting bid=1e3 currency=CNY reason=new since=2026-12-01T01:14:00Z",
           // the old (human) mark of an earlier version
           "[planc:market] bid 15.00 CNY/card-hour; matched at 9.00 CNY/card-hour in the round "
           "at 2026-12-01T01:15:00Z",
       })
    EXPECT_FALSE(parse_life(bad)) << bad;
  // Replaced in place, removed with its separator; other text kept.
  const std::string w = serialize_life(waiting_life(), "CNY");
  const std::string m = serialize_life(matched_life(), "CNY");
  EXPECT_EQ(with_life("", waiting_life(), "CNY"), w);
  EXPECT_EQ(with_life(w + " | admin: vip", matched_life(), "CNY"), m + " | admin: vip");
  EXPECT_EQ(with_life("admin: vip | " + w, std::nullopt, "CNY"), "admin: vip");
}

// --- transitions -------------------------------------------------------------------

TEST(MarketLifeTest, SubmittedWhileClosedJoinsWhenTheMarketFindsIt) {
  Market m;
  // No life, pending, not held: it bids, held by the market.
  auto s = reconcile(std::nullopt, pending(0, false), m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kJoined);
  EXPECT_EQ(s.hold, HoldAction::kHold);
  EXPECT_EQ(s.life->reason, MarketReason::kJoined);
  EXPECT_FALSE(s.life->owner_hold);
  // Held already (its owner's): the hold stays the owner's.
  s = reconcile(std::nullopt, pending(0, true), m.ctx);
  EXPECT_EQ(s.hold, HoldAction::kKeep);
  EXPECT_TRUE(s.life->owner_hold);
  // Running when the market opened: that run was priced at the fixed price.
  EXPECT_EQ(reconcile(std::nullopt, running(), m.ctx).event, MarketEvent::kNone);
  // A free attempt is not sold.
  MarketFacts free = pending(0, false);
  free.free_attempt = true;
  EXPECT_EQ(reconcile(std::nullopt, free, m.ctx).event, MarketEvent::kNone);
}

TEST(MarketLifeTest, AWaitingBidFoundReleasedIsHeldAgain) {
  Market m;
  auto s = reconcile(waiting_life(), pending(0, false), m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kHeldAgain);
  EXPECT_EQ(s.hold, HoldAction::kHold);
  EXPECT_EQ(reconcile(waiting_life(), pending(0, true), m.ctx).event, MarketEvent::kNone);
  // Slurm's requeuehold is its owner's hold: out of the rounds.
  MarketFacts f = pending(0, true);
  f.requeue_held = true;
  s = reconcile(waiting_life(), f, m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kOwnerHeld);
  EXPECT_TRUE(s.life->owner_hold);
}

TEST(MarketLifeTest, AWinCoversOneRunOfTheRequestItWonWith) {
  Market m(T0 + 60);
  // Matched, not started yet, nothing changed: kept.
  EXPECT_EQ(reconcile(matched_life(), pending(0, false), m.ctx).event, MarketEvent::kNone);
  // Its run moved on (requeued by anyone, for any reason): it bids again.
  auto s = reconcile(matched_life(), pending(1, false), m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kRequeued);
  EXPECT_EQ(s.hold, HoldAction::kHold);
  EXPECT_EQ(s.life->state, MarketState::kWaiting);
  EXPECT_EQ(s.life->bid, 15 * U);  // the bid is the job's; kept
  // A change of GPU type, count, nodes, account or partition: it bids again.
  for (auto change : std::vector<void (*)(MarketShape*)>{
           [](MarketShape* x) { x->gpu_type = "a100"; },
           [](MarketShape* x) { x->gpus = 16; },
           [](MarketShape* x) { x->nodes = 2; },
           [](MarketShape* x) { x->account = "other"; },
           [](MarketShape* x) { x->partition = "other"; },
       }) {
    MarketFacts f = pending(0, false);
    change(&f.shape);
    s = reconcile(matched_life(), f, m.ctx);
    EXPECT_EQ(s.event, MarketEvent::kChanged);
    EXPECT_EQ(s.hold, HoldAction::kHold);
    EXPECT_EQ(s.life->reason, MarketReason::kChanged);
  }
  // Not started within one interval: it bids again; an owner's hold stays.
  Market late(T0 + 901);
  s = reconcile(matched_life(), pending(0, true), late.ctx);
  EXPECT_EQ(s.event, MarketEvent::kExpired);
  EXPECT_EQ(s.hold, HoldAction::kKeep);
  EXPECT_TRUE(s.life->owner_hold);
  // Running, or run and finished: its price stands for its bill.
  EXPECT_EQ(reconcile(matched_life(), running(0), late.ctx).event, MarketEvent::kNone);
  MarketFacts done = running(0);
  done.phase = Phase::kFinished;
  EXPECT_EQ(reconcile(matched_life(), done, late.ctx).event, MarketEvent::kNone);
  // A new run that slipped through without a round: the floor of its type.
  s = reconcile(matched_life(), running(1), m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kStartedOutside);
  EXPECT_EQ(s.life->price, 12 * U);
  EXPECT_EQ(s.life->run, 1u);
}

TEST(MarketLifeTest, ALockIsReCheckedWhenItsBeginMoves) {
  Market m(T0 + 60);
  MarketFacts f = pending(0, false);
  f.begin = T0 + 3600;
  // Booked at submission without its request: recorded at the first look.
  MarketLife booked = locked_life();
  booked.shape = MarketShape{};
  auto first = reconcile(booked, f, m.ctx);
  EXPECT_EQ(first.event, MarketEvent::kRecorded);
  EXPECT_EQ(*first.life, locked_life());
  EXPECT_EQ(reconcile(locked_life(), f, m.ctx).event, MarketEvent::kNone);
  // Moved within what was locked: kept, with its new begin.
  f.begin = T0 + 7200;
  auto s = reconcile(locked_life(), f, m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kLockMoved);
  EXPECT_EQ(s.life->begin, T0 + 7200);
  // Moved 30 days out, or to now: the lock is dropped, it bids.
  for (time_t begin : {T0 + 30 * 86400, T0 + 60}) {
    f.begin = begin;
    s = reconcile(locked_life(), f, m.ctx);
    EXPECT_EQ(s.event, MarketEvent::kLockDropped);
    EXPECT_EQ(s.hold, HoldAction::kHold);
    EXPECT_EQ(s.life->reason, MarketReason::kLockDropped);
  }
  // A requeue ends what it was locked for.
  f.begin = T0 + 3600;
  f.run = 1;
  EXPECT_EQ(reconcile(locked_life(), f, m.ctx).event, MarketEvent::kRequeued);
}

TEST(MarketLifeTest, TheMarketClosingReleasesBidsAndOpeningTakesThemBack) {
  Market closed(T0, false);
  auto s = reconcile(waiting_life(), pending(0, true), closed.ctx);
  EXPECT_EQ(s.event, MarketEvent::kMarketClosed);
  EXPECT_EQ(s.hold, HoldAction::kRelease);
  EXPECT_EQ(s.life->state, MarketState::kReleased);
  EXPECT_EQ(s.life->reason, MarketReason::kMarketClosed);
  // Its owner's hold stays theirs (handed to them: theirs to release).
  MarketLife owned = waiting_life();
  owned.owner_hold = true;
  EXPECT_EQ(reconcile(owned, pending(0, true), closed.ctx).hold, HoldAction::kGiveToOwner);
  // Open again: a released job still waiting bids.
  Market open(T0 + 10);
  s = reconcile(s.life, pending(0, false), open.ctx);
  EXPECT_EQ(s.event, MarketEvent::kMarketOpened);
  EXPECT_EQ(s.hold, HoldAction::kHold);
  // Nothing moves a win while the market is closed.
  EXPECT_EQ(reconcile(matched_life(), pending(1, false), closed.ctx).event, MarketEvent::kNone);
}

TEST(MarketLifeTest, LeavingP2ForgetsTheLifeAndReleasesTheMarketsHold) {
  Market m;
  MarketFacts f = pending(0, true);
  f.in_market_tier = false;
  auto s = reconcile(waiting_life(), f, m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kLeft);
  EXPECT_FALSE(s.life);
  EXPECT_EQ(s.hold, HoldAction::kRelease);
  MarketLife owned = waiting_life();
  owned.owner_hold = true;
  EXPECT_EQ(reconcile(owned, f, m.ctx).hold, HoldAction::kGiveToOwner);
  // A run priced in P2 keeps its mark for its bill.
  MarketFacts r = running(0);
  r.in_market_tier = false;
  EXPECT_EQ(reconcile(matched_life(), r, m.ctx).event, MarketEvent::kNone);
}

TEST(MarketLifeTest, ARunThatStartsOutsideTheRoundsPaysTheFloor) {
  Market m;
  // A win for this run, or a lock: nothing to say.
  EXPECT_EQ(on_start(matched_life(), running(0), m.ctx).event, MarketEvent::kNone);
  EXPECT_EQ(on_start(locked_life(), running(0), m.ctx).event, MarketEvent::kNone);
  // Released by an operator, or never matched, or a win for another run.
  MarketLife op = waiting_life();
  op.state = MarketState::kReleased;
  op.reason = MarketReason::kOperator;
  for (auto [life, why] : std::vector<std::pair<std::optional<MarketLife>, MarketReason>>{
           {op, MarketReason::kOperator},
           {waiting_life(), MarketReason::kNotMatched},
           {std::nullopt, MarketReason::kNotMatched},
           {matched_life(5), MarketReason::kRequeued}}) {
    auto s = on_start(life, running(0), m.ctx);
    EXPECT_EQ(s.event, MarketEvent::kStartedOutside);
    EXPECT_EQ(s.life->state, MarketState::kOutside);
    EXPECT_EQ(s.life->reason, why);
    EXPECT_EQ(s.life->price, 12 * U);  // the H800 floor now
    EXPECT_EQ(run_price(*s.life, 0)->price, 12 * U);
  }
  // The market closed: the fixed P2 price, no life written.
  Market closed(T0, false);
  EXPECT_EQ(on_start(waiting_life(), running(0), closed.ctx).event, MarketEvent::kNone);
  // Before the first sample: the floor at no vacancy from the config.
  Prices prices;
  MarketConfig market;
  Market early;
  early.ctx.floors = nullptr;
  EXPECT_FALSE(early.ctx.floor("h800"));
  early.ctx.prices = &prices;
  early.ctx.market = &market;
  EXPECT_EQ(on_start(std::nullopt, running(0), early.ctx).life->price, 10 * U);
}

TEST(MarketLifeTest, EveryRequeueEndsAWinAndHoldsTheJobAtOnce) {
  Market m;
  for (const MarketLife& l : {matched_life(), locked_life(), waiting_life()}) {
    auto s = on_run_end(l, running(0), true, m.ctx);
    EXPECT_EQ(s.hold, HoldAction::kHold);
    EXPECT_EQ(s.life->state, MarketState::kWaiting);
  }
  EXPECT_EQ(on_run_end(matched_life(), running(0), true, m.ctx).life->reason,
            MarketReason::kRequeued);
  // A run that ends for good keeps its win for the record (sacct).
  EXPECT_EQ(on_run_end(matched_life(), running(0), false, m.ctx).event, MarketEvent::kNone);
  // No life (a fixed-price run from before the market opened): it bids.
  EXPECT_EQ(on_run_end(std::nullopt, running(0), true, m.ctx).event, MarketEvent::kRequeued);
}

TEST(MarketLifeTest, UpdatesByOwnersAndOperators) {
  Market m(T0 + 60);
  MarketUpdate u;
  // Moved into P2 by its owner: held, it bids the list price.
  u.into_market = true;
  MarketFacts f = pending(0, false);
  f.in_market_tier = false;
  auto v = on_update(std::nullopt, f, u, 7, m.ctx);
  EXPECT_FALSE(v.refusal);
  EXPECT_TRUE(v.hold);
  EXPECT_EQ(v.step.event, MarketEvent::kMovedIn);
  EXPECT_FALSE(v.step.life->bid);
  EXPECT_EQ(v.log, "JobId=7 moved into P2: it bids the list price in the next round");
  // An array cannot.
  u.array = true;
  EXPECT_EQ(*on_update(std::nullopt, f, u, 7, m.ctx).refusal,
            "job arrays and heterogeneous jobs cannot bid in the P2 market (each needs a round of "
            "its own): submit the tasks as separate jobs to move them into P2");
  // The market's own updates, and a closed market: nothing to say.
  u = MarketUpdate{};
  u.release = true;
  u.who = Who::kMarket;
  EXPECT_EQ(on_update(waiting_life(), pending(), u, 7, m.ctx).step.event, MarketEvent::kNone);
  u.who = Who::kOwner;
  Market closed(T0, false);
  EXPECT_FALSE(on_update(waiting_life(), pending(), u, 7, closed.ctx).refusal);
  // The owner releases a bid: refused, with the reason in the log.
  v = on_update(waiting_life(), pending(), u, 7, m.ctx);
  EXPECT_EQ(*v.refusal,
            "JobId=7 bids in the P2 market: the round it wins releases it (rounds every 15 min); "
            "it cannot be released by hand.  To run it outside the market, cancel it and submit "
            "it to another tier");
  // ... unless it is their own hold: theirs goes, the market's stays.
  MarketLife owned = waiting_life();
  owned.owner_hold = true;
  v = on_update(owned, pending(), u, 7, m.ctx);
  EXPECT_FALSE(v.refusal);
  EXPECT_TRUE(v.cancel_release);
  EXPECT_EQ(v.step.event, MarketEvent::kOwnerReleased);
  EXPECT_FALSE(v.step.life->owner_hold);
  // An operator's release is Slurm's power: its next run is outside the rounds.
  u.who = Who::kOperator;
  v = on_update(waiting_life(), pending(), u, 7, m.ctx);
  EXPECT_FALSE(v.refusal);
  EXPECT_FALSE(v.cancel_release);
  EXPECT_EQ(v.step.life->state, MarketState::kReleased);
  EXPECT_EQ(v.step.life->reason, MarketReason::kOperator);
  EXPECT_NE(v.log.find("released by an operator"), std::string::npos);
  // Holding a bid: out of the rounds until released.
  u = MarketUpdate{};
  u.hold = true;
  v = on_update(waiting_life(), pending(), u, 7, m.ctx);
  EXPECT_EQ(v.step.event, MarketEvent::kOwnerHeld);
  EXPECT_TRUE(v.step.life->owner_hold);
  EXPECT_EQ(*ineligible(*v.step.life, pending(), m.ctx.now), MarketReason::kOwnerHeld);
}

TEST(MarketLifeTest, AWinnerChangedOrReleasedLateBidsAgain) {
  Market m(T0 + 60);
  MarketUpdate u;
  // The owner holds a winner, then asks for H800 cards at the A100 price.
  u.shape_changed = true;
  auto v = on_update(matched_life(), pending(0, true), u, 7, m.ctx);
  EXPECT_EQ(v.step.event, MarketEvent::kChanged);
  EXPECT_FALSE(v.hold);  // held already
  EXPECT_TRUE(v.step.life->owner_hold);
  v = on_update(matched_life(), pending(0, false), u, 7, m.ctx);
  EXPECT_TRUE(v.hold);  // not held: held now, in the same update
  // requeuehold, then release: the win was for the run that ended.
  u = MarketUpdate{};
  u.release = true;
  v = on_update(matched_life(), pending(1, true), u, 7, m.ctx);
  EXPECT_EQ(v.step.event, MarketEvent::kRequeued);
  EXPECT_TRUE(v.cancel_release);
  EXPECT_FALSE(v.step.life->owner_hold);
  // Released after its win expired: it bids again.
  Market late(T0 + 901);
  v = on_update(matched_life(), pending(0, true), u, 7, late.ctx);
  EXPECT_EQ(v.step.event, MarketEvent::kExpired);
  EXPECT_TRUE(v.cancel_release);
  // Released in time: Slurm's release.
  v = on_update(matched_life(), pending(0, true), u, 7, m.ctx);
  EXPECT_EQ(v.step.event, MarketEvent::kNone);
  EXPECT_FALSE(v.cancel_release);
  EXPECT_FALSE(v.refusal);
  // A lock's --begin moved: kept within what was locked, else dropped.
  u = MarketUpdate{};
  u.begin = T0 + 7200;
  v = on_update(locked_life(), pending(0, false), u, 7, m.ctx);
  EXPECT_EQ(v.step.event, MarketEvent::kLockMoved);
  u.begin = T0 + 30 * 86400;
  v = on_update(locked_life(), pending(0, false), u, 7, m.ctx);
  EXPECT_EQ(v.step.event, MarketEvent::kLockDropped);
  EXPECT_TRUE(v.hold);
  EXPECT_EQ(v.log,
            "JobId=7: its --begin moved to 2026-12-31T01:15:00Z, out of what its price was locked "
            "for (from 2026-12-01T01:30:00Z to 2026-12-02T01:15:00Z): the lock is dropped and it "
            "bids");
}

TEST(MarketLifeTest, RoundsWinLoseAndOnlyANewReasonChangesTheMark) {
  Market m(T0 + 900);
  auto s = after_round(waiting_life(), pending(0, true), true, 9 * U, MarketReason::kNew, T0 + 900,
                       m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kWon);
  EXPECT_EQ(s.hold, HoldAction::kRelease);
  EXPECT_EQ(s.life->price, 9 * U);
  EXPECT_EQ(s.life->start_by, T0 + 1800);
  EXPECT_EQ(s.life->shape, shape());
  EXPECT_EQ(run_price(*s.life, 0)->how, "matched");
  EXPECT_FALSE(run_price(*s.life, 1));  // the next run is not covered
  // Lost: its reason, since now; lost again the same way: nothing changes.
  s = after_round(waiting_life(), pending(), false, 0, MarketReason::kOutbid, T0 + 900, m.ctx);
  EXPECT_EQ(s.event, MarketEvent::kLost);
  EXPECT_EQ(s.life->since, T0 + 900);
  Market later(T0 + 1800);
  EXPECT_EQ(
      after_round(*s.life, pending(), false, 0, MarketReason::kOutbid, T0 + 1800, later.ctx).event,
      MarketEvent::kNone);
}

TEST(MarketLifeTest, EligibilityOfABid) {
  MarketFacts f = pending();
  EXPECT_FALSE(ineligible(waiting_life(), f, T0));
  f.begin = T0 + 1;
  EXPECT_EQ(*ineligible(waiting_life(), f, T0), MarketReason::kBeginTime);
  f.begin = 0;
  f.dependency = true;
  EXPECT_EQ(*ineligible(waiting_life(), f, T0), MarketReason::kDependency);
}

}  // namespace
}  // namespace planc
