#include "common/market_record.h"

#include <cctype>

#include "common/record.h"

namespace planc {

namespace {

constexpr std::string_view kRoundTag = "planc-round-1";
constexpr std::string_view kBidTag = "planc-bid-1";

Result<MarketRoundRecord> corrupt(size_t line, const std::string& what) {
  return Result<MarketRoundRecord>::failure(ErrorCode::kCorrupt,
                                            "line " + std::to_string(line) + ": " + what);
}

bool non_negative(const RecordReader& rec, size_t i, int64_t* v) {
  return rec.num(i, v) && *v >= 0;
}

}  // namespace

const char* bid_outcome_word(BidOutcome o) {
  switch (o) {
    case BidOutcome::kWon:
      return "won";
    case BidOutcome::kOutbid:
      return "outbid";
    case BidOutcome::kNoRoom:
      return "no room";
    case BidOutcome::kBelowFloor:
      return "below floor";
    case BidOutcome::kTooLarge:
      return "too large";
    case BidOutcome::kHeldForLarger:
      return "held for larger";
    case BidOutcome::kNotEligible:
      return "not eligible";
  }
  return "outbid";
}

std::optional<BidOutcome> parse_bid_outcome(std::string_view word) {
  for (BidOutcome o :
       {BidOutcome::kWon, BidOutcome::kOutbid, BidOutcome::kNoRoom, BidOutcome::kBelowFloor,
        BidOutcome::kTooLarge, BidOutcome::kHeldForLarger, BidOutcome::kNotEligible})
    if (word == bid_outcome_word(o)) return o;
  return std::nullopt;
}

MarketRoundRecord make_round_record(time_t at, std::optional<uint32_t> vacancy_permille,
                                    const std::vector<MarketBid>& bids,
                                    const std::vector<std::pair<std::string, std::string>>& owners,
                                    const MarketRound& r) {
  MarketRoundRecord rec;
  rec.at = at;
  rec.capacity = r.capacity;
  rec.allocated = r.allocated;
  rec.vacancy_permille = vacancy_permille;
  rec.floor = r.floor;
  rec.list = r.list;
  rec.clearing = r.clearing;
  rec.bids.reserve(r.results.size());
  for (const BidResult& b : r.results) {
    // A bid that took no part (not eligible) is not one of the round's.
    if (b.index >= bids.size() || b.outcome == BidOutcome::kNotEligible) continue;
    const MarketBid& in = bids[b.index];
    MarketBidRecord out;
    out.job_id = in.job_id;
    if (b.index < owners.size()) {
      out.user = owners[b.index].first;
      out.account = owners[b.index].second;
    }
    out.bid = in.bid;
    out.gpus = in.gpus;
    out.submitted = in.submitted;
    out.outcome = b.outcome;
    out.pays = b.outcome == BidOutcome::kWon ? b.pays : 0;
    rec.bids.push_back(std::move(out));
  }
  return rec;
}

std::string serialize_round(const MarketRoundRecord& r) {
  std::string out = RecordWriter(kRoundTag)
                        .add(static_cast<int64_t>(r.at))
                        .add(r.gpu_type)
                        .add(static_cast<int64_t>(r.capacity))
                        .add(static_cast<int64_t>(r.allocated))
                        .add(r.vacancy_permille ? static_cast<int64_t>(*r.vacancy_permille) : -1)
                        .add(r.floor)
                        .add(r.list)
                        .add(r.clearing ? *r.clearing : -1)
                        .add(static_cast<int64_t>(r.bids.size()))
                        .line();
  for (const MarketBidRecord& b : r.bids)
    out += RecordWriter(kBidTag)
               .add(static_cast<int64_t>(b.job_id))
               .add(b.user)
               .add(b.account)
               .add(b.bid ? *b.bid : -1)
               .add(static_cast<int64_t>(b.gpus))
               .add(static_cast<int64_t>(b.submitted))
               .add(bid_outcome_word(b.outcome))
               .add(b.pays)
               .line();
  return out;
}

Result<MarketRoundRecord> parse_round(std::string_view text) {
  MarketRoundRecord r;
  bool have_round = false;
  int64_t declared = 0;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return corrupt(line_no + 1, "no newline (torn write)");
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    line_no++;
    auto parsed = RecordReader::parse(line);
    if (!parsed.ok()) return corrupt(line_no, parsed.error());
    const RecordReader& rec = parsed.value();
    int64_t v[9] = {};
    if (!have_round) {
      if (rec.size() != 10 || rec.str(0) != kRoundTag)
        return corrupt(line_no, "not a " + std::string(kRoundTag) + " record");
      for (size_t i : {1, 3, 4, 6, 7, 9})
        if (!non_negative(rec, i, &v[i - 1])) return corrupt(line_no, "field " + std::to_string(i));
      if (!rec.num(8, &v[7]) || v[7] < -1) return corrupt(line_no, "field 8");
      if (!rec.num(5, &v[4]) || v[4] < -1 || v[4] > 1000) return corrupt(line_no, "vacancy");
      r.at = static_cast<time_t>(v[0]);
      r.gpu_type = rec.str(2);
      r.capacity = static_cast<uint32_t>(v[2]);
      r.allocated = static_cast<uint32_t>(v[3]);
      if (v[4] >= 0) r.vacancy_permille = static_cast<uint32_t>(v[4]);
      r.floor = v[5];
      r.list = v[6];
      if (v[7] >= 0) r.clearing = v[7];
      declared = v[8];
      have_round = true;
      continue;
    }
    if (rec.size() != 9 || rec.str(0) != kBidTag)
      return corrupt(line_no, "not a " + std::string(kBidTag) + " record");
    MarketBidRecord b;
    int64_t id = 0, bid = 0, gpus = 0, submitted = 0, pays = 0;
    if (!non_negative(rec, 1, &id) || !rec.num(4, &bid) || bid < -1 ||
        !non_negative(rec, 5, &gpus) || !non_negative(rec, 6, &submitted) ||
        !non_negative(rec, 8, &pays))
      return corrupt(line_no, "a number field of the bid");
    auto outcome = parse_bid_outcome(rec.str(7));
    if (!outcome) return corrupt(line_no, "outcome '" + std::string(rec.str(7)) + "'");
    b.job_id = static_cast<uint32_t>(id);
    b.user = rec.str(2);
    b.account = rec.str(3);
    if (bid >= 0) b.bid = bid;
    b.gpus = static_cast<uint32_t>(gpus);
    b.submitted = static_cast<time_t>(submitted);
    b.outcome = *outcome;
    b.pays = pays;
    r.bids.push_back(std::move(b));
  }
  if (!have_round) return corrupt(1, "no round record (empty file)");
  if (static_cast<int64_t>(r.bids.size()) != declared)
    return corrupt(line_no, std::to_string(r.bids.size()) + " bid record(s), the round says " +
                                std::to_string(declared) + " (a file cut short)");
  return r;
}

std::string round_file_name(const MarketRoundRecord& r) {
  std::string type;
  for (char c : r.gpu_type)
    type += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  return "round-" + std::to_string(static_cast<int64_t>(r.at)) + "-" + type + ".rec";
}

}  // namespace planc
