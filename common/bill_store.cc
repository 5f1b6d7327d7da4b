#include "common/bill_store.h"

#include <libpq-fe.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <set>
#include <tuple>

#include "common/pg_text.h"

namespace planc {
namespace {

// Staging tables live for the connection; ON COMMIT DELETE ROWS empties
// them at the end of every batch.  stage_bill is used only when a batch
// holds a bill that is already stored (a replay).
constexpr const char* kStageSql =
    "CREATE TEMP TABLE IF NOT EXISTS stage_bill (LIKE planc.bill INCLUDING DEFAULTS)"
    "  ON COMMIT DELETE ROWS;"
    "CREATE TEMP TABLE IF NOT EXISTS stage_usage (LIKE planc.usage_hourly) ON COMMIT DELETE ROWS;";

// The month partitions from last month to three ahead (sql/0009), made
// when the writer connects and once a UTC day after; before that migration
// there is no such function and this does nothing.  A bill whose month has
// no partition is stored all the same (the default partition).
constexpr const char* kEnsureMonthsSql =
    "DO $$ BEGIN IF to_regprocedure('planc.ensure_months(integer)') IS NOT NULL THEN"
    " PERFORM planc.ensure_months(3); END IF; END $$";

// The hourly row's amount_minor is generated from amount_micros (schema
// 0002): it is rounded once from the hour's sum, never summed itself.
#define PLANC_USAGE_COLUMNS                                                                \
  "hour, cluster, account, user_name, tier, card_seconds, core_seconds, mem_gib_seconds, " \
  "amount_micros, segments"

// Replay path: only bills not stored yet; RETURNING names them.
constexpr const char* kInsertNewSql =
    "INSERT INTO planc.bill SELECT * FROM stage_bill"
    " ON CONFLICT (cluster, job_id, start_time) DO NOTHING"
    " RETURNING cluster, job_id, extract(epoch FROM start_time)::bigint";

constexpr const char* kUsageCopySql = "COPY stage_usage (" PLANC_USAGE_COLUMNS ") FROM STDIN";
// Folding bills into the hourly totals (sql/0011_hourly_rollup.sql): the
// lock planc.next_bill_seq() takes shared, taken exclusively.
constexpr const char* kRollupLockSql = "SELECT pg_advisory_xact_lock(hashtext('planc.bill_seq'))";
constexpr const char* kUsageUpsertSql =
    "INSERT INTO planc.usage_hourly AS u (" PLANC_USAGE_COLUMNS
    ")"
    " SELECT " PLANC_USAGE_COLUMNS
    " FROM stage_usage"
    " ON CONFLICT (hour, cluster, account, user_name, tier) DO UPDATE SET"
    "  card_seconds = u.card_seconds + excluded.card_seconds,"
    "  core_seconds = u.core_seconds + excluded.core_seconds,"
    "  mem_gib_seconds = u.mem_gib_seconds + excluded.mem_gib_seconds,"
    "  amount_micros = u.amount_micros + excluded.amount_micros,"
    "  segments = u.segments + excluded.segments";

// PostgreSQL's message on one line (its DETAIL and CONTEXT follow on
// lines of their own): one log line per failure.
std::string error_of(pg_conn* c, const char* what) {
  return std::string(what) + ": " + pg_one_line(PQerrorMessage(c));
}

// The same failure as a Result<T>.
template <class T, class U>
Result<T> pass(const Result<U>& r) {
  return Result<T>::failure(r.code(), r.error());
}

}  // namespace

ErrorCode error_code_of_sqlstate(const std::string& s) {
  const std::string cls = s.substr(0, 2);
  if (cls == "22" || cls == "23") return ErrorCode::kRefused;
  if (s.empty() || cls == "08" || cls == "40" || cls == "53" || cls == "57" || cls == "58")
    return ErrorCode::kRetryable;
  return ErrorCode::kInvalid;
}

Result<bool> BillStore::failed(const char* what, const pg_result* r) {
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  last_sqlstate_ = state ? state : "";
  // No SQLSTATE from a live connection is a client-side failure (out of
  // memory, a COPY the server dropped): nothing an admin can fix, retry.
  ErrorCode code = conn_ && PQstatus(conn_) != CONNECTION_OK
                       ? ErrorCode::kRetryable
                       : error_code_of_sqlstate(last_sqlstate_);
  return Result<bool>::failure(code, error_of(conn_, what));
}

std::string pg_text_array(const std::vector<std::string>& v) {
  std::string arr = "{";
  for (size_t i = 0; i < v.size(); i++) {
    arr += i ? ",\"" : "\"";
    for (char c : v[i]) {
      if (c == '"' || c == '\\') arr += '\\';
      arr += c;
    }
    arr += '"';
  }
  return arr + "}";
}

BillStore::BillStore(std::string conninfo, std::string as_user)
    : conninfo_(std::move(conninfo)), as_user_(std::move(as_user)) {}
BillStore::~BillStore() { disconnect(); }

bool BillStore::connected() const { return conn_ && PQstatus(conn_) == CONNECTION_OK; }

void BillStore::disconnect() {
  if (conn_) PQfinish(conn_);
  conn_ = nullptr;
  staged_ = false;
  months_day_ = -1;
  longest_run_known_ = false;
  rollup_known_ = false;
  numbering_ = false;
}

Result<bool> BillStore::connect() {
  if (connected()) return true;
  disconnect();
  // Defaults first: dbname is expanded as a whole connection string and
  // what it sets wins over them; a later user= wins over it.  Nothing may
  // hang for ever (the writer must stop when slurmctld does).
  const char* keys[] = {"connect_timeout",
                        "keepalives_idle",
                        "options",
                        "dbname",
                        as_user_.empty() ? nullptr : "user",
                        nullptr};
  const char* values[] = {
      "10", "30", "-c statement_timeout=120000", conninfo_.c_str(), as_user_.c_str(), nullptr};
  conn_ = PQconnectdbParams(keys, values, 1);
  if (PQstatus(conn_) != CONNECTION_OK) {
    std::string e = error_of(conn_, "cannot connect to PostgreSQL");
    disconnect();
    return Result<bool>::failure(ErrorCode::kRetryable, e);
  }
  // Times are exchanged as UTC text; make the session agree.
  return exec("SET TIME ZONE 'UTC'");
}

Result<bool> BillStore::exec(const char* sql) {
  PGresult* r = PQexec(conn_, sql);
  bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
  Result<bool> out = ok ? Result<bool>(true) : failed("PostgreSQL", r);
  PQclear(r);
  return out;
}

Result<bool> BillStore::copy_in(const std::string& sql, const std::string& data) {
  last_sqlstate_.clear();
  PGresult* r = PQexec(conn_, sql.c_str());
  bool ok = PQresultStatus(r) == PGRES_COPY_IN;
  if (!ok) {
    Result<bool> out = failed("COPY", r);
    PQclear(r);
    return out;
  }
  PQclear(r);
  if (PQputCopyData(conn_, data.data(), static_cast<int>(data.size())) != 1 ||
      PQputCopyEnd(conn_, nullptr) != 1)
    return failed("COPY data", nullptr);
  r = PQgetResult(conn_);
  ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  Result<bool> out = ok ? Result<bool>(true) : failed("COPY", r);
  PQclear(r);
  while ((r = PQgetResult(conn_))) PQclear(r);
  return out;
}

Result<size_t> BillStore::write(const std::vector<Bill>& bills, const std::string& source) {
  return write(bill_batch(bills, source));
}

Result<size_t> BillStore::write(const BillBatch& batch) {
  using Key = std::tuple<std::string, uint32_t, int64_t>;
  if (batch.bills.empty()) return size_t{0};
  // A connection that failed for a retryable reason is dropped: the next
  // write connects again.
  auto give_up = [this](const Result<bool>& e) {
    if (e.code() == ErrorCode::kRetryable) disconnect();
    return pass<size_t>(e);
  };
  if (auto c = connect(); !c.ok()) return pass<size_t>(c);
  if (!staged_) {
    if (auto r = exec(kStageSql); !r.ok()) return give_up(r);
    staged_ = true;
  }
  if (const int64_t day = time(nullptr) / 86400; day != months_day_) {
    // Refused (a role without EXECUTE): tried again tomorrow; the bills
    // are stored meanwhile.
    if (auto r = exec(kEnsureMonthsSql); !r.ok() && r.code() == ErrorCode::kRetryable)
      return give_up(r);
    months_day_ = day;
  }
  auto fail = [this, &give_up](const Result<bool>& e) {
    PQclear(PQexec(conn_, "ROLLBACK"));
    return give_up(e);
  };
  const bool rolled_up_later = rolls_up_hours();  // asked outside the transaction
  if (rolled_up_later && !numbering_) {
    // The bills get their numbers only so (sql/0011_hourly_rollup.sql).
    if (auto r = exec("SET planc.hours_later = on"); !r.ok()) return give_up(r);
    numbering_ = true;
  }
  if (auto r = exec("BEGIN"); !r.ok()) return give_up(r);
  // Fast path: none of these bills is stored yet (the usual case), so they
  // go straight into planc.bill with one COPY.  A replay trips the primary
  // key; then only the new ones are inserted, through staging.
  size_t stored = 0;
  std::string usage_rows;  // of the bills stored, when not all of them
  if (auto r = exec("SAVEPOINT fast"); !r.ok()) return fail(r);
  auto direct =
      copy_in("COPY planc.bill (" + bill_copy_columns() + ") FROM STDIN", batch.copy_rows);
  if (direct.ok()) {
    stored = batch.unique.size();
  } else if (last_sqlstate_ == "23505") {  // unique_violation: a replay
    if (auto r = exec("ROLLBACK TO SAVEPOINT fast"); !r.ok()) return fail(r);
    if (auto r =
            copy_in("COPY stage_bill (" + bill_copy_columns() + ") FROM STDIN", batch.copy_rows);
        !r.ok())
      return fail(r);
    PGresult* m = PQexec(conn_, kInsertNewSql);
    if (PQresultStatus(m) != PGRES_TUPLES_OK) {
      Result<bool> e = failed("storing bills", m);
      PQclear(m);
      return fail(e);
    }
    std::set<Key> fresh;
    for (int i = 0; i < PQntuples(m); i++)
      fresh.emplace(PQgetvalue(m, i, 0),
                    static_cast<uint32_t>(std::strtoul(PQgetvalue(m, i, 1), nullptr, 10)),
                    std::strtoll(PQgetvalue(m, i, 2), nullptr, 10));
    PQclear(m);
    std::vector<const Bill*> fresh_bills;
    for (size_t i : batch.unique) {
      const Bill& b = batch.bills[i];
      if (fresh.count({b.seg.cluster, b.seg.job_id, b.seg.start_time})) fresh_bills.push_back(&b);
    }
    stored = fresh_bills.size();
    usage_rows = usage_copy_rows(fresh_bills);
  } else {
    return fail(direct);
  }
  // The hourly totals of the bills actually stored, unless rollup() adds
  // them afterwards.
  if (stored && !rolled_up_later) {
    const std::string& rows = stored == batch.unique.size() ? batch.usage_rows : usage_rows;
    if (auto r = copy_in(kUsageCopySql, rows); !r.ok()) return fail(r);
    if (auto r = exec(kUsageUpsertSql); !r.ok()) return fail(r);
  }
  if (auto r = exec("COMMIT"); !r.ok()) return give_up(r);
  return stored;
}

Result<size_t> BillStore::record_usage(const std::vector<Bill>& bills) {
  if (bills.empty()) return size_t{0};
  if (auto c = connect(); !c.ok()) return pass<size_t>(c);
  auto fail = [this](const Result<bool>& e) {
    PQclear(PQexec(conn_, "ROLLBACK"));
    if (e.code() == ErrorCode::kRetryable) disconnect();
    return pass<size_t>(e);
  };
  if (auto r = exec("BEGIN"); !r.ok()) return fail(r);
  const std::string sql = bill_measure_update_sql();
  size_t changed = 0;
  for (const Bill& b : bills) {
    const std::vector<std::optional<std::string>> params = bill_measure_params(b);
    std::vector<const char*> values;
    for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
    PGresult* r = PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      Result<bool> e = failed("recording measured usage", r);
      PQclear(r);
      return fail(e);
    }
    changed += std::strtoul(PQcmdTuples(r), nullptr, 10);
    PQclear(r);
  }
  if (auto r = exec("COMMIT"); !r.ok()) return fail(r);
  return changed;
}

Result<std::vector<std::vector<std::string>>> BillStore::rows(
    const std::string& sql, const std::vector<std::string>& params,
    std::vector<std::string>* columns) {
  if (auto c = connect(); !c.ok()) return pass<std::vector<std::vector<std::string>>>(c);
  std::vector<const char*> values;
  for (const std::string& p : params) values.push_back(p.c_str());
  PGresult* r = PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, 0);
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    Result<bool> e = failed("query", r);
    PQclear(r);
    return pass<std::vector<std::vector<std::string>>>(e);
  }
  std::vector<std::vector<std::string>> out;
  int nf = PQnfields(r);
  if (columns) {
    columns->clear();
    for (int j = 0; j < nf; j++) columns->emplace_back(PQfname(r, j));
  }
  for (int i = 0; i < PQntuples(r); i++) {
    std::vector<std::string> row;
    for (int j = 0; j < nf; j++) row.emplace_back(PQgetvalue(r, i, j));
    out.push_back(std::move(row));
  }
  PQclear(r);
  return out;
}

bool BillStore::rolls_up_hours() {
  if (!rollup_known_) {
    auto r = rows("SELECT to_regclass('planc.rollup_state') IS NOT NULL", {});
    rollup_known_ = r.ok();
    rolls_up_ = r.ok() && !r.value().empty() && r.value()[0][0] == "t";
  }
  return rolls_up_;
}

Result<BillStore::Rollup> BillStore::rollup(size_t max_bills) {
  if (auto c = connect(); !c.ok()) return pass<Rollup>(c);
  if (!rolls_up_hours() || !max_bills) return Rollup{};
  auto fail = [this](const Result<bool>& e) {
    PQclear(PQexec(conn_, "ROLLBACK"));
    if (e.code() == ErrorCode::kRetryable) disconnect();
    return pass<Rollup>(e);
  };
  if (!staged_) {
    if (auto r = exec(kStageSql); !r.ok()) return fail(r);
    staged_ = true;
  }
  if (auto r = exec("BEGIN"); !r.ok()) return fail(r);
  // No bill writer is in flight from here to COMMIT: every bill numbered
  // below the highest one read is visible now.
  if (auto r = exec(kRollupLockSql); !r.ok()) return fail(r);
  PGresult* st = PQexec(conn_, "SELECT last_seq FROM planc.rollup_state FOR UPDATE");
  if (PQresultStatus(st) != PGRES_TUPLES_OK || PQntuples(st) != 1) {
    Result<bool> e =
        PQresultStatus(st) == PGRES_TUPLES_OK
            ? Result<bool>::failure(ErrorCode::kInvalid, "planc.rollup_state must hold one row")
            : failed("reading planc.rollup_state", st);
    PQclear(st);
    return fail(e);
  }
  Rollup out;
  out.last_seq = std::strtoll(PQgetvalue(st, 0, 0), nullptr, 10);
  PQclear(st);
  // The next number stored, then the bills numbered from it to max_bills
  // on: a range of the index, in no order, however many wait beyond it.
  // (Numbers taken by a transaction that rolled back leave gaps; starting
  // from the next number stored steps over any gap.)
  const std::string after = std::to_string(out.last_seq);
  const char* next_params[] = {after.c_str()};
  PGresult* nx = PQexecParams(conn_, "SELECT min(seq) FROM planc.bill WHERE seq > $1::bigint", 1,
                              nullptr, next_params, nullptr, nullptr, 0);
  if (PQresultStatus(nx) != PGRES_TUPLES_OK || PQntuples(nx) != 1) {
    Result<bool> e = failed("finding the bills to add to the hourly totals", nx);
    PQclear(nx);
    return fail(e);
  }
  if (PQgetisnull(nx, 0, 0)) {  // nothing new
    PQclear(nx);
    if (auto c = exec("COMMIT"); !c.ok()) return fail(c);
    return out;
  }
  const int64_t first = std::strtoll(PQgetvalue(nx, 0, 0), nullptr, 10);
  PQclear(nx);
  const std::string from = std::to_string(first),
                    to = std::to_string(first + static_cast<int64_t>(max_bills));
  const char* params[] = {from.c_str(), to.c_str()};
  const std::string sql = "SELECT seq, " + bill_hours_select_list() +
                          " FROM planc.bill WHERE seq >= $1::bigint AND seq < $2::bigint";
  PGresult* r = PQexecParams(conn_, sql.c_str(), 2, nullptr, params, nullptr, nullptr, 0);
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    Result<bool> e = failed("reading the bills to add to the hourly totals", r);
    PQclear(r);
    return fail(e);
  }
  UsageTotals totals;
  std::vector<std::string_view> row;
  for (int i = 0; i < PQntuples(r); i++) {
    row.clear();
    for (int j = 1; j < PQnfields(r); j++) row.emplace_back(PQgetvalue(r, i, j));
    auto b = bill_hours_from_row(row);
    if (!b.ok()) {
      Result<bool> e = Result<bool>::failure(
          ErrorCode::kInvalid,
          "bill number " + std::string(PQgetvalue(r, i, 0)) + ": " + b.error());
      PQclear(r);
      return fail(e);
    }
    totals.add(b.value());
    out.last_seq = std::max<int64_t>(out.last_seq, std::strtoll(PQgetvalue(r, i, 0), nullptr, 10));
  }
  out.bills = static_cast<size_t>(PQntuples(r));
  PQclear(r);
  if (!out.bills) {
    if (auto c = exec("COMMIT"); !c.ok()) return fail(c);
    return out;
  }
  out.hour_rows = totals.rows();
  if (auto c = copy_in(kUsageCopySql, totals.copy_rows()); !c.ok()) return fail(c);
  if (auto c = exec(kUsageUpsertSql); !c.ok()) return fail(c);
  const std::string last = std::to_string(out.last_seq);
  const char* set_params[] = {last.c_str()};
  PGresult* u =
      PQexecParams(conn_, "UPDATE planc.rollup_state SET last_seq = $1::bigint, at = now()", 1,
                   nullptr, set_params, nullptr, nullptr, 0);
  if (PQresultStatus(u) != PGRES_COMMAND_OK) {
    Result<bool> e = failed("moving planc.rollup_state", u);
    PQclear(u);
    return fail(e);
  }
  PQclear(u);
  if (auto c = exec("COMMIT"); !c.ok()) return fail(c);
  return out;
}

bool BillStore::has_longest_run() {
  if (!longest_run_known_) {
    auto r = rows("SELECT to_regprocedure('planc.longest_run(text[])') IS NOT NULL", {});
    longest_run_known_ = r.ok();
    has_longest_run_ = r.ok() && !r.value().empty() && r.value()[0][0] == "t";
  }
  return has_longest_run_;
}

Result<std::vector<Bill>> BillStore::query(const BillFilter& f) {
  using R = Result<std::vector<Bill>>;
  std::string sql = "SELECT " + bill_select_list() + " FROM planc.bill WHERE true";
  std::vector<std::string> params;
  // Adds a parameter; returns its placeholder ("$3").
  auto param = [&](std::string v) {
    params.push_back(std::move(v));
    return "$" + std::to_string(params.size());
  };
  // Adds "column = ANY($n)" for a non-empty list; returns the array's
  // placeholder ("" when the list is empty).
  auto any = [&](const char* column, const char* type,
                 const std::vector<std::string>& v) -> std::string {
    if (v.empty()) return "";
    std::string p = param(pg_text_array(v));
    sql += std::string(" AND ") + column + " = ANY(" + p + "::" + type + "[])";
    return p;
  };
  std::vector<std::string> uids;
  for (uint32_t id : f.uids) uids.push_back(std::to_string(id));
  any("uid", "bigint", uids);
  const std::string users = any("user_name", "text", f.users);
  any("account", "text", f.accounts);
  // The jobs named, any of them: one clause of alternatives.
  std::vector<std::string> jobs;
  if (!f.job_ids.empty()) {
    std::vector<std::string> ids;
    for (uint32_t id : f.job_ids) ids.push_back(std::to_string(id));
    std::string p = param(pg_text_array(ids)) + "::bigint[]";
    jobs.push_back("job_id = ANY(" + p + ")");
    if (f.whole_jobs) {
      jobs.push_back("array_job_id = ANY(" + p + ")");
      jobs.push_back("het_job_id = ANY(" + p + ")");
    }
  }
  for (const auto& [pairs, id_col, sub_col] :
       {std::tuple{&f.array_tasks, "array_job_id", "array_task_id"},
        std::tuple{&f.het_components, "het_job_id", "het_job_offset"}}) {
    if (pairs->empty()) continue;
    std::vector<std::string> a, b;
    for (const auto& [x, y] : *pairs) {
      a.push_back(std::to_string(x));
      b.push_back(std::to_string(y));
    }
    std::string pa = param(pg_text_array(a)), pb = param(pg_text_array(b));
    jobs.push_back(std::string("(") + id_col + ", " + sub_col + ") IN (SELECT * FROM unnest(" + pa +
                   "::bigint[], " + pb + "::bigint[]))");
  }
  if (!jobs.empty()) {
    sql += " AND (";
    for (size_t i = 0; i < jobs.size(); i++) sql += (i ? " OR " : "") + jobs[i];
    sql += ")";
  }
  any("state", "text", f.states);
  any("partition", "text", f.partitions);
  if (f.unmeasured) sql += " AND measured_at IS NULL";
  if (f.start) sql += " AND end_time >= " + param(pg_timestamp(f.start)) + "::timestamptz";
  if (f.end) {
    const std::string end = param(pg_timestamp(f.end)) + "::timestamptz";
    sql += " AND start_time <= " + end;
    // A run that started by the window's end ended by then plus the longest
    // run (sql/0010): the end_time index's range is bounded on both sides,
    // so a window long ago does not read every later bill.
    if (has_longest_run())
      sql += " AND end_time <= " + end + " + planc.longest_run(" +
             (users.empty() ? std::string("NULL") : users) + "::text[])";
  }
  sql += " ORDER BY end_time, job_id";
  auto res = rows(sql, params);
  if (!res.ok()) return R::failure(res.code(), res.error());
  std::vector<Bill> out;
  for (const auto& row : res.value()) {
    auto b = bill_from_row(row);
    if (!b.ok()) return R::failure(b.code(), "reading planc.bill: " + b.error());
    out.push_back(std::move(b).value());
  }
  return out;
}

}  // namespace planc
