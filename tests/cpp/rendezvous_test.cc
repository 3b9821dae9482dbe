// The in-process meeting point of thread ranks: agreement, timeouts and
// errors reach every participant; nothing waits forever.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "distributed/rendezvous.h"

namespace torch_pjrt::distributed {
namespace {

using namespace std::chrono_literals;

Rendezvous::Arrival arrival(std::vector<int64_t> signature, std::string what) {
  Rendezvous::Arrival a;
  a.signature = std::move(signature);
  a.description = std::move(what);
  return a;
}

TEST(Rendezvous, LastArriverActsOnceForAll) {
  Rendezvous r(3);
  std::atomic<int> actions{0};
  std::vector<std::thread> ranks;
  std::vector<size_t> seen(3);
  for (int i = 0; i < 3; ++i) {
    ranks.emplace_back([&, i] {
      auto out = r.meet("c:0", 3, i, arrival({1, 2}, "x"), 5s,
                        [&](const std::vector<Rendezvous::Arrival>& all) {
                          actions++;
                          return Rendezvous::Results(all.size());
                        });
      seen[i] = out.arrivals.size();
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(actions.load(), 1);
  EXPECT_EQ(seen, (std::vector<size_t>{3, 3, 3}));
}

TEST(Rendezvous, DisagreementNamesEveryRank) {
  Rendezvous r(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int i = 0; i < 2; ++i) {
    ranks.emplace_back([&, i] {
      try {
        r.meet("all_reduce #4", 2, i, arrival({i == 0 ? 4 : 8}, i == 0 ? "f32[4]" : "f32[8]"), 5s,
               [](const auto& all) { return Rendezvous::Results(all.size()); });
      } catch (const MeetingError& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    EXPECT_NE(e.find("rank 0 called f32[4]; rank 1 called f32[8]"), std::string::npos) << e;
  }
}

TEST(Rendezvous, AMissingRankTimesOutAndALateOneIsToldToo) {
  Rendezvous r(2);
  auto start = std::chrono::steady_clock::now();
  try {
    r.meet("barrier #0", 2, 0, arrival({0}, "barrier"), 100ms,
           [](const auto& all) { return Rendezvous::Results(all.size()); });
    FAIL() << "must time out";
  } catch (const MeetingError& e) {
    EXPECT_NE(std::string(e.what()).find("waiting for rank(s) 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_THROW(r.meet("barrier #0", 2, 1, arrival({0}, "barrier"), 100ms,
                      [](const auto& all) { return Rendezvous::Results(all.size()); }),
               MeetingError);
}

TEST(Rendezvous, AnActionErrorReachesEveryone) {
  Rendezvous r(2);
  std::atomic<int> raised{0};
  std::vector<std::thread> ranks;
  for (int i = 0; i < 2; ++i) {
    ranks.emplace_back([&, i] {
      try {
        r.meet("c:1", 2, i, arrival({1}, "x"), 5s,
               [](const auto&) -> Rendezvous::Results { throw std::runtime_error("compile failed"); });
      } catch (const MeetingError& e) {
        if (std::string(e.what()).find("compile failed") != std::string::npos) raised++;
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(raised.load(), 2);
}

TEST(Rendezvous, PostAndTake) {
  Rendezvous r(2);
  std::thread sender([&] {
    std::this_thread::sleep_for(20ms);
    r.post("p:0:1:0:0", arrival({7}, "send"));
  });
  EXPECT_EQ(r.take("p:0:1:0:0", 5s, "recv").signature, std::vector<int64_t>{7});
  sender.join();
  EXPECT_THROW(r.take("p:0:1:0:1", 50ms, "recv #1"), MeetingError);
}

TEST(Rendezvous, SharedByKey) {
  auto a = Rendezvous::shared("group-a", 2);
  EXPECT_EQ(a, Rendezvous::shared("group-a", 2));
  EXPECT_NE(a, Rendezvous::shared("group-b", 2));
  EXPECT_THROW(Rendezvous::shared("group-a", 3), MeetingError);
}

}  // namespace
}  // namespace torch_pjrt::distributed
