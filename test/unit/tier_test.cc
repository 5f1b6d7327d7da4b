#include <gtest/gtest.h>

#include "common/tier.h"

namespace planc {
namespace {

// The policy's matrix (000, section 1), walked as a table.
TEST(TierTableTest, DefaultMatrix) {
  struct Case {
    TierId preemptor, preemptee;
    bool may;
  };
  const Case cases[] = {
      {TierId::kP0, TierId::kP0, false}, {TierId::kP0, TierId::kP1, false},
      {TierId::kP0, TierId::kP2, true},  {TierId::kP0, TierId::kP3, true},
      {TierId::kP1, TierId::kP0, false}, {TierId::kP1, TierId::kP1, false},
      {TierId::kP1, TierId::kP2, true},  {TierId::kP1, TierId::kP3, true},
      {TierId::kP2, TierId::kP0, false}, {TierId::kP2, TierId::kP1, false},
      {TierId::kP2, TierId::kP2, false}, {TierId::kP2, TierId::kP3, true},
      {TierId::kP3, TierId::kP0, false}, {TierId::kP3, TierId::kP1, false},
      {TierId::kP3, TierId::kP2, false}, {TierId::kP3, TierId::kP3, false},
  };
  TierTable t = TierTable::defaults();
  for (const Case& c : cases)
    EXPECT_EQ(t.can_preempt(c.preemptor, c.preemptee), c.may)
        << "P" << tier_index(c.preemptor) << " -> P" << tier_index(c.preemptee);
  EXPECT_FALSE(t.validate().has_value());
}

// What a preemptor of each tier may take: Preempts=, and P1 for a tier
// that is not preemptible (infused P1 replicas).
TEST(TierTableTest, PreemptMask) {
  TierTable t = TierTable::defaults();
  EXPECT_EQ(t.preempt_mask(TierId::kP0), 0b1110);
  EXPECT_EQ(t.preempt_mask(TierId::kP1), 0b1110);
  EXPECT_EQ(t.preempt_mask(TierId::kP2), 0b1000);
  EXPECT_EQ(t.preempt_mask(TierId::kP3), 0);
  t.mutable_tier(TierId::kP0).preempts[tier_index(TierId::kP3)] = false;
  EXPECT_EQ(t.preempt_mask(TierId::kP0), 0b0110);
}

TEST(TierTableTest, DefaultAttributes) {
  struct Case {
    TierId id;
    const char* qos;
    bool preemptible;
    uint32_t grace, permille;
  };
  const Case cases[] = {
      {TierId::kP0, "p0-lease", false, 0, 1000},
      {TierId::kP1, "p1-guaranteed", false, 0, 1000},
      {TierId::kP2, "p2-spot", true, 30, 350},
      {TierId::kP3, "p3-spot", true, 0, 400},
  };
  TierTable t = TierTable::defaults();
  for (const Case& c : cases) {
    const Tier& tier = t.tier(c.id);
    EXPECT_EQ(tier.qos, c.qos);
    EXPECT_EQ(tier.preemptible, c.preemptible) << c.qos;
    EXPECT_EQ(tier.grace_seconds, c.grace) << c.qos;
    EXPECT_EQ(tier.price_permille, c.permille) << c.qos;
  }
  EXPECT_EQ(t.tier(TierId::kP0).priority, t.tier(TierId::kP1).priority);
}

TEST(TierTableTest, FindByAnyName) {
  struct Case {
    const char* name;
    int tier;  // -1: not found
  };
  const Case cases[] = {
      {"p0-lease", 0},
      {"P0", 0},
      {"p0", 0},
      {"plan-a-lease", 0},
      {"LEASE", 0},
      {"p1-guaranteed", 1},
      {"plan-b-guaranteed", 1},
      {"p2-spot", 2},
      {"plan-a-spot", 2},
      {"Plan-A-Spot", 2},
      {"p2", 2},
      {"elastic", 2},
      {"p3-spot", 3},
      {"plan-b-spot", 3},
      {"batch", 3},
      {"gold", -1},
      {"", -1},
      {"p4", -1},
      {"p2-spot ", -1},
      {"normal", -1},
  };
  TierTable t = TierTable::defaults();
  for (const Case& c : cases) {
    const Tier* found = t.find(c.name);
    if (c.tier < 0) {
      EXPECT_EQ(found, nullptr) << c.name;
    } else {
      ASSERT_NE(found, nullptr) << c.name;
      EXPECT_EQ(tier_index(found->id), c.tier) << c.name;
    }
  }
  EXPECT_NE(t.find_by_qos("P2-SPOT"), nullptr);
  EXPECT_EQ(t.find_by_qos("p2"), nullptr);  // aliases are not QoS names
}

TEST(TierTableTest, ValidateCatchesInconsistentTables) {
  struct Case {
    const char* what;
    void (*mutate)(TierTable&);
    const char* key;
    const char* message_part;
  };
  const Case cases[] = {
      {"self preemption", [](TierTable& t) { t.mutable_tier(TierId::kP2).preempts[2] = true; },
       "Preempts", "own tier"},
      {"guaranteed victim", [](TierTable& t) { t.mutable_tier(TierId::kP2).preempts[0] = true; },
       "Preempts", "guaranteed"},
      {"mutual", [](TierTable& t) { t.mutable_tier(TierId::kP3).preempts[2] = true; }, "Preempts",
       "each other"},
      {"alias clash", [](TierTable& t) { t.mutable_tier(TierId::kP3).aliases.push_back("Lease"); },
       "Aliases", "used by both"},
      {"empty qos", [](TierTable& t) { t.mutable_tier(TierId::kP1).qos.clear(); }, "QOS", "empty"},
  };
  for (const Case& c : cases) {
    TierTable t = TierTable::defaults();
    c.mutate(t);
    auto p = t.validate();
    ASSERT_TRUE(p.has_value()) << c.what;
    EXPECT_EQ(p->key, c.key) << c.what;
    EXPECT_NE(p->message.find(c.message_part), std::string::npos) << c.what << ": " << p->message;
  }
}

TEST(QosTierCacheTest, RemembersByIdAndReadsTheNameOnce) {
  TierTable t = TierTable::defaults();
  QosTierCache cache(t);
  EXPECT_EQ(cache.lookup(7, "p2-spot"), &t.tier(TierId::kP2));
  EXPECT_EQ(cache.lookup(7, nullptr), &t.tier(TierId::kP2));  // from memory
  EXPECT_EQ(cache.lookup(8, "normal"), nullptr);
  EXPECT_EQ(cache.lookup(8, "p3-spot"), nullptr);                     // id 8 is known not a tier
  EXPECT_EQ(cache.lookup(100000, "P0-LEASE"), &t.tier(TierId::kP0));  // beyond the table
  EXPECT_EQ(cache.lookup(9, nullptr), nullptr);
}

TEST(TierTableTest, ParseLabel) {
  EXPECT_EQ(parse_tier_label("p3"), TierId::kP3);
  EXPECT_EQ(parse_tier_label("P0"), TierId::kP0);
  EXPECT_FALSE(parse_tier_label("P4").has_value());
  EXPECT_FALSE(parse_tier_label("P").has_value());
  EXPECT_FALSE(parse_tier_label("P00").has_value());
  for (TierId t : {TierId::kP0, TierId::kP1, TierId::kP2, TierId::kP3})
    EXPECT_EQ(parse_tier_label(tier_label(t)), t);
  EXPECT_EQ(tier_label(TierId::kP2), "P2");
}

}  // namespace
}  // namespace planc
