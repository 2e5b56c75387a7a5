#include "sim/engine/event_queue.h"

#include <gtest/gtest.h>

#include <csignal>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "sim/engine/random.h"
#include "sim/engine/stop.h"
#include "sim/engine/trace.h"

namespace rlsim::sim {
namespace {

TEST(EventQueue, RunsInTimeOrder) {
  EventQueue q;
  std::vector<int> order;
  q.schedule_at(30, [&] { order.push_back(3); });
  q.schedule_at(10, [&] { order.push_back(1); });
  q.schedule_at(20, [&] { order.push_back(2); });
  EXPECT_EQ(q.run(), 3u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(q.now(), 30);
}

TEST(EventQueue, TiesResolveInSchedulingOrder) {
  EventQueue q;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) q.schedule_at(5, [&order, i] { order.push_back(i); });
  q.run();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(EventQueue, EventsScheduledDuringRunAtSameTimeRunAfterEarlierOnes) {
  EventQueue q;
  std::vector<std::string> order;
  q.schedule_at(1, [&] {
    order.push_back("a");
    q.schedule_in(0, [&] { order.push_back("c"); });
  });
  q.schedule_at(1, [&] { order.push_back("b"); });
  q.run();
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(EventQueue, CancelSkipsEventAndIsIdempotent) {
  EventQueue q;
  int ran = 0;
  const EventId a = q.schedule_at(1, [&] { ran += 1; });
  q.schedule_at(2, [&] { ran += 10; });
  EXPECT_TRUE(q.cancel(a));
  EXPECT_FALSE(q.cancel(a));
  EXPECT_EQ(q.pending(), 1u);
  q.run();
  EXPECT_EQ(ran, 10);
  EXPECT_FALSE(q.cancel(12345));
}

// Slots of events that ran or were cancelled are reused: an id of the old occupant must neither
// cancel the new one nor count as live, and a cancelled entry still in the heap must not run the
// event that took over its slot.
TEST(EventQueue, ReusedSlotIgnoresStaleIds) {
  EventQueue q;
  int ran = 0;
  const EventId a = q.schedule_at(5, [&] { ran += 1; });
  EXPECT_TRUE(q.cancel(a));                                 // its heap entry stays until popped
  const EventId b = q.schedule_at(10, [&] { ran += 10; });  // takes a's slot
  EXPECT_NE(a, b);
  EXPECT_FALSE(q.cancel(a));
  EXPECT_EQ(q.pending(), 1u);
  EXPECT_EQ(q.run(7), 0u) << "a's stale entry at t = 5 must not run b";
  q.run();
  EXPECT_EQ(ran, 10);
  EXPECT_FALSE(q.cancel(b));
  // A long run of one-at-a-time events reuses one slot: ids repeat their slot, never collide.
  std::set<EventId> ids;
  int chain = 0;
  std::function<void()> next = [&] {
    if (++chain < 1000) ids.insert(q.schedule_in(1, next));
  };
  ids.insert(q.schedule_in(1, next));
  q.run();
  EXPECT_EQ(chain, 1000);
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(EventQueue, RunUntilStopsClockAtLimit) {
  EventQueue q;
  int ran = 0;
  q.schedule_at(100, [&] { ++ran; });
  q.schedule_at(300, [&] { ++ran; });
  EXPECT_EQ(q.run(200), 1u);
  EXPECT_EQ(q.now(), 200);
  EXPECT_EQ(ran, 1);
  q.run();
  EXPECT_EQ(ran, 2);
}

TEST(EventQueue, RejectsPastAndEmpty) {
  EventQueue q;
  q.schedule_at(10, [] {});
  q.run();
  EXPECT_THROW(q.schedule_at(5, [] {}), std::invalid_argument);
  EXPECT_THROW(q.schedule_at(20, nullptr), std::invalid_argument);
}

// Same pseudo-random schedule twice: identical execution order.
std::vector<std::uint64_t> random_run(std::uint64_t seed) {
  EventQueue q;
  Rng rng(seed);
  std::vector<std::uint64_t> order;
  for (std::uint64_t i = 0; i < 2000; ++i) {
    const TimeNs t = rng.uniform_int(0, 50);  // many ties
    q.schedule_at(t, [&order, i, &q, &rng] {
      order.push_back(i);
      if (i % 7 == 0) q.schedule_in(rng.uniform_int(0, 3), [&order, i] { order.push_back(100000 + i); });
    });
  }
  q.run();
  return order;
}

TEST(EventQueue, Deterministic) {
  EXPECT_EQ(random_run(42), random_run(42));
  EXPECT_NE(random_run(42), random_run(43));
}

TEST(Time, Conversions) {
  EXPECT_EQ(to_ns(1.5), 1'500'000'000);
  EXPECT_EQ(to_ns(2e-9), 2);
  EXPECT_DOUBLE_EQ(to_seconds(2'500'000'000), 2.5);
  EXPECT_THROW(to_ns(-1.0), std::domain_error);
}

TEST(Rng, PortableStreams) {
  Rng a(7), b(7);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(a.uniform(), b.uniform());
  // Normal draws have mean ~0 and variance ~1.
  Rng n(1);
  double sum = 0, sq = 0;
  const int kN = 200000;
  for (int i = 0; i < kN; ++i) {
    const double x = n.normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / kN, 0.0, 0.01);
  EXPECT_NEAR(sq / kN, 1.0, 0.01);
}

// A stop request (what SIGINT / SIGTERM set) ends run() before the next event with Interrupted
// carrying the signal; the events before it ran, the rest stay pending.
TEST(EventQueue, StopRequestInterruptsAtTheNextEventBoundary) {
  EventQueue q;
  int ran = 0;
  q.schedule_at(1, [&] { ++ran; });
  q.schedule_at(2, [&] {
    ++ran;
    request_stop(SIGTERM);
  });
  q.schedule_at(3, [&] { ++ran; });
  try {
    q.run();
    ADD_FAILURE() << "run() finished despite the stop request";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal_number(), SIGTERM);
    EXPECT_NE(std::string(e.what()).find("SIGTERM"), std::string::npos);
  }
  request_stop(0);
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(q.pending(), 1u);
  EXPECT_EQ(q.run(), 1u);  // cleared: the rest runs
  EXPECT_EQ(ran, 3);
}

}  // namespace
}  // namespace rlsim::sim
