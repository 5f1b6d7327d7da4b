#include "common/billing.h"

#include <gtest/gtest.h>

#include <ctime>
#include <numeric>

#include "common/bill_schema.h"
#include "common/job_marks.h"

namespace planc {
namespace {

Segment seg(const std::string& qos, int64_t seconds, std::vector<GresUse> gres, uint32_t cpus = 0,
            uint64_t mem_mib = 0, const std::string& state = "COMPLETED") {
  Segment s;
  s.cluster = "c";
  s.job_id = 42;
  s.qos = qos;
  s.start_time = 1'700'000'000;
  s.end_time = s.start_time + seconds;
  s.cpus = cpus;
  s.mem_mib = mem_mib;
  s.gres = std::move(gres);
  s.state = state;
  return s;
}

PlancConfig config_with(const std::string& text) {
  auto r = parse_config(text, "test.conf");
  EXPECT_TRUE(r.ok()) << r.error();
  return r.value();
}

struct PriceCase {
  const char* name;
  Segment s;
  int64_t amount_micros;  // 1e-6 of the currency
  const char* zero_reason;
};

TEST(BillingTest, PriceTable) {
  const GresUse h800_8{"gpu", "h800", 8};
  Segment never = seg("p3-spot", 0, {}, 4, 1024, "CANCELLED");
  never.ran = false;
  Segment free_attempt = seg("p2-spot", 3600, {h800_8});
  free_attempt.free_attempt = true;
  Segment suspended = seg("p0-lease", 7200, {h800_8});
  suspended.suspended_seconds = 3600;
  // Cancelled by its owner during the grace of a preemption.
  Segment cancelled_in_grace = seg("p2-spot", 3600, {h800_8}, 0, 0, "CANCELLED");
  cancelled_in_grace.preempted = true;
  const PriceCase cases[] = {
      // 8 cards x 1 h x 20.00 = 160.00
      {"P0 list", seg("p0-lease", 3600, {h800_8}), 160'000'000, ""},
      {"P1 list", seg("p1-guaranteed", 3600, {h800_8}), 160'000'000, ""},
      // + 16 cores x 0.10 + 64 GiB x 0.01 = 162.24
      {"P0 cores and memory", seg("p0-lease", 3600, {h800_8}, 16, 65536), 162'240'000, ""},
      {"P2 x0.35", seg("p2-spot", 3600, {h800_8}), 56'000'000, ""},
      {"P3 x0.40", seg("p3-spot", 3600, {h800_8}), 64'000'000, ""},
      // Unknown GPU type: DefaultCardHourPrice (20.00)
      {"untyped gpu", seg("p0-lease", 3600, {{"gpu", "", 1}}), 20'000'000, ""},
      // MIG 1g.10gb = 0.142857 card: 2.85714
      {"MIG slice", seg("p0-lease", 3600, {{"gpu", "1g.10gb", 1}}), 2'857'140, ""},
      // MPS 50 of 100 per card: half a card
      {"MPS half", seg("p0-lease", 3600, {{"mps", "", 50}}), 10'000'000, ""},
      // Shards, 1 of 4 per card (config below): a quarter
      {"shard quarter", seg("p0-lease", 3600, {{"shard", "", 1}}), 5'000'000, ""},
      // Exact to a micro-unit, half up: 1 core for 1 s = 27.78 micros -> 28;
      // 180 s = 5000 exactly; 179 s = 4972.2 -> 4972 (not 0: no cent lost)
      {"one core second", seg("p0-lease", 1, {}, 1), 28, ""},
      {"half a cent", seg("p0-lease", 180, {}, 1), 5000, ""},
      {"under half a cent is kept", seg("p0-lease", 179, {}, 1), 4972, ""},
      // P3, 1 GPU for 1 s, 1 core, 1 GiB: (20 + 0.10 + 0.01) x 0.40 / 3600
      // = 2234.44 micros.  Rounded per bill to cents that was 0.00.
      {"short P3 run", seg("p3-spot", 1, {{"gpu", "h800", 1}}, 1, 1024), 2234, ""},
      {"suspended time is free", suspended, 160'000'000, ""},
      // Free by rule
      {"P2 preempted", seg("p2-spot", 3600, {h800_8}, 0, 0, "PREEMPTED"), 0,
       "preempted: unfinished preempted time is not billed"},
      {"P3 preempted", seg("p3-spot", 3600, {h800_8}, 0, 0, "PREEMPTED"), 0,
       "preempted: unfinished preempted time is not billed"},
      {"P2 cancelled during its grace", cancelled_in_grace, 0,
       "preempted: cancelled during its grace; unfinished preempted time is not billed"},
      {"P0 marked PREEMPTED is still charged", seg("p0-lease", 3600, {h800_8}, 0, 0, "PREEMPTED"),
       160'000'000, ""},
      {"P2 requeued by admin is charged", seg("p2-spot", 3600, {h800_8}, 0, 0, "REQUEUED"),
       56'000'000, ""},
      {"free attempt", free_attempt, 0, "free attempt after starvation upgrade"},
      {"node failure", seg("p0-lease", 3600, {h800_8}, 0, 0, "NODE_FAIL"), 0,
       "node failure: a run lost to a failed node is not billed"},
      {"cancelled while pending", never, 0, "never ran"},
      {"zero length", seg("p0-lease", 0, {h800_8}), 0, "zero billable seconds"},
      // Zero by arithmetic says why too
      {"nothing allocated", seg("p0-lease", 60, {}), 0,
       "nothing billable allocated: no GPU cards, cores or memory"},
  };
  PlancConfig cfg = config_with("CardWeight=1g.10gb:0.142857\nShardsPerCard=4\n");
  for (const PriceCase& c : cases) {
    Bill b = price_segment(cfg, c.s);
    EXPECT_EQ(b.amount_micros, c.amount_micros) << c.name;
    EXPECT_EQ(b.amount_minor, minor_of_micros(c.amount_micros)) << c.name;
    EXPECT_EQ(b.zero_reason, c.zero_reason) << c.name;
  }
}

// A bill of 0 always says why, also when the arithmetic makes it 0.
TEST(BillingTest, AP2RunMatchedInTheMarketPaysItsMatchedPriceForCards) {
  PlancConfig cfg;
  Segment s = seg("p2-spot", 3600, {{"gpu", "h800", 8}}, 16, 65536);
  const std::string matched =
      "[planc:market] matched price=9.00 currency=CNY round=2026-12-01T01:15:00Z "
      "start-by=2026-12-01T01:30:00Z run=0 gpus=8 nodes=1 type=h800 account=acct-spot "
      "partition=gpu bid=15.00";
  s.admin_comment = matched + " | admin: note";
  Bill b = price_segment(cfg, s);
  // 8 cards x 1 h x 9.00 = 72.00, + (16 x 0.10 + 64 x 0.01) x 0.35 = 0.784
  EXPECT_EQ(b.amount_micros, 72'784'000);
  EXPECT_EQ(b.card_hour_price, 9'000'000);
  EXPECT_EQ(b.price_permille, 350u);
  EXPECT_NE(b.note.find("P2 market: cards at the matched 9.00 CNY/card-hour"), std::string::npos);
  // A win covers the run it was won for: a later run (a requeue) is not
  // billed at it.
  s.segment = 1;
  EXPECT_EQ(price_segment(cfg, s).card_hour_price, 20'000'000);
  s.segment = 0;
  // A run that started outside the rounds: the floor it started at.
  s.admin_comment =
      "[planc:market] outside price=12.00 currency=CNY started=2026-12-01T01:20:00Z run=0 "
      "reason=operator bid=list";
  b = price_segment(cfg, s);
  EXPECT_EQ(b.card_hour_price, 12'000'000);
  EXPECT_NE(b.note.find("P2 market: cards at the floor 12.00 CNY/card-hour (the run started "
                        "outside the rounds)"),
            std::string::npos);
  // Still waiting (no matched price), or another tier: list x the factor.
  s.admin_comment =
      "[planc:market] waiting bid=15.00 currency=CNY reason=new since=2026-12-01T01:14:00Z";
  EXPECT_EQ(price_segment(cfg, s).amount_micros, 56'784'000);
  s.qos = "p3-spot";
  s.admin_comment = matched;
  EXPECT_EQ(price_segment(cfg, s).card_hour_price, 20'000'000);
  // Preempted: free, as every preempted spot run.
  s = seg("p2-spot", 3600, {{"gpu", "h800", 8}}, 0, 0, "PREEMPTED");
  s.admin_comment = matched;
  EXPECT_EQ(price_segment(cfg, s).amount_micros, 0);
}

TEST(BillingTest, AnInfusedReplicaIsItsPoolAccountsInternalCost) {
  PlancConfig cfg;
  Segment s = seg("p1-guaranteed", 3600, {{"gpu", "h800", 4}}, 8, 32768);
  s.account = "maas";
  s.admin_comment =
      "[planc:infused] pool maas-guaranteed: a replica capacity infusion added (P1, drain grace "
      "30 s)";
  Bill b = price_segment(cfg, s);
  Segment plain = s;
  plain.admin_comment.clear();
  EXPECT_EQ(b.amount_micros, price_segment(cfg, plain).amount_micros);  // its tier's price
  EXPECT_EQ(
      b.note,
      "capacity infusion: a replica of pool maas-guaranteed, internal cost of account maas; ");
  EXPECT_EQ(price_segment(cfg, plain).note, "");
}

TEST(BillingTest, ZeroByArithmeticSaysWhy) {
  struct Case {
    const char* name;
    const char* conf;
    Segment s;
    const char* zero_reason;
  };
  const Case cases[] = {
      {"free cores", "CoreHourPrice=0\n", seg("p0-lease", 3600, {}, 4),
       "zero price: planc.conf prices (or the tier's PriceFactor) are 0 for what it held"},
      // 1 core for 1 s at 0.000001 per hour: 1/3600 of a micro-unit
      {"below a micro-unit", "CoreHourPrice=0.000001\n", seg("p0-lease", 1, {}, 1),
       "exact amount below half a micro-unit (0.0000005 CNY)"},
  };
  for (const Case& c : cases) {
    Bill b = price_segment(config_with(c.conf), c.s);
    EXPECT_EQ(b.amount_micros, 0) << c.name;
    EXPECT_EQ(b.zero_reason, c.zero_reason) << c.name;
  }
}

TEST(BillingTest, MinorUnitsRoundHalfUpFromMicros) {
  struct Case {
    int64_t micros, minor;
  };
  const Case cases[] = {{0, 0},     {4999, 0},  {5000, 1},    {9999, 1}, {10000, 1},
                        {14999, 1}, {15000, 2}, {223444, 22}, {-3, 0},   {160'000'000, 16000}};
  for (const Case& c : cases) EXPECT_EQ(minor_of_micros(c.micros), c.minor) << c.micros;
}

// The defect this rule fixes: 100 one-second P3 runs on one GPU.  Rounded
// per bill they were 0.00 each; summed exactly and rounded once per invoice
// line they are 0.22.
TEST(BillingTest, ShortRunsSumExactlyThenRoundOnce) {
  PlancConfig cfg;
  int64_t micros = 0, per_bill_minor = 0;
  for (int i = 0; i < 100; i++) {
    Bill b = price_segment(cfg, seg("p3-spot", 1, {{"gpu", "h800", 1}}, 1, 1024));
    micros += b.amount_micros;
    per_bill_minor += b.amount_minor;
    EXPECT_EQ(b.zero_reason, "");
  }
  EXPECT_EQ(per_bill_minor, 0);
  EXPECT_EQ(micros, 223'400);
  EXPECT_EQ(minor_of_micros(micros), 22);
}

TEST(BillingTest, ExitCodeAsSacctShowsIt) {
  struct Case {
    uint32_t wait_status;
    ExitCode want;
  };
  const Case cases[] = {
      {0, {0, 0, "0:0"}},           {1 << 8, {1, 0, "1:0"}},
      {143 << 8, {143, 0, "15:0"}},  // 36608: a shell reporting SIGTERM
      {128 << 8, {128, 0, "0:0"}},  {255 << 8, {255, 0, "127:0"}},
      {9, {0, 9, "0:9"}},                                          // killed by SIGKILL
      {15, {0, 15, "0:15"}},        {0x80 | 11, {0, 11, "0:11"}},  // SIGSEGV with a core dump
  };
  for (const Case& c : cases) EXPECT_EQ(exit_code_of(c.wait_status), c.want) << c.wait_status;
}

TEST(BillingTest, QuantitiesAndPricesRecorded) {
  PlancConfig cfg = config_with("CardWeight=1g.10gb:0.142857\n");
  Bill b =
      price_segment(cfg, seg("p2-spot", 100, {{"gpu", "h800", 2}, {"gpu", "1g.10gb", 1}}, 4, 2048));
  EXPECT_EQ(b.tier, "P2");
  EXPECT_EQ(b.price_permille, 350u);
  EXPECT_EQ(b.billable_seconds, 100);
  EXPECT_EQ(b.card_micros, 2'142'857);
  EXPECT_EQ(b.card_micro_seconds, 214'285'700);
  EXPECT_EQ(b.core_seconds, 400);
  EXPECT_EQ(b.mem_mib_seconds, 204'800);
  EXPECT_EQ(b.card_hour_price, -1) << "two GPU types: no single price";
  EXPECT_EQ(format_card_seconds(b.card_micro_seconds), "214.285700");
  // A preempted segment is free but its usage is still on the bill.
  Bill p = price_segment(cfg, seg("p3-spot", 100, {{"gpu", "h800", 8}}, 0, 0, "PREEMPTED"));
  EXPECT_EQ(p.amount_micros, 0);
  EXPECT_EQ(p.card_micro_seconds, 800'000'000);
}

TEST(BillingTest, ShardsWithoutWeightSayWhy) {
  Bill b = price_segment(PlancConfig{}, seg("p0-lease", 3600, {{"shard", "", 2}}, 1));
  EXPECT_EQ(b.card_micros, 0);
  EXPECT_NE(b.note.find("ShardsPerCard is not set"), std::string::npos);
  EXPECT_EQ(b.amount_micros, 100'000);  // the core is still charged: 0.10
}

TEST(BillingTest, UnknownQosChargedAtListPriceWithNote) {
  Bill b = price_segment(PlancConfig{}, seg("normal", 3600, {{"gpu", "h800", 1}}));
  EXPECT_EQ(b.tier, "");
  EXPECT_EQ(b.amount_micros, 20'000'000);
  EXPECT_NE(b.note.find("not a Plan C tier"), std::string::npos);
}

TEST(BillingTest, HourSplitAddsUp) {
  struct Case {
    int64_t start_offset, seconds;
    size_t slices;
  };
  const Case cases[] = {
      {0, 3600, 1}, {3599, 2, 2}, {1800, 7200, 3}, {0, 1, 1}, {100, 3 * 86400, 73}};
  PlancConfig cfg;
  for (const Case& c : cases) {
    Segment s = seg("p0-lease", c.seconds, {{"gpu", "h800", 3}}, 7, 1000);
    s.start_time = 1'699'999'200 + c.start_offset;  // 1'699'999'200 is an hour start
    s.end_time = s.start_time + c.seconds;
    Bill b = price_segment(cfg, s);
    auto slices = split_by_hour(b);
    ASSERT_EQ(slices.size(), c.slices) << c.start_offset << "+" << c.seconds;
    int64_t amount = 0, cards = 0, cores = 0, mem = 0, secs = 0;
    for (const HourSlice& h : slices) {
      EXPECT_EQ(h.hour % 3600, 0);
      amount += h.amount_micros;
      cards += h.card_micro_seconds;
      cores += h.core_seconds;
      mem += h.mem_mib_seconds;
      secs += h.seconds;
    }
    EXPECT_EQ(amount, b.amount_micros);
    EXPECT_EQ(cards, b.card_micro_seconds);
    EXPECT_EQ(cores, b.core_seconds);
    EXPECT_EQ(mem, b.mem_mib_seconds);
    EXPECT_EQ(secs, c.seconds);
  }
  // 3599..3601: one second in each hour, half the amount each.
  Segment s = seg("p0-lease", 2, {}, 3600);  // 3600 cores x 2 s = 2 core-hours = 0.20
  s.start_time = 1'699'999'200 + 3599;
  s.end_time = s.start_time + 2;
  auto slices = split_by_hour(price_segment(cfg, s));
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].amount_micros, 100'000);
  EXPECT_EQ(slices[1].amount_micros, 100'000);
}

TEST(BillingTest, ZeroLengthSegmentHasOneEmptySlice) {
  Bill b = price_segment(PlancConfig{}, seg("p0-lease", 0, {{"gpu", "h800", 1}}));
  auto slices = split_by_hour(b);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].amount_micros, 0);
}

TEST(BillingTest, FormatMinor) {
  EXPECT_EQ(format_minor(0), "0.00");
  EXPECT_EQ(format_minor(5), "0.05");
  EXPECT_EQ(format_minor(16224), "162.24");
  EXPECT_EQ(format_minor(-5), "-0.05");
  EXPECT_EQ(format_micros6(2234), "0.002234");
  EXPECT_EQ(format_micros6(162'240'000), "162.240000");
}

// The writer's fast formatters write what the C library writes.
TEST(BillingTest, TimestampsAsStrftimeWritesThem) {
  auto by_libc = [](int64_t t) {
    time_t tt = static_cast<time_t>(t);
    struct tm tm;
    gmtime_r(&tt, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S+00", &tm);
    return std::string(buf);
  };
  // Every day boundary and an odd second of every day, 1970 to 2110 (leap
  // years, 2000 and 2100), and the edges the C library takes over.
  for (int64_t day = 0; day < 51'500; day++)
    for (int64_t t : {day * 86400, day * 86400 + 86399, day * 86400 + 3723})
      ASSERT_EQ(pg_timestamp(t), by_libc(t)) << t;
  for (int64_t t : {int64_t{-1}, int64_t{-86401}, int64_t{253'402'300'799},
                    int64_t{253'402'300'800}, int64_t{1'800'000'000}})
    EXPECT_EQ(pg_timestamp(t), by_libc(t)) << t;
  EXPECT_EQ(pg_timestamp(1'800'000'000), "2027-01-15 08:00:00+00");
}

TEST(BillingTest, DecimalsAsPrintfWritesThem) {
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{1023}, int64_t{1024}, int64_t{1025},
                    int64_t{123'456'789'012}, int64_t{-1}, int64_t{-1025}}) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%lld.%010lld", static_cast<long long>(v / 1024),
                  static_cast<long long>((v % 1024) * 9765625LL));
    EXPECT_EQ(format_gib_seconds(v), buf) << v;
  }
  EXPECT_EQ(format_gib_seconds(1536), "1.5000000000");
}

// The CRC of every record (sliced eight bytes at a time) is the CRC-32 of
// the bytes one at a time: old spool files stay readable.
TEST(BillingTest, RecordCrcIsCrc32) {
  EXPECT_EQ(record_crc32("123456789"), 0xcbf43926u);  // the CRC-32 check value
  EXPECT_EQ(record_crc32(""), 0u);
  auto bytewise = [](std::string_view s) {
    uint32_t c = 0xffffffffu;
    for (unsigned char ch : s) {
      c ^= ch;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
  };
  std::string s;
  for (int n = 0; n < 300; n++) {
    ASSERT_EQ(record_crc32(s), bytewise(s)) << n;
    s += static_cast<char>((n * 131 + 7) & 0xff);
  }
}

// Escapes at the start, the end and side by side, in every field of a
// record, come back as they went in.
TEST(BillingTest, RecordFieldsKeepEveryByte) {
  const std::vector<std::string> fields = {
      "",       "\\", "\t", "a\\", "\\a", "\t\n\r\\", "plain", "tab\tin", std::string(1, '\0'),
      "x\\\\y", "\n"};
  RecordWriter w("v1");
  for (const std::string& f : fields) w.add(f);
  w.add(int64_t{-42});
  auto r = RecordReader::parse(w.line());
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r.value().size(), fields.size() + 2);
  EXPECT_EQ(r.value().str(0), "v1");
  for (size_t i = 0; i < fields.size(); i++) EXPECT_EQ(r.value().str(i + 1), fields[i]) << i;
  int64_t n = 0;
  EXPECT_TRUE(r.value().num(fields.size() + 1, &n));
  EXPECT_EQ(n, -42);
  EXPECT_FALSE(r.value().num(1, &n)) << "an empty field is no number";
}

TEST(BillingTest, SpoolRecordRoundTrip) {
  Segment s = seg("p2-spot", 10, {{"gpu", "h800", 8}, {"mps", "", 25}}, 4, 2048, "PREEMPTED");
  s.job_name = "it's a \"job\"\twith\ttabs\nand 中文 and \\backslash";
  s.user = "pcalice";
  s.admin_comment = std::string(kFreeAttemptTag) + " upgraded";
  s.free_attempt = true;
  s.array_job_id = 7;
  s.array_task_id = 3;
  s.preempted = true;
  std::string line = serialize_segment(s);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << "one line per record";
  auto r = parse_segment(line);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value(), s);
}

// A spool file written before an upgrade (record version 1, no
// `preempted` field) is still billed after it.
TEST(BillingTest, SpoolRecordVersion1IsStillRead) {
  const std::string v1 =
      "planc-seg-1\tc\t42\t0\t4294967294\t0\t4294967294\t0\t0\t1700000000\t1700003600\t0"
      "\t1001\tpcbob\tacct-spot\tp2-spot\tnormal\tgpu1\t1\tCOMPLETED\t0\tjob\t\t\t1\t100"
      "\tgpu:h800:8\t1\t0\t";
  char crc[16];
  std::snprintf(crc, sizeof crc, "\t%08x\n", record_crc32(v1));
  auto r = parse_segment(v1 + crc);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().job_id, 42u);
  EXPECT_EQ(r.value().gres, (std::vector<GresUse>{{"gpu", "h800", 8}}));
  EXPECT_FALSE(r.value().preempted);
}

TEST(BillingTest, SpoolRecordDamageIsDetected) {
  std::string line = serialize_segment(seg("p0-lease", 10, {}));
  struct Case {
    const char* name;
    std::string text;
    const char* error;
  };
  std::string flipped = line;
  flipped[20] = flipped[20] == 'x' ? 'y' : 'x';
  const Case cases[] = {
      {"torn", line.substr(0, line.size() / 2), "no checksum (torn record)"},
      {"bit flip", flipped, "checksum mismatch"},
      {"empty", "", "no checksum (torn record)"},
  };
  for (const Case& c : cases) {
    auto r = parse_segment(c.text);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.error(), c.error) << c.name;
  }
}

TEST(BillingTest, ConfigKeysForFractions) {
  struct Case {
    const char* text;
    const char* error;  // nullptr: valid
  };
  const Case cases[] = {
      {"CardWeight=1g.10gb:0.142857,3g.40gb:0.428571\n", nullptr},
      {"CardWeight=1g.10gb\n",
       "test.conf:1: key 'CardWeight': '1g.10gb' is not TYPE:WEIGHT (e.g. 1g.10gb:0.142857)"},
      {"CardWeight=1g.10gb:1.5\n",
       "test.conf:1: key 'CardWeight': '1.5' in '1g.10gb:1.5' is not a valid weight (above 0, at "
       "most 1.00)"},
      {"MpsPerCard=0\n", "test.conf:1: key 'MpsPerCard': "},
      {"ShardsPerCard=8\n", nullptr},
  };
  for (const Case& c : cases) {
    auto r = parse_config(c.text, "test.conf");
    if (!c.error) {
      EXPECT_TRUE(r.ok()) << c.text << r.error();
    } else {
      ASSERT_FALSE(r.ok()) << c.text;
      EXPECT_EQ(r.error().rfind(c.error, 0), 0u) << r.error();
    }
  }
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

TEST(BillingTest, InvalidUtf8IsReplacedNotRejected) {
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"plain", "plain"},
      {"\xe5\x90\x8d\xe5\xad\x97 \xe2\x9c\x93",
       "\xe5\x90\x8d\xe5\xad\x97 \xe2\x9c\x93"},  // valid CJK, check mark
      {"a\xff"
       "b",
       "a\xef\xbf\xbd"
       "b"},
      {"\xe5\x90", "\xef\xbf\xbd\xef\xbf\xbd"},                  // truncated sequence
      {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                  // overlong '/'
      {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // surrogate
  };
  for (const Case& c : cases) {
    Segment s;
    s.job_name = c.in;
    make_text_valid_utf8(&s);
    EXPECT_EQ(s.job_name, c.out) << c.in;
  }
}

}  // namespace
}  // namespace planc
