// ModelControl: one lane per model (in order within a model, models independent), and what waits
// is bounded.
#include "server/model_control.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

namespace nereid {
namespace {

// A gate tasks wait on until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// Collects answers; Wait blocks until 'n' have come.
struct Answers {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> got;
  std::function<void(Status)> Callback() {
    return [this](Status s) {
      std::lock_guard<std::mutex> lock(mu);
      got.push_back(std::move(s));
      cv.notify_all();
    };
  }
  bool Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return got.size() >= n; });
  }
};

TEST(ModelControlTest, OneModelsRequestsRunInOrderAndOthersDoNotWaitForThem) {
  ModelControl control;
  Gate gate;
  Answers stuck, other;
  std::vector<int> order;
  std::mutex order_mu;
  auto record = [&](int i) {
    return [&, i] {
      std::lock_guard<std::mutex> lock(order_mu);
      order.push_back(i);
      return Status::Ok();
    };
  };
  control.Run(
      "a", 0,
      [&] {
        gate.Wait();
        return record(0)();
      },
      stuck.Callback());
  control.Run("a", 0, record(1), stuck.Callback());
  control.Run("a", 0, record(2), stuck.Callback());
  // 'b' finishes while every request of 'a' waits behind the first.
  control.Run(
      "b", 0, [] { return Status::Ok(); }, other.Callback());
  ASSERT_TRUE(other.Wait(1));
  EXPECT_TRUE(stuck.got.empty());
  gate.Open();
  ASSERT_TRUE(stuck.Wait(3));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  control.WaitIdle();
}

TEST(ModelControlTest, WaitingRequestsAreBoundedInCountAndBytes) {
  ModelControl control;
  Gate gate;
  Answers answers;
  std::promise<void> running;
  control.Run(
      "a", 0,
      [&] {
        running.set_value();
        gate.Wait();
        return Status::Ok();
      },
      answers.Callback());
  running.get_future().wait();  // it no longer waits: it runs
  // The first runs; kMaxWaiting more may wait; the next is refused at once, on this thread.
  for (size_t i = 0; i < ModelControl::kMaxWaiting; ++i)
    control.Run(
        "a", 1, [] { return Status::Ok(); }, answers.Callback());
  Status refused;
  control.Run(
      "a", 1, [] { return Status::Ok(); }, [&](Status s) { refused = s; });
  EXPECT_EQ(refused.code(), Status::Code::kUnavailable);
  EXPECT_NE(refused.message().find("too many model control requests are waiting"),
            std::string::npos);
  gate.Open();
  ASSERT_TRUE(answers.Wait(ModelControl::kMaxWaiting + 1));
  control.WaitIdle();

  Gate second;
  Answers big;
  std::promise<void> second_running;
  control.Run(
      "b", 0,
      [&] {
        second_running.set_value();
        second.Wait();
        return Status::Ok();
      },
      big.Callback());
  second_running.get_future().wait();
  control.Run(
      "b", ModelControl::kMaxWaitingBytes, [] { return Status::Ok(); }, big.Callback());
  Status too_big;
  control.Run(
      "c", 1, [] { return Status::Ok(); }, [&](Status s) { too_big = s; });
  EXPECT_EQ(too_big.code(), Status::Code::kUnavailable);
  second.Open();
  ASSERT_TRUE(big.Wait(2));
}

TEST(ModelControlTest, ATaskThatThrowsIsAnErrorAndTheLaneGoesOn) {
  ModelControl control;
  Answers answers;
  control.Run(
      "a", 0, []() -> Status { throw std::runtime_error("boom"); }, answers.Callback());
  control.Run(
      "a", 0, [] { return Status::Ok(); }, answers.Callback());
  ASSERT_TRUE(answers.Wait(2));
  EXPECT_EQ(answers.got[0].code(), Status::Code::kInternal);
  EXPECT_NE(answers.got[0].message().find("boom"), std::string::npos);
  EXPECT_TRUE(answers.got[1].ok());
}

}  // namespace
}  // namespace nereid
