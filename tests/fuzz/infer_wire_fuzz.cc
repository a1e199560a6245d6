// Fuzz target for the gRPC inference wire (src/frontend/grpc/infer_wire): a ModelInferRequest
// parsed around its raw tensors from gRPC's slices. The first input byte says where the rest is
// cut into slices (every (b+1)-th byte; 0: one slice), so that tags, lengths and tensors that
// straddle slices are reached; every raw tensor the parser accepts is read through.
//   libFuzzer: scripts/fuzz.sh [seconds]       replay (any compiler): build/infer_wire_fuzz FILE...
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "frontend/grpc/infer_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = data[0] == 0 ? size : data[0] + 1u;
  std::vector<grpc::Slice> slices;
  for (size_t at = 1; at < size; at += step)
    slices.emplace_back(data + at, std::min(step, size - at));
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  auto parsed = nereid::grpc_frontend::ParseInferRequest(buffer);
  if (!parsed.ok()) return 0;
  volatile uint8_t sink = 0;
  for (std::string_view raw : (*parsed)->raw)
    for (char c : raw) sink = sink ^ static_cast<uint8_t>(c);
  (void)sink;
  return 0;
}
