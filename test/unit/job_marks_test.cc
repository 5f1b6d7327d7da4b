#include <gtest/gtest.h>

#include "common/job_marks.h"

namespace planc {
namespace {

const PlancConfig& cfg() {
  static const PlancConfig c = parse_config("", "x").value();
  return c;
}

constexpr time_t kT = 1796003232;  // 2026-11-30T01:47:12Z

TEST(JobMarksTest, MarkText) {
  EXPECT_EQ(free_attempt_mark(cfg(), TierId::kP3, TierId::kP2, kT, 31 * 60 + 20, "Resources"),
            "[planc:free-attempt] upgraded from P3 (p3-spot) to P2 (p2-spot) at "
            "2026-11-30T01:47:12Z after 31 min waiting for Resources; this attempt is not billed");
  // Below a minute (short test thresholds) the wait is in seconds.
  EXPECT_NE(free_attempt_mark(cfg(), TierId::kP3, TierId::kP2, kT, 7, "Priority")
                .find("after 7 s waiting for Priority;"),
            std::string::npos);
}

TEST(JobMarksTest, HasMarkAnywhere) {
  struct Case {
    const char* comment;
    bool marked;
  };
  const Case cases[] = {
      {"", false},
      {"planc: preempted at ...", false},
      {"[planc:free-attempt] upgraded ...", true},
      {"vip customer | [planc:free-attempt] upgraded ...", true},
      {"[planc:free-attempt", false},
      {"[PLANC:FREE-ATTEMPT]", false},
  };
  for (const Case& c : cases) EXPECT_EQ(has_free_attempt_mark(c.comment), c.marked) << c.comment;
}

TEST(JobMarksTest, AddAndRemoveKeepOtherText) {
  const std::string mark =
      free_attempt_mark(cfg(), TierId::kP3, TierId::kP2, kT, 1900, "Resources");
  struct Case {
    const char* before;
    std::string with_mark;  // after add_free_attempt_mark
    const char* after;      // after remove_free_attempt_mark(with_mark)
  };
  const Case cases[] = {
      {"", mark, ""},
      {"vip customer", mark + " | vip customer", "vip customer"},
      {"planc: preempted at X", mark + " | planc: preempted at X", "planc: preempted at X"},
      // An old mark is replaced, not stacked.
      {"[planc:free-attempt] old | note", mark + " | note", "note"},
  };
  for (const Case& c : cases) {
    std::string added = add_free_attempt_mark(c.before, mark);
    EXPECT_EQ(added, c.with_mark) << c.before;
    EXPECT_TRUE(has_free_attempt_mark(added));
    EXPECT_EQ(remove_free_attempt_mark(added), c.after) << c.before;
    EXPECT_FALSE(has_free_attempt_mark(remove_free_attempt_mark(added)));
  }
  // A mark after other text: the separator before it goes too.
  EXPECT_EQ(remove_free_attempt_mark("admin note | " + mark), "admin note");
  EXPECT_EQ(remove_free_attempt_mark("no mark here"), "no mark here");
}

TEST(JobMarksTest, UpgradeTimeReadBack) {
  std::string mark = free_attempt_mark(cfg(), TierId::kP3, TierId::kP2, kT, 1900, "Resources");
  EXPECT_EQ(free_attempt_upgraded_at(mark), kT);
  EXPECT_EQ(free_attempt_upgraded_at("x | " + mark + " | planc: preempted"), kT);
  EXPECT_FALSE(free_attempt_upgraded_at("planc: preempted at 2026-11-30T01:47:12Z"));
  EXPECT_FALSE(free_attempt_upgraded_at("[planc:free-attempt] at 2026-13-xxT"));
}

TEST(JobMarksTest, TheNiceAddedIsSaidAndReadBack) {
  std::string mark =
      free_attempt_mark(cfg(), TierId::kP3, TierId::kP2, kT, 1900, "Resources", 60000);
  EXPECT_NE(mark.find("; this attempt is not billed; it queues below paying P2 jobs and preempts "
                      "nothing (Nice +60000)"),
            std::string::npos)
      << mark;
  EXPECT_EQ(free_attempt_nice("x | " + mark + " | planc: preempted at " + "2026-11-30T01:47:12Z"),
            60000);
  // Without a Nice (an administrator fixed the job's priority): not said.
  std::string plain = free_attempt_mark(cfg(), TierId::kP3, TierId::kP2, kT, 1900, "Resources");
  EXPECT_EQ(plain.find("Nice"), std::string::npos);
  EXPECT_EQ(free_attempt_nice(plain), 0);
  // Only the mark's own text counts.
  EXPECT_EQ(free_attempt_nice("admin note (Nice +5)"), 0);
  EXPECT_EQ(free_attempt_upgraded_at(mark), kT);
}

TEST(JobMarksTest, TiersReadBack) {
  using T = TierId;
  std::string mark = free_attempt_mark(cfg(), T::kP3, T::kP2, kT, 1900, "Resources");
  EXPECT_EQ(free_attempt_tiers("admin | " + mark), std::make_pair(T::kP3, T::kP2));
  EXPECT_EQ(free_attempt_tiers(free_attempt_mark(cfg(), T::kP2, T::kP1, kT, 60, "Priority")),
            std::make_pair(T::kP2, T::kP1));
  EXPECT_FALSE(free_attempt_tiers("planc: preempted at 2026-11-30T01:47:12Z"));
  EXPECT_FALSE(free_attempt_tiers("[planc:free-attempt] upgraded from somewhere"));
}

TEST(JobMarksTest, PreemptionNoteBesideTheMark) {
  std::string mark = free_attempt_mark(cfg(), TierId::kP3, TierId::kP2, kT, 1900, "Resources");
  struct Case {
    std::string current;
    std::optional<std::string> result;
  };
  const Case cases[] = {
      {"", "planc: new"},
      {"planc: old note", "planc: new"},
      {mark, mark + " | planc: new"},
      {mark + " | planc: old note", mark + " | planc: new"},
      {"admin's own words", std::nullopt},
      {mark + " | admin's own words", std::nullopt},
      // Every Plan C mark is kept, in its order, before the note.
      {"[planc:market] bid 9.00 | " + mark + " | planc: old",
       "[planc:market] bid 9.00 | " + mark + " | planc: new"},
      {"[planc:fallback] x | admin's own words", std::nullopt},
  };
  for (const Case& c : cases)
    EXPECT_EQ(admin_comment_with_note(c.current, "planc: new"), c.result) << c.current;
}

TEST(JobMarksTest, TaggedMarksReplaceInPlaceAndKeepOtherText) {
  constexpr std::string_view kTag = "[planc:x]";
  EXPECT_EQ(with_tagged_mark("", kTag, "[planc:x] a"), "[planc:x] a");
  EXPECT_EQ(with_tagged_mark("note", kTag, "[planc:x] a"), "[planc:x] a | note");
  EXPECT_EQ(with_tagged_mark("[planc:y] b | [planc:x] old | note", kTag, "[planc:x] a"),
            "[planc:y] b | [planc:x] a | note");
  EXPECT_EQ(find_tagged_mark("[planc:y] b | [planc:x] a | note", kTag), "[planc:x] a");
  EXPECT_FALSE(find_tagged_mark("[planc:y] b", kTag));
  EXPECT_EQ(without_tagged_mark("[planc:y] b | [planc:x] a | note", kTag), "[planc:y] b | note");
  EXPECT_EQ(without_tagged_mark("note | [planc:x] a", kTag), "note");
  EXPECT_EQ(without_tagged_mark("[planc:x] a", kTag), "");
}

TEST(JobMarksTest, SpotFallbackMarks) {
  const std::string pending = fallback_mark(cfg(), TierId::kP1);
  EXPECT_EQ(pending, "[planc:fallback] a preempted run comes back in P1 (p1-guaranteed)");
  EXPECT_EQ(fallback_pending(pending), TierId::kP1);
  EXPECT_EQ(fallback_pending("[planc:market] bid 9.00 | " + pending + " | planc: preempted"),
            TierId::kP1);
  const std::string done = fallback_done_mark(cfg(), TierId::kP3, TierId::kP1, kT);
  EXPECT_EQ(done,
            "[planc:fallback] preempted as P3 at 2026-11-30T01:47:12Z; requeued in P1 "
            "(p1-guaranteed), billed at P1's price from the next run");
  EXPECT_FALSE(fallback_pending(done));  // acted on: never moved twice
  const std::string refused =
      fallback_refused_mark(cfg(), TierId::kP3, TierId::kP1, kT, "Invalid qos specification");
  EXPECT_EQ(refused,
            "[planc:fallback] preempted as P3 at 2026-11-30T01:47:12Z; not moved to P1 "
            "(p1-guaranteed): Invalid qos specification; the job stays in P3");
  EXPECT_FALSE(fallback_pending(refused));
  EXPECT_FALSE(fallback_pending("planc: preempted"));
}

}  // namespace
}  // namespace planc
