// Market rounds into PostgreSQL (planc.market_round and planc.market_bid,
// sql/0006): slurmctld/planc's recorder stores each round file through it.
// In libplanc_pg (libpq, no Slurm header).
#ifndef PLANC_COMMON_MARKET_STORE_H_
#define PLANC_COMMON_MARKET_STORE_H_

#include <string>

#include "common/bill_store.h"
#include "common/market_record.h"
#include "common/result.h"

namespace planc {

// Stores the round and its bids in one statement: all or nothing.  A round
// already stored (its key: cluster, time, GPU type) is left as it is and
// its bids are not added again, so storing a file twice (a crash between
// the commit and the file's removal) changes nothing.  Returns true when
// the round was new.  The role needs INSERT on both tables (planc_writer).
// Errors are coded as BillStore's (kRetryable: try again later; kRefused:
// the data was refused, set the file aside).
Result<bool> store_market_round(BillStore& store, const std::string& cluster,
                                const MarketRoundRecord& r);

}  // namespace planc

#endif  // PLANC_COMMON_MARKET_STORE_H_
