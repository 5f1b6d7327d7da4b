// The part of the adapter every plugin links (plugins/slurm_adapter.h).  It
// needs only libslurm, not slurmctld's own symbols (assoc_mgr,
// validate_operator, ...): jobcomp/planc is also loaded by `sacct -c`,
// where those do not exist and -z now would refuse the load.
#include "plugins/slurm_adapter.h"
#include "plugins/slurm_compat.h"

#include <pwd.h>

#include <algorithm>
#include <ctime>

#include "common/job_marks.h"
#include "plugins/slurm_adapter_internal.h"

namespace planc::slurm {
namespace {

using internal::str;

// What the run ended as, named as slurmdbd records it, so the bill and
// sacct agree.  jobcomp is called from job_completion_logger() with the
// same job state that accounting_storage/slurmdbd's job_complete() sends
// next, and that maps the flags first (22.05,
// jobacct_storage_p_job_complete): RESIZING, then REQUEUE (`scontrol
// requeue` sets JOB_REQUEUE on base state PENDING: sacct says REQUEUED),
// then REVOKED, else the base state (a preemption requeue is PREEMPTED, a
// node-failure requeue NODE_FAIL).
std::string run_end_state(const job_record_t* job) {
  if (IS_JOB_RESIZING(job)) return job_state_string(JOB_RESIZING);
  if (IS_JOB_REQUEUED(job)) return job_state_string(JOB_REQUEUE);
  if (IS_JOB_REVOKED(job)) return job_state_string(JOB_REVOKED);
  return job_state_string(job->job_state & JOB_STATE_BASE);
}

}  // namespace

std::string planc_conf_file() { return planc_conf_path(str(slurm_conf.slurm_conf)); }

std::string user_name(uint32_t uid) {
  struct passwd pw, *res = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res) return pw.pw_name;
  return std::to_string(uid);
}

namespace {

void log_warnings(const char* plugin_type, const std::string& path, const PlancConfig& cfg) {
  for (const std::string& w : policy_warnings(cfg))
    info("%s: warning: %s: %s", plugin_type, path.c_str(), w.c_str());
}

}  // namespace

std::shared_ptr<const PlancConfig> reload_plugin_config(const char* plugin_type, ConfigWatch* watch,
                                                        bool force) {
  std::string err;
  auto cfg = watch->poll(force, &err);
  if (!err.empty())
    error("%s: %s; the configuration loaded before stays in force", plugin_type, err.c_str());
  if (!cfg) return nullptr;
  info("%s: reloaded %s", plugin_type, watch->path().c_str());
  log_warnings(plugin_type, watch->path(), *cfg);
  return cfg;
}

std::shared_ptr<const PlancConfig> load_plugin_config(const char* plugin_type) {
  std::string path = planc_conf_file();
  Result<PlancConfig> r = load_config(path);
  if (!r.ok()) {
    error("%s: %s", plugin_type, r.error().c_str());
    return nullptr;
  }
  info("%s: loaded %s", plugin_type, path.c_str());
  log_warnings(plugin_type, path, r.value());
  return std::make_shared<const PlancConfig>(std::move(r).value());
}

Segment segment_of(const job_record_t* job) {
  Segment s;
  s.cluster = str(slurm_conf.cluster_name);
  s.job_id = job->job_id;
  s.array_job_id = job->array_job_id;
  s.array_task_id = job->array_job_id ? job->array_task_id : kNoId;
  s.het_job_id = job->het_job_id;
  s.het_job_offset = job->het_job_id ? job->het_job_offset : kNoId;
  s.segment = job->restart_cnt;
  s.submit_time = job->details ? job->details->submit_time : 0;
  // A resized job bills each size from the time it took that size; a
  // requeue does not clear resize_time, hence the max.  (For the record of
  // a resize itself Slurm has already moved resize_time to now: jobcomp
  // supplies that record's start.)
  s.start_time = std::max(job->start_time, job->resize_time);
  s.end_time = IS_JOB_RESIZING(job) ? time(nullptr) : job->end_time;
  // A job that never started (cancelled or failed while pending) may carry
  // no start or a future expected one: its record sits at its end.
  if (!s.start_time || s.start_time > s.end_time) s.start_time = s.end_time;
  s.suspended_seconds = job->tot_sus_time;
  s.uid = job->user_id;
  s.user = str(job->user_name);
  s.account = str(job->account);
  s.qos = job->qos_ptr && job->qos_ptr->name ? job->qos_ptr->name : "";
  s.partition = str(job->partition);
  s.nodes = str(job->nodes);
  s.node_count = job->node_cnt;
  s.state = run_end_state(job);
  s.wait_status = job->exit_code == NO_VAL ? 0 : job->exit_code;
  s.job_name = str(job->name);
  s.tres_req = str(job->tres_fmt_req_str);
  s.tres_alloc = str(job->tres_fmt_alloc_str);
  // Resources it held; a job cancelled or failed before it started holds
  // none (and a pending cancel has start_time > end_time or no nodes).
  s.ran = job->node_cnt > 0 && job->nodes && *job->nodes && job->start_time &&
          job->start_time <= job->end_time;
  if (s.ran) {
    s.cpus = job->total_cpus;
    if (job->tres_alloc_cnt) s.mem_mib = job->tres_alloc_cnt[TRES_ARRAY_MEM];
    if (job->gres_list_alloc) {
      ListIterator it = list_iterator_create(job->gres_list_alloc);
      while (auto* g = static_cast<gres_state_t*>(list_next(it))) {
        auto* d = static_cast<gres_job_state_t*>(g->gres_data);
        if (!d || !g->gres_name || !d->total_gres || d->total_gres == NO_VAL64) continue;
        s.gres.push_back(GresUse{g->gres_name, str(d->type_name), d->total_gres});
      }
      list_iterator_destroy(it);
    }
  }
  s.admin_comment = str(job->admin_comment);
  s.free_attempt = has_free_attempt_mark(s.admin_comment);
  return s;
}

}  // namespace planc::slurm
