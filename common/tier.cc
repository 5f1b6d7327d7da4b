#include "common/tier.h"

#include <cctype>
#include <functional>

namespace planc {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

std::string permille_text(uint32_t permille) {
  std::string s = std::to_string(permille / 1000) + ".";
  uint32_t frac = permille % 1000;
  char buf[4] = {static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                 static_cast<char>('0' + frac % 10), 0};
  std::string f(buf);
  while (f.size() > 2 && f.back() == '0') f.pop_back();
  return s + f;
}

uint8_t TierTable::preempt_mask(TierId preemptor) const {
  uint8_t mask = 0;
  for (const Tier& t : tiers_)
    if (can_preempt(preemptor, t.id)) mask |= static_cast<uint8_t>(1u << tier_index(t.id));
  if (!tier(preemptor).preemptible) mask |= static_cast<uint8_t>(1u << tier_index(TierId::kP1));
  return mask;
}

std::string tier_label(TierId t) { return "P" + std::to_string(tier_index(t)); }

std::optional<TierId> parse_tier_label(std::string_view s) {
  if (s.size() == 2 && (s[0] == 'P' || s[0] == 'p') && s[1] >= '0' && s[1] <= '3')
    return static_cast<TierId>(s[1] - '0');
  return std::nullopt;
}

TierTable TierTable::defaults() {
  TierTable t;
  auto make = [&](TierId id, const char* label, const char* product, const char* qos,
                  std::vector<std::string> aliases, uint32_t priority, bool preemptible,
                  uint32_t grace, uint32_t permille, std::array<bool, kTierCount> preempts) {
    Tier& x = t.tiers_[tier_index(id)];
    x.id = id;
    x.label = label;
    x.product = product;
    x.qos = qos;
    x.aliases = std::move(aliases);
    x.priority = priority;
    x.preemptible = preemptible;
    x.grace_seconds = grace;
    x.price_permille = permille;
    x.preempts = preempts;
    return std::ref(x);
  };
  make(TierId::kP0, "P0", "Plan A long-term lease", "p0-lease", {"p0", "plan-a-lease", "lease"},
       10000, false, 0, 1000, {false, false, true, true});
  make(TierId::kP1, "P1", "Plan B guaranteed API and internal critical services", "p1-guaranteed",
       {"p1", "plan-b-guaranteed", "guaranteed"}, 10000, false, 0, 1000,
       {false, false, true, true});
  Tier& p2 =
      make(TierId::kP2, "P2", "Plan A spot instances and elastic training", "p2-spot",
           {"p2", "plan-a-spot", "elastic"}, 5000, true, 30, 350, {false, false, false, true});
  Tier& p3 = make(TierId::kP3, "P3", "Plan B spot API and batch", "p3-spot",
                  {"p3", "plan-b-spot", "batch"}, 1000, true, 0, 400, {});
  // Victims: P3 before P2.  Advice: each product line's guaranteed tier
  // (Plan A spot P2 -> P0 lease, Plan B spot P3 -> P1 guaranteed).  P3
  // starves into P2 (policy 000, section 8).  Price ranges (section 1):
  // P2 30-40% of list, P3 30-50%, guaranteed tiers list price or above.
  p2.victim_class = 2;
  p3.victim_class = 1;
  p2.alternative = TierId::kP0;
  p3.alternative = TierId::kP1;
  p3.starves_into = TierId::kP2;
  p2.price_min_permille = 300;
  p2.price_max_permille = 400;
  p3.price_min_permille = 300;
  p3.price_max_permille = 500;
  return t;
}

const Tier* TierTable::find(std::string_view name) const {
  for (const Tier& t : tiers_) {
    if (iequals(name, t.qos) || iequals(name, t.label)) return &t;
    for (const std::string& a : t.aliases)
      if (iequals(name, a)) return &t;
  }
  return nullptr;
}

const Tier* TierTable::find_by_qos(std::string_view qos) const {
  for (const Tier& t : tiers_)
    if (iequals(qos, t.qos)) return &t;
  return nullptr;
}

std::optional<TierTable::Problem> TierTable::validate() const {
  // Every name must lead to exactly one tier, or --qos would be ambiguous.
  struct Name {
    std::string_view name;
    const Tier* tier;
    const char* key;  // where the name comes from
  };
  std::vector<Name> names;
  for (const Tier& t : tiers_) {
    if (t.qos.empty()) return Problem{t.id, "QOS", t.label + " has an empty QOS name"};
    names.push_back({t.qos, &t, "QOS"});
    names.push_back({t.label, &t, "Tier"});
    for (const std::string& a : t.aliases) names.push_back({a, &t, "Aliases"});
  }
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = i + 1; j < names.size(); ++j)
      if (names[i].tier != names[j].tier && iequals(names[i].name, names[j].name))
        return Problem{names[j].tier->id, names[j].key,
                       "the name '" + std::string(names[i].name) + "' is used by both " +
                           names[i].tier->label + " and " + names[j].tier->label};

  // Single-edge problems first, so the message names the real mistake.
  for (const Tier& a : tiers_) {
    for (const Tier& b : tiers_) {
      if (!a.preempts[tier_index(b.id)]) continue;
      if (a.id == b.id) return Problem{a.id, "Preempts", a.label + " may not preempt its own tier"};
      if (!b.preemptible)
        return Problem{a.id, "Preempts",
                       a.label + " may not preempt " + b.label + ": " + b.label +
                           " is guaranteed (Preemptible=no)"};
    }
  }
  for (const Tier& a : tiers_)
    for (const Tier& b : tiers_)
      if (a.id < b.id && a.preempts[tier_index(b.id)] && b.preempts[tier_index(a.id)])
        return Problem{b.id, "Preempts",
                       a.label + " and " + b.label + " may not preempt each other"};
  for (const Tier& t : tiers_) {
    if (t.starves_into == t.id)
      return Problem{t.id, "StarveInto", t.label + " cannot starve into itself"};
    if (t.price_min_permille > t.price_max_permille)
      return Problem{t.id, "PriceRange", "the lower bound is above the upper one"};
    if (t.price_permille < t.price_min_permille || t.price_permille > t.price_max_permille)
      return Problem{t.id, "PriceFactor",
                     permille_text(t.price_permille) + " is outside " + t.label + "'s PriceRange " +
                         permille_text(t.price_min_permille) + "-" +
                         permille_text(t.price_max_permille)};
  }
  return std::nullopt;
}

std::string TierTable::describe_names() const {
  std::string out;
  for (const Tier& t : tiers_) {
    if (!out.empty()) out += "; ";
    // Users type lower case; show the label only when no alias spells it.
    std::string names;
    bool label_spelled = false;
    for (const std::string& a : t.aliases) {
      names += (names.empty() ? "" : ", ") + a;
      label_spelled = label_spelled || iequals(a, t.label);
    }
    if (!label_spelled) names = t.label + (names.empty() ? "" : ", " + names);
    out += t.qos + " (" + names + ")";
  }
  return out;
}

}  // namespace planc
