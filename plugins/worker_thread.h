// The background thread each Plan C plugin keeps inside slurmctld.
//
// The thread is a heap pointer that is never destroyed at exit: slurmctld
// may exit without calling a plugin's fini() (22.05 does so for preempt
// plugins), and a joinable std::thread destroyed by exit() calls
// std::terminate (abort, core dump).  fini() stops it with stop_worker().
#ifndef PLANC_PLUGINS_WORKER_THREAD_H_
#define PLANC_PLUGINS_WORKER_THREAD_H_

#include <pthread.h>

#include <thread>
#include <utility>

namespace planc {

// Starts the worker, std::thread(args...), named `name` (at most 15
// characters) as slurmctld names its own threads (sched_agent, bckfl): what
// `top -H`, `ps -L` and perf show, and how test/bench/bench-preempt tells
// the plugin's CPU from Slurm's.
template <typename... Args>
std::thread* start_worker(const char* name, Args&&... args) {
  auto* worker = new std::thread(std::forward<Args>(args)...);
  pthread_setname_np(worker->native_handle(), name);
  return worker;
}

// Waits for a worker the plugin has asked to stop (its stop flag set under
// its mutex, its condition variable notified) and frees it.  Nothing to do
// when no worker runs.  Call it holding none of slurmctld's locks: the
// worker may be waiting for them.
inline void join_worker(std::thread*& worker) {
  if (!worker) return;
  if (worker->joinable()) worker->join();
  delete worker;
  worker = nullptr;
}

}  // namespace planc

#endif  // PLANC_PLUGINS_WORKER_THREAD_H_
