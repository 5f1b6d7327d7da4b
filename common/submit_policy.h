// What job_submit/planc decides for a new job or a modification.
//
// Pure functions of the config and a SubmitRequest (what the user asked for
// plus what slurmdbd knows of the job's association).  The plugin shim fills
// the request from job_desc_msg_t / job_record_t and applies the decision.
// Thread safety: stateless; the config is read-only.
#ifndef PLANC_COMMON_SUBMIT_POLICY_H_
#define PLANC_COMMON_SUBMIT_POLICY_H_

#include <optional>
#include <string>
#include <vector>

#include "common/config.h"

namespace planc {

enum class Requeue { kUnset, kYes, kNo };

struct SubmitRequest {
  std::string requested_qos;  // what the user typed in --qos; empty: none
  std::string account;        // for messages; may be empty
  // The association slurmdbd holds for the job.  When assoc_known is false
  // (no association found, accounting not enforced) entitlement is left to
  // Slurm and only names are mapped.
  bool assoc_known = false;
  std::string assoc_default_qos;         // DefaultQOS name; empty: none
  std::vector<std::string> allowed_qos;  // the association's QoS names
  Requeue requeue = Requeue::kUnset;     // --requeue / --no-requeue
  std::string partition;          // -p as typed (may be a list); empty: none
  // For updates: the job's partition now, and slurmctld's default one.
  std::string current_partition;
  std::string default_partition;
  // Operators and admins (Slurm's own notion) may move jobs into any tier.
  bool privileged = false;
};

enum class SubmitError { kNone, kUnknownTier, kNotEntitled, kWrongPartition };

struct SubmitDecision {
  SubmitError error = SubmitError::kNone;
  std::string message;      // for the user, when error != kNone
  const Tier* tier = nullptr;
  std::string qos;          // canonical QoS to set
  bool qos_changed = false; // qos differs from what was typed (or none was)
  bool set_requeue = false; // make the job requeueable (preemptible tier)
  std::string set_partition;  // route the job here (the guaranteed cap)
  bool ok() const { return error == SubmitError::kNone; }
};

// A new job: map the typed tier name to its canonical QoS, or pick the
// association's default tier, or planc.conf's DefaultTier; check the
// account may use it; make preemptible-tier jobs requeueable unless the
// user said --no-requeue; route guaranteed-tier jobs into the
// GuaranteedPartition (where the 80% cap applies) and keep other tiers out
// of it.
SubmitDecision decide_submit(const PlancConfig& cfg, const SubmitRequest& req);

// scontrol update of an existing job.  Only a change of QoS is judged:
// requested_qos empty means the update does not touch the QoS.  A job moved
// into a guaranteed tier is moved into GuaranteedPartition too, and out of
// it (to the default partition) when moved to a preemptible tier.
SubmitDecision decide_modify(const PlancConfig& cfg, const SubmitRequest& req);

}  // namespace planc

#endif  // PLANC_COMMON_SUBMIT_POLICY_H_
