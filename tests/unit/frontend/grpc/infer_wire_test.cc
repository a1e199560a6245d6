// The gRPC inference wire on its own: a ModelInferRequest parsed from gRPC's slices with its raw
// tensors left in place (or gathered once when one straddles two slices), the rest of the message
// intact; malformed and truncated messages refused with one clear error; and a response serialized
// as slices that protobuf reads back as the same message.
#include "frontend/grpc/infer_wire.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nereid::grpc_frontend {
namespace {

// 'bytes' as a byte buffer of slices cut at 'cuts' (offsets into 'bytes').
grpc::ByteBuffer Sliced(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + at, cut - at);
    at = cut;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flat(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

inference::ModelInferRequest Request() {
  inference::ModelInferRequest m;
  m.set_model_name("simple");
  m.set_id("42");
  (*m.mutable_parameters())["sequence_id"].set_int64_param(7);
  auto* in = m.add_inputs();
  in->set_name("INPUT0");
  in->set_datatype("INT32");
  in->add_shape(1);
  in->add_shape(16);
  m.add_raw_input_contents(std::string(64, 'a'));
  m.add_raw_input_contents(std::string(3000, 'b'));
  m.add_outputs()->set_name("OUTPUT0");
  return m;
}

TEST(InferWire, RawInputsStayWhereTheyArrivedAndTheRestParses) {
  const inference::ModelInferRequest sent = Request();
  const std::string bytes = sent.SerializeAsString();
  // One slice, and cuts everywhere: inside tags, lengths and both tensors.
  for (std::vector<size_t> cuts :
       {std::vector<size_t>{}, std::vector<size_t>{1, 2, 3}, std::vector<size_t>{bytes.size() / 2},
        std::vector<size_t>{bytes.size() - 1500, bytes.size() - 1}}) {
    auto parsed = ParseInferRequest(Sliced(bytes, cuts));
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    const ParsedInferRequest& p = **parsed;
    EXPECT_EQ(p.message.model_name(), "simple");
    EXPECT_EQ(p.message.id(), "42");
    EXPECT_EQ(p.message.parameters().at("sequence_id").int64_param(), 7);
    ASSERT_EQ(p.message.inputs_size(), 1);
    EXPECT_EQ(p.message.inputs(0).shape(1), 16);
    EXPECT_EQ(p.message.raw_input_contents_size(), 0);  // taken out, into 'raw'
    ASSERT_EQ(p.raw.size(), 2u);
    EXPECT_EQ(p.raw[0], std::string(64, 'a'));
    EXPECT_EQ(p.raw[1], std::string(3000, 'b'));
    ASSERT_EQ(p.raw_location.size(), 2u);
  }
  // In one slice, the tensors are views into it (nothing gathered).
  auto whole = ParseInferRequest(Sliced(bytes, {}));
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE((*whole)->gathered.empty());
  // Cut inside the second tensor: that one is gathered, the first is not.
  auto cut = ParseInferRequest(Sliced(bytes, {bytes.size() - 1500}));
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ((*cut)->gathered.size(), 1u);
}

TEST(InferWire, AnEmptyMessageIsAnEmptyRequest) {
  auto parsed = ParseInferRequest(Sliced("", {}));
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE((*parsed)->raw.empty());
  EXPECT_EQ((*parsed)->message.model_name(), "");
}

TEST(InferWire, MalformedMessagesAreRefused) {
  const std::string bytes = Request().SerializeAsString();
  const std::string expected =
      "the message is not a valid inference.ModelInferRequest (malformed protobuf)";
  std::vector<std::string> bad = {
      std::string("\x00", 1),                   // field 0
      std::string("\x3a\xff\xff\xff\xff\x0f"),  // raw_input_contents longer than the message
      std::string("\x0f"),                      // wire type 7
      std::string("\x08"),                      // a varint that never comes
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),  // an 11-byte varint
      std::string("\x0a\x05"
                  "ab"),  // a string shorter than its length
      std::string("\x11"
                  "1234"),              // a fixed64 cut short
      std::string("\x0a\x02\xff\xfe"),  // model_name that is no UTF-8
  };
  for (size_t n : {size_t{1}, bytes.size() / 3, bytes.size() - 1})
    bad.push_back(bytes.substr(0, n));
  for (const std::string& b : bad) {
    auto parsed = ParseInferRequest(Sliced(b, {}));
    ASSERT_FALSE(parsed.ok()) << testing::PrintToString(b);
    EXPECT_EQ(parsed.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), expected);
  }
}

TEST(InferWire, AResponseSerializesToTheMessageProtobufReadsBack) {
  inference::ModelInferResponse header;
  header.set_model_name("simple");
  header.set_model_version("1");
  header.add_outputs()->set_name("OUTPUT0");
  header.add_outputs()->set_name("OUTPUT1");
  InferenceResponse response;
  response.outputs.resize(2);
  response.outputs[0].SetBytes(std::vector<uint8_t>(100, 7));
  response.outputs[1].SetBytes(std::vector<uint8_t>(8, 9));
  response.outputs[1].in_shared_memory = true;  // written to the client's region: not sent
  grpc::ByteBuffer out;
  SerializeInferResponse(header, response, /*as_stream=*/false, &out);
  inference::ModelInferResponse back;
  ASSERT_TRUE(back.ParseFromString(Flat(out)));
  EXPECT_EQ(back.model_name(), "simple");
  ASSERT_EQ(back.raw_output_contents_size(), 2);
  EXPECT_EQ(back.raw_output_contents(0), std::string(100, '\x07'));
  EXPECT_EQ(back.raw_output_contents(1), "");
  // As a stream message: the same response inside ModelStreamInferResponse.infer_response.
  grpc::ByteBuffer streamed;
  SerializeInferResponse(header, response, /*as_stream=*/true, &streamed);
  inference::ModelStreamInferResponse wrapped;
  ASSERT_TRUE(wrapped.ParseFromString(Flat(streamed)));
  EXPECT_EQ(wrapped.infer_response().model_version(), "1");
  EXPECT_EQ(wrapped.infer_response().raw_output_contents(0), std::string(100, '\x07'));
}

}  // namespace
}  // namespace nereid::grpc_frontend
