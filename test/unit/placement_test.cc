#include "common/placement.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

TEST(PlacementTest, NodesHoldingGuaranteedWorkComeFirstAmongEqualWeights) {
  EXPECT_EQ(steered_weight(true, 1, true), 2u);
  EXPECT_EQ(steered_weight(true, 1, false), 3u);
  EXPECT_LT(steered_weight(true, 1, true), steered_weight(true, 1, false));
  EXPECT_EQ(steered_weight(true, 0, true), 0u);
  EXPECT_EQ(steered_weight(true, 0, false), 1u);
}

TEST(PlacementTest, TheConfiguredOrderBetweenWeightsIsKept) {
  // A node of a lower configured weight comes first whether or not either
  // holds guaranteed work.
  for (uint32_t w1 : {0u, 1u, 5u, 100u})
    for (uint32_t w2 : {w1 + 1, w1 + 2, w1 + 1000})
      for (bool h1 : {false, true})
        for (bool h2 : {false, true})
          EXPECT_LT(steered_weight(true, w1, h1), steered_weight(true, w2, h2))
              << w1 << " " << h1 << " / " << w2 << " " << h2;
}

TEST(PlacementTest, OffOrTooLargeMeansTheConfiguredWeight) {
  EXPECT_EQ(steered_weight(false, 1, true), 1u);
  EXPECT_EQ(steered_weight(false, 7, false), 7u);
  EXPECT_EQ(steered_weight(true, kMaxSteeredWeight, false), 0xfffffffdu)
      << "under Slurm's NO_VAL (0xfffffffe), which update_node() ignores";
  EXPECT_EQ(steered_weight(true, kMaxSteeredWeight + 1, true), kMaxSteeredWeight + 1);
  EXPECT_EQ(steered_weight(true, UINT32_MAX, false), UINT32_MAX);
}

TEST(PlacementTest, SlurmConfsWeightSurvivesAReconfigureThatCopiedOursIntoTheNodeRecord) {
  EXPECT_EQ(configured_weight(5, nullptr), 5u) << "never steered: the node record's";
  SteeredNode known{5, 11};
  EXPECT_EQ(configured_weight(5, &known), 5u) << "steered, no reconfigure since";
  EXPECT_EQ(configured_weight(11, &known), 5u)
      << "a SIGHUP copied the steered 11 into the node record: still 5, not 11 (which "
         "would steer to 22 or 23, and more at each reload)";
  EXPECT_EQ(configured_weight(7, &known), 7u)
      << "scontrol reconfigure with slurm.conf's weight changed to 7";
}

TEST(PlacementTest, ChangesNameOnlyTheNodesThatDifferGroupedByWeight) {
  std::vector<NodeWeight> nodes = {
      {0, 1, 1, true},   // never steered, holds: 2
      {1, 1, 1, false},  // never steered, free: 3
      {2, 1, 2, true},   // already right
      {3, 1, 2, false},  // its guaranteed job ended: 3
      {4, 1, 3, true},   // a guaranteed job started: 2
      {5, 10, 21, false},
  };
  auto on = weight_changes(true, nodes);
  ASSERT_EQ(on.size(), 2u);
  EXPECT_EQ(on[2], (std::vector<int>{0, 4}));
  EXPECT_EQ(on[3], (std::vector<int>{1, 3}));
  EXPECT_TRUE(weight_changes(true, {{0, 1, 2, true}, {1, 4, 9, false}}).empty());
}

TEST(PlacementTest, TurnedOffEveryNodeGoesBackToItsConfiguredWeight) {
  std::vector<NodeWeight> nodes = {
      {0, 1, 2, true}, {1, 1, 3, false}, {2, 1, 1, false}, {3, 10, 21, true}};
  auto off = weight_changes(false, nodes);
  ASSERT_EQ(off.size(), 2u);
  EXPECT_EQ(off[1], (std::vector<int>{0, 1}));
  EXPECT_EQ(off[10], (std::vector<int>{3}));
}

}  // namespace
}  // namespace planc
