// The job_submit/planc decision alone, in-process: ns per call of
// decide_submit() for a typical request (alias typed, entitled account),
// beside a baseline that only copies the request (what any plugin pays to
// look at a job), so the ratio shows the policy's own cost.
//
//   test/bench/submit_decision_bench [iterations]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/submit_policy.h"

namespace {
volatile size_t g_sink;

template <class F>
double ns_per_call(long n, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) f(i);
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}
}  // namespace

int main(int argc, char** argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 2000000;
  planc::PlancConfig cfg = planc::parse_config("", "bench").value();
  planc::SubmitRequest base;
  base.assoc_known = true;
  base.account = "acct-spot";
  base.allowed_qos = {"p2-spot", "p3-spot"};
  base.assoc_default_qos = "p3-spot";
  const char* typed[] = {"plan-a-spot", "p3", "", "p2-spot"};

  // Warm up, then measure both in the same process, alternating twice.
  double copy_ns = 0, decide_ns = 0;
  for (int round = 0; round < 2; ++round) {
    copy_ns = ns_per_call(n, [&](long i) {
      planc::SubmitRequest r = base;
      r.requested_qos = typed[i & 3];
      g_sink = g_sink + r.requested_qos.size();
    });
    decide_ns = ns_per_call(n, [&](long i) {
      planc::SubmitRequest r = base;
      r.requested_qos = typed[i & 3];
      planc::SubmitDecision d = planc::decide_submit(cfg, r);
      g_sink = g_sink + d.qos.size();
    });
  }
  std::printf(
      "submit decision: %.0f ns/call (request copy alone %.0f ns/call, ratio %.2fx), "
      "%ld calls\n",
      decide_ns, copy_ns, decide_ns / copy_ns, n);
  return 0;
}
