#include <gtest/gtest.h>

#include <memory>

#include "common/preempt_policy.h"

namespace planc {
namespace {

constexpr time_t kT0 = 1790000000;  // some time in 2026
constexpr uint32_t kDay = 86400;

TEST(PreemptLedgerTest, WindowEdges) {
  struct Case {
    const char* what;
    std::vector<time_t> preempted_at;
    time_t now;
    uint32_t count;
    bool capped;
  };
  const Case cases[] = {
      {"none", {}, kT0, 0, false},
      {"two", {kT0, kT0 + 10}, kT0 + 20, 2, false},
      {"three: capped", {kT0, kT0 + 10, kT0 + 20}, kT0 + 30, 3, true},
      {"oldest 1 s before leaving", {kT0, kT0 + 10, kT0 + 20}, kT0 + kDay - 1, 3, true},
      {"oldest exactly 24 h old has left", {kT0, kT0 + 10, kT0 + 20}, kT0 + kDay, 2, false},
      {"all old", {kT0, kT0 + 10, kT0 + 20}, kT0 + 2 * kDay, 0, false},
      {"clock went back before all three: still counted",
       {kT0, kT0 + 10, kT0 + 20},
       kT0 - 3600,
       3,
       true},
      {"clock went back between them", {kT0, kT0 + 10, kT0 + 20}, kT0 + 5, 3, true},
      {"four, one outside", {kT0 - kDay, kT0, kT0 + 10, kT0 + 20}, kT0 + 30, 3, true},
  };
  for (const Case& c : cases) {
    PreemptLedger l(3, kDay);
    for (time_t t : c.preempted_at) l.record(7, t);
    EXPECT_EQ(l.count_in_window(7, c.now), c.count) << c.what;
    EXPECT_EQ(l.capped(7, c.now), c.capped) << c.what;
    EXPECT_EQ(l.count_in_window(8, c.now), 0u) << c.what;
  }
}

TEST(PreemptLedgerTest, CappedUntilOldestLeavesWindow) {
  PreemptLedger l(3, kDay);
  l.record(1, kT0);
  l.record(1, kT0 + 100);
  l.record(1, kT0 + 200);
  EXPECT_EQ(l.capped_until(1, kT0 + 300), kT0 + kDay);
  EXPECT_FALSE(l.capped(1, kT0 + kDay));
  l.record(1, kT0 + 300);  // four in the window: the second oldest decides
  EXPECT_EQ(l.capped_until(1, kT0 + 400), kT0 + 100 + kDay);
  EXPECT_EQ(l.capped_until(2, kT0), 0);
}

TEST(PreemptLedgerTest, PruneAndForget) {
  PreemptLedger l(3, 100);
  l.record(1, kT0);
  l.record(2, kT0 + 50);
  l.prune(kT0 + 100);  // job 1's preemption is exactly 100 s old: gone
  EXPECT_EQ(l.job_ids(), std::vector<uint32_t>{2});
  l.forget(2);
  EXPECT_EQ(l.size(), 0u);
}

TEST(LedgerFilterTest, AddRebuildAndCollisions) {
  auto f = std::make_unique<LedgerFilter>();  // 8 KiB: not on the stack
  struct Case {
    uint32_t id;
    bool after_add;      // after add(7), add(65536 + 9), add(0xffffffff)
    bool after_rebuild;  // after rebuild({9, 4000000000})
  } cases[] = {
      {7, true, false},          {8, false, false},
      {9, true, true},          // 65536 + 9 shares job 9's bit: a false positive
      {65536 + 9, true, true},  // and back again after the rebuild
      {0xffffffff, true, false}, {4000000000, false, true},
      {1, false, false},
  };
  for (const auto& c : cases) EXPECT_FALSE(f->maybe_contains(c.id)) << c.id;
  f->add(7);
  f->add(65536 + 9);
  f->add(0xffffffff);
  for (const auto& c : cases) EXPECT_EQ(f->maybe_contains(c.id), c.after_add) << c.id;
  f->rebuild({9, 4000000000});
  for (const auto& c : cases) EXPECT_EQ(f->maybe_contains(c.id), c.after_rebuild) << c.id;
  f->rebuild({});
  for (const auto& c : cases) EXPECT_FALSE(f->maybe_contains(c.id)) << c.id;
}

// Whatever ids the ledger holds, the filter never says "not there" for one
// of them (the plugin then skips the ledger and would miss the cap).
TEST(LedgerFilterTest, NeverMissesALedgerJob) {
  auto f = std::make_unique<LedgerFilter>();
  PreemptLedger l(3, kDay);
  for (uint32_t id = 1; id < 200000; id += 997) {
    l.record(id, kT0);
    f->add(id);
  }
  for (uint32_t id : l.job_ids()) ASSERT_TRUE(f->maybe_contains(id)) << id;
  for (uint32_t id = 1; id < 200000; id += 997 * 2) l.forget(id);
  f->rebuild(l.job_ids());
  for (uint32_t id : l.job_ids()) ASSERT_TRUE(f->maybe_contains(id)) << id;
}

TEST(PreemptLedgerTest, StateRoundTrip) {
  PreemptLedger l(3, kDay);
  l.record(42, kT0);
  l.record(42, kT0 + 5);
  l.record(4294967295u, kT0 + 9);
  std::string text = l.serialize();
  auto r = PreemptLedger::parse(text, 3, kDay);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r.value() == l);
  EXPECT_EQ(r.value().count_in_window(42, kT0 + 10), 2u);
  auto empty = PreemptLedger::parse(PreemptLedger(3, kDay).serialize(), 3, kDay);
  ASSERT_TRUE(empty.ok()) << empty.error();
  EXPECT_EQ(empty.value().size(), 0u);
}

TEST(PreemptLedgerTest, CorruptOrTruncatedStateIsRejected) {
  PreemptLedger l(3, kDay);
  l.record(42, kT0);
  l.record(43, kT0 + 5);
  const std::string good = l.serialize();
  struct Case {
    const char* what;
    std::string text;
    const char* error_part;
  };
  std::string flipped = good;
  flipped[good.find("43")] = '5';
  const Case cases[] = {
      {"empty", "", "bad header"},
      {"garbage", "hello\n", "bad header"},
      {"header only", "planc-preempt-state v1\n", "truncated"},
      {"cut in the body", good.substr(0, good.find("43") + 1), "truncated"},
      {"cut in the trailer", good.substr(0, good.size() - 3), "truncated"},
      {"trailer without newline", good.substr(0, good.size() - 1), "truncated"},
      {"a digit changed", flipped, "checksum"},
      {"other version", "planc-preempt-state v2\n" + good.substr(good.find('\n') + 1),
       "bad header"},
  };
  for (const Case& c : cases) {
    auto r = PreemptLedger::parse(c.text, 3, kDay);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_NE(r.error().find(c.error_part), std::string::npos) << c.what << ": " << r.error();
  }
}

TEST(VictimOrderTest, Table) {
  // Each row must be preempted before the next one.
  // {victim class (P3 1, P2 2, guaranteed 3), preemptions in the window,
  //  run minutes}
  const TierTable t = TierTable::defaults();
  const uint8_t p3 = t.tier(TierId::kP3).victim_class, p2 = t.tier(TierId::kP2).victim_class,
                p1 = t.tier(TierId::kP1).victim_class;
  const VictimFacts order[] = {
      {p3, 0, 0},
      {p3, 0, 10},
      {p3, 0, 60 * 24 * 30},
      {p3, 1, 0},
      {p3, 2, 1},
      {p3, 255, 0},
      {p3, 1000, 60 * 24 * 365 * 10},
      {p2, 0, 0},
      {p2, 0, 2},
      {p2, 1, 0},
      {p2, 2, 120},
      {p1, 0, 0},
  };
  for (size_t i = 0; i + 1 < std::size(order); ++i)
    EXPECT_LT(victim_rank(order[i]), victim_rank(order[i + 1])) << "row " << i;
  for (const VictimFacts& v : order) EXPECT_GT(victim_rank(v), kInGraceRank);
}

TEST(VictimOrderTest, RunMinutesCountOnTheClocksMinuteMarks) {
  constexpr time_t kMinute = kT0 - kT0 % 60;  // some hh:mm:00
  struct Case {
    time_t started, now;
    uint32_t minutes;
  } cases[] = {
      {kMinute + 5, kMinute + 59, 0},
      {kMinute + 5, kMinute + 60, 1},   // 55 s of run, but a minute mark passed
      {kMinute + 55, kMinute + 60, 1},  // 5 s of run: the same count as the job above
      {kMinute, kMinute + 119, 1},
      {kMinute, kMinute + 120, 2},
      {kMinute + 30, kMinute + 30, 0},
      {kMinute + 30, kMinute + 10, 0},  // clock went backwards
      {0, kMinute, 0},                  // not started
  };
  for (const auto& c : cases)
    EXPECT_EQ(run_minutes(c.started, c.now), c.minutes) << c.started << " " << c.now;
}

// Two running jobs keep their order (or their tie) for as long as they run:
// the scheduler's passes all see one victim order.
TEST(VictimOrderTest, OrderOfRunningJobsNeverChanges) {
  const time_t starts[] = {kT0, kT0 + 1, kT0 + 30, kT0 + 59, kT0 + 60, kT0 + 61, kT0 + 3599};
  auto rank_at = [](time_t started, time_t now) {
    return victim_rank({1, 0, run_minutes(started, now)});
  };
  for (time_t a : starts)
    for (time_t b : starts) {
      auto cmp = [&](time_t now) {
        uint32_t ra = rank_at(a, now), rb = rank_at(b, now);
        return ra < rb ? -1 : ra > rb ? 1 : 0;
      };
      const time_t first = std::max(a, b);
      const int at_start = cmp(first);
      for (time_t now = first; now < first + 4 * 3600; now += 7)
        ASSERT_EQ(cmp(now), at_start) << a << " " << b << " at " << now;
    }
}

PreemptionEvent p2_event() {
  PreemptionEvent e;
  e.victim_job = 10;
  e.victim_tier = TierId::kP2;
  e.preemptor_job = 99;
  e.preemptor_tier = TierId::kP0;
  e.when = 1800000000;  // 2027-01-15T08:00:00Z
  e.grace_seconds = 30;
  e.requeue = true;
  e.count_in_window = 1;
  e.account = "acct-spot";
  e.advised_tier = -1;  // acct-spot may use P2 and P3 only
  return e;
}

TEST(PreemptionNoteTest, SaysWhoWhenGraceAndWhatToDo) {
  PlancConfig cfg = parse_config("", "x").value();
  PreemptionEvent e = p2_event();
  const std::string head =
      "planc: preempted at 2027-01-15T08:00:00Z by job 99 (P0 p0-lease); SIGTERM sent, grace "
      "until 2027-01-15T08:00:30Z (30 s to checkpoint)";
  const std::string none =
      ". account acct-spot may use no guaranteed tier; ask your account coordinator for access "
      "to p0-lease (P0) or p1-guaranteed (P1)";
  EXPECT_EQ(preemption_note(cfg, e), head +
                                         "; to be requeued (auto-restart) when the grace ends; "
                                         "preemption 1 of at most 3 per 24 h" +
                                         none);
  e.victim_tier = TierId::kP3;
  e.preemptor_tier = TierId::kP2;
  e.grace_seconds = 0;
  e.requeue = false;
  e.advised_tier = 1;
  EXPECT_EQ(preemption_note(cfg, e),
            "planc: preempted at 2027-01-15T08:00:00Z by job 99 (P2 p2-spot); no grace (P3); "
            "cancelled (job not requeueable); preemption 1 of at most 3 per 24 h. To avoid "
            "preemption retry in a guaranteed tier: --qos=p1-guaranteed");
  EXPECT_EQ(TierTable::defaults().tier(TierId::kP2).alternative, TierId::kP0);
}

// The note says what actually happened, once the preemption is over.
TEST(PreemptionNoteTest, EveryEnding) {
  PlancConfig cfg = parse_config("", "x").value();
  PreemptionEvent e = p2_event();
  e.advised_tier = 0;
  const time_t at = e.when + 5;
  const std::string head =
      "planc: preempted at 2027-01-15T08:00:00Z by job 99 (P0 p0-lease); SIGTERM sent, grace "
      "until 2027-01-15T08:00:30Z (30 s to checkpoint); ";
  const std::string tail =
      "; preemption 1 of at most 3 per 24 h. To avoid preemption retry in a guaranteed tier: "
      "--qos=p0-lease";
  struct Case {
    PreemptionEnd end;
    bool requeue;
    const char* detail;
    std::string middle;  // between head and tail
  };
  const Case cases[] = {
      {PreemptionEnd::kInProgress, true, "", "to be requeued (auto-restart) when the grace ends"},
      {PreemptionEnd::kInProgress, false, "",
       "to be cancelled (job not requeueable) when the grace ends"},
      {PreemptionEnd::kRequeued, true, "", "requeued (auto-restart)"},
      {PreemptionEnd::kCancelled, false, "", "cancelled (job not requeueable)"},
      {PreemptionEnd::kEndedInGrace, true, "exit 0",
       "ended on its own at 2027-01-15T08:00:05Z during the grace (exit 0): treated as "
       "preempted, requeued (auto-restart)"},
      {PreemptionEnd::kEndedInGrace, false, "signal 9",
       "ended on its own at 2027-01-15T08:00:05Z during the grace (signal 9): treated as "
       "preempted, cancelled (job not requeueable)"},
      {PreemptionEnd::kFinishedInGrace, true, "exit 99",
       "finished at 2027-01-15T08:00:05Z during the grace with exit 99 "
       "(GraceFinishedExitCode): completed and billed, not requeued"},
      {PreemptionEnd::kCancelledInGrace, true, "by its owner",
       "cancelled at 2027-01-15T08:00:05Z during the grace by its owner: not requeued, this "
       "run is not billed"},
  };
  for (const Case& c : cases) {
    e.requeue = c.requeue;
    EXPECT_EQ(preemption_note(cfg, e, {c.end, at, c.detail}), head + c.middle + tail) << c.middle;
  }
  EXPECT_EQ(preemption_note(cfg, e, {PreemptionEnd::kCalledOff, at, "job 99 was cancelled"}),
            "planc: preemption at 2027-01-15T08:00:00Z by job 99 (P0 p0-lease) called off at "
            "2027-01-15T08:00:05Z (job 99 was cancelled); SIGTERM was sent at "
            "2027-01-15T08:00:00Z; this job keeps running and the preemption is not counted (0 "
            "of at most 3 per 24 h)");
}

TEST(PreemptionNoteTest, CappedJobIsToldUntilWhen) {
  PlancConfig cfg = parse_config("", "x").value();
  PreemptLedger ledger(3, 86400);
  const time_t t0 = 1800000000;
  ledger.record(10, t0);
  ledger.record(10, t0 + 3600);
  ledger.record(10, t0 + 7200);
  PreemptionEvent e = p2_event();
  e.when = t0 + 7200;
  e.count_in_window = ledger.count_in_window(10, e.when);
  e.capped_until = ledger.capped_until(10, e.when);
  EXPECT_EQ(e.capped_until, t0 + 86400);
  std::string note = preemption_note(cfg, e, {PreemptionEnd::kRequeued, e.when + 30, ""});
  EXPECT_NE(note.find("; requeued (auto-restart); preemption 3 of at most 3 per 24 h; protected "
                      "from preemption until 2027-01-16T08:00:00Z. "),
            std::string::npos)
      << note;
}

// Which guaranteed tier a spot job's owner is told to use, by what the
// account may use.
TEST(AdviceTest, FollowsTheAccountsEntitlement) {
  PlancConfig cfg = parse_config("", "x").value();
  auto ent = [](std::vector<std::string> qos, bool known = true) {
    Entitlement e;
    e.known = known;
    e.account = "acct";
    e.qos = std::move(qos);
    return e;
  };
  struct Case {
    const char* name;
    TierId from;
    Entitlement ent;
    const char* advised;  // QoS, nullptr: none
  };
  const Case cases[] = {
      {"P3, account has P1", TierId::kP3, ent({"p1-guaranteed", "p3-spot"}), "p1-guaranteed"},
      {"P3, account has P0 only", TierId::kP3, ent({"p0-lease", "p3-spot"}), "p0-lease"},
      {"P3, account has both: the policy's choice", TierId::kP3, ent({"p0-lease", "p1-guaranteed"}),
       "p1-guaranteed"},
      {"P2, account has both: the policy's choice", TierId::kP2, ent({"p1-guaranteed", "p0-lease"}),
       "p0-lease"},
      {"P2, account has P1 only", TierId::kP2, ent({"p1-guaranteed", "p2-spot"}), "p1-guaranteed"},
      {"spot-only account", TierId::kP3, ent({"p2-spot", "p3-spot"}), nullptr},
      {"names compare case-insensitively", TierId::kP3, ent({"P1-Guaranteed"}), "p1-guaranteed"},
      {"unknown entitlement: the policy's choice", TierId::kP2, ent({}, false), "p0-lease"},
  };
  for (const Case& c : cases) {
    const Tier* t = advised_tier(cfg, c.from, c.ent);
    if (!c.advised) {
      EXPECT_EQ(t, nullptr) << c.name;
      EXPECT_EQ(guaranteed_advice(cfg, c.from, c.ent, "Use: ", false),
                "account acct may use no guaranteed tier; ask your account coordinator for "
                "access to p0-lease (P0) or p1-guaranteed (P1)")
          << c.name;
    } else {
      ASSERT_NE(t, nullptr) << c.name;
      EXPECT_EQ(t->qos, c.advised) << c.name;
      EXPECT_EQ(guaranteed_advice(cfg, c.from, c.ent, "Use: ", false),
                std::string("Use: --qos=") + c.advised)
          << c.name;
    }
  }
}

// "A job that ends in any way while its preemption is in progress is
// treated as preempted", except by the documented exit code or a cancel.
TEST(RunEndTest, EndingsDuringTheGrace) {
  using E = RunEndFacts::Ending;
  PlancConfig cfg = parse_config("", "x").value();
  PlancConfig no_code = parse_config("GraceFinishedExitCode=none\n", "x").value();
  auto exited = [](int code) { return static_cast<uint32_t>(code) << 8; };
  struct Case {
    const char* name;
    const PlancConfig& cfg;
    RunEndFacts f;
    RunEndVerdict want;
  };
  const Case cases[] = {
      {"exit 0", cfg, {E::kCompleted, exited(0)}, RunEndVerdict::kTreatAsPreempted},
      {"exit 143", cfg, {E::kFailed, exited(143)}, RunEndVerdict::kTreatAsPreempted},
      {"SIGKILL", cfg, {E::kFailed, 9}, RunEndVerdict::kTreatAsPreempted},
      {"exit 99 (GraceFinishedExitCode)", cfg, {E::kFailed, exited(99)}, RunEndVerdict::kFinished},
      {"exit 99 with no code set",
       no_code,
       {E::kFailed, exited(99)},
       RunEndVerdict::kTreatAsPreempted},
      {"signal 99 is not exit 99", cfg, {E::kFailed, 99 & 0x7f}, RunEndVerdict::kTreatAsPreempted},
      {"scancel", cfg, {E::kCancelled, 0}, RunEndVerdict::kCancelledInGrace},
      {"Slurm's own preemption", cfg, {E::kPreempted, 0}, RunEndVerdict::kNotOurs},
      {"node failure", cfg, {E::kNodeFail, 0}, RunEndVerdict::kNotOurs},
      {"time limit or anything else", cfg, {E::kOther, 0}, RunEndVerdict::kTreatAsPreempted},
  };
  for (const Case& c : cases) EXPECT_EQ(judge_run_end(c.cfg, c.f), c.want) << c.name;
  EXPECT_EQ(describe_wait_status(exited(143)), "exit 143");
  EXPECT_EQ(describe_wait_status(9), "signal 9");
}

TEST(PreemptLedgerTest, UnrecordTakesBackOnePreemption) {
  PreemptLedger l(3, 86400);
  l.record(7, 100);
  l.record(7, 200);
  EXPECT_TRUE(l.unrecord(7, 200));
  EXPECT_FALSE(l.unrecord(7, 200));
  EXPECT_EQ(l.count_in_window(7, 300), 1u);
  EXPECT_TRUE(l.unrecord(7, 100));
  EXPECT_EQ(l.size(), 0u);
}

// A candidate on `nodes`, and the most crowded of `nodes`, node by node as
// preempt/planc does it.
void add_on(NodeCrowding& c, const std::vector<uint32_t>& nodes) {
  for (uint32_t n : nodes) c.add(n);
}
uint32_t crowd(const NodeCrowding& c, const std::vector<uint32_t>& nodes) {
  uint32_t most = 0;
  for (uint32_t n : nodes) most = std::max(most, c.on_node(n));
  return most;
}

// A preemptor that needs whole nodes: the candidates on the least crowded
// nodes come first, whatever their tier; the tier order among equals.
TEST(VictimOrderTest, WholeNodePreemptorsClearTheLeastCrowdedNodesFirst) {
  const TierTable t = TierTable::defaults();
  const uint8_t p3 = t.tier(TierId::kP3).victim_class, p2 = t.tier(TierId::kP2).victim_class;
  // Node 0: seven 1-GPU P3 runs; node 1: one 8-GPU P3 run; node 2: one
  // 8-GPU P2 run; node 3: one 16-GPU P2 run with node 4.
  NodeCrowding c;
  NodeCrowding::Ask whole;
  whole.whole_nodes = true;
  c.begin(42, whole, 5);
  EXPECT_TRUE(c.collecting_for(42));
  EXPECT_FALSE(c.collecting_for(43));
  for (int i = 0; i < 7; ++i) add_on(c, {0});
  add_on(c, {1});
  add_on(c, {2});
  add_on(c, {3, 4});
  EXPECT_EQ(crowd(c, {0}), 7u);
  EXPECT_EQ(crowd(c, {1}), 1u);
  EXPECT_EQ(crowd(c, {3, 4}), 1u);
  c.close();
  EXPECT_FALSE(c.collecting_for(42));
  auto rank = [&](uint8_t cls, std::vector<uint32_t> nodes, uint32_t minutes) {
    return victim_rank({cls, 0, minutes, crowd(c, nodes)});
  };
  // The 8-GPU P3 run before the 8-GPU P2 run (tier order among equals),
  // both before any of the seven, however short their runs.
  EXPECT_LT(rank(p3, {1}, 500), rank(p2, {2}, 0));
  EXPECT_LT(rank(p2, {2}, 500), rank(p3, {0}, 0));
  EXPECT_LT(rank(p2, {3, 4}, 500), rank(p3, {0}, 0));
  EXPECT_GT(rank(p3, {0}, 0), kInGraceRank);
  // A new round starts from nothing; a preemptor that does not need whole
  // nodes counts nothing and keeps the tier order.
  c.begin(43, {}, 5);
  add_on(c, {0});
  EXPECT_EQ(crowd(c, {0}), 0u);
  EXPECT_LT(victim_rank({p3, 0, 500, crowd(c, {0})}), victim_rank({p2, 0, 0, crowd(c, {2})}));
  c.begin(44, whole, 5);
  EXPECT_EQ(crowd(c, {0}), 0u);
  add_on(c, {0});
  EXPECT_EQ(crowd(c, {0}), 1u);
  // Nodes outside the table are ignored, not a crash.
  add_on(c, {99});
  EXPECT_EQ(crowd(c, {99}), 0u);
}

// WholeNodeSpareP3: a node holding several small P3 runs is cleared after
// nodes holding at most one P3 run, even ones with more runs; between two
// nodes of one run each the tier order still decides (P3 first).
TEST(VictimOrderTest, WholeNodeSpareP3ClearsNodesWithFewerP3RunsFirst) {
  const TierTable t = TierTable::defaults();
  const uint8_t p3 = t.tier(TierId::kP3).victim_class, p2 = t.tier(TierId::kP2).victim_class;
  // Node 0: five 1-GPU P3 runs and two P2 runs; node 1: one P3 run and
  // six P2 runs; node 2: one 8-GPU P3 run; node 3: one 8-GPU P2 run;
  // node 4: two 4-GPU P3 runs; node 5: three P2 runs.
  auto fill = [](NodeCrowding& c) {
    for (int i = 0; i < 5; ++i) c.add(0, true);
    for (int i = 0; i < 2; ++i) c.add(0, false);
    c.add(1, true);
    for (int i = 0; i < 6; ++i) c.add(1, false);
    c.add(2, true);
    c.add(3, false);
    c.add(4, true);
    c.add(4, true);
    for (int i = 0; i < 3; ++i) c.add(5, false);
  };
  NodeCrowding c;
  NodeCrowding::Ask whole;
  whole.whole_nodes = true;
  auto rank = [&](uint8_t cls, uint32_t node) { return victim_rank({cls, 0, 0, c.crowd(node)}); };
  // Off: the fewest runs, whatever the tier.
  c.begin(42, whole, 6);
  fill(c);
  EXPECT_EQ(c.crowd(0), 7u);
  EXPECT_LT(rank(p3, 0), rank(p2, 1));  // 7 runs before 7 (P3 first)
  EXPECT_LT(rank(p3, 4), rank(p2, 5));  // 2 runs before 3
  // On: node 1 (one P3 run) before node 0 (five), node 5 (no P3) before
  // node 4 (two); nodes 2 and 3, one run each: the P3 run first.
  whole.spare_p3 = true;
  c.begin(43, whole, 6);
  fill(c);
  EXPECT_EQ(c.on_node(0), 7u);  // the count itself (the P3 budget's) is unchanged
  EXPECT_LT(rank(p2, 1), rank(p3, 0));
  EXPECT_LT(rank(p3, 1), rank(p3, 0));
  EXPECT_LT(rank(p2, 5), rank(p3, 4));
  EXPECT_LT(rank(p3, 2), rank(p2, 3));
  EXPECT_LT(rank(p2, 3), rank(p3, 4));
  // Fewer runs still first among nodes of as many P3 runs.
  EXPECT_LT(rank(p2, 2), rank(p2, 1));
  // Every key stays below a part-node preemptor's kNotNeeded.
  for (int i = 0; i < 200; ++i) c.add(0, true);
  EXPECT_LT(c.crowd(0), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.crowd(7), 0u);  // outside the table
  // The next round starts from nothing.
  c.begin(44, whole, 6);
  EXPECT_EQ(c.crowd(0), 0u);
  c.add(0, true);
  EXPECT_EQ(c.crowd(0), 1u);
}

// A preemptor that needs GPUs on one node: the runs of the node that frees
// them with the fewest victims come first (the most GPUs first there),
// the node's other runs after everyone; free GPUs and runs already in
// their grace count as free; nodes it cannot use count for nothing.  Here
// every node holds only candidates (kClear) until the last case.
TEST(VictimOrderTest, PartNodePreemptorsTakeTheFewestRunsOfOneNode) {
  const TierTable t = TierTable::defaults();
  const uint32_t kClear = NodeCrowding::kClear;
  // A node of `total` GPUs, `free` of them free.
  auto G = [](uint32_t total, uint32_t free) { return NodeCrowding::NodeGpus{total, free}; };
  const uint8_t p3 = t.tier(TierId::kP3).victim_class, p2 = t.tier(TierId::kP2).victim_class;
  NodeCrowding c;
  NodeCrowding::Ask ask;
  ask.gpus = 4;
  c.begin(42, ask, 8);
  EXPECT_TRUE(c.gpus_on_a_node());
  EXPECT_FALSE(c.whole_nodes());
  // Node 0: 1 GPU free, three 1-GPU P3 runs (10, 11, 12): three victims.
  for (uint32_t j : {10u, 11u, 12u}) c.add(0, j, 1, G(4, 1), false, p3);
  // Node 1: nothing free, a 4-GPU P2 run (20) and two 2-GPU P3 runs
  // (21, 22): one victim, the P2 run.
  c.add(1, 20, 4, G(8, 0), false, p2);
  c.add(1, 21, 2, G(8, 0), false, p3);
  c.add(1, 22, 2, G(8, 0), false, p3);
  // Node 2: 2 GPUs free, a 2-GPU P3 run (30) and two 1-GPU P3 runs
  // (31, 32): one victim, the 2-GPU run.
  c.add(2, 31, 1, G(6, 2), false, p3);
  c.add(2, 30, 2, G(6, 2), false, p3);
  c.add(2, 32, 1, G(6, 2), false, p3);
  // Node 3: the preemptor cannot use it.
  c.add(3, 40, 4, std::nullopt, false, p3);
  // Node 4: 1 free, a 2-GPU run already in its grace (50), two 1-GPU P3
  // runs (51, 52): one more victim.
  c.add(4, 50, 2, G(5, 1), true, p3);
  c.add(4, 51, 1, G(5, 1), false, p3);
  c.add(4, 52, 1, G(5, 1), false, p3);
  // Node 5: not enough even with every run on it.
  c.add(5, 60, 1, G(1, 0), false, p3);
  c.close();
  EXPECT_EQ(c.fewest_victims(10), kClear + 3);
  EXPECT_EQ(c.fewest_victims(12), kClear + 3);
  EXPECT_EQ(c.fewest_victims(20), kClear + 1);
  EXPECT_EQ(c.fewest_victims(21), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(30), kClear + 1);
  EXPECT_EQ(c.fewest_victims(31), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(40), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(51), kClear + 1);  // 51 before 52 among equals
  EXPECT_EQ(c.fewest_victims(52), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(60), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(99), NodeCrowding::kNotNeeded);  // never offered
  // The runs to go, as the P3 budget reads them (without kClear).
  EXPECT_EQ(c.runs_to_free(10), 3u);
  EXPECT_EQ(c.runs_to_free(20), 1u);
  EXPECT_EQ(c.runs_to_free(51), 1u);
  EXPECT_EQ(c.runs_to_free(21), std::nullopt);
  EXPECT_EQ(c.runs_to_free(99), std::nullopt);
  auto rank = [&](uint8_t cls, uint32_t job, uint32_t minutes) {
    return victim_rank({cls, 0, minutes, c.fewest_victims(job)});
  };
  // One victim before three, whatever the tier or the run; among nodes
  // of one victim the tier order; the runs that free nothing useful last.
  EXPECT_LT(rank(p3, 30, 500), rank(p2, 20, 0));
  EXPECT_LT(rank(p2, 20, 500), rank(p3, 10, 0));
  EXPECT_LT(rank(p3, 10, 500), rank(p3, 31, 0));
  EXPECT_LT(rank(p3, 12, 500), rank(p3, 60, 0));
  // Among sets of one run, the one the victim order prefers: a node with
  // 2 GPUs free, a 4-GPU P2 run (80) and a 2-GPU P3 run (81): the P3 run
  // frees enough alone.  Among sets of two, likewise: none free, a 3-GPU
  // P2 run (90), two 2-GPU P3 runs (91, 92; 92 has run longer), a 1-GPU
  // P2 run (94) and a CPU-only run (93): 91 and 92 rather than the P2 run.
  NodeCrowding::Ask four;
  four.gpus = 4;
  c.begin(46, four, 8);
  c.add(0, 80, 4, G(8, 2), false, victim_rank({p2, 0, 0}));
  c.add(0, 81, 2, G(8, 2), false, victim_rank({p3, 0, 9}));
  c.add(1, 90, 3, G(8, 0), false, victim_rank({p2, 0, 0}));
  c.add(1, 91, 2, G(8, 0), false, victim_rank({p3, 0, 1}));
  c.add(1, 92, 2, G(8, 0), false, victim_rank({p3, 0, 5}));
  c.add(1, 93, 0, G(8, 0), false, victim_rank({p3, 0, 0}));
  c.add(1, 94, 1, G(8, 0), false, victim_rank({p2, 0, 0}));
  c.close();
  EXPECT_EQ(c.fewest_victims(81), kClear + 1);
  EXPECT_EQ(c.fewest_victims(80), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(91), kClear + 2);
  EXPECT_EQ(c.fewest_victims(92), kClear + 2);
  EXPECT_EQ(c.fewest_victims(90), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(93), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(94), NodeCrowding::kNotNeeded);
  // A node with the GPUs free already is held back by something else
  // (cores, memory): each of its runs, CPU-only ones too, may be the one.
  c.begin(47, four, 8);
  c.add(2, 100, 1, G(5, 4), false, victim_rank({p3, 0, 0}));
  c.add(2, 101, 0, G(5, 4), false, victim_rank({p3, 0, 0}));
  c.add(3, 102, 4, G(4, 0), false, victim_rank({p3, 0, 0}));
  c.close();
  EXPECT_EQ(c.fewest_victims(100), kClear + 1);
  EXPECT_EQ(c.fewest_victims(101), kClear + 1);
  EXPECT_EQ(c.fewest_victims(102), kClear + 1);
  // A run on two nodes counts where it helps most.
  NodeCrowding::Ask two;
  two.gpus = 8;
  c.begin(43, two, 8);
  c.add(6, 70, 4, G(8, 4), false, p3);  // node 6: 4 free + 70's 4: one victim
  c.add(7, 70, 4, G(8, 0), false, p3);  // node 7: 70 and 71 both needed
  c.add(7, 71, 4, G(8, 0), false, p3);
  c.close();
  EXPECT_EQ(c.fewest_victims(70), kClear + 1);
  EXPECT_EQ(c.fewest_victims(71), kClear + 2);
  // A node pinned by work that is no candidate's (a guaranteed job) comes
  // before any node that could be cleared, even at more victims: node 8
  // (4 GPUs of guaranteed work, 1 free, three 1-GPU P3 runs) before node 9
  // (one 8-GPU P3 run).
  c.begin(48, four, 10);
  for (uint32_t j : {110u, 111u, 112u}) c.add(8, j, 1, G(8, 1), false, p3);
  c.add(9, 120, 8, G(8, 0), false, p3);
  c.close();
  EXPECT_EQ(c.fewest_victims(110), 3u);
  EXPECT_EQ(c.fewest_victims(120), kClear + 1);
  EXPECT_EQ(c.runs_to_free(110), 3u);
  EXPECT_EQ(c.runs_to_free(120), 1u);
  EXPECT_LT(victim_rank({p3, 0, 500, c.fewest_victims(110)}),
            victim_rank({p3, 0, 0, c.fewest_victims(120)}));
  // Whole nodes and no ask count nothing here.
  c.begin(44, {}, 8);
  c.add(0, 10, 1, G(2, 1), false, p3);
  EXPECT_EQ(c.fewest_victims(10), 0u);
  EXPECT_EQ(c.runs_to_free(10), std::nullopt);
  NodeCrowding::Ask whole;
  whole.whole_nodes = true;
  c.begin(45, whole, 8);
  c.add(0, 10, 1, G(2, 1), false, p3);
  EXPECT_EQ(c.fewest_victims(10), 0u);
  EXPECT_EQ(c.runs_to_free(10), std::nullopt);
  EXPECT_EQ(c.preemptor(), 45u);
}

// Past the P3 budget's soft share (Ask::p3_first) a guaranteed preemptor
// takes the fewest P3 runs first, on whole nodes and on a node, before a
// node's pinning work and before the count of runs.
TEST(VictimOrderTest, PastTheSoftShareGuaranteedPreemptorsTakeTheFewestP3Runs) {
  const TierTable t = TierTable::defaults();
  const uint8_t p3 = t.tier(TierId::kP3).victim_class, p2 = t.tier(TierId::kP2).victim_class;
  auto G = [](uint32_t total, uint32_t free) { return NodeCrowding::NodeGpus{total, free}; };
  // Node 0: two 4-GPU P3 runs (10, 11).  Node 1: four 2-GPU P2 runs
  // (20-23).  Node 2: a 2-GPU P3 run (30), a 2-GPU P2 run (31) and 4 GPUs
  // of guaranteed work.  Node 3: a 4-GPU P2 run (40) and a 4-GPU P3 run
  // (41).  Every node has 8 GPUs, none free.
  auto fill = [&](NodeCrowding& c) {
    c.add(0, 10, 4, G(8, 0), false, victim_rank({p3, 0, 0}), true);
    c.add(0, 11, 4, G(8, 0), false, victim_rank({p3, 0, 0}), true);
    for (uint32_t j : {20u, 21u, 22u, 23u}) c.add(1, j, 2, G(8, 0), false, victim_rank({p2, 0, 0}));
    c.add(2, 30, 2, G(8, 0), false, victim_rank({p3, 0, 0}), true);
    c.add(2, 31, 2, G(8, 0), false, victim_rank({p2, 0, 0}));
    c.add(3, 40, 4, G(8, 0), false, victim_rank({p2, 0, 0}));
    c.add(3, 41, 4, G(8, 0), false, victim_rank({p3, 0, 0}), true);
    c.close();
  };
  NodeCrowding c;
  NodeCrowding::Ask four;
  four.gpus = 4;
  // Below the soft share: the fewest runs, the pinned node first (node 2,
  // two runs), then one run of nodes 0 and 3, the P3 one on node 3.
  c.begin(42, four, 4);
  fill(c);
  EXPECT_EQ(c.fewest_victims(30), 2u);
  EXPECT_EQ(c.fewest_victims(10), NodeCrowding::kClear + 1);
  EXPECT_EQ(c.fewest_victims(41), NodeCrowding::kClear + 1);
  EXPECT_EQ(c.fewest_victims(40), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(20), NodeCrowding::kClear + 2);
  // Past it: node 3's P2 run (no P3 run, one run), then node 1's two P2
  // runs, then node 2 (one P3 run, pinned), then node 0 (one P3 run).
  four.p3_first = true;
  c.begin(43, four, 4);
  fill(c);
  EXPECT_EQ(c.fewest_victims(40), NodeCrowding::p3_first_key(0, true, 1));
  EXPECT_EQ(c.fewest_victims(41), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(20), NodeCrowding::p3_first_key(0, true, 2));
  EXPECT_EQ(c.fewest_victims(21), NodeCrowding::p3_first_key(0, true, 2));
  EXPECT_EQ(c.fewest_victims(22), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(30), NodeCrowding::p3_first_key(1, false, 2));
  EXPECT_EQ(c.fewest_victims(31), NodeCrowding::p3_first_key(1, false, 2));
  EXPECT_EQ(c.fewest_victims(10), NodeCrowding::p3_first_key(1, true, 1));
  EXPECT_EQ(c.runs_to_free(20), 2u);  // the P3 budget's count is unchanged
  EXPECT_LT(c.fewest_victims(40), c.fewest_victims(20));
  EXPECT_LT(c.fewest_victims(20), c.fewest_victims(30));
  EXPECT_LT(c.fewest_victims(30), c.fewest_victims(10));
  // The key: P3 runs, then pinned before clearable, then runs; below
  // kNotNeeded however many.
  EXPECT_LT(NodeCrowding::p3_first_key(0, true, 6), NodeCrowding::p3_first_key(1, false, 1));
  EXPECT_LT(NodeCrowding::p3_first_key(1, false, 6), NodeCrowding::p3_first_key(1, true, 1));
  EXPECT_LT(NodeCrowding::p3_first_key(100, true, 100), NodeCrowding::kNotNeeded);
  // A node short even with every run on it is still no candidate's.
  c.begin(44, four, 4);
  c.add(0, 50, 2, G(8, 0), false, victim_rank({p3, 0, 0}), true);
  c.add(0, 51, 1, G(8, 0), false, victim_rank({p2, 0, 0}));
  c.close();
  EXPECT_EQ(c.fewest_victims(50), NodeCrowding::kNotNeeded);
  EXPECT_EQ(c.fewest_victims(51), NodeCrowding::kNotNeeded);
  // Whole nodes: node 0 holds one P3 run, node 1 three P2 runs, node 2
  // five P3 runs.  Below the share (even with WholeNodeSpareP3, where a
  // single P3 run counts as none) node 0 first; past it node 1 first.
  NodeCrowding::Ask whole;
  whole.whole_nodes = true;
  whole.spare_p3 = true;
  auto fill_whole = [](NodeCrowding& c) {
    c.add(0, true);
    for (int i = 0; i < 3; ++i) c.add(1, false);
    for (int i = 0; i < 5; ++i) c.add(2, true);
  };
  c.begin(45, whole, 3);
  fill_whole(c);
  EXPECT_LT(c.crowd(0), c.crowd(1));
  whole.p3_first = true;
  c.begin(46, whole, 3);
  fill_whole(c);
  EXPECT_LT(c.crowd(1), c.crowd(0));
  EXPECT_LT(c.crowd(0), c.crowd(2));
  EXPECT_EQ(c.on_node(2), 5u);
  for (int i = 0; i < 200; ++i) c.add(2, true);
  EXPECT_LT(c.crowd(2), NodeCrowding::kNotNeeded);
}

// Rounds as Slurm makes them: one preemptor's candidates in a row, then
// sorted or asked their mode (close); a round of one candidate is never
// sorted, so that candidate offered again starts the next round.
TEST(VictimOrderTest, NodeCrowdingRounds) {
  NodeCrowding c;
  int asked = 0;
  auto whole = [&] {
    ++asked;
    NodeCrowding::Ask a;
    a.whole_nodes = true;
    return a;
  };
  // Preemptor 7: candidates 1 (node 0) and 2 (node 0), then sorted.
  EXPECT_TRUE(c.offer(7, 1, whole, 4));
  add_on(c, {0});
  EXPECT_TRUE(c.offer(7, 2, whole, 4));
  add_on(c, {0});
  EXPECT_EQ(asked, 1);  // asked once per round
  c.close();
  EXPECT_EQ(c.on_node(0), 2u);
  // The same preemptor again: a new round, not added to the last.
  EXPECT_TRUE(c.offer(7, 1, whole, 4));
  add_on(c, {0});
  EXPECT_EQ(c.on_node(0), 1u);
  // Never closed (one candidate): candidate 1 offered again starts over.
  EXPECT_TRUE(c.offer(7, 1, whole, 4));
  add_on(c, {0});
  EXPECT_EQ(c.on_node(0), 1u);
  EXPECT_EQ(asked, 3);
  // Another preemptor, which does not need whole nodes: nothing counted.
  EXPECT_FALSE(c.offer(
      8, 1, [] { return NodeCrowding::Ask{}; }, 4));
  EXPECT_EQ(c.on_node(0), 0u);
}

}  // namespace
}  // namespace planc
