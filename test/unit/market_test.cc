#include "common/market.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace planc {
namespace {

constexpr Micros U = kMicrosPerUnit;

TEST(MarketFloorTest, ThePolicysPointAndTheMinimum) {
  MarketConfig m;
  const Micros list = 20 * U, base = 10 * U;
  EXPECT_EQ(market_floor(base, list, 0, m), 10 * U);
  EXPECT_EQ(market_floor(base, list, 300, m), 8 * U);  // 30% idle: -20%
  EXPECT_EQ(market_floor(base, list, 150, m), 9 * U);  // halfway along the line
  EXPECT_EQ(market_floor(base, list, 600, m), 6 * U);
  EXPECT_EQ(market_floor(base, list, 1000, m), 6 * U);  // flat beyond the last point
  EXPECT_EQ(market_minimum(list, m), 6 * U);            // 30% of list
  // A curve that would go lower stops at the minimum; one above list at list.
  m.floor_curve = {{0, 1000}, {1000, 100}};
  EXPECT_EQ(market_floor(base, list, 1000, m), 6 * U);
  m.floor_curve = {{0, 5000}};
  EXPECT_EQ(market_floor(base, list, 0, m), list);
}

TEST(MarketFloorTest, PricesAreWholeCents) {
  MarketConfig m;
  m.floor_curve = {{0, 1000}, {1000, 333}};
  Micros f = market_floor(10 * U, 100 * U, 1000, m);  // 3.33 by the curve
  EXPECT_EQ(f % (U / 100), 0);
  EXPECT_EQ(market_minimum(3333333, m), 1000000);  // 30% of 3.333333: 1.00 (up to the cent)
}

TEST(MarketFloorTest, CurveParsing) {
  std::string why;
  auto c = parse_floor_curve("0:1.0,0.3:0.8,0.6:0.6", &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(format_floor_curve(*c), "0.00:1.00,0.30:0.80,0.60:0.60");
  EXPECT_FALSE(parse_floor_curve("0.3:0.8,0.2:0.9", &why));
  EXPECT_EQ(why, "vacancies must rise from point to point ('0.2:0.9' does not)");
  EXPECT_FALSE(parse_floor_curve("half:0.8", &why));
  EXPECT_EQ(why,
            "'half:0.8' is not a point VACANCY:MULTIPLIER (e.g. 0.3:0.8, 30% idle gives 80% of "
            "CardHourPriceFloor)");
  EXPECT_FALSE(parse_floor_curve("1.5:0.8", &why));
  EXPECT_EQ(why, "vacancy 1.5 is above 1 (it is a share of the pool)");
}

TEST(VacancyMeterTest, TimeWeightedOverTheInterval) {
  VacancyMeter v;
  EXPECT_FALSE(v.take(100));
  v.observe(0, 32, 32);  // idle for 10 s
  v.observe(10, 0, 32);  // full for 30 s
  EXPECT_EQ(v.take(40), 250u);
  EXPECT_EQ(v.take(50), 0u);  // the last figures hold
  v.observe(50, 16, 32);
  EXPECT_EQ(v.take(50), 500u);  // no time yet: the sample itself
}

MarketBid bid(uint32_t id, uint32_t gpus, std::optional<Micros> price, time_t t = 0) {
  return MarketBid{id, gpus, price, std::nullopt, t};
}

TEST(MarketClearingTest, ThreeBidsForRoomForTwo) {
  // 15, 12 and 9 per card-hour, 8 GPUs each, 16 GPUs offered, floor 6.
  auto r =
      clear_market({bid(3, 8, 9 * U), bid(1, 8, 15 * U), bid(2, 8, 12 * U)}, 16, 6 * U, 20 * U);
  ASSERT_EQ(r.results.size(), 3u);
  EXPECT_EQ(r.results[0].job_id, 1u);
  EXPECT_EQ(r.results[0].outcome, BidOutcome::kWon);
  EXPECT_EQ(r.results[1].job_id, 2u);
  EXPECT_EQ(r.results[1].outcome, BidOutcome::kWon);
  EXPECT_EQ(r.results[2].job_id, 3u);
  EXPECT_EQ(r.results[2].outcome, BidOutcome::kNoRoom);
  // Both winners pay the highest losing bid.
  EXPECT_EQ(r.clearing, 9 * U);
  EXPECT_EQ(r.results[0].pays, 9 * U);
  EXPECT_EQ(r.results[1].pays, 9 * U);
  EXPECT_EQ(r.allocated, 16u);
  // Next round, room for the third: no loser, it pays the floor.
  auto next = clear_market({bid(3, 8, 9 * U)}, 8, 6 * U, 20 * U);
  EXPECT_EQ(next.results[0].outcome, BidOutcome::kWon);
  EXPECT_EQ(next.results[0].pays, 6 * U);
}

TEST(MarketClearingTest, OwnBidNeverSetsThePrice) {
  // Winner 1 raising its bid from 15 to 19 changes nothing it pays.
  for (Micros own : {15 * U, 19 * U}) {
    auto r = clear_market({bid(1, 8, own), bid(2, 8, 12 * U), bid(3, 8, 9 * U)}, 16, 6 * U, 20 * U);
    EXPECT_EQ(r.results[0].pays, 9 * U);
  }
}

TEST(MarketClearingTest, HighestFirstNoJumpingTiesBySubmission) {
  // 8 GPUs left after the first; the 16-GPU bid does not fit and ends the
  // round: the smaller, lower bid behind it does not jump it.
  auto r =
      clear_market({bid(1, 8, 15 * U), bid(2, 16, 12 * U), bid(3, 4, 10 * U)}, 16, 6 * U, 20 * U);
  EXPECT_EQ(r.results[1].outcome, BidOutcome::kNoRoom);
  EXPECT_EQ(r.results[2].outcome, BidOutcome::kOutbid);
  EXPECT_EQ(r.clearing, 12 * U);
  // Equal bids: the earlier submission first, then the lower job id.
  auto t = clear_market({bid(7, 8, 10 * U, 200), bid(5, 8, 10 * U, 100), bid(6, 8, 10 * U, 100)}, 8,
                        6 * U, 20 * U);
  EXPECT_EQ(t.results[0].job_id, 5u);
  EXPECT_EQ(t.results[0].outcome, BidOutcome::kWon);
  EXPECT_EQ(t.results[1].job_id, 6u);
  EXPECT_EQ(t.results[2].job_id, 7u);
}

TEST(MarketClearingTest, NoBidBelowFloorAndLockedPrices) {
  MarketBid locked = bid(4, 8, std::nullopt);
  locked.locked = 7 * U;
  auto r = clear_market({bid(1, 8, std::nullopt), bid(2, 8, 5 * U), locked, bid(3, 8, 11 * U)}, 24,
                        8 * U, 20 * U);
  // No bid ranks at list; the bid below the floor waits, last.
  EXPECT_EQ(r.results[0].ranked_at, 20 * U);
  EXPECT_EQ(r.results.back().job_id, 2u);
  EXPECT_EQ(r.results.back().outcome, BidOutcome::kBelowFloor);
  // Everyone taking part won: the floor; the locked job pays its lock.
  EXPECT_EQ(r.clearing, 8 * U);
  for (const BidResult& b : r.results)
    if (b.job_id == 4)
      EXPECT_EQ(b.pays, 7 * U);
    else if (b.outcome == BidOutcome::kWon)
      EXPECT_EQ(b.pays, 8 * U);
}

TEST(MarketClearingTest, TheHeapAgreesWithAFullSort) {
  // Random rounds: the winners (in rank order), the first loser and the
  // price are those of ranking every bid and walking the list.
  std::mt19937 rng(7);
  for (int round = 0; round < 200; round++) {
    std::vector<MarketBid> bids;
    const int n = static_cast<int>(rng() % 60);
    for (int i = 0; i < n; i++)
      bids.push_back(bid(static_cast<uint32_t>(i + 1), 1u << (rng() % 4),
                         rng() % 5 ? std::optional<Micros>((6 + rng() % 10) * U) : std::nullopt,
                         static_cast<time_t>(rng() % 5)));
    const uint32_t capacity = rng() % 64;
    auto r = clear_market(bids, capacity, 8 * U, 20 * U);
    std::vector<const MarketBid*> ranked;
    for (const MarketBid& b : bids)
      if (b.bid.value_or(20 * U) >= 8 * U) ranked.push_back(&b);
    std::sort(ranked.begin(), ranked.end(), [](const MarketBid* a, const MarketBid* b) {
      Micros pa = a->bid.value_or(20 * U), pb = b->bid.value_or(20 * U);
      if (pa != pb) return pa > pb;
      if (a->submitted != b->submitted) return a->submitted < b->submitted;
      return a->job_id < b->job_id;
    });
    uint32_t left = capacity;
    Micros clearing = 8 * U;
    size_t i = 0;
    for (; i < ranked.size(); i++) {
      ASSERT_LT(i, r.results.size());
      EXPECT_EQ(r.results[i].job_id, ranked[i]->job_id);
      if (ranked[i]->gpus > left) {
        EXPECT_EQ(r.results[i].outcome, BidOutcome::kNoRoom);
        clearing = std::max(clearing, ranked[i]->bid.value_or(20 * U));
        break;
      }
      EXPECT_EQ(r.results[i].outcome, BidOutcome::kWon);
      left -= ranked[i]->gpus;
    }
    EXPECT_EQ(r.clearing, clearing);
    EXPECT_EQ(r.results.size(), bids.size());
    for (size_t k = i + 1; k < r.results.size(); k++)
      EXPECT_NE(r.results[k].outcome, BidOutcome::kWon);
  }
}

MarketRequest request(const std::string& tier) {
  MarketRequest r;
  r.tier = tier;
  r.currency = "CNY";
  r.list = 20 * U;
  r.floor = 10 * U;
  r.account = "acct-spot";
  return r;
}

TEST(MarketRequestTest, EveryBadInputHasItsMessage) {
  MarketConfig m;
  const time_t now = 1800000000;
  auto check = [&](MarketRequest r) { return check_market_request(r, now, m); };
  MarketRequest r = request("P2");
  r.bid_text = "cheap";
  EXPECT_EQ(check(r).error,
            "--bid=cheap is not a price: give a card-hour price in CNY, e.g. --bid=12.50");
  r = request("P3");
  r.bid_text = "12";
  EXPECT_EQ(check(r).error,
            "--bid is for P2 jobs (the spot market); this job is P3: submit it with "
            "--qos=p2-spot, or leave --bid out");
  r = request("P2");
  r.bid_text = "5";
  EXPECT_EQ(check(r).error,
            "--bid=5 is below the market's minimum of 6.00 CNY per card-hour (0.30 of the list "
            "price 20.00): bid at least 6.00");
  r.bid_text = "25";
  EXPECT_EQ(check(r).error,
            "--bid=25 is above the list price of 20.00 CNY per card-hour: a guaranteed tier costs "
            "that; bid at most 20.00");
  r = request("P2");
  r.lock_price = true;
  EXPECT_EQ(check(r).error,
            "--lock-price needs --begin: a price is locked for a job booked ahead, e.g. "
            "--begin=now+2hours --lock-price");
  r.begin = now + 30 * 3600 - 2;  // sbatch took 2 s: still "30 h"
  EXPECT_EQ(check(r).error,
            "--lock-price: --begin is 30 h ahead; a price can be locked at most 24 h ahead: book "
            "nearer the start, or leave --lock-price out");
  r.begin = now + 2 * 3600;
  EXPECT_TRUE(check(r).ok);
  r = request("P0");
  r.spot_fallback = true;
  EXPECT_EQ(check(r).error,
            "--spot-fallback is for P2 and P3 jobs; this job is P0, which is never preempted: "
            "leave --spot-fallback out");
  r = request("P3");
  r.spot_fallback = true;
  EXPECT_EQ(check(r).error,
            "--spot-fallback: account acct-spot may not use a guaranteed tier to fall back to; "
            "ask your admin to add one to the account, or leave --spot-fallback out");
  r.has_guaranteed_alternative = true;
  EXPECT_TRUE(check(r).ok);
}

TEST(MarketRequestTest, ABidUnderTheFloorIsAcceptedAndTold) {
  MarketConfig m;
  MarketRequest r = request("P2");
  r.bid_text = "9";
  auto c = check_market_request(r, 0, m);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.bid, 9 * U);
  EXPECT_EQ(c.note,
            "bid 9.00 CNY per card-hour is below the current floor 10.00: the job waits until "
            "the floor falls to it");
  r.bid_text = "12.5";
  c = check_market_request(r, 0, m);
  EXPECT_EQ(c.bid, 12500000);
  EXPECT_EQ(c.note, "");
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

TEST(FloorKeeperTest, AnIdlePoolLowersTheFloorAtTheNextRound) {
  PlancConfig cfg;
  cfg.market.interval_seconds = 60;
  FloorKeeper k(1000, cfg);  // rounds at multiples of 60: the first at 1020
  EXPECT_EQ(k.floors().next_round, 1020);
  EXPECT_EQ(k.floors().default_floor, 10 * U);  // CardHourPriceFloor to start
  EXPECT_EQ(k.floors().by_type.at("h800"), 10 * U);
  EXPECT_FALSE(k.sample(1000, 32, 32, cfg));
  EXPECT_FALSE(k.sample(1010, 32, 32, cfg));
  // All idle since the start: the curve's flat end, 0.6 x 10 = 6 (= the minimum).
  EXPECT_TRUE(k.sample(1020, 32, 32, cfg));
  EXPECT_EQ(k.floors().vacancy, 1000u);
  EXPECT_EQ(k.floors().default_floor, 6 * U);
  EXPECT_EQ(k.floors().next_round, 1080);
  // 30% idle over the next interval: -20%.
  EXPECT_FALSE(k.sample(1020, 0, 10, cfg));
  EXPECT_FALSE(k.sample(1050, 3, 10, cfg));
  k.sample(1080, 3, 10, cfg);
  EXPECT_EQ(k.floors().vacancy, 150u);  // half the time 0%, half 30%
  EXPECT_EQ(k.floors().default_floor, 9 * U);
  // The minimum holds with a steeper curve.
  cfg.market.floor_curve = {{0, 1000}, {100, 100}};
  k.sample(1140, 3, 10, cfg);
  EXPECT_EQ(k.floors().default_floor, 6 * U);
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

TEST(MarketRequestTest, GpuTypeOfTheRequest) {
  EXPECT_EQ(gpu_type_of("gres:gpu:H800:8"), "h800");
  EXPECT_EQ(gpu_type_of("gres/gpu:h800=8"), "h800");
  EXPECT_EQ(gpu_type_of("gres:gpu:8"), "");
  EXPECT_EQ(gpu_type_of("gres/gpu=8"), "");
  EXPECT_EQ(gpu_type_of("cpu=4,gres:gpu:a100:2"), "a100");
  EXPECT_EQ(gpu_type_of("gres:mygpu:x:1"), "");
  EXPECT_EQ(gpu_type_of(""), "");
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

constexpr char kShowConfig[] =
    "Configuration data as of 2026-12-01T00:50:00\n"
    "AccountingStorageBackupHost = (null)\n"
    "\n"
    "Slurmctld Plugstack Plugins Configuration:\n"
    "\n"
    "----- slurmctld/planc -----\n"
    "StarvationThreshold     = 1800 s\n"
    "Market                  = yes\n"
    "MarketInterval          = 900 s\n"
    "MarketMinFraction       = 0.30\n"
    "MarketFloorCurve        = 0.00:1.00,0.30:0.80,0.60:0.60\n"
    "MarketFloor             = default=12.00,h800=12.00 CNY/card-hour\n"
    "MarketListPrice         = default=20.00,h800=20.00 CNY/card-hour\n"
    "MarketVacancy           = 0.10\n"
    "MarketLastRound         = 2026-12-01T00:45:00Z\n"
    "MarketNextRound         = 2026-12-01T01:00:00Z\n"
    "MarketLastClearing      = 9.00 CNY/card-hour at 2026-12-01T00:45:00Z, 2 of 3 bid(s) matched\n"
    "----- other/plugin -----\n"
    "MarketFloor             = default=1.00 XXX/card-hour\n";

TEST(MarketStatusTest, AsTheCustomerSeesIt) {
  MarketStatus s = parse_market_status(kShowConfig);
  ASSERT_TRUE(s.found);
  ASSERT_TRUE(s.open);
  ASSERT_EQ(s.prices.size(), 2u);
  EXPECT_EQ(format_market_status(s, false),
            "Current floor: other GPUs @ 12.00 CNY/card-hour (-40% vs list 20.00)\n"
            "               H800 @ 12.00 CNY/card-hour (-40% vs list 20.00)\n"
            "Vacancy:       0.10 of the GPUs idle over the last round's interval\n"
            "Last round:    2026-12-01T00:45:00Z; next round 2026-12-01T01:00:00Z (every 900 s)\n"
            "Last clearing: 9.00 CNY/card-hour at 2026-12-01T00:45:00Z, 2 of 3 bid(s) matched\n");
  EXPECT_EQ(format_market_status(s, true),
            "{\"market\": \"open\", \"currency\": \"CNY\", \"floors\": [{\"gpu_type\": "
            "\"default\", \"floor\": \"12.00\", \"list\": \"20.00\", \"vs_list_percent\": -40}, "
            "{\"gpu_type\": \"h800\", \"floor\": \"12.00\", \"list\": \"20.00\", "
            "\"vs_list_percent\": -40}], \"vacancy\": \"0.10\", \"last_round\": "
            "\"2026-12-01T00:45:00Z\", \"next_round\": \"2026-12-01T01:00:00Z\", \"interval\": "
            "\"900 s\", \"last_clearing\": \"9.00 CNY/card-hour at 2026-12-01T00:45:00Z, 2 of 3 "
            "bid(s) matched\"}\n");
}

TEST(MarketStatusTest, ClosedOrNoPlugin) {
  EXPECT_EQ(format_market_status(parse_market_status("----- slurmctld/planc -----\nMarket = no\n"),
                                 false),
            "The P2 spot market is not open on this cluster (planc.conf Market=no).\n");
  EXPECT_EQ(format_market_status(parse_market_status("Configuration data\n"), true),
            "{\"market\": \"unknown\"}\n");
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

TEST(MarketMarkTest, WrittenAndReadBack) {
  const time_t t = 1796088000;  // 2026-12-01T01:20:00Z
  std::string w = market_mark_waiting(15 * U, "CNY", t);
  EXPECT_EQ(
      w, "[planc:market] bid 15.00 CNY/card-hour; waiting for the round at 2026-12-01T01:20:00Z");
  EXPECT_EQ(read_market_mark(w)->bid, 15 * U);
  EXPECT_FALSE(read_market_mark(w)->matched);
  EXPECT_EQ(market_mark_waiting(std::nullopt, "CNY", t),
            "[planc:market] no bid (the clearing price, at most list); waiting for the round at "
            "2026-12-01T01:20:00Z");
  EXPECT_FALSE(read_market_mark(market_mark_waiting(std::nullopt, "CNY", t))->bid);
  auto r = clear_market({bid(1, 8, 15 * U), bid(2, 8, 12 * U), bid(3, 8, 9 * U), bid(4, 8, 5 * U)},
                        16, 6 * U, 20 * U);
  std::string won = market_mark_result(r.results[0], 15 * U, r, "CNY", t, 900);
  EXPECT_EQ(won,
            "[planc:market] bid 15.00 CNY/card-hour; matched at 9.00 CNY/card-hour in the round at "
            "2026-12-01T01:20:00Z");
  EXPECT_EQ(read_market_mark(won)->matched, 9 * U);
  EXPECT_EQ(market_mark_result(r.results[2], 9 * U, r, "CNY", t, 900),
            "[planc:market] bid 9.00 CNY/card-hour; not matched (no room; the last round cleared "
            "at 9.00); rounds every 15 min, the next at :00, :15, :30 or :45 UTC");
  // The same outcome in a later round: the same text (no update needed).
  EXPECT_EQ(market_mark_result(r.results[2], 9 * U, r, "CNY", t + 900, 900),
            market_mark_result(r.results[2], 9 * U, r, "CNY", t, 900));
  EXPECT_EQ(market_mark_result(r.results[3], 5 * U, r, "CNY", t, 20),
            "[planc:market] bid 5.00 CNY/card-hour; below the floor 6.00; rounds every 20 s "
            "(planc-bill market shows the next)");
  EXPECT_EQ(round_cadence(1800), "rounds every 30 min, the next at :00 or :30 UTC");
  EXPECT_EQ(round_cadence(3600), "rounds every 1 h (planc-bill market shows the next)");
  // Replaced in place; other text kept.
  EXPECT_EQ(with_market_mark("", w), w);
  EXPECT_EQ(with_market_mark(w + " | admin: vip", won), won + " | admin: vip");
  EXPECT_EQ(with_market_mark("admin: vip | " + w, won), "admin: vip | " + won);
  EXPECT_FALSE(read_market_mark("admin: vip"));
  // A locked booking: its price read back, no bid, not matched.
  std::string locked = market_mark_locked(10 * U, "CNY", t);
  EXPECT_EQ(locked,
            "[planc:market] locked at 10.00 CNY/card-hour, the floor when booked at "
            "2026-12-01T01:20:00Z; no round: it runs from its --begin time");
  EXPECT_EQ(read_market_mark(locked)->locked, 10 * U);
  EXPECT_FALSE(read_market_mark(locked)->bid);
  EXPECT_FALSE(read_market_mark(locked)->matched);
  EXPECT_FALSE(read_market_mark(won)->locked);
}

TEST(MarketStatusTest, OwnJobsFromSqueuesFixedWidths) {
  auto pad = [](std::string v, size_t w) { return v + std::string(w - v.size(), ' '); };
  const std::string out =
      pad("1234", 20) + pad("R", 4) +
      "[planc:market] bid 15.00 CNY/card-hour; matched at 9.00 CNY/card-hour in the round at T\n" +
      pad("1235", 20) + pad("PD", 4) + "admin: vip | [planc:market] bid 9.00 CNY/card-hour; x\n" +
      pad("1236", 20) + pad("PD", 4) + "[planc:fallback] a preempted run comes back in P1\n" +
      pad("1237", 20) + pad("PD", 4) + "\n";
  auto jobs = parse_own_market_jobs(out);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job_id, "1234");
  EXPECT_EQ(jobs[0].state, "R");
  EXPECT_EQ(jobs[0].mark,
            "bid 15.00 CNY/card-hour; matched at 9.00 CNY/card-hour in the round at T");
  EXPECT_EQ(jobs[1].job_id, "1235");
  EXPECT_EQ(jobs[1].mark, "bid 9.00 CNY/card-hour; x");
}

TEST(MarketRequestTest, ABidAndALockTogetherAreRefused) {
  MarketRequest r = request("P2");
  r.bid_text = "12";
  r.lock_price = true;
  r.begin = 1800000000 + 3600;
  EXPECT_EQ(check_market_request(r, 1800000000, MarketConfig{}).error,
            "--bid and --lock-price together: a locked booking pays the floor at booking and "
            "takes part in no round; give one of them");
}

TEST(MarketReleaseTest, ABidNotMatchedYetIsNotReleasedByHand) {
  const std::string waiting = market_mark_waiting(15 * U, "CNY", 1000);
  auto why = market_release_refusal(waiting, 42, 900);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why,
            "JobId=42 bids in the P2 market: the round it wins releases it (rounds every 15 min, "
            "the next at :00, :15, :30 or :45 UTC); it cannot be released by hand.  To run it "
            "outside the market, cancel it and submit it to another tier");
  // The same job after a lost round (its mark says so): still refused.
  MarketRound r = clear_market({bid(42, 8, 9 * U)}, 0, 6 * U, 20 * U);
  std::string lost = market_mark_result(r.results[0], 9 * U, r, "CNY", 1000, 900);
  EXPECT_TRUE(market_release_refusal(lost, 42, 900).has_value()) << lost;
  // Matched, a locked booking, or no market mark: not the market's hold.
  MarketRound won = clear_market({bid(42, 8, 9 * U)}, 8, 6 * U, 20 * U);
  EXPECT_FALSE(market_release_refusal(
                   market_mark_result(won.results[0], 9 * U, won, "CNY", 1000, 900), 42, 900)
                   .has_value());
  EXPECT_FALSE(
      market_release_refusal(market_mark_locked(10 * U, "CNY", 1000), 42, 900).has_value());
  EXPECT_FALSE(market_release_refusal("held by the admin", 42, 900).has_value());
  EXPECT_FALSE(market_release_refusal("", 42, 900).has_value());
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

MarketBid typed(uint32_t id, uint32_t gpus, Micros price, std::string type) {
  MarketBid b;
  b.job_id = id;
  b.gpus = gpus;
  b.bid = price;
  b.gpu_type = std::move(type);
  b.submitted = 100 + id;
  return b;
}

TEST(MarketClearingTest, OneMarketPerGpuType) {
  Prices prices;
  prices.default_card_hour = 20 * U;
  prices.card_hour = {{"h800", 20 * U}, {"a100", 12 * U}};
  MarketFloors floors;
  floors.default_floor = 8 * U;
  floors.by_type = {{"h800", 10 * U}, {"a100", 5 * U}};
  // 8 free H800s, 16 free A100s, 24 free in all.
  MarketOffer offer;
  offer.by_type = {{"h800", 8}, {"a100", 16}};
  offer.total = 24;
  // Two H800 bids for room for one; an A100 bid of 6 that the H800 floor
  // would have refused; an untyped bid that takes what is left.
  auto rounds = clear_markets({typed(1, 8, 15 * U, "h800"), typed(2, 8, 12 * U, "h800"),
                               typed(3, 8, 6 * U, "a100"), typed(4, 8, 9 * U, "")},
                              offer, floors, prices);
  ASSERT_EQ(rounds.size(), 3u);
  EXPECT_EQ(rounds[0].gpu_type, "a100");  // typed markets by name, then default
  EXPECT_EQ(rounds[1].gpu_type, "h800");
  EXPECT_EQ(rounds[2].gpu_type, "default");
  const MarketRound& a100 = rounds[0].round;
  EXPECT_EQ(a100.capacity, 16u);
  EXPECT_EQ(a100.floor, 5 * U);
  EXPECT_EQ(a100.list, 12 * U);
  ASSERT_EQ(a100.results.size(), 1u);
  EXPECT_EQ(a100.results[0].index, 2u);  // the index in clear_markets' bids
  EXPECT_EQ(a100.results[0].outcome, BidOutcome::kWon);
  EXPECT_EQ(a100.results[0].pays, 5 * U);  // every bid won: the A100 floor
  const MarketRound& h800 = rounds[1].round;
  EXPECT_EQ(h800.capacity, 8u);
  ASSERT_EQ(h800.results.size(), 2u);
  EXPECT_EQ(h800.results[0].job_id, 1u);
  EXPECT_EQ(h800.results[0].pays, 12 * U);
  EXPECT_EQ(h800.results[1].outcome, BidOutcome::kNoRoom);
  // The default market gets what the typed winners left: 24 - 8 - 8.
  const MarketRound& any = rounds[2].round;
  EXPECT_EQ(any.capacity, 8u);
  EXPECT_EQ(any.floor, 8 * U);
  ASSERT_EQ(any.results.size(), 1u);
  EXPECT_EQ(any.results[0].index, 3u);
  EXPECT_EQ(any.results[0].outcome, BidOutcome::kWon);
}

TEST(MarketClearingTest, TypedCapacityNeverExceedsTheWholeAndUntypedClustersHaveOneMarket) {
  Prices prices;
  prices.default_card_hour = 20 * U;
  MarketFloors floors;
  floors.default_floor = 8 * U;
  // Matched jobs of no type set aside GPUs that are also H800s: the H800
  // market is offered at most what is free in all, and a negative figure
  // (more set aside than free) offers nothing.
  MarketOffer offer;
  offer.by_type = {{"h800", 16}, {"a100", -8}};
  offer.total = 8;
  auto rounds = clear_markets({typed(1, 8, 15 * U, "h800"), typed(2, 8, 15 * U, "a100")}, offer,
                              floors, prices);
  ASSERT_EQ(rounds.size(), 2u);  // no untyped bid, typed markets exist: no default round
  EXPECT_EQ(rounds[0].gpu_type, "a100");
  EXPECT_EQ(rounds[0].round.capacity, 0u);
  EXPECT_EQ(rounds[0].round.results[0].outcome, BidOutcome::kNoRoom);
  EXPECT_EQ(rounds[1].round.capacity, 8u);
  EXPECT_EQ(rounds[1].round.floor, 8 * U);  // no price of its own: the default floor and list
  EXPECT_EQ(rounds[1].round.list, 20 * U);
  // A cluster without GPU types: one default market, empty or not.
  MarketOffer plain;
  plain.total = 16;
  auto one = clear_markets({}, plain, floors, prices);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].gpu_type, "default");
  EXPECT_EQ(one[0].round.capacity, 16u);
  // A bid naming a type no node has: its own market, nothing to offer.
  auto none = clear_markets({typed(5, 8, 15 * U, "b200")}, plain, floors, prices);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].gpu_type, "b200");
  EXPECT_EQ(none[0].round.results[0].outcome, BidOutcome::kNoRoom);
}

}  // namespace
}  // namespace planc
