#include "common/starvation.h"

#include <algorithm>

namespace planc {

bool reason_counts(PendingReason r) {
  return r == PendingReason::kResources || r == PendingReason::kPriority;
}

std::string_view reason_name(PendingReason r) {
  switch (r) {
    case PendingReason::kNone:
      return "None";
    case PendingReason::kResources:
      return "Resources";
    case PendingReason::kPriority:
      return "Priority";
    case PendingReason::kHeld:
      return "a hold";
    case PendingReason::kDependency:
      return "Dependency";
    case PendingReason::kBeginTime:
      return "BeginTime";
    case PendingReason::kAccountLimit:
      return "an account or QoS limit";
    case PendingReason::kOther:
      return "another reason";
  }
  return "?";
}

bool is_starving(const PlancConfig& cfg, const PendingJob& job, time_t now) {
  const Tier& t = cfg.tiers.tier(job.tier);
  const uint32_t after =
      t.starve_after_seconds ? t.starve_after_seconds : cfg.starvation_threshold_seconds;
  return t.starves_into && reason_counts(job.reason) && job.eligible_since > 0 &&
         now > job.eligible_since && static_cast<uint64_t>(now - job.eligible_since) > after;
}

std::vector<Upgrade> select_upgrades(const PlancConfig& cfg, const std::vector<PendingJob>& jobs,
                                     time_t now) {
  std::vector<Upgrade> out;
  for (const PendingJob& j : jobs)
    if (is_starving(cfg, j, now))
      out.push_back({j.job_id,
                     static_cast<uint32_t>(std::min<time_t>(now - j.eligible_since, 0xffffffff)),
                     j.reason, j.tier, *cfg.tiers.tier(j.tier).starves_into});
  auto longer = [](const Upgrade& a, const Upgrade& b) {
    return a.waited_seconds != b.waited_seconds ? a.waited_seconds > b.waited_seconds
                                                : a.job_id < b.job_id;
  };
  size_t n = std::min<size_t>(out.size(), cfg.starvation_max_per_interval);
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), out.end(), longer);
  out.resize(n);
  return out;
}

MarkAction decide_marked(const MarkedJob& job) {
  if (job.tier != job.to) return MarkAction::kDropMark;
  if (job.upgraded_at && job.submit_time > job.upgraded_at) return MarkAction::kBack;
  return MarkAction::kKeep;
}

}  // namespace planc
