#include "plugins/slurm_adapter.h"
#include "plugins/slurm_compat.h"

#include <pwd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <initializer_list>

#include "common/file_system.h"
#include "common/infusion.h"
#include "common/job_marks.h"
#include "common/market.h"

namespace planc::slurm {
namespace {

// The GPUs a job asks for (tres_req_cnt at `gpu_pos`; < 0: unknown, 0).
uint32_t requested_gpus(const job_record_t* job, int gpu_pos) {
  return gpu_pos >= 0 && job->tres_req_cnt ? static_cast<uint32_t>(job->tres_req_cnt[gpu_pos]) : 0;
}

// The GPU type the first of a request's TRES strings that names one names
// (common/market.h gpu_type_of), "" for none.
std::string requested_gpu_type(std::initializer_list<const char*> tres) {
  for (const char* t : tres)
    if (t)
      if (std::string type = gpu_type_of(t); !type.empty()) return type;
  return "";
}

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

std::string str(const char* s) { return s ? std::string(s) : std::string(); }

// Reads what slurmdbd knows of an association: its account, DefaultQOS and
// which of the tiers' QoS it may use.  REQUIRES assoc_mgr ASSOC+QOS read locks.
void read_assoc(const PlancConfig& cfg, const slurmdb_assoc_rec_t* assoc, SubmitRequest* req) {
  req->assoc_known = true;
  req->account = str(assoc->acct);
  if (!assoc_mgr_qos_list) return;
  ListIterator it = list_iterator_create(assoc_mgr_qos_list);
  while (auto* qos = static_cast<slurmdb_qos_rec_t*>(list_next(it))) {
    if (!qos->name) continue;
    if (assoc->def_qos_id && qos->id == assoc->def_qos_id) req->assoc_default_qos = qos->name;
    if (!cfg.tiers.find_by_qos(qos->name)) continue;
    if (assoc->usage && assoc->usage->valid_qos &&
        static_cast<int64_t>(qos->id) < bit_size(assoc->usage->valid_qos) &&
        bit_test(assoc->usage->valid_qos, qos->id))
      req->allowed_qos.emplace_back(qos->name);
  }
  list_iterator_destroy(it);
}

// Looks the association up as slurmctld will when it validates the job:
// by user, account (the user's default when none) and partition.
void lookup_assoc(const PlancConfig& cfg, uint32_t uid, const char* account, const char* partition,
                  SubmitRequest* req) {
  assoc_mgr_lock_t locks = {.assoc = READ_LOCK, .qos = READ_LOCK, .user = READ_LOCK};
  slurmdb_assoc_rec_t want;
  std::memset(&want, 0, sizeof(want));
  want.uid = uid;
  want.acct = const_cast<char*>(account);
  // A job may list several partitions; its association is then decided per
  // partition by slurmctld.  Use the user's plain association in that case.
  if (partition && !std::strchr(partition, ',')) want.partition = const_cast<char*>(partition);
  slurmdb_assoc_rec_t* found = nullptr;
  assoc_mgr_lock(&locks);
  if (assoc_mgr_fill_in_assoc(acct_db_conn, &want, accounting_enforce, &found, true) ==
          SLURM_SUCCESS &&
      found)
    read_assoc(cfg, found, req);
  assoc_mgr_unlock(&locks);
  if (req->account.empty()) req->account = str(account);
}

Requeue requeue_of(uint16_t v) {
  if (v == NO_VAL16) return Requeue::kUnset;
  return v ? Requeue::kYes : Requeue::kNo;
}

}  // namespace

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

SubmitRequest submit_request(const PlancConfig& cfg, const job_desc_msg_t* desc) {
  SubmitRequest req;
  req.requested_qos = str(desc->qos);
  req.requeue = requeue_of(desc->requeue);
  req.partition = str(desc->partition);
  lookup_assoc(cfg, desc->user_id, desc->account, desc->partition, &req);
  return req;
}

SubmitRequest modify_request(const PlancConfig& cfg, const job_desc_msg_t* desc,
                             const job_record_t* job, uint32_t submit_uid) {
  SubmitRequest req;
  req.requested_qos = str(desc->qos);
  if (req.requested_qos.empty()) return req;  // not a QoS change
  req.privileged = validate_operator(submit_uid);
  req.on_free_attempt = job->admin_comment && has_free_attempt_mark(job->admin_comment);
  req.partition = str(desc->partition);
  req.current_partition = str(job->partition);
  req.default_partition = str(default_part_name);
  const char* account = desc->account ? desc->account : job->account;
  const char* partition = desc->partition ? desc->partition : job->partition;
  lookup_assoc(cfg, job->user_id, account, partition, &req);
  return req;
}

std::optional<std::string> owner_release_comment(const job_desc_msg_t* desc,
                                                 const job_record_t* job, uint32_t submit_uid) {
  if (desc->priority != INFINITE || !IS_JOB_PENDING(job) || !job->admin_comment)
    return std::nullopt;
  if (validate_operator(submit_uid)) return std::nullopt;
  return std::string(job->admin_comment);
}

MarketOptions market_options(const job_desc_msg_t* desc) {
  MarketOptions m;
  for (uint32_t i = 0; desc->spank_job_env && i < desc->spank_job_env_size; i++) {
    std::string_view e = desc->spank_job_env[i] ? desc->spank_job_env[i] : "";
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      if (e.size() > name.size() && e.substr(0, name.size()) == name && e[name.size()] == '=')
        return std::string(e.substr(name.size() + 1));
      return std::nullopt;
    };
    if (auto v = value("PLANC_BID")) m.bid = *v;
    if (value("PLANC_LOCK_PRICE")) m.lock_price = true;
    if (value("PLANC_SPOT_FALLBACK")) m.spot_fallback = true;
  }
  m.any = m.bid || m.lock_price || m.spot_fallback;
  if (desc->begin_time && desc->begin_time != NO_VAL) m.begin = desc->begin_time;
  m.gpu_type = requested_gpu_type(
      {desc->tres_per_node, desc->tres_per_job, desc->tres_per_socket, desc->tres_per_task});
  return m;
}

namespace {
// A new job's AdminComment with `mark` in place of its tag's old one.
void put_mark(job_desc_msg_t* desc, std::string_view tag, const std::string& mark) {
  std::string comment = with_tagged_mark(desc->admin_comment ? desc->admin_comment : "", tag, mark);
  xfree(desc->admin_comment);
  desc->admin_comment = xstrdup(comment.c_str());
}
}  // namespace

void mark_for_market(const std::string& mark, bool hold, job_desc_msg_t* desc) {
  if (hold) desc->priority = 0;
  put_mark(desc, kMarketTag, mark);
}

void mark_for_fallback(const std::string& mark, job_desc_msg_t* desc) {
  desc->requeue = 1;  // a preempted run comes back: requeued, not cancelled
  put_mark(desc, kFallbackTag, mark);
}

const Tier* job_tier(const PlancConfig& cfg, const job_record_t* job) {
  if (!job || !job->qos_ptr || !job->qos_ptr->name) return nullptr;
  return cfg.tiers.find_by_qos(job->qos_ptr->name);
}

void apply_decision(const SubmitDecision& d, job_desc_msg_t* desc) {
  if (d.qos_changed) {
    xfree(desc->qos);
    desc->qos = xstrdup(d.qos.c_str());
  }
  if (d.set_requeue) desc->requeue = 1;
  if (!d.set_partition.empty()) {
    xfree(desc->partition);
    desc->partition = xstrdup(d.set_partition.c_str());
  }
}

}  // namespace planc::slurm

namespace planc::slurm {
namespace {

PendingReason reason_of(const job_record_t* job) {
  switch (job->state_reason) {
    case WAIT_RESOURCES:
      return PendingReason::kResources;
    case WAIT_PRIORITY:
      return PendingReason::kPriority;
    case WAIT_NO_REASON:
      return PendingReason::kNone;
    case WAIT_HELD:
    case WAIT_HELD_USER:
      return PendingReason::kHeld;
    case WAIT_DEPENDENCY:
    case WAIT_DEP_INVALID:
      return PendingReason::kDependency;
    case WAIT_TIME:
      return PendingReason::kBeginTime;
    default:
      break;
  }
  if (!job->priority) return PendingReason::kHeld;
  // Association and QoS limits: Slurm names them Assoc*/QOS* (AssocGrpGRES,
  // QOSMaxJobsPerUserLimit, ...).
  const char* name = job_reason_string(static_cast<job_state_reason>(job->state_reason));
  if (name && (!std::strncmp(name, "Assoc", 5) || !std::strncmp(name, "QOS", 3)))
    return PendingReason::kAccountLimit;
  return PendingReason::kOther;
}

// Since when the job has been eligible: Slurm's accrue time (set once it is
// not held, its dependencies are met and its begin time has come; reset by
// a hold and by requeue); without it, submit or begin time.
time_t eligible_since(const job_record_t* job) {
  const job_details* d = job->details;
  if (!d) return 0;
  if (d->accrue_time) return d->accrue_time;
  return std::max(d->submit_time, d->begin_time);
}

PendingJob pending_facts(const job_record_t* job, TierId tier) {
  return PendingJob{job->job_id, tier, reason_of(job), eligible_since(job)};
}

MarkedJob marked_facts(const QosTierCache& tiers, const job_record_t* job, TierId tier) {
  auto at = free_attempt_upgraded_at(job->admin_comment);
  MarkedJob m{job->job_id, tier, job->details ? job->details->submit_time : 0, at ? *at : 0};
  m.to = tier;
  m.from = tier;
  if (auto ft = free_attempt_tiers(job->admin_comment)) {
    m.from = ft->first;
    m.to = ft->second;
  } else {
    // An unreadable mark: back to a tier that starves into this one.
    for (const Tier& t : tiers.table().all())
      if (t.starves_into == tier) m.from = t.id;
  }
  return m;
}

bool marked(const job_record_t* job) {
  return job->admin_comment && has_free_attempt_mark(job->admin_comment);
}

// The tier a running job counts in for the spot cap: a free attempt in the
// tier it came from.
TierId counted_tier(const job_record_t* job, TierId tier) {
  if (!marked(job)) return tier;
  auto ft = free_attempt_tiers(job->admin_comment);
  return ft ? ft->first : tier;
}

// Whether the 5 s sample keeps watching the job (common/job_watch.h).
bool watched(const job_record_t* job, const Tier* t) {
  return t && (IS_JOB_RUNNING(job) || (IS_JOB_PENDING(job) && !t->preemptible));
}

}  // namespace

size_t collect_pending(const QosTierCache& tiers, std::vector<PendingJob>* starvable,
                       std::vector<MarkedJob>* marked_jobs, std::vector<uint32_t>* watch) {
  size_t seen = 0;
  ListIterator it = list_iterator_create(job_list);
  while (auto* job = static_cast<job_record_t*>(list_next(it))) {
    const bool pending = IS_JOB_PENDING(job);
    if (!pending && !IS_JOB_RUNNING(job)) continue;
    const Tier* t = job_tier(tiers, job);
    if (watched(job, t)) watch->push_back(job->job_id);
    if (!pending) continue;
    ++seen;
    if (!t) continue;
    if (t->starves_into) starvable->push_back(pending_facts(job, t->id));
    if (marked(job)) marked_jobs->push_back(marked_facts(tiers, job, t->id));
  }
  list_iterator_destroy(it);
  return seen;
}

std::optional<PendingJob> pending_job(const QosTierCache& tiers, uint32_t job_id) {
  const job_record_t* job = find_job_record(job_id);
  if (!job || !IS_JOB_PENDING(job)) return std::nullopt;
  const Tier* t = job_tier(tiers, job);
  if (!t) return std::nullopt;
  return pending_facts(job, t->id);
}

std::optional<MarkedJob> marked_job(const QosTierCache& tiers, uint32_t job_id) {
  const job_record_t* job = find_job_record(job_id);
  if (!job || !IS_JOB_PENDING(job) || !marked(job)) return std::nullopt;
  const Tier* t = job_tier(tiers, job);
  return marked_facts(tiers, job, t ? t->id : TierId::kP0);
}

namespace {

// Why a pending guaranteed job is held back by its own limits, or nullptr.
const char* held_back_reason(const job_record_t* job) {
  switch (reason_of(job)) {
    case PendingReason::kHeld:
      return "held";
    case PendingReason::kDependency:
      return "dependency";
    case PendingReason::kBeginTime:
      return "begin_time";
    case PendingReason::kAccountLimit:
      return "limit";
    default:
      return nullptr;
  }
}

}  // namespace

namespace {

// The one GPU type every GPU of the node is of (gres.conf Type=,
// lower-case), or "" when its GPUs have no type or several.  REQUIRES the
// node read lock.
std::string node_gpu_type(const node_record_t* node) {
  if (!node || !node->gres_list) return "";
  std::string type;
  ListIterator it = list_iterator_create(node->gres_list);
  while (auto* g = static_cast<gres_state_t*>(list_next(it))) {
    if (!g->gres_name || std::strcmp(g->gres_name, "gpu") != 0) continue;
    const auto* d = static_cast<const gres_node_state_t*>(g->gres_data);
    if (d && d->type_cnt == 1 && d->type_name && d->type_name[0] && d->type_cnt_avail &&
        d->type_cnt_avail[0] == d->gres_cnt_avail)
      type = ascii_lower(d->type_name[0]);
    break;
  }
  list_iterator_destroy(it);
  return type;
}

// The GPUs a running job holds on nodes of one type, per type.  REQUIRES
// the job and node read locks.
void add_typed_gpus(const job_record_t* job, const std::vector<std::string>& node_types,
                    std::map<std::string, uint64_t>* held) {
  if (!job->gres_list_alloc || !job->node_bitmap) return;
  ListIterator it = list_iterator_create(job->gres_list_alloc);
  while (auto* g = static_cast<gres_state_t*>(list_next(it))) {
    if (!g->gres_name || std::strcmp(g->gres_name, "gpu") != 0) continue;
    const auto* d = static_cast<const gres_job_state_t*>(g->gres_data);
    if (!d || !d->gres_cnt_node_alloc) continue;
    uint32_t j = 0;
    for (int n = 0; n < node_record_count && j < d->node_cnt; n++) {
      if (!bit_test(job->node_bitmap, n)) continue;
      const uint64_t c = d->gres_cnt_node_alloc[j++];
      if (c && c != NO_VAL64 && n < static_cast<int>(node_types.size()) && !node_types[n].empty())
        (*held)[node_types[n]] += c;
    }
  }
  list_iterator_destroy(it);
}

// One job's part of the sample.
void sample_job(const QosTierCache& tiers, int gpu_pos, const std::vector<std::string>& node_types,
                const job_record_t* job, JobSample* out) {
  out->visited++;
  const bool run = IS_JOB_RUNNING(job);
  if (!run && !IS_JOB_PENDING(job)) return;
  const Tier* t = job_tier(tiers, job);
  if (!t) return;
  if (watched(job, t)) out->watch.push_back(job->job_id);
  const uint32_t requested = requested_gpus(job, gpu_pos);
  auto replica = infused_mark_of(job);
  if (replica)
    out->infusion.replicas.push_back({job->job_id, std::move(replica->pool), run, requested});
  if (run && job->preempt_time) out->infusion.preempting_gpus += requested;
  if (!t->preemptible) {
    if (run) {
      out->guaranteed_running.push_back({job->job_id, t->id, job->start_time,
                                         job->details ? job->details->begin_time : 0,
                                         job->details ? job->details->submit_time : 0});
    } else {
      out->guaranteed_pending.push_back(job->job_id);
      const char* reason = held_back_reason(job);
      if (reason) out->guaranteed_held.push_back({job->job_id, reason});
      if (!replica && (!reason || std::strcmp(reason, "limit") == 0))
        out->infusion.guaranteed_waiting_gpus += requested;
    }
  }
  if (!run) return;
  PoolUsage& u = out->pool;
  const uint32_t gpus =
      gpu_pos >= 0 && job->tres_alloc_cnt ? static_cast<uint32_t>(job->tres_alloc_cnt[gpu_pos]) : 0;
  const int k = tier_index(t->id);
  u.running_jobs[k]++;
  u.allocated_gpus[k] += gpus;
  if (gpus && !u.typed_gpus.empty() && t->id != TierId::kP3)
    add_typed_gpus(job, node_types, &u.typed_held);
  if (t->preemptible)
    out->spot_running.push_back(
        {job->job_id, str(job->account), counted_tier(job, t->id), gpus, job->start_time});
}

void sample_job_id(const QosTierCache& tiers, int gpu_pos,
                   const std::vector<std::string>& node_types, uint32_t id, JobSample* out) {
  if (const job_record_t* job = find_job_record(id))
    sample_job(tiers, gpu_pos, node_types, job, out);
}

}  // namespace

JobIdSpace job_id_space() {
  return {get_next_job_id(true), slurm_conf.first_job_id, slurm_conf.max_job_id};
}

void sample_jobs(const QosTierCache& tiers, int gpu_pos, const std::vector<uint32_t>& tracked,
                 const JobWatch::Plan& plan, const std::vector<uint32_t>& replica_ids,
                 JobSample* out) {
  PoolUsage& u = out->pool;
  std::vector<std::string> node_types;
  if (gpu_pos >= 0) {
    node_types.resize(static_cast<size_t>(std::max(node_record_count, 0)));
    for (int i = 0; i < node_record_count; i++) {
      const node_record_t* node = node_record_table_ptr[i];
      if (!node || !node->tres_cnt) continue;
      u.pool_gpus += node->tres_cnt[gpu_pos];
      node_types[i] = node_gpu_type(node);
      if (!node_types[i].empty()) u.typed_gpus[node_types[i]] += node->tres_cnt[gpu_pos];
    }
  }
  out->walked = plan.walk;
  if (plan.walk) {
    ListIterator it = list_iterator_create(job_list);
    while (auto* job = static_cast<job_record_t*>(list_next(it)))
      sample_job(tiers, gpu_pos, node_types, job, out);
    list_iterator_destroy(it);
  } else {
    for (uint32_t id : plan.ids) sample_job_id(tiers, gpu_pos, node_types, id, out);
    for (const IdRange& r : plan.new_ids)
      for (uint64_t id = r.first; id <= r.last; id++)
        if (!std::binary_search(plan.ids.begin(), plan.ids.end(), static_cast<uint32_t>(id)))
          sample_job_id(tiers, gpu_pos, node_types, static_cast<uint32_t>(id), out);
  }
  // Pending replicas of a spot tier are not watched: looked up by id.
  if (!replica_ids.empty()) {
    std::vector<uint32_t> seen;
    for (const ReplicaJob& r : out->infusion.replicas) seen.push_back(r.job_id);
    std::sort(seen.begin(), seen.end());
    for (uint32_t id : replica_ids) {
      if (std::binary_search(seen.begin(), seen.end(), id)) continue;
      const job_record_t* job = find_job_record(id);
      if (!job || !IS_JOB_PENDING(job)) continue;
      if (auto mark = infused_mark_of(job))
        out->infusion.replicas.push_back(
            {id, std::move(mark->pool), false, requested_gpus(job, gpu_pos)});
    }
  }
  for (uint32_t id : tracked) {
    const job_record_t* job = find_job_record(id);
    if (job && IS_JOB_RUNNING(job)) continue;
    out->spot_ended[id] = job && IS_JOB_FINISHED(job) ? job->end_time : 0;
  }
}

std::map<uint32_t, TierId> tiers_of(const QosTierCache& tiers, const std::vector<uint32_t>& ids) {
  std::map<uint32_t, TierId> out;
  for (uint32_t id : ids) {
    const job_record_t* job = find_job_record(id);
    if (const Tier* t = job_tier(tiers, job)) out[id] = counted_tier(job, t->id);
  }
  return out;
}

int gpu_tres_position() {
  slurmdb_tres_rec_t rec;
  std::memset(&rec, 0, sizeof(rec));
  rec.type = const_cast<char*>("gres");
  rec.name = const_cast<char*>("gpu");
  int pos = assoc_mgr_find_tres_pos(&rec, false);
  return pos < 0 || static_cast<uint32_t>(pos) >= g_tres_count ? -1 : pos;
}

std::string admin_comment(uint32_t job_id) {
  const job_record_t* job = find_job_record(job_id);
  return job ? str(job->admin_comment) : std::string();
}

namespace {
// One update as SlurmUser through slurmctld's own path; NO_VAL priority:
// left as it is.
int update_as_slurm_user(uint32_t job_id, const char* qos, const char* comment, uint32_t priority) {
  job_desc_msg_t desc;
  slurm_init_job_desc_msg(&desc);
  desc.job_id = job_id;
  desc.qos = qos ? xstrdup(qos) : nullptr;
  desc.admin_comment = comment ? xstrdup(comment) : nullptr;
  if (priority != NO_VAL) desc.priority = priority;
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

bool fallback_pending(const job_record_t* job) {
  return job->admin_comment && planc::fallback_pending(job->admin_comment);
}

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
  update_job_as_slurm_user(job_id, nullptr, refused.c_str());
  return r;
}

bool market_matched(const job_record_t* job) {
  if (!job->admin_comment) return false;
  auto m = read_market_mark(job->admin_comment);
  return m && m->matched && !m->locked;
}

RebidResult hold_for_rebid(const PlancConfig& cfg, uint32_t job_id, uint32_t run, time_t now) {
  using K = RebidResult::Kind;
  RebidResult r;
  job_record_t* job = find_job_record(job_id);
  if (auto k = unless_pending<K>(requeue_state(job, run))) {
    r.kind = *k;
    return r;
  }
  const std::string comment = str(job->admin_comment);
  auto mark = read_market_mark(comment);
  if (!mark || !mark->matched || mark->locked) return r;
  const std::string waiting = with_market_mark(
      comment, market_mark_waiting(mark->bid, cfg.prices.currency,
                                   next_round_after(now, cfg.market.interval_seconds)));
  int rc = hold_job_as_slurm_user(job_id, waiting.c_str());
  r.kind = rc == SLURM_SUCCESS ? K::kHeld : K::kFailed;
  if (rc != SLURM_SUCCESS) r.why = slurm_strerror(rc);
  return r;
}

int release_job_as_slurm_user(uint32_t job_id, const char* comment) {
  return update_as_slurm_user(job_id, nullptr, comment, INFINITE);
}

int hold_job_as_slurm_user(uint32_t job_id, const char* comment) {
  return update_as_slurm_user(job_id, nullptr, comment, 0);
}

std::vector<MarketJob> market_jobs(const QosTierCache& tiers, int gpu_pos) {
  std::vector<MarketJob> out;
  ListIterator it = list_iterator_create(job_list);
  while (auto* job = static_cast<job_record_t*>(list_next(it))) {
    if (!IS_JOB_PENDING(job) || !job->admin_comment) continue;
    const Tier* t = job_tier(tiers, job);
    if (!t || t->id != TierId::kP2) continue;
    auto mark = read_market_mark(job->admin_comment);
    if (!mark) continue;
    // A locked booking bids in no round; once its --begin has come its GPUs
    // are set aside from the capacity, as a winner's are.
    if (mark->locked && job->details && job->details->begin_time > time(nullptr)) continue;
    const bool held = job->priority == 0;
    if (held && mark->matched) continue;  // held by someone after it won
    MarketJob m;
    m.job_id = job->job_id;
    m.gpus = requested_gpus(job, gpu_pos);
    m.submitted = job->details ? job->details->submit_time : 0;
    m.admin_comment = job->admin_comment;
    m.bid = mark->bid;
    m.gpu_type = requested_gpu_type(
        {job->tres_per_node, job->tres_per_job, job->tres_per_socket, job->tres_per_task});
    m.bidding = !mark->matched && !mark->locked;
    m.admin_held = held && job->state_reason == WAIT_HELD;
    m.uid = job->user_id;
    if (job->user_name) m.user = job->user_name;
    if (job->account) m.account = job->account;
    out.push_back(std::move(m));
  }
  list_iterator_destroy(it);
  return out;
}

std::optional<InfusedMark> infused_mark_of(const job_record_t* job) {
  if (!job || !job->admin_comment || job->admin_comment[0] != '[') return std::nullopt;
  return read_infused_mark(job->admin_comment);
}

uint32_t submit_replica(const PoolConfig& pool, const std::string& qos,
                        const std::string& admin_comment, uint32_t drain_seconds,
                        std::string* why) {
  struct passwd pw, *res = nullptr;
  char buf[4096];
  if (getpwnam_r(pool.user.c_str(), &pw, buf, sizeof buf, &res) != 0 || !res) {
    *why = "user " + pool.user + " (Pool=" + pool.name +
           " User=) is not known on the slurmctld host; create it there or fix planc.conf";
    return 0;
  }
  std::string script;
  if (posix_file_system().read_file(pool.script, &script) != 0) {
    *why = system_error("cannot read the pool's Script", pool.script, errno);
    return 0;
  }
  if (script.compare(0, 2, "#!") != 0) {
    *why = "Script=" + pool.script + " does not start with #! (a batch script needs one)";
    return 0;
  }
  std::string name = "planc-pool-" + pool.name;
  std::string account = pool.account, qos_name = qos, comment = admin_comment;
  std::string dir = pw.pw_dir && pw.pw_dir[0] ? pw.pw_dir : "/";
  std::string out = !pool.output.empty() ? pool.output
                                         : dir + (dir.back() == '/' ? "" : "/") + "planc-pool-" +
                                               pool.name + "-%j.out";
  std::string gres = "gres:gpu:" + std::to_string(pool.gpus_per_replica);
  std::string argv0 = pool.script;
  std::vector<std::string> env = {
      "PLANC_POOL=" + pool.name,
      "PLANC_TIER=P" + std::to_string(tier_index(pool.tier)),
      "PLANC_DRAIN_SECONDS=" + std::to_string(drain_seconds),
      "PATH=/usr/local/bin:/usr/bin:/bin",
      "HOME=" + dir,
      "USER=" + pool.user,
  };
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  char* argv[] = {argv0.data(), nullptr};
  job_desc_msg_t d;
  slurm_init_job_desc_msg(&d);
  d.name = name.data();
  d.account = account.data();
  d.qos = qos_name.data();
  d.script = script.data();
  d.user_id = pw.pw_uid;
  d.group_id = pw.pw_gid;
  d.work_dir = dir.data();
  d.std_out = out.data();
  d.tres_per_node = gres.data();
  d.admin_comment = comment.data();
  d.min_nodes = 1;
  d.max_nodes = 1;
  d.requeue = 0;
  d.environment = envp.data();
  d.env_size = static_cast<uint32_t>(envp.size());
  d.argc = 1;
  d.argv = argv;
  submit_response_msg_t* resp = nullptr;
  if (slurm_submit_batch_job(&d, &resp) != SLURM_SUCCESS || !resp) {
    *why = std::string("slurmctld refused the submission: ") + slurm_strerror(slurm_get_errno());
    if (resp) slurm_free_submit_response_response_msg(resp);
    return 0;
  }
  const uint32_t id = resp->job_id;
  slurm_free_submit_response_response_msg(resp);
  return id;
}

int signal_job_rpc(uint32_t job_id, uint16_t signal) {
  const uint16_t flags = signal == SIGKILL ? 0 : KILL_FULL_JOB;
  return slurm_kill_job(job_id, signal, flags) == SLURM_SUCCESS ? SLURM_SUCCESS : slurm_get_errno();
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

bool requeues(const job_record_t* job) { return job->details && job->details->requeue; }

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

std::map<uint32_t, JobView> view_jobs(const std::vector<uint32_t>& ids) {
  std::map<uint32_t, JobView> out;
  for (uint32_t id : ids) {
    const job_record_t* job = find_job_record(id);
    if (!job) continue;
    JobView v;
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
    v.waits_on_preemption = IS_JOB_PENDING(job) && job->details && job->details->preempt_start_time;
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
  if (!job || !IS_JOB_RUNNING(job) || !job->preempt_time || now < job->end_time) return false;
  job_record_t* p = preemptor ? find_job_record(preemptor) : nullptr;
  set_owner_note(job, note);
  if (job->batch_flag) job_signal(job, SIGKILL, kWholeJob, 0, false);
  slurm_job_preempt(job, p, slurm_job_preempt_mode(job), false);
  if (p && IS_JOB_PENDING(p) && p->details) p->details->preempt_start_time = now;
  return true;
}

bool call_off(uint32_t victim, const std::string& note) {
  job_record_t* job = find_job_record(victim);
  if (!job || !IS_JOB_RUNNING(job) || !job->preempt_time) return false;
  job->preempt_time = 0;
  job_end_time_reset(job);  // from its start and time limit, as before the grace
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

bool release_preemptor(uint32_t preemptor) {
  job_record_t* p = find_job_record(preemptor);
  if (!p || !IS_JOB_PENDING(p) || !p->details || !p->details->preempt_start_time) return false;
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
