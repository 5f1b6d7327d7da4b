// slurmctld/planc's run-start journal (plugins/ctld_state.h): every run
// slurmctld starts is appended, as it starts, to
// StateSaveLocation/planc_starts/ (common/run_journal.h) from the job-begin
// hook: one write(2) under slurmctld's locks, like jobcomp/planc's spool.
// The worker starts a new file each UTC day (fsyncing the old one) and
// removes files past kJournalKeepDays.  The hook also queues the started
// job's id for the next sample (c.started).
#include "plugins/ctld_state.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <exception>

#include "common/run_journal.h"

namespace planc::ctld {
namespace {

// Lines whose write(2) failed (disk full) wait here, in order, at most this
// many; the worker retries them.
constexpr size_t kJournalMaxUnwritten = 100000;
constexpr uint64_t kJournalSlowUsec = 1000;  // counted in RunJournalOver1ms

planc::Result<planc::AppendFile> open_journal(const Controller& c, const std::string& name) {
  return planc::open_append_file(planc::posix_file_system(), c.journal_dir + "/" + name);
}

// Packing guaranteed work: a guaranteed job's nodes get the weight of nodes
// holding guaranteed work as it starts (the sample would see it up to 5 s
// later, and part-node jobs started meanwhile would go elsewhere).
void pack_on_job_begin(Controller& c, job_record_t* job) EXCLUDES(c.shown_mu) {
  if (!c.running.load()) return;
  std::shared_ptr<const planc::PlancConfig> cfg;
  {
    planc::MutexLock l(c.shown_mu);
    cfg = c.shown;
  }
  if (!cfg || !cfg->pack_guaranteed) return;
  const planc::Tier* t = planc::slurm::job_tier(*cfg, job);
  if (!t || t->preemptible) return;
  std::string problem;
  const size_t n = planc::slurm::steer_weights_of(job, &problem);
  if (n) {
    c.stats.weight_changes += n;
    c.steered = true;
  }
  if (!problem.empty())
    error("%s: packing guaranteed work: start of %pJ: %s", plugin_type, job, problem.c_str());
}

// slurmctld's job-begin hook (job and node write locks held): the market's
// books, packing's weights, then one record, one write(2) under
// c.journal_mu.
void on_job_begin(job_record_t* job) {
  Controller& c = *controller();  // made before the hook was set, never freed
  if (c.prev_job_begin) c.prev_job_begin(job);
  try {
    // First the market (its mark is part of the run the journal records).
    market_on_job_begin(c, job);
  } catch (const std::exception& e) {
    error("%s: market: start of %pJ: %s", plugin_type, job, e.what());
  }
  try {
    pack_on_job_begin(c, job);
  } catch (const std::exception& e) {
    error("%s: packing guaranteed work: start of %pJ: %s", plugin_type, job, e.what());
  }
  try {
    {
      planc::MutexLock l(c.started_mu);
      if (c.started.size() < kMaxStarted)
        c.started.push_back(job->job_id);
      else
        c.started_lost = true;
    }
    if (c.journal_dir.empty()) return;
    auto t0 = std::chrono::steady_clock::now();
    planc::Segment begun = planc::slurm::segment_of(job);
    begun.end_time = 0;  // not ended: segment_of reads the expected end
    std::string line = planc::serialize_segment(begun);
    bool first_failure = false, dropped = false;
    std::string problem;
    {
      planc::MutexLock l(c.journal_mu);
      dropped = c.journal.waiting() >= kJournalMaxUnwritten;
      if (!dropped) {
        auto r = c.journal.append(std::move(line));
        first_failure = !r.ok() && c.journal.waiting() == 1;
        if (first_failure) problem = r.error();
      }
    }
    if (first_failure)
      error(
          "%s: cannot append the start of %pJ to the run-start journal in %s (%s); kept in "
          "memory until it can",
          plugin_type, job, c.journal_dir.c_str(), problem.c_str());
    if (dropped) c.stats.journal_dropped++;
    uint64_t usec = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    c.stats.journal_records++;
    c.stats.journal_total_usec += usec;
    if (usec > c.stats.journal_max_usec) c.stats.journal_max_usec = usec;
    if (usec > kJournalSlowUsec) c.stats.journal_slow++;
  } catch (const std::exception& e) {
    error("%s: start of %pJ not journaled: %s", plugin_type, job, e.what());
  }
}

void prune_journal(const Controller& c, time_t now) {
  DIR* d = opendir(c.journal_dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d))
    if (planc::journal_file_expired(e->d_name, now) &&
        unlink((c.journal_dir + "/" + e->d_name).c_str()) != 0)
      error("%s: cannot remove %s/%s: %m", plugin_type, c.journal_dir.c_str(), e->d_name);
  closedir(d);
}

}  // namespace

bool journal_hook_ours() { return planc_job_begin_hook() == on_job_begin; }

// Worker: a new file at the UTC day's change, retried lines, fsync.
void journal_tick(Controller& c, bool* hook_warned) {
  if (c.journal_dir.empty()) return;
  if (planc_job_begin_hook() != on_job_begin && !*hook_warned) {
    error(
        "%s: another plugin replaced the job-begin hook; run starts are no longer journaled "
        "(list planc after nonstop in SlurmctldPlugstack)",
        plugin_type);
    *hook_warned = true;
  }
  time_t now = time(nullptr);
  const std::string want = c.journal_dir + "/" + planc::journal_file_name(now);
  bool change;
  {
    planc::MutexLock l(c.journal_mu);
    change = want != c.journal.file().path || !c.journal.file().is_open();
  }
  planc::AppendFile next;
  if (change) {
    // Outside the lock: may touch the disk.
    auto r = open_journal(c, planc::journal_file_name(now));
    if (r.ok())
      next = std::move(r).value();
    else
      error("%s: %s; run starts stay in the current file", plugin_type, r.error().c_str());
  }
  planc::AppendFile old;
  size_t left;
  std::string problem;
  {
    planc::MutexLock l(c.journal_mu);
    if (next.is_open()) old = c.journal.replace(std::move(next));
    if (auto r = c.journal.flush_waiting(); !r.ok()) problem = r.error();
    left = c.journal.waiting();
  }
  if (left)
    error("%s: %zu run start(s) still not in the journal (%s); retrying", plugin_type, left,
          problem.c_str());
  // The file being appended to is never fsynced: an append waiting behind
  // an fsync of its own file would wait under slurmctld's locks.  Its
  // records survive a SIGKILL of slurmctld in the page cache and reach the
  // disk with the kernel's writeback (about 30 s); a closed day's file is
  // fsynced here.
  if (old.is_open()) {
    if (auto r = planc::close_append_file(planc::posix_file_system(), old, true); !r.ok())
      error("%s: %s", plugin_type, r.error().c_str());
    prune_journal(c, now);
  }
}

// init(): the directory, today's file, the hook.  A journal that cannot be
// set up is logged and left off; the rest of the plugin works.
void start_journal(Controller& c) {
  // The hook also keeps the market's books (market_on_job_begin): set
  // whether or not the journal can be.
  c.prev_job_begin = planc_set_job_begin_hook(on_job_begin);
  std::string dir = planc::slurm::state_file_path(planc::kJournalDir);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error(
        "%s: cannot create %s: %m; run starts are NOT journaled, so a controller crash can "
        "hide runs (fix StateSaveLocation's permissions and restart slurmctld)",
        plugin_type, dir.c_str());
    return;
  }
  c.journal_dir = dir;
  auto file = open_journal(c, planc::journal_file_name(time(nullptr)));
  if (!file.ok())
    error("%s: %s; run starts kept in memory until it can", plugin_type, file.error().c_str());
  {
    planc::MutexLock l(c.journal_mu);
    if (file.ok()) c.journal.replace(std::move(file).value());
  }
  prune_journal(c, time(nullptr));
}

void stop_journal(Controller& c) {
  if (planc_job_begin_hook() == on_job_begin) planc_set_job_begin_hook(c.prev_job_begin);
  planc::AppendFile last;
  size_t lost;
  std::string problem;
  {
    planc::MutexLock l(c.journal_mu);
    last = c.journal.release(&lost, &problem);
  }
  if (lost)
    error("%s: %zu run start(s) could not be journaled at shutdown (%s)", plugin_type, lost,
          problem.c_str());
  if (auto r = planc::close_append_file(planc::posix_file_system(), last, true); !r.ok())
    error("%s: %s", plugin_type, r.error().c_str());
}

}  // namespace planc::ctld
