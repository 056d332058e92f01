// RaceBook: which runner a raced launch times, and who wins.
#include "cache/dispatch_race.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace mlatune {
namespace {

TEST(RaceBook, TimesEveryRunnerInTurnUntilEachHasItsSamples) {
  RaceBook book(3, 2);
  std::vector<std::size_t> order;
  while (auto next = book.next_to_time()) {
    order.push_back(*next);
    book.started(*next);
  }
  // Round robin, and never more launches in flight than samples wanted.
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(book.in_flight(), 6u);
  EXPECT_FALSE(book.settled());
  for (std::size_t runner : order) book.finished(runner, 10.0 + static_cast<double>(runner));
  EXPECT_TRUE(book.settled());
  EXPECT_EQ(book.in_flight(), 0u);
  EXPECT_FALSE(book.next_to_time());
}

TEST(RaceBook, TheLowestMedianWinsNotTheLowestSingleTime) {
  RaceBook book(2, 3);
  for (std::size_t i = 0; i < 3; ++i) {
    book.started(0);
    book.started(1);
  }
  // Runner 0 had one lucky launch; runner 1 is faster as a rule.
  for (double t : {5.0, 30.0, 31.0}) book.finished(0, t);
  for (double t : {20.0, 21.0, 40.0}) book.finished(1, t);
  EXPECT_DOUBLE_EQ(book.median_us(0), 30.0);
  EXPECT_DOUBLE_EQ(book.median_us(1), 21.0);
  EXPECT_EQ(book.leader(), 1u);
}

TEST(RaceBook, AnEvenNumberOfTimesHasTheMeanOfTheMiddleTwoAsMedian) {
  RaceBook book(1, 4);
  for (double t : {4.0, 1.0, 3.0, 2.0}) {
    book.started(0);
    book.finished(0, t);
  }
  EXPECT_DOUBLE_EQ(book.median_us(0), 2.5);
}

TEST(RaceBook, TheLeaderIsTheSelectorsFirstUntilAnotherHasATime) {
  RaceBook book(3, 2);
  EXPECT_EQ(book.leader(), 0u);
  book.started(2);
  book.finished(2, 50.0);
  EXPECT_EQ(book.leader(), 2u);  // the only runner with a time
  book.started(0);
  book.finished(0, 50.0);
  EXPECT_EQ(book.leader(), 0u);  // a tie goes to the earlier runner
  book.started(1);
  book.finished(1, 49.0);
  EXPECT_EQ(book.leader(), 1u);
  EXPECT_DOUBLE_EQ(book.median_us(1), 49.0);
  EXPECT_DOUBLE_EQ(RaceBook(2, 1).median_us(1), 0.0);
}

TEST(RaceBook, ADroppedLaunchIsTimedAgain) {
  RaceBook book(2, 1);
  book.started(0);
  book.started(1);
  EXPECT_FALSE(book.next_to_time());
  book.dropped(1);
  EXPECT_EQ(book.next_to_time(), 1u);
  book.finished(0, 7.0);
  EXPECT_FALSE(book.settled());
  book.started(1);
  book.finished(1, 6.0);
  EXPECT_TRUE(book.settled());
  EXPECT_EQ(book.leader(), 1u);
}

TEST(RaceBook, ARunnerWhoseLaunchFailedIsNeverTimedAgainNorWins) {
  RaceBook book(3, 2);
  book.disqualify(0);
  EXPECT_EQ(book.leader(), 1u) << "the untimed launches run a runner that may still run";
  std::vector<std::size_t> order;
  while (auto next = book.next_to_time()) {
    order.push_back(*next);
    book.started(*next);
  }
  EXPECT_EQ(order, (std::vector<std::size_t>{1, 2, 1, 2}));
  for (std::size_t runner : order) book.finished(runner, runner == 1 ? 90.0 : 80.0);
  EXPECT_TRUE(book.settled());
  EXPECT_EQ(book.leader(), 2u);
  EXPECT_TRUE(std::isinf(book.median_us(0)));
}

TEST(RaceBook, BookkeepingMistakesAreInternalErrors) {
  EXPECT_THROW(RaceBook(0, 3), InternalError);
  EXPECT_THROW(RaceBook(2, 0), InternalError);
  RaceBook book(2, 1);
  EXPECT_THROW(book.finished(0, 1.0), InternalError);
  EXPECT_THROW(book.dropped(1), InternalError);
  EXPECT_THROW(book.started(2), std::out_of_range);
}

TEST(RaceOptions, ARaceNeedsTwoCandidatesAndASample) {
  EXPECT_TRUE(RaceOptions{}.enabled());
  EXPECT_FALSE((RaceOptions{1, 3}.enabled()));
  EXPECT_FALSE((RaceOptions{0, 3}.enabled()));
  EXPECT_FALSE((RaceOptions{4, 0}.enabled()));
}

}  // namespace
}  // namespace mlatune
