// A P2 market round as it is recorded (issue 15, "Records"): what the round
// saw and decided, and every bid in it.  slurmctld/planc writes one file per
// round into StateSaveLocation/planc_market/ (atomically, with fsync) right
// after the clearing, and its recorder thread stores the file in PostgreSQL
// (planc.market_round and planc.market_bid, sql/0006) and removes it: a
// database that is down delays the records, a crash loses none that were
// written.
//
// The file is line records (common/record.h, each with its CRC): one
// "planc-round-1" record, then one "planc-bid-1" record per bid.  A file
// that does not parse is set aside, never half stored.
//
// Pure: no Slurm header, no clock, no I/O.  Thread-safe (no shared state).
#ifndef PLANC_COMMON_MARKET_RECORD_H_
#define PLANC_COMMON_MARKET_RECORD_H_

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/market.h"
#include "common/result.h"

namespace planc {

struct MarketBidRecord {
  uint32_t job_id = 0;
  std::string user;  // the job's owner (RLS: a user sees their own bids)
  std::string account;
  std::optional<Micros> bid;  // per card-hour; none: bids the list price
  uint32_t gpus = 0;
  time_t submitted = 0;
  BidOutcome outcome = BidOutcome::kOutbid;
  Micros pays = 0;  // winners: the price matched (the clearing price); else 0
};

struct MarketRoundRecord {
  time_t at = 0;                             // the round's time (the floor's update)
  std::string gpu_type = "default";          // the market's GPU type (clear_markets)
  uint32_t capacity = 0;                     // GPUs offered to P2
  uint32_t allocated = 0;                    // GPUs the winners take
  std::optional<uint32_t> vacancy_permille;  // over the interval; none: unknown
  Micros floor = 0, list = 0;
  std::optional<Micros> clearing;  // the highest a winner pays; none: nobody won
  std::vector<MarketBidRecord> bids;
};

// "won", "outbid", "no room", "below floor", "too large", "held for
// larger": the words the records, the database and `planc-bill market
// bids` use.  Bids that were not eligible took no part and are not
// recorded.
const char* bid_outcome_word(BidOutcome o);
std::optional<BidOutcome> parse_bid_outcome(std::string_view word);

// The record of a clearing: the round's figures from `r`, the bids from
// `bids` (clear_market's input, in the same order) with their owners.
// `owners[i]` is {user, account} of bids[i].
MarketRoundRecord make_round_record(time_t at, std::optional<uint32_t> vacancy_permille,
                                    const std::vector<MarketBid>& bids,
                                    const std::vector<std::pair<std::string, std::string>>& owners,
                                    const MarketRound& r);

std::string serialize_round(const MarketRoundRecord& r);
// Fails (kCorrupt) on a torn or damaged line, a missing round record, or a
// field that is not what it should be; the message names the line.
Result<MarketRoundRecord> parse_round(std::string_view text);

// The round's file name in the recorder's directory: "round-<at>-<gpu type>.rec",
// unique per round (a round key in the database is cluster, time, GPU type).
std::string round_file_name(const MarketRoundRecord& r);

}  // namespace planc

#endif  // PLANC_COMMON_MARKET_RECORD_H_
