#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "common/config.h"

namespace planc {
namespace {

TEST(ConfigTest, EmptyFileGivesPolicyDefaults) {
  auto r = parse_config("", "planc.conf");
  ASSERT_TRUE(r.ok()) << r.error();
  const PlancConfig& c = r.value();
  EXPECT_EQ(c.default_tier, TierId::kP3);
  EXPECT_EQ(c.guaranteed_cap_percent, 80u);
  EXPECT_EQ(c.preempt_max_count, 3u);
  EXPECT_EQ(c.preempt_window_seconds, 86400u);
  EXPECT_EQ(c.starvation_threshold_seconds, 1800u);
  EXPECT_EQ(c.prices.card_hour.at("h800"), 20 * kMicrosPerUnit);
  EXPECT_EQ(c.prices.card_hour_floor, 10 * kMicrosPerUnit);
  EXPECT_EQ(c.tiers.tier(TierId::kP2).grace_seconds, 30u);
  EXPECT_EQ(c.spot_cap_card_seconds[2], kUnlimited);
  EXPECT_EQ(c.spot_cap_card_seconds[3], kUnlimited);
  EXPECT_EQ(c.spot_reset_seconds, 0u);
  EXPECT_EQ(c.spot_utc_offset_seconds, 8 * 3600);
  EXPECT_EQ(c.spot_day_seconds, 86400u);
}

TEST(ConfigTest, ExampleFileParsesToDefaults) {
  auto r = load_config(PLANC_SRCDIR "/etc/planc.conf.example");
  ASSERT_TRUE(r.ok()) << r.error();
  auto d = parse_config("", "x").value();
  const PlancConfig& c = r.value();
  for (int i = 0; i < kTierCount; ++i) {
    const Tier& a = c.tiers.all()[i];
    const Tier& b = d.tiers.all()[i];
    EXPECT_EQ(a.qos, b.qos);
    EXPECT_EQ(a.aliases, b.aliases);
    EXPECT_EQ(a.priority, b.priority);
    EXPECT_EQ(a.preemptible, b.preemptible);
    EXPECT_EQ(a.preempts, b.preempts);
    EXPECT_EQ(a.grace_seconds, b.grace_seconds);
    EXPECT_EQ(a.price_permille, b.price_permille);
    EXPECT_EQ(a.product, b.product);
  }
  EXPECT_EQ(c.default_tier, d.default_tier);
  EXPECT_EQ(c.prices.card_hour, d.prices.card_hour);
}

// Valid inputs and what they set.
TEST(ConfigTest, ParsesValues) {
  struct Case {
    const char* text;
    bool (*check)(const PlancConfig&);
  };
  const Case cases[] = {
      {"defaulttier=p2", [](const PlancConfig& c) { return c.default_tier == TierId::kP2; }},
      {"DefaultTier=plan-a-lease",
       [](const PlancConfig& c) { return c.default_tier == TierId::kP0; }},
      {"GUARANTEEDCAPPERCENT=75  # comment",
       [](const PlancConfig& c) { return c.guaranteed_cap_percent == 75; }},
      {"PreemptWindow=90s", [](const PlancConfig& c) { return c.preempt_window_seconds == 90; }},
      {"WholeNodeSpareP3=yes", [](const PlancConfig& c) { return c.whole_node_spare_p3; }},
      {"", [](const PlancConfig& c) { return !c.whole_node_spare_p3; }},
      {"PreemptWindow=2h", [](const PlancConfig& c) { return c.preempt_window_seconds == 7200; }},
      {"PreemptWindow=1d", [](const PlancConfig& c) { return c.preempt_window_seconds == 86400; }},
      {"StarvationThreshold=5min",
       [](const PlancConfig& c) { return c.starvation_threshold_seconds == 300; }},
      {"StarvationThreshold=7",
       [](const PlancConfig& c) { return c.starvation_threshold_seconds == 7; }},
      {"CoreHourPrice=0.0125", [](const PlancConfig& c) { return c.prices.core_hour == 12500; }},
      {"CardHourPrice=H800:25,a100:12.5",
       [](const PlancConfig& c) {
         return c.prices.card_hour.at("h800") == 25 * kMicrosPerUnit &&
                c.prices.card_hour.at("a100") == 12500000 && c.prices.card_hour.size() == 2;
       }},
      {"Tier=P2 GraceTime=45 PriceFactor=0.3",
       [](const PlancConfig& c) {
         const Tier& t = c.tiers.tier(TierId::kP2);
         return t.grace_seconds == 45 && t.price_permille == 300 && t.qos == "p2-spot";
       }},
      {"Tier=P3 QOS=Spot-Batch Aliases=sb,cheap Product=\"Batch jobs\"",
       [](const PlancConfig& c) {
         const Tier& t = c.tiers.tier(TierId::kP3);
         return t.qos == "spot-batch" && t.aliases.size() == 2 && t.product == "Batch jobs" &&
                c.tiers.find("cheap") == &t;
       }},
      {"Tier=P2 Preempts=none",
       [](const PlancConfig& c) { return !c.tiers.can_preempt(TierId::kP2, TierId::kP3); }},
      // Changing P0 and P1 together over two lines is fine (an unequal
      // weight is only warned about: see PolicyWarnings).
      {"Tier=P0 Priority=20000\nTier=P1 Priority=20000",
       [](const PlancConfig& c) { return c.tiers.tier(TierId::kP1).priority == 20000; }},
      {"Tier=P3 VictimClass=2 Alternative=P0 StarveInto=none",
       [](const PlancConfig& c) {
         const Tier& t = c.tiers.tier(TierId::kP3);
         return t.victim_class == 2 && t.alternative == TierId::kP0 && !t.starves_into;
       }},
      {"Tier=P2 StarveInto=P1 StarveAfter=2h Alternative=none",
       [](const PlancConfig& c) {
         const Tier& t = c.tiers.tier(TierId::kP2);
         return t.starves_into == TierId::kP1 && t.starve_after_seconds == 7200 && !t.alternative;
       }},
      // A wider range admits a lower factor, whichever comes first.
      {"Tier=P2 PriceRange=0.20-0.40 PriceFactor=0.25",
       [](const PlancConfig& c) { return c.tiers.tier(TierId::kP2).price_permille == 250; }},
      {"Tier=P2 PriceFactor=0.25 PriceRange=0.20-0.40",
       [](const PlancConfig& c) { return c.tiers.tier(TierId::kP2).price_min_permille == 200; }},
      {"SpotCapP3=2.5",
       [](const PlancConfig& c) {
         return c.spot_cap_card_seconds[3] == 9000 && c.spot_cap_card_seconds[2] == kUnlimited;
       }},
      {"SpotCapP2=0\nSpotCapP3=Unlimited",
       [](const PlancConfig& c) {
         return c.spot_cap_card_seconds[2] == 0 && c.spot_cap_card_seconds[3] == kUnlimited;
       }},
      {"SpotCapResetTime=04:30",
       [](const PlancConfig& c) { return c.spot_reset_seconds == 16200; }},
      {"SpotCapResetTime=23:59:59",
       [](const PlancConfig& c) { return c.spot_reset_seconds == 86399; }},
      {"SpotCapTimeZone=UTC", [](const PlancConfig& c) { return c.spot_utc_offset_seconds == 0; }},
      {"SpotCapTimeZone=utc+8",
       [](const PlancConfig& c) { return c.spot_utc_offset_seconds == 28800; }},
      {"SpotCapTimeZone=-05:30",
       [](const PlancConfig& c) { return c.spot_utc_offset_seconds == -19800; }},
      {"SpotCapDayLength=60s", [](const PlancConfig& c) { return c.spot_day_seconds == 60; }},
      {"CardHourPriceFloor=30\nCardHourPrice=h800:40",
       [](const PlancConfig& c) { return c.prices.card_hour_floor == 30 * kMicrosPerUnit; }},
      {"", [](const PlancConfig& c) { return c.spool_dir.empty(); }},  // StateSaveLocation's
      {"SpoolDir=", [](const PlancConfig& c) { return c.spool_dir.empty(); }},
      {"SpoolDir=/var/spool/planc/",
       [](const PlancConfig& c) { return c.spool_dir == "/var/spool/planc"; }},
      {"SpoolDir=\"/srv/planc spool\"",
       [](const PlancConfig& c) { return c.spool_dir == "/srv/planc spool"; }},
      {"",
       [](const PlancConfig& c) {
         return c.market.interval_seconds == 900 && c.market.min_permille == 300 &&
                c.market.floor_curve.size() == 3 &&
                c.market.floor_curve[1].vacancy_permille == 300 &&
                c.market.floor_curve[1].multiplier_permille == 800;
       }},
      {"MarketInterval=5s\nMarketMinFraction=0.25\nMarketFloorCurve=0:1.2,0.5:0.5",
       [](const PlancConfig& c) {
         return c.market.interval_seconds == 5 && c.market.min_permille == 250 &&
                c.market.floor_curve.size() == 2 &&
                c.market.floor_curve[0].multiplier_permille == 1200;
       }},
  };
  for (const Case& c : cases) {
    auto r = parse_config(c.text, "planc.conf");
    ASSERT_TRUE(r.ok()) << c.text << " -> " << r.error();
    EXPECT_TRUE(c.check(r.value())) << c.text;
  }
}

// Every error names file, line and key, and says what is wrong.
TEST(ConfigTest, Errors) {
  struct Case {
    const char* text;
    const char* expected;  // a prefix of the error, then a part of the rest
    const char* part;
  };
  const Case cases[] = {
      {"Bogus=1", "f.conf:1: key 'Bogus': unknown key", "valid keys"},
      {"\n\nGuaranteedCapPercent=0", "f.conf:3: key 'GuaranteedCapPercent': 0 is out of range",
       "1 to 100"},
      {"GuaranteedCapPercent=101", "f.conf:1: key 'GuaranteedCapPercent'", "1 to 100"},
      {"GuaranteedCapPercent=eighty", "f.conf:1: key 'GuaranteedCapPercent'", "not a whole number"},
      {"GuaranteedCapPercent=-5", "f.conf:1: key 'GuaranteedCapPercent'", "not a whole number"},
      {"PreemptMaxCount=0", "f.conf:1: key 'PreemptMaxCount'", "out of range"},
      {"PreemptWindow=soon", "f.conf:1: key 'PreemptWindow'", "not a duration"},
      {"PreemptWindow=5y", "f.conf:1: key 'PreemptWindow'", "not a duration"},
      {"PreemptWindow=0", "f.conf:1: key 'PreemptWindow'", "out of range"},
      {"StarvationThreshold=", "f.conf:1: key 'StarvationThreshold'", "not a duration"},
      {"StarvationInterval=2d", "f.conf:1: key 'StarvationInterval'", "out of range"},
      {"StarvationMaxPerInterval=0", "f.conf:1: key 'StarvationMaxPerInterval'", "out of range"},
      {"SpotCapP3=lots", "f.conf:1: key 'SpotCapP3'", "card-hours"},
      {"SpotCapP2=-1", "f.conf:1: key 'SpotCapP2'", "unlimited"},
      {"SpotCapP1=5", "f.conf:1: key 'SpotCapP1': unknown key", "SpotCapP2"},
      {"SpotCapResetTime=24:00", "f.conf:1: key 'SpotCapResetTime'", "time of day"},
      {"SpotCapResetTime=4:30", "f.conf:1: key 'SpotCapResetTime'", "HH:MM"},
      {"SpotCapTimeZone=Asia/Shanghai", "f.conf:1: key 'SpotCapTimeZone'", "daylight saving"},
      {"SpotCapTimeZone=+15", "f.conf:1: key 'SpotCapTimeZone'", "UTC offset"},
      {"SpotCapDayLength=2d", "f.conf:1: key 'SpotCapDayLength'", "10 to 86400"},
      {"DefaultTier=gold", "f.conf:1: key 'DefaultTier': unknown tier 'gold'", "P0, P1, P2 or P3"},
      {"Currency=yuan", "f.conf:1: key 'Currency'", "currency code"},
      {"CoreHourPrice=1e3", "f.conf:1: key 'CoreHourPrice'", "not a price"},
      {"CoreHourPrice=-1", "f.conf:1: key 'CoreHourPrice'", "not a price"},
      {"MemGiBHourPrice=0.0000001", "f.conf:1: key 'MemGiBHourPrice'", "at most 6"},
      {"DefaultCardHourPrice=20.", "f.conf:1: key 'DefaultCardHourPrice'", "not a price"},
      {"CardHourPrice=h800", "f.conf:1: key 'CardHourPrice'", "TYPE:PRICE"},
      {"CardHourPrice=h800:x", "f.conf:1: key 'CardHourPrice'", "not a price"},
      {"CardHourPrice=h800:5", "f.conf:1: key 'CardHourPrice': h800 at 5.00",
       "below CardHourPriceFloor"},
      {"CardHourPrice=h800:20\nCardHourPriceFloor=25", "f.conf:2: key 'CardHourPrice'", "below"},
      {"GuaranteedCapPercent=80\nguaranteedcappercent=70", "f.conf:2: key 'guaranteedcappercent'",
       "given twice (first on line 1)"},
      {"Tier=P5", "f.conf:1: key 'Tier': 'P5' is not a tier", "P0, P1, P2 or P3"},
      {"Tier=P2 Colour=red", "f.conf:1: key 'Colour': unknown key on a Tier line", "GraceTime"},
      {"Tier=P2 GraceTime=30 GraceTime=40", "f.conf:1: key 'GraceTime': given twice on one line",
       ""},
      {"Tier=P2\nTier=p2", "f.conf:2: key 'Tier': p2 is described twice (first on line 1)", ""},
      {"Tier=P2 GraceTime=2h", "f.conf:1: key 'GraceTime'", "0 to 3600"},
      {"Tier=P2 PriceFactor=0.2",
       "f.conf:1: key 'PriceFactor': 0.2 is outside the policy's range for P2", "0.30 to 0.40"},
      {"Tier=P3 PriceFactor=0.55", "f.conf:1: key 'PriceFactor'", "0.30 to 0.50"},
      {"Tier=P0 PriceFactor=0.5", "f.conf:1: key 'PriceFactor'", "1.00 to 10.00"},
      {"Tier=P2 PriceFactor=0.3333", "f.conf:1: key 'PriceFactor'", "at most 3 decimals"},
      {"Tier=P2 Preemptible=maybe", "f.conf:1: key 'Preemptible'", "yes or no"},
      {"WholeNodeSpareP3=sometimes", "f.conf:1: key 'WholeNodeSpareP3'", "yes or no"},
      {"Tier=P2 Preempts=P9", "f.conf:1: key 'Preempts': 'P9' is not a tier", ""},
      {"Tier=P2 Preempts=", "f.conf:1: key 'Preempts'", "list of tiers"},
      {"Tier=P2 Preempts=P2", "f.conf:1: key 'Preempts': P2 may not preempt its own tier", ""},
      {"\nTier=P2 Preempts=P1", "f.conf:2: key 'Preempts': P2 may not preempt P1", "guaranteed"},
      {"Tier=P3 Preempts=P2", "f.conf:1: key 'Preempts': P2 and P3 may not preempt each other", ""},
      {"Tier=P3 Aliases=lease", "f.conf:1: key 'Aliases': the name 'lease'",
       "used by both P0 and P3"},
      {"Tier=P2 VictimClass=4", "f.conf:1: key 'VictimClass'", "1 to 3"},
      {"Tier=P2 Alternative=P9", "f.conf:1: key 'Alternative': 'P9' is not a tier", "or none"},
      {"Tier=P3 StarveInto=P3", "f.conf:1: key 'StarveInto': P3 cannot starve into itself", ""},
      {"Tier=P2 PriceRange=0.5-0.4", "f.conf:1: key 'PriceRange'", "LOW-HIGH"},
      {"Tier=P2 PriceRange=0.40-0.50",
       "f.conf:1: key 'PriceRange': P2's PriceFactor 0.35 is outside 0.40-0.50", ""},
      {"Tier=P2 Victims=1", "f.conf:1: key 'Victims': unknown key on a Tier line",
       "VictimClass, Alternative, StarveInto, StarveAfter"},
      {"Tier=P3 QOS=p2-spot", "f.conf:1: key 'QOS'", "used by both P2 and P3"},
      {"Tier=P3 QOS=a,b", "f.conf:1: key 'QOS'", "not a QoS name"},
      {"Tier=P3 Product=\"unterminated", "f.conf:1: key 'Product': unterminated quote", ""},
      {"JustAWord", "f.conf:1: 'JustAWord' is not of the form Key=Value", ""},
      {"SpoolDir=spool", "f.conf:1: key 'SpoolDir': 'spool' is not an absolute path",
       "StateSaveLocation"},
      {"Bogus=1", "f.conf:1: key 'Bogus': unknown key", "ShardsPerCard, SpoolDir"},
      {"MarketMinFraction=1.5", "f.conf:1: key 'MarketMinFraction': '1.5' is not a share",
       "(e.g. 0.30)"},
      {"MarketFloorCurve=0.3:0.8,0.1:0.9", "f.conf:1: key 'MarketFloorCurve': vacancies must rise",
       "'0.1:0.9'"},
      {"MarketInterval=0", "f.conf:1: key 'MarketInterval'", ""},
  };
  for (const Case& c : cases) {
    auto r = parse_config(c.text, "f.conf");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().rfind(c.expected, 0), 0u) << c.text << "\n  got: " << r.error();
    EXPECT_NE(r.error().find(c.part), std::string::npos) << c.text << "\n  got: " << r.error();
  }
}

// Capacity infusion's pools and settings (issue 16): parsed and checked.
TEST(ConfigTest, InfusionPoolsAndSettings) {
  auto d = parse_config("", "x").value();
  EXPECT_FALSE(d.infusion.enabled);
  EXPECT_TRUE(d.infusion.pools.empty());
  EXPECT_EQ(d.infusion.settings.p1_idle_permille, 50u);  // the policy's 5%, 15%, 30%
  EXPECT_EQ(d.infusion.settings.p3_idle_permille, 150u);
  EXPECT_EQ(d.infusion.settings.market_idle_permille, 300u);
  EXPECT_EQ(d.infusion.settings.cooldown_seconds, 300u);  // 5 min
  EXPECT_EQ(d.infusion.settings.max_ops_per_hour, 4u);
  EXPECT_EQ(d.infusion.settings.window_seconds, 60u);
  auto r = parse_config(
      "Infusion=yes\nInfusionIdleP1=0.1\nInfusionIdleP3=0.2\nInfusionIdleMarket=0.4\n"
      "InfusionHysteresis=0.05\nInfusionCooldown=10s\nInfusionMaxPerHour=6\n"
      "InfusionWindow=2min\n"
      "Pool=maas-p1 Tier=P1 Account=acct-maas User=maas Script=/etc/slurm/serve.sh "
      "GpusPerReplica=2 MinReplicas=1 MaxReplicas=8 DrainGrace=20s Output=/var/log/p/%j.out\n"
      "pool=maas-p3 tier=p3 account=acct-maas user=maas script=/x/serve.sh\n",
      "planc.conf");
  ASSERT_TRUE(r.ok()) << r.error();
  const InfusionConfig& i = r.value().infusion;
  EXPECT_TRUE(i.enabled);
  EXPECT_EQ(i.settings.p1_idle_permille, 100u);
  EXPECT_EQ(i.settings.p3_idle_permille, 200u);
  EXPECT_EQ(i.settings.market_idle_permille, 400u);
  EXPECT_EQ(i.settings.hysteresis_permille, 50u);
  EXPECT_EQ(i.settings.cooldown_seconds, 10u);
  EXPECT_EQ(i.settings.max_ops_per_hour, 6u);
  EXPECT_EQ(i.settings.window_seconds, 120u);
  ASSERT_EQ(i.pools.size(), 2u);
  EXPECT_EQ(i.pools[0].name, "maas-p1");
  EXPECT_EQ(i.pools[0].tier, TierId::kP1);
  EXPECT_EQ(i.pools[0].account, "acct-maas");
  EXPECT_EQ(i.pools[0].user, "maas");
  EXPECT_EQ(i.pools[0].script, "/etc/slurm/serve.sh");
  EXPECT_EQ(i.pools[0].gpus_per_replica, 2u);
  EXPECT_EQ(i.pools[0].min_replicas, 1u);
  EXPECT_EQ(i.pools[0].max_replicas, 8u);
  EXPECT_EQ(i.pools[0].drain_grace_seconds, 20u);
  EXPECT_EQ(i.pools[0].output, "/var/log/p/%j.out");
  EXPECT_EQ(i.pools[0].line, 9u);
  EXPECT_EQ(i.pools[1].tier, TierId::kP3);  // keys case-insensitive, defaults below
  EXPECT_EQ(i.pools[1].gpus_per_replica, 1u);
  EXPECT_EQ(i.pools[1].max_replicas, 1u);
  EXPECT_EQ(i.pools[1].drain_grace_seconds, 30u);

  struct Case {
    const char* text;
    const char* error;  // exactly
  };
  const char* pool = "Pool=p Tier=P1 Account=a User=u Script=/s";
  const Case cases[] = {
      {"Pool=p Tier=P2 Account=a User=u Script=/s",
       "f.conf:1: key 'Tier': 'P2' is not a serving pool's tier (use P1, the guaranteed API "
       "pool, or P3, the spot API pool)"},
      {"Pool=p Tier=P1 Account=a User=u",
       "f.conf:1: key 'Pool': pool 'p' has no Script= (a Pool line needs Tier, Account, User and "
       "Script)"},
      {"Pool=p Tier=P1 Account=a User=u Script=serve.sh",
       "f.conf:1: key 'Script': 'serve.sh' is not an absolute path (the batch script that "
       "starts one replica, e.g. /etc/slurm/planc-pools/serve.sh)"},
      {"Pool=p Tier=P1 Account=a User=u Script=/s Output=logs/%j.out",
       "f.conf:1: key 'Output': 'logs/%j.out' is not an absolute path (where a replica's output "
       "goes, sbatch -o's patterns allowed, e.g. /var/log/planc-pools/%x-%j.out, or /dev/null)"},
      {"Pool=p Tier=P1 Account=a User=u Script=/s MinReplicas=3 MaxReplicas=2",
       "f.conf:1: key 'Pool': pool 'p': MinReplicas 3 is above MaxReplicas 2"},
      {"Pool=p Tier=P1 Account=a User=u Script=/s Colour=red",
       "f.conf:1: key 'Colour': unknown key on a Pool line (valid: Tier, Account, User, Script, "
       "GpusPerReplica, MinReplicas, MaxReplicas, DrainGrace, Output)"},
      {"Pool=p Tier=P1 Account=a User=u Script=/s\nPool=P Tier=P3 Account=a User=u Script=/s",
       "f.conf:2: key 'Pool': pool 'P' is described twice (first on line 1)"},
      {"InfusionIdleP1=5%",
       "f.conf:1: key 'InfusionIdleP1': '5%' is not a share of the GPUs above 0 and below 1, in "
       "steps of 0.001 (e.g. 0.05 for 5%)"},
      {"InfusionIdleP3=0.04",
       "f.conf:1: key 'InfusionIdleP3': the infusion thresholds must rise, InfusionIdleP1 (0.05) "
       "< InfusionIdleP3 (0.04) < InfusionIdleMarket (0.30)"},
      {"\nInfusionIdleMarket=0.15",
       "f.conf:2: key 'InfusionIdleMarket': the infusion thresholds must rise, InfusionIdleP1 "
       "(0.05) < InfusionIdleP3 (0.15) < InfusionIdleMarket (0.15)"},
      {"InfusionHysteresis=0.05",
       "f.conf:1: key 'InfusionHysteresis': 0.05 must be below InfusionIdleP1 (0.05): a pool "
       "that grew would shrink at once"},
      {"Pool=p Tier=P1 Account=a User=root Script=/s",
       "f.conf:1: key 'User': a pool's replicas may not run as root: give the platform's own "
       "user, e.g. User=maas (useradd --system maas)"},
      {"Pool=p Tier=P1 Account=a User=u Script=/s DrainGrace=31s",
       "f.conf:1: key 'DrainGrace': pool 'p' drains its replicas for 31 s, but a P1 replica is "
       "given back to guaranteed work that must start within 40 s (SlaStartSeconds): at most 30 "
       "s"},
      {"SlaStartSeconds=30\nPool=p Tier=P1 Account=a User=u Script=/s",
       "f.conf:2: key 'DrainGrace': pool 'p' drains its replicas for 30 s, but a P1 replica is "
       "given back to guaranteed work that must start within 30 s (SlaStartSeconds): at most 20 "
       "s"},
      {"MarketReserveAfter=8d", nullptr},
      {"InfusionCooldown=soon", nullptr},
      {"InfusionMaxPerHour=0", nullptr},
      {"InfusionWindow=0s", nullptr},
      {"InfusionWindow=2h", nullptr},
  };
  for (const Case& c : cases) {
    auto e = parse_config(c.text, "f.conf");
    ASSERT_FALSE(e.ok()) << c.text;
    if (c.error) {
      EXPECT_EQ(e.error(), c.error) << c.text;
    }
  }
  EXPECT_TRUE(parse_config(pool, "f.conf").ok());
  // A P3 pool's drain grace is not the guaranteed work's business.
  EXPECT_TRUE(
      parse_config("Pool=p Tier=P3 Account=a User=u Script=/s DrainGrace=5min", "f.conf").ok());
  auto reserve = parse_config("MarketReserveAfter=30min", "f.conf");
  ASSERT_TRUE(reserve.ok());
  EXPECT_EQ(reserve.value().market.reserve_after_seconds, 1800u);
  EXPECT_EQ(PlancConfig{}.market.reserve_after_seconds, 3600u);
  // slurmctld's own SlurmUser is refused where slurmctld knows it.
  PoolConfig p;
  p.name = "api";
  p.user = "slurm";
  p.line = 7;
  EXPECT_EQ(*pool_user_refusal(p, "slurm"),
            "pool 'api' (planc.conf line 7) runs its replicas as slurm, slurmctld's own "
            "SlurmUser: a replica runs the pool's script with that user's rights; give the "
            "platform's own user (User=maas)");
  EXPECT_FALSE(pool_user_refusal(p, "root"));
}

TEST(ConfigTest, MissingFileIsAnError) {
  auto r = load_config("/nonexistent/planc.conf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().rfind("/nonexistent/planc.conf: cannot read planc.conf: No such file", 0), 0u)
      << r.error();
}

TEST(ConfigTest, ErrorNamesTheRealFile) {
  std::string path = ::testing::TempDir() + "/planc_bad.conf";
  {
    std::ofstream out(path);
    out << "# ok\nPreemptMaxCount=3\nTier=P2 GraceTime=forever\n";
  }
  auto r = load_config(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().rfind(path + ":3: key 'GraceTime'", 0), 0u) << r.error();
  std::remove(path.c_str());
}

TEST(ConfigTest, ConfPathBesideSlurmConf) {
  unsetenv("PLANC_CONF");
  EXPECT_EQ(planc_conf_path("/etc/slurm/slurm.conf"), "/etc/slurm/planc.conf");
  setenv("PLANC_CONF", "/opt/p.conf", 1);
  EXPECT_EQ(planc_conf_path("/etc/slurm/slurm.conf"), "/opt/p.conf");
  unsetenv("PLANC_CONF");
}

TEST(ConfigTest, Decimals) {
  struct Case {
    const char* in;
    int64_t micros;  // -1: rejected
  };
  const Case cases[] = {{"0", 0},         {"20", 20000000}, {"20.00", 20000000},
                        {"0.35", 350000}, {"0.000001", 1},  {"0.0000001", -1},
                        {".5", -1},       {"5.", -1},       {"", -1},
                        {"1,5", -1},      {"+1", -1},       {"99999999999999", -1}};
  for (const Case& c : cases) {
    auto m = parse_decimal_micros(c.in);
    if (c.micros < 0)
      EXPECT_FALSE(m.has_value()) << c.in;
    else
      EXPECT_EQ(m.value_or(-1), c.micros) << c.in;
  }
  EXPECT_EQ(format_micros(350000), "0.35");
  EXPECT_EQ(format_micros(20000000), "20.00");
  EXPECT_EQ(format_micros(12500), "0.0125");
}

// planc.conf may depart from the policy (admins may choose), but every
// departure is named, with the invariant it breaks.
TEST(ConfigTest, PolicyWarnings) {
  struct Case {
    const char* text;
    std::vector<std::string> warnings;
  };
  const std::string inv = ": breaks the policy's invariant ";
  const std::string never = inv + "\"P0 and P1 are never preempted\"";
  const std::string cap = inv + "\"P0+P1 within GuaranteedCapPercent (at most 80% of the GPUs)\"";
  const char* part = "GuaranteedPartition=guaranteed\n";
  const Case cases[] = {
      {part, {}},
      {"", {"GuaranteedPartition is not set, so nothing caps the GPUs P0 and P1 hold" + cap}},
      {"GuaranteedPartition=guaranteed\nGuaranteedCapPercent=90",
       {"GuaranteedCapPercent=90 lets P0 and P1 hold more than 80% of the GPUs" + cap}},
      {"GuaranteedPartition=guaranteed\nTier=P0 Preemptible=yes\n"
       "Tier=P1 Preempts=P0,P2,P3",
       {"P0 (p0-lease) is preemptible (Preemptible=yes)" + never,
        "P1 (p1-guaranteed) may preempt P0 (Preempts=)" + never,
        "P2's Alternative P0 is preemptible: its jobs are advised another guaranteed tier "
        "instead"}},
      {"GuaranteedPartition=guaranteed\nTier=P1 Priority=1",
       {"P0 has Priority=10000 and P1 Priority=1" + inv + "\"P0 and P1 weigh the same\""}},
      {"GuaranteedPartition=guaranteed\nTier=P2 Preempts=none",
       {"P2 may not preempt P3 (Preempts=)" + inv + "\"P2 preempts P3\""}},
      {"GuaranteedPartition=guaranteed\nTier=P3 Preempts=P2\nTier=P2 Preempts=none",
       {"P2 may not preempt P3 (Preempts=)" + inv + "\"P2 preempts P3\"",
        "P3 may preempt P2 (Preempts=)" + inv + "\"P3 preempts nothing\""}},
      {"GuaranteedPartition=guaranteed\nTier=P3 Preemptible=no\n"
       "Tier=P0 Preempts=P2\nTier=P1 Preempts=P2\nTier=P2 Preempts=none",
       {"P3 (p3-spot) is not preemptible (Preemptible=no)" + inv + "\"P2 and P3 are preemptible\"",
        "P0 may not preempt P3 (Preempts=)" + inv + "\"P0 and P1 preempt P2 and P3\"",
        "P1 may not preempt P3 (Preempts=)" + inv + "\"P0 and P1 preempt P2 and P3\"",
        "P2 may not preempt P3 (Preempts=)" + inv + "\"P2 preempts P3\""}},
  };
  for (const Case& c : cases) {
    auto r = parse_config(c.text, "f.conf");
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.error();
    EXPECT_EQ(policy_warnings(r.value()), c.warnings) << c.text;
  }
}

TEST(ConfigTest, GraceFinishedExitCode) {
  EXPECT_EQ(parse_config("", "f").value().grace_finished_exit_code, 99);
  EXPECT_EQ(parse_config("GraceFinishedExitCode=none", "f").value().grace_finished_exit_code, -1);
  EXPECT_EQ(parse_config("GraceFinishedExitCode=42", "f").value().grace_finished_exit_code, 42);
  auto bad = parse_config("GraceFinishedExitCode=0", "f.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("f.conf:1: key 'GraceFinishedExitCode'"), std::string::npos)
      << bad.error();
}

}  // namespace
}  // namespace planc
