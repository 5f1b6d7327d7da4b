// The measured-usage track's parsing: slurmdbd's TRES usage strings and a
// run's usage from its steps, as sacct shows them.
#include "common/tres_usage.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

// slurmdbd's TRES table on the private cluster (sacctmgr show tres).
const TresNames kNames = {{1, {"cpu", ""}},  {2, {"mem", ""}},     {3, {"energy", ""}},
                          {4, {"node", ""}}, {5, {"billing", ""}}, {6, {"fs", "disk"}},
                          {7, {"vmem", ""}}, {8, {"pages", ""}},   {1001, {"gres", "gpu"}}};

TEST(TresUsageTest, ParsesIdCountPairs) {
  struct Case {
    const char* text;
    TresCounts counts;
    int malformed;
  };
  const Case cases[] = {
      {"", {}, 0},
      {"1=5012", {{1, 5012}}, 0},
      {"1=5012,2=1843200,6=2048", {{1, 5012}, {2, 1843200}, {6, 2048}}, 0},
      // Slurm's "not measured" markers are absent, not numbers.
      {"1=0,3=18446744073709551614,2=7", {{1, 0}, {2, 7}}, 0},
      {"3=18446744073709551615", {}, 0},
      // Not <id>=<count>: skipped and counted.
      {"1=5,x=3,2=,=4,7=-1,8=1.5,2=9", {{1, 5}, {2, 9}}, 5},
      {"1=5,,2=6,", {{1, 5}, {2, 6}}, 0},
      {"cpu=5", {}, 1},
  };
  for (const Case& c : cases) {
    ParsedTres p = parse_tres_counts(c.text);
    EXPECT_EQ(p.counts, c.counts) << c.text;
    EXPECT_EQ(p.malformed, c.malformed) << c.text;
  }
}

TEST(TresUsageTest, FormatsByNameSorted) {
  EXPECT_EQ(format_tres_usage({{2, 100}, {1, 5}, {6, 7}, {1001, 3}, {99, 1}}, kNames),
            "cpu=5,fs/disk=7,gres/gpu=3,mem=100,tres99=1");
  EXPECT_EQ(format_tres_usage({}, kNames), "");
}

StepUsage step(bool finished, int64_t cpu_us, const char* tot, const char* max) {
  return StepUsage{finished, cpu_us, tot, max};
}

TEST(TresUsageTest, RunUsageIsWhatSacctShows) {
  struct Case {
    const char* name;
    std::vector<StepUsage> steps;
    bool measured;
    int64_t cpu_us, max_rss;
    const char* tot;
    int without_data, unfinished;
  };
  const Case cases[] = {
      {"no steps: not measured, not 0", {}, false, -1, -1, "", 0, 0},
      {"a batch step that slept",
       {step(true, 12000, "1=10,2=1048576,6=4096,7=8388608", "1=10,2=1048576")},
       true,
       12000,
       1048576,
       "cpu=10,fs/disk=4096,mem=1048576,vmem=8388608",
       0,
       0},
      {"TotalCPU sums the steps; MaxRSS is the largest step's",
       {step(true, 5000000, "1=5000,2=3000", "1=5000,2=3000"),
        step(true, 1500000, "1=1500,2=9000", "1=1500,2=9000")},
       true,
       6500000,
       9000,
       "cpu=6500,mem=12000",
       0,
       0},
      {"jobacct_gather/none: steps without data are not a measurement of 0",
       {step(true, 0, "", ""), step(true, 0, "3=0", "")},
       false,
       -1,
       -1,
       "",
       2,
       0},
      {"a step still running is left out, and said",
       {step(true, 2000000, "1=2000,2=50", "2=50"), step(false, 9000000, "1=9000", "2=99")},
       true,
       2000000,
       50,
       "cpu=2000,mem=50",
       0,
       1},
      {"a finished step without data beside one with: counted, not summed",
       {step(true, 1000000, "1=1000,2=10", "2=10"), step(true, 0, "", "")},
       true,
       1000000,
       10,
       "cpu=1000,mem=10",
       1,
       0},
      {"ended before the first poll: TotalCPU from its rusage, no MaxRSS",
       {step(true, 1000, "3=0", "")},
       true,
       1000,
       -1,
       "energy=0",
       0,
       0},
      {"cpu measured but no MaxRSS: the peak stays unknown",
       {step(true, 3000000, "1=3000", "")},
       true,
       3000000,
       -1,
       "cpu=3000",
       0,
       0},
  };
  for (const Case& c : cases) {
    RunUsage u = summarize_steps(c.steps, kNames);
    EXPECT_EQ(u.measured, c.measured) << c.name;
    EXPECT_EQ(u.cpu_micro_seconds, c.cpu_us) << c.name;
    EXPECT_EQ(u.max_rss_bytes, c.max_rss) << c.name;
    EXPECT_EQ(u.usage_in_tot, c.tot) << c.name;
    EXPECT_EQ(u.steps_without_data, c.without_data) << c.name;
    EXPECT_EQ(u.unfinished_steps, c.unfinished) << c.name;
  }
}

TEST(TresUsageTest, MalformedItemsAreCountedAcrossSteps) {
  RunUsage u = summarize_steps({step(true, 1, "1=1,junk", "2=5,x=y")}, kNames);
  EXPECT_TRUE(u.measured);
  EXPECT_EQ(u.malformed, 2);
  EXPECT_EQ(u.max_rss_bytes, 5);
}

}  // namespace
}  // namespace planc
