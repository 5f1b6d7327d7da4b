// slurmctld/planc's part of the adapter: the starvation scan's and the
// 5 s sample's walks of slurmctld's jobs, the P2 market's jobs, capacity
// infusion's replicas (submitted and signalled through Slurm's RPCs).
// Uses slurmctld's symbols.
#include "plugins/slurm_adapter_ctld.h"
#include "plugins/slurm_compat.h"

#include <pwd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>

#include "common/file_system.h"
#include "common/infusion.h"
#include "common/job_marks.h"
#include "common/market.h"
#include "common/market_life.h"
#include "common/placement.h"
#include "plugins/slurm_adapter_internal.h"
#include "plugins/slurm_adapter_market.h"

namespace planc::slurm {
namespace {

using internal::counted_tier;
using internal::marked;
using internal::requested_gpu_type;
using internal::str;

// The GPUs a job asks for (tres_req_cnt at `gpu_pos`; < 0: unknown, 0).
uint32_t requested_gpus(const job_record_t* job, int gpu_pos) {
  return gpu_pos >= 0 && job->tres_req_cnt ? static_cast<uint32_t>(job->tres_req_cnt[gpu_pos]) : 0;
}

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

// Whether the 5 s sample keeps watching the job (common/job_watch.h).
bool watched(const job_record_t* job, const Tier* t) {
  return t && (IS_JOB_RUNNING(job) || (IS_JOB_PENDING(job) && !t->preemptible));
}

}  // namespace

namespace {

// One job's part of the facts; returns whether it was pending.
bool add_starvation_facts(const QosTierCache& tiers, int gpu_pos, const job_record_t* job,
                          StarvationFacts* f, std::vector<uint32_t>* watch) {
  const bool pending = IS_JOB_PENDING(job);
  if (!pending && !IS_JOB_RUNNING(job)) return false;
  const Tier* t = job_tier(tiers, job);
  if (watch && watched(job, t)) watch->push_back(job->job_id);
  if (marked(job)) {
    f->free_attempt_gpus += requested_gpus(job, gpu_pos);
    f->marked_ids.push_back(job->job_id);
    if (pending) f->marked.push_back(marked_facts(tiers, job, t ? t->id : TierId::kP0));
  }
  if (t && t->starves_into) {
    if (pending) {
      // A replica waits for idle GPUs by design: it never starves.
      if (infused_mark_of(job)) return pending;
      f->starvable.push_back(pending_facts(job, t->id));
      f->starvable.back().gpus = requested_gpus(job, gpu_pos);
    } else {
      f->running.emplace_back(job->job_id, t->id);
    }
  }
  return pending;
}

}  // namespace

size_t collect_pending(const QosTierCache& tiers, int gpu_pos, StarvationFacts* facts,
                       std::vector<uint32_t>* watch) {
  size_t seen = 0;
  ListIterator it = list_iterator_create(job_list);
  while (auto* job = static_cast<job_record_t*>(list_next(it)))
    if (add_starvation_facts(tiers, gpu_pos, job, facts, watch)) ++seen;
  list_iterator_destroy(it);
  return seen;
}

size_t look_up_starvation(const QosTierCache& tiers, int gpu_pos, const std::vector<uint32_t>& ids,
                          const std::vector<IdRange>& ranges, const std::set<uint32_t>& marked_ids,
                          StarvationFacts* facts) {
  size_t looked = 0;
  auto one = [&](uint32_t id, bool only_unmarked) {
    ++looked;
    const job_record_t* job = find_job_record(id);
    if (!job || (only_unmarked && marked_ids.count(id))) return;
    add_starvation_facts(tiers, gpu_pos, job, facts, nullptr);
  };
  // A marked job is looked at once, through marked_ids.
  for (uint32_t id : marked_ids) one(id, false);
  for (uint32_t id : ids) one(id, true);
  for (const IdRange& r : ranges)
    for (uint64_t id = r.first; id <= r.last; ++id) one(static_cast<uint32_t>(id), true);
  return looked;
}

std::optional<PendingJob> pending_job(const QosTierCache& tiers, uint32_t job_id) {
  const job_record_t* job = find_job_record(job_id);
  if (!job || !IS_JOB_PENDING(job)) return std::nullopt;
  const Tier* t = job_tier(tiers, job);
  if (!t) return std::nullopt;
  return pending_facts(job, t->id);
}

uint32_t one_job_of(uint32_t job_id) {
  job_record_t* job = find_job_record(job_id);
  if (!job || !IS_JOB_PENDING(job) || !job->array_recs || !job->array_recs->task_id_bitmap ||
      bit_set_count(job->array_recs->task_id_bitmap) < 2)
    return job_id;
  const int64_t task = bit_ffs(job->array_recs->task_id_bitmap);
  if (task < 0) return job_id;
  const uint32_t array_id = job->array_job_id;
  // update_job_str()'s split: the record becomes the task (with a new
  // job id), a new record takes over the array's other tasks and its id.
  job->array_task_id = static_cast<uint32_t>(task);
  if (!job_array_split(job)) return 0;
  bb_g_job_validate2(job, nullptr);
  const job_record_t* one = find_job_array_rec(array_id, static_cast<uint32_t>(task));
  return one ? one->job_id : 0;
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
  if (!node) return "";
  std::string type;
  bool first = true;  // the node's first GPU entry decides
  internal::for_each_gpu_gres<gres_node_state_t>(node->gres_list, [&](const gres_node_state_t& d) {
    if (!first) return;
    first = false;
    if (d.type_cnt == 1 && d.type_name && d.type_name[0] && d.type_cnt_avail &&
        d.type_cnt_avail[0] == d.gres_cnt_avail)
      type = ascii_lower(d.type_name[0]);
  });
  return type;
}

// The GPUs a running job holds on nodes of one type, per type.  REQUIRES
// the job and node read locks.
void add_typed_gpus(const job_record_t* job, const std::vector<std::string>& node_types,
                    std::map<std::string, uint64_t>* held) {
  for_each_node_gpus(job, "", [&](uint32_t n, uint64_t c) {
    if (c && n < node_types.size() && !node_types[n].empty()) (*held)[node_types[n]] += c;
  });
}

// Whether the job asks for a node (-w) that cannot take it now: down,
// drained, failed or not responding.  REQUIRES the node read lock.
bool pinned_to_unavailable_node(const job_record_t* job) {
  if (!job->details || !job->details->req_node_bitmap) return false;
  for (int i = 0; i < node_record_count; i++) {
    if (!bit_test(job->details->req_node_bitmap, i)) continue;
    const node_record_t* n = node_record_table_ptr[i];
    if (!n || IS_NODE_DOWN(n) || IS_NODE_DRAIN(n) || IS_NODE_FAIL(n) || IS_NODE_NO_RESPOND(n))
      return true;
  }
  return false;
}

// Why a pending guaranteed job waits (common/infusion.h).  REQUIRES the job
// and node read locks.
GuaranteedWait guaranteed_wait(const job_record_t* job) {
  if (pinned_to_unavailable_node(job) || job->state_reason == WAIT_NODE_NOT_AVAIL)
    return GuaranteedWait::kUnavailableNode;
  // The 80% cap: the guaranteed partition QoS's GrpTRES on GPUs.
  if (job->priority && job->state_reason == WAIT_QOS_GRP_GRES) return GuaranteedWait::kCapLimit;
  switch (reason_of(job)) {
    case PendingReason::kNone:
      return GuaranteedWait::kNotYet;
    case PendingReason::kResources:
      return GuaranteedWait::kResources;
    case PendingReason::kPriority:
      return GuaranteedWait::kPriority;
    case PendingReason::kHeld:
      return GuaranteedWait::kHeld;
    case PendingReason::kDependency:
      return GuaranteedWait::kDependency;
    case PendingReason::kBeginTime:
      return GuaranteedWait::kBeginTime;
    case PendingReason::kAccountLimit:
      return GuaranteedWait::kOtherLimit;
    default:
      return GuaranteedWait::kOther;
  }
}

// Whether the market should look at a pending job of its tier: it has no
// life, or not that of a bid it holds.
bool market_should_look(const job_record_t* job) {
  if (!job->admin_comment) return true;
  auto life = parse_life(job->admin_comment);
  return !life || life->state != MarketState::kWaiting || job->priority != 0;
}

// Sets the job's nodes in `nodes` (indexes into the node table).
void mark_nodes(const job_record_t* job, std::vector<bool>* nodes) {
  for_each_node(job, [nodes](uint32_t i) {
    if (i < nodes->size()) (*nodes)[i] = true;
  });
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
    out->infusion.replicas.push_back({job->job_id, std::move(replica->pool), replica->tier, run,
                                      run && job->preempt_time != 0, requested,
                                      replica->drain_grace_seconds});
  if (run && job->preempt_time) out->infusion.preempting_gpus += requested;
  if (!run && t->id == TierId::kP2 && market_should_look(job))
    out->market_ids.push_back(job->job_id);
  if (!t->preemptible) {
    if (run) {
      mark_nodes(job, &out->guaranteed_nodes);
      out->guaranteed_running.push_back({job->job_id, t->id, job->start_time,
                                         job->details ? job->details->begin_time : 0,
                                         job->details ? job->details->submit_time : 0});
    } else {
      out->guaranteed_pending.push_back(job->job_id);
      const char* reason = held_back_reason(job);
      if (reason) out->guaranteed_held.push_back({job->job_id, reason});
      if (!replica)
        out->infusion.guaranteed_waiting.push_back({job->job_id, requested, guaranteed_wait(job)});
    }
  }
  if (!run) return;
  PoolUsage& u = out->pool;
  const uint32_t gpus =
      gpu_pos >= 0 && job->tres_alloc_cnt ? static_cast<uint32_t>(job->tres_alloc_cnt[gpu_pos]) : 0;
  const int k = tier_index(t->id);
  u.running_jobs[k]++;
  u.allocated_gpus[k] += gpus;
  if (gpus && !u.typed_gpus.empty() && t->id != TierId::kP3) {
    add_typed_gpus(job, node_types, &u.typed_held);
    if (!t->preemptible) add_typed_gpus(job, node_types, &u.typed_guaranteed);
  }
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
  out->guaranteed_nodes.assign(static_cast<size_t>(std::max(node_record_count, 0)), false);
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
        out->infusion.replicas.push_back({id, std::move(mark->pool), mark->tier, false, false,
                                          requested_gpus(job, gpu_pos), mark->drain_grace_seconds});
    }
  }
  for (uint32_t id : tracked) {
    const job_record_t* job = find_job_record(id);
    if (job && IS_JOB_RUNNING(job)) continue;
    out->spot_ended[id] = job && IS_JOB_FINISHED(job) ? job->end_time : 0;
  }
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

MarketJobView market_view(const QosTierCache& tiers, int gpu_pos, const job_record_t* job) {
  MarketJobView v;
  v.job_id = job->job_id;
  v.facts = market_facts(job_tier(tiers, job), job, gpu_pos);
  v.life = market_life(job);
  v.submitted = job->details ? job->details->submit_time : 0;
  v.uid = job->user_id;
  if (job->user_name) v.user = job->user_name;
  if (job->account) v.account = job->account;
  return v;
}

}  // namespace

std::vector<MarketJobView> market_walk(const QosTierCache& tiers, int gpu_pos) {
  std::vector<MarketJobView> out;
  ListIterator it = list_iterator_create(job_list);
  while (auto* job = static_cast<job_record_t*>(list_next(it))) {
    // A finished job's life matters only to its bill, already written.
    if (!IS_JOB_PENDING(job) && !IS_JOB_RUNNING(job)) continue;
    const Tier* t = job_tier(tiers, job);
    if ((!t || t->id != TierId::kP2) &&
        !(job->admin_comment && std::strstr(job->admin_comment, kMarketTag.data())))
      continue;
    out.push_back(market_view(tiers, gpu_pos, job));
  }
  list_iterator_destroy(it);
  return out;
}

std::vector<MarketJobView> market_views(const QosTierCache& tiers, int gpu_pos,
                                        const std::vector<uint32_t>& ids) {
  std::vector<MarketJobView> out;
  for (uint32_t id : ids)
    if (const job_record_t* job = find_job_record(id))
      out.push_back(market_view(tiers, gpu_pos, job));
  return out;
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
  if (auto bad = read_trusted_script(pool.script, &script)) {
    *why = *bad;
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
  // The lowest priority: Slurm starts a replica only on GPUs no other
  // pending job can use now (backfill: where it delays none of them).
  // Only an operator may set it; slurmctld/planc submits as SlurmUser.
  // The Nice keeps it there when Slurm computes the priority again.
  d.priority = 1;
  d.nice = static_cast<uint32_t>(NICE_OFFSET + kReplicaNice);
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

// --- packing guaranteed work (common/placement.h) ------------------------------

namespace {

// What steering knows of each node it has set (by name: a reconfigure may
// renumber the node table).  Read under the node read lock, written under
// the write lock (the job-begin hook and steer_weights hold it).
// (std::less<>: looked up by the node record's char* name without making
// a std::string per node per sample.)
using SteeredNodes = std::map<std::string, SteeredNode, std::less<>>;
SteeredNodes& steered_nodes() {
  static auto* nodes = new SteeredNodes;  // never freed: worker_thread.h
  return *nodes;
}

uint32_t configured_weight(const node_record_t* node) {
  const auto& nodes = steered_nodes();
  auto it = nodes.find(std::string_view(node->name));
  return planc::configured_weight(node->weight, it != nodes.end() ? &it->second : nullptr);
}

// Node `i` as common/placement.h sees it, or nullopt for an empty slot of
// the node table.
std::optional<NodeWeight> node_weight(int i, bool holds) {
  const node_record_t* node = node_record_table_ptr[i];
  if (!node || !node->config_ptr) return std::nullopt;
  // The select plugin schedules by the config record's weight, which is
  // what update_node() changes.
  return NodeWeight{i, configured_weight(node), node->config_ptr->weight, holds};
}

std::vector<NodeWeight> node_weights(const std::vector<bool>& holds) {
  std::vector<NodeWeight> nodes;
  for (int i = 0; i < node_record_count; i++)
    if (auto n = node_weight(i, static_cast<size_t>(i) < holds.size() && holds[i]))
      nodes.push_back(*n);
  return nodes;
}

// Sets the scheduling weight of `nodes` (indexes) to `weight` through
// update_node(), as `scontrol update nodename=... weight=` does (it splits
// the nodes' config records and keeps config_list sorted by weight).
int set_weight(const std::vector<int>& nodes, uint32_t weight) {
  hostlist_t hl = hostlist_create(nullptr);
  for (int i : nodes) hostlist_push_host(hl, node_record_table_ptr[i]->name);
  char* names = hostlist_ranged_string_xmalloc(hl);
  hostlist_destroy(hl);
  update_node_msg_t msg;
  slurm_init_update_node_msg(&msg);
  msg.node_names = names;
  msg.weight = weight;
  const int rc = update_node(&msg, 0);
  xfree(names);
  return rc;
}

size_t apply(bool on, const std::vector<NodeWeight>& nodes, std::string* why) {
  size_t changed = 0;
  for (const auto& [weight, which] : weight_changes(on, nodes)) {
    const int rc = set_weight(which, weight);
    if (rc != SLURM_SUCCESS) {
      *why = "cannot set the weight of " + std::to_string(which.size()) + " node(s) to " +
             std::to_string(weight) + ": " + slurm_strerror(rc);
      continue;
    }
    changed += which.size();
    for (int i : which) {
      const node_record_t* node = node_record_table_ptr[i];
      const uint32_t configured = configured_weight(node);  // before the entry changes
      steered_nodes()[node->name] = {configured, weight};
    }
  }
  return changed;
}

}  // namespace

bool weights_to_steer(bool on, const std::vector<bool>& holds) {
  return !weight_changes(on, node_weights(holds)).empty();
}

size_t steer_weights(const QosTierCache& tiers, bool on, const std::vector<uint32_t>& job_ids,
                     std::string* why) {
  std::vector<bool> holds(static_cast<size_t>(std::max(node_record_count, 0)), false);
  for (uint32_t id : job_ids) {
    const job_record_t* job = find_job_record(id);
    if (!job || !IS_JOB_RUNNING(job)) continue;
    const Tier* t = job_tier(tiers, job);
    if (t && !t->preemptible) mark_nodes(job, &holds);
  }
  return apply(on, node_weights(holds), why);
}

size_t steer_weights_of(const job_record_t* job, std::string* why) {
  // Only the job's own nodes: this runs in the job-begin hook, under
  // slurmctld's write locks, at every guaranteed job's start.
  std::vector<NodeWeight> nodes;
  for_each_node(job, [&nodes](uint32_t i) {
    if (auto n = node_weight(static_cast<int>(i), true)) nodes.push_back(*n);
  });
  return apply(true, nodes, why);
}

}  // namespace planc::slurm
