// jobcomp/planc: one bill per run segment, in PostgreSQL, exactly once.
//
// Inside slurmctld:
//   jobcomp_p_log_record  (job write lock held) turns the job into a Segment
//                         and appends one checksummed line to the current
//                         spool file: one write(2), no database, no lookup.
//                         A line in the page cache survives a SIGKILL of
//                         slurmctld.
//   worker thread         every second closes the current spool file (a new
//                         one takes the appends), fsyncs it, prices its
//                         segments (common/billing.h) and writes them to
//                         PostgreSQL in one transaction per batch
//                         (common/bill_store.h), then deletes the file.
//                         PostgreSQL down: files wait and are retried with
//                         backoff; slurmctld does not notice.
// Spool files live in StateSaveLocation/planc_jobcomp/, named by sequence.
// After a crash every remaining file is replayed; the bill key (cluster,
// job id, start time) makes a replay write nothing twice.
//
// In `sacct -c` (the client), jobcomp_p_get_jobs reads bills back through
// the same connection string, as the user who runs sacct: PostgreSQL's
// row-level security decides what that user sees.
#include "plugins/slurm_compat.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "common/bill_store.h"
#include "common/billing.h"
#include "common/file_util.h"
#include "plugins/mutex.h"
#include "plugins/planc_shared.h"
#include "plugins/slurm_adapter.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] = "Plan C billing to PostgreSQL";
PLANC_EXPORT const char plugin_type[] = "jobcomp/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

using planc::Bill;
using planc::Segment;

constexpr const char* kSpoolDir = "planc_jobcomp";
constexpr size_t kBatch = 5000;  // bills per transaction

bool g_in_ctld = false;
// The prices bills are made with: only the worker reads it, and swaps in a
// reloaded planc.conf.  null: planc.conf failed (segments wait in the
// spool until a valid file is in place).
std::shared_ptr<const planc::PlancConfig> g_config;
// Each planc.conf loaded since slurmctld started, from when it was in
// force (worker only): a run is priced with the prices in force when it
// ended, also when its bill is stored later (PostgreSQL was down).
std::vector<std::pair<time_t, std::shared_ptr<const planc::PlancConfig>>> g_configs;

const planc::PlancConfig& config_at(int64_t end_time) {
  for (auto it = g_configs.rbegin(); it != g_configs.rend(); ++it)
    if (it->first <= end_time) return *it->second;
  return *g_configs.front().second;  // ended before slurmctld started
}
std::string g_dir;

// The append side.  log_record holds g_spool_mu only around one write(2).
planc::Mutex g_spool_mu;
int g_fd GUARDED_BY(g_spool_mu) = -1;
uint64_t g_seq GUARDED_BY(g_spool_mu) = 0;    // number of g_fd's file
uint64_t g_bytes GUARDED_BY(g_spool_mu) = 0;  // bytes in g_fd's file
std::deque<std::string> g_unwritten GUARDED_BY(g_spool_mu);  // write(2) failed

// preempt/planc's completion hook (plugins/planc_shared.h), looked up on
// first use and again at most every 10 s while missing (PreemptType may be
// another plugin).  Only touched in log_record (job write lock).
planc_preempt_run_end_fn g_run_end = nullptr;
time_t g_run_end_lookup_at = 0;

// Start of the current size of each resized running job: Slurm moves
// resize_time to the moment of a resize before it logs the size that ended.
// Only touched in log_record (slurmctld's job write lock).
std::unordered_map<uint32_t, time_t> g_size_start;

// The worker.
planc::Mutex g_mu;
std::condition_variable_any g_cv;
std::string g_conninfo GUARDED_BY(g_mu);
bool g_stop GUARDED_BY(g_mu) = false;
// `scontrol reconfigure` calls set_location(): look at planc.conf at once.
bool g_reconfigured GUARDED_BY(g_mu) = false;
std::thread* g_worker = nullptr;  // never destroyed at exit: see plugins/worker_thread.h

std::string spool_path(uint64_t seq) {
  char name[32];
  std::snprintf(name, sizeof name, "%012llu.spool", static_cast<unsigned long long>(seq));
  return g_dir + "/" + name;
}

int open_spool(uint64_t seq) {
  return open(spool_path(seq).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

void fsync_dir() {
  int d = open(g_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    fsync(d);
    close(d);
  }
}

// Spool files present at start (left by a crash or a stop with PostgreSQL
// down), oldest first.
std::vector<uint64_t> existing_spools() {
  std::vector<uint64_t> seqs;
  DIR* d = opendir(g_dir.c_str());
  if (!d) return seqs;
  while (dirent* e = readdir(d)) {
    unsigned long long n;
    char tail[16];
    if (std::sscanf(e->d_name, "%llu.%15s", &n, tail) == 2 && !std::strcmp(tail, "spool"))
      seqs.push_back(n);
  }
  closedir(d);
  std::sort(seqs.begin(), seqs.end());
  return seqs;
}

// Closes the current spool file and starts the next; returns the closed
// file's number, or 0 when it was empty and stays current.
uint64_t rotate() {
  uint64_t next_seq;
  {
    planc::MutexLock l(g_spool_mu);
    if (g_bytes == 0 && g_unwritten.empty()) return 0;
    next_seq = g_seq + 1;
  }
  int next = open_spool(next_seq);  // outside the lock: may touch the disk
  if (next < 0) {
    error("%s: cannot create %s: %m; bills stay in the current spool file", plugin_type,
          spool_path(next_seq).c_str());
    return 0;
  }
  int old;
  uint64_t old_seq;
  std::deque<std::string> retry;
  {
    planc::MutexLock l(g_spool_mu);
    old = g_fd;
    old_seq = g_seq;
    g_fd = next;
    g_seq = next_seq;
    g_bytes = 0;
    retry.swap(g_unwritten);
  }
  // Records whose write failed earlier (disk full) go to the closed file.
  size_t lost = 0;
  for (const std::string& line : retry) {
    if (planc::append_record(old, line)) continue;
    planc::MutexLock l(g_spool_mu);
    g_unwritten.push_back(line);
    lost++;
  }
  if (lost)
    error("%s: %zu segment(s) still not in the spool (%s: %m); kept in memory, retrying", plugin_type,
          lost, g_dir.c_str());
  fsync(old);
  close(old);
  fsync_dir();
  return old_seq;
}

std::string user_name(uint32_t uid) {
  struct passwd pw, *res = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res) return pw.pw_name;
  return std::to_string(uid);
}

// Reads one closed spool file.  A line that fails its checksum is logged
// and skipped (planc-bill reconcile finds such segments in slurmdbd).
std::vector<Bill> read_spool(uint64_t seq, std::vector<std::string>* lines) {
  std::vector<Bill> bills;
  std::ifstream in(spool_path(seq), std::ios::binary);
  // A file that cannot be read stays for the next try; never delete it.
  if (!in.is_open())
    throw std::runtime_error("cannot open " + spool_path(seq) + ": " + std::strerror(errno));
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    n++;
    auto r = planc::parse_segment(line);
    if (!r.ok()) {
      error("%s: %s line %zu: %s; skipped (run planc-bill reconcile to find the segment)",
            plugin_type, spool_path(seq).c_str(), n, r.error().c_str());
      continue;
    }
    Segment s = std::move(r).value();
    if (s.user.empty()) s.user = user_name(s.uid);
    planc::make_text_valid_utf8(&s);
    bills.push_back(planc::price_segment(config_at(s.end_time), s));
    lines->push_back(line);
  }
  if (in.bad()) throw std::runtime_error("cannot read " + spool_path(seq) + ": " + std::strerror(errno));
  return bills;
}

// A batch PostgreSQL refuses as data (SQLSTATE class 22 or 23) would be
// refused for ever: store its bills one by one and set the refused ones
// aside in <spool>.rejected, each with an error line, so the rest of the
// cluster's bills keep flowing.  Throws on anything else (retry later).
size_t store_one_by_one(planc::BillStore& store, uint64_t seq, const std::vector<Bill>& bills,
                        const std::vector<std::string>& lines) {
  size_t fresh = 0;
  for (size_t i = 0; i < bills.size(); i++) {
    auto r = store.write({bills[i]}, "jobcomp");
    if (r.ok()) {
      fresh += r.value();
      continue;
    }
    if (!store.last_refused_as_data()) throw std::runtime_error(r.error());
    std::string rejected = spool_path(seq) + ".rejected";
    int fd = open(rejected.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    bool kept = fd >= 0 && planc::write_all(fd, lines[i] + "\n") && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    if (!kept) throw std::runtime_error("cannot set a refused bill aside in " + rejected);
    error("%s: PostgreSQL refused the bill of JobId=%u start %s (%s); record kept in %s, "
          "fix and replay it with planc-bill reconcile --fill",
          plugin_type, bills[i].seg.job_id, planc::pg_timestamp(bills[i].seg.start_time).c_str(),
          r.error().c_str(), rejected.c_str());
  }
  return fresh;
}

// Writes one spool file's bills and removes the file; throws when
// PostgreSQL fails (the file stays for the next try).
void store_spool(planc::BillStore& store, uint64_t seq) {
  std::vector<std::string> lines;
  std::vector<Bill> bills = read_spool(seq, &lines);
  size_t fresh = 0;
  for (size_t i = 0; i < bills.size(); i += kBatch) {
    size_t end = std::min(bills.size(), i + kBatch);
    std::vector<Bill> batch(bills.begin() + i, bills.begin() + end);
    auto r = store.write(batch, "jobcomp");
    if (r.ok()) {
      fresh += r.value();
      continue;
    }
    if (store.last_refused_as_data()) {
      fresh += store_one_by_one(store, seq, batch,
                                std::vector<std::string>(lines.begin() + i, lines.begin() + end));
      continue;
    }
    store.disconnect();
    throw std::runtime_error(r.error());
  }
  if (unlink(spool_path(seq).c_str()) != 0 && errno != ENOENT)
    error("%s: cannot remove %s: %m", plugin_type, spool_path(seq).c_str());
  debug("%s: stored %zu bill(s) from %s, %zu new", plugin_type, bills.size(),
        spool_path(seq).c_str(), fresh);
}

// fini() must not wait for a long backlog: the spool keeps what is left.
bool stopping() {
  planc::MutexLock l(g_mu);
  return g_stop;
}

void worker(std::vector<uint64_t> pending, planc::ConfigWatch watch) {
  std::unique_ptr<planc::BillStore> store;
  std::string store_conninfo;
  int backoff = 0;  // seconds; grows while PostgreSQL is unreachable
  time_t last_error_log = 0;
  bool config_logged = false;
  planc::MutexLock l(g_mu);
  while (!g_stop) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(backoff ? backoff : 1);
    while (!g_stop && !g_reconfigured &&
           g_cv.wait_until(l, until) == std::cv_status::no_timeout) {
    }
    if (g_stop) break;
    std::string conninfo = g_conninfo;
    bool force = g_reconfigured;
    g_reconfigured = false;
    l.unlock();
    // A run that ends from now on is priced with the new file.
    if (auto cfg = planc::slurm::reload_plugin_config(plugin_type, &watch, force)) {
      g_config = cfg;
      g_configs.emplace_back(time(nullptr), cfg);
    }
    if (uint64_t seq = rotate()) pending.push_back(seq);
    if (!g_config) {
      if (!config_logged)
        error("%s: planc.conf did not load; segments are kept in %s and billed once a valid "
              "planc.conf is in place",
              plugin_type, g_dir.c_str());
      config_logged = true;
    } else if (!pending.empty()) {
      if (!store || conninfo != store_conninfo) {
        store = std::make_unique<planc::BillStore>(conninfo);
        store_conninfo = conninfo;
      }
      try {
        while (!pending.empty() && !stopping()) {
          store_spool(*store, pending.front());
          pending.erase(pending.begin());
        }
        if (backoff) info("%s: PostgreSQL reachable again; spool drained", plugin_type);
        backoff = 0;
      } catch (const std::exception& e) {
        backoff = std::min(backoff ? backoff * 2 : 1, 30);
        time_t now = time(nullptr);
        if (now - last_error_log >= 60) {
          error("%s: %s; %zu spool file(s) kept in %s, retrying every %d s", plugin_type, e.what(),
                pending.size(), g_dir.c_str(), backoff);
          last_error_log = now;
        }
      }
    }
    l.lock();
  }
}

// --- sacct -c -------------------------------------------------------------------

char* time_str(int64_t t) {
  char buf[64];
  time_t tt = static_cast<time_t>(t);
  slurm_make_time_str(&tt, buf, sizeof buf);
  return xstrdup(buf);
}

planc::BillFilter filter_of(const slurmdb_job_cond_t* c) {
  planc::BillFilter f;
  if (!c) return f;
  auto each = [](List list, auto fn) {
    if (!list) return;
    ListIterator it = list_iterator_create(list);
    while (void* v = list_next(it)) fn(v);
    list_iterator_destroy(it);
  };
  each(c->userid_list, [&](void* v) {
    f.uids.push_back(static_cast<uint32_t>(std::strtoul(static_cast<char*>(v), nullptr, 10)));
  });
  each(c->acct_list, [&](void* v) { f.accounts.emplace_back(static_cast<char*>(v)); });
  each(c->partition_list, [&](void* v) { f.partitions.emplace_back(static_cast<char*>(v)); });
  each(c->step_list, [&](void* v) {
    f.job_ids.push_back(static_cast<slurm_selected_step_t*>(v)->step_id.job_id);
  });
  each(c->state_list, [&](void* v) {
    uint32_t st = static_cast<uint32_t>(std::strtoul(static_cast<char*>(v), nullptr, 10));
    f.states.emplace_back(job_state_string(st));
  });
  f.start = c->usage_start;
  f.end = c->usage_end;
  return f;
}

}  // namespace

PLANC_EXPORT int init(void) {
  try {
    g_in_ctld = running_in_slurmctld();
    if (!g_in_ctld) return SLURM_SUCCESS;  // sacct -c: only get_jobs is used
    // A bad planc.conf must not lose bills: keep spooling, bill later.
    g_config = planc::slurm::load_plugin_config(plugin_type);
    g_configs.clear();
    if (g_config) g_configs.emplace_back(0, g_config);
    g_dir = std::string(slurm_conf.state_save_location ? slurm_conf.state_save_location : ".") +
            "/" + kSpoolDir;
    if (mkdir(g_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      error("%s: cannot create %s: %m; fix StateSaveLocation's permissions", plugin_type,
            g_dir.c_str());
      return SLURM_ERROR;
    }
    std::vector<uint64_t> pending = existing_spools();
    {
      planc::MutexLock l(g_spool_mu);
      g_seq = pending.empty() ? 1 : pending.back() + 1;
      g_fd = open_spool(g_seq);
      g_bytes = 0;
      if (g_fd < 0) {
        error("%s: cannot create %s: %m", plugin_type, spool_path(g_seq).c_str());
        return SLURM_ERROR;
      }
    }
    if (!pending.empty())
      info("%s: %zu spool file(s) from before the restart will be (re)stored", plugin_type,
           pending.size());
    {
      planc::MutexLock l(g_mu);
      g_stop = false;
    }
    g_worker = planc::start_worker("planc_jobcomp", worker, std::move(pending),
                                   planc::ConfigWatch(planc::slurm::planc_conf_file(), g_config));
    verbose("%s loaded, spool %s", plugin_type, g_dir.c_str());
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: init failed: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

PLANC_EXPORT int fini(void) {
  try {
    {
      planc::MutexLock l(g_mu);
      g_stop = true;
    }
    g_cv.notify_all();
    planc::join_worker(g_worker);
    planc::MutexLock l(g_spool_mu);
    if (g_fd >= 0) {
      for (const std::string& line : g_unwritten)
        if (!planc::append_record(g_fd, line)) error("%s: a segment could not be spooled at shutdown: %m", plugin_type);
      fsync(g_fd);
      close(g_fd);
      g_fd = -1;
    }
  } catch (const std::exception& e) {
    error("%s: fini: %s", plugin_type, e.what());
  }
  g_config.reset();
  g_configs.clear();
  return SLURM_SUCCESS;
}

// Called at start and on every `scontrol reconfigure`.
PLANC_EXPORT int jobcomp_p_set_location(char* location) {
  {
    planc::MutexLock l(g_mu);
    g_conninfo = location ? location : "";
    g_reconfigured = true;
  }
  g_cv.notify_one();
  return SLURM_SUCCESS;
}

PLANC_EXPORT int jobcomp_p_log_record(job_record_t* job) {
  try {
    if (!g_in_ctld || !job) return SLURM_SUCCESS;
    // First preempt/planc: a run that ended during its grace may become
    // PREEMPTED (or COMPLETED) here, before it is billed and before Slurm's
    // accounting record, which follows this callback.
    if (!g_run_end && time(nullptr) - g_run_end_lookup_at >= 10) {
      g_run_end_lookup_at = time(nullptr);
      g_run_end = reinterpret_cast<planc_preempt_run_end_fn>(
          planc::find_plugin_symbol(PLANC_PREEMPT_OBJECT, PLANC_PREEMPT_RUN_END_SYMBOL));
    }
    const int run_end = g_run_end ? g_run_end(job) : 0;
    if (run_end & kRunEndDuplicate) return SLURM_SUCCESS;  // already billed
    Segment seg = planc::slurm::segment_of(job);
    seg.preempted = run_end & kRunEndPreempted;
    auto size = g_size_start.find(job->job_id);
    if (IS_JOB_RESIZING(job)) {
      seg.start_time = size != g_size_start.end() ? size->second : job->start_time;
      g_size_start[job->job_id] = job->resize_time;
    } else if (size != g_size_start.end()) {
      g_size_start.erase(size);
    }
    std::string line = planc::serialize_segment(seg);
    planc::MutexLock l(g_spool_mu);
    if (g_fd >= 0 && g_unwritten.empty() && planc::append_record(g_fd, line)) {
      g_bytes += line.size();
      return SLURM_SUCCESS;
    }
    // Disk full or the like: keep it; the worker retries (and logs).
    if (g_unwritten.empty())
      error("%s: cannot append %pJ to the spool (%m); kept in memory until it can", plugin_type, job);
    g_unwritten.push_back(std::move(line));
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: %pJ not recorded: %s", plugin_type, job, e.what());
    return SLURM_ERROR;
  }
}

PLANC_EXPORT List jobcomp_p_get_jobs(slurmdb_job_cond_t* job_cond) {
  try {
    std::string conninfo;
    {
      planc::MutexLock l(g_mu);
      conninfo = g_conninfo;
    }
    // As the user running sacct, never as slurmctld's role: row-level
    // security in PostgreSQL decides what this user may read.
    planc::BillStore store(conninfo, user_name(getuid()));
    auto r = store.query(filter_of(job_cond));
    if (!r.ok()) {
      error("%s: %s (JobCompLoc='%s')", plugin_type, r.error().c_str(), conninfo.c_str());
      return nullptr;
    }
    List out = list_create(jobcomp_destroy_job);
    for (const Bill& b : r.value()) {
      const Segment& s = b.seg;
      auto* j = static_cast<jobcomp_job_rec_t*>(xmalloc(sizeof(jobcomp_job_rec_t)));
      j->jobid = s.job_id;
      j->partition = xstrdup(s.partition.c_str());
      j->start_time = time_str(s.start_time);
      j->end_time = time_str(s.end_time);
      j->elapsed_time = static_cast<time_t>(s.end_time - s.start_time);
      j->uid = s.uid;
      j->uid_name = xstrdup(s.user.c_str());
      j->node_cnt = s.node_count;
      j->proc_cnt = s.cpus;
      j->max_procs = s.cpus;
      j->nodelist = xstrdup(s.nodes.c_str());
      j->jobname = xstrdup(s.job_name.c_str());
      j->state = xstrdup(s.state.c_str());
      j->tres_fmt_req_str = xstrdup(s.tres_req.c_str());
      j->account = xstrdup(s.account.c_str());
      j->qos_name = xstrdup(s.qos.c_str());
      j->cluster = xstrdup(s.cluster.c_str());
      if (s.submit_time) j->submit_time = time_str(s.submit_time);
      // The same text plain sacct prints for the run (its ExitCode rule).
      j->exit_code = xstrdup(planc::exit_code_of(s.wait_status).text.c_str());
      list_append(out, j);
    }
    return out;
  } catch (const std::exception& e) {
    error("%s: get_jobs: %s", plugin_type, e.what());
    return nullptr;
  }
}
