// slurmctld/planc's round records (plugins/ctld_state.h).  A round's record
// is a file in StateSaveLocation/planc_market/, written with fsync by the
// worker right after the clearing; the recorder thread stores the files in
// PostgreSQL (common/market_store.h), oldest first, and removes each once
// stored.  PostgreSQL down: the files wait and are retried with backoff.  A
// file that does not parse, or that the database refuses, is renamed
// *.rejected and logged once, never retried in a loop.  Rounds are recorded
// only where the bills are (JobCompType=jobcomp/planc, whose JobCompLoc the
// recorder connects with, as slurmctld's writer role).
#include "plugins/ctld_state.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "common/market_store.h"
#include "common/preempt_policy.h"  // format_utc
#include "common/spool.h"           // RetryBackoff
#include "common/state_file.h"
#include "plugins/worker_thread.h"

namespace planc::ctld {
namespace {

constexpr const char* kMarketDir = "planc_market";

// The round files waiting, oldest first (the name holds the round's time).
std::vector<std::string> round_files(const Controller& c) {
  std::vector<std::pair<int64_t, std::string>> found;
  if (DIR* d = opendir(c.market_dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      std::string_view n = e->d_name;
      if (n.size() < 11 || n.substr(0, 6) != "round-" || n.substr(n.size() - 4) != ".rec") continue;
      found.emplace_back(std::strtoll(e->d_name + 6, nullptr, 10), std::string(n));
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

void reject_round_file(Controller& c, const std::string& path, const std::string& why) {
  c.stats.rounds_rejected++;
  const std::string aside = path + ".rejected";
  if (rename(path.c_str(), aside.c_str()) != 0)
    error("%s: market: %s: %s; and it cannot be moved aside: %m", plugin_type, path.c_str(),
          why.c_str());
  else
    error("%s: market: %s: %s; kept as %s, not stored", plugin_type, path.c_str(), why.c_str(),
          aside.c_str());
}

// Stores what waits.  Returns the seconds until the next look.
int drain_rounds(Controller& c, std::unique_ptr<planc::BillStore>& store,
                 planc::RetryBackoff& backoff) {
  std::vector<std::string> files = round_files(c);
  c.stats.rounds_waiting = files.size();
  for (const std::string& name : files) {
    const std::string path = c.market_dir + "/" + name;
    auto text = planc::read_state_file(path);
    if (!text.ok()) {
      if (text.code() == planc::ErrorCode::kNotFound) continue;
      reject_round_file(c, path, text.error());
      continue;
    }
    auto rec = planc::parse_round(text.value());
    if (!rec.ok()) {
      reject_round_file(c, path, "damaged record: " + rec.error());
      continue;
    }
    if (!store) store = std::make_unique<planc::BillStore>(c.market_conninfo);
    auto stored = planc::store_market_round(*store, c.cluster, rec.value());
    if (!stored.ok()) {
      // Unreachable (kRetryable), or a schema or privilege the admin must
      // fix (kInvalid: migration 0006 not applied, the role not a writer):
      // the files wait, as jobcomp/planc's spool does for bills.
      if (stored.code() == planc::ErrorCode::kRetryable ||
          stored.code() == planc::ErrorCode::kInvalid) {
        bool log = false;
        int wait = backoff.failed(time(nullptr), &log);
        if (log)
          error("%s: market: %s; %zu round record(s) kept in %s, retrying every %d s%s",
                plugin_type, stored.error().c_str(), c.stats.rounds_waiting.load(),
                c.market_dir.c_str(), wait,
                stored.code() == planc::ErrorCode::kInvalid
                    ? " (apply the migrations with planc-migrate, and make JobCompLoc's role "
                      "the writer with planc-bill sync-roles --writer)"
                    : "");
        store->disconnect();
        return wait;
      }
      reject_round_file(c, path, "PostgreSQL refused it: " + stored.error());
      continue;
    }
    if (backoff.succeeded())
      info("%s: market: PostgreSQL reachable again; round records stored", plugin_type);
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      error("%s: market: stored %s but cannot remove it: %m", plugin_type, path.c_str());
    c.stats.rounds_recorded++;
    if (c.stats.rounds_waiting) c.stats.rounds_waiting--;
  }
  return 60;  // a new round wakes the recorder at once
}

void recorder(Controller* cp) {
  Controller& c = *cp;
  std::unique_ptr<planc::BillStore> store;
  planc::RetryBackoff backoff;
  int wait = 0;
  planc::MutexLock l(c.rec_mu);
  while (!c.rec_stop) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(wait);
    while (!c.rec_stop && !c.rec_wake &&
           c.rec_cv.wait_until(l, until) == std::cv_status::no_timeout) {
    }
    if (c.rec_stop) break;
    c.rec_wake = false;
    l.unlock();
    try {
      wait = drain_rounds(c, store, backoff);
    } catch (const std::exception& e) {
      error("%s: market recorder: %s", plugin_type, e.what());
      wait = 30;
    }
    l.lock();
  }
}

}  // namespace

// The worker, after a clearing: the record on disk, then the recorder told.
void record_round(Controller& c, const planc::MarketRoundRecord& rec) {
  if (c.market_dir.empty()) return;
  const std::string path = c.market_dir + "/" + planc::round_file_name(rec);
  if (auto err = planc::write_file_atomically(path, planc::serialize_round(rec))) {
    error("%s: market: the round at %s is not recorded: %s", plugin_type,
          planc::format_utc(rec.at).c_str(), err->c_str());
    return;
  }
  {
    planc::MutexLock l(c.rec_mu);
    c.rec_wake = true;
  }
  c.rec_cv.notify_all();
}

// init(): rounds are recorded where the bills are.  Without jobcomp/planc
// the market runs unrecorded, said once.
void start_recorder(Controller& c) {
  planc::slurm::BillSite site = planc::slurm::bill_site();
  if (site.jobcomp_type != "jobcomp/planc") {
    verbose(
        "%s: market rounds are not recorded in PostgreSQL: JobCompType is %s, not "
        "jobcomp/planc",
        plugin_type, site.jobcomp_type.empty() ? "(none)" : site.jobcomp_type.c_str());
    return;
  }
  std::string dir = planc::slurm::state_file_path(kMarketDir);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error(
        "%s: cannot create %s: %m; market rounds are NOT recorded in PostgreSQL (fix "
        "StateSaveLocation's permissions and restart slurmctld)",
        plugin_type, dir.c_str());
    return;
  }
  c.market_dir = dir;
  c.market_conninfo = site.jobcomp_loc;
  c.cluster = site.cluster;
  {
    planc::MutexLock l(c.rec_mu);
    c.rec_stop = false;
    c.rec_wake = false;
  }
  c.recorder = planc::start_worker("planc_market", recorder, &c);
}

void stop_recorder(Controller& c) {
  {
    planc::MutexLock l(c.rec_mu);
    c.rec_stop = true;
  }
  c.rec_cv.notify_all();
  planc::join_worker(c.recorder);
}

}  // namespace planc::ctld
