// What job_submit/planc decides for a new job or a modification.
//
// Pure functions of the config and a SubmitRequest (what the user asked for
// plus what slurmdbd knows of the job's association).  The plugin shim fills
// the request from job_desc_msg_t / job_record_t and applies the decision.
// Thread safety: stateless; the config is read-only.
#ifndef PLANC_COMMON_SUBMIT_POLICY_H_
#define PLANC_COMMON_SUBMIT_POLICY_H_

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/preempt_policy.h"

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
  std::string partition;                 // -p as typed (may be a list); empty: none
  // For updates: the job's partition now, and slurmctld's default one.
  std::string current_partition;
  std::string default_partition;
  // Operators and admins (Slurm's own notion) may move jobs into any tier.
  bool privileged = false;
  // For updates: the job is on a free starvation attempt (its AdminComment
  // carries the free-attempt mark, common/job_marks.h).
  bool on_free_attempt = false;
  // For updates: the Nice the update sets (nullopt: untouched), and whether
  // it sets a priority other than a hold (0) or a release.
  std::optional<int64_t> nice;
  bool sets_priority = false;
  // For updates: the update changes what the job asks of GPUs or nodes.
  bool resizes = false;
  // For updates: the job is a capacity-infusion replica (its AdminComment
  // carries the infused mark, common/infusion.h).
  bool replica = false;
  // For updates: the Nice that keeps the low priority Plan C gave the job,
  // kept against its owner (0: none to keep): a free attempt's, from its
  // mark (it queues below the paying jobs of its new tier), a replica's
  // kReplicaNice (the lowest priority).
  int64_t nice_floor = 0;
};

enum class SubmitError {
  kNone,
  kUnknownTier,
  kNotEntitled,
  kWrongPartition,
  kFreeAttempt,  // a user may not change the tier of a free attempt
  kSpotCap,      // the account's daily spot cap is reached
  kMarketHeld,   // a bid in the P2 market released by hand
  kLowPriority,  // a user may not lift the low priority Plan C gave a job
};

struct SubmitDecision {
  SubmitError error = SubmitError::kNone;
  std::string message;  // for the user, when error != kNone
  const Tier* tier = nullptr;
  std::string qos;            // canonical QoS to set
  bool qos_changed = false;   // qos differs from what was typed (or none was)
  bool set_requeue = false;   // make the job requeueable (preemptible tier)
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

// scontrol update of an existing job.  A user (not an operator) may not
// lift the low priority Plan C gave a job (SubmitRequest::nice_floor):
// no Nice below nice_floor, and no priority set by hand (Slurm clears the
// Nice when a user lowers a job's priority, and the next priority
// calculation then gives the job its tier's full priority); a hold and a
// release keep it; nor move a replica to another tier, nor resize a free
// attempt (its size was judged against the share).  Otherwise only a
// change of QoS is judged:
// requested_qos empty means the update does not touch the QoS.  The tier
// of a job on a free starvation attempt is changed only by slurmctld/planc
// itself or an operator (else the attempt would stay free in another
// tier); slurmctld/planc updates as SlurmUser, so its moves (P3 to P2 and
// back) pass as an operator's.  A job moved
// into a guaranteed tier is moved into GuaranteedPartition too, and out of
// it (to the default partition) when moved to a preemptible tier.
SubmitDecision decide_modify(const PlancConfig& cfg, const SubmitRequest& req);

// The account and the tiers it may use, from a request.
Entitlement entitlement_of(const SubmitRequest& req);

// A decision for `tier` turned into a refusal when the account's daily spot
// cap is reached (`used`: card-seconds today, common/spot_cap.h).
void apply_spot_cap(const PlancConfig& cfg, const Entitlement& ent, uint64_t used, time_t now,
                    SubmitDecision* d);

}  // namespace planc

#endif  // PLANC_COMMON_SUBMIT_POLICY_H_
