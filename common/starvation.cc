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

uint32_t starve_after_seconds(const PlancConfig& cfg, TierId tier) {
  const Tier& t = cfg.tiers.tier(tier);
  return t.starve_after_seconds ? t.starve_after_seconds : cfg.starvation_threshold_seconds;
}

bool is_starving(const PlancConfig& cfg, const PendingJob& job, time_t now) {
  const Tier& t = cfg.tiers.tier(job.tier);
  const uint32_t after = starve_after_seconds(cfg, job.tier);
  return t.starves_into && reason_counts(job.reason) && job.eligible_since > 0 &&
         now > job.eligible_since && static_cast<uint64_t>(now - job.eligible_since) > after;
}

uint64_t free_attempt_cap(const PlancConfig& cfg, uint64_t pool_gpus) {
  return pool_gpus * cfg.starvation_max_share_percent / 100;
}

std::vector<Upgrade> select_upgrades(const PlancConfig& cfg, const std::vector<PendingJob>& jobs,
                                     time_t now, const FreeAttemptShare& share) {
  std::vector<std::pair<Upgrade, uint32_t>> starving;  // with its GPUs
  for (const PendingJob& j : jobs)
    if (is_starving(cfg, j, now))
      starving.push_back(
          {{j.job_id, static_cast<uint32_t>(std::min<time_t>(now - j.eligible_since, 0xffffffff)),
            j.reason, j.tier, *cfg.tiers.tier(j.tier).starves_into},
           j.gpus});
  std::sort(starving.begin(), starving.end(), [](const auto& a, const auto& b) {
    return a.first.waited_seconds != b.first.waited_seconds
               ? a.first.waited_seconds > b.first.waited_seconds
               : a.first.job_id < b.first.job_id;
  });
  std::vector<Upgrade> out;
  uint64_t held = share.held_gpus;
  for (const auto& [u, gpus] : starving) {
    if (out.size() >= cfg.starvation_max_per_interval) break;
    if (gpus > share.cap_gpus) continue;      // never fits: waits in its tier
    if (held + gpus > share.cap_gpus) break;  // the longest waiting goes first
    held += gpus;
    out.push_back(u);
  }
  return out;
}

MarkAction decide_marked(const MarkedJob& job) {
  if (job.tier != job.to) return MarkAction::kDropMark;
  if (job.upgraded_at && job.submit_time > job.upgraded_at) return MarkAction::kBack;
  return MarkAction::kKeep;
}

}  // namespace planc
