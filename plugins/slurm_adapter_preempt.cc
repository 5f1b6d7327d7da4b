// preempt/planc's part of the adapter: what it reads of a preempted job,
// what it does to one (signals, the end of a grace, a requeue, the owner's
// note), and the moves after a requeue (--spot-fallback, a market winner
// sent back to bid).  Uses slurmctld's symbols.
#include "plugins/slurm_adapter_preempt.h"
#include "plugins/slurm_compat.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/job_marks.h"
#include "common/market.h"
#include "plugins/slurm_adapter_internal.h"

namespace planc::slurm {
namespace {

using internal::counted_tier;
using internal::str;

// Where a job preempted for requeue stands, `run` its preempted run's
// restart count: pending again (its requeue done), or kMissed: running
// again already; kGone: running with no preemption in progress (called
// off), or ended; kNotYet: its grace or requeue goes on.
enum class RequeueState : uint8_t { kPending, kNotYet, kMissed, kGone };
RequeueState requeue_state(const job_record_t* job, uint32_t run) {
  if (!job || IS_JOB_FINISHED(job)) return RequeueState::kGone;
  if (IS_JOB_PENDING(job)) return RequeueState::kPending;
  return job->restart_cnt > run                      ? RequeueState::kMissed
         : IS_JOB_RUNNING(job) && !job->preempt_time ? RequeueState::kGone
                                                     : RequeueState::kNotYet;
}
// The result's kind (its kNotYet, kMissed or kGone) when the job is not
// pending again yet; none when it is.
template <typename Kind>
std::optional<Kind> unless_pending(RequeueState s) {
  switch (s) {
    case RequeueState::kPending:
      return std::nullopt;
    case RequeueState::kNotYet:
      return Kind::kNotYet;
    case RequeueState::kMissed:
      return Kind::kMissed;
    case RequeueState::kGone:
      break;
  }
  return Kind::kGone;
}

}  // namespace

std::map<uint32_t, TierId> tiers_of(const QosTierCache& tiers, const std::vector<uint32_t>& ids) {
  std::map<uint32_t, TierId> out;
  for (uint32_t id : ids) {
    const job_record_t* job = find_job_record(id);
    if (const Tier* t = job_tier(tiers, job)) out[id] = counted_tier(job, t->id);
  }
  return out;
}

bool fallback_pending(const job_record_t* job) {
  return job->admin_comment && planc::fallback_pending(job->admin_comment);
}

namespace {
// The job's AdminComment, written in place (the job write lock held): an
// update RPC of a job slurmctld is requeueing may be refused (its
// accounting record is being set), and the refusal's note must not be
// lost with it.
void set_admin_comment(job_record_t* job, const std::string& comment) {
  xfree(job->admin_comment);
  job->admin_comment = xstrdup(comment.c_str());
  last_job_update = time(nullptr);
}
}  // namespace

FallbackResult apply_fallback(const PlancConfig& cfg, const QosTierCache& tiers, uint32_t job_id,
                              uint32_t run, time_t now) {
  using K = FallbackResult::Kind;
  FallbackResult r;
  job_record_t* job = find_job_record(job_id);
  if (!job || IS_JOB_FINISHED(job)) return r;
  const std::string comment = str(job->admin_comment);
  auto to = planc::fallback_pending(comment);
  const Tier* now_in = job_tier(tiers, job);
  if (!to || !now_in || now_in->id == *to) return r;
  r.to = *to;
  r.from = now_in->id;
  if (auto k = unless_pending<K>(requeue_state(job, run))) {
    r.kind = *k;
    return r;
  }
  // A starved P3 job on its free P2 attempt falls back from P3.
  auto free = free_attempt_tiers(comment);
  r.from = free ? free->first : now_in->id;
  // The move is SlurmUser's, which Slurm's own check of the QoS against the
  // association skips: the account may have changed since submission (an
  // update), so its entitlement is checked here.
  const Entitlement ent = entitlement_of(cfg, job);
  if (ent.known && !ent.allows(cfg.tiers.tier(r.to))) {
    r.kind = K::kRefused;
    r.why = "account " + ent.account + " may not use " + cfg.tiers.tier(r.to).qos;
    const std::string refused = with_tagged_mark(
        comment, kFallbackTag, fallback_refused_mark(cfg, r.from, r.to, now, r.why));
    set_admin_comment(job, refused);
    return r;
  }
  const std::string moved = remove_free_attempt_mark(
      with_tagged_mark(comment, kFallbackTag, fallback_done_mark(cfg, r.from, r.to, now)));
  int rc = update_job_as_slurm_user(job_id, cfg.tiers.tier(r.to).qos.c_str(), moved.c_str());
  if (rc == SLURM_SUCCESS) {
    r.kind = K::kMoved;
    return r;
  }
  r.kind = K::kRefused;
  r.why = slurm_strerror(rc);
  const std::string refused =
      with_tagged_mark(comment, kFallbackTag, fallback_refused_mark(cfg, r.from, r.to, now, r.why));
  set_admin_comment(job, refused);
  return r;
}

JobSignal job_signal_order(const job_record_t* job, uint16_t signal) {
  JobSignal s;
  s.job_id = job->job_id;
  s.signal = signal;
  s.nodes = job->nodes ? job->nodes : "";
  s.protocol_version = SLURM_PROTOCOL_VERSION;
  if (job->node_bitmap) {
    for (int i = 0; i < node_record_count; i++) {
      if (!bit_test(job->node_bitmap, i) || !node_record_table_ptr[i]) continue;
      s.protocol_version = std::min(s.protocol_version, node_record_table_ptr[i]->protocol_version);
    }
  }
  return s;
}

// The message job_mgr.c's _signal_job() builds for KILL_FULL_JOB: every
// step and the batch script (slurmd: _kill_all_active_steps), with a step id
// no step can have.
void signal_nodes(const JobSignal& s) {
  if (s.nodes.empty()) return;
  hostlist_t hl = hostlist_create(s.nodes.c_str());
  if (!hl) return;
  int n = hostlist_count(hl);
  if (n <= 0) {
    hostlist_destroy(hl);
    return;
  }
  auto* msg = static_cast<signal_tasks_msg_t*>(xmalloc(sizeof(signal_tasks_msg_t)));
  msg->step_id.job_id = s.job_id;
  msg->step_id.step_id = slurm_conf.max_step_cnt + 1;
  msg->step_id.step_het_comp = NO_VAL;
  msg->flags = KILL_JOB_BATCH | KILL_FULL_JOB;
  msg->signal = s.signal;
  auto* args = static_cast<agent_arg_t*>(xmalloc(sizeof(agent_arg_t)));
  args->msg_type = REQUEST_SIGNAL_TASKS;
  args->retry = 1;
  args->hostlist = hl;
  args->node_count = static_cast<uint32_t>(n);
  args->protocol_version = s.protocol_version;
  args->msg_args = msg;
  set_agent_arg_r_uid(args, SLURM_AUTH_UID_ANY);
  agent_queue_request(args);
}

bool jobs_loaded() { return planc_jobs_loaded(); }

bool started_as_backup() { return planc_started_as_backup(); }

bool requeues(const job_record_t* job) { return job->details && job->details->requeue; }

// --gres=gpu:N and --gpus-per-node set gres_per_node; --gpus=N (per job)
// is spread over its minimum node count.
uint64_t gpus_per_node_asked(const job_record_t* job) {
  uint64_t n = 0;
  const uint32_t nodes = job->details && job->details->min_nodes ? job->details->min_nodes : 1;
  internal::for_each_gpu_gres<gres_job_state_t>(job->gres_list_req, [&](const gres_job_state_t& d) {
    n = std::max<uint64_t>(n, d.gres_per_node);
    if (d.gres_per_job) n = std::max<uint64_t>(n, (d.gres_per_job + nodes - 1) / nodes);
  });
  return n;
}

namespace {

struct NodeGpus {
  uint64_t avail = 0, alloc = 0;
};

// A node's GPUs, of `type` only unless empty.
NodeGpus gpus_of_node(const node_record_t* node, const std::string& type = {}) {
  NodeGpus n;
  if (!node) return n;
  internal::for_each_gpu_gres<gres_node_state_t>(node->gres_list, [&](const gres_node_state_t& d) {
    if (type.empty()) {
      n.avail += d.gres_cnt_avail;
      n.alloc += d.gres_cnt_alloc;
      return;
    }
    for (uint16_t i = 0; i < d.type_cnt; ++i)
      if (d.type_name && d.type_name[i] && type == d.type_name[i]) {
        n.avail += d.type_cnt_avail ? d.type_cnt_avail[i] : 0;
        n.alloc += d.type_cnt_alloc ? d.type_cnt_alloc[i] : 0;
      }
  });
  return n;
}

// The most GPUs a node of `part` has, worked out again only when the node
// table or the partitions changed (Slurm's last_node_update and
// last_part_update): asked once per preemptor, several hundred times a
// backfill cycle.  Only under slurmctld's locks (one thread at a time).
uint64_t largest_node_gpus(const part_record_t* part) {
  struct Cached {
    time_t nodes_at = 0, parts_at = 0;
    uint64_t gpus = 0;
  };
  static std::map<std::string, Cached> cache;
  if (!part || !part->node_bitmap || !part->name) return 0;
  Cached& c = cache[part->name];
  if (c.nodes_at != last_node_update || c.parts_at != last_part_update) {
    c.gpus = 0;
    for (int i = 0; i < node_record_count; i++)
      if (bit_test(part->node_bitmap, i))
        c.gpus = std::max(c.gpus, gpus_of_node(node_record_table_ptr[i]).avail);
    c.nodes_at = last_node_update;
    c.parts_at = last_part_update;
  }
  return c.gpus;
}

}  // namespace

bool needs_whole_nodes(const job_record_t* job) {
  if (!job) return false;
  // --exclusive (not --exclusive=user or =mcs: values, not flags).
  if (job->details && job->details->whole_node == WHOLE_NODE_REQUIRED) return true;
  const uint64_t asked = gpus_per_node_asked(job);
  if (!asked) return false;
  const uint64_t largest = largest_node_gpus(job->part_ptr);
  return largest && asked >= largest;
}

uint32_t nodes_asked(const job_record_t* job) {
  if (!job) return 1;
  const uint64_t base = job->details && job->details->min_nodes ? job->details->min_nodes : 1;
  const uint64_t per = gpus_per_node_asked(job);
  const uint64_t largest = largest_node_gpus(job->part_ptr);
  uint64_t nodes = base;
  if (per > largest && largest) nodes = std::max(base, (per * base + largest - 1) / largest);
  return static_cast<uint32_t>(std::min<uint64_t>(nodes, UINT32_MAX));
}

std::string gpu_type_asked(const job_record_t* job) {
  std::string type;  // the first entry that names one
  if (job)
    internal::for_each_gpu_gres<gres_job_state_t>(job->gres_list_req,
                                                  [&](const gres_job_state_t& d) {
                                                    if (type.empty() && d.type_name)
                                                      type = d.type_name;
                                                  });
  return type;
}

std::optional<NodeGpuCount> node_gpus_for(const job_record_t* preemptor, const std::string& type,
                                          uint32_t node) {
  if (!preemptor || node >= node_count() || !avail_node_bitmap ||
      !bit_test(avail_node_bitmap, node))
    return std::nullopt;
  if (preemptor->part_ptr && preemptor->part_ptr->node_bitmap &&
      !bit_test(preemptor->part_ptr->node_bitmap, node))
    return std::nullopt;
  const node_record_t* n = node_record_table_ptr[node];
  if (!n) return std::nullopt;
  const NodeGpus g = gpus_of_node(n, type);
  return NodeGpuCount{g.avail, g.avail > g.alloc ? g.avail - g.alloc : 0};
}

size_t node_count() { return node_record_count > 0 ? static_cast<size_t>(node_record_count) : 0; }

std::optional<bool> requeues(uint32_t job_id) {
  const job_record_t* job = find_job_record(job_id);
  if (!job) return std::nullopt;
  return requeues(job);
}

void sigterm_batch_script(job_record_t* job) {
  if (job->batch_flag) job_signal(job, SIGTERM, KILL_JOB_BATCH, 0, false);
}

std::vector<uint32_t> ended_jobs(const std::vector<uint32_t>& ids) {
  std::vector<uint32_t> ended;
  for (uint32_t id : ids) {
    const job_record_t* job = find_job_record(id);
    if (!job || IS_JOB_FINISHED(job)) ended.push_back(id);
  }
  return ended;
}

Entitlement entitlement_of(const PlancConfig& cfg, const job_record_t* job) {
  Entitlement e;
  e.account = str(job->account);
  assoc_mgr_lock_t locks = {.assoc = READ_LOCK, .qos = READ_LOCK};
  assoc_mgr_lock(&locks);
  const slurmdb_assoc_rec_t* assoc = job->assoc_ptr;
  if (assoc && assoc->usage && assoc->usage->valid_qos && assoc_mgr_qos_list) {
    e.known = true;
    ListIterator it = list_iterator_create(assoc_mgr_qos_list);
    while (auto* qos = static_cast<slurmdb_qos_rec_t*>(list_next(it))) {
      if (!qos->name || !cfg.tiers.find_by_qos(qos->name)) continue;
      if (static_cast<int64_t>(qos->id) < bit_size(assoc->usage->valid_qos) &&
          bit_test(assoc->usage->valid_qos, qos->id))
        e.qos.emplace_back(qos->name);
    }
    list_iterator_destroy(it);
  }
  assoc_mgr_unlock(&locks);
  return e;
}

std::map<uint32_t, JobView> view_jobs(const std::vector<uint32_t>& ids, const PlancConfig& cfg,
                                      const QosTierCache& tiers) {
  std::map<uint32_t, JobView> out;
  for (uint32_t id : ids) {
    const job_record_t* job = find_job_record(id);
    JobView v;  // kGone unless found
    if (!job) {
      out[id] = v;
      continue;
    }
    if (IS_JOB_COMPLETING(job))
      v.state = JobView::State::kCompleting;
    else if (IS_JOB_PENDING(job))
      v.state = JobView::State::kPending;
    else if (IS_JOB_RUNNING(job) || IS_JOB_SUSPENDED(job))
      v.state = JobView::State::kRunning;
    else
      v.state = JobView::State::kFinished;
    v.in_preemption = job->preempt_time != 0;
    v.preempted_state = (job->job_state & JOB_STATE_BASE) == JOB_PREEMPTED;
    v.cancelled = (job->job_state & JOB_STATE_BASE) == JOB_CANCELLED;
    v.waits_on_preemption = preemption_started_for(job);
    v.held = IS_JOB_PENDING(job) && is_held(job);
    // A QoS slurmctld has no record of (deleted, not restored yet): not
    // looked at.  A known QoS that is no tier preempts nothing.
    if (job->qos_ptr) {
      const Tier* t = job_tier(tiers, job);
      v.preempts = t ? cfg.tiers.preempt_mask(t->id) : 0;
      if (t) v.tier = t->id;
    }
    v.run = job->restart_cnt;
    out[id] = v;
  }
  return out;
}

void set_owner_note(job_record_t* job, const std::string& note) {
  xfree(job->system_comment);
  job->system_comment = xstrdup(note.c_str());
  if (auto comment = admin_comment_with_note(job->admin_comment ? job->admin_comment : "", note)) {
    xfree(job->admin_comment);
    job->admin_comment = xstrdup(comment->c_str());
  }
}

namespace {

// Killing the batch script alone (KILL_JOB_BATCH: slurmstepd kill()s only
// the shell's pid) orphans everything the script started; with
// KILL_FULL_JOB as well, slurmstepd killpg()s the script's process group
// and slurmd signals the job's other steps too (bench-preempt left one
// orphan `sleep` per victim without it).
constexpr uint16_t kWholeJob = KILL_JOB_BATCH | KILL_FULL_JOB;

}  // namespace

bool end_grace(uint32_t victim, uint32_t preemptor, const std::string& note) {
  job_record_t* job = find_job_record(victim);
  time_t now = time(nullptr);
  if (!job || !IS_JOB_RUNNING(job) || !job->preempt_time) return false;
  // Slurm's deadline is kSlurmGraceExtraSeconds past the tracker's, in
  // whole seconds; the tracker's is the grace, to the millisecond.  Slurm
  // preempts only once its end_time has come, so it is brought forward to
  // now; never by more than the extra second and the second's truncation
  // (a call that early is a bug, and the grace runs on).
  if (now + static_cast<time_t>(kSlurmGraceExtraSeconds) + 1 < job->end_time) return false;
  if (now < job->end_time) job->end_time = now;
  job_record_t* p = preemptor ? find_job_record(preemptor) : nullptr;
  set_owner_note(job, note);
  if (job->batch_flag) job_signal(job, SIGKILL, kWholeJob, 0, false);
  slurm_job_preempt(job, p, slurm_job_preempt_mode(job), false);
  if (p && IS_JOB_PENDING(p) && p->details) p->details->preempt_start_time = now;
  return true;
}

bool call_off(uint32_t victim, const std::string& note) {
  job_record_t* job = find_job_record(victim);
  if (!job || !IS_JOB_RUNNING(job)) return false;
  // Without preempt_time Slurm never knew of the preemption (a controller
  // that took over from an older job state): only the note changes.
  if (job->preempt_time) {
    job->preempt_time = 0;
    job_end_time_reset(job);  // from its start and time limit, as before the grace
  }
  set_owner_note(job, note);
  last_job_update = time(nullptr);
  return true;
}

int requeue_preempted(uint32_t victim) {
  job_record_t* job = find_job_record(victim);
  if (!job) return ESLURM_INVALID_JOB_ID;
  if (IS_JOB_PENDING(job) && !IS_JOB_COMPLETING(job)) return ESLURM_JOB_PENDING;
  return job_requeue(slurm_conf.slurm_user_id, victim, nullptr, true, 0);
}

bool preemption_started_for(const job_record_t* job) {
  return IS_JOB_PENDING(job) && job->details && job->details->preempt_start_time;
}

bool release_preemptor(uint32_t preemptor) {
  job_record_t* p = find_job_record(preemptor);
  if (!p || !preemption_started_for(p)) return false;
  p->details->preempt_start_time = 0;
  return true;
}

RunEndFacts run_end_facts(const job_record_t* job) {
  using E = RunEndFacts::Ending;
  RunEndFacts f;
  f.wait_status = job->exit_code == NO_VAL ? 0 : job->exit_code;
  switch (job->job_state & JOB_STATE_BASE) {
    case JOB_PREEMPTED:
      f.ending = E::kPreempted;
      break;
    case JOB_COMPLETE:
      f.ending = E::kCompleted;
      break;
    case JOB_FAILED:
    case JOB_OOM:
      f.ending = E::kFailed;
      break;
    case JOB_CANCELLED:
      f.ending = E::kCancelled;
      break;
    case JOB_NODE_FAIL:
    case JOB_BOOT_FAIL:
      f.ending = E::kNodeFail;
      break;
    default:
      f.ending = E::kOther;
      break;
  }
  // Requeued by someone during the grace (scontrol requeue): it runs again
  // anyway; Slurm's record says REQUEUED.
  if (job->job_state & JOB_REQUEUE) f.ending = E::kPreempted;
  return f;
}

std::string cancelled_by(const job_record_t* job) {
  if (job->requid == job->user_id) return "by its owner";
  if (job->requid == static_cast<uid_t>(-1)) return "";
  return "by uid " + std::to_string(job->requid);
}

void set_run_end_state(job_record_t* job, RunEndVerdict verdict) {
  uint32_t flags = job->job_state & JOB_STATE_FLAGS;
  if (verdict == RunEndVerdict::kTreatAsPreempted) {
    job->job_state = JOB_PREEMPTED | flags;
  } else if (verdict == RunEndVerdict::kFinished) {
    job->job_state = JOB_COMPLETE | flags;
    job->state_reason = WAIT_NO_REASON;
    xfree(job->state_desc);
    job->preempt_time = 0;  // the preemption is over: the job finished
  }
}

}  // namespace planc::slurm
