#include <gtest/gtest.h>

#include "common/submit_policy.h"

namespace planc {
namespace {

const PlancConfig& cfg() {
  static const PlancConfig c = parse_config("", "planc.conf").value();
  return c;
}

SubmitRequest assoc(std::vector<std::string> allowed, std::string def = "") {
  SubmitRequest r;
  r.assoc_known = true;
  r.account = "acme";
  r.allowed_qos = std::move(allowed);
  r.assoc_default_qos = std::move(def);
  return r;
}

TEST(SubmitPolicyTest, Table) {
  const std::vector<std::string> spot = {"p2-spot", "p3-spot", "normal"};
  const std::vector<std::string> all = {"p0-lease", "p1-guaranteed", "p2-spot", "p3-spot"};
  struct Case {
    const char* what;
    std::string typed;
    std::vector<std::string> allowed;
    std::string def;
    Requeue requeue;
    bool known;
    SubmitError error;
    std::string qos;
    bool set_requeue;
  };
  const Case cases[] = {
      {"alias maps to canonical", "plan-a-spot", spot, "", Requeue::kUnset, true,
       SubmitError::kNone, "p2-spot", true},
      {"p2 maps", "p2", spot, "", Requeue::kUnset, true, SubmitError::kNone, "p2-spot", true},
      {"case-insensitive", "PLAN-B-SPOT", spot, "", Requeue::kUnset, true, SubmitError::kNone,
       "p3-spot", true},
      {"canonical unchanged", "p3-spot", spot, "", Requeue::kUnset, true, SubmitError::kNone,
       "p3-spot", true},
      {"--no-requeue kept", "p2", spot, "", Requeue::kNo, true, SubmitError::kNone, "p2-spot",
       false},
      {"--requeue kept", "p2", spot, "", Requeue::kYes, true, SubmitError::kNone, "p2-spot", false},
      {"guaranteed tier not made requeueable", "lease", all, "", Requeue::kUnset, true,
       SubmitError::kNone, "p0-lease", false},
      {"no qos: association default", "", all, "p1-guaranteed", Requeue::kUnset, true,
       SubmitError::kNone, "p1-guaranteed", false},
      {"no qos, default not a tier: planc default", "", spot, "normal", Requeue::kUnset, true,
       SubmitError::kNone, "p3-spot", true},
      {"no qos, no default: planc default", "", spot, "", Requeue::kUnset, true, SubmitError::kNone,
       "p3-spot", true},
      {"no qos, planc default not entitled",
       "",
       {"p0-lease"},
       "",
       Requeue::kUnset,
       true,
       SubmitError::kNotEntitled,
       "",
       false},
      {"unknown tier", "gold", all, "", Requeue::kUnset, true, SubmitError::kUnknownTier, "",
       false},
      {"non-tier QoS is unknown", "normal", spot, "", Requeue::kUnset, true,
       SubmitError::kUnknownTier, "", false},
      {"unentitled tier", "p0", spot, "", Requeue::kUnset, true, SubmitError::kNotEntitled, "",
       false},
      {"no association: names mapped, Slurm decides",
       "p0",
       {},
       "",
       Requeue::kUnset,
       false,
       SubmitError::kNone,
       "p0-lease",
       false},
  };
  for (const Case& c : cases) {
    SubmitRequest r = assoc(c.allowed, c.def);
    r.requested_qos = c.typed;
    r.requeue = c.requeue;
    r.assoc_known = c.known;
    SubmitDecision d = decide_submit(cfg(), r);
    EXPECT_EQ(d.error, c.error) << c.what << ": " << d.message;
    if (c.error == SubmitError::kNone) {
      EXPECT_EQ(d.qos, c.qos) << c.what;
      EXPECT_EQ(d.qos_changed, c.qos != c.typed) << c.what;
    }
    EXPECT_EQ(d.set_requeue, c.set_requeue) << c.what;
  }
}

TEST(SubmitPolicyTest, UnknownTierMessageListsValidNames) {
  SubmitRequest r = assoc({"p3-spot"});
  r.requested_qos = "gold";
  SubmitDecision d = decide_submit(cfg(), r);
  EXPECT_EQ(d.message,
            "unknown tier 'gold' in --qos. Valid tiers: p0-lease (p0, plan-a-lease, lease); "
            "p1-guaranteed (p1, plan-b-guaranteed, guaranteed); p2-spot (p2, plan-a-spot, "
            "elastic); p3-spot (p3, plan-b-spot, batch)");
}

TEST(SubmitPolicyTest, NotEntitledMessageNamesTierAndUsableTiers) {
  SubmitRequest r = assoc({"p2-spot", "p3-spot", "normal"});
  r.requested_qos = "plan-a-lease";
  SubmitDecision d = decide_submit(cfg(), r);
  EXPECT_EQ(d.message,
            "tier P0 (p0-lease, Plan A long-term lease) is not available to account acme. "
            "account acme may use: p2-spot (P2), p3-spot (P3). Submit with --qos=<one of "
            "those>, or ask your account coordinator for access.");
  r.allowed_qos = {"normal"};
  d = decide_submit(cfg(), r);
  EXPECT_NE(d.message.find("may use no Plan C tier"), std::string::npos) << d.message;
}

TEST(SubmitPolicyTest, Modify) {
  struct Case {
    const char* what;
    std::string typed;
    bool privileged;
    SubmitError error;
    std::string qos;
  };
  const Case cases[] = {
      {"no qos change", "", false, SubmitError::kNone, ""},
      {"into entitled tier via alias", "p3", false, SubmitError::kNone, "p3-spot"},
      {"into unentitled tier", "p0", false, SubmitError::kNotEntitled, ""},
      {"operator may", "p0", true, SubmitError::kNone, "p0-lease"},
      {"unknown even for operator", "gold", true, SubmitError::kUnknownTier, ""},
      // slurmctld/planc moves free attempts as SlurmUser, an operator.
      {"free attempt: user may not", "p3", false, SubmitError::kFreeAttempt, ""},
      {"free attempt: slurmctld/planc back to P3", "p3-spot", true, SubmitError::kNone, "p3-spot"},
      {"free attempt: no qos change", "", false, SubmitError::kNone, ""},
  };
  for (const Case& c : cases) {
    SubmitRequest r = assoc({"p2-spot", "p3-spot"});
    r.requested_qos = c.typed;
    r.privileged = c.privileged;
    r.on_free_attempt = std::string(c.what).rfind("free attempt", 0) == 0;
    SubmitDecision d = decide_modify(cfg(), r);
    EXPECT_EQ(d.error, c.error) << c.what;
    if (d.ok()) {
      EXPECT_EQ(d.qos, c.qos) << c.what;
    }
    EXPECT_FALSE(d.set_requeue) << c.what;
  }
}

TEST(SubmitPolicyTest, LowPriorityKeptAgainstItsOwner) {
  enum class Low { kNone, kFreeAttempt, kReplica };
  struct Case {
    const char* what;
    Low low;
    std::optional<int64_t> nice;
    bool sets_priority;
    bool privileged;
    SubmitError error;
    const char* says;
  };
  const Case cases[] = {
      {"attempt: Nice below the floor", Low::kFreeAttempt, 0, false, false,
       SubmitError::kLowPriority, "its Nice may be raised, not set below 40000"},
      {"attempt: Nice one under the floor", Low::kFreeAttempt, 39999, false, false,
       SubmitError::kLowPriority, "Nice +40000"},
      {"attempt: Nice at the floor", Low::kFreeAttempt, 40000, false, false, SubmitError::kNone,
       ""},
      {"attempt: Nice raised", Low::kFreeAttempt, 50000, false, false, SubmitError::kNone, ""},
      {"attempt: a priority by hand", Low::kFreeAttempt, std::nullopt, true, false,
       SubmitError::kLowPriority, "a priority set by hand would clear that Nice"},
      {"attempt: hold or release", Low::kFreeAttempt, std::nullopt, false, false,
       SubmitError::kNone, ""},
      {"attempt: an operator may", Low::kFreeAttempt, 0, true, true, SubmitError::kNone, ""},
      {"replica: any lower Nice", Low::kReplica, 2147483644, false, false,
       SubmitError::kLowPriority, "capacity-infusion replica"},
      {"replica: a priority by hand", Low::kReplica, std::nullopt, true, false,
       SubmitError::kLowPriority, "capacity-infusion replica"},
      {"replica: hold or release", Low::kReplica, std::nullopt, false, false, SubmitError::kNone,
       ""},
      {"replica: an operator may", Low::kReplica, 0, false, true, SubmitError::kNone, ""},
      {"plain job: Nice 0", Low::kNone, 0, true, false, SubmitError::kNone, ""},
  };
  for (const Case& c : cases) {
    SubmitRequest r = assoc({"p2-spot", "p3-spot"});
    r.replica = c.low == Low::kReplica;
    r.nice_floor = c.low == Low::kReplica ? 2147483645 : c.low == Low::kNone ? 0 : 40000;
    r.on_free_attempt = c.low == Low::kFreeAttempt;
    r.nice = c.nice;
    r.sets_priority = c.sets_priority;
    r.privileged = c.privileged;
    SubmitDecision d = decide_modify(cfg(), r);
    EXPECT_EQ(d.error, c.error) << c.what;
    EXPECT_NE(d.message.find(c.says), std::string::npos) << c.what << ": " << d.message;
  }
  // Refused before the QoS is judged: an update that also moves the tier.
  SubmitRequest r = assoc({"p2-spot", "p3-spot"});
  r.nice_floor = 40000;
  r.on_free_attempt = true;
  r.nice = 0;
  r.requested_qos = "p2";
  EXPECT_EQ(decide_modify(cfg(), r).error, SubmitError::kLowPriority);
  // A replica's tier is its pool's, but an operator's to change.
  SubmitRequest rep = assoc({"p1-guaranteed", "p3-spot"});
  rep.replica = true;
  rep.nice_floor = 2147483645;
  rep.requested_qos = "p3";
  SubmitDecision d = decide_modify(cfg(), rep);
  EXPECT_EQ(d.error, SubmitError::kLowPriority);
  EXPECT_NE(d.message.find("its tier is its pool's"), std::string::npos) << d.message;
  rep.privileged = true;
  EXPECT_EQ(decide_modify(cfg(), rep).error, SubmitError::kNone);
}

TEST(SubmitPolicyTest, AFreeAttemptKeepsItsSize) {
  SubmitRequest r = assoc({"p2-spot", "p3-spot"});
  r.on_free_attempt = true;
  r.resizes = true;
  SubmitDecision d = decide_modify(cfg(), r);
  EXPECT_EQ(d.error, SubmitError::kFreeAttempt);
  EXPECT_NE(d.message.find("its size cannot change while the attempt lasts"), std::string::npos);
  r.privileged = true;  // slurmctld/planc or an operator
  EXPECT_EQ(decide_modify(cfg(), r).error, SubmitError::kNone);
  r.privileged = false;
  r.on_free_attempt = false;  // any other job: Slurm's rules
  EXPECT_EQ(decide_modify(cfg(), r).error, SubmitError::kNone);
}

TEST(SubmitPolicyTest, SpotCap) {
  PlancConfig c = parse_config("SpotCapP3=1\nSpotCapTimeZone=UTC", "planc.conf").value();
  struct Case {
    const char* what;
    std::string typed;
    uint64_t used;
    SubmitError error;
  };
  const Case cases[] = {
      {"P3 under the cap", "p3", 3599, SubmitError::kNone},
      {"P3 at the cap", "p3", 3600, SubmitError::kSpotCap},
      {"P2 has no cap", "p2", 99999, SubmitError::kNone},
      {"guaranteed tiers have none", "p0", 99999, SubmitError::kNone},
  };
  for (const Case& k : cases) {
    SubmitRequest r = assoc({"p0-lease", "p2-spot", "p3-spot"});
    r.requested_qos = k.typed;
    SubmitDecision d = decide_submit(c, r);
    apply_spot_cap(c, entitlement_of(r), k.used, 1796000000, &d);
    EXPECT_EQ(d.error, k.error) << k.what;
    if (d.ok()) continue;
    EXPECT_EQ(d.message.rfind("daily spot cap reached: account acme", 0), 0u);
    // acme may use P0 but not P1: it is told P0, P3's second choice.
    EXPECT_NE(d.message.find("use a guaranteed tier: --qos=p0-lease (P0"), std::string::npos)
        << d.message;
  }
}

}  // namespace
}  // namespace planc

namespace planc {
namespace {

TEST(SubmitPolicyTest, GuaranteedPartitionRouting) {
  static const PlancConfig c = parse_config("GuaranteedPartition=guaranteed", "planc.conf").value();
  const std::vector<std::string> all = {"p0-lease", "p1-guaranteed", "p2-spot", "p3-spot"};
  struct Case {
    const char* what;
    std::string typed, partition;
    SubmitError error;
    std::string set_partition;
  };
  const Case cases[] = {
      {"P0 without -p goes to the capped partition", "p0", "", SubmitError::kNone, "guaranteed"},
      {"P1 without -p too", "p1", "", SubmitError::kNone, "guaranteed"},
      {"P0 naming it is fine", "p0", "Guaranteed", SubmitError::kNone, ""},
      {"P0 elsewhere would escape the cap", "p0", "gpu", SubmitError::kWrongPartition, ""},
      {"P2 stays where it is", "p2", "", SubmitError::kNone, ""},
      {"P2 in the capped partition", "p2", "gpu,guaranteed", SubmitError::kWrongPartition, ""},
      {"P3 in another partition", "p3", "gpu", SubmitError::kNone, ""},
  };
  for (const Case& k : cases) {
    SubmitRequest r = assoc(all);
    r.requested_qos = k.typed;
    r.partition = k.partition;
    SubmitDecision d = decide_submit(c, r);
    EXPECT_EQ(d.error, k.error) << k.what << ": " << d.message;
    EXPECT_EQ(d.set_partition, k.set_partition) << k.what;
  }
  // Without GuaranteedPartition nothing is routed.
  SubmitRequest r = assoc(all);
  r.requested_qos = "p0";
  EXPECT_EQ(decide_submit(cfg(), r).set_partition, "");
}

TEST(SubmitPolicyTest, ModifyMovesBetweenPartitionsWithTheTier) {
  static const PlancConfig c = parse_config("GuaranteedPartition=guaranteed", "planc.conf").value();
  struct Case {
    const char* what;
    std::string typed, current;
    std::string set_partition;
  };
  const Case cases[] = {
      {"P3 -> P0: into the capped partition", "p0", "gpu", "guaranteed"},
      {"P0 -> P2: back to the default partition", "p2", "guaranteed", "gpu"},
      {"P2 -> P3: stays", "p3", "gpu", ""},
      {"P0 -> P1: stays", "p1", "guaranteed", ""},
  };
  for (const Case& k : cases) {
    SubmitRequest r = assoc({"p0-lease", "p1-guaranteed", "p2-spot", "p3-spot"});
    r.requested_qos = k.typed;
    r.current_partition = k.current;
    r.default_partition = "gpu";
    SubmitDecision d = decide_modify(c, r);
    EXPECT_TRUE(d.ok()) << k.what << ": " << d.message;
    EXPECT_EQ(d.set_partition, k.set_partition) << k.what;
  }
}

}  // namespace
}  // namespace planc
