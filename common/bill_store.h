// The bill table in PostgreSQL, through libpq.  No Slurm header here: used by
// jobcomp/planc inside slurmctld (writer thread; and `sacct -c` in the
// client) and by planc-bill.
//
// A BillStore is one connection; not thread-safe, use one per thread.
// Nothing here retries: write() reports a broken connection as an error and
// the caller (the spool worker) keeps its records and tries again later.
// Every statement is parameterised or a COPY (data never becomes SQL text).
#ifndef PLANC_COMMON_BILL_STORE_H_
#define PLANC_COMMON_BILL_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/billing.h"
#include "common/result.h"

struct pg_conn;

namespace planc {

struct BillFilter {
  std::vector<uint32_t> uids;
  std::vector<std::string> users;
  std::vector<std::string> accounts;
  std::vector<uint32_t> job_ids;
  std::vector<std::string> states;      // COMPLETED, PREEMPTED, ...
  std::vector<std::string> partitions;
  int64_t start = 0;  // segments still running at or after start (0: any)
  int64_t end = 0;    // segments started at or before end (0: any)
};

class BillStore {
 public:
  // `conninfo`: a libpq connection string or "service=NAME"; empty means
  // libpq's defaults (PG* environment).  Connects lazily.
  // `as_user`, when set, replaces any user= in conninfo: readers connect as
  // themselves (sacct -c), whatever role slurmctld writes as.
  explicit BillStore(std::string conninfo, std::string as_user = "");
  ~BillStore();
  BillStore(const BillStore&) = delete;
  BillStore& operator=(const BillStore&) = delete;

  // Connects when not connected.  The error says what libpq said.
  Result<bool> connect();
  bool connected() const;
  void disconnect();

  // Stores bills and adds their hour slices to planc.usage_hourly, in one
  // transaction.  A bill whose key (cluster, job_id, start_time) is already
  // stored is skipped together with its slices, so a replay changes nothing.
  // The connection's role must bypass row-level security (COPY into a table
  // with RLS is refused otherwise): planc-bill sync-roles --writer does that.
  // Returns how many bills were new.  `source` is "jobcomp" or "reconcile".
  Result<size_t> write(const std::vector<Bill>& bills, const std::string& source);

  // SQLSTATE of the last failed statement ("" if none or no server answer).
  const std::string& last_sqlstate() const { return last_sqlstate_; }
  // True when PostgreSQL refused the last statement for its data: SQLSTATE
  // class 22 (data) or 23 (constraint).  Retrying the same batch will not
  // help; anything else (connection, timeout) may pass on a retry.
  bool last_refused_as_data() const {
    return last_sqlstate_.rfind("22", 0) == 0 || last_sqlstate_.rfind("23", 0) == 0;
  }

  // Bills matching the filter (and what row-level security lets this
  // connection's user see), oldest end first.
  Result<std::vector<Bill>> query(const BillFilter& f);

  // Runs a read-only parameterised query and returns rows of text values
  // (NULL as ""); for the report command.
  Result<std::vector<std::vector<std::string>>> rows(const std::string& sql,
                                                     const std::vector<std::string>& params,
                                                     std::vector<std::string>* columns = nullptr);

 private:
  Result<bool> exec(const char* sql);
  Result<bool> copy_in(const std::string& sql, const std::string& data);
  std::string conninfo_;
  std::string as_user_;
  pg_conn* conn_ = nullptr;
  bool staged_ = false;  // temp staging tables exist on this connection
  std::string last_sqlstate_;  // of the last COPY
};

// One bill as a line of COPY text for planc.bill's columns (kBillColumns);
// for benchmarks that compare with a raw COPY.
std::string bill_copy_row(const Bill& b, const std::string& source);
extern const char* const kBillColumns;

// A PostgreSQL text[] literal of `v`, every element quoted and escaped, for
// a parameter such as `= ANY($1::text[])`.
std::string pg_text_array(const std::vector<std::string>& v);

// "2026-11-30 01:02:03+00" for COPY and parameters.
std::string pg_timestamp(int64_t unix_time);

}  // namespace planc

#endif  // PLANC_COMMON_BILL_STORE_H_
