#include "common/submit_policy.h"

#include "common/spot_cap.h"

namespace planc {
namespace {

bool contains(const std::vector<std::string>& names, const std::string& qos) {
  for (const std::string& n : names)
    if (iequals(n, qos)) return true;
  return false;
}

std::string unknown_tier_message(const PlancConfig& cfg, const std::string& typed) {
  return "unknown tier '" + typed + "' in --qos. Valid tiers: " + cfg.tiers.describe_names();
}

std::string not_entitled_message(const PlancConfig& cfg, const Tier& t, const SubmitRequest& req) {
  std::string who = req.account.empty() ? "your account" : "account " + req.account;
  std::string usable;
  for (const Tier& other : cfg.tiers.all()) {
    if (!contains(req.allowed_qos, other.qos)) continue;
    if (!usable.empty()) usable += ", ";
    usable += other.qos + " (" + other.label + ")";
  }
  std::string msg =
      "tier " + t.label + " (" + t.qos + ", " + t.product + ") is not available to " + who + ". ";
  if (usable.empty())
    msg += who + " may use no Plan C tier; ask your account coordinator for access.";
  else
    msg += who + " may use: " + usable +
           ". Submit with --qos=<one of those>, or ask your "
           "account coordinator for access.";
  return msg;
}

SubmitDecision judge(const PlancConfig& cfg, const SubmitRequest& req, const Tier& t) {
  SubmitDecision d;
  d.tier = &t;
  d.qos = t.qos;
  d.qos_changed = req.requested_qos != t.qos;
  if (req.assoc_known && !req.privileged && !contains(req.allowed_qos, t.qos)) {
    d.error = SubmitError::kNotEntitled;
    d.message = not_entitled_message(cfg, t, req);
  }
  return d;
}

bool lists(const std::string& list, const std::string& name) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    if (iequals(std::string_view(list).substr(start, comma - start), name)) return true;
    start = comma + 1;
  }
  return false;
}

// Guaranteed tiers run only in the cap's partition; others never do.
void route(const PlancConfig& cfg, const SubmitRequest& req, SubmitDecision* d) {
  const std::string& gp = cfg.guaranteed_partition;
  if (gp.empty() || !d->ok()) return;
  const Tier& t = *d->tier;
  if (!t.preemptible) {
    if (req.partition.empty()) {
      d->set_partition = gp;
    } else if (!iequals(req.partition, gp)) {
      d->error = SubmitError::kWrongPartition;
      d->message = t.label + " (" + t.qos + ") jobs run in partition '" + gp +
                   "', where the guaranteed tiers' " + std::to_string(cfg.guaranteed_cap_percent) +
                   "% GPU cap applies. Submit without -p/--partition, or with -p " + gp + ".";
    }
  } else if (!req.partition.empty() && lists(req.partition, gp)) {
    d->error = SubmitError::kWrongPartition;
    d->message = "partition '" + gp + "' is for the guaranteed tiers (P0, P1); " + t.label + " (" +
                 t.qos +
                 ") jobs may not use it. Submit without -p/--partition, or "
                 "name another partition.";
  }
}

}  // namespace

SubmitDecision decide_submit(const PlancConfig& cfg, const SubmitRequest& req) {
  const Tier* t = nullptr;
  if (!req.requested_qos.empty()) {
    t = cfg.tiers.find(req.requested_qos);
    if (!t) {
      SubmitDecision d;
      d.error = SubmitError::kUnknownTier;
      d.message = unknown_tier_message(cfg, req.requested_qos);
      return d;
    }
  } else {
    // A DefaultQOS that is not a tier (Slurm's "normal", say) does not count.
    if (!req.assoc_default_qos.empty()) t = cfg.tiers.find_by_qos(req.assoc_default_qos);
    if (!t) t = &cfg.tiers.tier(cfg.default_tier);
  }
  SubmitDecision d = judge(cfg, req, *t);
  if (d.ok() && t->preemptible && req.requeue == Requeue::kUnset) d.set_requeue = true;
  route(cfg, req, &d);
  return d;
}

namespace {

// Why a user's update may not lift a job's low priority, or nothing.
std::optional<std::string> low_priority_refusal(const SubmitRequest& req) {
  if (req.privileged || req.nice_floor <= 0) return std::nullopt;
  const bool lowers_nice = req.nice && *req.nice < req.nice_floor;
  if (!lowers_nice && !req.sets_priority) return std::nullopt;
  if (req.replica)
    return std::string(
        "this job is a capacity-infusion replica: it keeps the lowest priority (Nice " +
        std::to_string(req.nice_floor) +
        ") so that it takes only GPUs no other job queues for; its Nice and priority are "
        "slurmctld/planc's (hold and release it, cancel it, or ask an operator)");
  return std::string(
      "this job is on a free attempt after starving in its tier: it queues below "
      "the paying jobs of its new tier with Nice +" +
      std::to_string(req.nice_floor) + "; " +
      (lowers_nice ? "its Nice may be raised, not set below " + std::to_string(req.nice_floor)
                   : std::string("a priority set by hand would clear that Nice")) +
      " (hold and release it, cancel and resubmit, or ask an operator)");
}

}  // namespace

SubmitDecision decide_modify(const PlancConfig& cfg, const SubmitRequest& req) {
  SubmitDecision d;
  if (auto why = low_priority_refusal(req)) {
    d.error = SubmitError::kLowPriority;
    d.message = std::move(*why);
    return d;
  }
  if (req.on_free_attempt && req.resizes && !req.privileged) {
    d.error = SubmitError::kFreeAttempt;
    d.message =
        "this job is on a free attempt after starving in its tier: the free attempts' share "
        "took it at its size, and its size cannot change while the attempt lasts (cancel and "
        "resubmit, or ask an operator)";
    return d;
  }
  if (req.requested_qos.empty()) return d;  // QoS untouched: nothing to judge
  if (req.replica && !req.privileged) {
    d.error = SubmitError::kLowPriority;
    d.message =
        "this job is a capacity-infusion replica: its tier is its pool's (planc.conf Pool= "
        "Tier=), and slurmctld/planc grows and drains it by that tier (cancel it, or ask an "
        "operator)";
    return d;
  }
  const Tier* t = cfg.tiers.find(req.requested_qos);
  if (!t) {
    d.error = SubmitError::kUnknownTier;
    d.message = unknown_tier_message(cfg, req.requested_qos);
    return d;
  }
  if (req.on_free_attempt && !req.privileged) {
    d.error = SubmitError::kFreeAttempt;
    d.message =
        "this job is on a free attempt after starving in its tier; its tier cannot be "
        "changed while the attempt lasts (cancel and resubmit, or ask an operator)";
    return d;
  }
  d = judge(cfg, req, *t);
  const std::string& gp = cfg.guaranteed_partition;
  if (!req.partition.empty()) {
    route(cfg, req, &d);  // the update names a partition: judge it
  } else if (d.ok() && !gp.empty()) {
    bool in_gp = iequals(req.current_partition, gp);
    if (!t->preemptible && !in_gp) d.set_partition = gp;
    if (t->preemptible && in_gp) d.set_partition = req.default_partition;
  }
  return d;
}

Entitlement entitlement_of(const SubmitRequest& req) {
  Entitlement e;
  e.known = req.assoc_known;
  e.account = req.account;
  e.qos = req.allowed_qos;
  return e;
}

void apply_spot_cap(const PlancConfig& cfg, const Entitlement& ent, uint64_t used, time_t now,
                    SubmitDecision* d) {
  if (!d->ok() || !d->tier) return;
  if (auto msg = spot_cap_refusal(cfg, ent, d->tier->id, used, now)) {
    d->error = SubmitError::kSpotCap;
    d->message = *msg;
  }
}

}  // namespace planc
