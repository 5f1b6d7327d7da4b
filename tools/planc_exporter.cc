// planc-exporter: Plan C's metrics for Prometheus, outside slurmctld.
//
// Serves /metrics (prometheus-cpp's civetweb server).  At each scrape it
// reads the snapshot files the plugins write into StateSaveLocation
// (common/metrics_snapshot.h) and publishes what is fresh; it never talks
// to slurmctld.  A source that is missing, corrupt or stale shows as
// planc_exporter_source_up{source=...} 0 (and one log line when it goes
// down), never as a crash or as old figures.
#include <getopt.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <signal.h>
#include <unistd.h>

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

#include "common/metrics_snapshot.h"
#include "common/state_file.h"

namespace {

constexpr const char* kUsage = R"(usage: planc-exporter [options]

Serves Plan C's metrics for Prometheus at http://LISTEN/metrics, read at
each scrape from the snapshots the Plan C plugins write into slurmctld's
StateSaveLocation.  It never contacts slurmctld.

  --listen ADDR       address:port to serve on             [127.0.0.1:9866]
  --state-dir DIR     slurmctld's StateSaveLocation         [/var/spool/slurmctld]
  --sources LIST      snapshots to read, comma-separated    [slurmctld,preempt,jobcomp]
  --max-age SECONDS   older snapshots count as down         [60]
  --once              print the metrics once on stdout and exit (no server);
                      exit status 0 if every source is up, 3 otherwise
  --list-metrics      print every metric's name, type, labels and HELP
  --help              this text

A source that is missing, unreadable, corrupt or older than --max-age shows
as planc_exporter_source_up{source="..."} 0, its figures left out, and is
logged once on stderr when it goes down.
)";

struct Options {
  std::string listen = "127.0.0.1:9866";
  std::string state_dir = "/var/spool/slurmctld";
  std::vector<std::string> sources = {"slurmctld", "preempt", "jobcomp"};
  uint32_t max_age = 60;
  bool once = false;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

void log_line(const std::string& msg) {
  char when[32];
  time_t now = time(nullptr);
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  std::fprintf(stderr, "%s planc-exporter: %s\n", when, msg.c_str());
}

class SnapshotCollector : public prometheus::Collectable {
 public:
  explicit SnapshotCollector(Options o) : o_(std::move(o)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<std::pair<std::string, planc::Result<std::string>>> reads;
    for (const std::string& s : o_.sources)
      reads.emplace_back(s, planc::read_state_file(planc::snapshot_path(o_.state_dir, s)));
    std::vector<std::string> problems;
    auto exported = planc::collect_metrics(reads, time(nullptr), o_.max_age, &problems);
    note_problems(problems);
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
      if (!down_.count(source)) log_line("source down: " + p);
    }
    for (const std::string& s : down_)
      if (!now_down.count(s)) log_line("source up again: " + s);
    down_ = std::move(now_down);
  }

  Options o_;
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

}  // namespace

int main(int argc, char** argv) {
  Options o;
  static const option kLong[] = {
      {"listen", required_argument, nullptr, 'l'},  {"state-dir", required_argument, nullptr, 'd'},
      {"sources", required_argument, nullptr, 's'}, {"max-age", required_argument, nullptr, 'a'},
      {"once", no_argument, nullptr, 'o'},          {"list-metrics", no_argument, nullptr, 'm'},
      {"help", no_argument, nullptr, 'h'},          {nullptr, 0, nullptr, 0}};
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
        char* end = nullptr;
        unsigned long v = std::strtoul(optarg, &end, 10);
        if (!*optarg || *end || v == 0 || v > 86400)
          return usage_error(std::string("--max-age '") + optarg +
                             "': give a whole number of seconds, 1 to 86400");
        o.max_age = static_cast<uint32_t>(v);
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
      default:
        return usage_error("unknown option");
    }
  }
  if (optind < argc) return usage_error(std::string("unexpected argument '") + argv[optind] + "'");

  auto collector = std::make_shared<SnapshotCollector>(o);
  if (o.once) {
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
  log_line("serving http://" + o.listen + "/metrics from " + o.state_dir);
  int sig = 0;
  sigwait(&set, &sig);
  log_line(std::string("stopping on ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
  return 0;
}
