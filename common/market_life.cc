#include "common/market_life.h"

#include <array>
#include <utility>
#include <vector>

#include "common/job_marks.h"
#include "common/market.h"
#include "common/preempt_policy.h"  // format_utc, parse_utc, format_duration

namespace planc {
namespace {

using Phase = MarketFacts::Phase;

constexpr std::array<std::pair<MarketReason, std::string_view>, 18> kReasons{{
    {MarketReason::kNew, "new"},
    {MarketReason::kMovedIn, "moved-in"},
    {MarketReason::kJoined, "joined"},
    {MarketReason::kRequeued, "requeued"},
    {MarketReason::kChanged, "changed"},
    {MarketReason::kExpired, "expired"},
    {MarketReason::kLockDropped, "lock-dropped"},
    {MarketReason::kOutbid, "outbid"},
    {MarketReason::kNoRoom, "no-room"},
    {MarketReason::kTooLarge, "too-large"},
    {MarketReason::kHeldForLarger, "held-for-larger"},
    {MarketReason::kBelowFloor, "below-floor"},
    {MarketReason::kBeginTime, "begin-time"},
    {MarketReason::kDependency, "dependency"},
    {MarketReason::kOwnerHeld, "owner-held"},
    {MarketReason::kMarketClosed, "market-closed"},
    {MarketReason::kOperator, "operator"},
    {MarketReason::kNotMatched, "not-matched"},
}};

constexpr std::array<std::pair<MarketState, std::string_view>, 5> kStates{{
    {MarketState::kWaiting, "waiting"},
    {MarketState::kMatched, "matched"},
    {MarketState::kLocked, "locked"},
    {MarketState::kReleased, "released"},
    {MarketState::kOutside, "outside"},
}};

template <typename E, size_t N>
std::optional<E> lookup(const std::array<std::pair<E, std::string_view>, N>& table,
                        std::string_view name) {
  for (const auto& [e, n] : table)
    if (n == name) return e;
  return std::nullopt;
}

std::string_view state_name(MarketState s) {
  for (const auto& [e, n] : kStates)
    if (e == s) return n;
  return "waiting";
}

// Account and partition names as one word: anything but [A-Za-z0-9._-]
// as %XX, so no value holds a space or the marks' " | ".
std::string escape_word(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || c == '.' ||
        c == '_' || c == '-') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

std::optional<std::string> unescape_word(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0) return std::nullopt;
    out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
    i += 2;
  }
  return out;
}

std::optional<uint32_t> parse_count(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  return v;
}

void add(std::string* out, std::string_view key, std::string_view value) {
  *out += ' ';
  *out += key;
  *out += '=';
  *out += value;
}

std::string money(Micros m) { return format_micros(m); }

MarketLife waiting(MarketReason why, const std::optional<MarketLife>& from, bool owner_hold,
                   time_t now) {
  MarketLife l;
  l.state = MarketState::kWaiting;
  l.reason = why;
  l.bid = from ? from->bid : std::nullopt;
  l.owner_hold = owner_hold;
  l.since = now;
  return l;
}

MarketStep step(MarketEvent e, std::optional<MarketLife> life, HoldAction h = HoldAction::kKeep) {
  return MarketStep{e, std::move(life), h};
}

bool pending(const MarketFacts& f) { return f.phase == Phase::kPending; }

// The floor for a run that starts outside the rounds.
Micros outside_price(const MarketContext& ctx, const MarketFacts& f) {
  return ctx.floor(f.shape.gpu_type).value_or(0);
}

MarketStep started_outside(const std::optional<MarketLife>& life, const MarketFacts& f,
                           const MarketContext& ctx, MarketReason why) {
  MarketLife l;
  l.state = MarketState::kOutside;
  l.reason = why;
  l.bid = life ? life->bid : std::nullopt;
  l.price = outside_price(ctx, f);
  l.at = ctx.now;
  l.run = f.run;
  return step(MarketEvent::kStartedOutside, l);
}

// A waiting life that must be held: the market's hold when it has none.
MarketStep keep_waiting(const MarketLife& l, const MarketFacts& f) {
  MarketLife next = l;
  // Slurm's requeuehold is the owner's hold: out of the rounds until released.
  if (f.requeue_held && !next.owner_hold) {
    next.owner_hold = true;
    return step(MarketEvent::kOwnerHeld, next, f.held ? HoldAction::kKeep : HoldAction::kHold);
  }
  if (!f.held) return step(MarketEvent::kHeldAgain, next, HoldAction::kHold);
  return step(MarketEvent::kNone, l);
}

bool lock_begin_ok(const MarketLife& l, time_t begin, const MarketContext& ctx) {
  return begin >= l.at + static_cast<time_t>(ctx.interval) &&
         begin <= l.at + static_cast<time_t>(ctx.lock_ahead);
}

}  // namespace

std::string_view reason_name(MarketReason r) {
  for (const auto& [e, n] : kReasons)
    if (e == r) return n;
  return "new";
}

std::string_view event_name(MarketEvent e) {
  switch (e) {
    case MarketEvent::kNone:
      return "none";
    case MarketEvent::kSubmitted:
      return "submitted";
    case MarketEvent::kMovedIn:
      return "moved into P2";
    case MarketEvent::kJoined:
      return "joined the market";
    case MarketEvent::kLeft:
      return "left P2";
    case MarketEvent::kMarketClosed:
      return "market closed";
    case MarketEvent::kMarketOpened:
      return "market opened";
    case MarketEvent::kWon:
      return "won";
    case MarketEvent::kLost:
      return "lost";
    case MarketEvent::kRequeued:
      return "requeued";
    case MarketEvent::kChanged:
      return "request changed";
    case MarketEvent::kExpired:
      return "win expired";
    case MarketEvent::kRecorded:
      return "request recorded";
    case MarketEvent::kLockMoved:
      return "lock moved";
    case MarketEvent::kLockDropped:
      return "lock dropped";
    case MarketEvent::kOwnerHeld:
      return "held by its owner";
    case MarketEvent::kOwnerReleased:
      return "released by its owner";
    case MarketEvent::kOperatorRelease:
      return "released by an operator";
    case MarketEvent::kStartedOutside:
      return "started outside the rounds";
    case MarketEvent::kHeldAgain:
      return "held again";
  }
  return "none";
}

std::optional<Micros> MarketContext::floor(std::string_view gpu_type) const {
  const std::string type(gpu_type);
  if (floors) {
    auto it = floors->by_type.find(type);
    return it != floors->by_type.end() ? it->second : floors->default_floor;
  }
  // Before the first sample: the floor at no vacancy, as job_submit checks.
  if (!prices || !market) return std::nullopt;
  auto list = prices->card_hour.find(type);
  return market_floor(prices->card_hour_floor,
                      list != prices->card_hour.end() ? list->second : prices->default_card_hour, 0,
                      *market);
}

std::string serialize_life(const MarketLife& l, std::string_view currency) {
  std::string o(kMarketTag);
  o += ' ';
  o += state_name(l.state);
  auto bid = [&] { add(&o, "bid", l.bid ? money(*l.bid) : "list"); };
  auto shape = [&] {
    add(&o, "run", std::to_string(l.run));
    add(&o, "gpus", std::to_string(l.shape.gpus));
    add(&o, "nodes", std::to_string(l.shape.nodes));
    add(&o, "type", l.shape.gpu_type.empty() ? "any" : escape_word(l.shape.gpu_type));
    add(&o, "account", escape_word(l.shape.account));
    add(&o, "partition", escape_word(l.shape.partition));
  };
  switch (l.state) {
    case MarketState::kWaiting:
      bid();
      add(&o, "currency", currency);
      add(&o, "reason", reason_name(l.reason));
      add(&o, "since", format_utc(l.since));
      if (l.owner_hold) add(&o, "hold", "owner");
      break;
    case MarketState::kMatched:
      add(&o, "price", money(l.price));
      add(&o, "currency", currency);
      add(&o, "round", format_utc(l.at));
      add(&o, "start-by", format_utc(l.start_by));
      shape();
      bid();
      break;
    case MarketState::kLocked:
      add(&o, "price", money(l.price));
      add(&o, "currency", currency);
      add(&o, "booked", format_utc(l.at));
      add(&o, "begin", format_utc(l.begin));
      shape();
      break;
    case MarketState::kReleased:
      add(&o, "reason", reason_name(l.reason));
      add(&o, "since", format_utc(l.since));
      add(&o, "run", std::to_string(l.run));
      bid();
      add(&o, "currency", currency);
      break;
    case MarketState::kOutside:
      add(&o, "price", money(l.price));
      add(&o, "currency", currency);
      add(&o, "started", format_utc(l.at));
      add(&o, "run", std::to_string(l.run));
      add(&o, "reason", reason_name(l.reason));
      bid();
      break;
  }
  return o;
}

std::optional<MarketLife> parse_life(std::string_view comment) {
  auto found = find_tagged_mark(comment, kMarketTag);
  if (!found) return std::nullopt;
  std::string_view m = found->substr(kMarketTag.size());
  std::vector<std::string_view> words;
  while (!m.empty()) {
    while (!m.empty() && m.front() == ' ') m.remove_prefix(1);
    size_t sp = m.find(' ');
    std::string_view w = m.substr(0, sp);
    if (!w.empty()) words.push_back(w);
    m.remove_prefix(sp == m.npos ? m.size() : sp);
  }
  if (words.empty()) return std::nullopt;
  auto state = lookup(kStates, words[0]);
  if (!state) return std::nullopt;
  MarketLife l;
  l.state = *state;
  // Every key a state needs must be there and read; unknown keys are an
  // error too (a mark this version did not write is not trusted).
  uint32_t seen = 0;
  enum : uint32_t {
    kBid = 1,
    kPrice = 2,
    kReason = 4,
    kSince = 8,
    kRound = 16,
    kStartBy = 32,
    kBooked = 64,
    kBegin = 128,
    kRun = 256,
    kGpus = 512,
    kNodes = 1024,
    kType = 2048,
    kAccount = 4096,
    kPartition = 8192,
    kStarted = 16384,
  };
  for (size_t i = 1; i < words.size(); i++) {
    const size_t eq = words[i].find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view k = words[i].substr(0, eq), v = words[i].substr(eq + 1);
    bool ok = true;
    auto time_of = [&](time_t* out, uint32_t bit) {
      auto t = v.size() == 20 ? parse_utc(v) : std::nullopt;
      if (t) *out = *t;
      ok = t.has_value();
      seen |= bit;
    };
    auto count_of = [&](uint32_t* out, uint32_t bit) {
      auto c = parse_count(v);
      if (c) *out = *c;
      ok = c.has_value();
      seen |= bit;
    };
    auto word_of = [&](std::string* out, uint32_t bit) {
      auto w = unescape_word(v);
      if (w) *out = std::move(*w);
      ok = w.has_value();
      seen |= bit;
    };
    if (k == "bid") {
      if (v != "list") {
        l.bid = parse_decimal_micros(v);
        ok = l.bid.has_value();
      }
      seen |= kBid;
    } else if (k == "price") {
      auto p = parse_decimal_micros(v);
      if (p) l.price = *p;
      ok = p.has_value();
      seen |= kPrice;
    } else if (k == "currency") {
      // The config's; informative only.
    } else if (k == "reason") {
      auto r = lookup(kReasons, v);
      if (r) l.reason = *r;
      ok = r.has_value();
      seen |= kReason;
    } else if (k == "since") {
      time_of(&l.since, kSince);
    } else if (k == "round") {
      time_of(&l.at, kRound);
    } else if (k == "start-by") {
      time_of(&l.start_by, kStartBy);
    } else if (k == "booked") {
      time_of(&l.at, kBooked);
    } else if (k == "begin") {
      time_of(&l.begin, kBegin);
    } else if (k == "started") {
      time_of(&l.at, kStarted);
    } else if (k == "run") {
      count_of(&l.run, kRun);
    } else if (k == "gpus") {
      count_of(&l.shape.gpus, kGpus);
    } else if (k == "nodes") {
      count_of(&l.shape.nodes, kNodes);
    } else if (k == "type") {
      word_of(&l.shape.gpu_type, kType);
      if (ok && l.shape.gpu_type == "any") l.shape.gpu_type.clear();
    } else if (k == "account") {
      word_of(&l.shape.account, kAccount);
    } else if (k == "partition") {
      word_of(&l.shape.partition, kPartition);
    } else if (k == "hold") {
      ok = v == "owner";
      l.owner_hold = ok;
    } else {
      ok = false;
    }
    if (!ok) return std::nullopt;
  }
  const uint32_t shape = kRun | kGpus | kNodes | kType | kAccount | kPartition;
  uint32_t need = 0;
  switch (l.state) {
    case MarketState::kWaiting:
      need = kBid | kReason | kSince;
      break;
    case MarketState::kMatched:
      need = kPrice | kRound | kStartBy | shape | kBid;
      break;
    case MarketState::kLocked:
      need = kPrice | kBooked | kBegin | shape;
      break;
    case MarketState::kReleased:
      need = kReason | kSince | kRun | kBid;
      break;
    case MarketState::kOutside:
      need = kPrice | kStarted | kRun | kReason | kBid;
      break;
  }
  if ((seen & need) != need) return std::nullopt;
  return l;
}

std::string with_life(std::string_view comment, const std::optional<MarketLife>& life,
                      std::string_view currency) {
  if (!life) return without_tagged_mark(comment, kMarketTag);
  return with_tagged_mark(comment, kMarketTag, serialize_life(*life, currency));
}

std::string describe_life(const MarketLife& l, std::string_view currency, uint32_t interval) {
  const std::string unit = " " + std::string(currency) + "/card-hour";
  const std::string bid = l.bid ? "bid " + money(*l.bid) + unit
                                : std::string("no bid (the round's price, at most list)");
  const std::string cadence = "rounds every " + format_duration(interval);
  switch (l.state) {
    case MarketState::kWaiting: {
      std::string why;
      switch (l.reason) {
        case MarketReason::kNew:
        case MarketReason::kMovedIn:
        case MarketReason::kJoined:
          why = "waiting for its first round";
          break;
        case MarketReason::kRequeued:
          why = "requeued: it bids again (a win covers one run)";
          break;
        case MarketReason::kChanged:
          why = "its request changed after it won: it bids again";
          break;
        case MarketReason::kExpired:
          why = "it won but did not start within " + format_duration(interval) + ": it bids again";
          break;
        case MarketReason::kLockDropped:
          why = "its --begin moved out of what its price was locked for: it bids";
          break;
        case MarketReason::kOutbid:
          why = "not matched in the last round: outbid";
          break;
        case MarketReason::kNoRoom:
          why = "not matched in the last round: no room";
          break;
        case MarketReason::kTooLarge:
          why = "not matched: it asks for more GPUs than P2 can have while guaranteed work runs";
          break;
        case MarketReason::kHeldForLarger:
          why = "not matched: the room is kept for a larger bid that has waited longer";
          break;
        case MarketReason::kBelowFloor:
          why = "below the floor: it waits for the floor to fall to it";
          break;
        case MarketReason::kBeginTime:
          why = "not in the rounds until its --begin time";
          break;
        case MarketReason::kDependency:
          why = "not in the rounds until its dependency is met";
          break;
        case MarketReason::kOwnerHeld:
          why = "not in the rounds while its owner holds it";
          break;
        default:
          why = "waiting for a round";
          break;
      }
      if (l.owner_hold && l.reason != MarketReason::kOwnerHeld)
        why += "; held by its owner: out of the rounds until released";
      return bid + "; " + why + " (" + cadence + ")";
    }
    case MarketState::kMatched:
      return bid + "; matched at " + money(l.price) + unit + " in the round at " +
             format_utc(l.at) + " for its run " + std::to_string(l.run) + " (starts by " +
             format_utc(l.start_by) + ")";
    case MarketState::kLocked:
      return "locked at " + money(l.price) + unit + ", the floor when booked at " +
             format_utc(l.at) + ", for its run from " + format_utc(l.begin);
    case MarketState::kReleased:
      return bid + "; " +
             (l.reason == MarketReason::kMarketClosed
                  ? std::string("the market closed: it runs at the fixed P2 price")
                  : std::string("released by an operator: its next run starts outside the rounds, "
                                "at the floor when it starts"));
    case MarketState::kOutside:
      return "run " + std::to_string(l.run) + " started outside the rounds at " + format_utc(l.at) +
             ": billed at the floor " + money(l.price) + unit;
  }
  return bid;
}

std::optional<MarketReason> ineligible(const MarketLife& l, const MarketFacts& f, time_t now) {
  if (l.owner_hold || f.requeue_held) return MarketReason::kOwnerHeld;
  if (f.begin > now) return MarketReason::kBeginTime;
  if (f.dependency) return MarketReason::kDependency;
  return std::nullopt;
}

MarketStep reconcile(const std::optional<MarketLife>& life, const MarketFacts& f,
                     const MarketContext& ctx) {
  const time_t now = ctx.now;
  if (f.free_attempt && !life) return step(MarketEvent::kNone, life);
  if (!f.in_market_tier || f.free_attempt) {
    if (!life) return step(MarketEvent::kNone, life);
    if (life->state == MarketState::kWaiting && pending(f))
      return step(
          MarketEvent::kLeft, std::nullopt,
          life->owner_hold || f.requeue_held ? HoldAction::kGiveToOwner : HoldAction::kRelease);
    // A priced run stays priced for its bill; a pending job forgets it.
    if (pending(f)) return step(MarketEvent::kLeft, std::nullopt);
    return step(MarketEvent::kNone, life);
  }
  if (!ctx.open) {
    if (life && life->state == MarketState::kWaiting && pending(f)) {
      MarketLife l = *life;
      l.state = MarketState::kReleased;
      l.reason = MarketReason::kMarketClosed;
      l.since = now;
      l.run = f.run;
      const bool owners = life->owner_hold || f.requeue_held;
      l.owner_hold = false;
      return step(MarketEvent::kMarketClosed, l,
                  owners ? HoldAction::kGiveToOwner : HoldAction::kRelease);
    }
    return step(MarketEvent::kNone, life);
  }
  if (!life) {
    if (!pending(f)) return step(MarketEvent::kNone, life);
    // The owner's hold found on a job the market never held stays theirs.
    return step(MarketEvent::kJoined, waiting(MarketReason::kJoined, life, f.held, now),
                f.held ? HoldAction::kKeep : HoldAction::kHold);
  }
  const MarketLife& l = *life;
  switch (l.state) {
    case MarketState::kWaiting:
      if (pending(f)) return keep_waiting(l, f);
      if (f.phase == Phase::kRunning)
        return started_outside(life, f, ctx, MarketReason::kNotMatched);
      return step(MarketEvent::kNone, life);
    case MarketState::kMatched:
    case MarketState::kLocked:
    case MarketState::kReleased:
    case MarketState::kOutside: {
      if (f.phase == Phase::kFinished) return step(MarketEvent::kNone, life);
      if (f.run != l.run) {
        if (pending(f))
          return step(MarketEvent::kRequeued, waiting(MarketReason::kRequeued, life, f.held, now),
                      f.held ? HoldAction::kKeep : HoldAction::kHold);
        return started_outside(life, f, ctx, MarketReason::kRequeued);
      }
      if (!pending(f))
        return l.state == MarketState::kReleased
                   ? started_outside(life, f, ctx,
                                     l.reason == MarketReason::kOperator
                                         ? MarketReason::kOperator
                                         : MarketReason::kNotMatched)
                   : step(MarketEvent::kNone, life);
      if (l.state == MarketState::kReleased) {
        if (l.reason == MarketReason::kMarketClosed)
          return step(MarketEvent::kMarketOpened, waiting(MarketReason::kJoined, life, f.held, now),
                      f.held ? HoldAction::kKeep : HoldAction::kHold);
        return step(MarketEvent::kNone, life);  // an operator's release: its run to come
      }
      if (l.state == MarketState::kOutside) return step(MarketEvent::kNone, life);
      if (l.state == MarketState::kLocked && l.shape == MarketShape{}) {
        MarketLife booked = l;
        booked.shape = f.shape;
        return step(MarketEvent::kRecorded, booked);
      }
      if (f.shape != l.shape)
        return step(MarketEvent::kChanged, waiting(MarketReason::kChanged, life, f.held, now),
                    f.held ? HoldAction::kKeep : HoldAction::kHold);
      if (l.state == MarketState::kMatched && now > l.start_by)
        return step(MarketEvent::kExpired, waiting(MarketReason::kExpired, life, f.held, now),
                    f.held ? HoldAction::kKeep : HoldAction::kHold);
      if (l.state == MarketState::kLocked && f.begin != l.begin) {
        if (lock_begin_ok(l, f.begin, ctx)) {
          MarketLife moved = l;
          moved.begin = f.begin;
          return step(MarketEvent::kLockMoved, moved);
        }
        return step(MarketEvent::kLockDropped,
                    waiting(MarketReason::kLockDropped, life, f.held, now),
                    f.held ? HoldAction::kKeep : HoldAction::kHold);
      }
      return step(MarketEvent::kNone, life);
    }
  }
  return step(MarketEvent::kNone, life);
}

MarketStep on_start(const std::optional<MarketLife>& life, const MarketFacts& f,
                    const MarketContext& ctx) {
  if (!f.in_market_tier || f.free_attempt || !ctx.open) return step(MarketEvent::kNone, life);
  if (!life) return started_outside(life, f, ctx, MarketReason::kNotMatched);
  const MarketLife& l = *life;
  switch (l.state) {
    case MarketState::kMatched:
    case MarketState::kLocked:
      if (l.run == f.run && (l.shape == f.shape || l.shape == MarketShape{}))
        return step(MarketEvent::kNone, life);
      return started_outside(life, f, ctx, MarketReason::kRequeued);
    case MarketState::kOutside:
      if (l.run == f.run) return step(MarketEvent::kNone, life);
      return started_outside(life, f, ctx, MarketReason::kRequeued);
    case MarketState::kReleased:
      return started_outside(life, f, ctx,
                             l.reason == MarketReason::kOperator ? MarketReason::kOperator
                                                                 : MarketReason::kNotMatched);
    case MarketState::kWaiting:
      return started_outside(life, f, ctx, MarketReason::kNotMatched);
  }
  return step(MarketEvent::kNone, life);
}

MarketStep on_run_end(const std::optional<MarketLife>& life, const MarketFacts& f, bool requeued,
                      const MarketContext& ctx) {
  if (!requeued || !f.in_market_tier || f.free_attempt || !ctx.open)
    return step(MarketEvent::kNone, life);
  if (life && life->state == MarketState::kWaiting)
    return step(MarketEvent::kNone, life, HoldAction::kHold);
  return step(MarketEvent::kRequeued, waiting(MarketReason::kRequeued, life, false, ctx.now),
              HoldAction::kHold);
}

MarketUpdateVerdict on_update(const std::optional<MarketLife>& life, const MarketFacts& f,
                              const MarketUpdate& u, uint32_t job_id, const MarketContext& ctx) {
  using Who = MarketUpdate::Who;
  MarketUpdateVerdict v;
  const time_t now = ctx.now;
  if (u.who == Who::kMarket || !ctx.open) return v;
  const std::string job = "JobId=" + std::to_string(job_id);
  if (u.into_market) {
    if (u.array) {
      v.refusal =
          "job arrays and heterogeneous jobs cannot bid in the P2 market (each needs a round of "
          "its own): submit the tasks as separate jobs to move them into P2";
      return v;
    }
    if (!pending(f)) return v;  // Slurm refuses a QoS change of a running job
    v.step = step(MarketEvent::kMovedIn,
                  waiting(MarketReason::kMovedIn, std::nullopt, f.held || u.hold, now));
    v.hold = !f.held;
    v.log = job + " moved into P2: it bids the list price in the next round";
    return v;
  }
  if (u.out_of_market || !f.in_market_tier || !pending(f)) return v;  // the reconciler's
  const bool spent_on_release = u.release && f.held;
  if (!life) {
    if (spent_on_release) {
      // In P2 with no life (submitted while the market was closed): it bids.
      v.step = step(MarketEvent::kJoined, waiting(MarketReason::kJoined, life, false, now));
      v.cancel_release = true;
      v.log = job + ": released while the P2 market is open: it bids in the next round";
    }
    return v;
  }
  const MarketLife& l = *life;
  if (l.state == MarketState::kWaiting) {
    if (u.hold && !l.owner_hold) {
      MarketLife held = l;
      held.owner_hold = true;
      v.step = step(MarketEvent::kOwnerHeld, held);
      return v;
    }
    if (u.release && (l.owner_hold || f.requeue_held)) {
      MarketLife freed = l;
      freed.owner_hold = false;
      if (freed.reason == MarketReason::kOwnerHeld) freed.reason = MarketReason::kNew;
      v.step = step(MarketEvent::kOwnerReleased, freed);
      v.cancel_release = true;
      v.log = job + ": its hold released; it bids in the next round";
      return v;
    }
    if (u.release) {
      if (u.who == Who::kOperator) {
        MarketLife r = l;
        r.state = MarketState::kReleased;
        r.reason = MarketReason::kOperator;
        r.since = now;
        r.run = f.run;
        r.owner_hold = false;
        v.step = step(MarketEvent::kOperatorRelease, r);
        v.log = job +
                " bid in the P2 market and was released by an operator: its next run starts "
                "outside the rounds, billed at the floor when it starts";
        return v;
      }
      v.refusal = job + " bids in the P2 market: the round it wins releases it (rounds every " +
                  format_duration(ctx.interval) +
                  "); it cannot be released by hand.  To run it outside the market, cancel it "
                  "and submit it to another tier";
      return v;
    }
    return v;
  }
  if (l.state != MarketState::kMatched && l.state != MarketState::kLocked) {
    // released, outside: a release of a run already priced or covered is
    // Slurm's business; a new run after a requeue was caught at run end.
    return v;
  }
  // A win or a lock: what it was for must still hold.
  const bool held_after = f.held || u.hold;
  if (f.run != l.run) {
    v.step = step(MarketEvent::kRequeued, waiting(MarketReason::kRequeued, life, held_after, now));
    if (u.release) {
      v.step.life->owner_hold = false;
      v.cancel_release = true;
    } else if (!f.held) {
      v.hold = true;
    }
    v.log = job + ": its win was for an earlier run: it bids again";
    return v;
  }
  if (u.shape_changed) {
    v.step = step(MarketEvent::kChanged,
                  waiting(MarketReason::kChanged, life, held_after && !u.release, now));
    if (u.release)
      v.cancel_release = true;
    else if (!f.held)
      v.hold = true;
    v.log = job + ": its request changed after its " +
            (l.state == MarketState::kMatched ? std::string("win") : std::string("price lock")) +
            ": it bids again";
    return v;
  }
  if (l.state == MarketState::kLocked && u.begin && *u.begin != l.begin) {
    if (lock_begin_ok(l, *u.begin, ctx)) {
      MarketLife moved = l;
      moved.begin = *u.begin;
      v.step = step(MarketEvent::kLockMoved, moved);
      return v;
    }
    v.step = step(MarketEvent::kLockDropped,
                  waiting(MarketReason::kLockDropped, life, held_after && !u.release, now));
    if (!f.held && !u.release) v.hold = true;
    if (u.release) v.cancel_release = true;
    v.log = job + ": its --begin moved to " + format_utc(*u.begin) +
            ", out of what its price was locked for (from " +
            format_utc(l.at + static_cast<time_t>(ctx.interval)) + " to " +
            format_utc(l.at + static_cast<time_t>(ctx.lock_ahead)) +
            "): the lock is dropped and it bids";
    return v;
  }
  if (spent_on_release && l.state == MarketState::kMatched && now > l.start_by) {
    v.step = step(MarketEvent::kExpired, waiting(MarketReason::kExpired, life, false, now));
    v.cancel_release = true;
    v.log = job + ": released after its win expired: it bids again";
  }
  return v;
}

MarketStep after_round(const MarketLife& l, const MarketFacts& f, bool won, Micros pays,
                       MarketReason reason, time_t at, const MarketContext& ctx) {
  if (won) {
    MarketLife m;
    m.state = MarketState::kMatched;
    m.reason = MarketReason::kNew;
    m.bid = l.bid;
    m.price = pays;
    m.at = at;
    m.start_by = at + static_cast<time_t>(ctx.interval);
    m.run = f.run;
    m.shape = f.shape;
    return step(MarketEvent::kWon, m, HoldAction::kRelease);
  }
  if (l.state == MarketState::kWaiting && l.reason == reason) return step(MarketEvent::kNone, l);
  MarketLife next = l;
  next.reason = reason;
  next.since = ctx.now;
  return step(MarketEvent::kLost, next);
}

std::optional<RunPrice> run_price(const MarketLife& l, uint32_t run) {
  if (l.run != run) return std::nullopt;
  switch (l.state) {
    case MarketState::kMatched:
      return RunPrice{l.price, "matched"};
    case MarketState::kLocked:
      return RunPrice{l.price, "locked"};
    case MarketState::kOutside:
      if (!l.price) return std::nullopt;  // the floor was unknown: the fixed price
      return RunPrice{l.price, "floor"};
    default:
      return std::nullopt;
  }
}

std::optional<std::string> lock_begin_refusal(time_t begin, time_t now, uint32_t interval,
                                              uint32_t lock_ahead) {
  if (!begin)
    return std::string(
        "--lock-price needs --begin: a price is locked for a job booked ahead, e.g. "
        "--begin=now+2hours --lock-price");
  if (begin < now + static_cast<time_t>(interval))
    return "--lock-price: --begin must be at least one market interval (" +
           format_duration(interval) +
           ") ahead: a booking locks the price for a later start; to run now, bid in the next "
           "round (leave --lock-price out)";
  if (begin > now + static_cast<time_t>(lock_ahead))
    return "--lock-price: --begin is " + std::to_string((begin - now + 3599) / 3600) +
           " h ahead; a price can be locked at most " + std::to_string(lock_ahead / 3600) +
           " h ahead: book nearer the start, or leave --lock-price out";
  return std::nullopt;
}

}  // namespace planc
