#include "plugins/slurm_compat.h"
#include "plugins/slurm_adapter.h"

#include <cstring>

namespace planc::slurm {
namespace {

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
void lookup_assoc(const PlancConfig& cfg, uint32_t uid, const char* account,
                  const char* partition, SubmitRequest* req) {
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

SubmitRequest modify_request(const PlancConfig& cfg, const job_desc_msg_t* desc,
                             const job_record_t* job, uint32_t submit_uid) {
  SubmitRequest req;
  req.requested_qos = str(desc->qos);
  if (req.requested_qos.empty()) return req;  // not a QoS change
  req.privileged = validate_operator(submit_uid);
  req.partition = str(desc->partition);
  req.current_partition = str(job->partition);
  req.default_partition = str(default_part_name);
  const char* account = desc->account ? desc->account : job->account;
  const char* partition = desc->partition ? desc->partition : job->partition;
  lookup_assoc(cfg, job->user_id, account, partition, &req);
  return req;
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
