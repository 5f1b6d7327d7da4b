#include "common/submit_policy.h"

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

std::string not_entitled_message(const PlancConfig& cfg, const Tier& t,
                                 const SubmitRequest& req) {
  std::string who = req.account.empty() ? "your account" : "account " + req.account;
  std::string usable;
  for (const Tier& other : cfg.tiers.all()) {
    if (!contains(req.allowed_qos, other.qos)) continue;
    if (!usable.empty()) usable += ", ";
    usable += other.qos + " (" + other.label + ")";
  }
  std::string msg = "tier " + t.label + " (" + t.qos + ", " + t.product + ") is not available to " +
                    who + ". ";
  if (usable.empty())
    msg += who + " may use no Plan C tier; ask your account coordinator for access.";
  else
    msg += who + " may use: " + usable + ". Submit with --qos=<one of those>, or ask your "
           "account coordinator for access.";
  return msg;
}

SubmitDecision judge(const PlancConfig& cfg, const SubmitRequest& req, const Tier& t) {
  SubmitDecision d;
  d.tier = &t;
  d.qos = t.qos;
  d.qos_changed = req.requested_qos != t.qos;
  if (req.assoc_known && !req.privileged &&
      !contains(req.allowed_qos, t.qos)) {
    d.error = SubmitError::kNotEntitled;
    d.message = not_entitled_message(cfg, t, req);
  }
  return d;
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
  return d;
}

SubmitDecision decide_modify(const PlancConfig& cfg, const SubmitRequest& req) {
  SubmitDecision d;
  if (req.requested_qos.empty()) return d;  // QoS untouched: nothing to judge
  const Tier* t = cfg.tiers.find(req.requested_qos);
  if (!t) {
    d.error = SubmitError::kUnknownTier;
    d.message = unknown_tier_message(cfg, req.requested_qos);
    return d;
  }
  return judge(cfg, req, *t);
}

}  // namespace planc
