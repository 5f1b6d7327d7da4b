#include "common/infusion.h"

#include <algorithm>

namespace planc {
namespace {

constexpr time_t kHour = 3600;

std::string percent(uint32_t permille) {
  return std::to_string(permille / 10) + "." + std::to_string(permille % 10) + "%";
}

const ServingPool* pool_of(const std::vector<ServingPool>& pools, TierId tier, bool grow,
                           uint32_t idle_gpus) {
  for (const ServingPool& p : pools) {
    if (p.tier != tier) continue;
    if (grow && p.replicas < p.max_replicas && p.gpus_per_replica <= idle_gpus) return &p;
    if (!grow && p.replicas > p.min_replicas) return &p;
  }
  return nullptr;
}

}  // namespace

void InfusionController::forget_before(time_t t) {
  while (!ops_.empty() && ops_.front() <= t) ops_.pop_front();
}

uint32_t InfusionController::ops_last_hour(time_t now) const {
  return static_cast<uint32_t>(
      std::count_if(ops_.begin(), ops_.end(), [&](time_t t) { return t > now - kHour; }));
}

time_t InfusionController::next_allowed(time_t now) const {
  time_t at = now;
  if (!ops_.empty()) at = std::max(at, ops_.back() + static_cast<time_t>(s_.cooldown_seconds));
  if (s_.max_ops_per_hour && ops_last_hour(now) >= s_.max_ops_per_hour) {
    // The oldest operation inside the hour leaves it.
    auto first = std::find_if(ops_.begin(), ops_.end(), [&](time_t t) { return t > now - kHour; });
    if (first != ops_.end()) at = std::max(at, *first + kHour);
  }
  return at;
}

InfusionDecision InfusionController::decide(time_t now, uint32_t idle_gpus, uint32_t pool_gpus,
                                            bool guaranteed_waiting,
                                            const std::vector<ServingPool>& pools) {
  forget_before(now - kHour);
  InfusionDecision d;
  const uint32_t idle =
      pool_gpus ? static_cast<uint32_t>(uint64_t{idle_gpus} * 1000 / pool_gpus) : 0;
  const std::string idle_text = "idle " + percent(idle);

  // The market: on crossing above its threshold, again after falling back.
  if (idle > s_.market_idle_permille && !above_market_) {
    above_market_ = true;
    d.market_round = true;
  } else if (idle + s_.hysteresis_permille < s_.market_idle_permille) {
    above_market_ = false;
  }

  // Giving back to guaranteed work: at once.
  if (guaranteed_waiting)
    if (const ServingPool* p = pool_of(pools, TierId::kP1, false, idle_gpus)) {
      d.action = InfusionAction::kShrink;
      d.pool = p->name;
      d.reclaim = true;
      d.reason =
          "guaranteed jobs wait for GPUs: one " + p->name + " replica back (" + idle_text + ")";
      return d;
    }

  // What the idle share asks for.
  InfusionAction want = InfusionAction::kNone;
  const ServingPool* target = nullptr;
  std::string why;
  if (idle > s_.p3_idle_permille && (target = pool_of(pools, TierId::kP3, true, idle_gpus))) {
    want = InfusionAction::kGrow;
    why = idle_text + " above " + percent(s_.p3_idle_permille) + ": grow the P3 pool";
  } else if (idle > s_.p1_idle_permille && !guaranteed_waiting &&
             (target = pool_of(pools, TierId::kP1, true, idle_gpus))) {
    want = InfusionAction::kGrow;
    why = idle_text + " above " + percent(s_.p1_idle_permille) + ": grow the P1 pool";
  } else if (idle + s_.hysteresis_permille < s_.p3_idle_permille &&
             (target = pool_of(pools, TierId::kP3, false, idle_gpus))) {
    want = InfusionAction::kShrink;
    why = idle_text + " below " + percent(s_.p3_idle_permille) + " - " +
          percent(s_.hysteresis_permille) + ": shrink the P3 pool";
  } else if (idle + s_.hysteresis_permille < s_.p1_idle_permille &&
             (target = pool_of(pools, TierId::kP1, false, idle_gpus))) {
    want = InfusionAction::kShrink;
    why = idle_text + " below " + percent(s_.p1_idle_permille) + " - " +
          percent(s_.hysteresis_permille) + ": shrink the P1 pool";
  }
  if (want == InfusionAction::kNone) {
    d.reason = idle_text + ": nothing to do";
    return d;
  }
  const time_t allowed = next_allowed(now);
  if (allowed > now) {
    const bool limit = s_.max_ops_per_hour && ops_last_hour(now) >= s_.max_ops_per_hour;
    d.reason = why + ", held " + std::to_string(allowed - now) + " s by the " +
               (limit ? "hourly limit (" + std::to_string(s_.max_ops_per_hour) + " an hour)"
                      : "cooldown (" + std::to_string(s_.cooldown_seconds) + " s)");
    return d;
  }
  d.action = want;
  d.pool = target->name;
  d.reason = why + " (" + target->name + ")";
  return d;
}

void InfusionController::done(time_t now, const InfusionDecision& d) {
  if (d.action == InfusionAction::kNone || d.reclaim) return;
  ops_.push_back(now);
}

}  // namespace planc
