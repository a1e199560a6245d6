// InferApiLink, the seam through which backends (BLS) and schedulers (ensemble steps) reach the
// server that serves their model, and the ABI's requests made without a caller, which go through
// the default link.
#include "request/infer_api.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "nereid/backend.h"
#include "runtime/backend_abi.h"

namespace nereid {
namespace {

// Completes every request at once, from inside Submit, with a response naming the model.
class AnsweringApi : public InferApi {
 public:
  Status Submit(std::unique_ptr<InferenceRequest>& request) override {
    ++submitted;
    if (hold) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto response = std::make_unique<InferenceResponse>();
    response->model_name = request->model_name;
    auto done = std::move(request->on_complete);
    request.reset();
    done(std::move(response));
    return Status::Ok();
  }
  std::atomic<int> submitted{0};
  bool hold = false;
};

std::unique_ptr<InferenceRequest> Request(ResponseCallback done) {
  auto r = std::make_unique<InferenceRequest>();
  r->model_name = "m";
  r->on_complete = std::move(done);
  return r;
}

TEST(InferApiLinkTest, RefusesWhileNoServerServes) {
  InferApiLink link;
  auto r = Request([](std::unique_ptr<InferenceResponse>) {});
  Status s = link.Submit(r);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(r, nullptr);  // still the caller's
}

TEST(InferApiLinkTest, ACallbackMaySubmitAgain) {
  InferApiLink link;
  AnsweringApi api;
  link.Set(&api);
  int answered = 0;
  auto r = Request([&](std::unique_ptr<InferenceResponse>) {
    ++answered;
    auto again = Request([&](std::unique_ptr<InferenceResponse>) { ++answered; });
    EXPECT_TRUE(link.Submit(again).ok());  // from inside the first Submit: no deadlock
  });
  ASSERT_TRUE(link.Submit(r).ok());
  EXPECT_EQ(answered, 2);
  link.Set(nullptr);
}

TEST(InferApiLinkTest, ClearingWaitsForSubmissionsUnderWay) {
  InferApiLink link;
  AnsweringApi api;
  api.hold = true;
  link.Set(&api);
  auto submitting = std::async(std::launch::async, [&] {
    auto r = Request([](std::unique_ptr<InferenceResponse>) {});
    return link.Submit(r);
  });
  while (api.submitted.load() == 0) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  link.Set(nullptr);  // the server going away: must not return while 'api' is in use
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  EXPECT_TRUE(submitting.get().ok());
}

TEST(InferApiLinkTest, AbiRequestsWithoutACallerUseTheDefaultLink) {
  auto link = std::make_shared<InferApiLink>();
  AnsweringApi api;
  link->Set(&api);
  SetDefaultInferLink(link);
  NereidInferRequest* request = nullptr;
  ASSERT_EQ(NereidInferRequestNew("m", -1, "id", &request), nullptr);
  std::promise<std::string> got;
  auto callback = [](void* user, NereidInferResponse* response) {
    NereidError* error = NereidInferResponseError(response);
    static_cast<std::promise<std::string>*>(user)->set_value(error == nullptr ? "ok" : "error");
    if (error != nullptr) NereidErrorDelete(error);
    NereidInferResponseDelete(response);
  };
  ASSERT_EQ(NereidInferAsync(request, callback, &got), nullptr);
  EXPECT_EQ(got.get_future().get(), "ok");
  link->Set(nullptr);
  ASSERT_EQ(NereidInferRequestNew("m", -1, nullptr, &request), nullptr);
  NereidError* refused = NereidInferAsync(request, callback, &got);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(NereidErrorGetCode(refused), NEREID_ERROR_UNAVAILABLE);
  NereidErrorDelete(refused);
  NereidInferRequestDelete(request);  // still the caller's after a refusal
  SetDefaultInferLink(nullptr);
}

}  // namespace
}  // namespace nereid
