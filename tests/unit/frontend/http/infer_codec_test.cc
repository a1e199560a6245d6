// The HTTP infer body codec: JSON and binary tensors in, JSON and binary tensors out, and the
// errors for malformed, truncated and inconsistent bodies.
#include "frontend/http/infer_codec.h"

#include <gtest/gtest.h>

#include <cstring>

#include "frontend/http/compression.h"

namespace nereid::http {
namespace {

inference::ModelConfig OneInputConfig(int max_batch_size) {
  inference::ModelConfig c;
  c.set_name("m");
  c.set_max_batch_size(max_batch_size);
  auto* in = c.add_input();
  in->set_name("IN");
  in->set_data_type(inference::TYPE_FP32);
  in->add_dims(4);
  return c;
}

// Decodes the body and builds the request for a model configured by OneInputConfig(8), as the
// HTTP server does (the builder's rules run too).
Status Decode(std::shared_ptr<const std::string> body, int64_t header_length, InferenceRequest* r) {
  RequestDescription d;
  RETURN_IF_ERROR(DecodeInferRequest(std::move(body), header_length, &d));
  ASSIGN_OR_RETURN(
      std::unique_ptr<InferenceRequest> built,
      BuildInferenceRequest(std::move(d), InferEndpoint::kHttp, OneInputConfig(8), nullptr));
  *r = std::move(*built);
  return Status::Ok();
}
Status Decode(const std::string& body, int64_t header_length, InferenceRequest* r) {
  return Decode(std::make_shared<const std::string>(body), header_length, r);
}

TEST(InferCodecTest, JsonTensorsFlattenNestedData) {
  InferenceRequest r;
  ASSERT_TRUE(
      Decode(
          R"({"id":"7","inputs":[{"name":"IN","shape":[2,2],"datatype":"INT16","data":[[1,-2],[3,4]]}],
                        "outputs":[{"name":"OUT","parameters":{"classification":3}}]})",
          -1, &r)
          .ok());
  EXPECT_EQ(r.id, "7");
  ASSERT_EQ(r.inputs.size(), 1u);
  ASSERT_EQ(r.inputs[0].byte_size, 8u);
  const auto* v = reinterpret_cast<const int16_t*>(r.inputs[0].data);
  EXPECT_EQ(v[1], -2);
  EXPECT_EQ(v[3], 4);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].class_count, 3u);
}

TEST(InferCodecTest, BytesAndBoolJson) {
  InferenceRequest r;
  ASSERT_TRUE(Decode(R"({"inputs":[{"name":"S","shape":[2],"datatype":"BYTES","data":["ab",""]},
                                   {"name":"B","shape":[2],"datatype":"BOOL","data":[true,false]}]})",
                     -1, &r)
                  .ok());
  ASSERT_EQ(r.inputs[0].byte_size, 4u + 2u + 4u);
  EXPECT_EQ(std::memcmp(r.inputs[0].data,
                        "\x02\x00\x00\x00"
                        "ab"
                        "\x00\x00\x00\x00",
                        10),
            0);
  EXPECT_EQ(r.inputs[1].data[0], 1);
  EXPECT_EQ(r.inputs[1].data[1], 0);
}

TEST(InferCodecTest, BinaryInputsPointIntoTheBody) {
  const std::string json =
      R"({"inputs":[{"name":"IN","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"parameters":{"binary_data_output":true}})";
  std::string body = json;
  float values[4] = {1.5f, 2.5f, -3.f, 4.f};
  body.append(reinterpret_cast<const char*>(values), sizeof(values));
  auto shared = std::make_shared<const std::string>(body);
  InferenceRequest r;
  ASSERT_TRUE(Decode(shared, static_cast<int64_t>(json.size()), &r).ok());
  EXPECT_EQ(r.inputs[0].data,
            reinterpret_cast<const uint8_t*>(shared->data() + json.size()));  // zero copy
  EXPECT_TRUE(r.binary_outputs_by_default);
}

TEST(InferCodecTest, RawBinaryRequestTakesShapeFromConfig) {
  float values[8] = {};
  InferenceRequest r;
  ASSERT_TRUE(
      Decode(std::string(reinterpret_cast<const char*>(values), sizeof(values)), 0, &r).ok());
  EXPECT_EQ(r.inputs[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(r.binary_outputs_by_default);
  EXPECT_FALSE(Decode(std::string(7, '\0'), 0, &r).ok());
}

TEST(InferCodecTest, Errors) {
  struct Case {
    std::string body;
    int64_t header;
    const char* fragment;
    Status::Code code = Status::Code::kInvalidArgument;
  };
  const std::string bin =
      R"({"inputs":[{"name":"IN","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]})";
  const Case cases[] = {
      {"{\"inputs\": [", -1, "failed to parse"},
      {"[]", -1, "must be an object"},
      {R"({"inputs":[{"name":"IN","shape":[3],"datatype":"FP32","data":[1,2]}]})", -1,
       "unexpected number of elements"},
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"FP99","data":[1]}]})", -1,
       "unknown datatype"},
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"INT8","data":[300]}]})", -1, "in range"},
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"UINT8","data":[-1]}]})", -1, "in range"},
      {R"({"inputs":[{"name":"IN","shape":[-1],"datatype":"FP32","data":[]}]})", -1,
       "non-unsigned-integer", Status::Code::kInternal},  // Triton answers 500
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"FP32"}]})", -1, "neither"},
      {bin + std::string(8, 'x'), static_cast<int64_t>(bin.size()), "truncated"},
      {bin + std::string(20, 'x'), static_cast<int64_t>(bin.size()), "no input claims"},
      {bin, 1000, "Inference-Header-Content-Length"},
      {bin, -1, "no Inference-Header-Content-Length"},
  };
  for (const auto& c : cases) {
    InferenceRequest r;
    Status s = Decode(c.body, c.header, &r);
    ASSERT_FALSE(s.ok()) << c.body;
    EXPECT_EQ(s.code(), c.code) << s.message();
    EXPECT_NE(s.message().find(c.fragment), std::string::npos) << s.message();
  }
}

TEST(InferCodecTest, EncodesJsonAndBinaryOutputs) {
  InferenceResponse r;
  r.model_name = "m";
  r.model_version = 3;
  r.id = "x";
  InferOutput a;
  a.name = "A";
  a.datatype = DataType::kFp32;
  a.shape = {2};
  float v[2] = {0.1f, 2.f};
  a.SetBytes(
      std::vector<uint8_t>(reinterpret_cast<uint8_t*>(v), reinterpret_cast<uint8_t*>(v) + 8));
  InferOutput b = a;
  b.name = "B";
  b.binary = true;
  r.outputs = {a, b};
  EncodedResponse e = EncodeInferResponse(r);
  const std::string json = e.json;
  EXPECT_TRUE(e.has_binary);
  EXPECT_NE(json.find(R"("model_version":"3")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("data":[0.1,2])"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("binary_data_size":8)"), std::string::npos) << json;
  EXPECT_EQ(e.Flatten().size(), e.json.size() + 8);
  ASSERT_EQ(e.binary.size(), 1u);
  EXPECT_EQ(e.binary[0].data(), b.bytes());  // the output's own bytes, not a copy
  EXPECT_EQ(ErrorJson("a \"quoted\" msg"), R"({"error":"a \"quoted\" msg"})");
}

TEST(InferCodecTest, BytesThatAreNotUtf8CannotBeJson) {
  auto response = [](std::string element, bool binary) {
    InferenceResponse r;
    InferOutput o;
    o.name = "S";
    o.datatype = DataType::kBytes;
    o.shape = {1};
    o.binary = binary;
    const auto n = static_cast<uint32_t>(element.size());
    std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(&n),
                               reinterpret_cast<const uint8_t*>(&n) + 4);
    bytes.insert(bytes.end(), element.begin(), element.end());
    o.SetBytes(std::move(bytes));
    r.outputs = {o};
    return r;
  };
  for (const char* valid : {"plain", "h\xc3\xa9llo", "\xe2\x82\xac", "\xf0\x9f\x98\x80", ""})
    EXPECT_TRUE(CheckJsonOutputs(response(valid, false)).ok()) << valid;
  for (const char* invalid : {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                              "a\x80"
                              "b",
                              "\xe2\x82"}) {
    Status s = CheckJsonOutputs(response(invalid, false));
    EXPECT_FALSE(s.ok()) << invalid;
    EXPECT_NE(s.message().find("not valid UTF-8"), std::string::npos) << s.message();
    EXPECT_TRUE(CheckJsonOutputs(response(invalid, true)).ok());  // binary: any bytes
  }
}

TEST(CompressionTest, RoundTripsAndBoundsInflation) {
  const std::string text(100000, 'a');
  for (Encoding e : {Encoding::kGzip, Encoding::kDeflate}) {
    auto packed = Deflate(e, text);
    ASSERT_TRUE(packed.ok());
    EXPECT_LT(packed->size(), text.size() / 10);
    auto unpacked = Inflate(e, *packed, 1 << 20);
    ASSERT_TRUE(unpacked.ok());
    EXPECT_EQ(*unpacked, text);
    EXPECT_FALSE(Inflate(e, *packed, 1000).ok());  // over the limit
    EXPECT_FALSE(Inflate(e, packed->substr(0, packed->size() / 2), 1 << 20).ok());  // truncated
  }
  EXPECT_EQ(PickAcceptEncoding("br, deflate;q=0, gzip"), Encoding::kGzip);
  EXPECT_EQ(PickAcceptEncoding("identity"), Encoding::kIdentity);
  EXPECT_FALSE(ParseContentEncoding("br").ok());
}

}  // namespace
}  // namespace nereid::http
