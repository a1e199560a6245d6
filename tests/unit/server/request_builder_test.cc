// The request builder: the rules every protocol's request goes through once decoded (datatypes,
// shapes, data forms, schedule parameters, outputs, shared memory), on descriptions written here
// as a frontend would write them.
#include "server/request_builder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "nereid/backend.h"

namespace nereid {
namespace {

inference::ModelConfig Config() {
  inference::ModelConfig c;
  c.set_name("m");
  c.set_max_batch_size(8);
  auto* in = c.add_input();
  in->set_name("IN");
  in->set_data_type(inference::TYPE_FP32);
  in->add_dims(4);
  return c;
}

InputDescription Raw(const std::string& bytes) {
  InputDescription in;
  in.name = "IN";
  in.datatype = "FP32";
  in.shape = {1, 4};
  in.raw = bytes;
  return in;
}

StatusOr<std::unique_ptr<InferenceRequest>> Build(
    RequestDescription d, const SharedMemoryRegistry* shm = nullptr,
    InferEndpoint endpoint = InferEndpoint::kGrpcUnary) {
  return BuildInferenceRequest(std::move(d), endpoint, Config(), shm);
}

std::string Message(const StatusOr<std::unique_ptr<InferenceRequest>>& r) {
  return r.ok() ? std::string("ok") : r.status().message();
}

TEST(RequestBuilderTest, RawBytesAreBorrowedNotCopied) {
  const std::string bytes(16, '\1');
  RequestDescription d;
  d.inputs.push_back(Raw(bytes));
  auto r = Build(std::move(d));
  ASSERT_TRUE(r.ok()) << Message(r);
  EXPECT_EQ((*r)->inputs[0].data, reinterpret_cast<const uint8_t*>(bytes.data()));
  EXPECT_EQ((*r)->inputs[0].datatype, DataType::kFp32);
  EXPECT_EQ((*r)->model_name, "m");
}

TEST(RequestBuilderTest, DataFormsDoNotMix) {
  const std::string bytes(16, '\0');
  RequestDescription d;
  InputDescription in = Raw(bytes);
  in.typed = std::vector<uint8_t>(16);
  d.inputs.push_back(in);
  EXPECT_EQ(Message(Build(std::move(d))),
            "contents field must not be specified when using raw_input_contents for 'IN' for "
            "model 'm'");
  RequestDescription s;
  in.typed.reset();
  in.shared_memory = SharedMemoryReference{"r", 0, 16};
  s.inputs.push_back(in);
  EXPECT_EQ(Message(Build(std::move(s))),
            "input 'IN' can't set 'shared_memory_region' together with tensor data");
}

TEST(RequestBuilderTest, TypedValuesAreCounted) {
  RequestDescription d;
  InputDescription in = Raw("");
  in.raw.reset();
  in.typed = std::vector<uint8_t>(12);
  in.typed_count = 3;
  d.inputs.push_back(in);
  EXPECT_EQ(Message(Build(std::move(d))),
            "unexpected number of elements for input 'IN': shape [1,4] needs 4, got 3");
}

TEST(RequestBuilderTest, DatatypeShapeAndSequence) {
  RequestDescription d;
  d.inputs.push_back(Raw(std::string(16, '\0')));
  d.inputs[0].datatype = "FP33";
  EXPECT_EQ(Message(Build(d)), "input 'IN' has unknown datatype 'FP33'");
  d.inputs[0].datatype = "FP32";
  d.inputs[0].shape = {1, -4};
  EXPECT_EQ(Message(Build(d)), "input 'IN': shape entries must be non-negative integers");
  d.inputs[0].shape = {1, 4};
  d.priority = 2;
  d.flags = NEREID_REQUEST_FLAG_SEQUENCE_START;
  d.correlation_id = CorrelationId{true, true, 0, std::string(129, 's')};
  EXPECT_EQ(Message(Build(d)), "string correlation ID cannot be longer than 128 characters");
  d.correlation_id.text.pop_back();
  auto r = Build(d);
  ASSERT_TRUE(r.ok()) << Message(r);
  EXPECT_EQ((*r)->priority, 2u);
  EXPECT_EQ((*r)->flags, NEREID_REQUEST_FLAG_SEQUENCE_START);
  EXPECT_EQ((*r)->correlation_id.text.size(), 128u);
}

TEST(RequestBuilderTest, WholeBodyTakesTheConfigsShape) {
  auto body = std::make_shared<std::vector<uint8_t>>(32);
  RequestDescription d;
  d.whole_body_input = Buffer(body->data(), body->size(), MemoryLocation{}, body);
  auto r = Build(std::move(d));
  ASSERT_TRUE(r.ok()) << Message(r);
  EXPECT_EQ((*r)->inputs[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE((*r)->binary_outputs_by_default);
}

TEST(RequestBuilderTest, OutputRules) {
  RequestDescription d;
  d.inputs.push_back(Raw(std::string(16, '\0')));
  OutputDescription out;
  out.name = "OUT";
  out.classification = 0;
  d.outputs.push_back(out);
  EXPECT_EQ(Message(Build(d)), "output 'OUT': classification must be a positive integer");
  // Checked whatever the region: the request is refused before the region is looked up.
  d.outputs[0].classification = 3;
  d.outputs[0].shared_memory = SharedMemoryReference{"nowhere", 0, 16};
  EXPECT_EQ(Message(Build(d, nullptr, InferEndpoint::kHttp)),
            "Output can't set both 'shared_memory_region' and 'classification'");
  EXPECT_EQ(Message(Build(d, nullptr, InferEndpoint::kGrpcUnary)),
            "output can't set both 'shared_memory_region' and 'classification'");
  d.outputs[0].classification.reset();
  d.outputs[0].binary = true;
  EXPECT_EQ(Message(Build(d, nullptr, InferEndpoint::kHttp)),
            "Output can't set both 'shared_memory_region' and 'binary_data'");
  d.outputs[0].binary.reset();
  EXPECT_EQ(Message(Build(d)), "shared memory is not available on this endpoint");
}

TEST(RequestBuilderTest, SharedMemoryTensorsResolveInTheRegistry) {
  const std::string key = "/nereid_builder_test_" + std::to_string(getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 64), 0);
  close(fd);
  SharedMemoryRegistry shm;
  // Off by default (--allow-client-shm): a client may not register a region.
  EXPECT_EQ(shm.Register("r", key, 0, 64).message(), SharedMemoryRegistry::kClientShmDisabled);
  shm.AllowClients(true);
  ASSERT_TRUE(shm.Register("r", key, 0, 64).ok());
  RequestDescription d;
  InputDescription in = Raw("");
  in.raw.reset();
  in.shared_memory = SharedMemoryReference{"r", 16, 16};
  d.inputs.push_back(in);
  OutputDescription out;
  out.name = "OUT";
  out.shared_memory = SharedMemoryReference{"r", 32, 32};
  d.outputs.push_back(out);
  auto r = Build(d, &shm);
  ASSERT_TRUE(r.ok()) << Message(r);
  EXPECT_EQ((*r)->inputs[0].byte_size, 16u);
  EXPECT_TRUE((*r)->outputs[0].has_destination);
  EXPECT_EQ((*r)->outputs[0].destination.size(), 32u);
  d.inputs[0].shared_memory->offset = 60;
  EXPECT_FALSE(Build(d, &shm).ok());
  shm_unlink(key.c_str());
}

// One table of the parameters the server acts on, for both protocols: only HTTP has
// binary_data_output, only gRPC lets a client send a triton_ option, and every other triton_ key
// is refused; anything else goes to the backend.
TEST(RequestParameters, OneTableForBothProtocols) {
  for (InferEndpoint e :
       {InferEndpoint::kHttp, InferEndpoint::kGrpcUnary, InferEndpoint::kGrpcStream}) {
    EXPECT_EQ(ClassifyRequestParameter("sequence_id", e), ServerParameter::kSequenceId);
    EXPECT_EQ(ClassifyRequestParameter("sequence_start", e), ServerParameter::kSequenceStart);
    EXPECT_EQ(ClassifyRequestParameter("sequence_end", e), ServerParameter::kSequenceEnd);
    EXPECT_EQ(ClassifyRequestParameter("priority", e), ServerParameter::kPriority);
    EXPECT_EQ(ClassifyRequestParameter("timeout", e), ServerParameter::kTimeout);
    EXPECT_EQ(ClassifyRequestParameter("triton_other", e), ServerParameter::kReservedPrefix);
    EXPECT_EQ(ClassifyRequestParameter("triton_", e), ServerParameter::kReservedPrefix);
    EXPECT_EQ(ClassifyRequestParameter("triton", e), ServerParameter::kBackend);
    EXPECT_EQ(ClassifyRequestParameter("my_param", e), ServerParameter::kBackend);
    EXPECT_EQ(ClassifyRequestParameter("", e), ServerParameter::kBackend);
  }
  EXPECT_EQ(ClassifyRequestParameter("binary_data_output", InferEndpoint::kHttp),
            ServerParameter::kBinaryDataOutput);
  EXPECT_EQ(ClassifyRequestParameter("binary_data_output", InferEndpoint::kGrpcUnary),
            ServerParameter::kBackend);
  EXPECT_EQ(ClassifyRequestParameter("triton_enable_empty_final_response", InferEndpoint::kHttp),
            ServerParameter::kReservedPrefix);
  EXPECT_EQ(
      ClassifyRequestParameter("triton_enable_empty_final_response", InferEndpoint::kGrpcStream),
      ServerParameter::kFrontendOption);
}

}  // namespace
}  // namespace nereid
