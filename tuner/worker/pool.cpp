#include "tuner/worker/pool.h"

#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {

/// A lane: its worker (owned, or lent by the pool's creator), the work meant
/// for it alone, and its thread.
struct WorkerPool::Lane {
  std::string label;
  std::unique_ptr<Worker> owned;
  Worker* worker = nullptr;
  std::deque<std::packaged_task<void(Worker&, std::size_t)>> own_work;
  std::thread thread;
};

WorkerPool::WorkerPool(std::vector<PoolLane> lanes) {
  std::vector<std::unique_ptr<Lane>> made;
  for (PoolLane& spec : lanes) {
    auto lane = std::make_unique<Lane>();
    lane->label = std::move(spec.label);
    lane->owned = std::make_unique<Worker>(std::move(spec.options));
    lane->worker = lane->owned.get();
    made.push_back(std::move(lane));
  }
  start(std::move(made));
}

WorkerPool::WorkerPool(Worker& lent, std::string label) {
  std::vector<std::unique_ptr<Lane>> made;
  made.push_back(std::make_unique<Lane>());
  made.back()->label = std::move(label);
  made.back()->worker = &lent;
  start(std::move(made));
}

void WorkerPool::start(std::vector<std::unique_ptr<Lane>> lanes) {
  lanes_ = std::move(lanes);
  try {
    for (std::size_t i = 0; i < lanes_.size(); ++i) lanes_[i]->thread = std::thread([this, i] { drive(i); });
  } catch (const std::system_error& error) {
    stop_lanes();  // the ones already started
    throw EnvironmentError(fmt::format("cannot start a worker lane's thread: {}", error.what()));
  }
}

WorkerPool::~WorkerPool() { stop_lanes(); }

void WorkerPool::stop_lanes() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& lane : lanes_)
    if (lane->thread.joinable()) lane->thread.join();
}

const std::string& WorkerPool::label(std::size_t lane) const { return lanes_.at(lane)->label; }

// The lane's own work first, then the oldest job if its batch is open.
std::optional<std::packaged_task<void(Worker&, std::size_t)>> WorkerPool::next(std::size_t index) {
  Lane& lane = *lanes_[index];
  std::unique_lock lock(mutex_);
  auto job_ready = [this] { return !jobs_.empty() && open_ == jobs_.front().batch; };
  wake_.wait(lock, [&] { return stopping_ || !lane.own_work.empty() || job_ready(); });
  if (stopping_) return std::nullopt;
  std::packaged_task<void(Worker&, std::size_t)> task;
  if (!lane.own_work.empty()) {
    task = std::move(lane.own_work.front());
    lane.own_work.pop_front();
  } else {
    task = std::move(jobs_.front().run);
    jobs_.pop_front();
  }
  return task;
}

void WorkerPool::drive(std::size_t index) {
  Lane& lane = *lanes_[index];
  const int replacements_before = lane.worker->replacements();
  while (auto task = next(index)) (*task)(*lane.worker, index);
  // Processes started here die with this thread: end them while it lives.
  if (!lane.owned && lane.worker->replacements() != replacements_before) lane.worker->stop();
  lane.owned.reset();
}

std::future<void> WorkerPool::post(std::size_t lane, Task task) {
  std::packaged_task<void(Worker&, std::size_t)> packaged(std::move(task));
  std::future<void> done = packaged.get_future();
  {
    std::lock_guard lock(mutex_);
    lanes_.at(lane)->own_work.push_back(std::move(packaged));
  }
  wake_.notify_all();
  return done;
}

void WorkerPool::on_each(const Task& task) {
  std::vector<std::future<void>> done;
  for (std::size_t i = 0; i < lanes_.size(); ++i) done.push_back(post(i, task));
  std::exception_ptr first;
  for (std::future<void>& f : done) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void WorkerPool::on_lane(std::size_t lane, Task task) { post(lane, std::move(task)).get(); }

std::future<void> WorkerPool::submit(std::uint64_t batch, Task job) {
  Job queued{batch, std::packaged_task<void(Worker&, std::size_t)>(std::move(job))};
  std::future<void> done = queued.run.get_future();
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(queued));
  }
  wake_.notify_all();
  return done;
}

void WorkerPool::open(std::uint64_t batch) {
  {
    std::lock_guard lock(mutex_);
    open_ = batch;
  }
  wake_.notify_all();
}

std::vector<DeviceReport> probe_lanes(WorkerPool& pool) {
  std::vector<DeviceReport> reports(pool.size());
  pool.on_each([&](Worker& worker, std::size_t lane) { reports[lane] = worker.probe_device(); });
  return reports;
}

}  // namespace mlatune
