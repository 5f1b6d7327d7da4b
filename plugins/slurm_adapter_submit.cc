// job_submit/planc's part of the adapter: a submission or an update as a
// SubmitRequest (with the association from assoc_mgr's cache), the P2
// market's options, and the decision and marks written back into the job
// description.  Uses slurmctld's symbols (assoc_mgr, validate_operator).
#include "plugins/slurm_adapter_submit.h"
#include "plugins/slurm_compat.h"

#include <cstring>
#include <string_view>

#include "common/infusion.h"
#include "common/job_marks.h"
#include "common/market.h"
#include "plugins/slurm_adapter_internal.h"

namespace planc::slurm {
namespace {

using internal::requested_gpu_type;
using internal::str;

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

SubmitRequest submit_request(const PlancConfig& cfg, const job_desc_msg_t* desc) {
  SubmitRequest req;
  req.requested_qos = str(desc->qos);
  req.requeue = requeue_of(desc->requeue);
  req.partition = str(desc->partition);
  lookup_assoc(cfg, desc->user_id, desc->account, desc->partition, &req);
  return req;
}

namespace {
// Whether an update's text field sets something other than the job's.
bool differs(const char* update, const char* now) {
  return update && std::string_view(update) != std::string_view(now ? now : "");
}

// Whether an update changes what the job asks of GPUs or nodes.
bool resizes(const job_desc_msg_t* desc, const job_record_t* job) {
  return differs(desc->tres_per_node, job->tres_per_node) ||
         differs(desc->tres_per_job, job->tres_per_job) ||
         differs(desc->tres_per_socket, job->tres_per_socket) ||
         differs(desc->tres_per_task, job->tres_per_task) ||
         (job->details &&
          ((desc->min_nodes != NO_VAL && desc->min_nodes != job->details->min_nodes) ||
           (desc->num_tasks != NO_VAL && desc->num_tasks != job->details->num_tasks)));
}
}  // namespace

SubmitRequest modify_request(const PlancConfig& cfg, const job_desc_msg_t* desc,
                             const job_record_t* job, uint32_t submit_uid) {
  SubmitRequest req;
  req.requested_qos = str(desc->qos);
  req.privileged = validate_operator(submit_uid);
  req.on_free_attempt = internal::marked(job);
  if (desc->nice != NO_VAL)
    req.nice = static_cast<int64_t>(desc->nice) - static_cast<int64_t>(NICE_OFFSET);
  // 0 is a hold, INFINITE a release: both keep the Nice.
  req.sets_priority = desc->priority != NO_VAL && desc->priority != 0 && desc->priority != INFINITE;
  req.resizes = resizes(desc, job);
  req.replica = infused_mark_of(job).has_value();
  if (req.replica)
    req.nice_floor = kReplicaNice;
  else if (req.on_free_attempt)
    req.nice_floor = free_attempt_nice(str(job->admin_comment));
  if (req.requested_qos.empty()) return req;  // not a QoS change
  req.partition = str(desc->partition);
  req.current_partition = str(job->partition);
  req.default_partition = str(default_part_name);
  const char* account = desc->account ? desc->account : job->account;
  const char* partition = desc->partition ? desc->partition : job->partition;
  lookup_assoc(cfg, job->user_id, account, partition, &req);
  return req;
}

MarketUpdate market_update(const PlancConfig& cfg, const job_desc_msg_t* desc,
                           const job_record_t* job, uint32_t submit_uid) {
  using Who = MarketUpdate::Who;
  MarketUpdate u;
  if (submit_uid == slurm_conf.slurm_user_id)
    u.who = Who::kMarket;
  else if (validate_operator(submit_uid))
    u.who = Who::kOperator;
  else if (submit_uid == job->user_id)
    u.who = Who::kOwner;
  else
    u.who = Who::kCoordinator;
  const Tier* now = job_tier(cfg, job);
  const bool in_now = now && now->id == TierId::kP2;
  if (desc->qos) {
    const Tier* to = cfg.tiers.find_by_qos(desc->qos);
    const bool in_after = to && to->id == TierId::kP2;
    u.into_market = in_after && !in_now;
    u.out_of_market = in_now && !in_after;
  }
  u.shape_changed = resizes(desc, job) || differs(desc->account, job->account) ||
                    differs(desc->partition, job->partition);
  if (desc->begin_time && desc->begin_time != NO_VAL) u.begin = desc->begin_time;
  u.hold = desc->priority == 0;
  u.release = desc->priority == INFINITE;
  u.array = job->array_recs || job->array_task_id != NO_VAL || job->het_job_id;
  return u;
}

void apply_market_verdict(const MarketUpdateVerdict& v, job_desc_msg_t* desc) {
  if (v.cancel_release) desc->priority = NO_VAL;
  if (v.hold) desc->priority = 0;
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
  m.array = desc->array_inx || desc->het_job_offset != NO_VAL;
  m.held = desc->priority == 0;
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

void mark_for_market(const MarketLife& life, const std::string& currency, bool hold,
                     job_desc_msg_t* desc) {
  if (hold) desc->priority = 0;
  put_mark(desc, kMarketTag, serialize_life(life, currency));
}

bool is_replica_submission(const job_desc_msg_t* desc) {
  return desc->admin_comment && read_infused_mark(desc->admin_comment).has_value();
}

void mark_for_fallback(const std::string& mark, job_desc_msg_t* desc) {
  desc->requeue = 1;  // a preempted run comes back: requeued, not cancelled
  put_mark(desc, kFallbackTag, mark);
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
