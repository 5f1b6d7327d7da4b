#include "common/infusion.h"

#include <algorithm>

namespace planc {
namespace {

constexpr time_t kHour = 3600;

std::string percent(uint32_t permille) {
  return std::to_string(permille / 10) + "." + std::to_string(permille % 10) + "%";
}

// A pool of `tier` that may grow: under its maximum, a replica fits.
const ServingPool* growable(const std::vector<ServingPool>& pools, TierId tier,
                            uint32_t idle_gpus) {
  for (const ServingPool& p : pools)
    if (p.tier == tier && p.replicas < p.max_replicas && p.gpus_per_replica <= idle_gpus) return &p;
  return nullptr;
}

}  // namespace

std::string infused_mark(const std::string& pool, TierId tier, uint32_t drain_grace_seconds) {
  return std::string(kInfusedTag) + " pool " + pool + ": a replica capacity infusion added (" +
         tier_label(tier) + ", drain grace " + std::to_string(drain_grace_seconds) + " s)";
}

std::optional<InfusedMark> read_infused_mark(std::string_view c) {
  constexpr std::string_view head = "[planc:infused] pool ";
  static_assert(head.substr(0, kInfusedTag.size()) == kInfusedTag);
  if (c.substr(0, head.size()) != head) return std::nullopt;
  c.remove_prefix(head.size());
  const size_t colon = c.find(": a replica capacity infusion added (P");
  if (colon == 0 || colon == c.npos) return std::nullopt;
  InfusedMark m;
  m.pool = std::string(c.substr(0, colon));
  c.remove_prefix(colon + std::string_view(": a replica capacity infusion added (P").size());
  if (c.empty() || c[0] < '0' || c[0] > '3') return std::nullopt;
  m.tier = static_cast<TierId>(c[0] - '0');
  constexpr std::string_view grace = ", drain grace ";
  if (c.substr(1, grace.size()) != grace) return std::nullopt;
  c.remove_prefix(1 + grace.size());
  uint64_t v = 0;
  size_t n = 0;
  for (; n < c.size() && n < 7 && c[n] >= '0' && c[n] <= '9'; n++) v = v * 10 + (c[n] - '0');
  if (n == 0 || c.substr(n, 3) != " s)") return std::nullopt;
  m.drain_grace_seconds = static_cast<uint32_t>(v);
  return m;
}

bool reclaims_replica(TierId preemptor, bool preemptor_is_replica, TierId victim,
                      bool victim_is_replica) {
  return victim == TierId::kP1 && victim_is_replica && !preemptor_is_replica &&
         (preemptor == TierId::kP0 || preemptor == TierId::kP1);
}

void InfusionController::forget_before(time_t t) {
  while (!ops_.empty() && ops_.front() <= t) ops_.pop_front();
}

uint32_t InfusionController::ops_last_hour(time_t now) const {
  return static_cast<uint32_t>(
      std::count_if(ops_.begin(), ops_.end(), [&](time_t t) { return t > now - limit_window(); }));
}

time_t InfusionController::next_allowed(time_t now) const {
  time_t at = now;
  if (!ops_.empty()) at = std::max(at, ops_.back() + static_cast<time_t>(s_.cooldown_seconds));
  if (s_.max_ops_per_hour && ops_last_hour(now) >= s_.max_ops_per_hour) {
    // The oldest operation inside the hour leaves it.
    auto first =
        std::find_if(ops_.begin(), ops_.end(), [&](time_t t) { return t > now - limit_window(); });
    if (first != ops_.end()) at = std::max(at, *first + limit_window());
  }
  return at;
}

InfusionDecision InfusionController::decide(time_t now, uint32_t idle_gpus, uint32_t pool_gpus,
                                            GuaranteedNeed need,
                                            const std::vector<ServingPool>& pools) {
  forget_before(now - std::max(limit_window(), kHour));
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

  // Giving back to guaranteed work: at once.  Any pool with a replica to
  // give, not only one above its minimum: the minimum is for idle times.
  if (need.reclaim)
    for (const ServingPool& p : pools)
      if (p.tier == TierId::kP1 && p.replicas > 0) {
        d.action = InfusionAction::kShrink;
        d.pool = p.name;
        d.reclaim = true;
        d.reason =
            "guaranteed jobs wait for GPUs: one " + p.name + " replica back (" + idle_text + ")";
        return d;
      }
  // While guaranteed work waits, nothing grows into what it waits for and
  // nothing shrinks by the idle share: its GPUs are being freed for it.
  if (need.waiting) {
    d.held = InfusionHold::kGuaranteedWaiting;
    d.reason = idle_text + ": guaranteed jobs wait; no pool grows or shrinks meanwhile";
    return d;
  }

  // What the idle share asks for.
  InfusionAction want = InfusionAction::kNone;
  const ServingPool* target = nullptr;
  std::string why;
  if (idle > s_.p3_idle_permille && (target = growable(pools, TierId::kP3, idle_gpus))) {
    want = InfusionAction::kGrow;
    why = idle_text + " above " + percent(s_.p3_idle_permille) + ": grow the P3 pool";
  } else if (idle > s_.p1_idle_permille && (target = growable(pools, TierId::kP1, idle_gpus))) {
    want = InfusionAction::kGrow;
    why = idle_text + " above " + percent(s_.p1_idle_permille) + ": grow the P1 pool";
  } else if ((target = shrinkable(pools, TierId::kP3, idle, s_.p3_idle_permille, pool_gpus))) {
    want = InfusionAction::kShrink;
    why = idle_text + " below " + percent(s_.p3_idle_permille) + " - " +
          percent(hysteresis(*target, pool_gpus)) + ": shrink the P3 pool";
  } else if ((target = shrinkable(pools, TierId::kP1, idle, s_.p1_idle_permille, pool_gpus))) {
    want = InfusionAction::kShrink;
    why = idle_text + " below " + percent(s_.p1_idle_permille) + " - " +
          percent(hysteresis(*target, pool_gpus)) + ": shrink the P1 pool";
  }
  if (want == InfusionAction::kNone) {
    d.reason = idle_text + ": nothing to do";
    return d;
  }
  const time_t allowed = next_allowed(now);
  if (allowed > now) {
    const bool limit = s_.max_ops_per_hour && ops_last_hour(now) >= s_.max_ops_per_hour;
    d.held = limit ? InfusionHold::kHourlyLimit : InfusionHold::kCooldown;
    d.held_action = want;
    d.held_tier = target->tier;
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

uint32_t InfusionController::hysteresis(const ServingPool& p, uint32_t pool_gpus) const {
  // One replica's share of the pool, rounded up.
  const uint32_t share =
      pool_gpus
          ? static_cast<uint32_t>((uint64_t{p.gpus_per_replica} * 1000 + pool_gpus - 1) / pool_gpus)
          : 1000;
  return std::max(s_.hysteresis_permille, share);
}

const ServingPool* InfusionController::shrinkable(const std::vector<ServingPool>& pools,
                                                  TierId tier, uint32_t idle, uint32_t threshold,
                                                  uint32_t pool_gpus) const {
  for (const ServingPool& p : pools)
    if (p.tier == tier && p.replicas > p.min_replicas &&
        idle + hysteresis(p, pool_gpus) < threshold)
      return &p;
  return nullptr;
}

GuaranteedDemand reclaimable_demand(const std::vector<PendingGuaranteed>& pending,
                                    std::optional<uint64_t> cap, uint64_t held,
                                    uint64_t p1_replica_gpus) {
  GuaranteedDemand d;
  const uint64_t held_without_replicas = held > p1_replica_gpus ? held - p1_replica_gpus : 0;
  for (const PendingGuaranteed& j : pending) {
    bool counts = false;
    switch (j.why) {
      case GuaranteedWait::kNotYet:
      case GuaranteedWait::kResources:
      case GuaranteedWait::kPriority:
        counts = !cap || j.gpus <= *cap;
        break;
      case GuaranteedWait::kCapLimit:
        counts = cap && held_without_replicas + j.gpus <= *cap;
        break;
      default:
        break;
    }
    if (!counts || !j.gpus) continue;
    d.gpus += j.gpus;
    d.jobs.push_back(j.job_id);
  }
  return d;
}

std::optional<uint32_t> shrink_victim(const std::vector<ReplicaView>& replicas,
                                      const std::string& pool, bool reclaim) {
  const ReplicaView* victim = nullptr;
  for (const ReplicaView& r : replicas) {
    if (r.pool != pool || r.ending) continue;
    if (!victim) {
      victim = &r;
      continue;
    }
    const bool better_state =
        reclaim ? r.running && !victim->running : !r.running && victim->running;
    if (better_state || (victim->running == r.running && r.job_id > victim->job_id)) victim = &r;
  }
  if (!victim || (reclaim && !victim->running)) return std::nullopt;
  return victim->job_id;
}

std::vector<uint32_t> orphan_replicas(const std::vector<ReplicaView>& replicas,
                                      const std::vector<ServingPool>& pools) {
  std::vector<uint32_t> out;
  for (const ReplicaView& r : replicas) {
    if (r.ending) continue;
    bool known = false;
    for (const ServingPool& p : pools) known = known || p.name == r.pool;
    if (!known) out.push_back(r.job_id);
  }
  return out;
}

std::vector<uint32_t> pending_replicas(const std::vector<ReplicaView>& replicas) {
  std::vector<uint32_t> out;
  for (const ReplicaView& r : replicas)
    if (!r.running && !r.ending) out.push_back(r.job_id);
  return out;
}

}  // namespace planc
