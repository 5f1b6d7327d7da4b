// PreemptionTracker with a fake clock: every action it asks the worker
// for, the per-job cap, and its state file.
#include "common/preemption_tracker.h"
#include "common/state_file.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

using K = TrackerAction::Kind;
using S = JobView::State;

constexpr time_t kT0 = 1800000000;  // 2027-01-15T08:00:00Z
constexpr TimeMs kT0ms = kT0 * 1000;
constexpr uint32_t kVictim = 10, kPreemptor = 99;

PreemptionEvent event(uint32_t victim = kVictim, uint32_t grace = 30, time_t when = kT0,
                      bool requeue = true, uint32_t preemptor = kPreemptor) {
  PreemptionEvent e;
  e.victim_job = victim;
  e.victim_tier = grace ? TierId::kP2 : TierId::kP3;
  e.preemptor_job = preemptor;
  e.preemptor_tier = TierId::kP0;
  e.when = when;
  e.grace_seconds = grace;
  e.requeue = requeue;
  e.account = "acct spot/ü";  // survives the state file
  e.advised_tier = 0;
  return e;
}

JobView view(S s, bool in_preemption = false, bool waits = false) {
  JobView v;
  v.state = s;
  v.in_preemption = in_preemption;
  v.waits_on_preemption = waits;
  return v;
}

// The victim running in its grace, the preemptor pending on it.
std::map<uint32_t, JobView> in_grace() {
  return {{kVictim, view(S::kRunning, true)}, {kPreemptor, view(S::kPending, false, true)}};
}

std::vector<K> kinds(const std::vector<TrackerAction>& a) {
  std::vector<K> k;
  for (const auto& x : a) k.push_back(x.kind);
  return k;
}

TEST(PreemptionTrackerTest, GraceEndsOnTimeNotBefore) {
  PreemptionTracker t(3, 86400);
  PreemptionEvent e = t.start(event(), kT0ms + 300);
  EXPECT_EQ(e.count_in_window, 1u);
  EXPECT_EQ(e.capped_until, 0);
  EXPECT_EQ(t.in_grace(), 1u);
  EXPECT_EQ(e.when_ms, kT0ms + 300);
  // Timed from the start in ms, not from its truncated second: a grace
  // started 0.3 s into its second lasts 30 s, not 29.7.
  EXPECT_EQ(t.next_due(), kT0ms + 300 + 30'000 + kGraceSlackMs);
  EXPECT_TRUE(t.plan(kT0ms + 30'000 + kGraceSlackMs, in_grace()).empty());
  EXPECT_TRUE(t.plan(kT0ms + 300 + 30'000, in_grace()).empty());
  auto a = t.plan(kT0ms + 300 + 30'000 + kGraceSlackMs, in_grace());
  ASSERT_EQ(kinds(a), std::vector<K>{K::kEndGrace});
  EXPECT_EQ(a[0].job_id, kVictim);
  EXPECT_EQ(a[0].preemptor, kPreemptor);
  EXPECT_EQ(a[0].event.when, kT0);
  // Not done (the job changed under the write lock): asked again.
  t.done(a[0], false);
  EXPECT_EQ(kinds(t.plan(kT0ms + 31'000, in_grace())), std::vector<K>{K::kEndGrace});
  t.done(a[0], true);
  EXPECT_EQ(t.in_grace(), 0u);
  EXPECT_FALSE(t.next_due());
  // The count stays: the preemption happened.
  EXPECT_EQ(t.ledger().count_in_window(kVictim, kT0 + 31), 1u);
}

// Slurm's scheduling pass preempts a whole node's jobs one after another
// while the worker waits for the job lock with the list of jobs it asked
// about: a victim started after that list is not "gone" (it was dropped,
// its grace outlived by 5-15 s and its preemptor started after 42-53 s),
// and a preemptor whose victims are not all in the view is not robbed.
TEST(PreemptionTrackerTest, VictimStartedAfterTheViewIsLookedAtNextTime) {
  constexpr uint32_t kSecond = 11;
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);
  const auto early = t.watched();
  EXPECT_EQ(early, (std::vector<uint32_t>{kVictim, kPreemptor}));
  t.start(event(kSecond), kT0ms + 1);  // between watched() and plan()
  auto seen = in_grace();              // what the worker saw of `early`
  EXPECT_TRUE(t.plan(kT0ms + 500, seen).empty());
  EXPECT_EQ(t.in_grace(), 2u);
  seen[kSecond] = view(S::kRunning, true);
  auto a = t.plan(kT0ms + 1 + 30'000 + kGraceSlackMs, seen);
  ASSERT_EQ(kinds(a), (std::vector<K>{K::kEndGrace, K::kEndGrace}));
  EXPECT_EQ(a[0].job_id, kVictim);
  EXPECT_EQ(a[1].job_id, kSecond);
  // A job slurmctld no longer has is in the view as gone: dropped.
  PreemptionTracker g(3, 86400);
  g.start(event(), kT0ms);
  EXPECT_EQ(kinds(g.plan(kT0ms + 500, {{kVictim, view(S::kGone)},
                                       {kPreemptor, view(S::kPending, false, true)}})),
            std::vector<K>{K::kReleasePreemptor});
  EXPECT_EQ(g.in_grace(), 0u);
  // The first victim requeued by Slurm, the second not in the view: the
  // preemptor is not robbed (it would be told to preempt again).
  PreemptionTracker r(3, 86400);
  r.start(event(), kT0ms);
  r.start(event(kSecond), kT0ms + 1);
  EXPECT_TRUE(r.plan(kT0ms + 500,
                     {{kVictim, view(S::kPending)}, {kPreemptor, view(S::kPending, false, true)}})
                  .empty());
  EXPECT_EQ(kinds(r.plan(kT0ms + 600, {{kVictim, view(S::kPending)},
                                       {kSecond, view(S::kPending)},
                                       {kPreemptor, view(S::kPending, false, true)}})),
            std::vector<K>{K::kReleasePreemptor});
}

// A preemptor with victims in their grace is offered those only: the
// tracker says which of a candidate's preemptor's victims are in their
// grace, and nothing once no grace of its own runs (no-grace victims,
// another preemptor's, a grace ended, a new round of preemption).
TEST(PreemptionTrackerTest, APreemptorsOwnVictimsInTheirGrace) {
  constexpr uint32_t kNoGrace = 11, kOther = 12, kOtherPreemptor = 98;
  PreemptionTracker t(3, 86400);
  EXPECT_FALSE(t.own_victim_in_grace(kPreemptor, kVictim)) << "nothing in flight";
  t.start(event(kNoGrace, 0), kT0ms);
  EXPECT_FALSE(t.own_victim_in_grace(kPreemptor, kNoGrace)) << "a no-grace victim is no grace";
  t.start(event(), kT0ms);
  t.start(event(kOther, 30, kT0, true, kOtherPreemptor), kT0ms);
  EXPECT_EQ(t.own_victim_in_grace(kPreemptor, kVictim), std::optional<bool>(true));
  EXPECT_EQ(t.own_victim_in_grace(kPreemptor, kNoGrace), std::optional<bool>(false));
  EXPECT_EQ(t.own_victim_in_grace(kPreemptor, kOther), std::optional<bool>(false))
      << "another preemptor's victim";
  EXPECT_EQ(t.own_victim_in_grace(kOtherPreemptor, kOther), std::optional<bool>(true));
  EXPECT_EQ(t.own_victim_in_grace(kOtherPreemptor, kVictim), std::optional<bool>(false));
  // Its grace over: the preemptor is offered everything again.
  auto seen = in_grace();
  seen[kOther] = view(S::kRunning, true);
  seen[kOtherPreemptor] = view(S::kPending, false, true);
  seen[kNoGrace] = view(S::kPending);
  for (const auto& a : t.plan(kT0ms + 30'000 + kGraceSlackMs, seen))
    if (a.kind == K::kEndGrace) t.done(a, true);
  EXPECT_FALSE(t.own_victim_in_grace(kPreemptor, kVictim));
  EXPECT_FALSE(t.own_victim_in_grace(kOtherPreemptor, kOther));
}

// What Slurm's callbacks change moves version(): the worker's view taken
// across such a change is stale.  Its own actions do not.
TEST(PreemptionTrackerTest, VersionMovesWithSlurmsCallbacksOnly) {
  PreemptionTracker t(3, 86400);
  const uint64_t v0 = t.version();
  t.start(event(), kT0ms);
  const uint64_t v1 = t.version();
  EXPECT_GT(v1, v0);
  auto a = t.plan(kT0ms + 30'000 + kGraceSlackMs, in_grace());
  ASSERT_EQ(kinds(a), std::vector<K>{K::kEndGrace});
  t.done(a[0], true);
  EXPECT_EQ(t.version(), v1);
  t.run_ended(kVictim, RunEndVerdict::kNotOurs, true, kT0ms + 31'000);
  EXPECT_GT(t.version(), v1);
}

TEST(PreemptionTrackerTest, CalledOffWhenThePreemptorNoLongerNeedsTheVictim) {
  struct Case {
    const char* name;
    JobView preemptor;
    const char* reason;  // nullptr: not called off
  };
  JobView cancelled = view(S::kFinished);
  cancelled.cancelled = true;
  JobView held = view(S::kPending, false, true);
  held.held = true;
  // Moved to another QoS while it waits (scontrol update QOS=): the
  // adapter's bits of the tiers it may preempt now (the victim is P2).
  JobView now_p3 = view(S::kPending, false, true);
  now_p3.tier = TierId::kP3;
  now_p3.preempts = 0;
  JobView now_p1 = view(S::kPending, false, true);
  now_p1.tier = TierId::kP1;
  now_p1.preempts = 0b1111;
  JobView no_tier = view(S::kPending, false, true);
  no_tier.preempts = 0;
  // Still P0, whose Preempts= a reload took P2 out of: the preemption
  // started before it goes on.
  JobView reloaded = view(S::kPending, false, true);
  reloaded.tier = TierId::kP0;
  reloaded.preempts = 0;
  const Case cases[] = {
      {"cancelled", cancelled, "job 99 was cancelled"},
      {"held", held, "job 99 is held"},
      {"moved to P3", now_p3, "job 99 is now P3, which does not preempt P2"},
      {"moved out of the tiers", no_tier, "job 99 is no longer in a Plan C tier"},
      {"moved to P1", now_p1, nullptr},
      {"P0 still, after a reload", reloaded, nullptr},
      {"ended", view(S::kFinished), "job 99 ended"},
      {"purged", view(S::kGone), "job 99 is gone"},
      {"started elsewhere", view(S::kRunning), "job 99 started without it"},
      {"still waiting", view(S::kPending, false, true), nullptr},
      {"pending, not yet marked", view(S::kPending), nullptr},
  };
  for (const Case& c : cases) {
    PreemptionTracker t(3, 86400);
    t.start(event(), kT0ms);
    auto seen = in_grace();
    seen[kPreemptor] = c.preemptor;
    auto a = t.plan(kT0ms + 3'000, seen);
    if (!c.reason) {
      EXPECT_TRUE(a.empty()) << c.name;
      continue;
    }
    ASSERT_EQ(kinds(a), std::vector<K>{K::kCallOff}) << c.name;
    EXPECT_EQ(a[0].reason, c.reason) << c.name;
    t.done(a[0], true);
    EXPECT_EQ(t.ledger().count_in_window(kVictim, kT0 + 3), 0u) << c.name << ": not counted";
    EXPECT_EQ(t.in_grace(), 0u) << c.name;
    EXPECT_FALSE(t.busy()) << c.name;
  }
}

// A controller took over from a job state saved before the preemption:
// Slurm sees the victim running with no preemption, while the tracker
// (its state file written within a second) has it in its grace.
TEST(PreemptionTrackerTest, AGraceSlurmLostGoesOnFromItsFirstStart) {
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);
  const std::map<uint32_t, JobView> lost = {{kVictim, view(S::kRunning)},
                                            {kPreemptor, view(S::kPending)}};
  EXPECT_TRUE(t.plan(kT0ms + 17'000, lost).empty()) << "kept, not dropped as over";
  EXPECT_EQ(t.in_grace(), 1u);
  // The new controller's scheduler preempts it again, for another job.
  EXPECT_EQ(t.resume_grace(kVictim, 1, 77, TierId::kP0, kT0ms + 18'000), std::nullopt)
      << "another run of the job is another preemption";
  EXPECT_EQ(t.resume_grace(kVictim, 0, 77, TierId::kP0, kT0ms + 18'000), 12'000 + kGraceSlackMs);
  EXPECT_EQ(t.ledger().count_in_window(kVictim, kT0 + 18), 1u) << "not counted again";
  // Its grace ends at its first deadline, for the preemptor now waiting.
  const std::map<uint32_t, JobView> again = {{kVictim, view(S::kRunning, true)},
                                             {77, view(S::kPending, false, true)}};
  EXPECT_TRUE(t.plan(kT0ms + 29'000, again).empty());
  auto a = t.plan(kT0ms + 30'000 + kGraceSlackMs, again);
  ASSERT_EQ(kinds(a), std::vector<K>{K::kEndGrace});
  EXPECT_EQ(a[0].preemptor, 77u);
  // Asked after its deadline: nothing left, the grace ends at once.
  PreemptionTracker late(3, 86400);
  late.start(event(), kT0ms);
  EXPECT_EQ(late.resume_grace(kVictim, 0, kPreemptor, TierId::kP0, kT0ms + 45'000), 0);
  EXPECT_EQ(PreemptionTracker(3, 86400).resume_grace(kVictim, 0, 1, TierId::kP0, kT0ms),
            std::nullopt);
}

TEST(PreemptionTrackerTest, AGraceSlurmLostAndNeverAskedAgainIsCalledOff) {
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);
  const std::map<uint32_t, JobView> lost = {{kVictim, view(S::kRunning)},
                                            {kPreemptor, view(S::kGone)}};
  EXPECT_TRUE(t.plan(kT0ms + 29'000, lost).empty());
  auto a = t.plan(kT0ms + 30'000 + kGraceSlackMs, lost);
  ASSERT_EQ(kinds(a), std::vector<K>{K::kCallOff});
  EXPECT_EQ(a[0].reason, "the controller now in charge did not preempt it again");
  t.done(a[0], true);
  EXPECT_EQ(t.ledger().count_in_window(kVictim, kT0 + 31), 0u) << "it ran on: not counted";
  EXPECT_FALSE(t.busy());
}

TEST(PreemptionTrackerTest, UnknownPreemptorIsNeverCalledOff) {
  PreemptionTracker t(3, 86400);
  t.start(event(kVictim, 30, kT0, true, 0), kT0ms);
  EXPECT_TRUE(t.plan(kT0ms + 3'000, {{kVictim, view(S::kRunning, true)}}).empty());
  EXPECT_EQ(kinds(t.plan(kT0ms + 31'000, {{kVictim, view(S::kRunning, true)}})),
            std::vector<K>{K::kEndGrace});
}

TEST(PreemptionTrackerTest, NoGraceVictimIsKilledOnlyIfStillDying) {
  for (S later : {S::kCompleting, S::kPending, S::kGone}) {
    PreemptionTracker t(3, 86400);
    t.start(event(kVictim, 0), kT0ms);
    EXPECT_EQ(t.next_due(), kT0ms + kNoGraceKillAfterMs);
    // Slurm's own requeue ran at once: the record it writes is Slurm's.
    EXPECT_EQ(t.run_ended(kVictim, RunEndVerdict::kNotOurs, true, kT0ms + 1'000).kind,
              PreemptionTracker::RunEnd::Kind::kNone);
    std::map<uint32_t, JobView> seen = {{kVictim, view(later)}};
    EXPECT_TRUE(t.plan(kT0ms + kNoGraceKillAfterMs - 1, seen).empty());
    auto a = t.plan(kT0ms + kNoGraceKillAfterMs, seen);
    EXPECT_EQ(kinds(a), later == S::kCompleting ? std::vector<K>{K::kKill} : std::vector<K>{});
    EXPECT_TRUE(t.plan(kT0ms + 5'000, seen).empty()) << "killed once";
  }
}

TEST(PreemptionTrackerTest, VictimThatEndsInItsGraceIsRequeuedOnce) {
  using RK = PreemptionTracker::RunEnd::Kind;
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);
  auto r = t.run_ended(kVictim, RunEndVerdict::kTreatAsPreempted, true, kT0ms + 1'000);
  EXPECT_EQ(r.kind, RK::kTreatAsPreempted);
  ASSERT_TRUE(r.event);
  EXPECT_EQ(r.event->preemptor_job, kPreemptor);
  EXPECT_EQ(t.in_grace(), 0u) << "no grace to end any more";
  JobView over = view(S::kCompleting, true);
  over.preempted_state = true;
  auto a = t.plan(kT0ms + 5'000, {{kVictim, over}, {kPreemptor, view(S::kPending, false, true)}});
  ASSERT_EQ(kinds(a), std::vector<K>{K::kRequeue});
  t.requeuing(kVictim);
  // Slurm logs the run again while requeueing it: not a second bill.
  EXPECT_EQ(t.run_ended(kVictim, RunEndVerdict::kNotOurs, true, kT0ms + 1'000).kind,
            RK::kDuplicate);
  t.done(a[0], true);
  EXPECT_EQ(t.run_ended(kVictim, RunEndVerdict::kNotOurs, true, kT0ms + 1'000).kind, RK::kNone);
  EXPECT_TRUE(t.plan(kT0ms + 6'000, {{kVictim, view(S::kPending)}}).empty());
  EXPECT_EQ(t.ledger().count_in_window(kVictim, kT0 + 6), 1u);
}

TEST(PreemptionTrackerTest, OtherEndingsInTheGraceNeedNoAction) {
  using RK = PreemptionTracker::RunEnd::Kind;
  struct Case {
    RunEndVerdict verdict;
    bool requeueable;
    RK kind;
  };
  const Case cases[] = {
      {RunEndVerdict::kTreatAsPreempted, false, RK::kTreatAsPreempted},
      {RunEndVerdict::kFinished, true, RK::kFinished},
      {RunEndVerdict::kCancelledInGrace, true, RK::kCancelledInGrace},
  };
  for (const Case& c : cases) {
    PreemptionTracker t(3, 86400);
    t.start(event(), kT0ms);
    auto r = t.run_ended(kVictim, c.verdict, c.requeueable, kT0ms + 1'000);
    EXPECT_EQ(r.kind, c.kind);
    JobView over = view(S::kFinished, true);
    over.preempted_state = c.kind == RK::kTreatAsPreempted;
    over.cancelled = c.kind == RK::kCancelledInGrace;
    EXPECT_TRUE(t.plan(kT0ms + 40'000, {{kVictim, over}}).empty());
    EXPECT_FALSE(t.busy());
  }
}

// A scheduling pass may end the grace before the worker does (Slurm checks
// the grace's end too): the note is still finished, and the victim killed
// if it outlives Slurm's SIGTERM.
TEST(PreemptionTrackerTest, GraceEndedBySlurmFirst) {
  using RK = PreemptionTracker::RunEnd::Kind;
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);
  auto r = t.run_ended(kVictim, RunEndVerdict::kNotOurs, true, kT0ms + 30'001);
  EXPECT_EQ(r.kind, RK::kSlurmEnded);
  ASSERT_TRUE(r.event);
  EXPECT_EQ(r.event->preemptor_job, kPreemptor);
  EXPECT_EQ(t.in_grace(), 0u);
  std::map<uint32_t, JobView> dying = {{kVictim, view(S::kCompleting)}};
  EXPECT_TRUE(t.plan(kT0ms + 30'001 + kNoGraceKillAfterMs - 1, dying).empty());
  EXPECT_EQ(kinds(t.plan(kT0ms + 30'001 + kNoGraceKillAfterMs, dying)), std::vector<K>{K::kKill});
  EXPECT_EQ(t.ledger().count_in_window(kVictim, kT0 + 31), 1u);
}

// A run that ended on its own during the grace without run_ended() (Slurm's
// JobCompType is not jobcomp/planc) is still requeued.
TEST(PreemptionTrackerTest, EndWithoutTheCompletionHookIsStillRequeued) {
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);
  EXPECT_EQ(kinds(t.plan(kT0ms + 5'000, {{kVictim, view(S::kFinished, true)}})),
            std::vector<K>{K::kRequeue});
}

TEST(PreemptionTrackerTest, RobbedPreemptorIsReleasedOnceItsVictimsAreGone) {
  PreemptionTracker t(3, 86400);
  t.start(event(kVictim, 0), kT0ms);
  t.start(event(kVictim + 1, 0), kT0ms);
  std::map<uint32_t, JobView> seen = {{kVictim, view(S::kPending)},
                                      {kVictim + 1, view(S::kCompleting)},
                                      {kPreemptor, view(S::kPending, false, true)}};
  EXPECT_TRUE(t.plan(kT0ms + 100, seen).empty()) << "one victim still holds its resources";
  seen[kVictim + 1] = view(S::kPending);
  auto a = t.plan(kT0ms + 200, seen);
  ASSERT_EQ(kinds(a), std::vector<K>{K::kReleasePreemptor});
  EXPECT_EQ(a[0].job_id, kPreemptor);
  EXPECT_TRUE(t.plan(kT0ms + 300, seen).empty()) << "released once";
}

// A victim whose grace has ended still holds its nodes while it
// completes: its preemptor is not released until it is gone, even when
// its other victims (no grace) are gone already.  (Released then, it
// preempted a second set of runs on other nodes a fraction of a second
// before the first set's nodes came free: seen on the steady-state
// replay, three more P3 runs for one 16-GPU P1 job.)
TEST(PreemptionTrackerTest, PreemptorWaitsForVictimsCompletingAfterTheirGrace) {
  constexpr uint32_t kNoGrace = 11;
  PreemptionTracker t(3, 86400);
  t.start(event(kNoGrace, 0), kT0ms);
  t.start(event(), kT0ms);  // 30 s of grace
  std::map<uint32_t, JobView> seen = {{kNoGrace, view(S::kPending)},
                                      {kVictim, view(S::kRunning, true)},
                                      {kPreemptor, view(S::kPending, false, true)}};
  auto a = t.plan(kT0ms + 30'000 + kGraceSlackMs, seen);
  ASSERT_EQ(kinds(a), std::vector<K>{K::kEndGrace});
  t.done(a[0], true);
  seen[kVictim] = view(S::kCompleting);
  EXPECT_TRUE(t.plan(kT0ms + 30'100 + kGraceSlackMs, seen).empty())
      << "the graced victim is still completing";
  EXPECT_FALSE(t.own_victim_in_grace(kPreemptor, kVictim)) << "no grace of its own runs";
  seen[kVictim] = view(S::kPending);
  a = t.plan(kT0ms + 30'200 + kGraceSlackMs, seen);
  ASSERT_EQ(kinds(a), std::vector<K>{K::kReleasePreemptor});
  EXPECT_EQ(a[0].job_id, kPreemptor);
  // A called-off victim runs on: its preemptor does not wait for it.
  PreemptionTracker c(3, 86400);
  c.start(event(kNoGrace, 0), kT0ms);
  c.start(event(), kT0ms);
  seen = {{kNoGrace, view(S::kPending)},
          {kVictim, view(S::kRunning, true)},
          {kPreemptor, view(S::kPending, false, true)}};
  PreemptionEvent e = event();
  c.done({K::kCallOff, kVictim, kPreemptor, "", e}, true);
  seen[kVictim] = view(S::kRunning);
  EXPECT_EQ(kinds(c.plan(kT0ms + 1'000, seen)), std::vector<K>{K::kReleasePreemptor});
}

// A victim requeued and started again before the worker looked holds
// resources again, but not the ones its preemptor waits for: a new run.
TEST(PreemptionTrackerTest, RobbedPreemptorIsReleasedWhenItsVictimRunsAgain) {
  PreemptionTracker t(3, 86400);
  PreemptionEvent e = event(kVictim, 0);
  e.victim_run = 0;
  t.start(e, kT0ms);
  JobView again = view(S::kRunning);
  again.run = 1;  // requeued once, running its second run
  std::map<uint32_t, JobView> seen = {{kVictim, again},
                                      {kPreemptor, view(S::kPending, false, true)}};
  EXPECT_EQ(kinds(t.plan(kT0ms + 6'000, seen)), std::vector<K>{K::kReleasePreemptor});
  JobView same = view(S::kRunning);  // the preempted run itself: still dying
  PreemptionTracker t2(3, 86400);
  t2.start(e, kT0ms);
  EXPECT_TRUE(t2.plan(kT0ms + 100, {{kVictim, same}, {kPreemptor, view(S::kPending, false, true)}})
                  .empty());
  // Requeued but still completing: Slurm has counted the new run already,
  // but the nodes are not free; releasing the preemptor now would have it
  // preempt a second victim (seen in CI: both P3 jobs requeued for one P0).
  JobView completing = view(S::kCompleting);
  completing.run = 1;
  PreemptionTracker t3(3, 86400);
  t3.start(e, kT0ms);
  EXPECT_TRUE(
      t3.plan(kT0ms + 100, {{kVictim, completing}, {kPreemptor, view(S::kPending, false, true)}})
          .empty());
}

TEST(PreemptionTrackerTest, PreemptorThatRunsIsForgotten) {
  PreemptionTracker t(3, 86400);
  t.start(event(kVictim, 0), kT0ms);
  auto a = t.plan(kT0ms + 1'000, {{kVictim, view(S::kPending)}, {kPreemptor, view(S::kRunning)}});
  EXPECT_TRUE(a.empty());
  EXPECT_FALSE(t.busy());
}

TEST(PreemptionTrackerTest, TheThirdPreemptionCapsUntilTheFirstLeavesTheWindow) {
  PreemptionTracker t(3, 86400);
  for (int i = 0; i < 3; i++) {
    PreemptionEvent e = t.start(event(kVictim, 0, kT0 + i * 3600), (kT0 + i * 3600) * 1000);
    EXPECT_EQ(e.count_in_window, static_cast<uint32_t>(i + 1));
    EXPECT_EQ(e.capped_until, i == 2 ? kT0 + 86400 : 0);
  }
  EXPECT_TRUE(t.capped(kVictim, kT0 + 86399));
  EXPECT_FALSE(t.capped(kVictim, kT0 + 86400));
}

TEST(PreemptionTrackerTest, StateFileKeepsGracesAcrossARestart) {
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);                // in grace
  t.start(event(kVictim + 1, 0), kT0ms);  // no grace: not saved
  t.start(event(kVictim + 2), kT0ms);
  t.run_ended(kVictim + 2, RunEndVerdict::kTreatAsPreempted, true,
              kT0ms + 1'000);  // requeue pending
  EXPECT_TRUE(t.dirty());
  std::string text = t.serialize();
  EXPECT_FALSE(t.dirty());
  auto r = PreemptionTracker::parse(text, 3, 86400);
  ASSERT_TRUE(r.ok()) << r.error();
  PreemptionTracker back = std::move(r).value();
  EXPECT_EQ(back.ledger(), t.ledger());
  EXPECT_EQ(back.in_grace(), 1u);
  EXPECT_EQ(back.serialize(), t.serialize());
  // After the restart the grace still ends on time, with the note's facts.
  JobView over = view(S::kCompleting, true);
  over.preempted_state = true;
  auto seen = in_grace();
  seen[kVictim + 2] = over;
  auto a = back.plan(kT0ms + 30'000 + kGraceSlackMs, seen);
  ASSERT_EQ(kinds(a), (std::vector<K>{K::kEndGrace, K::kRequeue}));
  PreemptionEvent want = event();
  want.count_in_window = 1;
  want.when_ms = kT0ms;
  EXPECT_EQ(a[0].event, want);
}

TEST(PreemptionTrackerTest, ReadsVersion1AndRejectsDamage) {
  PreemptLedger old(3, 86400);
  old.record(5, kT0);
  old.record(5, kT0 + 10);
  auto v1 = PreemptionTracker::parse(old.serialize(), 3, 86400);
  ASSERT_TRUE(v1.ok()) << v1.error();
  EXPECT_EQ(v1.value().ledger().count_in_window(5, kT0 + 20), 2u);

  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);
  std::string good = t.serialize();
  std::string flipped = good;
  flipped[good.find("V ") + 2] ^= 1;
  for (const std::string& bad : {good.substr(0, good.size() / 2), flipped, std::string("x\n")}) {
    auto r = PreemptionTracker::parse(bad, 3, 86400);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(PreemptionTrackerTest, ReadsVersion2PreemptorsAsFirstRuns) {
  // v2 listed a preemptor's victims without their runs: read as run 0, and
  // written back (now v5) with the runs.
  auto v2 = PreemptionTracker::parse(frame_state("planc-preempt-state v2", "P 20 1000 10 11\n", 1),
                                     3, 86400);
  ASSERT_TRUE(v2.ok()) << v2.error();
  EXPECT_EQ(v2.value().watched(), (std::vector<uint32_t>{10, 11, 20}));
  std::string v5 = v2.value().serialize();
  EXPECT_EQ(v5.rfind("planc-preempt-state v5\n", 0), 0u) << v5;
  EXPECT_NE(v5.find("P 20 1000 10 0 11 0\n"), std::string::npos) << v5;
  // v3 pairs each victim with its run: an odd count is damage.
  EXPECT_FALSE(PreemptionTracker::parse(
                   frame_state("planc-preempt-state v3", "P 20 1000 10 0 11\n", 1), 3, 86400)
                   .ok());
}

TEST(PreemptionTrackerTest, RestartKeepsTheGracesMillisecondStart) {
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms + 900);
  std::string text = t.serialize();
  EXPECT_EQ(text.rfind("planc-preempt-state v5\n", 0), 0u) << text;
  auto back = PreemptionTracker::parse(text, 3, 86400);
  ASSERT_TRUE(back.ok()) << back.error();
  PreemptionTracker r = std::move(back).value();
  EXPECT_EQ(r.next_due(), kT0ms + 900 + 30'000 + kGraceSlackMs);
  EXPECT_TRUE(r.plan(kT0ms + 30'000 + kGraceSlackMs, in_grace()).empty());
  EXPECT_EQ(kinds(r.plan(kT0ms + 900 + 30'000 + kGraceSlackMs, in_grace())),
            std::vector<K>{K::kEndGrace});

  // A v3 file (no ms): timed from the end of its second, never short.
  auto v3 = PreemptionTracker::parse(
      frame_state("planc-preempt-state v3",
                  "V 10 0 " + std::to_string(kT0) + " 30 1 1 0 2 99 0 1 a:acct\n", 1),
      3, 86400);
  ASSERT_TRUE(v3.ok()) << v3.error();
  EXPECT_EQ(v3.value().next_due(), kT0ms + 1'000 + 30'000 + kGraceSlackMs);
  // A v4 victim without its ms start is damage.
  EXPECT_FALSE(PreemptionTracker::parse(
                   frame_state("planc-preempt-state v4",
                               "V 10 0 " + std::to_string(kT0) + " 30 1 1 0 2 99 0 1 a:acct\n", 1),
                   3, 86400)
                   .ok());
}

TEST(PreemptionTrackerTest, ForgetsEndedJobsButNotThoseInFlight) {
  PreemptionTracker t(3, 86400);
  t.start(event(), kT0ms);
  t.start(event(kVictim + 1, 0), kT0ms);
  t.plan(kT0ms + 1'000, {{kVictim, view(S::kRunning, true)},
                         {kVictim + 1, view(S::kGone)},
                         {kPreemptor, view(S::kPending, false, true)}});
  t.forget({kVictim, kVictim + 1});
  EXPECT_EQ(t.ledger().count_in_window(kVictim, kT0 + 1), 1u) << "in its grace";
  EXPECT_EQ(t.ledger().count_in_window(kVictim + 1, kT0 + 1), 0u);
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

// A preempted --spot-fallback job being requeued: its move is saved with
// the rest, so a restart between the preemption and the requeue keeps it.
TEST(PreemptionTrackerTest, AFallbackBeingRequeuedSurvivesARestart) {
  PreemptionTracker t(3, 86400);
  EXPECT_FALSE(t.dirty());
  t.expect_fallback(42, 3);
  EXPECT_TRUE(t.dirty());
  auto back = PreemptionTracker::parse(t.serialize(), 3, 86400);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back.value().fallbacks(), (std::map<uint32_t, uint32_t>{{42, 3}}));
  PreemptionTracker r = std::move(back).value();
  r.fallback_settled(42);
  EXPECT_TRUE(r.dirty());
  EXPECT_TRUE(r.fallbacks().empty());
  // An older file has no fallback records, and may not have one.
  EXPECT_FALSE(
      PreemptionTracker::parse(frame_state("planc-preempt-state v4", "F 42 3\n", 1), 3, 86400)
          .ok());
}

}  // namespace
}  // namespace planc
