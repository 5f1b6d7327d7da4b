// The bill's column table: the spool records, the COPY row and the SELECT
// it generates are what the hand-written code wrote before it (golden
// lines), and read back what they wrote.
#include "common/bill_schema.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/config.h"

namespace planc {
namespace {

// The segment the golden lines below were written from (by the code before
// the column table: serialize_segment and bill_copy_row by position).
Segment golden_segment() {
  Segment s;
  s.cluster = "planc";
  s.job_id = 4242;
  s.array_job_id = 4240;
  s.array_task_id = 2;
  s.het_job_offset = kNoId;
  s.segment = 1;
  s.submit_time = 1800000000;
  s.start_time = 1800000100;
  s.end_time = 1800003700;
  s.suspended_seconds = 60;
  s.uid = 1001;
  s.user = "pcbob";
  s.account = "acct-spot";
  s.qos = "p2-spot";
  s.partition = "gpu";
  s.nodes = "gpu[1-2]";
  s.node_count = 2;
  s.state = "COMPLETED";
  s.wait_status = 36608;
  s.job_name = "a\tb\nc\\d 名字";
  s.tres_req = "cpu=4,gres/gpu=8";
  s.tres_alloc = "cpu=4,node=2";
  s.cpus = 4;
  s.mem_mib = 3000;
  s.gres = {{"gpu", "h800", 6}, {"gpu", "1g.10gb", 2}};
  s.admin_comment = "note";
  s.preempted = true;
  return s;
}

const char kGoldenV2[] =
    "planc-seg-2\tplanc\t4242\t4240\t2\t0\t4294967294\t1\t1800000000\t1800000100\t1800003700\t60"
    "\t1001\tpcbob\tacct-spot\tp2-spot\tgpu\tgpu[1-2]\t2\tCOMPLETED\t36608\ta\\tb\\nc\\\\d 名字"
    "\tcpu=4,gres/"
    "gpu=8\tcpu=4,node=2\t4\t3000\tgpu:h800:6,gpu:1g.10gb:2\t1\t0\tnote\t1\t4af99278\n";

const char kGoldenColumns[] =
    "cluster, job_id, start_time, end_time, segment, array_job_id, array_task_id, het_job_id, "
    "het_job_offset, submit_time, uid, user_name, account, tier, qos, partition, nodes, "
    "node_count, state, wait_status, job_name, tres_req, tres_alloc, cpus, mem_mib, gpu_cards, "
    "gpu_detail, billable_seconds, card_seconds, core_seconds, mem_gib_seconds, currency, "
    "card_hour_price, core_hour_price, mem_gib_hour_price, tier_factor, amount_minor, "
    "zero_reason, note, admin_comment, source, exit_status, exit_signal, exit_code, amount_micros";
const char kGoldenRow[] =
    "planc\t4242\t2027-01-15 08:01:40+00\t2027-01-15 09:01:40+00\t1\t4240\t2\t\\N\t\\N"
    "\t2027-01-15 08:00:00+00\t1001\tpcbob\tacct-spot\tP2\tp2-spot\tgpu\tgpu[1-2]\t2\tCOMPLETED"
    "\t36608\ta\\tb\\nc\\\\d 名字\tcpu=4,gres/gpu=8\tcpu=4,node=2\t4\t3000\t6.285714"
    "\tgpu:h800:6=6.000000 cards,gpu:1g.10gb:2=0.285714 cards\t3540\t22251.427560\t14160"
    "\t10371.0937500000\tCNY\t\\N\t0.10\t0.01\t0.350\t0"
    "\tpreempted: completed during its grace; unfinished preempted time is not billed\t\tnote"
    "\tjobcomp\t143\t0\t15:0\t0";

Bill golden_bill() {
  PlancConfig cfg;
  cfg.prices.card_weight["1g.10gb"] = 142857;
  return price_segment(cfg, golden_segment());
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    size_t next = s.find(sep, at);
    out.push_back(s.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) return out;
    at = next + sep.size();
  }
}

// Decimals equal as numbers ("0.10" and "0.100000"), anything else as text.
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  auto x = parse_decimal_micros(a), y = parse_decimal_micros(b);
  return x && y && *x == *y;
}

TEST(BillSchemaTest, SpoolRecordIsTheGoldenVersion2Line) {
  EXPECT_EQ(serialize_segment(golden_segment()), kGoldenV2);
  auto r = parse_segment(kGoldenV2);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value(), golden_segment());
}

TEST(BillSchemaTest, BadFieldsAndVersionsAreCorrupt) {
  struct Case {
    const char* name;
    std::vector<std::string> fields;  // after the version tag
    const char* version;
    const char* error;
  };
  std::vector<std::string> good = split(std::string(kGoldenV2).substr(12), "\t");
  good.pop_back();  // the CRC
  auto with = [&](size_t i, std::string v) {
    auto f = good;
    f[i] = std::move(v);
    return f;
  };
  const Case cases[] = {
      {"job id not a number", with(1, "42x"), "planc-seg-2",
       "field 2 (job_id): '42x' is not a number"},
      {"bad gres", with(25, "gpu"), "planc-seg-2", "field 26 (gres): 'gpu' is malformed"},
      {"bad gres count", with(25, "gpu:h800:x"), "planc-seg-2",
       "field 26 (gres): 'gpu:h800:x' is malformed"},
      {"a future version", good, "planc-seg-3", "unknown record version 'planc-seg-3'"},
      {"version 1 with version 2's fields", good, "planc-seg-1",
       "unknown record version 'planc-seg-1'"},
      {"not ours", good, "other-1", "unknown record version 'other-1'"},
  };
  for (const Case& c : cases) {
    RecordWriter w(c.version);
    for (const std::string& f : c.fields) w.add(f);
    auto r = parse_segment(w.line());
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.code(), ErrorCode::kCorrupt) << c.name;
    EXPECT_EQ(r.error(), c.error) << c.name;
  }
}

TEST(BillSchemaTest, CopyRowWritesWhatTheHandWrittenOneWrote) {
  const std::vector<std::string> old_cols = split(kGoldenColumns, ", ");
  const std::vector<std::string> old_row = split(kGoldenRow, "\t");
  ASSERT_EQ(old_cols.size(), old_row.size());
  std::string row = bill_copy_row(golden_bill(), "jobcomp");
  ASSERT_EQ(row.back(), '\n');
  row.pop_back();
  const std::vector<std::string> cols = split(bill_copy_columns(), ", ");
  const std::vector<std::string> values = split(row, "\t");
  ASSERT_EQ(cols.size(), values.size());
  // Every column written then is written now (a column added since is
  // checked against the migrations by test_billing.py).
  const std::set<std::string> now_cols(cols.begin(), cols.end()),
      then(old_cols.begin(), old_cols.end());
  EXPECT_TRUE(std::includes(now_cols.begin(), now_cols.end(), then.begin(), then.end()));
  std::map<std::string, std::string> now;
  for (size_t i = 0; i < cols.size(); i++) now[cols[i]] = values[i];
  for (size_t i = 0; i < old_cols.size(); i++)
    EXPECT_TRUE(same_value(now[old_cols[i]], old_row[i]))
        << old_cols[i] << ": " << now[old_cols[i]] << " was " << old_row[i];
}

// A batch as the writer sends it: a key twice (a replayed spool file
// beside its original) is sent once, the first kept; the hourly rows sum
// the bills of one hour, account, user and tier into one row.
TEST(BillSchemaTest, ABatchSendsEachKeyOnceAndSumsItsHours) {
  Bill a = golden_bill();
  a.seg.start_time = 1'800'000'000;  // 08:00:00, within one hour
  a.seg.end_time = 1'800'000'600;
  a.seg.suspended_seconds = 0;
  a.card_micro_seconds = 600'000'000, a.core_seconds = 600, a.mem_mib_seconds = 1024 * 600;
  a.amount_micros = 5'000'000;
  Bill again = a;  // the same key
  again.amount_micros = 7;
  Bill b = a;  // another job in the same hour, same account, user, tier
  b.seg.job_id = a.seg.job_id + 1;
  Bill other = a;  // another tier
  other.seg.job_id = a.seg.job_id + 2;
  other.tier = "P3";
  const BillBatch batch = bill_batch({a, again, b, other}, "jobcomp");
  EXPECT_EQ(batch.unique, (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(batch.copy_rows, bill_copy_row(a, "jobcomp") + bill_copy_row(b, "jobcomp") +
                                 bill_copy_row(other, "jobcomp"));
  const std::vector<std::string> rows = split(batch.usage_rows, "\n");
  ASSERT_EQ(rows.size(), 3u) << batch.usage_rows;  // two rows and the last newline's ""
  EXPECT_EQ(rows[2], "");
  const std::string key =
      "2027-01-15 08:00:00+00\t" + a.seg.cluster + "\t" + a.seg.account + "\t" + a.seg.user + "\t";
  EXPECT_EQ(rows[0], key + a.tier + "\t1200.000000\t1200\t1200.0000000000\t10000000\t2");
  EXPECT_EQ(rows[1], key + "P3\t600.000000\t600\t600.0000000000\t5000000\t1");
}

// What PostgreSQL returns for bill_select_list()'s expressions: the
// in-memory value as text, NULL as the null value.
std::vector<std::string> select_values(const Bill& b) {
  std::vector<std::string> row;
  for (const BillColumn& c : bill_columns()) {
    if (!c.read_back()) continue;
    FieldValue v = column_value(c, b);
    row.push_back(v.is_text() ? std::string(v.text()) : std::to_string(v.num()));
  }
  return row;
}

TEST(BillSchemaTest, SelectReadsBackEveryStoredField) {
  const Bill b = golden_bill();
  auto back = bill_from_row(select_values(b));
  ASSERT_TRUE(back.ok()) << back.error();
  for (const BillColumn& c : bill_columns()) {
    if (!c.read_back()) continue;
    FieldValue want = column_value(c, b), got = column_value(c, back.value());
    if (want.is_text())
      EXPECT_EQ(got.text(), want.text()) << c.name;
    else
      EXPECT_EQ(got.num(), want.num()) << c.name;
  }
  // The expressions PostgreSQL evaluates: one per value, NULLs coalesced.
  const std::string sql = bill_select_list();
  EXPECT_NE(sql.find("extract(epoch FROM start_time)::bigint"), std::string::npos) << sql;
  EXPECT_NE(sql.find("coalesce(array_task_id, 4294967294)"), std::string::npos) << sql;
  EXPECT_NE(sql.find("coalesce((card_hour_price * 1000000)::bigint, -1)"), std::string::npos)
      << sql;
  EXPECT_NE(sql.find("(mem_gib_seconds * 1024)::bigint"), std::string::npos) << sql;
  auto short_row = bill_from_row({"planc"});
  ASSERT_FALSE(short_row.ok());
  EXPECT_EQ(short_row.code(), ErrorCode::kCorrupt);
}

// Folding stored bills into the hourly totals (BillStore::rollup) reads
// only their hour columns back: the hourly rows made from what it reads are
// those the writer would have made from the bill itself, for a run over
// several hours and for one that never ran (its reason says so; it counts
// in its first hour only).
TEST(BillSchemaTest, TheHourColumnsReadBackMakeTheSameHourlyRows) {
  Bill ran = golden_bill();
  ran.seg.start_time = 1'800'000'000 + 1234;  // 08:20:34
  ran.seg.end_time = ran.seg.start_time + 3 * 3600 + 17;
  ran.card_micro_seconds = 8'100'000'001, ran.core_seconds = 97, ran.mem_mib_seconds = 65'537;
  ran.amount_micros = 12'345'679;
  ran.zero_reason = "";
  Bill never = ran;
  never.seg.job_id++;
  never.seg.ran = false;
  never.zero_reason = kNeverRan;
  never.card_micro_seconds = never.core_seconds = never.mem_mib_seconds = never.amount_micros = 0;
  // What PostgreSQL returns for bill_hours_select_list(): each column's
  // in-memory value as text, in that list's order (the names it reads).
  const std::string sql = bill_hours_select_list();
  std::vector<std::string> names;
  for (const std::string& e : split(sql, ", ")) names.push_back(e);
  ASSERT_EQ(names.size(), 11u) << sql;
  EXPECT_NE(sql.find("(mem_gib_seconds * 1024)::bigint"), std::string::npos) << sql;
  for (const Bill* b : {&ran, &never}) {
    std::vector<std::string> text;
    for (const std::string& e : names)
      for (const BillColumn& c : bill_columns())
        if (e.find(std::string(c.name)) != std::string::npos &&
            (e == c.name || e.find(std::string("(") + c.name) != std::string::npos ||
             e.find(std::string(" ") + c.name + ")") != std::string::npos)) {
          FieldValue v = column_value(c, *b);
          text.push_back(v.is_text() ? std::string(v.text()) : std::to_string(v.num()));
          break;
        }
    ASSERT_EQ(text.size(), names.size()) << sql;
    std::vector<std::string_view> row(text.begin(), text.end());
    auto back = bill_hours_from_row(row);
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back.value().seg.ran, b->seg.ran);
    UsageTotals totals;
    totals.add(back.value());
    EXPECT_EQ(totals.copy_rows(), usage_copy_rows({b}));
    EXPECT_EQ(totals.rows(), b->seg.ran ? 4u : 1u);
  }
  auto short_row = bill_hours_from_row({"planc"});
  ASSERT_FALSE(short_row.ok());
  EXPECT_EQ(short_row.code(), ErrorCode::kCorrupt);
}

TEST(BillSchemaTest, TableIsConsistent) {
  std::set<std::string> names;
  int version = 0;
  for (const BillColumn& c : bill_columns()) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(names.insert(c.name).second) << "named once";
    EXPECT_EQ(c.in_table(), *c.sql_type != '\0') << "a column has its type, a spool field none";
    if (c.spool_since) {
      EXPECT_TRUE(c.seg_get && c.seg_set) << "a spooled field is a Segment field";
      EXPECT_GE(c.spool_since, version) << "new spooled fields go at the end";
      version = c.spool_since;
    }
    if (c.written()) {
      EXPECT_TRUE(c.seg_get || c.bill_get) << "a written column has a value";
    }
    if (c.nullable) {
      EXPECT_TRUE(c.in_table()) << "NULL is a column's";
      // Text is NULL when empty: only where "" means "not measured".
      if (c.is_text()) EXPECT_TRUE(c.measured) << "a NULL text column is a measured one";
    }
    if (c.measured) {
      EXPECT_TRUE(c.nullable) << "not measured yet is NULL, never 0";
      EXPECT_EQ(c.spool_since, 0) << "jobcomp cannot know usage: never spooled";
      EXPECT_TRUE(c.bill_get && c.bill_set) << "read back, so measure can tell what is unmeasured";
    }
  }
}

TEST(BillSchemaTest, MeasuredColumnsAreNullUntilMeasured) {
  // As jobcomp writes a bill: every measured column NULL in the COPY row.
  Bill b = golden_bill();
  std::string row = bill_copy_row(b, "jobcomp");
  row.pop_back();
  const std::vector<std::string> cols = split(bill_copy_columns(), ", ");
  const std::vector<std::string> values = split(row, "\t");
  ASSERT_EQ(cols.size(), values.size());
  std::map<std::string, std::string> now;
  for (size_t i = 0; i < cols.size(); i++) now[cols[i]] = values[i];
  for (const char* c : {"measured_at", "used_cpu_seconds", "max_rss_bytes", "tres_usage_in_tot",
                        "gpu_util_percent"})
    EXPECT_EQ(now[c], "\\N") << c;
  const std::string sql = bill_select_list();
  EXPECT_NE(sql.find("coalesce(tres_usage_in_tot, '')"), std::string::npos) << sql;
  EXPECT_NE(sql.find("coalesce((used_cpu_seconds * 1000000)::bigint, -1)"), std::string::npos)
      << sql;

  // measure's UPDATE: the key, then each measured column; NULL stays NULL.
  EXPECT_EQ(bill_measure_update_sql(),
            "UPDATE planc.bill SET measured_at = $4::timestamptz, used_cpu_seconds = $5::numeric, "
            "max_rss_bytes = $6::bigint, tres_usage_in_tot = $7::text, gpu_util_percent = "
            "$8::numeric WHERE cluster = $1::text AND job_id = $2::bigint AND start_time = "
            "$3::timestamptz AND measured_at IS NULL");
  b.measured_at = 1800007200;
  using P = std::vector<std::optional<std::string>>;
  EXPECT_EQ(bill_measure_params(b),
            (P{"planc", "4242", "2027-01-15 08:01:40+00", "2027-01-15 10:00:00+00", std::nullopt,
               std::nullopt, std::nullopt, std::nullopt}));
  b.used_cpu_micro_seconds = 5012345;
  b.max_rss_bytes = 1843200;
  b.tres_usage_in_tot = "cpu=5012,mem=1843200";
  EXPECT_EQ(bill_measure_params(b),
            (P{"planc", "4242", "2027-01-15 08:01:40+00", "2027-01-15 10:00:00+00", "5.012345",
               "1843200", "cpu=5012,mem=1843200", std::nullopt}));
  // A measured 0 is a 0, not NULL.
  b.used_cpu_micro_seconds = 0;
  EXPECT_EQ(bill_measure_params(b)[4], std::optional<std::string>("0.000000"));

  // And reads back.
  auto back = bill_from_row(select_values(b));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back.value().used_cpu_micro_seconds, 0);
  EXPECT_EQ(back.value().max_rss_bytes, 1843200);
  EXPECT_EQ(back.value().tres_usage_in_tot, "cpu=5012,mem=1843200");
  EXPECT_EQ(back.value().gpu_util_milli_percent, -1);
}

TEST(BillSchemaTest, ListShowsWhatPeopleRead) {
  Bill b = golden_bill();
  b.amount_micros = 2234;
  std::map<std::string, std::string> shown;
  for (const BillColumn& c : bill_columns())
    if (c.list_label) shown[c.list_label] = show_column(c, b);
  EXPECT_EQ(shown["JobID"], "4240_2");
  EXPECT_EQ(shown["JobName"], b.seg.job_name);
  // Times as unix seconds: planc-bill shows them in the reader's zone.
  EXPECT_EQ(shown["Start"], std::to_string(b.seg.start_time));
  EXPECT_EQ(shown["MemGiBSeconds"], format_gib_seconds(b.mem_mib_seconds));
  EXPECT_EQ(shown["CardSeconds"], "22251.427560");
  EXPECT_EQ(shown["Amount"], "0.002234");
  EXPECT_EQ(shown["ExitCode"], "15:0");
  EXPECT_EQ(shown["Free"],
            "preempted: completed during its grace; unfinished preempted time is not billed");
  // Not measured yet: nothing, not 0.
  b.max_rss_bytes = -1;
  b.used_cpu_micro_seconds = -1;
  for (const BillColumn& c : bill_columns())
    if (c.list_label) shown[c.list_label] = show_column(c, b);
  EXPECT_EQ(shown["MaxRSSBytes"], "");
  EXPECT_EQ(shown["UsedCPUSeconds"], "");
}

TEST(BillSchemaTest, ListTypesTellJsonNumbersFromTextAndTimes) {
  std::map<std::string, ListType> type;
  std::set<std::string> by_default;
  for (const BillColumn& c : bill_columns()) {
    if (!c.list_label) continue;
    type[c.list_label] = column_list_type(c);
    if (c.list_default) by_default.insert(c.list_label);
  }
  // An array task's id is 7_3: text, never a number.
  EXPECT_EQ(type["JobID"], ListType::kText);
  EXPECT_EQ(type["Start"], ListType::kTime);
  EXPECT_EQ(type["Amount"], ListType::kNumber);
  EXPECT_EQ(type["CardSeconds"], ListType::kNumber);
  EXPECT_EQ(type["ExitCode"], ListType::kText);
  EXPECT_EQ(type["JobName"], ListType::kText);
  EXPECT_TRUE(by_default.count("JobName"));
  EXPECT_FALSE(by_default.count("Partition"));
}

}  // namespace
}  // namespace planc
