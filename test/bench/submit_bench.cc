// Submits N held batch jobs to slurmctld through libslurm as fast as one
// client can and prints submissions per second.  Driven by
// test/bench/bench-submit, which also reads slurmctld's CPU time.
//
//   submit_bench N QOS ACCOUNT [GPUS]
// With GPUS the jobs are not held: each asks for GPUS GPUs (gres/gpu), so on
// a full cluster they pend for Resources/Priority (test/bench/bench-starvation).
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: submit_bench N QOS ACCOUNT [GPUS]\n");
    return 2;
  }
  std::string gres = argc == 5 ? std::string("gres:gpu:") + argv[4] : std::string();
  long n = std::atol(argv[1]);
  std::string qos = argv[2], account = argv[3];
  slurm_init(nullptr);
  std::string cwd = "/tmp";
  char* env[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
  long ok = 0, failed = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    job_desc_msg_t desc;
    slurm_init_job_desc_msg(&desc);
    desc.name = const_cast<char*>("bench");
    desc.script = const_cast<char*>("#!/bin/sh\ntrue\n");
    desc.qos = qos.empty() ? nullptr : const_cast<char*>(qos.c_str());
    desc.account = const_cast<char*>(account.c_str());
    if (gres.empty())
      desc.priority = 0;  // held: nothing runs, only submission is measured
    else
      desc.tres_per_node = const_cast<char*>(gres.c_str());
    desc.user_id = getuid();
    desc.group_id = getgid();
    desc.work_dir = const_cast<char*>(cwd.c_str());
    desc.std_out = const_cast<char*>("/dev/null");
    desc.environment = env;
    desc.env_size = 1;
    desc.min_nodes = 1;
    submit_response_msg_t* resp = nullptr;
    if (slurm_submit_batch_job(&desc, &resp) == SLURM_SUCCESS) {
      ++ok;
    } else {
      if (++failed <= 3) std::fprintf(stderr, "submit failed: %s\n", slurm_strerror(errno));
    }
    if (resp) slurm_free_submit_response_response_msg(resp);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("submitted=%ld failed=%ld seconds=%.3f rate=%.1f\n", ok, failed, s, ok / s);
  slurm_fini();
  return failed ? 1 : 0;
}
