// The four Plan C tiers and who may preempt whom.
//
// The tier set is fixed by the policy (P0..P3); everything about a tier that
// an admin might tune (its QoS name, aliases, priority, grace, price factor,
// which tiers it preempts) is data in a TierTable, filled with the policy's
// defaults and then overridden from planc.conf (see config.h).
//
// A TierTable is immutable once built and safe to read from any thread.
#ifndef PLANC_COMMON_TIER_H_
#define PLANC_COMMON_TIER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace planc {

enum class TierId : uint8_t { kP0 = 0, kP1 = 1, kP2 = 2, kP3 = 3 };
inline constexpr int kTierCount = 4;

inline constexpr int tier_index(TierId t) { return static_cast<int>(t); }

struct Tier {
  TierId id = TierId::kP0;
  std::string label;                        // "P0".."P3": fixed, used in planc.conf and logs
  std::string product;                      // e.g. "Plan A long-term lease"
  std::string qos;                          // canonical Slurm QoS name, e.g. "p0-lease"
  std::vector<std::string> aliases;         // other names users may type in --qos
  uint32_t priority = 0;                    // QoS priority
  bool preemptible = false;                 // guaranteed tiers are never preempted
  uint32_t grace_seconds = 0;               // SIGTERM-to-kill grace when preempted
  uint32_t price_permille = 1000;           // price factor: 350 means 0.35x list
  std::array<bool, kTierCount> preempts{};  // preempts[i]: may preempt tier i
  // The rules that are data too (planc.conf keys in brackets):
  // [VictimClass] Slurm takes victims of a lower class first (1..3).
  uint8_t victim_class = 3;
  // [Alternative] the guaranteed tier this tier's jobs are advised to use
  // to avoid preemption or a spot cap (first choice; see advised_tier()).
  std::optional<TierId> alternative;
  // [StarveInto, StarveAfter] a pending job of this tier that has waited
  // longer than starve_after_seconds (0: StarvationThreshold) gets one free
  // attempt in that tier.
  std::optional<TierId> starves_into;
  uint32_t starve_after_seconds = 0;
  // [PriceRange] the PriceFactor the policy allows this tier.
  uint32_t price_min_permille = 1000;
  uint32_t price_max_permille = 10000;
};

class TierTable {
 public:
  // The policy's table (000 scheduling policy, section 1).
  static TierTable defaults();

  const Tier& tier(TierId id) const { return tiers_[tier_index(id)]; }
  Tier& mutable_tier(TierId id) { return tiers_[tier_index(id)]; }
  const std::array<Tier, kTierCount>& all() const { return tiers_; }

  // Finds a tier by any name a user or admin may type: its QoS name, its
  // label (P0) or an alias.  Case-insensitive.  nullptr when nothing matches.
  const Tier* find(std::string_view name) const;

  // Finds a tier by canonical QoS name only (case-insensitive).
  const Tier* find_by_qos(std::string_view qos) const;

  // True when a job of `preemptor` may preempt a running job of `preemptee`.
  bool can_preempt(TierId preemptor, TierId preemptee) const {
    return tiers_[tier_index(preemptor)].preempts[tier_index(preemptee)];
  }

  // The tiers whose runs a job of `preemptor` may take (bit tier_index):
  // can_preempt's, and for a tier that is not preemptible P1 too (capacity
  // infusion's P1 replicas are reclaimed for guaranteed work).
  uint8_t preempt_mask(TierId preemptor) const;

  // A consistency problem: which tier and which of its keys, and why.
  struct Problem {
    TierId tier;
    std::string key;  // the planc.conf key to fix: QOS, Aliases, Preempts, Priority
    std::string message;
  };
  // Checks the table's own consistency; returns the first problem found
  // (names clash, a tier preempts itself or a guaranteed tier, two tiers
  // preempt each other, a tier that starves into itself, a PriceFactor
  // outside its PriceRange).  An Alternative that is not guaranteed is
  // only warned about (policy_warnings); advised_tier() skips it.  What only departs from the
  // policy (P0 made preemptible, P0 and P1 weighed differently) is valid: see policy_warnings() in
  // config.h.
  std::optional<Problem> validate() const;

  // "p0-lease (P0, also p0, plan-a-lease), ..." for error messages.
  std::string describe_names() const;

 private:
  std::array<Tier, kTierCount> tiers_;
};

// Memoises TierTable::find_by_qos by QoS id.  Slurm's preempt plugin is
// asked about every job in slurmctld's list for each job it tries, tens of
// thousands of times a scheduling pass, and comparing names was most of the
// cost.  QoS ids are small integers that slurmdbd does not reuse for
// another name.  Lock-free; safe from any thread; `table` must outlive it.
class QosTierCache {
 public:
  explicit QosTierCache(const TierTable& table) : table_(table) {
    for (auto& slot : slots_) slot.store(kUnknown, std::memory_order_relaxed);
  }
  const TierTable& table() const { return table_; }
  // `name` is only read the first time an id is seen.
  const Tier* lookup(uint32_t qos_id, const char* name) const {
    if (qos_id >= kSlots) return name ? table_.find_by_qos(name) : nullptr;
    int8_t v = slots_[qos_id].load(std::memory_order_relaxed);
    if (v == kUnknown) {
      const Tier* t = name ? table_.find_by_qos(name) : nullptr;
      v = t ? static_cast<int8_t>(tier_index(t->id)) : kNotATier;
      slots_[qos_id].store(v, std::memory_order_relaxed);
    }
    return v < 0 ? nullptr : &table_.tier(static_cast<TierId>(v));
  }

 private:
  static constexpr int8_t kUnknown = -2, kNotATier = -1;
  static constexpr size_t kSlots = 4096;
  const TierTable& table_;
  mutable std::array<std::atomic<int8_t>, kSlots> slots_;
};

// 350 -> "0.35", 1000 -> "1.00", 333 -> "0.333".
std::string permille_text(uint32_t permille);

// Parses "P0".."P3" (case-insensitive) into a TierId.
std::optional<TierId> parse_tier_label(std::string_view s);
// The other way: kP2 -> "P2" (a tier's fixed label, without a table).
std::string tier_label(TierId t);

// ASCII case-insensitive equality, as Slurm compares QoS names.
bool iequals(std::string_view a, std::string_view b);

}  // namespace planc

#endif  // PLANC_COMMON_TIER_H_
