// The part of the adapter preempt/planc and slurmctld/planc share: state
// files, where the bills go, a job's tier and infused mark, and updates
// through slurmctld's own update path (slurmctld's symbols: update_job).
// What every plugin needs, jobcomp/planc included, is in
// slurm_adapter_job.cc (libslurm only).
#include "plugins/slurm_adapter.h"
#include "plugins/slurm_compat.h"

#include "common/infusion.h"
#include "plugins/slurm_adapter_internal.h"

namespace planc::slurm {

std::string state_file_path(const char* name) {
  const char* dir = slurm_conf.state_save_location ? slurm_conf.state_save_location : ".";
  return std::string(dir) + "/" + name;
}

BillSite bill_site() {
  BillSite s;
  if (slurm_conf.job_comp_type) s.jobcomp_type = slurm_conf.job_comp_type;
  if (slurm_conf.job_comp_loc) s.jobcomp_loc = slurm_conf.job_comp_loc;
  if (slurm_conf.cluster_name) s.cluster = slurm_conf.cluster_name;
  return s;
}

const Tier* job_tier(const PlancConfig& cfg, const job_record_t* job) {
  if (!job || !job->qos_ptr || !job->qos_ptr->name) return nullptr;
  return cfg.tiers.find_by_qos(job->qos_ptr->name);
}

std::optional<InfusedMark> infused_mark_of(const job_record_t* job) {
  if (!job || !job->admin_comment || job->admin_comment[0] != '[') return std::nullopt;
  return read_infused_mark(job->admin_comment);
}

bool on_free_attempt(const job_record_t* job) { return job && internal::marked(job); }
TierId counted_tier_of(const job_record_t* job, TierId tier) {
  return job ? internal::counted_tier(job, tier) : tier;
}

namespace {
// One update as SlurmUser through slurmctld's own path; NO_VAL priority:
// left as it is.
int update_as_slurm_user(uint32_t job_id, const char* qos, const char* comment, uint32_t priority,
                         std::optional<int64_t> nice = std::nullopt) {
  job_desc_msg_t desc;
  slurm_init_job_desc_msg(&desc);
  desc.job_id = job_id;
  desc.qos = qos ? xstrdup(qos) : nullptr;
  desc.admin_comment = comment ? xstrdup(comment) : nullptr;
  if (priority != NO_VAL) desc.priority = priority;
  if (nice) desc.nice = static_cast<uint32_t>(NICE_OFFSET + *nice);
  slurm_msg_t msg;
  slurm_msg_t_init(&msg);
  msg.data = &desc;
  msg.conn_fd = -1;
  int rc = update_job(&msg, slurm_conf.slurm_user_id, false);
  xfree(desc.qos);
  xfree(desc.admin_comment);
  xfree(desc.alloc_node);
  return rc;
}
}  // namespace

int update_job_as_slurm_user(uint32_t job_id, const char* qos, const char* comment) {
  return update_as_slurm_user(job_id, qos, comment, NO_VAL);
}

int update_job_as_slurm_user(uint32_t job_id, const char* qos, const char* comment, int64_t nice) {
  return update_as_slurm_user(job_id, qos, comment, NO_VAL, nice);
}

std::optional<JobPriority> job_priority(uint32_t job_id) {
  const job_record_t* job = find_job_record(job_id);
  if (!job || !job->details) return std::nullopt;
  return JobPriority{job->priority,
                     static_cast<int64_t>(job->details->nice) - static_cast<int64_t>(NICE_OFFSET),
                     job->direct_set_prio != 0};
}

int release_job_as_slurm_user(uint32_t job_id, const char* comment) {
  return update_as_slurm_user(job_id, nullptr, comment, INFINITE);
}

int hold_job_as_slurm_user(uint32_t job_id, const char* comment) {
  return update_as_slurm_user(job_id, nullptr, comment, 0);
}

void for_each_node_gpus(const job_record_t* job, const std::string& type,
                        const std::function<void(uint32_t, uint64_t)>& fn) {
  if (!job || !job->node_bitmap) return;
  const int last = bit_fls(job->node_bitmap);
  uint32_t j = 0;  // the node's place among the job's nodes
  for (int i = bit_ffs(job->node_bitmap); i >= 0 && i <= last; i++) {
    if (!bit_test(job->node_bitmap, i)) continue;
    uint64_t gpus = 0;
    internal::for_each_gpu_gres<gres_job_state_t>(
        job->gres_list_alloc, [&](const gres_job_state_t& d) {
          if (!type.empty() && d.type_name && type != d.type_name) return;
          if (!d.gres_cnt_node_alloc || j >= d.node_cnt) return;
          const uint64_t c = d.gres_cnt_node_alloc[j];
          if (c != NO_VAL64 && c != NO_CONSUME_VAL64) gpus += c;
        });
    fn(static_cast<uint32_t>(i), gpus);
    ++j;
  }
}

void for_each_node(const job_record_t* job, const std::function<void(uint32_t)>& fn) {
  if (!job || !job->node_bitmap) return;
  const int last = bit_fls(job->node_bitmap);
  for (int i = bit_ffs(job->node_bitmap); i >= 0 && i <= last; i++)
    if (bit_test(job->node_bitmap, i)) fn(static_cast<uint32_t>(i));
}

}  // namespace planc::slurm
