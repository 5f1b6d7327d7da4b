#include "common/market.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "common/job_marks.h"
#include "common/preempt_policy.h"  // format_utc

namespace planc {
namespace {

constexpr Micros kCent = kMicrosPerUnit / 100;

Micros round_to_cent(Micros m) { return (m + kCent / 2) / kCent * kCent; }
Micros ceil_to_cent(Micros m) { return (m + kCent - 1) / kCent * kCent; }

// Multiplier (per mille) at this vacancy: straight lines between the
// points, flat beyond the ends.
int64_t curve_at(const std::vector<FloorPoint>& curve, uint32_t v) {
  if (curve.empty()) return 1000;
  if (v <= curve.front().vacancy_permille) return curve.front().multiplier_permille;
  for (size_t i = 1; i < curve.size(); i++) {
    const FloorPoint &a = curve[i - 1], &b = curve[i];
    if (v > b.vacancy_permille) continue;
    const int64_t span = b.vacancy_permille - a.vacancy_permille;
    const int64_t rise = static_cast<int64_t>(b.multiplier_permille) - a.multiplier_permille;
    // Rounded to the nearest per mille.
    const int64_t num = rise * (v - a.vacancy_permille);
    return a.multiplier_permille +
           (num >= 0 ? (num + span / 2) / span : -((-num + span / 2) / span));
  }
  return curve.back().multiplier_permille;
}

std::string money(Micros m) { return format_micros(m); }

}  // namespace

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    out += u >= 0x20 && u < 0x7f ? c : '?';
  }
  return out;
}

std::optional<std::vector<FloorPoint>> parse_floor_curve(std::string_view s, std::string* why) {
  std::vector<FloorPoint> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string_view item = s.substr(pos, comma == std::string_view::npos ? s.npos : comma - pos);
    size_t colon = item.find(':');
    auto v = colon == item.npos ? std::nullopt : parse_decimal_micros(item.substr(0, colon));
    auto m = colon == item.npos ? std::nullopt : parse_decimal_micros(item.substr(colon + 1));
    if (!v || !m) {
      *why = "'" + std::string(item) +
             "' is not a point VACANCY:MULTIPLIER (e.g. 0.3:0.8, 30% idle gives 80% of "
             "CardHourPriceFloor)";
      return std::nullopt;
    }
    if (*v > kMicrosPerUnit) {
      *why = "vacancy " + std::string(item.substr(0, colon)) +
             " is above 1 (it is a share of the pool)";
      return std::nullopt;
    }
    if (*m > 10 * kMicrosPerUnit) {
      *why = "multiplier " + std::string(item.substr(colon + 1)) + " is above 10";
      return std::nullopt;
    }
    FloorPoint p{static_cast<uint32_t>(*v / 1000), static_cast<uint32_t>(*m / 1000)};
    if (!out.empty() && p.vacancy_permille <= out.back().vacancy_permille) {
      *why = "vacancies must rise from point to point ('" + std::string(item) + "' does not)";
      return std::nullopt;
    }
    out.push_back(p);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string format_floor_curve(const std::vector<FloorPoint>& curve) {
  std::string out;
  for (const FloorPoint& p : curve) {
    if (!out.empty()) out += ",";
    out += permille_text(p.vacancy_permille) + ":" + permille_text(p.multiplier_permille);
  }
  return out;
}

Micros market_minimum(Micros list, const MarketConfig& m) {
  return ceil_to_cent(list * m.min_permille / 1000);
}

Micros market_floor(Micros base_floor, Micros list, uint32_t vacancy_permille,
                    const MarketConfig& m) {
  const Micros moved = round_to_cent(base_floor * curve_at(m.floor_curve, vacancy_permille) / 1000);
  return std::min(list, std::max(market_minimum(list, m), moved));
}

time_t next_round_after(time_t now, uint32_t interval) {
  const time_t i = interval ? interval : 1;
  return (now / i + 1) * i;
}

FloorKeeper::FloorKeeper(time_t now, const PlancConfig& cfg) : since_(now) {
  set(cfg, 0);
  floors_.next_round = next_round_after(now, cfg.market.interval_seconds);
}

void FloorKeeper::set(const PlancConfig& cfg, uint32_t vacancy) {
  const Prices& p = cfg.prices;
  floors_.default_floor = market_floor(p.card_hour_floor, p.default_card_hour, vacancy, cfg.market);
  floors_.by_type.clear();
  for (const auto& [type, list] : p.card_hour)
    floors_.by_type[type] = market_floor(p.card_hour_floor, list, vacancy, cfg.market);
}

bool FloorKeeper::sample(time_t now, const IdleMeter& meter, const PlancConfig& cfg) {
  if (now < floors_.next_round) return false;
  std::optional<uint32_t> v;
  if (auto m = meter.measure_since(since_, now); m && m->pool_gpus) v = m->idle_permille;
  since_ = now;
  floors_.at = now;
  floors_.vacancy = v;
  set(cfg, v.value_or(0));
  floors_.next_round = next_round_after(now, cfg.market.interval_seconds);
  return true;
}

MarketReason loss_reason(BidOutcome o, const MarketBid& b) {
  switch (o) {
    case BidOutcome::kOutbid:
      return MarketReason::kOutbid;
    case BidOutcome::kNoRoom:
      return MarketReason::kNoRoom;
    case BidOutcome::kBelowFloor:
      return MarketReason::kBelowFloor;
    case BidOutcome::kTooLarge:
      return MarketReason::kTooLarge;
    case BidOutcome::kHeldForLarger:
      return MarketReason::kHeldForLarger;
    case BidOutcome::kNotEligible:
      return b.ineligible.value_or(MarketReason::kOwnerHeld);
    case BidOutcome::kWon:
      break;
  }
  return MarketReason::kOutbid;
}

MarketRound clear_market(const std::vector<MarketBid>& bids, uint32_t capacity, uint32_t reachable,
                         Micros floor, Micros list, time_t now, uint32_t reserve_after) {
  MarketRound r;
  r.capacity = capacity;
  r.reachable = std::max(reachable, capacity);
  r.floor = floor;
  r.list = list;
  // Sorted as plain keys (price, submission, job id, index), not through
  // the bids: one contiguous array, no optional in the comparison.
  struct Key {
    Micros price;
    time_t submitted;
    uint32_t job_id, index;
    bool operator<(const Key& o) const {
      if (price != o.price) return price > o.price;
      if (submitted != o.submitted) return submitted < o.submitted;
      return job_id < o.job_id;
    }
  };
  std::vector<Key> in;
  in.reserve(bids.size());
  r.results.reserve(bids.size());
  std::vector<BidResult> tail;  // below the floor, not eligible
  for (uint32_t i = 0; i < bids.size(); i++) {
    const MarketBid& b = bids[i];
    const Key k{b.bid.value_or(list), b.submitted, b.job_id, i};
    if (b.ineligible)
      tail.push_back({b.job_id, i, BidOutcome::kNotEligible, k.price, 0});
    else if (k.price < floor)
      tail.push_back({b.job_id, i, BidOutcome::kBelowFloor, k.price, 0});
    else
      in.push_back(k);
  }
  // Only the bids up to where the room runs out (and the losers that set
  // the winners' prices) need their rank: a heap (built in O(n)) popped
  // that far costs O(n + k log n) where sorting every bid cost O(n log n)
  // (bench-market: 10,000 bids for a few hundred GPUs).  The rest are
  // outbid in no particular order.
  const auto worse = [](const Key& a, const Key& b) { return b < a; };  // heap top: the best
  std::make_heap(in.begin(), in.end(), worse);
  size_t heap = in.size();
  auto pop = [&]() -> const Key& {
    std::pop_heap(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(heap), worse);
    return in[--heap];
  };
  uint32_t left = capacity;
  bool held = false;
  // Ranked bids looked at, with their outcome (winners and passed over).
  while (heap > 0 && left > 0 && !held) {
    const Key& k = pop();
    const MarketBid& b = bids[k.index];
    BidResult res{k.job_id, k.index, BidOutcome::kWon, k.price, 0};
    if (b.gpus > r.reachable) {
      res.outcome = BidOutcome::kTooLarge;
    } else if (b.gpus <= left) {
      left -= b.gpus;
      r.allocated += b.gpus;
    } else {
      res.outcome = BidOutcome::kNoRoom;
      // The large-bid rule: the first bid passed over that has waited long
      // enough for room gets what is left, round after round.
      if (b.no_room_since && now - b.no_room_since >= static_cast<time_t>(reserve_after)) {
        held = true;
        r.held_for = b.job_id;
      }
    }
    r.results.push_back(res);
  }
  // Each winner pays the best loser ranked after it that could have used
  // its GPUs plus what is left unsold (so its price never exceeds its own
  // bid): the first such in rank order, among the bids passed over behind
  // it, then those the room ran out before (popped from the heap only as
  // far as a winner still has no price).  Bids behind a held room, too
  // large or below the floor set no price.
  const BidOutcome rest = held ? BidOutcome::kHeldForLarger : BidOutcome::kOutbid;
  const uint32_t unsold = held ? 0 : left;
  std::vector<size_t> unpriced;  // winners' positions in results
  const size_t looked = r.results.size();
  for (size_t w = 0; w < looked; w++) {
    if (r.results[w].outcome != BidOutcome::kWon) continue;
    const uint32_t room = bids[r.results[w].index].gpus + unsold;
    std::optional<Micros> p;
    for (size_t i = w + 1; i < looked && !p; i++)
      if (r.results[i].outcome == BidOutcome::kNoRoom && bids[r.results[i].index].gpus <= room)
        p = r.results[i].ranked_at;
    if (p)
      r.results[w].pays = std::max(floor, *p);
    else
      unpriced.push_back(w);
  }
  while (!unpriced.empty() && heap > 0 && !held) {
    const Key& k = pop();
    const MarketBid& b = bids[k.index];
    const bool too_large = b.gpus > r.reachable;
    r.results.push_back({k.job_id, k.index, too_large ? BidOutcome::kTooLarge : rest, k.price, 0});
    if (too_large) continue;
    std::erase_if(unpriced, [&](size_t w) {
      if (b.gpus > bids[r.results[w].index].gpus + unsold) return false;
      r.results[w].pays = std::max(floor, k.price);
      return true;
    });
  }
  for (size_t w : unpriced) r.results[w].pays = floor;
  for (const BidResult& res : r.results)
    if (res.outcome == BidOutcome::kWon) r.clearing = std::max(r.clearing.value_or(0), res.pays);
  for (size_t i = 0; i < heap; i++) {
    const MarketBid& b = bids[in[i].index];
    r.results.push_back({in[i].job_id, in[i].index,
                         b.gpus > r.reachable ? BidOutcome::kTooLarge : rest, in[i].price, 0});
  }
  for (BidResult& t : tail) r.results.push_back(t);
  return r;
}

std::vector<TypedRound> plan_round(const RoundPlanInput& in) {
  const std::vector<MarketBid>& bids = *in.bids;
  const MarketFloors& floors = *in.floors;
  const Prices& prices = *in.prices;
  MarketOffer offer = in.offer;
  for (const SetAside& s : in.set_aside) {
    offer.total -= s.gpus;
    if (auto it = offer.by_type.find(s.gpu_type); it != offer.by_type.end()) it->second -= s.gpus;
  }
  // Bid indices per market; "" is the default market.  Every bid in one
  // market (the usual: no GPU types, or every bid names the same) needs no
  // index: that market is cleared in place.
  std::map<std::string, std::vector<uint32_t>> by_market;
  for (const auto& [type, free] : offer.by_type) by_market[type];
  bool one_market = true;
  for (const MarketBid& b : bids)
    if (b.gpu_type != bids.front().gpu_type) {
      one_market = false;
      break;
    }
  if (one_market && !bids.empty())
    by_market[bids.front().gpu_type];  // its members: every bid (below)
  else
    for (uint32_t i = 0; i < bids.size(); i++) by_market[bids[i].gpu_type].push_back(i);
  auto clamp = [](int64_t v) {
    return static_cast<uint32_t>(std::clamp<int64_t>(v, 0, UINT32_MAX));
  };
  std::vector<TypedRound> out;
  int64_t left = offer.total;
  auto clear_one = [&](const std::string& type, const std::vector<uint32_t>& members,
                       int64_t capacity, int64_t reachable) {
    // Every bid in one market (the usual): cleared in place, no copy.
    const bool all = (one_market && !bids.empty() && type == bids.front().gpu_type) ||
                     (!bids.empty() && members.size() == bids.size());
    std::vector<MarketBid> sub;
    if (!all) {
      sub.reserve(members.size());
      for (uint32_t i : members) sub.push_back(bids[i]);
    }
    const auto floor_it = floors.by_type.find(type);
    const auto list_it = prices.card_hour.find(type);
    TypedRound t;
    t.gpu_type = type.empty() ? "default" : type;
    t.round =
        clear_market(all ? bids : sub, clamp(std::min(capacity, left)), clamp(reachable),
                     floor_it != floors.by_type.end() ? floor_it->second : floors.default_floor,
                     list_it != prices.card_hour.end() ? list_it->second : prices.default_card_hour,
                     in.now, in.reserve_after);
    if (!all)
      for (BidResult& r : t.round.results) r.index = members[r.index];
    left -= t.round.allocated;
    out.push_back(std::move(t));
  };
  for (const auto& [type, members] : by_market) {
    if (type.empty()) continue;
    auto free = offer.by_type.find(type);
    auto reach = offer.reachable_by_type.find(type);
    clear_one(type, members, free != offer.by_type.end() ? free->second : 0,
              reach != offer.reachable_by_type.end() ? reach->second : 0);
  }
  auto untyped = by_market.find("");
  if (untyped != by_market.end() || out.empty())
    clear_one("", untyped != by_market.end() ? untyped->second : std::vector<uint32_t>{}, left,
              offer.reachable_total);
  return out;
}

std::string gpu_type_of(std::string_view tres) {
  for (size_t at = tres.find("gpu:"); at != tres.npos; at = tres.find("gpu:", at + 1)) {
    if (at > 0 && tres[at - 1] != ':' && tres[at - 1] != '/') continue;
    size_t b = at + 4, e = tres.find_first_of(":,=", b);
    std::string_view tok = tres.substr(b, e == tres.npos ? tres.npos : e - b);
    if (tok.empty() || tok.find_first_not_of("0123456789") == tres.npos) continue;
    return ascii_lower(tok);
  }
  return "";
}

MarketCheck check_market_request(const MarketRequest& r, time_t now, const MarketConfig& m) {
  MarketCheck c;
  auto refuse = [&](std::string why) {
    c.ok = false;
    c.error = std::move(why);
    return c;
  };
  const bool spot = r.tier == "P2" || r.tier == "P3";
  if (!r.bid_text.empty()) {
    auto bid = parse_decimal_micros(r.bid_text);
    const std::string shown = printable(r.bid_text, 32);
    if (!bid || *bid <= 0)
      return refuse("--bid=" + shown + " is not a price: give a card-hour price in " + r.currency +
                    ", e.g. --bid=12.50");
    // Money is kept in minor units (cents); a finer bid would be rounded
    // by nobody knows whom.
    if (*bid % (kMicrosPerUnit / 100))
      return refuse(
          "--bid=" + shown + " has more than two decimals: prices are in whole cents of " +
          r.currency +
          ", e.g. --bid=" + money(*bid / (kMicrosPerUnit / 100) * (kMicrosPerUnit / 100)));
    if (r.tier != "P2")
      return refuse("--bid is for P2 jobs (the spot market); this job is " + r.tier +
                    ": submit it with --qos=p2-spot, or leave --bid out");
    const Micros minimum = market_minimum(r.list, m);
    if (*bid < minimum)
      return refuse("--bid=" + shown + " is below the market's minimum of " + money(minimum) + " " +
                    r.currency + " per card-hour (" + permille_text(m.min_permille) +
                    " of the list price " + money(r.list) + "): bid at least " + money(minimum));
    if (*bid > r.list)
      return refuse("--bid=" + shown + " is above the list price of " + money(r.list) + " " +
                    r.currency + " per card-hour: a guaranteed tier costs that; bid at most " +
                    money(r.list));
    c.bid = bid;
    if (*bid < r.floor)
      c.note = "bid " + money(*bid) + " " + r.currency +
               " per card-hour is below the current floor " + money(r.floor) +
               ": the job waits until the floor falls to it";
  }
  if (r.lock_price) {
    if (!r.bid_text.empty())
      return refuse(
          "--bid and --lock-price together: a locked booking pays the floor at booking and "
          "takes part in no round; give one of them");
    if (r.tier != "P2")
      return refuse("--lock-price is for P2 jobs (the spot market); this job is " + r.tier +
                    ": submit it with --qos=p2-spot, or leave --lock-price out");
    if (auto why = lock_begin_refusal(r.begin, now, m.interval_seconds, m.lock_ahead_seconds))
      return refuse(*why);
  }
  if (r.tier == "P2" && r.market_open && r.array)
    return refuse(
        "job arrays and heterogeneous jobs cannot bid in the P2 market (each needs a round of its "
        "own): submit the tasks as separate jobs, or use another tier");
  if (r.spot_fallback) {
    if (!spot)
      return refuse("--spot-fallback is for P2 and P3 jobs; this job is " + r.tier +
                    ", which is never preempted: leave --spot-fallback out");
    if (!r.has_guaranteed_alternative)
      return refuse("--spot-fallback: account " + r.account +
                    " may not use a guaranteed tier to fall back to; ask your admin to add "
                    "one to the account, or leave --spot-fallback out");
  }
  return c;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// "default=8.00,h800=8.00 CNY/card-hour" -> {type: price}, currency.
std::vector<std::pair<std::string, Micros>> price_list(std::string_view v, std::string* currency) {
  std::vector<std::pair<std::string, Micros>> out;
  size_t sp = v.find(' ');
  if (sp != v.npos && currency) {
    std::string_view unit = v.substr(sp + 1);
    *currency = std::string(unit.substr(0, unit.find('/')));
  }
  std::string_view list = v.substr(0, sp);
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    size_t eq = item.find('=');
    if (eq != item.npos)
      if (auto m = parse_decimal_micros(item.substr(eq + 1)))
        out.emplace_back(std::string(item.substr(0, eq)), *m);
    if (comma == list.npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

}  // namespace

MarketStatus parse_market_status(std::string_view text) {
  MarketStatus s;
  size_t at = text.find("----- slurmctld/planc");
  if (at == text.npos) return s;
  s.found = true;
  text.remove_prefix(at);
  text.remove_prefix(
      std::min(text.size(), text.find('\n') == text.npos ? text.size() : text.find('\n') + 1));
  std::vector<std::pair<std::string, Micros>> floors, lists;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == text.npos ? text.size() : nl + 1);
    if (line.rfind("-----", 0) == 0) break;  // the next plugin's section
    size_t eq = line.find(" = ");
    if (eq == line.npos) continue;
    std::string_view key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 3));
    if (key == "Market")
      s.open = value == "yes";
    else if (key == "MarketFloor")
      floors = price_list(value, &s.currency);
    else if (key == "MarketListPrice")
      lists = price_list(value, nullptr);
    else if (key == "MarketVacancy")
      s.vacancy = value;
    else if (key == "MarketLastRound")
      s.last_round = value;
    else if (key == "MarketNextRound")
      s.next_round = value;
    else if (key == "MarketInterval") {
      s.interval = value;
      if (auto secs = parse_duration(value.substr(0, value.find(' ')))) s.interval_seconds = *secs;
    } else if (key == "MarketFloorCurve")
      s.curve = value;
    else if (key == "MarketMinFraction")
      s.min_fraction = value;
    else if (key == "MarketLastClearing")
      s.last_clearing = value;
  }
  for (const auto& [type, floor] : floors) {
    MarketStatus::Price p{type, floor, 0};
    for (const auto& [t, list] : lists)
      if (t == type) p.list = list;
    s.prices.push_back(p);
  }
  return s;
}

namespace {
constexpr size_t kOwnJobIdWidth = 20, kOwnStateWidth = 4;
}  // namespace

std::string own_jobs_format() {
  return "JobID:" + std::to_string(kOwnJobIdWidth) +
         ",StateCompact:" + std::to_string(kOwnStateWidth) + ",admin_comment:4096";
}

std::vector<MarketStatus::OwnJob> parse_own_market_jobs(std::string_view out) {
  constexpr size_t kCommentAt = kOwnJobIdWidth + kOwnStateWidth;
  std::vector<MarketStatus::OwnJob> jobs;
  while (!out.empty()) {
    size_t nl = out.find('\n');
    std::string_view line = out.substr(0, nl);
    out = nl == out.npos ? std::string_view() : out.substr(nl + 1);
    if (line.size() <= kCommentAt) continue;
    auto life = parse_life(trim(line.substr(kCommentAt)));
    if (!life) continue;
    MarketStatus::OwnJob j;
    j.job_id = trim(line.substr(0, kOwnJobIdWidth));
    j.state = trim(line.substr(kOwnJobIdWidth, kOwnStateWidth));
    j.life = *life;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

namespace {
// Hours with one decimal (4.2), two below an hour (0.05).
std::string hours_text(double seconds) {
  char buf[32];
  const double h = seconds / 3600.0;
  std::snprintf(buf, sizeof buf, h < 1 ? "%.2f" : "%.1f", h);
  return buf;
}
}  // namespace

std::string format_market_status(const MarketStatus& s, bool json) {
  auto vs_list = [](const MarketStatus::Price& p) -> int64_t {
    if (!p.list) return 0;
    const int64_t d = (p.floor - p.list) * 100;
    return d >= 0 ? (d + p.list / 2) / p.list : -((-d + p.list / 2) / p.list);
  };
  if (json) {
    std::string o = "{\"market\": " + json_string(!s.found ? "unknown"
                                                  : s.open ? "open"
                                                           : "closed");
    if (s.open) {
      o += ", \"currency\": " + json_string(s.currency) + ", \"floors\": [";
      for (size_t i = 0; i < s.prices.size(); i++) {
        const auto& p = s.prices[i];
        o += std::string(i ? ", " : "") + "{\"gpu_type\": " + json_string(p.gpu_type) +
             ", \"floor\": " + json_string(format_micros(p.floor)) +
             ", \"list\": " + json_string(format_micros(p.list)) +
             ", \"vs_list_percent\": " + std::to_string(vs_list(p)) + "}";
      }
      o += "], \"vacancy\": " + json_string(s.vacancy) +
           ", \"last_round\": " + json_string(s.last_round) +
           ", \"next_round\": " + json_string(s.next_round) +
           ", \"interval\": " + json_string(s.interval) +
           ", \"last_clearing\": " + json_string(s.last_clearing);
      if (const auto& i = s.interruption) {
        o += ", \"expected_interruption\": {\"window_hours\": " + std::to_string(i->window_hours);
        if (!i->error.empty())
          o += ", \"error\": " + json_string(i->error);
        else
          o += ", \"p2_runs\": " + std::to_string(i->runs) +
               ", \"preempted\": " + std::to_string(i->preempted) +
               ", \"mean_run_hours\": " + json_string(hours_text(i->mean_run_seconds));
        o += "}";
      }
      if (const auto& own = s.own_jobs) {
        o += ", \"your_jobs\": [";
        for (size_t i = 0; i < own->size(); i++) {
          const auto& j = (*own)[i];
          auto price = [](const std::optional<Micros>& v) {
            return v ? json_string(format_micros(*v)) : std::string("null");
          };
          const MarketLife& l = j.life;
          auto if_state = [&](MarketState st) {
            return l.state == st ? std::optional<Micros>(l.price) : std::nullopt;
          };
          o += std::string(i ? ", " : "") + "{\"job_id\": " + json_string(j.job_id) +
               ", \"state\": " + json_string(j.state) + ", \"bid\": " + price(l.bid) +
               ", \"matched\": " + price(if_state(MarketState::kMatched)) +
               ", \"locked\": " + price(if_state(MarketState::kLocked)) +
               ", \"market\": " + json_string(describe_life(l, s.currency, s.interval_seconds)) +
               "}";
        }
        o += "]";
      }
    }
    return o + "}\n";
  }
  if (!s.found)
    return "slurmctld/planc is not running on this cluster (SlurmctldPlugstack=planc): no market "
           "to show.\n";
  if (!s.open) return "The P2 spot market is not open on this cluster (planc.conf Market=no).\n";
  std::string o;
  for (size_t i = 0; i < s.prices.size(); i++) {
    const auto& p = s.prices[i];
    std::string type = p.gpu_type == "default" ? "other GPUs" : p.gpu_type;
    for (char& c : type)
      if (p.gpu_type != "default")
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const int64_t pct = vs_list(p);
    o += std::string(i ? "               " : "Current floor: ") + type + " @ " +
         format_micros(p.floor) + " " + s.currency + "/card-hour (" + (pct > 0 ? "+" : "") +
         std::to_string(pct) + "% vs list " + format_micros(p.list) + ")\n";
  }
  o += "Vacancy:       " + s.vacancy + " of the GPUs idle over the last round's interval\n";
  o += "Last round:    " + s.last_round + "; next round " + s.next_round + " (every " + s.interval +
       ")\n";
  o += "Last clearing: " + (s.last_clearing.empty() ? std::string("none yet") : s.last_clearing) +
       "\n";
  if (const auto& i = s.interruption) {
    const std::string window = "in the last " + std::to_string(i->window_hours) + " h";
    o += "Expected interruption: may be preempted by P0 or P1 (guaranteed work); ";
    if (!i->error.empty())
      o += "how long P2 jobs run is unknown (the bills could not be read: " + i->error + ")\n";
    else if (!i->runs)
      o += "no P2 run ended " + window + "\n";
    else
      o += "P2 jobs have run " + hours_text(i->mean_run_seconds) + " h on average " + window +
           " (" + std::to_string(i->runs) + " runs ended, " + std::to_string(i->preempted) +
           " preempted)\n";
  }
  if (const auto& own = s.own_jobs) {
    if (own->empty()) o += "Your P2 jobs:  none in the market\n";
    for (size_t i = 0; i < own->size(); i++)
      o += std::string(i ? "               " : "Your P2 jobs:  ") + (*own)[i].job_id + " " +
           (*own)[i].state + ": " + describe_life((*own)[i].life, s.currency, s.interval_seconds) +
           "\n";
  }
  return o;
}

}  // namespace planc
