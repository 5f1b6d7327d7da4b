#include "common/job_marks.h"

#include "common/preempt_policy.h"  // format_utc, format_duration

namespace planc {
namespace {

constexpr std::string_view kAt = " at ";
constexpr std::string_view kNiceLead = " (Nice +";
constexpr std::string_view kPlancNote = "planc:";

struct Span {
  size_t begin, end;  // the mark, without separators
};

std::optional<Span> find_span(std::string_view s, std::string_view tag) {
  size_t b = s.find(tag);
  if (b == std::string_view::npos) return std::nullopt;
  size_t e = s.find(kMarkSeparator, b);
  return Span{b, e == std::string_view::npos ? s.size() : e};
}

std::optional<Span> find_mark(std::string_view s) { return find_span(s, kFreeAttemptTag); }

constexpr std::string_view kMarkLead = "[planc:";

}  // namespace

std::optional<std::string_view> find_tagged_mark(std::string_view s, std::string_view tag) {
  auto m = find_span(s, tag);
  if (!m) return std::nullopt;
  return s.substr(m->begin, m->end - m->begin);
}

std::string without_tagged_mark(std::string_view s, std::string_view tag) {
  auto m = find_span(s, tag);
  if (!m) return std::string(s);
  std::string_view before = s.substr(0, m->begin);
  std::string_view after = s.substr(m->end);
  // Drop one separator: the one after the mark, else the one before it.
  if (after.substr(0, kMarkSeparator.size()) == kMarkSeparator)
    after.remove_prefix(kMarkSeparator.size());
  else if (before.size() >= kMarkSeparator.size() &&
           before.substr(before.size() - kMarkSeparator.size()) == kMarkSeparator)
    before.remove_suffix(kMarkSeparator.size());
  return std::string(before) + std::string(after);
}

std::string with_tagged_mark(std::string_view s, std::string_view tag, std::string_view mark) {
  if (auto m = find_span(s, tag))
    return std::string(s.substr(0, m->begin)) + std::string(mark) + std::string(s.substr(m->end));
  if (s.empty()) return std::string(mark);
  return std::string(mark) + std::string(kMarkSeparator) + std::string(s);
}

bool has_free_attempt_mark(std::string_view admin_comment) {
  return admin_comment.find(kFreeAttemptTag) != std::string_view::npos;
}

std::string free_attempt_mark(const PlancConfig& cfg, TierId from, TierId to, time_t upgraded_at,
                              uint32_t waited_seconds, std::string_view reason,
                              int64_t nice_added) {
  const Tier& f = cfg.tiers.tier(from);
  const Tier& t = cfg.tiers.tier(to);
  // Whole minutes read best; below a minute (test thresholds) say seconds.
  uint32_t shown = waited_seconds >= 60 ? waited_seconds / 60 * 60 : waited_seconds;
  return std::string(kFreeAttemptTag) + " upgraded from " + f.label + " (" + f.qos + ") to " +
         t.label + " (" + t.qos + ")" + std::string(kAt) + format_utc(upgraded_at) + " after " +
         format_duration(shown) + " waiting for " + std::string(reason) +
         "; this attempt is not billed" +
         (nice_added > 0 ? "; it queues below paying " + t.label + " jobs and preempts nothing" +
                               std::string(kNiceLead) + std::to_string(nice_added) + ")"
                         : std::string());
}

int64_t free_attempt_nice(std::string_view s) {
  auto m = find_mark(s);
  if (!m) return 0;
  std::string_view mark = s.substr(m->begin, m->end - m->begin);
  size_t at = mark.find(kNiceLead);
  if (at == std::string_view::npos) return 0;
  int64_t n = 0;
  for (size_t i = at + kNiceLead.size(); i < mark.size() && mark[i] >= '0' && mark[i] <= '9'; ++i) {
    if (n > (int64_t{1} << 40)) return 0;  // not a Nice slurmctld/planc wrote
    n = n * 10 + (mark[i] - '0');
  }
  return n;
}

std::string add_free_attempt_mark(std::string_view admin_comment, std::string_view mark) {
  std::string rest = remove_free_attempt_mark(admin_comment);
  return rest.empty() ? std::string(mark) : std::string(mark) + std::string(kMarkSeparator) + rest;
}

std::string remove_free_attempt_mark(std::string_view s) {
  return without_tagged_mark(s, kFreeAttemptTag);
}

std::optional<std::pair<TierId, TierId>> free_attempt_tiers(std::string_view s) {
  auto m = find_mark(s);
  if (!m) return std::nullopt;
  std::string_view mark = s.substr(m->begin, m->end - m->begin);
  auto label_after = [&](std::string_view lead) -> std::optional<TierId> {
    size_t at = mark.find(lead);
    if (at == std::string_view::npos) return std::nullopt;
    return parse_tier_label(mark.substr(at + lead.size(), 2));
  };
  auto from = label_after(" upgraded from "), to = label_after(") to ");
  if (!from || !to) return std::nullopt;
  return std::make_pair(*from, *to);
}

std::optional<time_t> free_attempt_upgraded_at(std::string_view s) {
  auto m = find_mark(s);
  if (!m) return std::nullopt;
  std::string_view mark = s.substr(m->begin, m->end - m->begin);
  size_t at = mark.find(kAt);
  if (at == std::string_view::npos) return std::nullopt;
  return parse_utc(mark.substr(at + kAt.size()));
}

std::string fallback_mark(const PlancConfig& cfg, TierId to) {
  const Tier& t = cfg.tiers.tier(to);
  return std::string(kFallbackTag) + " a preempted run comes back in " + t.label + " (" + t.qos +
         ")";
}

std::optional<TierId> fallback_pending(std::string_view s) {
  auto m = find_tagged_mark(s, kFallbackTag);
  constexpr std::string_view kLead = " a preempted run comes back in ";
  if (!m || m->substr(kFallbackTag.size(), kLead.size()) != kLead) return std::nullopt;
  return parse_tier_label(m->substr(kFallbackTag.size() + kLead.size(), 2));
}

namespace {
std::string preempted_as(const PlancConfig& cfg, TierId from, time_t at) {
  return std::string(kFallbackTag) + " preempted as " + cfg.tiers.tier(from).label +
         std::string(kAt) + format_utc(at) + "; ";
}
}  // namespace

std::string fallback_done_mark(const PlancConfig& cfg, TierId from, TierId to, time_t at) {
  const Tier& t = cfg.tiers.tier(to);
  return preempted_as(cfg, from, at) + "requeued in " + t.label + " (" + t.qos + "), billed at " +
         t.label + "'s price from the next run";
}

std::string fallback_refused_mark(const PlancConfig& cfg, TierId from, TierId to, time_t at,
                                  std::string_view why) {
  const Tier& t = cfg.tiers.tier(to);
  return preempted_as(cfg, from, at) + "not moved to " + t.label + " (" + t.qos +
         "): " + std::string(why) + "; the job stays in " + cfg.tiers.tier(from).label;
}

std::optional<std::string> admin_comment_with_note(std::string_view current,
                                                   std::string_view note) {
  // Plan C's marks are kept (in their order), its old note replaced; any
  // other part is an admin's own text, which is never overwritten.
  std::string marks;
  for (std::string_view rest = current; !rest.empty();) {
    size_t e = rest.find(kMarkSeparator);
    std::string_view part = rest.substr(0, e);
    rest =
        e == std::string_view::npos ? std::string_view() : rest.substr(e + kMarkSeparator.size());
    if (part.compare(0, kMarkLead.size(), kMarkLead) == 0) {
      marks += std::string(part) + std::string(kMarkSeparator);
    } else if (!part.empty() && part.compare(0, kPlancNote.size(), kPlancNote) != 0) {
      return std::nullopt;  // an admin's own comment
    }
  }
  return marks + std::string(note);
}

}  // namespace planc
