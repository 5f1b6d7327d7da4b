// The bill table in PostgreSQL, through libpq.  No Slurm header here: used by
// jobcomp/planc inside slurmctld (writer thread; and `sacct -c` in the
// client) and by planc-bill.
//
// A BillStore is one connection; not thread-safe, use one per thread.
// Nothing here retries.  Every failure carries a code (common/result.h)
// the caller decides on, as libpqxx splits its errors:
//   kRetryable  no answer or a broken connection, a timeout or cancel, a
//               serialization failure, the server out of resources (SQLSTATE
//               classes 08, 40, 53, 57, 58, or none): the same statement
//               may pass later (the spool worker keeps its file and backs
//               off).  A failed COMMIT is in doubt, and retried as such:
//               every write is idempotent (the bill key).
//   kRefused    PostgreSQL refused the data (class 22 data exception, 23
//               constraint violation): the same bills will be refused for
//               ever (the spool sets them aside).
//   kInvalid    anything else (class 42: a missing column or privilege, a
//               migration not applied): an admin must act; the spool keeps
//               its files meanwhile, as for kRetryable.
// Every statement is parameterised or a COPY (data never becomes SQL text).
#ifndef PLANC_COMMON_BILL_STORE_H_
#define PLANC_COMMON_BILL_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/bill_schema.h"
#include "common/billing.h"
#include "common/result.h"

struct pg_conn;
struct pg_result;

namespace planc {

struct BillFilter {
  std::vector<uint32_t> uids;
  std::vector<std::string> users;
  std::vector<std::string> accounts;
  std::vector<uint32_t> job_ids;
  // With job_ids: an id also names every task of the array and every
  // component of the heterogeneous job it is the id of (as sacct -j 7).
  bool whole_jobs = false;
  // One task of an array (7_3), one component of a heterogeneous job (7+1).
  std::vector<std::pair<uint32_t, uint32_t>> array_tasks, het_components;
  std::vector<std::string> states;  // COMPLETED, PREEMPTED, ...
  std::vector<std::string> partitions;
  int64_t start = 0;        // segments still running at or after start (0: any)
  int64_t end = 0;          // segments started at or before end (0: any)
  bool unmeasured = false;  // only bills planc-bill measure has not measured yet
};

// Bills jobcomp/planc's worker writes in one transaction, at most: a spool
// file with more (a backlog) is stored in batches of this many, each priced
// while the one before is written.
inline constexpr size_t kBillsPerTransaction = 5000;
// Bills whose hours BillStore::rollup() adds to the hourly totals in one
// transaction, when there are that many (it reads their hour columns into
// memory, about 100 bytes a bill).
inline constexpr size_t kRollupBillsPerTransaction = 50000;

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
  // Errors are coded as above; a kRetryable one also drops the connection
  // (the next call connects again).
  Result<size_t> write(const std::vector<Bill>& bills, const std::string& source);
  // The same with the batch's COPY text made already (bill_batch).
  Result<size_t> write(const BillBatch& batch);
  // On a database of schema 11 or later (sql/0011_hourly_rollup.sql) write()
  // stores the bills only, and their hours are added to planc.usage_hourly
  // by rollup() afterwards; on an older one write() adds them itself.

  // What rollup() did.
  struct Rollup {
    size_t bills = 0;      // bills whose hours it added
    size_t hour_rows = 0;  // planc.usage_hourly rows it added to or made
    int64_t last_seq = 0;  // bills are counted up to this number now
  };
  // Adds the hour slices of the bills stored since the last rollup (those
  // of the next `max_bills` numbers stored, at most) to planc.usage_hourly
  // and moves planc.rollup_state past them, in one transaction, so each
  // bill is counted once; call it until it adds none.  It waits for bill writers
  // in flight (an advisory lock) and makes them wait until it commits.
  // Reads at most `max_bills` bills' hour columns into memory.  Nothing to
  // add, or a database before schema 11: {}.  The role needs what
  // planc_writer has.
  Result<Rollup> rollup(size_t max_bills);
  // Whether this database has the hourly totals added by rollup() (asked
  // once a connection; false when it cannot tell).
  bool rolls_up_hours();

  // Sets the measured columns (common/bill_schema.h, `measured`) of each
  // bill, found by its key, in one transaction; a bill already measured
  // or not stored is left alone.  Returns how many bills changed.  The
  // role needs UPDATE on those columns (planc_writer has it, sql/0003).
  Result<size_t> record_usage(const std::vector<Bill>& bills);

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
  // The failure of the statement whose result is `r` (may be null), coded
  // by its SQLSTATE (none: no answer, kRetryable); `what` begins the message.
  Result<bool> failed(const char* what, const pg_result* r);
  // Whether the database has planc.longest_run() (sql/0010); asked once a
  // connection.
  bool has_longest_run();
  std::string conninfo_;
  std::string as_user_;
  pg_conn* conn_ = nullptr;
  bool staged_ = false;      // temp staging tables exist on this connection
  int64_t months_day_ = -1;  // the UTC day (Unix days) the month partitions were made
  bool longest_run_known_ = false, has_longest_run_ = false;
  bool rollup_known_ = false, rolls_up_ = false;
  bool numbering_ = false;     // SET planc.hours_later on this connection
  std::string last_sqlstate_;  // of the last COPY
};

// The code of a failure with this SQLSTATE ("" when the server did not
// answer), as above.
ErrorCode error_code_of_sqlstate(const std::string& sqlstate);

// A PostgreSQL text[] literal of `v`, every element quoted and escaped, for
// a parameter such as `= ANY($1::text[])`.
std::string pg_text_array(const std::vector<std::string>& v);

}  // namespace planc

#endif  // PLANC_COMMON_BILL_STORE_H_
