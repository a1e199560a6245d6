#include "frontend/grpc/infer_wire.h"

#include <cstring>
#include <string>

#include "memory/buffer.h"
#include "memory/memory_pool.h"

namespace nereid::grpc_frontend {
namespace {

// ModelInferRequest.raw_input_contents, ModelInferResponse.raw_output_contents and
// ModelStreamInferResponse.infer_response: field numbers from grpc_service.proto.
constexpr uint32_t kRawInputContents = 7;
constexpr uint32_t kRawOutputContents = 6;
constexpr uint32_t kStreamInferResponse = 2;
constexpr uint32_t kLengthDelimited = 2;

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads the protobuf wire format across gRPC's slices.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<std::string_view>& slices) : slices_(slices) {
    for (const auto& slice : slices_) remaining_ += slice.size();
    Skip();
  }

  bool done() const { return remaining_ == 0; }

  bool Byte(uint8_t* b) {
    if (done()) return false;
    *b = static_cast<uint8_t>(slices_[index_][offset_]);
    Advance(1);
    return true;
  }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // 'n' bytes: a view into the current slice when they lie in it, else gathered into 'storage'
  // (pinned memory for 64 KiB and more when the pinned pool exists).
  bool Span(uint64_t n, std::string_view* view, Buffer* storage) {
    if (n > remaining_) return false;
    if (n == 0) return (*view = {}, true);
    const std::string_view& s = slices_[index_];
    if (n <= s.size() - offset_) {
      *view = s.substr(offset_, n);
      Advance(n);
      return true;
    }
    if (n >= (uint64_t{64} << 10) && PinnedPoolAvailable()) {
      if (StatusOr<Buffer> pinned = AllocatePinned(n); pinned.ok())
        *storage = std::move(pinned).value();
    }
    if (storage->data() == nullptr) {
      std::shared_ptr<uint8_t[]> heap = AllocateAligned(n);
      uint8_t* data = heap.get();
      *storage = Buffer(data, n, MemoryLocation{}, std::move(heap));
    }
    uint8_t* dst = storage->data();
    Consume(n, [&](const uint8_t* p, size_t k) {
      std::memcpy(dst, p, k);
      dst += k;
    });
    CountCopy(CopyKind::kInput, n);
    *view = std::string_view(reinterpret_cast<const char*>(storage->data()), n);
    return true;
  }

  // Appends 'n' bytes to 'out'.
  bool Append(uint64_t n, std::string& out) {
    if (n > remaining_) return false;
    Consume(n,
            [&](const uint8_t* p, size_t k) { out.append(reinterpret_cast<const char*>(p), k); });
    return true;
  }

 private:
  // Hands the next 'n' bytes (n <= remaining_) to fn, one contiguous piece per slice.
  template <typename Fn>
  void Consume(uint64_t n, Fn&& fn) {
    while (n > 0) {
      const std::string_view& cur = slices_[index_];
      const size_t take = std::min<uint64_t>(n, cur.size() - offset_);
      fn(reinterpret_cast<const uint8_t*>(cur.data()) + offset_, take);
      n -= take;
      Advance(take);
    }
  }
  void Advance(size_t n) {
    offset_ += n;
    remaining_ -= n;
    Skip();
  }
  void Skip() {  // past exhausted (and empty) slices
    while (index_ < slices_.size() && offset_ >= slices_[index_].size()) {
      offset_ = 0;
      ++index_;
    }
  }

  const std::vector<std::string_view>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
  uint64_t remaining_ = 0;  // bytes not read yet, across all slices
};

Status Malformed() {
  return InvalidArgument(
      "the message is not a valid inference.ModelInferRequest (malformed protobuf)");
}

}  // namespace

StatusOr<std::shared_ptr<ParsedInferRequest>> ParseInferRequest(const grpc::ByteBuffer& buffer) {
  auto parsed = std::make_shared<ParsedInferRequest>();
  parsed->buffer = buffer;  // one more reference to the same slices, not a copy of their bytes
  parsed->reader = std::make_unique<grpc::ProtoBufferReader>(&parsed->buffer);
  const void* data = nullptr;
  int size = 0;
  while (parsed->reader->Next(&data, &size))
    parsed->pieces.emplace_back(static_cast<const char*>(data), static_cast<size_t>(size));
  if (!parsed->reader->status().ok()) return Malformed();
  SliceReader reader(parsed->pieces);
  std::string rest;  // every field but raw_input_contents, re-encoded for protobuf
  while (!reader.done()) {
    uint64_t tag;
    if (!reader.Varint(&tag) || tag > UINT32_MAX || (tag >> 3) == 0) return Malformed();
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t wire = static_cast<uint32_t>(tag & 7);
    if (field == kRawInputContents && wire == kLengthDelimited) {
      uint64_t n;
      std::string_view view;
      Buffer storage;
      if (!reader.Varint(&n) || !reader.Span(n, &view, &storage)) return Malformed();
      parsed->raw.push_back(view);
      parsed->raw_location.push_back(storage.location());
      if (storage.owner()) parsed->gathered.push_back(storage.owner());
      continue;
    }
    PutVarint(rest, tag);
    uint64_t v;
    switch (wire) {
      case 0:
        if (!reader.Varint(&v)) return Malformed();
        PutVarint(rest, v);
        break;
      case 1:
        if (!reader.Append(8, rest)) return Malformed();
        break;
      case 2:
        if (!reader.Varint(&v)) return Malformed();
        PutVarint(rest, v);
        if (!reader.Append(v, rest)) return Malformed();
        break;
      case 5:
        if (!reader.Append(4, rest)) return Malformed();
        break;
      default:
        return Malformed();
    }
  }
  if (!parsed->message.ParseFromString(rest)) return Malformed();
  return parsed;
}

void SerializeInferResponse(const inference::ModelInferResponse& header,
                            const InferenceResponse& response, bool as_stream,
                            grpc::ByteBuffer* out) {
  std::string head = header.SerializeAsString();
  // Each output: its tag and length (small, in their own slice) and its bytes (by reference).
  std::vector<std::string> prefixes(response.outputs.size());
  uint64_t inner = head.size();
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    const auto& o = response.outputs[i];
    const uint64_t n = o.in_shared_memory ? 0 : o.byte_size();
    PutVarint(prefixes[i], (kRawOutputContents << 3) | kLengthDelimited);
    PutVarint(prefixes[i], n);
    inner += prefixes[i].size() + n;
  }
  if (as_stream) {
    std::string wrapper;
    PutVarint(wrapper, (kStreamInferResponse << 3) | kLengthDelimited);
    PutVarint(wrapper, inner);
    head.insert(0, wrapper);
  }
  std::vector<grpc::Slice> slices;
  slices.reserve(1 + 2 * response.outputs.size());
  slices.emplace_back(head);
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    const auto& o = response.outputs[i];
    slices.emplace_back(prefixes[i]);
    if (o.in_shared_memory || o.byte_size() == 0) continue;
    // The slice holds a reference to the output's owner until gRPC has sent it.
    auto* keep = new std::shared_ptr<const void>(o.buffer.owner());
    slices.emplace_back(
        o.buffer.data(), o.byte_size(),
        [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, keep);
  }
  *out = grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace nereid::grpc_frontend
