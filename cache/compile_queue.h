// One background worker thread that runs jobs in the order they were
// submitted, each key at most once while it is queued or running: the
// dispatcher's NVRTC compilations of chosen configs whose binary is not
// ready, so that the caller's thread launches a stand-in instead of waiting.
//
// Why a queue of its own: the rules (no duplicates, wait until idle, a clean
// join on destruction, a failing job that does not stop the worker) are
// tested here with plain functions, apart from CUDA and NVRTC.
//
// Thread safety: every member function may be called from many threads; the
// destructor must not race them.  A job must not call wait_idle() (it would
// wait for itself).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace mlatune {

struct CompileQueueStats {
  std::uint64_t submitted = 0;  // accepted (duplicates not counted)
  std::uint64_t duplicates = 0; // refused: the key was queued or running
  std::uint64_t done = 0;       // finished without an exception
  std::uint64_t failed = 0;     // ended by an exception
  std::uint64_t dropped = 0;    // still queued at destruction, never run
  std::string last_error;       // what the last failed job threw
};

class CompileQueue {
 public:
  using Job = std::function<void()>;
  CompileQueue();
  /// Drops the jobs not started, waits for the running one, joins.
  ~CompileQueue();
  CompileQueue(const CompileQueue&) = delete;
  CompileQueue& operator=(const CompileQueue&) = delete;

  /// Queues `job` under `key`; false (and the job dropped) when a job of the
  /// same key is queued or running.  The worker thread starts on the first
  /// submission.
  bool submit(const std::string& key, Job job);
  /// Blocks until no job is queued or running.
  void wait_idle();
  /// Jobs queued or running now.
  std::size_t pending() const;
  CompileQueueStats stats() const;

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the worker: a job or the stop request
  std::condition_variable idle_;  // wait_idle(): nothing queued or running
  std::deque<std::pair<std::string, Job>> queue_;
  std::set<std::string> keys_;  // queued or running
  bool running_ = false;
  bool stopping_ = false;
  CompileQueueStats stats_;
  std::thread worker_;
};

}  // namespace mlatune
