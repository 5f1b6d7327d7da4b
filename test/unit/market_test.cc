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
  // --begin=now (or in the past, or before the next interval) would skip
  // the round the job would otherwise wait for.
  for (time_t begin : {now, now - 60, now + 899}) {
    r.begin = begin;
    EXPECT_EQ(check(r).error,
              "--lock-price: --begin must be at least one market interval (15 min) ahead: a "
              "booking locks the price for a later start; to run now, bid in the next round "
              "(leave --lock-price out)");
  }
  r.begin = now + 900;
  EXPECT_TRUE(check(r).ok);
  r.begin = now + 2 * 3600;
  EXPECT_TRUE(check(r).ok);
  // Bids are money: whole cents, and what the user typed is shown printable.
  r = request("P2");
  r.bid_text = "12.345";
  EXPECT_EQ(check(r).error,
            "--bid=12.345 has more than two decimals: prices are in whole cents of CNY, e.g. "
            "--bid=12.34");
  r.bid_text = "1\n2\x1b[31m";
  EXPECT_EQ(check(r).error,
            "--bid=1?2?[31m is not a price: give a card-hour price in CNY, e.g. --bid=12.50");
  r.bid_text = std::string(100, '9');
  EXPECT_EQ(check(r).error.substr(0, 47), "--bid=" + std::string(32, '9') + "... is no");
  // Job arrays and heterogeneous jobs cannot bid while the market is open.
  r = request("P2");
  r.market_open = true;
  r.array = true;
  EXPECT_EQ(check(r).error,
            "job arrays and heterogeneous jobs cannot bid in the P2 market (each needs a round of "
            "its own): submit the tasks as separate jobs, or use another tier");
  r.market_open = false;
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
  IdleMeter m;
  auto sample = [&](time_t t, uint32_t idle, uint32_t pool) {
    m.observe(t, idle, pool);
    return k.sample(t, m, cfg);
  };
  EXPECT_EQ(k.floors().next_round, 1020);
  EXPECT_EQ(k.floors().default_floor, 10 * U);  // CardHourPriceFloor to start
  EXPECT_EQ(k.floors().by_type.at("h800"), 10 * U);
  EXPECT_FALSE(sample(1000, 32, 32));
  EXPECT_FALSE(sample(1010, 32, 32));
  // All idle since the start: the curve's flat end, 0.6 x 10 = 6 (= the minimum).
  EXPECT_TRUE(sample(1020, 32, 32));
  EXPECT_EQ(k.floors().vacancy, 1000u);
  EXPECT_EQ(k.floors().default_floor, 6 * U);
  EXPECT_EQ(k.floors().next_round, 1080);
  // 30% idle over the next interval: -20%.
  EXPECT_FALSE(sample(1020, 0, 10));
  EXPECT_FALSE(sample(1050, 3, 10));
  sample(1080, 3, 10);
  EXPECT_EQ(k.floors().vacancy, 150u);  // half the time 0%, half 30%
  EXPECT_EQ(k.floors().default_floor, 9 * U);
  // The minimum holds with a steeper curve.
  cfg.market.floor_curve = {{0, 1000}, {100, 100}};
  sample(1140, 3, 10);
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

TEST(MarketStatusTest, OwnJobsFromSqueuesFixedWidths) {
  auto pad = [](std::string v, size_t w) { return v + std::string(w - v.size(), ' '); };
  const std::string matched =
      "[planc:market] matched price=9.00 currency=CNY round=2026-12-01T01:15:00Z "
      "start-by=2026-12-01T01:30:00Z run=0 gpus=8 nodes=1 type=h800 account=acct-spot "
      "partition=gpu bid=15.00";
  const std::string out =
      pad("1234", 20) + pad("R", 4) + matched + "\n" + pad("1235", 20) + pad("PD", 4) +
      "admin: vip | [planc:market] waiting bid=9.00 currency=CNY reason=outbid "
      "since=2026-12-01T01:15:00Z\n" +
      pad("1236", 20) + pad("PD", 4) + "[planc:fallback] a preempted run comes back in P1\n" +
      pad("1237", 20) + pad("PD", 4) + "[planc:market] waiting bid=9.00 torn\n" + pad("1238", 20) +
      pad("PD", 4) + "\n";
  auto jobs = parse_own_market_jobs(out);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job_id, "1234");
  EXPECT_EQ(jobs[0].state, "R");
  EXPECT_EQ(jobs[0].life.state, MarketState::kMatched);
  EXPECT_EQ(describe_life(jobs[0].life, "CNY", 900),
            "bid 15.00 CNY/card-hour; matched at 9.00 CNY/card-hour in the round at "
            "2026-12-01T01:15:00Z for its run 0 (starts by 2026-12-01T01:30:00Z)");
  EXPECT_EQ(jobs[1].job_id, "1235");
  EXPECT_EQ(describe_life(jobs[1].life, "CNY", 900),
            "bid 9.00 CNY/card-hour; not matched in the last round: outbid (rounds every 15 min)");
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

}  // namespace
}  // namespace planc

namespace planc {
namespace {}  // namespace
}  // namespace planc
