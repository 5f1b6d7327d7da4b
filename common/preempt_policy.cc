#include "common/preempt_policy.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <sys/wait.h>

#include "common/state_file.h"

namespace planc {
namespace {

constexpr std::string_view kHeader = "planc-preempt-state v1";

}  // namespace

void PreemptLedger::record(uint32_t job_id, time_t now) { history_[job_id].push_back(now); }

bool PreemptLedger::unrecord(uint32_t job_id, time_t when) {
  auto it = history_.find(job_id);
  if (it == history_.end()) return false;
  auto& v = it->second;
  auto t = std::find(v.begin(), v.end(), when);
  if (t == v.end()) return false;
  v.erase(t);
  if (v.empty()) history_.erase(it);
  return true;
}

uint32_t PreemptLedger::count_in_window(uint32_t job_id, time_t now) const {
  auto it = history_.find(job_id);
  if (it == history_.end()) return 0;
  uint32_t n = 0;
  for (time_t t : it->second)
    if (in_window(t, now)) ++n;
  return n;
}

time_t PreemptLedger::capped_until(uint32_t job_id, time_t now) const {
  if (!capped(job_id, now)) return 0;
  // The cap lifts when fewer than max_count remain in the window: when the
  // (count - max + 1)-th oldest counted preemption leaves it.
  std::vector<time_t> counted;
  for (time_t t : history_.at(job_id))
    if (in_window(t, now)) counted.push_back(t);
  std::sort(counted.begin(), counted.end());
  return counted[counted.size() - max_count_] + window_;
}

void PreemptLedger::prune(time_t now) {
  for (auto it = history_.begin(); it != history_.end();) {
    auto& v = it->second;
    v.erase(std::remove_if(v.begin(), v.end(), [&](time_t t) { return !in_window(t, now); }),
            v.end());
    it = v.empty() ? history_.erase(it) : std::next(it);
  }
}

std::vector<uint32_t> PreemptLedger::job_ids() const {
  std::vector<uint32_t> ids;
  ids.reserve(history_.size());
  for (const auto& [id, _] : history_) ids.push_back(id);
  return ids;
}

void LedgerFilter::rebuild(const std::vector<uint32_t>& job_ids) {
  std::array<uint64_t, kWords> next{};
  for (uint32_t id : job_ids) next[word(id)] |= uint64_t{1} << bit(id);
  for (size_t i = 0; i < kWords; ++i) words_[i].store(next[i], std::memory_order_relaxed);
}

std::string PreemptLedger::serialize() const {
  std::string body;
  for (const auto& [id, times] : history_) {
    if (times.empty()) continue;
    body += std::to_string(id);
    for (time_t t : times) body += " " + std::to_string(static_cast<int64_t>(t));
    body += "\n";
  }
  size_t jobs = 0;
  for (const auto& [id, times] : history_) jobs += !times.empty();
  return frame_state(kHeader, body, jobs);
}

Result<PreemptLedger> PreemptLedger::parse(std::string_view text, uint32_t max_count,
                                           uint32_t window_seconds) {
  using R = Result<PreemptLedger>;
  uint64_t jobs = 0;
  auto framed = unframe_state(text, kHeader, &jobs);
  if (!framed.ok())
    return R::failure("not a valid Plan C preemption state file: " + framed.error());
  std::string_view body = framed.value();

  PreemptLedger ledger(max_count, window_seconds);
  auto all = split_lines(body);
  if (!all) return R::failure("line without newline");
  size_t lines = 0;
  for (std::string_view line : *all) {
    auto w = split_words(line);
    ++lines;
    uint64_t id = 0;
    if (w.size() < 2 || !parse_u64(w[0], &id) || id == 0 || id > 0xffffffffULL)
      return R::failure("bad job line " + std::to_string(lines));
    auto& times = ledger.history_[static_cast<uint32_t>(id)];
    if (!times.empty()) return R::failure("job " + std::to_string(id) + " listed twice");
    for (size_t i = 1; i < w.size(); ++i) {
      uint64_t t = 0;
      if (!parse_u64(w[i], &t) || t > 0x7fffffffffffULL)
        return R::failure("bad time on job line " + std::to_string(lines));
      times.push_back(static_cast<time_t>(t));
    }
  }
  if (lines != jobs) return R::failure("job count does not match the trailer");
  return ledger;
}

uint32_t run_minutes(time_t started, time_t now) {
  if (started <= 0 || now <= started) return 0;
  time_t m = now / 60 - started / 60;
  return m > 0xffffffff ? 0xffffffffu : static_cast<uint32_t>(m);
}

uint32_t victim_rank(const VictimFacts& v) {
  // [31:26] node crowd + 1, [25:24] victim class, [23:16] preemptions in
  // the window, [15:0] run minutes (45 days).  0 is kInGraceRank's alone.
  uint32_t crowd = std::min<uint32_t>(v.node_victims, NodeCrowding::kNotNeeded) + 1;
  uint32_t tier_class = std::clamp<uint32_t>(v.victim_class, 1, 3);
  uint32_t count = std::min<uint32_t>(v.recent_preemptions, 0xff);
  uint32_t minutes = std::min<uint32_t>(v.run_minutes, 0xffff);
  return (crowd << 26) | (tier_class << 24) | (count << 16) | minutes;
}

bool NodeCrowding::offer(uint32_t preemptor, uint32_t candidate, const std::function<Ask()>& ask,
                         size_t node_count) {
  if (!collecting_for(preemptor) || candidate == first_) {
    begin(preemptor, ask(), node_count);
    first_ = candidate;
  }
  return ask_.counts();
}

void NodeCrowding::begin(uint32_t preemptor, Ask ask, size_t node_count) {
  for (uint32_t n : touched_)
    if (n < per_node_.size()) per_node_[n] = p3_per_node_[n] = 0;
  touched_.clear();
  held_.clear();
  victims_.clear();
  worked_out_ = false;
  preemptor_ = preemptor;
  const bool whole = ask.whole_nodes;
  ask_ = std::move(ask);
  open_ = true;
  if (whole && per_node_.size() != node_count) {
    per_node_.assign(node_count, 0);
    p3_per_node_.assign(node_count, 0);
  }
}

void NodeCrowding::add(uint32_t node, bool p3) {
  if (!ask_.whole_nodes || !open_ || node >= per_node_.size()) return;
  if (!per_node_[node]) touched_.push_back(node);
  if (per_node_[node] < UINT16_MAX) ++per_node_[node];
  if (p3 && p3_per_node_[node] < UINT16_MAX) ++p3_per_node_[node];
}

uint32_t NodeCrowding::crowd(uint32_t node) const {
  const uint32_t runs = on_node(node);
  if (!runs || (!ask_.p3_first && !ask_.spare_p3)) return runs;
  // (P3 runs; runs) in one key below kNotNeeded: 6 x 10.  Past the budget
  // each P3 run counts; WholeNodeSpareP3 counts a single one as none.
  const uint32_t p3 = ask_.p3_first ? std::min<uint32_t>(p3_per_node_[node], 5)
                                    : std::clamp<uint32_t>(p3_per_node_[node], 1, 6) - 1;
  return p3 * 10 + std::min<uint32_t>(runs, 9);
}

void NodeCrowding::add(uint32_t node, uint32_t job, uint32_t gpus,
                       std::optional<NodeGpus> node_gpus, bool in_grace, uint32_t order, bool p3) {
  if (!gpus_on_a_node() || !open_) return;
  auto [it, first] = held_.try_emplace(node);
  NodeHeld& n = it->second;
  if (first) {
    n.usable = node_gpus.has_value();
    n.total = node_gpus ? node_gpus->total : 0;
    n.free_gpus = node_gpus ? node_gpus->free : 0;
  }
  if (in_grace) {
    n.free_gpus += gpus;  // comes free whatever is chosen
  } else {
    n.held.push_back({job, gpus, order, p3});
    n.held_gpus += gpus;
  }
  worked_out_ = false;
}

void NodeCrowding::mark(uint32_t job, uint32_t count, uint32_t runs) {
  auto [v, first] = victims_.try_emplace(job, Mark{count, runs});
  if (!first && count < v->second.rank) v->second = Mark{count, runs};
}

uint32_t NodeCrowding::p3_first_key(uint32_t p3, bool clearable, uint32_t runs) {
  // 5 x (2 x 6): at most 60.
  return std::min<uint32_t>(p3, 4) * 12 + (clearable ? 6 : 0) + std::clamp<uint32_t>(runs, 1, 6);
}

bool NodeCrowding::fewest_set(std::vector<Held>& held, uint64_t gap, std::vector<bool>* taken,
                              size_t* k, size_t* p3) const {
  // How few: the most GPUs first.
  std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) {
    if (a.gpus != b.gpus) return a.gpus > b.gpus;
    return a.order != b.order ? a.order < b.order : a.job < b.job;
  });
  taken->assign(held.size(), false);
  *k = *p3 = 0;
  if (ask_.p3_first) {
    // The fewest P3 runs that, with the P2 runs (all of them at most),
    // make up the gap; then the fewest P2 runs for the rest.  The largest
    // runs of each, so that both counts are the fewest.
    uint64_t p2_gpus = 0;
    for (const Held& h : held)
      if (!h.p3) p2_gpus += h.gpus;
    uint64_t from_p3 = 0;
    for (size_t i = 0; from_p3 + p2_gpus < gap; ++i) {
      if (i == held.size()) return false;  // not enough here even with all of them
      if (!held[i].p3) continue;
      (*taken)[i] = true;
      from_p3 += held[i].gpus;
      ++*p3;
    }
    for (size_t i = 0; i < held.size() && from_p3 < gap; ++i)
      if (!held[i].p3) {
        (*taken)[i] = true;
        from_p3 += held[i].gpus;
      }
    *k = static_cast<size_t>(std::count(taken->begin(), taken->end(), true));
    return true;
  }
  uint64_t freed = 0;
  while (*k < held.size() && freed < gap) freed += held[(*k)++].gpus;
  if (freed < gap) return false;  // not enough here even with all of them
  // Of the sets of k that free enough, the one the victim order prefers:
  // slot by slot, the first candidate in that order after which the
  // largest of the others still make up the rest.
  std::vector<size_t> by_order(held.size());
  for (size_t i = 0; i < held.size(); ++i) by_order[i] = i;
  std::sort(by_order.begin(), by_order.end(), [&held](size_t a, size_t b) {
    return held[a].order != held[b].order ? held[a].order < held[b].order
                                          : held[a].job < held[b].job;
  });
  uint64_t rest = gap;
  for (size_t slot = 0; slot < *k && rest > 0; ++slot) {
    for (size_t i : by_order) {
      if ((*taken)[i] || !held[i].gpus) continue;
      const uint64_t after = rest > held[i].gpus ? rest - held[i].gpus : 0;
      uint64_t largest = 0;  // `held` is sorted by GPUs, most first
      size_t left = *k - slot - 1;
      for (size_t j = 0; j < held.size() && left; ++j)
        if (j != i && !(*taken)[j]) {
          largest += held[j].gpus;
          --left;
        }
      if (largest < after) continue;
      (*taken)[i] = true;
      rest = after;
      break;
    }
  }
  for (size_t i = 0; i < held.size(); ++i)
    if ((*taken)[i] && held[i].p3) ++*p3;
  return true;
}

void NodeCrowding::work_out() {
  victims_.clear();
  std::vector<bool> taken;
  for (auto& [node, n] : held_) {
    if (!n.usable) continue;
    // Work that is no candidate's pins the node: it never comes clear.
    const bool clearable = uint64_t{n.free_gpus} + n.held_gpus >= n.total;
    const uint32_t base = clearable ? kClear : 0;
    if (n.free_gpus >= ask_.gpus) {
      // Not the GPUs: any candidate may be what frees the node.
      // How many must go is not known: as many as there are, for the
      // P3 budget (runs_to_free).
      const auto runs = static_cast<uint32_t>(std::min<size_t>(n.held.size(), UINT32_MAX));
      for (const Held& h : n.held)
        mark(h.job, ask_.p3_first ? p3_first_key(h.p3, clearable, 1) : base + 1, runs);
      continue;
    }
    size_t k = 0, p3 = 0;
    if (!fewest_set(n.held, ask_.gpus - n.free_gpus, &taken, &k, &p3)) continue;
    const uint32_t count =
        ask_.p3_first
            ? p3_first_key(static_cast<uint32_t>(std::min<size_t>(p3, UINT32_MAX)), clearable,
                           static_cast<uint32_t>(std::min<size_t>(k, UINT32_MAX)))
            : static_cast<uint32_t>(std::min<size_t>(base + k, kNotNeeded - 1));
    for (size_t i = 0; i < n.held.size(); ++i)
      if (taken[i]) mark(n.held[i].job, count, static_cast<uint32_t>(k));
  }
  worked_out_ = true;
}

const NodeCrowding::Mark* NodeCrowding::mark_of(uint32_t job) {
  if (!worked_out_) work_out();
  auto it = victims_.find(job);
  return it == victims_.end() ? nullptr : &it->second;
}

uint32_t NodeCrowding::fewest_victims(uint32_t job) {
  if (!gpus_on_a_node()) return 0;
  const Mark* m = mark_of(job);
  return m ? m->rank : kNotNeeded;
}

std::optional<uint32_t> NodeCrowding::runs_to_free(uint32_t job) {
  if (!gpus_on_a_node()) return std::nullopt;
  const Mark* m = mark_of(job);
  return m ? std::optional<uint32_t>(m->runs) : std::nullopt;
}

bool Entitlement::allows(const Tier& t) const {
  for (const std::string& q : qos)
    if (iequals(q, t.qos)) return true;
  return false;
}

const Tier* advised_tier(const PlancConfig& cfg, TierId from, const Entitlement& ent) {
  const Tier* first = nullptr;
  if (auto alt = cfg.tiers.tier(from).alternative; alt && !cfg.tiers.tier(*alt).preemptible)
    first = &cfg.tiers.tier(*alt);
  if (first && (!ent.known || ent.allows(*first))) return first;
  for (const Tier& t : cfg.tiers.all())
    if (!t.preemptible && (!ent.known || ent.allows(t))) return &t;
  return nullptr;
}

namespace {

std::string guaranteed_names(const PlancConfig& cfg) {
  std::string out;
  for (const Tier& t : cfg.tiers.all()) {
    if (t.preemptible) continue;
    if (!out.empty()) out += " or ";
    out += t.qos + " (" + t.label + ")";
  }
  return out;
}

std::string advice_for(const PlancConfig& cfg, const Tier* t, const std::string& account,
                       std::string_view lead, bool with_product) {
  if (t)
    return std::string(lead) + "--qos=" + t->qos +
           (with_product ? " (" + t->label + ", " + t->product + ")" : "");
  std::string who = account.empty() ? "your account" : "account " + account;
  return who + " may use no guaranteed tier; ask your account coordinator for access to " +
         guaranteed_names(cfg);
}

}  // namespace

std::string guaranteed_advice(const PlancConfig& cfg, TierId from, const Entitlement& ent,
                              std::string_view lead, bool with_product) {
  return advice_for(cfg, advised_tier(cfg, from, ent), ent.account, lead, with_product);
}

std::string describe_wait_status(uint32_t w) {
  if (WIFSIGNALED(w)) return "signal " + std::to_string(WTERMSIG(w));
  return "exit " + std::to_string(WEXITSTATUS(w));
}

RunEndVerdict judge_run_end(const PlancConfig& cfg, const RunEndFacts& f) {
  using E = RunEndFacts::Ending;
  switch (f.ending) {
    case E::kPreempted:
    case E::kNodeFail:
      return RunEndVerdict::kNotOurs;
    case E::kCancelled:
      return RunEndVerdict::kCancelledInGrace;
    default:
      break;
  }
  if (cfg.grace_finished_exit_code >= 0 && WIFEXITED(f.wait_status) &&
      static_cast<int32_t>(WEXITSTATUS(f.wait_status)) == cfg.grace_finished_exit_code)
    return RunEndVerdict::kFinished;
  return RunEndVerdict::kTreatAsPreempted;
}

std::string format_duration(uint32_t s) {
  if (s % 3600 == 0) return std::to_string(s / 3600) + " h";
  if (s % 60 == 0) return std::to_string(s / 60) + " min";
  return std::to_string(s) + " s";
}

std::string format_utc(time_t t) {
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<time_t> parse_utc(std::string_view s) {
  if (s.size() < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' ||
      s[19] != 'Z')
    return std::nullopt;
  auto num = [&](size_t at, size_t n, int* out) {
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  struct tm tm = {};
  int y, mo, d, h, mi, se;
  if (!num(0, 4, &y) || !num(5, 2, &mo) || !num(8, 2, &d) || !num(11, 2, &h) || !num(14, 2, &mi) ||
      !num(17, 2, &se))
    return std::nullopt;
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = se;
  return timegm(&tm);
}

std::string preemption_note(const PlancConfig& cfg, const PreemptionEvent& e,
                            const PreemptionOutcome& o) {
  const Tier& victim = cfg.tiers.tier(e.victim_tier);
  std::string by;
  if (e.preemptor_job) {
    const Tier& p = cfg.tiers.tier(e.preemptor_tier);
    by = " by job " + std::to_string(e.preemptor_job) + " (" + p.label + " " + p.qos + ")";
  }
  const std::string window = " per " + format_duration(cfg.preempt_window_seconds);
  const std::string of_most = " of at most " + std::to_string(cfg.preempt_max_count);
  if (o.end == PreemptionEnd::kCalledOff) {
    uint32_t left = e.count_in_window ? e.count_in_window - 1 : 0;
    return "planc: preemption at " + format_utc(e.when) + by + " called off at " +
           format_utc(o.at) + " (" + o.detail + "); SIGTERM was sent at " + format_utc(e.when) +
           "; this job keeps running and the preemption is not counted (" + std::to_string(left) +
           of_most + window + ")";
  }
  std::string s = "planc: preempted at " + format_utc(e.when) + by;
  if (e.grace_seconds)
    s += "; SIGTERM sent, grace until " + format_utc(e.when + e.grace_seconds) + " (" +
         std::to_string(e.grace_seconds) + " s to checkpoint)";
  else
    s += "; no grace (" + victim.label + ")";
  const std::string then =
      e.requeue ? "requeued (auto-restart)" : "cancelled (job not requeueable)";
  switch (o.end) {
    case PreemptionEnd::kInProgress:
      s += e.grace_seconds ? "; to be " + then + " when the grace ends" : "; " + then;
      break;
    case PreemptionEnd::kRequeued:
      s += "; requeued (auto-restart)";
      break;
    case PreemptionEnd::kCancelled:
      s += "; cancelled (job not requeueable)";
      break;
    case PreemptionEnd::kEndedInGrace:
      s += "; ended on its own at " + format_utc(o.at) + " during the grace (" + o.detail +
           "): treated as preempted, " + then;
      break;
    case PreemptionEnd::kFinishedInGrace:
      s += "; finished at " + format_utc(o.at) + " during the grace with " + o.detail +
           " (GraceFinishedExitCode): completed and billed, not requeued";
      break;
    case PreemptionEnd::kCancelledInGrace:
      s += "; cancelled at " + format_utc(o.at) + " during the grace " + o.detail +
           ": not requeued, this run is not billed";
      break;
    case PreemptionEnd::kCalledOff:
      break;
  }
  s += "; preemption " + std::to_string(e.count_in_window) + of_most + window;
  if (e.capped_until) s += "; protected from preemption until " + format_utc(e.capped_until);
  if (victim.preemptible) {
    const Tier* t = e.advised_tier >= 0 && e.advised_tier < kTierCount
                        ? &cfg.tiers.tier(static_cast<TierId>(e.advised_tier))
                        : nullptr;
    s += ". " +
         advice_for(cfg, t, e.account, "To avoid preemption retry in a guaranteed tier: ", false);
  }
  return s;
}

}  // namespace planc
