// Several worker processes (tuner/worker/client.h), typically one per GPU,
// fed from one queue: each lane is a thread that owns (or borrows) one
// Worker and takes the oldest queued job as soon as it is free, so a slow or
// crashed GPU holds up only the job it runs.  Jobs are grouped in batches
// (a sweep's shapes): a batch's jobs wait until it is opened, so that no
// lane evaluates a candidate before its workload is set up.  Work for one
// lane (setting up a workload, re-timing) goes ahead of queued jobs.
//
// A lane's thread starts the lane's worker processes and ends them before it
// exits: a worker is tied to the life of the thread that started it
// (tuner/worker/lifeline.h), and the tuner process never touches CUDA.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tuner/worker/client.h"

namespace mlatune {

/// One lane to start: its label in reports ("GPU 1") and its worker.
struct PoolLane {
  std::string label;
  WorkerOptions options;
};

/// Worker processes on their own threads, fed from one queue.
class WorkerPool {
 public:
  /// What a lane runs: its worker, and the lane's index.
  using Task = std::function<void(Worker&, std::size_t lane)>;

  /// One lane per entry, each with a worker of its own (started at its
  /// first request, from the lane's thread).  EnvironmentError when a
  /// thread cannot start.
  explicit WorkerPool(std::vector<PoolLane> lanes);
  /// One lane, labelled `label`, driving `lent`, which its owner must not
  /// use while the pool exists; a worker that the lane had to start anew
  /// (after a crash) is stopped when the pool ends.
  WorkerPool(Worker& lent, std::string label);
  /// Stops the lanes: queued jobs are dropped, running ones finish first.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  std::size_t size() const { return lanes_.size(); }
  const std::string& label(std::size_t lane) const;

  /// Runs `task` on every lane at once and waits for all of them; then
  /// rethrows the exception of the first lane (in lane order) that threw.
  void on_each(const Task& task);
  /// Runs `task` on `lane`, ahead of queued jobs, and waits for it.
  void on_lane(std::size_t lane, Task task);
  /// Queues `job` for the first free lane.  Jobs start in the order queued,
  /// each once its `batch` is open (a later batch waits behind an earlier
  /// one).  The future holds the job's exception, if any.
  std::future<void> submit(std::uint64_t batch, Task job);
  /// Lets the jobs of `batch` start.
  void open(std::uint64_t batch);

 private:
  struct Lane;
  struct Job {
    std::uint64_t batch = 0;
    std::packaged_task<void(Worker&, std::size_t)> run;
  };

  void start(std::vector<std::unique_ptr<Lane>> lanes);
  void stop_lanes();
  std::future<void> post(std::size_t lane, Task task);
  std::optional<std::packaged_task<void(Worker&, std::size_t)>> next(std::size_t lane);
  void drive(std::size_t lane);

  std::vector<std::unique_ptr<Lane>> lanes_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  std::optional<std::uint64_t> open_;
  bool stopping_ = false;
};

/// Every lane's worker probed (DeviceReport), in lane order.
std::vector<DeviceReport> probe_lanes(WorkerPool& pool);

}  // namespace mlatune
