// The bookkeeping of a race: at a shape nobody tuned, the dispatcher times
// the few configs its selector ranks best on the caller's own launches and
// keeps the fastest (cache/dispatcher.h says when and how it times them).
//
// Why a race: the selector borrows configs tuned at other shapes, and the
// best of its top few is often 10-40% faster than its first pick (measured
// on the H200: docs/performance.md).  Each candidate is a config the space
// accepts at the shape, so every raced launch computes the same result up
// to the rounding of its config; only the time differs.
//
// No CUDA here: the dispatcher brings the times (CUDA events), this class
// decides which runner the next launch times and who won, so the rules are
// tested alone (tests/dispatch_race_test.cpp).
//
// Thread safety: none; the dispatcher holds the race's mutex around it.
#pragma once
#include <cstddef>
#include <optional>
#include <vector>

namespace mlatune {

/// How a race is run.  candidates: configs raced per shape (the
/// selector's first ones whose binary compiles and launches there; fewer
/// than 2 means no race).  samples: times taken of each before the winner
/// is chosen by its median.  These defaults are also DispatcherOptions'
/// (MLATUNE_RACE=0 turns racing off).
struct RaceOptions {
  std::size_t candidates = 4;
  std::size_t samples = 3;
  /// Also raced, beyond `candidates`: up to this many configs one parameter
  /// away from the selector's choice that launch more blocks where the
  /// choice leaves SMs idle (DispatchIndex::filling_variants).
  std::size_t filling = 2;
  bool enabled() const { return candidates >= 2 && samples >= 1; }
};

class RaceBook {
 public:
  /// `runners` take part (index 0 is the selector's first), each timed
  /// `samples` times.
  RaceBook(std::size_t runners, std::size_t samples);

  /// The runner the next launch should time: the one with the fewest times
  /// taken or in flight (the earliest on a tie), or nullopt once every
  /// runner has its samples taken or in flight.
  std::optional<std::size_t> next_to_time() const;
  /// A timed launch of `runner` was issued; its time comes later.
  void started(std::size_t runner);
  /// The time of one launch of `runner` that started().
  void finished(std::size_t runner, double microseconds);
  /// A launch that started() will bring no time (its events failed): it is
  /// timed again.
  void dropped(std::size_t runner);
  /// `runner` cannot run here (its launch failed): it gets infinite times,
  /// is never timed again and never leads while another has a time.
  void disqualify(std::size_t runner);

  /// Every runner has all its samples.
  bool settled() const;
  /// The runner with the lowest median of the times so far; else the
  /// earliest with no time yet; disqualified runners last (index 0 on a
  /// tie or when nobody has a time).
  std::size_t leader() const;
  /// Median of `runner`'s times; 0 when it has none.
  double median_us(std::size_t runner) const;
  const std::vector<double>& times(std::size_t runner) const { return times_[runner]; }
  std::size_t runners() const { return times_.size(); }
  std::size_t samples() const { return samples_; }
  std::size_t in_flight() const;

 private:
  std::size_t samples_;
  std::vector<std::vector<double>> times_;
  std::vector<std::size_t> in_flight_;
};

}  // namespace mlatune
