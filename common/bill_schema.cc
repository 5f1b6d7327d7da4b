#include "common/bill_schema.h"

#include <charconv>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <tuple>
#include <type_traits>

#include "common/record.h"

namespace planc {
namespace {

using K = ColumnKind;
using S = SacctField;

// Accessors of one member, made by template so each table entry names its
// member once.
template <auto M>
FieldValue seg_num(const Segment& s) {
  return static_cast<int64_t>(s.*M);
}
template <auto M>
FieldValue seg_text(const Segment& s) {
  return std::string_view(s.*M);
}
template <auto M>
bool seg_set_num(Segment& s, const FieldValue& v) {
  s.*M = static_cast<std::remove_reference_t<decltype(s.*M)>>(v.num());
  return true;
}
template <auto M>
bool seg_set_text(Segment& s, const FieldValue& v) {
  s.*M = std::string(v.text());
  return true;
}
template <auto M>
FieldValue bill_num(const Bill& b, std::string_view) {
  return static_cast<int64_t>(b.*M);
}
template <auto M>
FieldValue bill_text(const Bill& b, std::string_view) {
  return std::string_view(b.*M);
}
template <auto M>
bool bill_set_num(Bill& b, const FieldValue& v) {
  b.*M = static_cast<std::remove_reference_t<decltype(b.*M)>>(v.num());
  return true;
}
template <auto M>
bool bill_set_text(Bill& b, const FieldValue& v) {
  b.*M = std::string(v.text());
  return true;
}

#define SEG_NUM(m) .seg_get = &seg_num<&Segment::m>, .seg_set = &seg_set_num<&Segment::m>
#define SEG_TEXT(m) .seg_get = &seg_text<&Segment::m>, .seg_set = &seg_set_text<&Segment::m>
#define BILL_NUM(m) .bill_get = &bill_num<&Bill::m>, .bill_set = &bill_set_num<&Bill::m>
#define BILL_TEXT(m) .bill_get = &bill_text<&Bill::m>, .bill_set = &bill_set_text<&Bill::m>

// gres as "name:type:count,...".
FieldValue gres_get(const Segment& s) {
  std::string out;
  for (const GresUse& g : s.gres) {
    if (!out.empty()) out += ',';
    out += g.name + ':' + g.type + ':' + std::to_string(g.count);
  }
  return FieldValue::owned(std::move(out));
}
bool gres_set(Segment& s, const FieldValue& v) {
  std::string_view gres = v.text();
  s.gres.clear();
  while (!gres.empty()) {
    size_t comma = gres.find(',');
    std::string_view item = gres.substr(0, comma);
    size_t c1 = item.find(':'), c2 = item.rfind(':');
    if (c1 == std::string_view::npos || c1 == c2) return false;
    GresUse g;
    g.name = item.substr(0, c1);
    g.type = item.substr(c1 + 1, c2 - c1 - 1);
    auto r = std::from_chars(item.data() + c2 + 1, item.data() + item.size(), g.count);
    if (r.ec != std::errc() || r.ptr != item.data() + item.size()) return false;
    s.gres.push_back(std::move(g));
    gres = comma == std::string_view::npos ? std::string_view() : gres.substr(comma + 1);
  }
  return true;
}

FieldValue exit_status_get(const Bill& b, std::string_view) {
  return static_cast<int64_t>(exit_code_of(b.seg.wait_status).status);
}
FieldValue exit_signal_get(const Bill& b, std::string_view) {
  return static_cast<int64_t>(exit_code_of(b.seg.wait_status).signal);
}
FieldValue exit_code_get(const Bill& b, std::string_view) {
  return FieldValue::owned(exit_code_of(b.seg.wait_status).text);
}
FieldValue source_get(const Bill&, std::string_view source) { return source; }

std::string show_job_id(const Bill& b) {
  if (b.seg.array_job_id && b.seg.array_task_id != kNoId)
    return std::to_string(b.seg.array_job_id) + "_" + std::to_string(b.seg.array_task_id);
  return std::to_string(b.seg.job_id);
}
std::string show_micros6(const Bill& b) { return format_micros6(b.amount_micros); }

constexpr const char* kBigint = "bigint";
constexpr const char* kInteger = "integer";
constexpr const char* kTextType = "text";
constexpr const char* kTimestamp = "timestamp with time zone";
constexpr const char* kNumeric = "numeric";

// The table.  Spooled entries (spool_since > 0) are in the record's order:
// append new ones at the end, with the next version.
const BillColumn kColumns[] = {
    {.name = "cluster",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(cluster),
     .sacct = S::kCluster,
     .list_label = "Cluster",
     .list_default = false},
    {.name = "job_id",
     .kind = K::kInt,
     .sql_type = kBigint,
     .spool_since = 1,
     SEG_NUM(job_id),
     .sacct = S::kJobId,
     .list_label = "JobID",
     .show = show_job_id},
    {.name = "array_job_id",
     .kind = K::kInt,
     .sql_type = kBigint,
     .nullable = true,
     .null_value = 0,
     .spool_since = 1,
     SEG_NUM(array_job_id)},
    {.name = "array_task_id",
     .kind = K::kInt,
     .sql_type = kBigint,
     .nullable = true,
     .null_value = kNoId,
     .spool_since = 1,
     SEG_NUM(array_task_id)},
    {.name = "het_job_id",
     .kind = K::kInt,
     .sql_type = kBigint,
     .nullable = true,
     .null_value = 0,
     .spool_since = 1,
     SEG_NUM(het_job_id)},
    {.name = "het_job_offset",
     .kind = K::kInt,
     .sql_type = kInteger,
     .nullable = true,
     .null_value = kNoId,
     .spool_since = 1,
     SEG_NUM(het_job_offset)},
    {.name = "segment",
     .kind = K::kInt,
     .sql_type = kInteger,
     .spool_since = 1,
     SEG_NUM(segment),
     .list_label = "Seg"},
    {.name = "submit_time",
     .kind = K::kTime,
     .sql_type = kTimestamp,
     .nullable = true,
     .null_value = 0,
     .spool_since = 1,
     SEG_NUM(submit_time),
     .sacct = S::kSubmit,
     .list_label = "Submit",
     .list_default = false},
    {.name = "start_time",
     .kind = K::kTime,
     .sql_type = kTimestamp,
     .spool_since = 1,
     SEG_NUM(start_time),
     .sacct = S::kStart,
     .list_label = "Start"},
    {.name = "end_time",
     .kind = K::kTime,
     .sql_type = kTimestamp,
     .spool_since = 1,
     SEG_NUM(end_time),
     .sacct = S::kEnd,
     .list_label = "End"},
    {.name = "suspended_seconds",
     .kind = K::kSpoolInt,
     .sql_type = "",
     .spool_since = 1,
     SEG_NUM(suspended_seconds)},
    {.name = "uid",
     .kind = K::kInt,
     .sql_type = kBigint,
     .spool_since = 1,
     SEG_NUM(uid),
     .sacct = S::kUid},
    {.name = "user_name",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(user),
     .sacct = S::kUser,
     .list_label = "User"},
    {.name = "account",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(account),
     .sacct = S::kAccount,
     .list_label = "Account"},
    {.name = "tier",
     .kind = K::kText,
     .sql_type = kTextType,
     BILL_TEXT(tier),
     .list_label = "Tier"},
    {.name = "qos",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(qos),
     .sacct = S::kQos,
     .list_label = "QOS"},
    {.name = "partition",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(partition),
     .sacct = S::kPartition,
     .list_label = "Partition",
     .list_default = false},
    {.name = "nodes",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(nodes),
     .sacct = S::kNodes,
     .list_label = "NodeList",
     .list_default = false},
    {.name = "node_count",
     .kind = K::kInt,
     .sql_type = kInteger,
     .spool_since = 1,
     SEG_NUM(node_count),
     .sacct = S::kNodeCount},
    {.name = "state",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(state),
     .sacct = S::kState,
     .list_label = "State"},
    {.name = "wait_status",
     .kind = K::kInt,
     .sql_type = kInteger,
     .spool_since = 1,
     SEG_NUM(wait_status)},
    {.name = "exit_status", .kind = K::kInt, .sql_type = kInteger, .bill_get = exit_status_get},
    {.name = "exit_signal", .kind = K::kInt, .sql_type = kInteger, .bill_get = exit_signal_get},
    {.name = "exit_code",
     .kind = K::kText,
     .sql_type = kTextType,
     .bill_get = exit_code_get,
     .sacct = S::kExitCode,
     .list_label = "ExitCode"},
    {.name = "job_name",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(job_name),
     .sacct = S::kJobName,
     .list_label = "JobName"},
    {.name = "tres_req",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(tres_req),
     .sacct = S::kTresReq},
    {.name = "tres_alloc",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(tres_alloc)},
    {.name = "cpus",
     .kind = K::kInt,
     .sql_type = kInteger,
     .spool_since = 1,
     SEG_NUM(cpus),
     .sacct = S::kCpus},
    {.name = "mem_mib", .kind = K::kInt, .sql_type = kBigint, .spool_since = 1, SEG_NUM(mem_mib)},
    {.name = "gres",
     .kind = K::kSpoolText,
     .sql_type = "",
     .spool_since = 1,
     .seg_get = gres_get,
     .seg_set = gres_set},
    {.name = "ran", .kind = K::kSpoolInt, .sql_type = "", .spool_since = 1, SEG_NUM(ran)},
    {.name = "free_attempt",
     .kind = K::kSpoolInt,
     .sql_type = "",
     .spool_since = 1,
     SEG_NUM(free_attempt)},
    {.name = "admin_comment",
     .kind = K::kText,
     .sql_type = kTextType,
     .spool_since = 1,
     SEG_TEXT(admin_comment)},
    {.name = "preempted",
     .kind = K::kSpoolInt,
     .sql_type = "",
     .spool_since = 2,
     SEG_NUM(preempted)},
    // Priced (common/billing.h): not spooled, the worker prices each record.
    {.name = "gpu_cards",
     .kind = K::kMicros,
     .sql_type = kNumeric,
     BILL_NUM(card_micros),
     .list_label = "Cards",
     .list_default = false},
    {.name = "gpu_detail",
     .kind = K::kText,
     .sql_type = kTextType,
     BILL_TEXT(gpu_detail),
     .list_label = "GPUDetail",
     .list_default = false},
    {.name = "billable_seconds",
     .kind = K::kInt,
     .sql_type = kBigint,
     BILL_NUM(billable_seconds),
     .list_label = "Seconds"},
    {.name = "card_seconds",
     .kind = K::kMicros,
     .sql_type = kNumeric,
     BILL_NUM(card_micro_seconds),
     .list_label = "CardSeconds"},
    {.name = "core_seconds",
     .kind = K::kInt,
     .sql_type = kBigint,
     BILL_NUM(core_seconds),
     .list_label = "CoreSeconds"},
    {.name = "mem_gib_seconds",
     .kind = K::kMibAsGib,
     .sql_type = kNumeric,
     BILL_NUM(mem_mib_seconds),
     .list_label = "MemGiBSeconds",
     .list_default = false},
    {.name = "card_hour_price",
     .kind = K::kMicros,
     .sql_type = kNumeric,
     .nullable = true,
     .null_value = -1,
     BILL_NUM(card_hour_price)},
    {.name = "core_hour_price",
     .kind = K::kMicros,
     .sql_type = kNumeric,
     BILL_NUM(core_hour_price)},
    {.name = "mem_gib_hour_price",
     .kind = K::kMicros,
     .sql_type = kNumeric,
     BILL_NUM(mem_gib_hour_price)},
    {.name = "tier_factor", .kind = K::kPermille, .sql_type = kNumeric, BILL_NUM(price_permille)},
    {.name = "amount_minor", .kind = K::kInt, .sql_type = kBigint, BILL_NUM(amount_minor)},
    {.name = "amount_micros",
     .kind = K::kInt,
     .sql_type = kBigint,
     BILL_NUM(amount_micros),
     .list_label = "Amount",
     .show = show_micros6},
    {.name = "currency",
     .kind = K::kText,
     .sql_type = kTextType,
     BILL_TEXT(currency),
     .list_label = "Currency"},
    {.name = "zero_reason",
     .kind = K::kText,
     .sql_type = kTextType,
     BILL_TEXT(zero_reason),
     .list_label = "Free"},
    {.name = "note",
     .kind = K::kText,
     .sql_type = kTextType,
     BILL_TEXT(note),
     .list_label = "Note",
     .list_default = false},
    {.name = "source", .kind = K::kText, .sql_type = kTextType, .bill_get = source_get},
    {.name = "recorded_at", .kind = K::kServer, .sql_type = kTimestamp},
    // The measured-usage track (sql/0003): NULL until `planc-bill measure`
    // reads the run's steps from slurmdbd, and NULL after it too where
    // Slurm measured nothing.
    {.name = "measured_at",
     .kind = K::kTime,
     .sql_type = kTimestamp,
     .nullable = true,
     .null_value = 0,
     BILL_NUM(measured_at),
     .measured = true},
    {.name = "used_cpu_seconds",
     .kind = K::kMicros,
     .sql_type = kNumeric,
     .nullable = true,
     .null_value = -1,
     BILL_NUM(used_cpu_micro_seconds),
     .list_label = "UsedCPUSeconds",
     .measured = true},
    {.name = "max_rss_bytes",
     .kind = K::kInt,
     .sql_type = kBigint,
     .nullable = true,
     .null_value = -1,
     BILL_NUM(max_rss_bytes),
     .list_label = "MaxRSSBytes",
     .measured = true},
    {.name = "tres_usage_in_tot",
     .kind = K::kText,
     .sql_type = kTextType,
     .nullable = true,
     BILL_TEXT(tres_usage_in_tot),
     .measured = true},
    {.name = "gpu_util_percent",
     .kind = K::kPermille,
     .sql_type = kNumeric,
     .nullable = true,
     .null_value = -1,
     BILL_NUM(gpu_util_milli_percent),
     .measured = true},
    // The order bills were stored in, given by the server (sql/0011):
    // the hourly totals count them up to planc.rollup_state.last_seq.
    {.name = "seq", .kind = K::kServer, .sql_type = kBigint, .nullable = true},
};

bool is_null(const BillColumn& c, const FieldValue& v) {
  if (!c.nullable) return false;
  return v.is_text() ? v.text().empty() : v.num() == c.null_value;
}

// The COPY row's numbers, made without printf (the writer's CPU a bill).
void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// v (0 <= v < 10^width) with leading zeros.
void append_padded(std::string& out, int64_t v, int width) {
  char buf[24];
  for (int i = width - 1; i >= 0; i--, v /= 10) buf[i] = static_cast<char>('0' + v % 10);
  out.append(buf, static_cast<size_t>(width));
}

// "W.FFF": a fixed-point value's whole part, then `frac` with `places`
// digits, as printf's "%lld.%0*lld" writes them (a negative value, never a
// bill's, through printf itself).
void append_decimal(std::string& out, int64_t whole, int64_t frac, int places) {
  if (whole < 0 || frac < 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%lld.%0*lld", static_cast<long long>(whole), places,
                  static_cast<long long>(frac));
    out += buf;
    return;
  }
  append_int(out, whole);
  out += '.';
  append_padded(out, frac, places);
}

// A micro-unit quantity with 6 decimals (format_micros6's text).
void append_micros6(std::string& out, int64_t micros) {
  append_decimal(out, micros / 1'000'000, micros % 1'000'000, 6);
}

// A value as PostgreSQL reads it in COPY text or as a parameter (text
// unescaped).
void append_sql_text(std::string& out, const BillColumn& c, const FieldValue& v) {
  switch (c.kind) {
    case K::kText:
      out += v.text();
      return;
    case K::kInt:
      append_int(out, v.num());
      return;
    case K::kTime:
      append_pg_timestamp(out, v.num());
      return;
    case K::kMicros:
      append_micros6(out, v.num());
      return;
    case K::kPermille:
      append_decimal(out, v.num() / 1000, v.num() % 1000, 3);
      return;
    case K::kMibAsGib:
      append_gib_seconds(out, v.num());
      return;
    default:
      return;
  }
}

std::string sql_text(const BillColumn& c, const FieldValue& v) {
  std::string out;
  append_sql_text(out, c, v);
  return out;
}

// The spool record's current version: the highest any entry carries.
int spool_version() {
  int v = 0;
  for (const BillColumn& c : kColumns) v = std::max(v, c.spool_since);
  return v;
}
const std::string kSpoolPrefix = "planc-seg-";

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// Sets one column from its text (a spool field or a SELECT value).
bool set_from_text(const BillColumn& c, Bill& b, std::string_view text, std::string* error) {
  FieldValue v = text;
  if (!c.is_text()) {
    int64_t n = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), n);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size()) {
      *error = "'" + std::string(text) + "' is not a number";
      return false;
    }
    v = n;
  }
  bool ok = c.seg_set ? c.seg_set(b.seg, v) : c.bill_set ? c.bill_set(b, v) : true;
  if (!ok) *error = "'" + std::string(text) + "' is malformed";
  return ok;
}

}  // namespace

std::span<const BillColumn> bill_columns() { return kColumns; }

const BillColumn* find_bill_column(std::string_view name) {
  for (const BillColumn& c : kColumns)
    if (name == c.name) return &c;
  return nullptr;
}

FieldValue column_value(const BillColumn& c, const Bill& b, std::string_view source) {
  if (c.seg_get) return c.seg_get(b.seg);
  if (c.bill_get) return c.bill_get(b, source);
  return int64_t{0};
}

std::string pg_timestamp(int64_t t) {
  std::string out;
  append_pg_timestamp(out, t);
  return out;
}

void append_pg_timestamp(std::string& out, int64_t t) {
  if (t < 0 || t >= 253'402'300'800) {  // outside years 1970-9999: the C library's
    time_t tt = static_cast<time_t>(t);
    struct tm tm;
    gmtime_r(&tt, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S+00", &tm);
    out += buf;
    return;
  }
  // The civil date of a day number (Howard Hinnant's days_from_civil
  // inverted), for days from 1970-01-01 on.
  const int64_t days = t / 86400 + 719'468, secs = t % 86400;
  const int64_t era = days / 146'097, doe = days - era * 146'097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36'524 - doe / 146'096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
  const int64_t day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = yoe + era * 400 + (month <= 2);
  append_padded(out, year, 4);
  out += '-';
  append_padded(out, month, 2);
  out += '-';
  append_padded(out, day, 2);
  out += ' ';
  append_padded(out, secs / 3600, 2);
  out += ':';
  append_padded(out, secs / 60 % 60, 2);
  out += ':';
  append_padded(out, secs % 60, 2);
  out += "+00";
}

std::string format_gib_seconds(int64_t mib_seconds) {
  std::string out;
  append_gib_seconds(out, mib_seconds);
  return out;
}

void append_gib_seconds(std::string& out, int64_t mib_seconds) {
  // Exact: 1 MiB is 1/1024 GiB = 0.0009765625.
  append_decimal(out, mib_seconds / 1024, (mib_seconds % 1024) * 9'765'625LL, 10);
}

std::string bill_copy_columns() {
  std::vector<std::string> names;
  for (const BillColumn& c : kColumns)
    if (c.written()) names.emplace_back(c.name);
  return join(names);
}

std::string bill_copy_row(const Bill& b, std::string_view source) {
  std::string row;
  append_bill_copy_row(row, b, source);
  return row;
}

void append_bill_copy_row(std::string& row, const Bill& b, std::string_view source) {
  bool first = true;
  for (const BillColumn& c : kColumns) {
    if (!c.written()) continue;
    if (!first) row += '\t';
    first = false;
    FieldValue v = column_value(c, b, source);
    if (is_null(c, v))
      row += "\\N";
    else if (c.kind == K::kText)
      append_escaped(row, v.text());
    else
      append_sql_text(row, c, v);
  }
  row += '\n';
}

BillBatch bill_batch(std::vector<Bill> bills, std::string_view source) {
  using Key = std::tuple<std::string_view, uint32_t, int64_t>;
  BillBatch out;
  out.bills = std::move(bills);
  out.unique.reserve(out.bills.size());
  out.copy_rows.reserve(out.bills.size() * 512);
  std::set<Key> keys;
  std::vector<const Bill*> unique;
  unique.reserve(out.bills.size());
  for (size_t i = 0; i < out.bills.size(); i++) {
    const Bill& b = out.bills[i];
    if (!keys.emplace(b.seg.cluster, b.seg.job_id, b.seg.start_time).second) continue;
    out.unique.push_back(i);
    unique.push_back(&b);
    append_bill_copy_row(out.copy_rows, b, source);
  }
  out.usage_rows = usage_copy_rows(unique);
  return out;
}

void UsageTotals::add(const Bill& b) {
  for (const HourSlice& h : split_by_hour(b)) {
    Usage& u = usage_[{h.hour, b.seg.cluster, b.seg.account, b.seg.user, b.tier}];
    u.card_micro_seconds += h.card_micro_seconds;
    u.core_seconds += h.core_seconds;
    u.mem_mib_seconds += h.mem_mib_seconds;
    u.amount_micros += h.amount_micros;
    u.segments++;
  }
}

std::string usage_copy_rows(const std::vector<const Bill*>& bills) {
  UsageTotals totals;
  for (const Bill* b : bills) totals.add(*b);
  return totals.copy_rows();
}

std::string UsageTotals::copy_rows() const {
  const auto& usage = usage_;
  std::string data;
  auto field = [&data](std::string_view v) {
    append_escaped(data, v);
    data += '\t';
  };
  for (const auto& [k, u] : usage) {
    append_pg_timestamp(data, std::get<0>(k));
    data += '\t';
    field(std::get<1>(k));
    field(std::get<2>(k));
    field(std::get<3>(k));
    field(std::get<4>(k));
    append_micros6(data, u.card_micro_seconds);  // format_card_seconds
    data += '\t';
    append_int(data, u.core_seconds);
    data += '\t';
    append_gib_seconds(data, u.mem_mib_seconds);
    data += '\t';
    append_int(data, u.amount_micros);
    data += '\t';
    append_int(data, u.segments);
    data += '\n';
  }
  return data;
}

namespace {

// The SELECT expression that reads column `c` back as its in-memory value's
// text (set_from_text).
std::string select_expr(const BillColumn& c) {
  const std::string n = c.name;
  std::string e = c.kind == K::kTime       ? "extract(epoch FROM " + n + ")::bigint"
                  : c.kind == K::kMicros   ? "(" + n + " * 1000000)::bigint"
                  : c.kind == K::kPermille ? "(" + n + " * 1000)::bigint"
                  : c.kind == K::kMibAsGib ? "(" + n + " * 1024)::bigint"
                                           : n;
  if (c.nullable)
    e = "coalesce(" + e + ", " + (c.is_text() ? "''" : std::to_string(c.null_value)) + ")";
  return e;
}

// What split_by_hour() and an hourly row's key read of a bill.
constexpr const char* kHourColumns[] = {
    "cluster",      "account",         "user_name",    "tier",
    "start_time",   "end_time",        "zero_reason",  "card_seconds",
    "core_seconds", "mem_gib_seconds", "amount_micros"};

}  // namespace

std::string bill_select_list() {
  std::vector<std::string> exprs;
  for (const BillColumn& c : kColumns)
    if (c.read_back()) exprs.push_back(select_expr(c));
  return join(exprs);
}

std::string bill_hours_select_list() {
  std::vector<std::string> exprs;
  for (const char* name : kHourColumns)
    if (const BillColumn* c = find_bill_column(name)) exprs.push_back(select_expr(*c));
  return join(exprs);
}

Result<Bill> bill_hours_from_row(const std::vector<std::string_view>& row) {
  Bill b;
  if (row.size() != std::size(kHourColumns))
    return Result<Bill>::failure(ErrorCode::kCorrupt, "not the hour columns");
  for (size_t i = 0; i < row.size(); i++) {
    std::string error;
    const BillColumn* c = find_bill_column(kHourColumns[i]);
    if (!c || !set_from_text(*c, b, row[i], &error))
      return Result<Bill>::failure(ErrorCode::kCorrupt,
                                   std::string("column ") + kHourColumns[i] + ": " + error);
  }
  // Whether the run was given resources is the spool's, not a column; a
  // bill says so by its reason (price_segment).
  b.seg.ran = b.zero_reason != kNeverRan;
  return b;
}

std::string bill_measure_update_sql() {
  std::string set;
  int n = 3;  // $1..$3: the key
  for (const BillColumn& c : kColumns) {
    if (!c.measured) continue;
    const char* cast = c.kind == K::kTime   ? "::timestamptz"
                       : c.kind == K::kText ? "::text"
                       : c.kind == K::kInt  ? "::bigint"
                                            : "::numeric";
    set += std::string(set.empty() ? "" : ", ") + c.name + " = $" + std::to_string(++n) + cast;
  }
  return "UPDATE planc.bill SET " + set +
         " WHERE cluster = $1::text AND job_id = $2::bigint AND start_time = $3::timestamptz"
         " AND measured_at IS NULL";
}

std::vector<std::optional<std::string>> bill_measure_params(const Bill& b) {
  std::vector<std::optional<std::string>> p = {b.seg.cluster, std::to_string(b.seg.job_id),
                                               pg_timestamp(b.seg.start_time)};
  for (const BillColumn& c : kColumns) {
    if (!c.measured) continue;
    FieldValue v = column_value(c, b);
    if (is_null(c, v))
      p.emplace_back(std::nullopt);
    else
      p.emplace_back(sql_text(c, v));
  }
  return p;
}

Result<Bill> bill_from_row(const std::vector<std::string>& row) {
  Bill b;
  size_t i = 0;
  for (const BillColumn& c : kColumns) {
    if (!c.read_back()) continue;
    if (i >= row.size()) return Result<Bill>::failure(ErrorCode::kCorrupt, "too few columns");
    std::string error;
    if (!set_from_text(c, b, row[i++], &error))
      return Result<Bill>::failure(ErrorCode::kCorrupt,
                                   std::string("column ") + c.name + ": " + error);
  }
  return b;
}

std::string show_column(const BillColumn& c, const Bill& b) {
  if (c.show) return c.show(b);
  FieldValue v = column_value(c, b);
  if (v.is_text()) return std::string(v.text());
  // A null (e.g. not measured yet) shows as nothing, never as 0.
  if (c.nullable && v.num() == c.null_value) return "";
  switch (c.kind) {
    case K::kMicros:
      return format_micros6(v.num());
    case K::kMibAsGib:
      return format_gib_seconds(v.num());
    default:  // times too: unix seconds
      return std::to_string(v.num());
  }
}

ListType column_list_type(const BillColumn& c) {
  if (c.show == show_job_id || c.is_text()) return ListType::kText;
  return c.kind == K::kTime ? ListType::kTime : ListType::kNumber;
}

// --- the spool's record (declared in common/billing.h) ---------------------------

std::string serialize_segment(const Segment& s) {
  static const std::string version = kSpoolPrefix + std::to_string(spool_version());
  RecordWriter r(version);
  for (const BillColumn& c : kColumns) {
    if (!c.spool_since) continue;
    FieldValue v = c.seg_get(s);
    if (v.is_text())
      r.add(v.text());
    else
      r.add(v.num());
  }
  return r.line();
}

Result<Segment> parse_segment(std::string_view line) {
  using R = Result<Segment>;
  auto rec = RecordReader::parse(line);
  if (!rec.ok()) return R::failure(ErrorCode::kCorrupt, rec.error());
  const RecordReader& f = rec.value();
  const std::string_view tag = f.str(0);
  // planc-seg-N holds the fields of versions 1..N.
  int version = 0;
  if (tag.rfind(kSpoolPrefix, 0) == 0) {
    auto r = std::from_chars(tag.data() + kSpoolPrefix.size(), tag.data() + tag.size(), version);
    if (r.ec != std::errc() || r.ptr != tag.data() + tag.size()) version = 0;
  }
  size_t fields = 1;
  for (const BillColumn& c : kColumns)
    if (c.spool_since && c.spool_since <= version) fields++;
  if (version < 1 || version > spool_version() || f.size() != fields)
    return R::failure(ErrorCode::kCorrupt, "unknown record version '" + std::string(tag) + "'");
  Bill b;
  size_t i = 1;
  for (const BillColumn& c : kColumns) {
    if (!c.spool_since || c.spool_since > version) continue;
    std::string error;
    if (!set_from_text(c, b, f.str(i), &error))
      return R::failure(ErrorCode::kCorrupt,
                        "field " + std::to_string(i) + " (" + c.name + "): " + error);
    i++;
  }
  return std::move(b.seg);
}

}  // namespace planc
