#include "common/market_store.h"

#include <vector>

namespace planc {

namespace {

// A PostgreSQL array literal of integers; none is NULL.
template <class T, class Get>
std::string int_array(const std::vector<T>& v, Get get) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); i++) {
    if (i) out += ',';
    std::optional<int64_t> x = get(v[i]);
    out += x ? std::to_string(*x) : "NULL";
  }
  return out + "}";
}

// One statement: a data-modifying CTE commits with the statement or not at
// all.  The bids go in only when the round itself was new.
constexpr const char* kInsert = R"SQL(
WITH r AS (
  INSERT INTO planc.market_round (cluster, round_at, gpu_type, capacity_gpus, allocated_gpus,
                                  vacancy_permille, floor_micros, list_micros, clearing_micros,
                                  bids, winners)
  VALUES ($1, to_timestamp($2::bigint), $3, $4::integer, $5::integer, NULLIF($6, '')::integer,
          $7::bigint, $8::bigint, NULLIF($9, '')::bigint, $10::integer, $11::integer)
  ON CONFLICT DO NOTHING
  RETURNING 1),
b AS (
  INSERT INTO planc.market_bid (cluster, round_at, gpu_type, job_id, user_name, account,
                                bid_micros, gpus, submitted, outcome, pays_micros)
  SELECT $1, to_timestamp($2::bigint), $3, u.job_id, u.user_name, u.account, u.bid, u.gpus,
         to_timestamp(u.submitted), u.outcome, u.pays
    FROM unnest($12::bigint[], $13::text[], $14::text[], $15::bigint[], $16::integer[],
                $17::bigint[], $18::text[], $19::bigint[])
         AS u(job_id, user_name, account, bid, gpus, submitted, outcome, pays)
   WHERE EXISTS (SELECT 1 FROM r)
  RETURNING 1)
SELECT (SELECT count(*) FROM r)::text, (SELECT count(*) FROM b)::text
)SQL";

}  // namespace

Result<bool> store_market_round(BillStore& store, const std::string& cluster,
                                const MarketRoundRecord& r) {
  using B = MarketBidRecord;
  uint32_t winners = 0;
  std::vector<std::string> users, accounts, outcomes;
  for (const B& b : r.bids) {
    if (b.outcome == BidOutcome::kWon) winners++;
    users.push_back(b.user);
    accounts.push_back(b.account);
    outcomes.push_back(bid_outcome_word(b.outcome));
  }
  std::vector<std::string> params = {
      cluster,
      std::to_string(static_cast<int64_t>(r.at)),
      r.gpu_type,
      std::to_string(r.capacity),
      std::to_string(r.allocated),
      r.vacancy_permille ? std::to_string(*r.vacancy_permille) : "",
      std::to_string(r.floor),
      std::to_string(r.list),
      r.clearing ? std::to_string(*r.clearing) : std::string(),
      std::to_string(r.bids.size()),
      std::to_string(winners),
      int_array(r.bids, [](const B& b) { return std::optional<int64_t>(b.job_id); }),
      pg_text_array(users),
      pg_text_array(accounts),
      int_array(r.bids,
                [](const B& b) { return b.bid ? std::optional<int64_t>(*b.bid) : std::nullopt; }),
      int_array(r.bids, [](const B& b) { return std::optional<int64_t>(b.gpus); }),
      int_array(r.bids, [](const B& b) { return std::optional<int64_t>(b.submitted); }),
      pg_text_array(outcomes),
      int_array(r.bids, [](const B& b) { return std::optional<int64_t>(b.pays); }),
  };
  auto rows = store.rows(kInsert, params);
  if (!rows.ok()) return Result<bool>::failure(rows.code(), rows.error());
  return !rows.value().empty() && !rows.value()[0].empty() && rows.value()[0][0] == "1";
}

}  // namespace planc
