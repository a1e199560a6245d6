// Admission: limits on a model's outstanding requests and input bytes, held until the final
// response, released once whatever happens, and read from the config with clear errors.
#include "runtime/admission.h"

#include <gtest/gtest.h>

#include "request/response_path.h"

namespace nereid {
namespace {

std::unique_ptr<InferenceRequest> Request(size_t bytes, int* completed) {
  auto r = std::make_unique<InferenceRequest>();
  InferInput in;
  in.name = "X";
  in.byte_size = bytes;
  r->inputs.push_back(in);
  r->on_complete = [completed](std::unique_ptr<InferenceResponse>) { ++*completed; };
  return r;
}

void Answer(InferenceRequest& r, bool final) {
  auto response = std::make_unique<InferenceResponse>();
  response->final = final;
  r.on_complete(std::move(response));
}

TEST(AdmissionTest, RequestLimitHoldsUntilTheFinalResponse) {
  Admission admission({2, 0});
  int completed = 0;
  auto a = Request(4, &completed), b = Request(4, &completed), c = Request(4, &completed);
  ASSERT_TRUE(admission.Admit(*a, "m").ok());
  ASSERT_TRUE(admission.Admit(*b, "m").ok());
  const Status refused = admission.Admit(*c, "m");
  EXPECT_EQ(refused.code(), Status::Code::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "model 'm' is at its limit of 2 outstanding requests (nereid.max_queued_requests); "
            "retry later");
  EXPECT_EQ(admission.requests(), 2u);
  EXPECT_EQ(admission.bytes(), 8u);
  // A decoupled model's non-final response keeps the place; the final one frees it.
  Answer(*a, false);
  EXPECT_EQ(admission.requests(), 2u);
  Answer(*a, true);
  EXPECT_EQ(completed, 2);  // the caller's callback still sees every response
  EXPECT_EQ(admission.requests(), 1u);
  EXPECT_TRUE(admission.Admit(*c, "m").ok());
  // Refused further on (the path unwound), then answered anyway: counted once, and the answer
  // goes straight to the caller's callback.
  ResponsePath::Unwind(*c);
  ResponsePath::Unwind(*c);
  EXPECT_EQ(admission.requests(), 1u);
  EXPECT_EQ(c->path, nullptr);
  Answer(*c, true);
  EXPECT_EQ(completed, 3);
  EXPECT_EQ(admission.requests(), 1u);
  Answer(*b, true);
  EXPECT_EQ(admission.requests(), 0u);
  EXPECT_EQ(admission.bytes(), 0u);
}

TEST(AdmissionTest, ByteLimitAlwaysAdmitsOneRequest) {
  Admission admission({0, 100});
  int completed = 0;
  auto big = Request(1000, &completed), small = Request(1, &completed);
  ASSERT_TRUE(admission.Admit(*big, "m").ok());  // alone: admitted whatever its size
  const Status refused = admission.Admit(*small, "m");
  EXPECT_EQ(refused.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(refused.message().find("100 outstanding input bytes"), std::string::npos);
  Answer(*big, true);
  EXPECT_TRUE(admission.Admit(*small, "m").ok());
}

TEST(AdmissionTest, LimitsFromTheConfig) {
  inference::ModelConfig config;
  config.set_name("m");
  auto limits = ReadAdmissionLimits(config);
  ASSERT_TRUE(limits.ok());
  EXPECT_FALSE(limits->enabled());
  (*config.mutable_parameters())["nereid.max_queued_requests"].set_string_value("64");
  (*config.mutable_parameters())["nereid.max_queued_bytes"].set_string_value("1048576");
  limits = ReadAdmissionLimits(config);
  ASSERT_TRUE(limits.ok());
  EXPECT_EQ(limits->max_requests, 64u);
  EXPECT_EQ(limits->max_bytes, 1048576u);
  for (const char* bad : {"-1", "", "12x", "99999999999999999999", "1e3", "+5", " 5", "inf"}) {
    (*config.mutable_parameters())["nereid.max_queued_bytes"].set_string_value(bad);
    const auto r = ReadAdmissionLimits(config);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(),
              std::string("model 'm': parameter 'nereid.max_queued_bytes' ") +
                  "must be a whole number from 0 to 4611686018427387904, got '" + bad + "'");
  }
}

}  // namespace
}  // namespace nereid
