// Round planning (common/market.h plan_round, clear_market): a table of
// rounds, each with its bids and capacity, and what every bid gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "common/market.h"

namespace planc {
namespace {

constexpr Micros U = kMicrosPerUnit;
constexpr time_t kNow = 1796087700;
constexpr uint32_t kHour = 3600;

struct Bid {
  uint32_t id, gpus;
  std::optional<Micros> price;
  time_t submitted = 0;
  std::optional<MarketReason> ineligible = std::nullopt;
  time_t no_room_since = 0;
};
struct Want {
  uint32_t id;
  BidOutcome outcome;
  Micros pays = 0;
};
struct Case {
  const char* name;
  std::vector<Bid> bids;
  uint32_t capacity, reachable;
  std::vector<Want> want;
  std::optional<Micros> clearing;
  uint32_t held_for = 0;
};

MarketBid to_bid(const Bid& b) {
  MarketBid m;
  m.job_id = b.id;
  m.gpus = b.gpus;
  m.bid = b.price;
  m.submitted = b.submitted;
  m.ineligible = b.ineligible;
  m.no_room_since = b.no_room_since;
  return m;
}

// Floor 10, list 20 in every case.
const std::vector<Case> kCases = {
    {"three bids for room for two: both winners pay the third",
     {{1, 8, 15 * U}, {2, 8, 12 * U}, {3, 8, 9 * U + 2 * U}},
     16,
     32,
     {{1, BidOutcome::kWon, 11 * U}, {2, BidOutcome::kWon, 11 * U}, {3, BidOutcome::kOutbid}},
     11 * U},
    {"every bid won: the floor",
     {{1, 8, 15 * U}, {2, 8, std::nullopt}},
     24,
     32,
     {{1, BidOutcome::kWon, 10 * U}, {2, BidOutcome::kWon, 10 * U}},
     10 * U},
    {"nobody wins: no clearing price",
     {{1, 8, 15 * U}, {2, 8, 12 * U}},
     0,
     32,
     {{1, BidOutcome::kOutbid}, {2, BidOutcome::kOutbid}},
     std::nullopt},
    {"a bid for every node while guaranteed work runs is too large and blocks nobody",
     // 4 nodes x 8, a P0 job on one: 24 reachable, 24 offered.
     {{1, 32, std::nullopt}, {2, 1, 15 * U}, {3, 1, 12 * U}},
     24,
     24,
     {{1, BidOutcome::kTooLarge}, {2, BidOutcome::kWon, 10 * U}, {3, BidOutcome::kWon, 10 * U}},
     10 * U},
    {"a bid too large just under the winners does not set their price",
     {{1, 1, 15 * U}, {2, 1, 12 * U}, {3, 32, 11 * U + 99 * U / 100}},
     24,
     24,
     {{1, BidOutcome::kWon, 10 * U}, {2, BidOutcome::kWon, 10 * U}, {3, BidOutcome::kTooLarge}},
     10 * U},
    {"a bid that does not fit is passed over: a smaller, lower one takes what is left",
     {{1, 8, 15 * U}, {2, 16, 14 * U}, {3, 4, 12 * U}},
     16,
     32,
     // 2 asks 16 > 8 + the 4 left unsold: it could not have used 1's GPUs.
     {{1, BidOutcome::kWon, 10 * U}, {2, BidOutcome::kNoRoom}, {3, BidOutcome::kWon, 10 * U}},
     10 * U},
    {"a loser that could have used a winner's GPUs sets that winner's price, never above its bid",
     // 1 wins 6 of 10; 2 (5) does not fit the 4 left; 3 (4) takes them.
     // 2 could have used 1's GPUs (5 <= 6): 1 pays 15.  Nobody behind 3: floor.
     {{1, 6, 20 * U}, {2, 5, 15 * U}, {3, 4, 12 * U}},
     10,
     10,
     {{1, BidOutcome::kWon, 15 * U}, {2, BidOutcome::kNoRoom}, {3, BidOutcome::kWon, 10 * U}},
     15 * U},
    {"ties: the earlier submission, then the lower job id",
     {{7, 8, 10 * U, 200}, {5, 8, 10 * U, 100}, {6, 8, 10 * U, 100}},
     8,
     32,
     {{5, BidOutcome::kWon, 10 * U}, {6, BidOutcome::kOutbid}, {7, BidOutcome::kOutbid}},
     10 * U},
    {"below the floor waits; not eligible takes no part",
     {{1, 8, 9 * U}, {2, 8, 15 * U, 0, MarketReason::kBeginTime}, {3, 8, 12 * U}},
     16,
     32,
     {{1, BidOutcome::kBelowFloor}, {2, BidOutcome::kNotEligible}, {3, BidOutcome::kWon, 10 * U}},
     10 * U},
    {"the large-bid rule: a bid short of room long enough holds what is left",
     // 2 (30 GPUs) has lost for room for an hour: the 2 GPUs left are held
     // for it, the 1-GPU bids behind it wait.
     {{1, 2, 16 * U},
      {2, 30, 15 * U, 0, std::nullopt, kNow - kHour},
      {3, 1, 12 * U},
      {4, 1, 11 * U}},
     4,
     32,
     {{1, BidOutcome::kWon, 10 * U},
      {2, BidOutcome::kNoRoom},
      {3, BidOutcome::kHeldForLarger},
      {4, BidOutcome::kHeldForLarger}},
     10 * U,
     2},
    {"the large-bid rule waits MarketReserveAfter before it holds anything",
     {{2, 30, 15 * U, 0, std::nullopt, kNow - kHour + 1}, {3, 1, 12 * U}, {4, 1, 11 * U}},
     2,
     32,
     // Both small bids fit; 2 could not have used a 1-GPU win: the floor.
     {{2, BidOutcome::kNoRoom}, {3, BidOutcome::kWon, 10 * U}, {4, BidOutcome::kWon, 10 * U}},
     10 * U},
    {"once room appears the large bid wins first",
     {{2, 30, 15 * U, 0, std::nullopt, kNow - 2 * kHour}, {3, 1, 12 * U}, {4, 1, 11 * U}},
     32,
     32,
     {{2, BidOutcome::kWon, 10 * U}, {3, BidOutcome::kWon, 10 * U}, {4, BidOutcome::kWon, 10 * U}},
     10 * U},
};

TEST(RoundPlanTest, TheTable) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    std::vector<MarketBid> bids;
    for (const Bid& b : c.bids) bids.push_back(to_bid(b));
    MarketRound r = clear_market(bids, c.capacity, c.reachable, 10 * U, 20 * U, kNow, kHour);
    std::map<uint32_t, BidResult> got;
    for (const BidResult& b : r.results) got[b.job_id] = b;
    EXPECT_EQ(got.size(), c.bids.size());
    for (const Want& w : c.want) {
      SCOPED_TRACE("job " + std::to_string(w.id));
      ASSERT_TRUE(got.count(w.id));
      EXPECT_EQ(static_cast<int>(got[w.id].outcome), static_cast<int>(w.outcome));
      if (w.outcome == BidOutcome::kWon) {
        EXPECT_EQ(got[w.id].pays, w.pays);
        // Never more than its own bid.
        EXPECT_LE(got[w.id].pays, got[w.id].ranked_at);
      }
    }
    EXPECT_EQ(r.clearing, c.clearing);
    EXPECT_EQ(r.held_for, c.held_for);
  }
}

TEST(RoundPlanTest, LossReasonsForTheMarks) {
  MarketBid b;
  EXPECT_EQ(loss_reason(BidOutcome::kTooLarge, b), MarketReason::kTooLarge);
  EXPECT_EQ(loss_reason(BidOutcome::kHeldForLarger, b), MarketReason::kHeldForLarger);
  b.ineligible = MarketReason::kDependency;
  EXPECT_EQ(loss_reason(BidOutcome::kNotEligible, b), MarketReason::kDependency);
}

// The same rules on random rounds, against a plain reading of them: rank
// every bid, walk the list, price each winner from the losers behind it.
TEST(RoundPlanTest, RandomRoundsAgreeWithAPlainReading) {
  std::mt19937 rng(7);
  for (int round = 0; round < 500; round++) {
    std::vector<MarketBid> bids;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; i++) {
      MarketBid b;
      b.job_id = static_cast<uint32_t>(i + 1);
      b.gpus = 1u << (rng() % 5);
      b.bid = rng() % 5 ? std::optional<Micros>((8 + rng() % 12) * U) : std::nullopt;
      b.submitted = static_cast<time_t>(rng() % 5);
      if (rng() % 10 == 0) b.ineligible = MarketReason::kBeginTime;
      if (rng() % 6 == 0) b.no_room_since = kNow - static_cast<time_t>(rng() % (2 * kHour));
      bids.push_back(b);
    }
    const uint32_t capacity = rng() % 48, reachable = capacity + rng() % 16;
    MarketRound r = clear_market(bids, capacity, reachable, 10 * U, 20 * U, kNow, kHour);
    // The plain reading.
    std::vector<const MarketBid*> ranked;
    for (const MarketBid& b : bids)
      if (!b.ineligible && b.bid.value_or(20 * U) >= 10 * U) ranked.push_back(&b);
    std::sort(ranked.begin(), ranked.end(), [](const MarketBid* a, const MarketBid* b) {
      Micros pa = a->bid.value_or(20 * U), pb = b->bid.value_or(20 * U);
      if (pa != pb) return pa > pb;
      if (a->submitted != b->submitted) return a->submitted < b->submitted;
      return a->job_id < b->job_id;
    });
    std::map<uint32_t, BidOutcome> want;
    uint32_t left = capacity;
    bool held = false;
    for (const MarketBid* b : ranked) {
      if (b->gpus > reachable) {
        want[b->job_id] = BidOutcome::kTooLarge;
      } else if (held) {
        want[b->job_id] = BidOutcome::kHeldForLarger;
      } else if (left == 0) {
        want[b->job_id] = BidOutcome::kOutbid;
      } else if (b->gpus <= left) {
        want[b->job_id] = BidOutcome::kWon;
        left -= b->gpus;
      } else {
        want[b->job_id] = BidOutcome::kNoRoom;
        if (b->no_room_since && kNow - b->no_room_since >= kHour) held = true;
      }
    }
    std::map<uint32_t, BidResult> got;
    for (const BidResult& b : r.results) got[b.job_id] = b;
    ASSERT_EQ(got.size(), bids.size());
    std::optional<Micros> clearing;
    for (size_t i = 0; i < ranked.size(); i++) {
      const MarketBid* b = ranked[i];
      ASSERT_EQ(static_cast<int>(got[b->job_id].outcome), static_cast<int>(want[b->job_id]))
          << "round " << round << " job " << b->job_id;
      if (want[b->job_id] != BidOutcome::kWon) continue;
      Micros pays = 10 * U;
      for (size_t j = i + 1; j < ranked.size(); j++) {
        const BidOutcome o = want[ranked[j]->job_id];
        if ((o == BidOutcome::kNoRoom || o == BidOutcome::kOutbid) &&
            ranked[j]->gpus <= b->gpus + (held ? 0 : left)) {
          pays = std::max(pays, ranked[j]->bid.value_or(20 * U));
          break;
        }
      }
      EXPECT_EQ(got[b->job_id].pays, pays) << "round " << round << " job " << b->job_id;
      clearing = std::max(clearing.value_or(0), pays);
    }
    EXPECT_EQ(r.clearing, clearing) << "round " << round;
  }
}

MarketBid typed(uint32_t id, uint32_t gpus, Micros price, std::string type) {
  MarketBid b;
  b.job_id = id;
  b.gpus = gpus;
  b.bid = price;
  b.gpu_type = std::move(type);
  b.submitted = 100 + id;
  return b;
}

TEST(RoundPlanTest, OneMarketPerGpuTypeWithWhatIsSetAside) {
  Prices prices;
  prices.default_card_hour = 20 * U;
  prices.card_hour = {{"h800", 20 * U}, {"a100", 12 * U}};
  MarketFloors floors;
  floors.default_floor = 8 * U;
  floors.by_type = {{"h800", 10 * U}, {"a100", 5 * U}};
  // 16 free H800s less 8 set aside for an unstarted H800 winner, 16 free
  // A100s, 32 free in all (24 once the set-aside is out).
  std::vector<MarketBid> bids = {typed(1, 8, 15 * U, "h800"), typed(2, 8, 12 * U, "h800"),
                                 typed(3, 8, 6 * U, "a100"), typed(4, 8, 9 * U, "")};
  RoundPlanInput in;
  in.bids = &bids;
  in.offer.by_type = {{"h800", 16}, {"a100", 16}};
  in.offer.total = 32;
  in.offer.reachable_by_type = {{"h800", 16}, {"a100", 16}};
  in.offer.reachable_total = 32;
  in.set_aside = {{8, "h800"}};
  in.floors = &floors;
  in.prices = &prices;
  in.now = kNow;
  auto rounds = plan_round(in);
  ASSERT_EQ(rounds.size(), 3u);
  EXPECT_EQ(rounds[0].gpu_type, "a100");  // typed markets by name, then default
  EXPECT_EQ(rounds[1].gpu_type, "h800");
  EXPECT_EQ(rounds[2].gpu_type, "default");
  const MarketRound& a100 = rounds[0].round;
  EXPECT_EQ(a100.capacity, 16u);
  EXPECT_EQ(a100.floor, 5 * U);
  EXPECT_EQ(a100.list, 12 * U);
  ASSERT_EQ(a100.results.size(), 1u);
  EXPECT_EQ(a100.results[0].index, 2u);  // the index in plan_round's bids
  EXPECT_EQ(a100.results[0].pays, 5 * U);
  const MarketRound& h800 = rounds[1].round;
  EXPECT_EQ(h800.capacity, 8u);
  EXPECT_EQ(h800.results[0].job_id, 1u);
  EXPECT_EQ(h800.results[0].pays, 12 * U);
  EXPECT_EQ(h800.results[1].outcome, BidOutcome::kOutbid);
  // The default market gets what the typed winners left: 32 - 8 - 8 - 8.
  const MarketRound& any = rounds[2].round;
  EXPECT_EQ(any.capacity, 8u);
  EXPECT_EQ(any.results[0].outcome, BidOutcome::kWon);
  // A cluster without GPU types: one default market, empty or not.
  std::vector<MarketBid> none;
  RoundPlanInput plain;
  plain.bids = &none;
  plain.offer.total = 16;
  plain.offer.reachable_total = 16;
  plain.floors = &floors;
  plain.prices = &prices;
  auto one = plan_round(plain);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].gpu_type, "default");
  EXPECT_EQ(one[0].round.capacity, 16u);
  EXPECT_FALSE(one[0].round.clearing);
}

}  // namespace
}  // namespace planc
