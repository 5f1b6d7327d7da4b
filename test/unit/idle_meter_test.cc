// The one idle meter (common/idle_meter.h) the market, infusion and the
// metrics read.
#include "common/idle_meter.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

TEST(IdleMeterTest, AWindowIsTimeWeightedAndNothingUntilCovered) {
  IdleMeter w;
  EXPECT_FALSE(w.measure(100, 60));
  w.observe(100, 32, 32);
  EXPECT_FALSE(w.measure(130, 60)) << "one sample, half a window: nothing decided";
  w.observe(130, 16, 32);
  // 100..130 all 32 idle, 130..160 16 idle: 24 on average.
  auto m = w.measure(160, 60);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->idle_gpus, 24u);
  EXPECT_EQ(m->pool_gpus, 32u);
  EXPECT_EQ(m->idle_permille, 750u);
  // Later, only the last 60 s count: 16 idle since 130.
  w.observe(200, 16, 32);
  EXPECT_EQ(w.measure(220, 60)->idle_gpus, 16u);
  // A dip that lasted 6 s of 60 barely moves it.
  w.observe(220, 0, 32);
  w.observe(226, 16, 32);
  EXPECT_EQ(w.measure(280, 60)->idle_gpus, 14u);  // (54 x 16) / 60 = 14.4
  // Idle never counts above the pool; the clock going back is ignored.
  IdleMeter v;
  v.observe(0, 40, 32);
  EXPECT_EQ(v.measure(10, 10)->idle_gpus, 32u);
  v.observe(5, 0, 32);
  v.observe(-5, 0, 32);
  EXPECT_EQ(v.idle_now(), 0u);
}

TEST(IdleMeterTest, SinceARoundAsTheMarketMeasuresItsVacancy) {
  IdleMeter v;
  EXPECT_FALSE(v.measure_since(0, 100));
  v.observe(0, 32, 32);  // idle for 10 s
  v.observe(10, 0, 32);  // full for 30 s
  EXPECT_EQ(v.measure_since(0, 40)->idle_permille, 250u);
  EXPECT_EQ(v.measure_since(40, 50)->idle_permille, 0u);  // the last figures hold
  v.observe(50, 16, 32);
  EXPECT_EQ(v.measure_since(50, 50)->idle_permille, 500u);  // no time yet: the sample itself
  // Asked from before the first sample: from the first sample on.
  IdleMeter late;
  late.observe(100, 8, 32);
  EXPECT_EQ(late.measure_since(0, 110)->idle_permille, 250u);
}

TEST(IdleMeterTest, ItCountsTheMetricsThresholdCrossings) {
  IdleMeter v;
  v.observe(0, 16, 32);  // 50%: the first sample only sets the side
  v.observe(5, 0, 32);   // full: crosses 5%, 15% and 30%
  v.observe(10, 0, 32);
  for (size_t i = 0; i < 3; i++) EXPECT_EQ(v.crossings().crossings(i), 1u);
}

TEST(IdleMeterTest, ItKeepsAnHourOrTheMarketsInterval) {
  IdleMeter v;
  v.observe(0, 32, 32);
  v.observe(1800, 0, 32);
  v.observe(5400, 0, 32);
  EXPECT_FALSE(v.measure(5400, 5400)) << "past the hour kept";
  IdleMeter day;
  day.keep_for(86400);
  day.observe(0, 32, 32);
  day.observe(1800, 0, 32);
  day.observe(5400, 0, 32);
  EXPECT_EQ(day.measure(5400, 5400)->idle_permille, 333u);
}

}  // namespace
}  // namespace planc
