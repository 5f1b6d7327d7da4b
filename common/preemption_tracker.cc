#include "common/preemption_tracker.h"

#include <algorithm>
#include <cctype>

#include "common/state_file.h"

namespace planc {
namespace {

constexpr std::string_view kHeaderV1 = "planc-preempt-state v1";
constexpr std::string_view kHeaderV2 = "planc-preempt-state v2";
constexpr std::string_view kHeaderV3 = "planc-preempt-state v3";  // preemptors' victims with runs
constexpr std::string_view kHeaderV4 = "planc-preempt-state v4";  // graces' starts in ms
constexpr std::string_view kHeaderV5 = "planc-preempt-state v5";  // fallbacks being requeued

using State = JobView::State;

const JobView& view_of(const std::map<uint32_t, JobView>& seen, uint32_t id) {
  static const JobView kGone;
  auto it = seen.find(id);
  return it == seen.end() ? kGone : it->second;
}

bool holds_resources(const JobView& v) {
  return v.state == State::kRunning || v.state == State::kCompleting;
}

// A preemptor whose QoS was changed to one whose tier may not preempt the
// victim's.  Only a change of tier counts: a planc.conf reload that takes
// a pair out of Preempts= applies to preemptions that start after it.
bool moved_away(const JobView& preemptor, const PreemptionEvent& e) {
  return preemptor.tier != std::optional<TierId>(e.preemptor_tier) &&
         !((preemptor.preempts >> tier_index(e.victim_tier)) & 1);
}

// Why a preemptor that no longer pends (or can no longer start with the
// victim's GPUs) does not need its victim.
std::string why_not_needed(uint32_t preemptor, const JobView& v, const PreemptionEvent& e) {
  std::string job = "job " + std::to_string(preemptor);
  if (v.state == State::kRunning) return job + " started without it";
  if (v.state == State::kPending && v.held) return job + " is held";
  if (v.state == State::kPending && moved_away(v, e))
    return v.tier ? job + " is now " + tier_label(*v.tier) + ", which does not preempt " +
                        tier_label(e.victim_tier)
                  : job + " is no longer in a Plan C tier";
  if (v.cancelled) return job + " was cancelled";
  if (v.state == State::kFinished || v.state == State::kCompleting) return job + " ended";
  return job + " is gone";
}

// Account names go into a line of blank-separated words: percent-encode
// everything but [A-Za-z0-9._-].
std::string encode(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "a:";
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::optional<std::string> decode(std::string_view s) {
  if (s.substr(0, 2) != "a:") return std::nullopt;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 2; i < s.size(); i++) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int hi = nib(s[i + 1]), lo = nib(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

PreemptionEvent PreemptionTracker::start(PreemptionEvent e, TimeMs now_ms) {
  version_++;
  if (!e.when_ms) e.when_ms = now_ms;
  ledger_.record(e.victim_job, e.when);
  e.count_in_window = ledger_.count_in_window(e.victim_job, e.when);
  e.capped_until = ledger_.capped_until(e.victim_job, e.when);
  Victim v{e, Phase::kGrace, 0};
  if (!e.grace_seconds) {
    v.phase = Phase::kKillCheck;
    v.kill_due = now_ms + kNoGraceKillAfterMs;
  }
  victims_[e.victim_job] = v;
  if (e.preemptor_job) {
    Preemptor& p = preemptors_[e.preemptor_job];
    if (p.since != e.when) p.victims.clear();  // a new round of preemption
    p.victims.emplace_back(e.victim_job, e.victim_run);
    p.since = e.when;
  }
  dirty_ = true;
  return e;
}

std::optional<TimeMs> PreemptionTracker::resume_grace(uint32_t job_id, uint32_t run,
                                                      uint32_t preemptor, TierId preemptor_tier,
                                                      TimeMs now_ms) {
  auto it = victims_.find(job_id);
  if (it == victims_.end() || it->second.phase != Phase::kGrace ||
      it->second.event.victim_run != run)
    return std::nullopt;
  version_++;
  PreemptionEvent& e = it->second.event;
  if (preemptor && preemptor != e.preemptor_job) {
    e.preemptor_job = preemptor;
    e.preemptor_tier = preemptor_tier;
    Preemptor& p = preemptors_[preemptor];
    if (p.since != e.when) p.victims.clear();
    p.victims.emplace_back(job_id, run);
    p.since = e.when;
  }
  dirty_ = true;
  return std::max<TimeMs>(0, grace_end_ms(e) - now_ms);
}

PreemptionTracker::RunEnd PreemptionTracker::run_ended(uint32_t job_id, RunEndVerdict verdict,
                                                       bool requeueable, TimeMs now_ms) {
  using K = RunEnd::Kind;
  version_++;
  auto it = victims_.find(job_id);
  if (it != victims_.end() && it->second.phase == Phase::kRequeuing) return {K::kDuplicate, {}};
  const bool in_grace = it != victims_.end() && it->second.phase == Phase::kGrace;
  if (verdict == RunEndVerdict::kNotOurs) {
    // Slurm's own preemption completing, or a node failure.  A graceless
    // victim stays watched for its kill; a victim in its grace is Slurm's
    // doing only when a scheduling pass ended the grace before the worker
    // did: watch it for its kill the same way.
    if (!in_grace) return {};
    it->second.phase = Phase::kKillCheck;
    it->second.kill_due = now_ms + kNoGraceKillAfterMs;
    dirty_ = true;
    return {K::kSlurmEnded, it->second.event};
  }
  RunEnd r;
  if (in_grace) {
    r.event = it->second.event;
  } else {
    // A grace the tracker never saw start (its state file was lost):
    // the policy still applies; the note cannot be rewritten.
    r.event.reset();
  }
  switch (verdict) {
    case RunEndVerdict::kTreatAsPreempted:
      r.kind = K::kTreatAsPreempted;
      if (requeueable) {
        Victim& v = victims_[job_id];
        if (!in_grace) v.event.victim_job = job_id;
        v.phase = Phase::kRequeuePending;
        dirty_ = true;
      } else if (in_grace) {
        drop_victim(job_id);
      }
      break;
    case RunEndVerdict::kFinished:
      r.kind = K::kFinished;
      if (in_grace) drop_victim(job_id);
      break;
    case RunEndVerdict::kCancelledInGrace:
      r.kind = K::kCancelledInGrace;
      if (in_grace) drop_victim(job_id);
      break;
    case RunEndVerdict::kNotOurs:
      break;
  }
  return r;
}

std::vector<uint32_t> PreemptionTracker::watched() const {
  std::vector<uint32_t> ids;
  for (const auto& [id, v] : victims_) {
    ids.push_back(id);
    if (v.event.preemptor_job) ids.push_back(v.event.preemptor_job);
  }
  for (const auto& [id, p] : preemptors_) {
    ids.push_back(id);
    for (const auto& v : p.victims) ids.push_back(v.first);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<TrackerAction> PreemptionTracker::plan(TimeMs now_ms,
                                                   const std::map<uint32_t, JobView>& seen) {
  using K = TrackerAction::Kind;
  std::vector<TrackerAction> out;
  std::vector<uint32_t> drop;
  for (auto& [id, v] : victims_) {
    // Started after the worker took its view (Slurm's scheduling pass
    // preempts between watched() and plan()): looked at next time.
    if (!seen.count(id)) continue;
    const JobView& jv = view_of(seen, id);
    switch (v.phase) {
      case Phase::kGrace: {
        if (jv.state == State::kRunning && !jv.in_preemption && jv.run == v.event.victim_run) {
          // Slurm does not know of this preemption (a controller that took
          // over from an older job state): its grace goes on; the
          // scheduler asks to preempt the job again (resume_grace).  If it
          // has not by the grace's end, nothing wants the job any more.
          if (now_ms >= grace_end_ms(v.event))
            out.push_back({K::kCallOff, id, v.event.preemptor_job,
                           "the controller now in charge did not preempt it again", v.event});
        } else if (jv.state == State::kRunning && jv.in_preemption) {
          const uint32_t p = v.event.preemptor_job;
          const JobView& pv = view_of(seen, p);
          // A held preemptor cannot start: nothing needs the victim's
          // GPUs until it is released, and then it preempts again.  One
          // moved to a tier that may not preempt the victim (scontrol
          // update QOS=) would not be offered it now.
          if (p && (pv.state != State::kPending || pv.held || moved_away(pv, v.event))) {
            out.push_back({K::kCallOff, id, p, why_not_needed(p, pv, v.event), v.event});
          } else if (now_ms >= grace_end_ms(v.event)) {
            out.push_back({K::kEndGrace, id, p, "", v.event});
          }
        } else if ((jv.state == State::kCompleting || jv.state == State::kFinished) &&
                   !jv.preempted_state && !jv.cancelled && v.event.requeue) {
          // Ended during the grace and run_ended() never heard of it
          // (JobCompType is not jobcomp/planc): requeue it all the same.
          v.phase = Phase::kRequeuePending;
          out.push_back({K::kRequeue, id, 0, "", v.event});
        } else {
          // Preempted by Slurm, called off, cancelled, or gone.
          drop.push_back(id);
        }
        break;
      }
      case Phase::kKillCheck:
        if (now_ms < v.kill_due) break;
        if (jv.state == State::kCompleting) out.push_back({K::kKill, id, 0, "", v.event});
        drop.push_back(id);
        break;
      case Phase::kRequeuePending:
        if (jv.state == State::kCompleting || jv.state == State::kFinished)
          out.push_back({K::kRequeue, id, 0, "", v.event});
        else
          drop.push_back(id);  // requeued by someone else, or gone
        break;
      case Phase::kRequeuing:
        break;
    }
  }
  for (uint32_t id : drop) victims_.erase(id);
  const time_t now = static_cast<time_t>(now_ms / 1000);
  for (auto it = preemptors_.begin(); it != preemptors_.end();) {
    if (!seen.count(it->first)) {  // its first victim came after the view
      ++it;
      continue;
    }
    const JobView& pv = view_of(seen, it->first);
    bool over = pv.state != State::kPending || !pv.waits_on_preemption ||
                now - it->second.since > kPreemptorWatchSeconds;
    if (!over) {
      bool gone = std::none_of(it->second.victims.begin(), it->second.victims.end(),
                               [&](const std::pair<uint32_t, uint32_t>& v) {
                                 // Completing: its nodes are not free yet, whatever
                                 // its run (Slurm counts the requeue as it starts
                                 // completing); running: only the run preempted.
                                 // Not in the view: preempted after it was
                                 // taken, so running.
                                 if (!seen.count(v.first)) return true;
                                 const JobView& jv = view_of(seen, v.first);
                                 return jv.state == State::kCompleting ||
                                        (jv.run == v.second && holds_resources(jv));
                               });
      if (gone) {
        out.push_back({K::kReleasePreemptor, it->first, 0, "", {}});
        over = true;
      }
    }
    it = over ? preemptors_.erase(it) : std::next(it);
    dirty_ = dirty_ || over;
  }
  if (!drop.empty()) dirty_ = true;
  return out;
}

void PreemptionTracker::requeuing(uint32_t job_id) {
  auto it = victims_.find(job_id);
  if (it != victims_.end()) it->second.phase = Phase::kRequeuing;
}

void PreemptionTracker::done(const TrackerAction& a, bool happened) {
  using K = TrackerAction::Kind;
  switch (a.kind) {
    case K::kEndGrace:
      // Its preemptor still waits for it: requeued or killed now, it
      // holds its nodes while it completes (plan(): not gone yet).
      if (happened) drop_victim(a.job_id, /*keep_for_preemptor=*/true);
      break;
    case K::kCallOff:
      if (!happened) break;
      ledger_.unrecord(a.job_id, a.event.when);
      drop_victim(a.job_id);
      break;
    case K::kRequeue:
      drop_victim(a.job_id, /*keep_for_preemptor=*/true);
      break;
    case K::kKill:
    case K::kReleasePreemptor:
      break;
  }
}

std::optional<bool> PreemptionTracker::own_victim_in_grace(uint32_t preemptor,
                                                           uint32_t candidate) const {
  auto pit = preemptors_.find(preemptor);
  if (pit == preemptors_.end()) return std::nullopt;
  bool any = false, found = false;
  for (const auto& [job, run] : pit->second.victims) {
    auto it = victims_.find(job);
    if (it == victims_.end() || it->second.phase != Phase::kGrace ||
        it->second.event.victim_run != run || it->second.event.preemptor_job != preemptor)
      continue;
    any = true;
    found = found || job == candidate;
  }
  return any ? std::optional<bool>(found) : std::nullopt;
}

void PreemptionTracker::drop_victim(uint32_t job_id, bool keep_for_preemptor) {
  auto it = victims_.find(job_id);
  if (it == victims_.end()) return;
  if (uint32_t p = it->second.event.preemptor_job; p && !keep_for_preemptor) {
    auto pit = preemptors_.find(p);
    if (pit != preemptors_.end()) {
      auto& vs = pit->second.victims;
      vs.erase(
          std::remove_if(vs.begin(), vs.end(), [&](const auto& v) { return v.first == job_id; }),
          vs.end());
      if (vs.empty()) preemptors_.erase(pit);
    }
  }
  victims_.erase(it);
  dirty_ = true;
}

std::optional<TimeMs> PreemptionTracker::next_due() const {
  std::optional<TimeMs> due;
  for (const auto& [id, v] : victims_) {
    TimeMs t = v.phase == Phase::kGrace       ? grace_end_ms(v.event)
               : v.phase == Phase::kKillCheck ? v.kill_due
                                              : 0;
    if (t && (!due || t < *due)) due = t;
  }
  return due;
}

void PreemptionTracker::forget(const std::vector<uint32_t>& ended) {
  for (uint32_t id : ended) {
    if (victims_.count(id)) continue;  // still in flight: kept until over
    ledger_.forget(id);
  }
  dirty_ = dirty_ || !ended.empty();
}

size_t PreemptionTracker::in_grace() const {
  return std::count_if(victims_.begin(), victims_.end(),
                       [](const auto& kv) { return kv.second.phase == Phase::kGrace; });
}

std::string PreemptionTracker::serialize() {
  std::string body;
  size_t records = 0;
  for (const auto& [id, times] : ledger_.history_) {
    if (times.empty()) continue;
    body += "L " + std::to_string(id);
    for (time_t t : times) body += " " + std::to_string(static_cast<int64_t>(t));
    body += "\n";
    records++;
  }
  for (const auto& [id, v] : victims_) {
    if (v.phase == Phase::kKillCheck) continue;  // half a second: not worth a restart
    const PreemptionEvent& e = v.event;
    const int phase = v.phase == Phase::kGrace ? 0 : 1;  // kRequeuing restarts as pending
    body += "V " + std::to_string(id) + " " + std::to_string(phase) + " " +
            std::to_string(static_cast<int64_t>(e.when)) + " " + std::to_string(e.grace_seconds) +
            " " + std::to_string(e.requeue ? 1 : 0) + " " + std::to_string(e.count_in_window) +
            " " + std::to_string(static_cast<int64_t>(e.capped_until)) + " " +
            std::to_string(tier_index(e.victim_tier)) + " " + std::to_string(e.preemptor_job) +
            " " + std::to_string(tier_index(e.preemptor_tier)) + " " +
            std::to_string(e.advised_tier + 1) + " " + std::to_string(e.when_ms) + " " +
            encode(e.account) + "\n";
    records++;
  }
  for (const auto& [id, p] : preemptors_) {
    body += "P " + std::to_string(id) + " " + std::to_string(static_cast<int64_t>(p.since));
    for (const auto& [v, run] : p.victims)
      body += " " + std::to_string(v) + " " + std::to_string(run);
    body += "\n";
    records++;
  }
  for (const auto& [id, run] : fallbacks_) {
    body += "F " + std::to_string(id) + " " + std::to_string(run) + "\n";
    records++;
  }
  dirty_ = false;
  return frame_state(kHeaderV5, body, records);
}

Result<PreemptionTracker> PreemptionTracker::parse(std::string_view text, uint32_t max_count,
                                                   uint32_t window_seconds) {
  using R = Result<PreemptionTracker>;
  PreemptionTracker t(max_count, window_seconds);
  if (text.substr(0, kHeaderV1.size() + 1) == std::string(kHeaderV1) + "\n") {
    auto ledger = PreemptLedger::parse(text, max_count, window_seconds);
    if (!ledger.ok()) return R::failure(ledger.error());
    t.ledger_ = std::move(ledger).value();
    return t;
  }
  uint64_t records = 0;
  // v2 files (one release of this format) list a preemptor's victims
  // without their runs; read as run 0.
  // v3 files have no grace starts in ms (read as 0: timed from `when`).
  auto is = [&](std::string_view h) {
    return text.substr(0, h.size() + 1) == std::string(h) + "\n";
  };
  const bool v2 = is(kHeaderV2);
  const bool v3 = is(kHeaderV3);
  const bool v4 = is(kHeaderV4);
  auto framed = unframe_state(text,
                              v2   ? kHeaderV2
                              : v3 ? kHeaderV3
                              : v4 ? kHeaderV4
                                   : kHeaderV5,
                              &records);
  if (!framed.ok())
    return R::failure("not a valid Plan C preemption state file: " + framed.error());
  auto lines = split_lines(framed.value());
  if (!lines) return R::failure("line without newline");
  size_t n = 0;
  for (std::string_view line : *lines) {
    ++n;
    auto w = split_words(line);
    auto bad = [&](const char* what) {
      return R::failure(std::string(what) + " on line " + std::to_string(n));
    };
    std::vector<uint64_t> num;
    size_t last_num = w.size();
    if (!w.empty() && w[0] == "V") last_num = w.size() - 1;  // the account is text
    for (size_t i = 1; i < last_num; i++) {
      uint64_t v = 0;
      if (!parse_u64(w[i], &v) || v > 0x7fffffffffffULL) return bad("bad number");
      num.push_back(v);
    }
    if (w.empty()) return bad("empty record");
    if (w[0] == "L") {
      if (num.size() < 2 || !num[0] || num[0] > 0xffffffffULL) return bad("bad ledger record");
      auto& times = t.ledger_.history_[static_cast<uint32_t>(num[0])];
      if (!times.empty()) return bad("job listed twice");
      for (size_t i = 1; i < num.size(); i++) times.push_back(static_cast<time_t>(num[i]));
    } else if (w[0] == "V") {
      // id phase when grace requeue count capped_until victim_tier
      // preemptor preemptor_tier advised_tier+1 [when_ms, v4], then the account.
      if (num.size() != ((v2 || v3) ? 11u : 12u) || !num[0] || num[0] > 0xffffffffULL ||
          num[1] > 1 || num[3] > 0xffffffffULL || num[5] > 0xffffffffULL || num[7] > 3 ||
          num[8] > 0xffffffffULL || num[9] > 3 || num[10] > kTierCount)
        return bad("bad preemption record");
      auto account = decode(w.back());
      if (!account) return bad("bad account");
      Victim v;
      PreemptionEvent& e = v.event;
      e.victim_job = static_cast<uint32_t>(num[0]);
      v.phase = num[1] ? Phase::kRequeuePending : Phase::kGrace;
      e.when = static_cast<time_t>(num[2]);
      e.grace_seconds = static_cast<uint32_t>(num[3]);
      e.requeue = num[4] != 0;
      e.count_in_window = static_cast<uint32_t>(num[5]);
      e.capped_until = static_cast<time_t>(num[6]);
      e.victim_tier = static_cast<TierId>(num[7]);
      e.preemptor_job = static_cast<uint32_t>(num[8]);
      e.preemptor_tier = static_cast<TierId>(num[9]);
      e.advised_tier = static_cast<int8_t>(static_cast<int>(num[10]) - 1);
      if (num.size() > 11) e.when_ms = static_cast<int64_t>(num[11]);
      e.account = *account;
      t.victims_[e.victim_job] = v;
    } else if (w[0] == "P") {
      if (num.size() < 2 || !num[0] || num[0] > 0xffffffffULL) return bad("bad preemptor record");
      Preemptor& p = t.preemptors_[static_cast<uint32_t>(num[0])];
      p.since = static_cast<time_t>(num[1]);
      if (!v2 && num.size() % 2) return bad("bad preemptor record");
      for (size_t i = 2; i < num.size(); i += v2 ? 1 : 2)
        p.victims.emplace_back(static_cast<uint32_t>(num[i]),
                               v2 ? 0u : static_cast<uint32_t>(num[i + 1]));
    } else if (w[0] == "F" && !v2 && !v3 && !v4) {
      if (num.size() != 2 || !num[0] || num[0] > 0xffffffffULL || num[1] > 0xffffffffULL)
        return bad("bad fallback record");
      t.fallbacks_[static_cast<uint32_t>(num[0])] = static_cast<uint32_t>(num[1]);
    } else {
      return bad("unknown record");
    }
  }
  if (n != records) return R::failure("record count does not match the trailer");
  return t;
}

}  // namespace planc
