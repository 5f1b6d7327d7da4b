// jobcomp/planc's costs against the alternatives, in one process, one run.
// (slurmctld/planc's job-begin hook appends the same record the same way
// to its run-start journal: figure 1 is its cost too.)
//
//  1. The callback: what jobcomp_p_log_record does under slurmctld's job
//     write lock after reading the job (serialize_segment + one locked
//     write(2) to the spool file), per segment, p50/p99 over --segments.
//     Not included: segment_of(), the copy of ~30 fields out of the
//     job_record_t, which needs a live slurmctld;
//     against a synchronous single-row INSERT per segment (what
//     jobcomp/mysql does under that lock), over --sync-segments.
//  2. Ingest: the worker's path (read spool lines, parse, price, write with
//     BillStore: one COPY into planc.bill plus the hourly upsert),
//     in segments per second, against a raw COPY of the same rendered rows
//     into the same table (planc.bill, emptied before each run).  Rounds
//     alternate raw, planc, planc, raw, ...
//
//   jobcomp_bench CONNINFO [--segments N] [--sync-segments N] [--ingest N] [--rounds R]
//                [--ingest-only 1] [--serial 1] [--render-only 1] [--batch N] [--cloud 1]
// CONNINFO must reach a database with sql/ applied, as a role that may
// TRUNCATE planc.bill (a private cluster's postgres).  Destroys its bills.
// --serial 1: figure 2's writer in one thread, each batch parsed and priced
// before it is written (the baseline of the worker's overlap).
// --render-only 1: figure 3 alone (CONNINFO is not used): the writer's CPU
// a bill without a database, per stage.
// --cloud 1: the bills of a GPU cloud (cloud_sample: thousands of users,
// runs of up to a day over many hours) instead of one shape of short runs
// by 50 users.
// --batch N: figure 2's writer stores N bills a transaction instead of
// jobcomp/planc's kBillsPerTransaction.
// --ingest-only 1: figure 2 alone, into a table that keeps the bills it
// holds (test/bench/bench-bills loads millions first): the runs start this
// hour, under cluster "bench", and only those are deleted between rounds.
#include <fcntl.h>
#include <libpq-fe.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include "common/append_file.h"
#include "common/bill_store.h"
#include "common/billing.h"
#include "common/config.h"
#include "common/spool.h"

namespace {

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

planc::Segment sample(uint32_t i) {
  planc::Segment s;
  s.cluster = "bench";
  s.job_id = 1000000 + i;
  s.segment = 0;
  s.submit_time = 1'780'000'000;
  s.start_time = 1'780'000'000 + i % 7200;
  s.end_time = s.start_time + 600 + i % 5000;
  s.uid = 1000 + i % 50;
  s.user = "user" + std::to_string(i % 50);
  s.account = "acct-" + std::to_string(i % 10);
  s.qos = i % 4 == 0   ? "p0-lease"
          : i % 4 == 1 ? "p1-guaranteed"
          : i % 4 == 2 ? "p2-spot"
                       : "p3-spot";
  s.partition = "gpu";
  s.nodes = "gpu[1-2]";
  s.node_count = 2;
  s.state = i % 9 == 0 ? "PREEMPTED" : "COMPLETED";
  s.job_name = "train-llm-run-" + std::to_string(i);
  s.tres_req = "cpu=16,mem=64G,node=2,billing=16,gres/gpu=8";
  s.tres_alloc = "cpu=16,mem=64G,node=2,billing=16,gres/gpu=8";
  s.cpus = 16;
  s.mem_mib = 65536;
  s.gres = {{"gpu", "h800", 8}};
  return s;
}

// A GPU cloud's bill, as test/bench/bench-bills loads them: 2,000 users in
// 200 accounts, tiers P0 10% / P1 15% / P2 30% / P3 45%, 1-8 GPUs, run
// lengths skewed short (a cube of a uniform, up to a day: each bill spreads
// over as many hours of planc.usage_hourly as it ran), a million ending a
// day in the order they end.  The runs end at 1,780,000,000 + i x 86.4 ms.
planc::Segment cloud_sample(uint32_t i) {
  static const char* kTiers[] = {"p0-lease", "p1-guaranteed", "p1-guaranteed", "p2-spot",
                                 "p2-spot",  "p2-spot",       "p3-spot",       "p3-spot",
                                 "p3-spot",  "p3-spot"};
  static const uint32_t kGpus[] = {1, 1, 1, 1, 2, 2, 4, 8};
  planc::Segment s = sample(i);
  const uint32_t u = (i * 7919u) % 2000;
  // A fixed hash of i as the uniform, so every run makes the same bills.
  const double x = static_cast<double>((i * 2654435761u) >> 8) / (1u << 24);
  const int64_t len = std::max<int64_t>(10, static_cast<int64_t>(x * x * x * 86400));
  s.end_time = 1'780'000'000 + static_cast<int64_t>(i) * 864 / 10000;
  s.start_time = s.end_time - len;
  s.submit_time = s.start_time - 120;
  s.uid = 100000 + u;
  s.user = "u" + std::to_string(u);
  s.account = "a" + std::to_string(u % 200);
  s.qos = kTiers[i % 10];
  const uint32_t g = kGpus[(i * 31) % 8];
  s.gres = {{"gpu", "h800", g}};
  s.cpus = 8 * g;
  s.mem_mib = 65536 * g / 8;
  s.nodes = "gpu" + std::to_string(i % 1000);
  s.node_count = 1;
  s.tres_req = s.tres_alloc =
      "cpu=" + std::to_string(8 * g) + ",node=1,gres/gpu=" + std::to_string(g);
  return s;
}

struct Percentiles {
  double p50, p99, max;
};
Percentiles percentiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[v.size() * 99 / 100], v.back()};
}

void die(const std::string& m) {
  std::fprintf(stderr, "jobcomp_bench: %s\n", m.c_str());
  std::exit(1);
}

PGconn* connect(const char* conninfo) {
  PGconn* c = PQconnectdb(conninfo);
  if (PQstatus(c) != CONNECTION_OK) die(PQerrorMessage(c));
  return c;
}

void exec(PGconn* c, const char* sql) {
  PGresult* r = PQexec(c, sql);
  if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
    die(std::string(sql) + ": " + PQerrorMessage(c));
  PQclear(r);
}

}  // namespace

namespace {

// This process's CPU time (user + system), seconds: the writer's own share
// of an ingest round, the rest being PostgreSQL's.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void write_spool_file(const std::string& path, const std::vector<std::string>& lines) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) die("cannot write " + path + ": " + std::strerror(errno));
  for (const std::string& l : lines) std::fputs(l.c_str(), f);
  if (std::fclose(f) != 0) die("cannot write " + path + ": " + std::strerror(errno));
}

// Figure 3 (--render-only 1): the writer's own CPU a bill, no database:
// reading the spool records, pricing them, and making the COPY text of the
// bills and of their hourly totals, in batches of 5000 as the worker does;
// per stage, microseconds of this thread's CPU a bill, the median of the
// rounds.  What the database waits for while the writer works.
double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int render(const planc::PlancConfig& cfg, const std::vector<planc::Segment>& segs, size_t n,
           int rounds) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < n; i++) lines.push_back(planc::serialize_segment(segs[i]));
  std::vector<double> parse_us, price_us, rows_us, usage_us;
  size_t bytes = 0;
  for (int r = 0; r < rounds; r++) {
    double parse = 0, price = 0, rows = 0, usage = 0;
    bytes = 0;
    for (size_t from = 0; from < n; from += 5000) {
      const size_t to = std::min(n, from + 5000);
      double t = thread_cpu_us();
      std::vector<planc::Segment> batch;
      batch.reserve(to - from);
      for (size_t i = from; i < to; i++) {
        auto seg = planc::parse_segment(lines[i]);
        if (!seg.ok()) die(seg.error());
        batch.push_back(std::move(seg.value()));
      }
      double t1 = thread_cpu_us();
      std::vector<planc::Bill> bills;
      bills.reserve(batch.size());
      for (const planc::Segment& seg : batch) bills.push_back(planc::price_segment(cfg, seg));
      double t2 = thread_cpu_us();
      std::vector<const planc::Bill*> all;
      for (const planc::Bill& bill : bills) all.push_back(&bill);
      const std::string u = planc::usage_copy_rows(all);
      double t3 = thread_cpu_us();
      const planc::BillBatch b = planc::bill_batch(std::move(bills), "jobcomp");
      double t4 = thread_cpu_us();
      const double hourly = t3 - t2, batch_all = t4 - t3;
      // bill_batch makes the hourly rows too: the COPY rows are the rest.
      parse += t1 - t, price += t2 - t1, rows += batch_all - hourly, usage += hourly;
      bytes += b.copy_rows.size() + u.size();
    }
    parse_us.push_back(parse / n), price_us.push_back(price / n), rows_us.push_back(rows / n),
        usage_us.push_back(usage / n);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double a = median(parse_us), b = median(price_us), c = median(rows_us),
               d = median(usage_us);
  std::printf(
      "render: %.2f us of CPU a bill: parse %.2f, price %.2f, COPY rows %.2f, hourly rows %.2f"
      " (%zu bills, %.0f bytes of COPY text a bill; medians of %d)\n",
      a + b + c + d, a, b, c, d, n, static_cast<double>(bytes) / n, rounds);
  return 0;
}

// Figure 2.  `keep`: the table keeps what it holds (only the bench's own
// cluster's rows are deleted between rounds), and the runs start now.
int ingest(const char* conninfo, const planc::PlancConfig& cfg, std::vector<planc::Segment> segs,
           size_t n_ingest, int rounds, bool keep, bool serial, size_t per_transaction) {
  PGconn* pg = connect(conninfo);
  exec(pg, "SET TIME ZONE 'UTC'");
  // The raw COPY's bills are numbered as the writer's are (schema 11:
  // planc.bill.seq's default takes a lock and a number for a writer that
  // says so), so both pay the same per row; a placeholder before it.
  exec(pg, "SET planc.hours_later = on");
  const char* empty = keep ? "DELETE FROM planc.bill WHERE cluster = 'bench';"
                             " DELETE FROM planc.usage_hourly WHERE cluster = 'bench'"
                           : "TRUNCATE planc.bill, planc.usage_hourly";
  if (keep) {
    const int64_t shift = time(nullptr) / 3600 * 3600 - 1'780'000'000;
    for (auto& seg : segs) {
      seg.submit_time += shift;
      seg.start_time += shift;
      seg.end_time += shift;
    }
  }
  const std::string bill_columns = planc::bill_copy_columns();
  std::vector<std::string> lines;
  for (size_t i = 0; i < n_ingest; i++) lines.push_back(planc::serialize_segment(segs[i]));
  std::string raw_rows;
  for (size_t i = 0; i < n_ingest; i++)
    raw_rows += planc::bill_copy_row(planc::price_segment(cfg, segs[i]), "raw");
  std::vector<double> raw_rate, planc_rate, rollup_secs, whole_rate;
  planc::BillStore store(conninfo);
  char spool_dir[] = "/tmp/jobcomp_bench.XXXXXX";
  if (!mkdtemp(spool_dir)) die(std::string("mkdtemp: ") + std::strerror(errno));
  planc::Spool spool(spool_dir);
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < 2; k++) {
      bool raw = (r % 2 == 0) == (k == 0);
      exec(pg, empty);
      // The spool file as slurmctld's job completions left it (not timed).
      if (!raw && !serial) write_spool_file(spool.path(1), lines);
      exec(pg, "CHECKPOINT");
      auto t0 = Clock::now();
      const double cpu0 = cpu_seconds();
      if (raw) {
        PGresult* start = PQexec(pg, ("COPY planc.bill (" + bill_columns + ") FROM STDIN").c_str());
        if (PQresultStatus(start) != PGRES_COPY_IN) die(PQerrorMessage(pg));
        PQclear(start);
        for (size_t off = 0; off < raw_rows.size(); off += 1 << 20) {
          size_t len = std::min<size_t>(1 << 20, raw_rows.size() - off);
          if (PQputCopyData(pg, raw_rows.data() + off, static_cast<int>(len)) != 1)
            die(PQerrorMessage(pg));
        }
        if (PQputCopyEnd(pg, nullptr) != 1) die(PQerrorMessage(pg));
        PGresult* res = PQgetResult(pg);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) die(PQerrorMessage(pg));
        PQclear(res);
        while ((res = PQgetResult(pg))) PQclear(res);
      } else if (serial) {
        // The same work in one thread: each batch parsed, priced, then
        // written (the worker before it priced the next batch beside).
        std::vector<planc::Bill> batch;
        for (size_t i = 0; i < n_ingest; i++) {
          auto seg = planc::parse_segment(lines[i]);
          if (!seg.ok()) die(seg.error());
          batch.push_back(planc::price_segment(cfg, seg.value()));
          if (batch.size() == per_transaction || i + 1 == n_ingest) {
            auto w = store.write(batch, "jobcomp");
            if (!w.ok()) die(w.error());
            batch.clear();
          }
        }
      } else {
        // jobcomp/planc's worker: one closed spool file read, parsed,
        // priced and written in batches (Spool::store, the next batch
        // priced while one is written), then removed.
        auto w = spool.store(
            1, [&](planc::Segment seg) { return planc::price_segment(cfg, seg); },
            [&](const planc::BillBatch& b) { return store.write(b); }, per_transaction, "jobcomp");
        if (!w.ok()) die(w.error());
        if (w.value().records != n_ingest) die("the spool file lost records");
      }
      double secs = ns_since(t0) / 1e9;
      (raw ? raw_rate : planc_rate).push_back(n_ingest / secs);
      std::printf(
          "ingest round %d %-5s: %9.0f segments/s (%zu in %.2f s, %.2f s of it this"
          " process's CPU)\n",
          r + 1, raw ? "raw" : "planc", n_ingest / secs, n_ingest, secs, cpu_seconds() - cpu0);
      // The hourly totals of what the writer stored, added afterwards as
      // jobcomp/planc does once its spool is drained (schema 11).
      if (!raw && store.rolls_up_hours()) {
        auto t1 = Clock::now();
        const double cpu1 = cpu_seconds();
        size_t bills = 0, rows = 0, calls = 0;
        for (;;) {
          auto u = store.rollup(planc::kRollupBillsPerTransaction);
          if (!u.ok()) die(u.error());
          bills += u.value().bills;
          rows += u.value().hour_rows;
          calls++;
          if (!u.value().bills) break;
        }
        const double rs = ns_since(t1) / 1e9;
        rollup_secs.push_back(rs);
        whole_rate.push_back(n_ingest / (secs + rs));
        std::printf(
            "rollup round %d      : %9.0f bills/s (%zu bills into %zu hourly rows in %.2f s,"
            " %zu transaction(s), %.2f s of it this process's CPU)\n",
            r + 1, bills / rs, bills, rows, rs, calls, cpu_seconds() - cpu1);
        if (bills != n_ingest) die("the rollup did not add every bill written");
      }
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double rr = median(raw_rate), pr = median(planc_rate);
  // Each round's two runs are back to back, so their ratio holds up when
  // the machine's speed drifts from round to round (on a shared machine a
  // raw COPY's rate moved from 45,000 to 85,000 a second within minutes);
  // the ratio of the medians does not.
  std::vector<double> paired;
  for (size_t r = 0; r < planc_rate.size(); r++) paired.push_back(planc_rate[r] / raw_rate[r]);
  std::printf(
      "ingest: planc%s %.0f/s, raw COPY %.0f/s, ratio %.2f (medians of %d, %zu bills a"
      " transaction; target >= 0.80); round by round %.2f (median), %.2f-%.2f\n",
      serial ? " (serial)" : "", pr, rr, pr / rr, rounds, per_transaction, median(paired),
      *std::min_element(paired.begin(), paired.end()),
      *std::max_element(paired.begin(), paired.end()));
  if (!rollup_secs.empty()) {
    std::vector<double> whole_paired;
    for (size_t r = 0; r < whole_rate.size(); r++)
      whole_paired.push_back(whole_rate[r] / raw_rate[r]);
    std::sort(rollup_secs.begin(), rollup_secs.end());
    std::printf(
        "rollup: %zu bills in %.2f s (median; %.2f-%.2f s), %.0f bills/s; writer and rollup"
        " together against a raw COPY %.2f (median round by round)\n",
        n_ingest, median(rollup_secs), rollup_secs.front(), rollup_secs.back(),
        n_ingest / median(rollup_secs), median(whole_paired));
  }
  exec(pg, empty);
  PQfinish(pg);
  unlink(spool.path(1).c_str());
  rmdir(spool_dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2)
    die("usage: jobcomp_bench CONNINFO [--segments N] [--sync-segments N] [--ingest N] [--rounds "
        "R]");
  const char* conninfo = argv[1];
  size_t n_cb = 100000, n_sync = 10000, n_ingest = 100000;
  int rounds = 2;
  bool ingest_only = false, serial = false, render_only = false;
  size_t per_transaction = planc::kBillsPerTransaction;
  bool cloud = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    size_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (k == "--segments")
      n_cb = v;
    else if (k == "--sync-segments")
      n_sync = v;
    else if (k == "--ingest")
      n_ingest = v;
    else if (k == "--rounds")
      rounds = static_cast<int>(v);
    else if (k == "--ingest-only")
      ingest_only = v != 0;
    else if (k == "--serial")
      serial = v != 0;
    else if (k == "--render-only")
      render_only = v != 0;
    else if (k == "--batch" && v)
      per_transaction = v;
    else if (k == "--cloud")
      cloud = v != 0;
    else
      die("unknown option " + k);
  }
  planc::PlancConfig cfg;
  std::vector<planc::Segment> segs;
  segs.reserve(std::max(n_cb, n_ingest));
  for (size_t i = 0; i < std::max(n_cb, n_ingest); i++)
    segs.push_back(cloud ? cloud_sample(static_cast<uint32_t>(i))
                         : sample(static_cast<uint32_t>(i)));
  if (render_only) return render(cfg, segs, n_ingest, rounds);
  if (ingest_only)
    return ingest(conninfo, cfg, std::move(segs), n_ingest, rounds, true, serial, per_transaction);

  // --- 1. callback: serialize + one locked append ---------------------------------
  // Five passes over the segments into fresh spool files; the median pass's
  // percentiles are reported (one pass takes ~0.4 s, so a burst of other
  // work on a 2-core machine can spoil one).
  std::mutex mu;
  std::vector<Percentiles> passes;
  for (int pass = 0; pass < 5; pass++) {
    char path[] = "/tmp/jobcomp_bench_spool.XXXXXX";
    int tmp = mkstemp(path);
    if (tmp < 0) die("mkstemp failed");
    close(tmp);
    // The callback's own appender (common/append_file.h), as jobcomp/planc
    // holds it: one record, one write(2), under a mutex.
    planc::RecordAppender appender;
    auto file = planc::open_append_file(planc::posix_file_system(), path);
    if (!file.ok()) die(file.error());
    appender.replace(std::move(file).value());
    unlink(path);
    std::vector<double> cb;
    cb.reserve(n_cb);
    for (size_t i = 0; i < n_cb; i++) {
      auto t0 = Clock::now();
      std::string line = planc::serialize_segment(segs[i]);
      {
        std::lock_guard<std::mutex> l(mu);
        if (!appender.append(std::move(line)).ok()) die("spool write failed");
      }
      cb.push_back(ns_since(t0));
    }
    planc::AppendFile done = appender.replace({});
    (void)planc::close_append_file(planc::posix_file_system(), done, false);
    passes.push_back(percentiles(cb));
    std::printf("callback pass %d: p50 %6.2f us  p99 %6.2f us  max %8.1f us\n", pass + 1,
                passes.back().p50 / 1000, passes.back().p99 / 1000, passes.back().max / 1000);
  }
  std::sort(passes.begin(), passes.end(),
            [](const Percentiles& x, const Percentiles& y) { return x.p99 < y.p99; });
  // Synchronous single-row INSERT per segment, autocommit (jobcomp/mysql's way).
  PGconn* pg = connect(conninfo);
  exec(pg, "SET TIME ZONE 'UTC'");
  exec(pg, "TRUNCATE planc.bill, planc.usage_hourly");
  const std::string bill_columns = planc::bill_copy_columns();
  std::string ins = "INSERT INTO planc.bill (" + bill_columns + ") VALUES (";
  const int columns =
      1 + static_cast<int>(std::count(bill_columns.begin(), bill_columns.end(), ','));
  for (int j = 1; j <= columns; j++) ins += (j > 1 ? ",$" : "$") + std::to_string(j);
  ins += ")";
  std::vector<double> sync;
  sync.reserve(n_sync);
  for (size_t i = 0; i < n_sync; i++) {
    auto t0 = Clock::now();
    planc::Bill b = planc::price_segment(cfg, segs[i]);
    // The same values as the COPY row, as parameters.
    std::string row = planc::bill_copy_row(b, "sync");
    row.pop_back();
    std::vector<std::string> vals;
    size_t start = 0;
    for (size_t p = 0; p <= row.size(); p++)
      if (p == row.size() || row[p] == '\t') {
        vals.push_back(row.substr(start, p - start));
        start = p + 1;
      }
    std::vector<const char*> pv;
    for (auto& v : vals) pv.push_back(v == "\\N" ? nullptr : v.c_str());
    PGresult* r = PQexecParams(pg, ins.c_str(), static_cast<int>(pv.size()), nullptr, pv.data(),
                               nullptr, nullptr, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die(PQerrorMessage(pg));
    PQclear(r);
    sync.push_back(ns_since(t0));
  }
  Percentiles a = passes[passes.size() / 2], s = percentiles(sync);
  std::printf(
      "callback (in-process, %zu segments, median of 5 passes by p99): planc spool append p50 "
      "%8.2f us  p99 %8.2f us  max %9.1f us\n",
      n_cb, a.p50 / 1000, a.p99 / 1000, a.max / 1000);
  std::printf(
      "callback (in-process, %zu segments): sync INSERT      p50 %8.2f us  p99 %8.2f us  max %9.1f "
      "us\n",
      n_sync, s.p50 / 1000, s.p99 / 1000, s.max / 1000);
  std::printf("callback ratio planc/sync: p50 %.3f  p99 %.3f   (target: planc p99 < 20 us)\n",
              a.p50 / s.p50, a.p99 / s.p99);

  // --- 2. ingest ---------------------------------------------------------------------
  PQfinish(pg);
  return ingest(conninfo, cfg, std::move(segs), n_ingest, rounds, false, serial, per_transaction);
}
