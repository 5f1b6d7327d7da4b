#include "common/market_record.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

constexpr Micros U = kMicrosPerUnit;

MarketRoundRecord three_bids() {
  // The integration test's round: 15, 12 and 9 for room for two 8-GPU
  // jobs; the third owner's name has a tab and a newline in it.
  auto bid = [](uint32_t id, Micros price, time_t submitted) {
    MarketBid b;
    b.job_id = id;
    b.gpus = 8;
    b.bid = price;
    b.submitted = submitted;
    return b;
  };
  std::vector<MarketBid> bids = {bid(3, 9 * U, 1003), bid(1, 15 * U, 1001), bid(2, 12 * U, 1002)};
  std::vector<std::pair<std::string, std::string>> owners = {
      {"pcbob", "acct-spot"}, {"pcalice", "acct-lease"}, {"x\ty\nz", "acct\\odd"}};
  MarketRound r = clear_market(bids, 16, 32, 6 * U, 20 * U, 2000, 3600);
  return make_round_record(2000, 310, bids, owners, r);
}

TEST(MarketRecordTest, TheRoundAsClearedWithItsOwners) {
  MarketRoundRecord rec = three_bids();
  EXPECT_EQ(rec.at, 2000);
  EXPECT_EQ(rec.gpu_type, "default");
  EXPECT_EQ(rec.capacity, 16u);
  EXPECT_EQ(rec.allocated, 16u);
  EXPECT_EQ(rec.vacancy_permille, 310u);
  EXPECT_EQ(rec.floor, 6 * U);
  EXPECT_EQ(rec.list, 20 * U);
  EXPECT_EQ(rec.clearing, 9 * U);
  ASSERT_EQ(rec.bids.size(), 3u);
  // In rank order: 15 and 12 won and pay the clearing price, 9 was outbid.
  EXPECT_EQ(rec.bids[0].job_id, 1u);
  EXPECT_EQ(rec.bids[0].user, "pcalice");
  EXPECT_EQ(rec.bids[0].account, "acct-lease");
  EXPECT_EQ(rec.bids[0].outcome, BidOutcome::kWon);
  EXPECT_EQ(rec.bids[0].pays, 9 * U);
  EXPECT_EQ(rec.bids[0].submitted, 1001);
  EXPECT_EQ(rec.bids[1].job_id, 2u);
  EXPECT_EQ(rec.bids[1].pays, 9 * U);
  EXPECT_EQ(rec.bids[2].job_id, 3u);
  EXPECT_EQ(rec.bids[2].user, "pcbob");
  EXPECT_EQ(rec.bids[2].outcome, BidOutcome::kOutbid);
  EXPECT_EQ(rec.bids[2].pays, 0);
}

TEST(MarketRecordTest, TheFileReadsBackAsWritten) {
  MarketRoundRecord rec = three_bids();
  rec.bids[1].bid.reset();  // no --bid
  rec.vacancy_permille.reset();
  auto back = parse_round(serialize_round(rec));
  ASSERT_TRUE(back.ok()) << back.error();
  const MarketRoundRecord& b = back.value();
  EXPECT_EQ(b.at, rec.at);
  EXPECT_FALSE(b.vacancy_permille.has_value());
  EXPECT_EQ(b.clearing, rec.clearing);
  ASSERT_EQ(b.bids.size(), 3u);
  for (size_t i = 0; i < 3; i++) {
    EXPECT_EQ(b.bids[i].job_id, rec.bids[i].job_id);
    EXPECT_EQ(b.bids[i].user, rec.bids[i].user);  // tabs and newlines kept in one field
    EXPECT_EQ(b.bids[i].account, rec.bids[i].account);
    EXPECT_EQ(b.bids[i].bid, rec.bids[i].bid);
    EXPECT_EQ(b.bids[i].outcome, rec.bids[i].outcome);
    EXPECT_EQ(b.bids[i].pays, rec.bids[i].pays);
  }
  EXPECT_EQ(round_file_name(rec), "round-2000-default.rec");
}

TEST(MarketRecordTest, DamagedFilesAreRefusedNeverHalfRead) {
  const std::string good = serialize_round(three_bids());
  struct Case {
    const char* what;
    std::string text;
    const char* says;
  };
  std::string flipped = good;
  flipped[good.find("pcbob")] = 'q';
  const Case cases[] = {
      {"empty", "", "no round record"},
      {"torn last line", good.substr(0, good.size() - 3), "line 4"},
      {"a bid record lost", good.substr(0, good.rfind('\n', good.size() - 2) + 1),
       "a file cut short"},
      {"a changed byte", flipped, "checksum"},
      {"a bid before its round", good.substr(good.find('\n') + 1), "not a planc-round-1 record"},
  };
  for (const Case& c : cases) {
    auto r = parse_round(c.text);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.code(), ErrorCode::kCorrupt) << c.what;
    EXPECT_NE(r.error().find(c.says), std::string::npos) << c.what << ": " << r.error();
  }
}

TEST(MarketRecordTest, OutcomeWordsRoundTrip) {
  for (BidOutcome o :
       {BidOutcome::kWon, BidOutcome::kOutbid, BidOutcome::kNoRoom, BidOutcome::kBelowFloor})
    EXPECT_EQ(parse_bid_outcome(bid_outcome_word(o)), o);
  EXPECT_FALSE(parse_bid_outcome("lost").has_value());
  MarketRoundRecord odd;
  odd.at = 5;
  odd.gpu_type = "h800/../x";
  EXPECT_EQ(round_file_name(odd), "round-5-h800____x.rec");
}

}  // namespace
}  // namespace planc
