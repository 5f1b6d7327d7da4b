#include "tools/slurmdbd_runs.h"

#include <pwd.h>
#include <slurm/slurm.h>
#include <slurm/slurmdb.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <tuple>

#include "common/job_marks.h"

namespace planc {
namespace {

std::string str(const char* s) { return s ? std::string(s) : std::string(); }

// libslurm wants slurm_init() once per process before any other call.
void init_libslurm() {
  static bool done = false;
  if (!done) slurm_init(nullptr);
  done = true;
}

// A List of our own strings for a condition; the strings outlive the call.
class StringList {
 public:
  explicit StringList(const std::vector<std::string>& v)
      : v_(v), list_(slurm_list_create(nullptr)) {
    for (std::string& s : v_) slurm_list_append(list_, s.data());
  }
  ~StringList() { slurm_list_destroy(list_); }
  StringList(const StringList&) = delete;
  StringList& operator=(const StringList&) = delete;
  List get() const { return list_; }

 private:
  std::vector<std::string> v_;
  List list_;
};

// Calls fn(record) for each element of a List slurmdb returned, then frees it.
template <typename T, typename Fn>
void each_and_free(List list, Fn fn) {
  if (!list) return;
  ListIterator it = slurm_list_iterator_create(list);
  while (void* v = slurm_list_next(it)) fn(*static_cast<T*>(v));
  slurm_list_iterator_destroy(it);
  slurm_list_destroy(list);
}

// slurmdbd's state number as sacct names it (Slurm's job_state_string(),
// which libslurm does not declare publicly): its flags first, in Slurm's
// order, then the base state.
std::string state_name(uint32_t state) {
  static const std::pair<uint32_t, const char*> kFlags[] = {{JOB_COMPLETING, "COMPLETING"},
                                                            {JOB_STAGE_OUT, "STAGE_OUT"},
                                                            {JOB_CONFIGURING, "CONFIGURING"},
                                                            {JOB_RESIZING, "RESIZING"},
                                                            {JOB_REQUEUE, "REQUEUED"},
                                                            {JOB_REQUEUE_FED, "REQUEUE_FED"},
                                                            {JOB_REQUEUE_HOLD, "REQUEUE_HOLD"},
                                                            {JOB_SPECIAL_EXIT, "SPECIAL_EXIT"},
                                                            {JOB_STOPPED, "STOPPED"},
                                                            {JOB_REVOKED, "REVOKED"},
                                                            {JOB_RESV_DEL_HOLD, "RESV_DEL_HOLD"},
                                                            {JOB_SIGNALING, "SIGNALING"}};
  for (const auto& [flag, name] : kFlags)
    if (state & flag) return name;
  static const char* const kBase[] = {"PENDING",   "RUNNING",   "SUSPENDED", "COMPLETED",
                                      "CANCELLED", "FAILED",    "TIMEOUT",   "NODE_FAIL",
                                      "PREEMPTED", "BOOT_FAIL", "DEADLINE",  "OUT_OF_MEMORY"};
  uint32_t base = state & JOB_STATE_BASE;
  return base < sizeof kBase / sizeof *kBase ? kBase[base] : "?";
}

struct Tres {
  std::string type, name;  // "cpu", ""; "gres", "gpu:h800"
};

// slurmdbd's TRES string "1=2,2=3000,1001=2" (ids, Slurm-generated) into
// the segment's cpus, memory and gres, and the readable form jobcomp
// records ("cpu=2,mem=3000M,gres/gpu=2").
void apply_tres(const std::map<uint32_t, Tres>& tres, const char* simple, Segment* s,
                std::string* readable, bool fill_usage) {
  std::vector<GresUse> typed, untyped;
  std::string_view v = simple ? simple : "";
  while (!v.empty()) {
    size_t comma = v.find(',');
    std::string_view item = v.substr(0, comma);
    v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
    size_t eq = item.find('=');
    uint32_t id = 0;
    uint64_t count = 0;
    if (eq == std::string_view::npos ||
        std::from_chars(item.data(), item.data() + eq, id).ec != std::errc() ||
        std::from_chars(item.data() + eq + 1, item.data() + item.size(), count).ec != std::errc())
      continue;
    auto t = tres.find(id);
    if (t == tres.end() || count == NO_VAL64 || count == INFINITE64)
      continue;  // e.g. energy not measured
    const Tres& r = t->second;
    std::string key = r.name.empty() ? r.type : r.type + "/" + r.name;
    if (!readable->empty()) *readable += ",";
    *readable += key + "=" + std::to_string(count) + (r.type == "mem" ? "M" : "");
    if (!fill_usage) continue;
    if (r.type == "cpu") s->cpus = static_cast<uint32_t>(count);
    if (r.type == "mem") s->mem_mib = count;
    if (r.type == "gres") {
      size_t colon = r.name.find(':');
      GresUse g{r.name.substr(0, colon), colon == std::string::npos ? "" : r.name.substr(colon + 1),
                count};
      (colon == std::string::npos ? untyped : typed).push_back(std::move(g));
    }
  }
  if (!fill_usage) return;
  // slurmdbd records a gres both as a total (gres/gpu) and per type
  // (gres/gpu:h800): keep the typed ones, and a total only for a gres
  // that has none.
  for (GresUse& g : untyped) {
    bool has_typed =
        std::any_of(typed.begin(), typed.end(), [&](const GresUse& t) { return t.name == g.name; });
    if (!has_typed) typed.push_back(std::move(g));
  }
  s->gres = std::move(typed);
}

std::string user_of(const slurmdb_job_rec_t& j) {
  if (j.user && *j.user) return j.user;
  struct passwd pw, *res = nullptr;
  char buf[4096];
  if (getpwuid_r(j.uid, &pw, buf, sizeof buf, &res) == 0 && res) return pw.pw_name;
  return std::to_string(j.uid);
}

class DbConn {
 public:
  DbConn() {
    errno = 0;
    conn_ = slurmdb_connection_get(nullptr);
    if (errno != SLURM_SUCCESS || !conn_) error_ = slurm_strerror(errno ? errno : SLURM_ERROR);
  }
  ~DbConn() {
    if (conn_) slurmdb_connection_close(&conn_);
  }
  DbConn(const DbConn&) = delete;
  DbConn& operator=(const DbConn&) = delete;
  void* get() const { return conn_; }
  const std::string& error() const { return error_; }

 private:
  void* conn_ = nullptr;
  std::string error_;
};

// slurmdbd's TRES table, deleted ones included (old records name them).
bool load_tres(void* db, std::map<uint32_t, Tres>* tres) {
  slurmdb_tres_cond_t cond;
  std::memset(&cond, 0, sizeof cond);
  cond.with_deleted = 1;
  List got = slurmdb_tres_get(db, &cond);
  if (!got) return false;
  each_and_free<slurmdb_tres_rec_t>(got, [&](const slurmdb_tres_rec_t& t) {
    (*tres)[t.id] = Tres{str(t.type), str(t.name)};
  });
  return true;
}

// "" when `db` is connected and its TRES table read into *tres; else why not.
std::string connect_and_load_tres(DbConn& db, std::map<uint32_t, Tres>* tres) {
  if (!db.get())
    return "cannot connect to slurmdbd (" + db.error() +
           "): is slurmdbd up, and AccountingStorageHost right in slurm.conf?";
  if (!load_tres(db.get(), tres)) return "slurmdbd did not list its TRES (slurmdb_tres_get failed)";
  return "";
}

}  // namespace

Result<SlurmSite> load_slurm_site() {
  init_libslurm();
  slurm_conf_t* conf = nullptr;
  if (slurm_load_ctl_conf(0, &conf) != SLURM_SUCCESS || !conf)
    return Result<SlurmSite>::failure(std::string("cannot read slurmctld's configuration (") +
                                      slurm_strerror(slurm_get_errno()) +
                                      "): is slurmctld up, and SLURM_CONF set to its slurm.conf?");
  SlurmSite site{str(conf->cluster_name), str(conf->state_save_location)};
  slurm_free_ctl_conf(conf);
  return site;
}

Result<std::set<RunKey>> slurmctld_current_runs(const std::string& cluster) {
  using R = Result<std::set<RunKey>>;
  init_libslurm();
  job_info_msg_t* msg = nullptr;
  if (slurm_load_jobs(0, &msg, SHOW_ALL) != SLURM_SUCCESS || !msg)
    return R::failure(std::string("cannot list slurmctld's jobs (") +
                      slurm_strerror(slurm_get_errno()) + ")");
  std::set<RunKey> runs;
  for (uint32_t i = 0; i < msg->record_count; i++) {
    const slurm_job_info_t& j = msg->job_array[i];
    uint32_t base = j.job_state & JOB_STATE_BASE;
    if (j.start_time &&
        (base == JOB_RUNNING || base == JOB_SUSPENDED || (j.job_state & JOB_COMPLETING)))
      runs.insert(RunKey{cluster, j.job_id, static_cast<int64_t>(j.start_time)});
  }
  slurm_free_job_info_msg(msg);
  return runs;
}

Result<DbdRuns> slurmdbd_runs(const std::string& cluster, int64_t start, int64_t end) {
  using R = Result<DbdRuns>;
  init_libslurm();
  DbConn db;
  std::map<uint32_t, Tres> tres;
  if (std::string problem = connect_and_load_tres(db, &tres); !problem.empty())
    return R::failure(problem);
  std::map<uint32_t, std::string> qos;
  {
    slurmdb_qos_cond_t cond;
    std::memset(&cond, 0, sizeof cond);
    cond.with_deleted = 1;
    List got = slurmdb_qos_get(db.get(), &cond);
    if (!got) return R::failure("slurmdbd did not list its QoS (slurmdb_qos_get failed)");
    each_and_free<slurmdb_qos_rec_t>(got,
                                     [&](const slurmdb_qos_rec_t& q) { qos[q.id] = str(q.name); });
  }

  StringList clusters({cluster});
  slurmdb_job_cond_t cond;
  std::memset(&cond, 0, sizeof cond);
  cond.cluster_list = clusters.get();
  // Every run of a requeued job (DUP), the job records only (NO_STEP),
  // real start and end times rather than cut to the window (NO_TRUNC), all
  // users (no userid_list), any scheduling flags (NOTSET), as sacct -D -X -a.
  cond.flags = JOBCOND_FLAG_DUP | JOBCOND_FLAG_NO_STEP | JOBCOND_FLAG_NO_TRUNC;
  cond.db_flags = SLURMDB_JOB_FLAG_NOTSET;
  cond.usage_start = static_cast<time_t>(start);
  cond.usage_end = static_cast<time_t>(end);
  errno = 0;
  List got = slurmdb_jobs_get(db.get(), &cond);
  if (!got)
    return R::failure(std::string("slurmdbd refused the job query (") +
                      slurm_strerror(errno ? errno : SLURM_ERROR) +
                      "); run reconcile as SlurmUser or a Slurm administrator");

  DbdRuns out;
  std::vector<Segment>& runs = out.ended;
  each_and_free<slurmdb_job_rec_t>(got, [&](const slurmdb_job_rec_t& j) {
    uint32_t base = j.state & JOB_STATE_BASE;
    if (j.start && !j.end)
      out.unended.insert(RunKey{j.cluster && *j.cluster ? j.cluster : cluster, j.jobid, j.start});
    // Only runs that ended: not pending, not still running or suspended.
    if (!j.start || !j.end || j.end < j.start || base == JOB_RUNNING || base == JOB_SUSPENDED)
      return;
    Segment s;
    s.cluster = j.cluster && *j.cluster ? j.cluster : cluster;
    s.job_id = j.jobid;
    s.array_job_id = j.array_job_id;
    s.array_task_id = j.array_job_id ? j.array_task_id : kNoId;
    s.het_job_id = j.het_job_id;
    s.het_job_offset = j.het_job_id ? j.het_job_offset : kNoId;
    s.submit_time = j.submit;
    s.start_time = j.start;
    s.end_time = j.end;
    s.suspended_seconds = j.suspended;
    s.uid = j.uid;
    s.user = user_of(j);
    s.account = str(j.account);
    auto q = qos.find(j.qosid);
    s.qos = q == qos.end() ? "" : q->second;
    s.partition = str(j.partition);
    s.nodes = str(j.nodes);
    s.node_count = j.alloc_nodes;
    s.state = state_name(j.state);
    s.wait_status = j.exitcode == NO_VAL ? 0 : j.exitcode;
    s.job_name = str(j.jobname);
    s.ran = j.alloc_nodes > 0;
    apply_tres(tres, j.tres_req_str, &s, &s.tres_req, false);
    apply_tres(tres, j.tres_alloc_str, &s, &s.tres_alloc, s.ran);
    s.admin_comment = str(j.admin_comment);
    s.free_attempt = has_free_attempt_mark(s.admin_comment);
    runs.push_back(std::move(s));
  });
  std::stable_sort(runs.begin(), runs.end(), [](const Segment& a, const Segment& b) {
    return std::tie(a.cluster, a.job_id, a.start_time) <
           std::tie(b.cluster, b.job_id, b.start_time);
  });
  for (size_t i = 1; i < runs.size(); i++)
    if (runs[i].cluster == runs[i - 1].cluster && runs[i].job_id == runs[i - 1].job_id)
      runs[i].segment = runs[i - 1].segment + 1;
  return out;
}

}  // namespace planc

namespace planc {

Result<std::vector<DbdRunSteps>> slurmdbd_run_steps(const std::string& cluster,
                                                    const std::vector<uint32_t>& job_ids,
                                                    int64_t start, int64_t end, TresNames* names) {
  using R = Result<std::vector<DbdRunSteps>>;
  std::vector<DbdRunSteps> out;
  if (job_ids.empty()) return out;
  init_libslurm();
  DbConn db;
  std::map<uint32_t, Tres> tres;
  if (std::string problem = connect_and_load_tres(db, &tres); !problem.empty())
    return R::failure(problem);
  names->clear();
  for (const auto& [id, t] : tres) (*names)[id] = TresName{t.type, t.name};

  // The jobs by id (whole jobs: step NO_VAL, no array task or het offset),
  // so slurmdbd reads the steps of these jobs only, not of every job in
  // the window.  The elements are ours and outlive the call.
  std::vector<slurm_selected_step_t> wanted(job_ids.size());
  List steps = slurm_list_create(nullptr);
  for (size_t i = 0; i < job_ids.size(); i++) {
    wanted[i].array_task_id = NO_VAL;
    wanted[i].het_job_offset = NO_VAL;
    wanted[i].step_id.job_id = job_ids[i];
    wanted[i].step_id.step_id = NO_VAL;
    wanted[i].step_id.step_het_comp = NO_VAL;
    slurm_list_append(steps, &wanted[i]);
  }
  StringList clusters({cluster});
  slurmdb_job_cond_t cond;
  std::memset(&cond, 0, sizeof cond);
  cond.cluster_list = clusters.get();
  cond.step_list = steps;
  // Every run of a requeued job (DUP), with its steps, real times (NO_TRUNC).
  cond.flags = JOBCOND_FLAG_DUP | JOBCOND_FLAG_NO_TRUNC;
  cond.db_flags = SLURMDB_JOB_FLAG_NOTSET;
  cond.usage_start = static_cast<time_t>(start);
  cond.usage_end = static_cast<time_t>(end);
  errno = 0;
  List got = slurmdb_jobs_get(db.get(), &cond);
  slurm_list_destroy(steps);
  if (!got)
    return R::failure(std::string("slurmdbd refused the job query (") +
                      slurm_strerror(errno ? errno : SLURM_ERROR) +
                      "); run measure as SlurmUser or a Slurm administrator");
  each_and_free<slurmdb_job_rec_t>(got, [&](const slurmdb_job_rec_t& j) {
    uint32_t base = j.state & JOB_STATE_BASE;
    if (!j.start || !j.end || j.end < j.start || base == JOB_RUNNING || base == JOB_SUSPENDED)
      return;
    DbdRunSteps r;
    r.key = RunKey{j.cluster && *j.cluster ? j.cluster : cluster, j.jobid,
                   static_cast<int64_t>(j.start)};
    r.end_time = j.end;
    r.ran = j.alloc_nodes > 0;
    if (j.steps) {
      ListIterator it = slurm_list_iterator_create(j.steps);
      while (void* v = slurm_list_next(it)) {
        const auto& st = *static_cast<const slurmdb_step_rec_t*>(v);
        StepUsage u;
        // As sacct counts a step into the job's TotalCPU (src/sacct/options.c).
        u.finished = st.state >= JOB_COMPLETE && st.end;
        u.cpu_micro_seconds =
            static_cast<int64_t>(st.tot_cpu_sec) * 1000000 + static_cast<int64_t>(st.tot_cpu_usec);
        u.usage_in_tot = str(st.stats.tres_usage_in_tot);
        u.usage_in_max = str(st.stats.tres_usage_in_max);
        r.steps.push_back(std::move(u));
      }
      slurm_list_iterator_destroy(it);
    }
    out.push_back(std::move(r));
  });
  return out;
}

}  // namespace planc
