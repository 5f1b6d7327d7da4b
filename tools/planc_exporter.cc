// planc-exporter: Plan C's metrics for Prometheus, outside slurmctld.
//
// Serves /metrics (prometheus-cpp's civetweb server).  At each scrape it
// reads the snapshot files the plugins write into StateSaveLocation
// (common/metrics_snapshot.h) and publishes what is fresh; it never talks
// to slurmctld.  With --database, a background thread reads the bill
// database's totals every --database-interval (the functions of schemas
// 0004, 0008 and 0012) into a snapshot of the same form, so a scrape never waits
// on PostgreSQL.  A source that is missing, corrupt, stale or unreachable
// shows as planc_exporter_source_up{source=...} 0 (and one log line when
// it goes down), never as a crash or as old figures.
#include <getopt.h>
#include <libpq-fe.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "planc_config.h"  // PACKAGE_VERSION

#include "common/metrics_snapshot.h"
#include "common/pg_text.h"
#include "common/state_file.h"

namespace {

constexpr const char* kUsage = R"(usage: planc-exporter [options]

Serves Plan C's metrics for Prometheus at http://LISTEN/metrics, read at
each scrape from the snapshots the Plan C plugins write into slurmctld's
StateSaveLocation.  It never contacts slurmctld.

  --web.listen-address ADDR
                      address:port to serve on (--listen is the same)
                                                       [127.0.0.1:10731]
  --state-dir DIR     slurmctld's StateSaveLocation         [/var/spool/slurmctld]
  --sources LIST      snapshots to read, comma-separated    [slurmctld,preempt,jobcomp]
  --max-age SECONDS   older snapshots count as down         [60]
  --database CONNINFO the bill database (libpq connection string, e.g.
                      "dbname=planc user=planc_exporter"; default
                      $PLANC_EXPORTER_DB): adds the source "database",
                      billed usage per account and tier; the role must be
                      in planc_metrics (planc-bill sync-roles --metrics ROLE)
  --database-interval SECONDS
                      how often to read the database, in the background  [30]
  --once              print the metrics once on stdout and exit (no server);
                      exit status 0 if every source is up, 3 otherwise
  --list-metrics      print every metric's name, type, labels and HELP
  --version           print the release and exit
  --help              this text

A source that is missing, unreadable, corrupt or older than --max-age (for
the database: unreachable, failing, or not read within --max-age) shows as
planc_exporter_source_up{source="..."} 0, its figures left out, and is
logged once on stderr when it goes down.
)";

struct Options {
  std::string listen = "127.0.0.1:10731";
  std::string state_dir = "/var/spool/slurmctld";
  std::vector<std::string> sources = {"slurmctld", "preempt", "jobcomp"};
  uint32_t max_age = 60;
  bool once = false;
  std::string database;  // "": no database source
  uint32_t database_interval = 30;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

// Under systemd (JOURNAL_STREAM names stderr's stream) journald stamps each
// line and reads its priority from a "<N>" prefix (sd-daemon(3)); elsewhere
// the line carries its own UTC timestamp.
enum class Level { kWarning = 4, kInfo = 6 };
void log_line(const std::string& msg, Level level = Level::kInfo) {
  if (const char* js = std::getenv("JOURNAL_STREAM"); js && *js) {
    std::fprintf(stderr, "<%d>planc-exporter: %s\n", static_cast<int>(level), msg.c_str());
    return;
  }
  char when[32];
  time_t now = time(nullptr);
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  std::fprintf(stderr, "%s planc-exporter: %s\n", when, msg.c_str());
}

// The "database" source: reads planc.metrics_billed(),
// planc.metrics_bills() and planc.metrics_rollup() every interval on its
// own connection and keeps the result as a snapshot text (or why there is
// none), which the scrape reads like a plugin's file.  Queries are fixed text with no parameters.
class DatabasePoller {
 public:
  DatabasePoller(std::string conninfo, uint32_t interval)
      : conninfo_(std::move(conninfo)), interval_(interval) {}
  ~DatabasePoller() { stop(); }

  void start() {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> l(mu_);
      while (!stop_) {
        l.unlock();
        poll();
        l.lock();
        cv_.wait_for(l, std::chrono::seconds(interval_), [this] { return stop_; });
      }
    });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (conn_) PQfinish(conn_);
    conn_ = nullptr;
  }

  // One reading, stored for snapshot().
  void poll() {
    auto t0 = std::chrono::steady_clock::now();
    planc::Result<planc::DatabaseFigures> r = query();
    std::string text;
    if (r.ok()) {
      r.value().query_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      planc::MetricsSnapshot s;
      s.source = "database";
      s.written = time(nullptr);
      planc::add_database_samples(r.value(), &s);
      text = planc::serialize_snapshot(s);
    }
    std::lock_guard<std::mutex> l(mu_);
    last_ = r.ok() ? planc::Result<std::string>(std::move(text))
                   : planc::Result<std::string>::failure(r.error());
  }

  planc::Result<std::string> snapshot() const {
    std::lock_guard<std::mutex> l(mu_);
    return last_;
  }

 private:
  planc::Result<planc::DatabaseFigures> query() {
    using R = planc::Result<planc::DatabaseFigures>;
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
      if (conn_) PQfinish(conn_);
      // connect_timeout first: the connection string's own setting wins.
      const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
      const char* vals[] = {"5", "planc-exporter", conninfo_.c_str(), nullptr};
      conn_ = PQconnectdbParams(keys, vals, 1);
      if (PQstatus(conn_) != CONNECTION_OK) return R::failure("cannot connect: " + error());
      PGresult* set = PQexec(conn_, "SET statement_timeout = '20s'");
      PQclear(set);
    }
    planc::DatabaseFigures d;
    // Memory in bytes (the base unit Prometheus wants), exact in numeric
    // before the one conversion to float8.
    PGresult* r = PQexec(conn_,
                         "SELECT cluster, account, tier, card_seconds::float8, "
                         "core_seconds::float8, (mem_gib_seconds * 1073741824)::float8, "
                         "(amount_micros / 1000000)::float8, currency FROM planc.metrics_billed()");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) return failed(r, "planc.metrics_billed()");
    for (int i = 0; i < PQntuples(r); i++) {
      planc::BilledTotal t;
      t.cluster = PQgetvalue(r, i, 0);
      t.account = PQgetvalue(r, i, 1);
      t.tier = PQgetvalue(r, i, 2);
      t.gpu_seconds = std::strtod(PQgetvalue(r, i, 3), nullptr);
      t.core_seconds = std::strtod(PQgetvalue(r, i, 4), nullptr);
      t.memory_byte_seconds = std::strtod(PQgetvalue(r, i, 5), nullptr);
      t.amount = std::strtod(PQgetvalue(r, i, 6), nullptr);
      t.currency = PQgetvalue(r, i, 7);
      d.totals.push_back(std::move(t));
    }
    PQclear(r);
    r = PQexec(conn_, "SELECT newest_end, unmeasured_7d FROM planc.metrics_bills()");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
      return failed(r, "planc.metrics_bills()");
    if (!PQgetisnull(r, 0, 0)) d.newest_bill_end = std::strtod(PQgetvalue(r, 0, 0), nullptr);
    d.unmeasured_7d = std::strtoull(PQgetvalue(r, 0, 1), nullptr, 10);
    PQclear(r);
    r = PQexec(conn_, "SELECT waiting, rolled_up FROM planc.metrics_rollup()");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
      return failed(r, "planc.metrics_rollup()");
    d.waiting_for_hours = std::strtoull(PQgetvalue(r, 0, 0), nullptr, 10);
    d.hours_rolled_up_at = std::strtod(PQgetvalue(r, 0, 1), nullptr);
    PQclear(r);
    return d;
  }

  // The failure of a query; the connection is dropped and made again at
  // the next reading (the server may have restarted).
  planc::Result<planc::DatabaseFigures> failed(PGresult* r, const char* what) {
    std::string why = error();
    if (why.empty()) why = PQresStatus(PQresultStatus(r));
    PQclear(r);
    PQfinish(conn_);
    conn_ = nullptr;
    if (why.find("does not exist") != std::string::npos)
      why += " (apply the migrations: planc-migrate)";
    else if (why.find("permission denied") != std::string::npos)
      why += " (put the role in planc_metrics: planc-bill sync-roles --metrics ROLE)";
    return planc::Result<planc::DatabaseFigures>::failure(std::string(what) + ": " + why);
  }

  std::string error() const {
    return conn_ ? planc::pg_one_line(PQerrorMessage(conn_)) : "no connection";
  }

  const std::string conninfo_;
  const uint32_t interval_;
  PGconn* conn_ = nullptr;  // the poller thread's (or --once's) only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  planc::Result<std::string> last_ = planc::Result<std::string>::failure("not read yet");
  std::thread thread_;
};

class SnapshotCollector : public prometheus::Collectable {
 public:
  SnapshotCollector(Options o, std::shared_ptr<DatabasePoller> db)
      : o_(std::move(o)), db_(std::move(db)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<std::pair<std::string, planc::Result<std::string>>> reads;
    for (const std::string& s : o_.sources)
      reads.emplace_back(s, planc::read_state_file(planc::snapshot_path(o_.state_dir, s)));
    if (db_) reads.emplace_back("database", db_->snapshot());
    std::vector<std::string> problems;
    auto exported = planc::collect_metrics(reads, time(nullptr), o_.max_age, &problems);
    note_problems(problems);
    if (const planc::MetricInfo* bi = planc::find_metric("planc_build_info"))
      exported.insert(
          exported.begin(),
          planc::ExportedMetric{bi, {{"planc_build_info", {{"version", PACKAGE_VERSION}}, 1.0}}});
    std::vector<prometheus::MetricFamily> out;
    for (const planc::ExportedMetric& e : exported) {
      prometheus::MetricFamily f;
      f.name = std::string(e.info->name);
      f.help = std::string(e.info->help);
      const bool counter = e.info->type == planc::MetricType::kCounter;
      f.type = counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
      for (const planc::MetricSample& s : e.samples) {
        prometheus::ClientMetric m;
        for (const auto& [k, v] : s.labels) m.label.push_back({k, v});
        (counter ? m.counter.value : m.gauge.value) = s.value;
        f.metric.push_back(std::move(m));
      }
      out.push_back(std::move(f));
    }
    return out;
  }

  bool all_up() const {
    std::lock_guard<std::mutex> l(mu_);
    return down_.empty();
  }

 private:
  // One log line when a source goes down (with why) and when it is back.
  void note_problems(const std::vector<std::string>& problems) const {
    std::set<std::string> now_down;
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& p : problems) {
      std::string source = p.substr(0, p.find(':'));
      now_down.insert(source);
      if (!down_.count(source)) log_line("source down: " + p, Level::kWarning);
    }
    for (const std::string& s : down_)
      if (!now_down.count(s)) log_line("source up again: " + s);
    down_ = std::move(now_down);
  }

  Options o_;
  std::shared_ptr<DatabasePoller> db_;
  mutable std::mutex mu_;
  mutable std::set<std::string> down_;
};

void list_metrics() {
  for (const planc::MetricInfo& m : planc::metric_catalog()) {
    std::printf("%s %s{%s} (from %s)\n    %s\n", std::string(m.name).c_str(),
                m.type == planc::MetricType::kCounter ? "counter" : "gauge",
                std::string(m.labels).c_str(), std::string(m.source).c_str(),
                std::string(m.help).c_str());
  }
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "planc-exporter: %s\nTry 'planc-exporter --help'.\n", what.c_str());
  return 2;
}

uint32_t parse_seconds(const char* arg, uint32_t max, bool* ok) {
  char* end = nullptr;
  unsigned long v = std::strtoul(arg, &end, 10);
  *ok = *arg && !*end && v >= 1 && v <= max && *arg != '-';
  return static_cast<uint32_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* db = std::getenv("PLANC_EXPORTER_DB")) o.database = db;
  static const option kLong[] = {{"web.listen-address", required_argument, nullptr, 'l'},
                                 {"listen", required_argument, nullptr, 'l'},
                                 {"version", no_argument, nullptr, 'V'},
                                 {"state-dir", required_argument, nullptr, 'd'},
                                 {"sources", required_argument, nullptr, 's'},
                                 {"max-age", required_argument, nullptr, 'a'},
                                 {"once", no_argument, nullptr, 'o'},
                                 {"list-metrics", no_argument, nullptr, 'm'},
                                 {"database", required_argument, nullptr, 'D'},
                                 {"database-interval", required_argument, nullptr, 'I'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'l':
        o.listen = optarg;
        break;
      case 'd':
        o.state_dir = optarg;
        break;
      case 's':
        o.sources = split_commas(optarg);
        if (o.sources.empty()) return usage_error("--sources: name at least one source");
        break;
      case 'a': {
        bool ok = false;
        o.max_age = parse_seconds(optarg, 86400, &ok);
        if (!ok)
          return usage_error(std::string("--max-age '") + optarg +
                             "': give a whole number of seconds, 1 to 86400");
        break;
      }
      case 'D':
        o.database = optarg;
        break;
      case 'I': {
        bool ok = false;
        o.database_interval = parse_seconds(optarg, 3600, &ok);
        if (!ok)
          return usage_error(std::string("--database-interval '") + optarg +
                             "': give a whole number of seconds, 1 to 3600");
        break;
      }
      case 'o':
        o.once = true;
        break;
      case 'm':
        list_metrics();
        return 0;
      case 'h':
        std::fputs(kUsage, stdout);
        return 0;
      case 'V':
        std::printf("planc-exporter %s\n", PACKAGE_VERSION);
        return 0;
      default:
        return usage_error("unknown option");
    }
  }
  if (optind < argc) return usage_error(std::string("unexpected argument '") + argv[optind] + "'");

  std::shared_ptr<DatabasePoller> db;
  if (!o.database.empty()) {
    auto check = planc::check_conninfo(o.database);
    if (!check.ok) return usage_error("--database: " + check.error);
    db = std::make_shared<DatabasePoller>(o.database, o.database_interval);
  }
  auto collector = std::make_shared<SnapshotCollector>(o, db);
  if (o.once) {
    if (db) db->poll();
    prometheus::TextSerializer ser;
    ser.Serialize(std::cout, collector->Collect());
    return collector->all_up() ? 0 : 3;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // the server's threads inherit it
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(o.listen, 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "planc-exporter: cannot listen on %s: %s\n", o.listen.c_str(), e.what());
    return 1;
  }
  exposer->RegisterCollectable(collector);
  if (db) db->start();
  log_line("serving http://" + o.listen + "/metrics from " + o.state_dir +
           (db ? " and the bill database" : ""));
  int sig = 0;
  sigwait(&set, &sig);
  if (db) db->stop();
  log_line(std::string("stopping on ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
  return 0;
}
