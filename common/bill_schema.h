// The bill's columns, in one table.
//
// planc.bill (sql/NNNN_*.sql), the spool's record (serialize_segment), the
// COPY row and the SELECT of common/bill_store.h, `sacct -c`'s fields
// (jobcomp_p_get_jobs) and `planc-bill list` are all made from
// bill_columns(): adding a bill column is one entry here, one migration
// that creates it, and the tests.  test_billing.py compares the table with
// the columns the migrations create in PostgreSQL (`planc-bill columns`).
//
// An entry says how the value is held (kind), where it comes from (a
// Segment field, or a Bill field the pricing fills, or derived), whether it
// is NULL for some value, which record version of the spool first carried
// it, and where sacct -c and planc-bill list show it.
//
// The spool record is the entries with a spool version, in table order:
// a record of version N holds exactly the fields of versions 1..N, so a
// new spooled field is appended at the end of the table with the next
// version, and older records are still read (the new field keeps its
// default).
//
// Pure (no Slurm, no libpq); the table is immutable: thread-safe.
#ifndef PLANC_COMMON_BILL_SCHEMA_H_
#define PLANC_COMMON_BILL_SCHEMA_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include "common/billing.h"
#include "common/result.h"

namespace planc {

// How a value is held in memory, and so how it is written to and read from
// PostgreSQL and the spool.
enum class ColumnKind {
  kText,       // text
  kInt,        // integer or bigint
  kTime,       // timestamptz; unix seconds in memory
  kMicros,     // numeric, 6 decimals; an integer of 1e-6 in memory
  kPermille,   // numeric, 3 decimals; an integer of 1e-3 in memory
  kMibAsGib,   // numeric GiB (exact, 10 decimals); an integer of MiB in memory
  kServer,     // set by PostgreSQL (a DEFAULT): never written or read here
  kSpoolText,  // in the spool record only, not a column: text
  kSpoolInt,   //   ... a number
};

// The jobcomp_job_rec_t field `sacct -c` shows a column in
// (src/common/slurm_jobcomp.h); the plugin knows the struct.
enum class SacctField {
  kNone,
  kCluster,
  kJobId,
  kSubmit,
  kStart,
  kEnd,
  kUid,
  kUser,
  kAccount,
  kQos,
  kPartition,
  kNodes,
  kNodeCount,
  kState,
  kExitCode,
  kJobName,
  kTresReq,
  kCpus,
};

// One value: a number, or text (a view into the bill, or owned).
class FieldValue {
 public:
  FieldValue(int64_t n) : v_(n) {}           // NOLINT: implicit on purpose
  FieldValue(std::string_view t) : v_(t) {}  // NOLINT
  static FieldValue owned(std::string s) { return FieldValue(std::move(s), 0); }
  bool is_text() const { return !std::holds_alternative<int64_t>(v_); }
  int64_t num() const { return std::get<int64_t>(v_); }
  std::string_view text() const {
    if (auto* s = std::get_if<std::string>(&v_)) return *s;
    return std::get<std::string_view>(v_);
  }

 private:
  FieldValue(std::string s, int) : v_(std::move(s)) {}
  std::variant<int64_t, std::string_view, std::string> v_;
};

struct BillColumn {
  const char* name;  // planc.bill's column; for kSpool*, the record field's name
  ColumnKind kind;
  const char* sql_type;   // information_schema.columns.data_type ("" when no column)
  bool nullable = false;  // NULL in planc.bill when the value is null_value ("" for text)
  int64_t null_value = 0;
  int spool_since = 0;  // record version that added it; 0: not in the spool
  // Where the value lives: a Segment field (seg_*), or the Bill (bill_*;
  // `source` is the writer, "jobcomp" or "reconcile").  A null setter: not
  // read back (derived from other columns, or the writer's own).
  FieldValue (*seg_get)(const Segment&) = nullptr;
  bool (*seg_set)(Segment&, const FieldValue&) = nullptr;
  FieldValue (*bill_get)(const Bill&, std::string_view source) = nullptr;
  bool (*bill_set)(Bill&, const FieldValue&) = nullptr;
  SacctField sacct = SacctField::kNone;
  // planc-bill list's field name (its header and what -o names), or not
  // listed; shown unless -o picks the fields when list_default.
  const char* list_label = nullptr;
  std::string (*show)(const Bill&) = nullptr;  // planc-bill list's text; null: by kind
  bool list_default = true;
  // Measured usage (the measured-usage track): NULL when jobcomp or
  // reconcile writes the bill, set afterwards by `planc-bill measure`'s
  // UPDATE (bill_measure_update_sql), the only columns it may change.
  bool measured = false;

  bool is_text() const { return kind == ColumnKind::kText || kind == ColumnKind::kSpoolText; }
  bool in_table() const { return kind != ColumnKind::kSpoolText && kind != ColumnKind::kSpoolInt; }
  bool written() const { return in_table() && kind != ColumnKind::kServer; }
  bool read_back() const { return written() && (seg_set || bill_set); }
};

std::span<const BillColumn> bill_columns();
const BillColumn* find_bill_column(std::string_view name);

// The column's value in `b` (`source`: the writer, for the source column).
FieldValue column_value(const BillColumn& c, const Bill& b, std::string_view source = "");

// --- PostgreSQL ---------------------------------------------------------------
// "cluster, job_id, ...": the columns a COPY writes, in table order.
std::string bill_copy_columns();
// One bill as a line of COPY text for bill_copy_columns().
std::string bill_copy_row(const Bill& b, std::string_view source);
void append_bill_copy_row(std::string& out, const Bill& b, std::string_view source);

// A batch of bills as the writer sends it to PostgreSQL, made before it is
// sent (the spool's worker makes the next while one is written): each key
// (cluster, job_id, start_time) once, the first of a duplicate kept (a
// replayed spool file beside its original), their COPY rows, and the COPY
// rows of their hourly totals.
struct BillBatch {
  std::vector<Bill> bills;
  std::vector<size_t> unique;  // indexes into bills, in order
  std::string copy_rows;       // bill_copy_row of each of `unique`
  std::string usage_rows;      // usage_copy_rows of `unique`
};
BillBatch bill_batch(std::vector<Bill> bills, std::string_view source);

// planc.usage_hourly's COPY rows for these bills (hour, cluster, account,
// user_name, tier, card_seconds, core_seconds, mem_gib_seconds,
// amount_micros, segments): their hour slices summed per hour, cluster,
// account, user and tier, so an upsert touches one row for each.
std::string usage_copy_rows(const std::vector<const Bill*>& bills);

// The same, added up one bill at a time (folding stored bills into the
// hourly totals reads them one row at a time).
class UsageTotals {
 public:
  void add(const Bill& b);  // its split_by_hour() slices
  std::string copy_rows() const;
  size_t rows() const { return usage_.size(); }

 private:
  struct Usage {
    int64_t card_micro_seconds = 0, core_seconds = 0, mem_mib_seconds = 0, amount_micros = 0;
    int64_t segments = 0;
  };
  using Key = std::tuple<int64_t, std::string, std::string, std::string, std::string>;
  std::map<Key, Usage> usage_;
};

// "cluster, account, user_name, ..." as bill_select_list() reads them: what
// split_by_hour() and an hourly row's key need of a stored bill.
std::string bill_hours_select_list();
// A Bill holding those (and Segment::ran, from the zero_reason) from one
// row of bill_hours_select_list()'s values.
Result<Bill> bill_hours_from_row(const std::vector<std::string_view>& row);

// "cluster, job_id, extract(epoch FROM start_time)::bigint, ...": what a
// SELECT reads back, one expression per read_back() column, in table order,
// each giving the in-memory value as text (NULL as the null value).
std::string bill_select_list();
// A Bill from one row of bill_select_list()'s values.
Result<Bill> bill_from_row(const std::vector<std::string>& row);

// The measured columns of one bill, found by its key: "UPDATE planc.bill SET
// measured_at = $4::timestamptz, ... WHERE cluster = $1 AND job_id =
// $2::bigint AND start_time = $3::timestamptz AND measured_at IS NULL",
// one parameter per measured column in table order after the key.  A bill
// already measured is left alone, so running measure again changes nothing.
std::string bill_measure_update_sql();
// Its parameters for `b`: the key, then each measured column's value as
// text, nullopt for NULL.
std::vector<std::optional<std::string>> bill_measure_params(const Bill& b);

// "2026-11-30 01:02:03+00" for COPY and parameters.
std::string pg_timestamp(int64_t unix_time);
void append_pg_timestamp(std::string& out, int64_t unix_time);
// Exact decimal GiB-seconds of MiB-seconds (1/1024 has 10 decimals).
std::string format_gib_seconds(int64_t mib_seconds);
void append_gib_seconds(std::string& out, int64_t mib_seconds);

// --- planc-bill list ----------------------------------------------------------
// The column's text in a listing: times as unix seconds (the tool shows
// them in the reader's time zone), micro-unit amounts with 6 decimals, a
// null value as "".
std::string show_column(const BillColumn& c, const Bill& b);
// How a listing shows the column: right-aligned and a JSON number
// (kNumber), a time (kTime), or text.
enum class ListType { kText, kNumber, kTime };
ListType column_list_type(const BillColumn& c);

}  // namespace planc

#endif  // PLANC_COMMON_BILL_SCHEMA_H_
