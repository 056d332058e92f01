#include "cache/compile_queue.h"

#include <exception>
#include <utility>

namespace mlatune {

CompileQueue::CompileQueue() = default;

CompileQueue::~CompileQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    stats_.dropped += queue_.size();
    queue_.clear();
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool CompileQueue::submit(const std::string& key, Job job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !keys_.insert(key).second) {
      ++stats_.duplicates;
      return false;
    }
    queue_.emplace_back(key, std::move(job));
    ++stats_.submitted;
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  }
  wake_.notify_one();
  return true;
}

void CompileQueue::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && !running_; });
}

std::size_t CompileQueue::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + (running_ ? 1 : 0);
}

CompileQueueStats CompileQueue::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CompileQueue::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, nothing left to run
    auto [key, job] = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    std::string error;
    bool ok = true;
    try {
      job();
    } catch (const std::exception& e) {
      ok = false;
      error = e.what();
    } catch (...) {
      ok = false;
      error = "unknown exception";
    }
    lock.lock();
    running_ = false;
    keys_.erase(key);
    if (ok) {
      ++stats_.done;
    } else {
      ++stats_.failed;
      stats_.last_error = std::move(error);
    }
    if (queue_.empty()) idle_.notify_all();
  }
  idle_.notify_all();
}

}  // namespace mlatune
