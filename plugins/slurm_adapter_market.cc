#include "plugins/slurm_adapter_market.h"

#include <cstring>

#include "plugins/slurm_adapter.h"
#include "plugins/slurm_adapter_internal.h"

namespace planc::slurm {
namespace {

using internal::str;

// Slurm's own words for a job requeued with `scontrol requeuehold`
// (job_mgr.c _job_requeue_op): the owner's hold.
constexpr const char* kRequeueHeldDesc = "job requeued in held state";

bool waits_on_dependency(const job_record_t* job) {
  if (!job->details || !job->details->depend_list) return false;
  bool waits = false;
  ListIterator it = list_iterator_create(job->details->depend_list);
  while (auto* d = static_cast<depend_spec_t*>(list_next(it)))
    if (d->depend_state != DEPEND_FULFILLED) waits = true;
  list_iterator_destroy(it);
  return waits;
}

}  // namespace

MarketFacts market_facts(const Tier* t, const job_record_t* job, int gpu_pos) {
  MarketFacts f;
  if (IS_JOB_PENDING(job))
    f.phase = MarketFacts::Phase::kPending;
  else if (IS_JOB_RUNNING(job) || IS_JOB_SUSPENDED(job))
    f.phase = MarketFacts::Phase::kRunning;
  else
    f.phase = MarketFacts::Phase::kFinished;
  f.in_market_tier = t && t->id == TierId::kP2;
  f.free_attempt = internal::marked(job);
  f.run = job->restart_cnt;
  f.shape.gpus =
      gpu_pos >= 0 && job->tres_req_cnt ? static_cast<uint32_t>(job->tres_req_cnt[gpu_pos]) : 0;
  f.shape.nodes = job->details ? job->details->min_nodes : 0;
  f.shape.gpu_type = internal::requested_gpu_type(
      {job->tres_per_node, job->tres_per_job, job->tres_per_socket, job->tres_per_task});
  f.shape.account = str(job->account);
  f.shape.partition = str(job->partition);
  f.begin = job->details ? job->details->begin_time : 0;
  f.held = is_held(job);
  f.requeue_held = f.held && job->state_reason == WAIT_HELD_USER && job->state_desc &&
                   std::strcmp(job->state_desc, kRequeueHeldDesc) == 0;
  f.dependency = waits_on_dependency(job);
  return f;
}

std::optional<MarketLife> market_life(const job_record_t* job) {
  if (!job->admin_comment) return std::nullopt;
  return parse_life(job->admin_comment);
}

void set_market_life(job_record_t* job, const std::optional<MarketLife>& life,
                     std::string_view currency) {
  const std::string comment = with_life(str(job->admin_comment), life, currency);
  if (comment == str(job->admin_comment)) return;
  xfree(job->admin_comment);
  if (!comment.empty()) job->admin_comment = xstrdup(comment.c_str());
  last_job_update = time(nullptr);
  schedule_job_save();  // only signals the state-save thread
}

int apply_market_hold(uint32_t job_id, HoldAction hold) {
  switch (hold) {
    case HoldAction::kHold:
      return hold_job_as_slurm_user(job_id, nullptr);
    case HoldAction::kRelease:
      return release_job_as_slurm_user(job_id, nullptr);
    case HoldAction::kGiveToOwner:
      // The owner's hold, as scontrol hold by its owner leaves it: theirs
      // to release (Slurm lets an owner release only a user hold).
      if (job_record_t* job = find_job_record(job_id); job && is_held(job)) {
        job->state_reason = WAIT_HELD_USER;
        xfree(job->state_desc);
        last_job_update = time(nullptr);
      }
      break;
    case HoldAction::kKeep:
      break;
  }
  return SLURM_SUCCESS;
}

void hold_in_place(job_record_t* job) {
  job->priority = 0;
  job->state_reason = WAIT_HELD;
  xfree(job->state_desc);
  last_job_update = time(nullptr);
}

bool dependency_waits(job_record_t* job) {
  if (!job->details || !job->details->depend_list) return false;
  const int rc = test_job_dependency(job, nullptr);
  return rc == LOCAL_DEPEND || rc == REMOTE_DEPEND || rc == FAIL_DEPEND;
}

void take_over_hold(job_record_t* job) {
  if (job->priority != 0) return;
  job->state_reason = WAIT_HELD;
  xfree(job->state_desc);
  last_job_update = time(nullptr);
}

bool run_requeues(const job_record_t* job) {
  if (job->job_state & JOB_REQUEUE) return true;
  const uint32_t base = job->job_state & JOB_STATE_BASE;
  const bool may = job->details && job->details->requeue;
  if (base == JOB_PREEMPTED) return may;
  if (base == JOB_NODE_FAIL) return may && slurm_conf.job_requeue;
  return false;
}

}  // namespace planc::slurm
