#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cache/compile_queue.h"

namespace mlatune {
namespace {

using namespace std::chrono_literals;

// A job that blocks until released, so that tests control what is running.
struct Gate {
  std::promise<void> release;
  std::shared_future<void> opened{release.get_future().share()};
  std::promise<void> started_promise;
  std::future<void> started{started_promise.get_future()};
};

TEST(CompileQueue, RunsJobsInSubmissionOrderOnOneThread) {
  CompileQueue queue;
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(queue.submit("job" + std::to_string(i), [&, i] {
      std::lock_guard lock(mutex);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    }));
  queue.wait_idle();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (const auto& id : threads) {
    EXPECT_EQ(id, threads.front());
    EXPECT_NE(id, std::this_thread::get_id());
  }
  EXPECT_EQ(queue.pending(), 0u);
  EXPECT_EQ(queue.stats().done, 5u);
}

TEST(CompileQueue, AKeyQueuedOrRunningIsNotQueuedTwice) {
  CompileQueue queue;
  Gate gate;
  std::atomic<int> runs_a{0}, runs_b{0};
  ASSERT_TRUE(queue.submit("a", [&] {
    ++runs_a;
    gate.started_promise.set_value();
    gate.opened.wait();
  }));
  gate.started.wait();                              // "a" is running
  EXPECT_FALSE(queue.submit("a", [&] { ++runs_a; }));  // running: refused
  EXPECT_TRUE(queue.submit("b", [&] { ++runs_b; }));
  EXPECT_FALSE(queue.submit("b", [&] { ++runs_b; }));  // queued: refused
  EXPECT_EQ(queue.pending(), 2u);
  gate.release.set_value();
  queue.wait_idle();
  EXPECT_EQ(runs_a, 1);
  EXPECT_EQ(runs_b, 1);
  // Once finished, the key may come again (e.g. a later compile of it).
  EXPECT_TRUE(queue.submit("a", [&] { ++runs_a; }));
  queue.wait_idle();
  EXPECT_EQ(runs_a, 2);
  CompileQueueStats stats = queue.stats();
  EXPECT_EQ(stats.submitted, 3u);
  EXPECT_EQ(stats.duplicates, 2u);
  EXPECT_EQ(stats.done, 3u);
}

TEST(CompileQueue, AFailingJobIsCountedAndTheWorkerGoesOn) {
  CompileQueue queue;
  std::atomic<bool> after{false};
  queue.submit("bad", [] { throw std::runtime_error("nvrtc: error: expected a ';'"); });
  queue.submit("good", [&] { after = true; });
  queue.wait_idle();
  EXPECT_TRUE(after);
  CompileQueueStats stats = queue.stats();
  EXPECT_EQ(stats.failed, 1u);
  EXPECT_EQ(stats.done, 1u);
  EXPECT_EQ(stats.last_error, "nvrtc: error: expected a ';'");
}

TEST(CompileQueue, DestructionWaitsForTheRunningJobAndDropsTheRest) {
  std::atomic<int> finished{0}, never{0};
  Gate gate;
  std::thread releaser;
  {
    CompileQueue queue;
    queue.submit("slow", [&] {
      gate.started_promise.set_value();
      gate.opened.wait();
      std::this_thread::sleep_for(20ms);
      ++finished;
    });
    queue.submit("queued", [&] { ++never; });
    gate.started.wait();
    releaser = std::thread([&] {
      std::this_thread::sleep_for(20ms);
      gate.release.set_value();
    });
  }  // joins: the running job completes, the queued one never runs
  releaser.join();
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(never, 0);
}

TEST(CompileQueue, WaitIdleWithNothingQueuedReturnsAtOnce) {
  CompileQueue queue;
  queue.wait_idle();
  EXPECT_EQ(queue.pending(), 0u);
  EXPECT_EQ(queue.stats().submitted, 0u);
}

TEST(CompileQueue, ManyThreadsSubmittingTheSameKeysRunEachOnceAtATime) {
  CompileQueue queue;
  std::atomic<int> concurrent{0}, most{0}, runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int k = 0; k < 20; ++k)
        queue.submit("key" + std::to_string(k % 4), [&] {
          int now = ++concurrent;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {}
          std::this_thread::sleep_for(100us);
          ++runs;
          --concurrent;
        });
    });
  for (auto& thread : threads) thread.join();
  queue.wait_idle();
  EXPECT_EQ(most.load(), 1);  // one worker
  CompileQueueStats stats = queue.stats();
  EXPECT_EQ(stats.submitted + stats.duplicates, 160u);
  EXPECT_EQ(static_cast<std::uint64_t>(runs.load()), stats.submitted);
  EXPECT_GE(stats.submitted, 4u);
}

}  // namespace
}  // namespace mlatune
