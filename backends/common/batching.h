// Batching, shared by the backends that run one batch of requests as one framework call: join
// each input's requests along the batch dimension (GatherInput), compute the outputs any request
// asked for once (OutputsToFetch), and split each result back by rows (ScatterOutput).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "common/config_json.h"
#include "nereid/backend_util.h"

namespace nereid::backend {

inline std::vector<int64_t> BatchPrefixed(const std::vector<int64_t>& request_shape, bool batching,
                                          const std::vector<int64_t>& dims) {
  std::vector<int64_t> shape;
  if (batching) shape.push_back(request_shape.empty() ? 1 : request_shape[0]);
  shape.insert(shape.end(), dims.begin(), dims.end());
  return shape;
}

// Resolves at most one -1 in 'shape' from 'bytes', then requires shape x element size == bytes.
// 'type' has a fixed element size.
inline Status FitShape(const std::string& name, DataType type, size_t bytes,
                       std::vector<int64_t>& shape) {
  const size_t element_size = DataTypeSize(type);
  if (bytes % element_size == 0)
    FillVariableDimension(shape, static_cast<int64_t>(bytes / element_size));
  const int64_t expected = TensorByteSize(type, shape);
  if (expected < 0 || static_cast<size_t>(expected) != bytes)
    return InvalidArgument("input '" + name + "' has " + std::to_string(bytes) +
                           " bytes, which do not make a tensor of shape " + ShapeString(shape) +
                           " of " + std::string(DataTypeName(type)));
  return Status::Ok();
}

// Byte offset of each row boundary of a serialized BYTES tensor with 'rows' rows.
inline std::vector<size_t> BytesRowOffsets(const uint8_t* data, size_t size, int64_t elements,
                                           int64_t rows) {
  std::vector<size_t> offsets(1, 0);
  const int64_t per_row = rows > 0 ? elements / rows : 0;
  int64_t e = 0;
  backend::ForEachBytesElement(data, size, [&](std::string_view, size_t end) {
    if (per_row > 0 && ++e % per_row == 0) offsets.push_back(end);
    return e < elements;
  });
  return offsets;
}

// One input of a batch of requests: every request's part, the batch's rows per request, and the
// shape of the joined tensor (batch dimension summed, the config's reshape applied), checked
// against the bytes it will hold.
struct BatchInput {
  NereidTensor first{};
  std::vector<NereidTensor> parts;
  std::vector<int64_t> shape;
  size_t total_bytes = 0;
};

// Gathers input 'index' of requests[0] (by name in the others) and fills 'rows' (per request).
inline StatusOr<BatchInput> GatherInput(const ModelIo& m, NereidRequest** requests, uint32_t count,
                                        uint32_t index, std::vector<int64_t>& rows) {
  const bool batching = m.max_batch_size > 0;
  BatchInput in;
  RETURN_IF_ERROR(FromError(NereidRequestInput(requests[0], index, &in.first)));
  const auto type = static_cast<DataType>(in.first.datatype);
  in.parts.resize(count);
  in.parts[0] = in.first;
  int64_t total_rows = 0;
  for (uint32_t r = 0; r < count; ++r) {
    if (r > 0)
      RETURN_IF_ERROR(
          FromError(NereidRequestInputByName(requests[r], in.first.name, &in.parts[r])));
    if (batching && in.parts[r].dims_count > 0) rows[r] = in.parts[r].shape[0];
    total_rows += rows[r];
    in.total_bytes += in.parts[r].byte_size;
  }
  in.shape.assign(in.first.shape, in.first.shape + in.first.dims_count);
  if (batching && !in.shape.empty()) in.shape[0] = total_rows;
  auto spec = m.inputs.find(in.first.name);
  if (spec != m.inputs.end() && spec->second.has_reshape)
    in.shape = BatchPrefixed(in.shape, batching, spec->second.reshape);
  // The server checked each request's bytes against its shape; the backend checks again that
  // what it is about to read (after any reshape) is exactly what it was given.
  if (type != DataType::kBytes)
    RETURN_IF_ERROR(FitShape(in.first.name, type, in.total_bytes, in.shape));
  return in;
}

// The outputs each request asked for ('wanted', per request) and their union, in first-asked order:
// what one execution of the batch computes.
inline std::vector<std::string> OutputsToFetch(NereidRequest** requests, uint32_t count,
                                               std::vector<std::vector<std::string>>& wanted) {
  wanted.assign(count, {});
  std::vector<std::string> fetch;
  for (uint32_t r = 0; r < count; ++r) {
    wanted[r] = RequestedOutputs(requests[r]);
    for (const std::string& name : wanted[r])
      if (std::find(fetch.begin(), fetch.end(), name) == fetch.end()) fetch.push_back(name);
  }
  return fetch;
}

// Splits one output of a batch run back into the requests: each request that asked for 'name'
// (and has not failed) gets its rows of 'data' in a response buffer, its shape the result's with
// its own row count, or the config's reshape. BYTES results are split at element boundaries. An
// allocation that fails lands in 'failed[r]'; a result without the batch's rows fails them all.
inline Status ScatterOutput(const ModelIo& m, NereidRequest** requests, uint32_t count,
                            const std::vector<int64_t>& rows,
                            const std::vector<std::vector<std::string>>& wanted,
                            const std::string& name, DataType type,
                            const std::vector<int64_t>& result_shape, const uint8_t* data,
                            size_t bytes, std::vector<Status>& failed) {
  const bool batching = m.max_batch_size > 0;
  int64_t total_rows = 0;
  for (int64_t r : rows) total_rows += r;
  if (batching && (result_shape.empty() || result_shape[0] != total_rows))
    return Internal("output '" + name + "' has shape " + ShapeString(result_shape) +
                    " but the batch has " + std::to_string(total_rows) + " rows");
  const int64_t divisor = std::max<int64_t>(batching ? total_rows : 1, 1);
  const int64_t elements = ElementCount(result_shape);
  std::vector<size_t> row_offsets;  // BYTES: byte offset of each row
  if (type == DataType::kBytes) row_offsets = BytesRowOffsets(data, bytes, elements, divisor);
  const size_t row_bytes = type == DataType::kBytes ? 0 : bytes / static_cast<size_t>(divisor);
  auto spec = m.outputs.find(name);
  const bool reshape = spec != m.outputs.end() && spec->second.has_reshape;
  int64_t row = 0;
  for (uint32_t r = 0; r < count; ++r) {
    const int64_t first_row = row;
    row += rows[r];
    if (std::find(wanted[r].begin(), wanted[r].end(), name) == wanted[r].end()) continue;
    if (!failed[r].ok()) continue;
    std::vector<int64_t> shape = result_shape;
    if (batching) shape[0] = rows[r];
    size_t begin = 0, end = bytes;
    if (batching && type == DataType::kBytes) {
      begin = row_offsets[std::min<size_t>(first_row, row_offsets.size() - 1)];
      end = row_offsets[std::min<size_t>(row, row_offsets.size() - 1)];
    } else if (batching) {
      begin = static_cast<size_t>(first_row) * row_bytes;
      end = static_cast<size_t>(row) * row_bytes;
    }
    if (reshape) {
      shape = BatchPrefixed({rows[r]}, batching, spec->second.dims);
      // if no dimension fits, the allocation below refuses
      FillVariableDimension(shape, elements / divisor * (batching ? rows[r] : 1));
    }
    auto buffer = AllocateOutput(requests[r], name, type, shape, end - begin);
    if (!buffer.ok()) {
      failed[r] = buffer.status();
      continue;
    }
    if (end > begin) std::memcpy(buffer->data, data + begin, end - begin);
  }
  return Status::Ok();
}

// One batch of requests through a backend's framework, the skeleton every batching backend
// shares: Gather checks that the model batches (when there is more than one request), gathers
// each input across the requests and hands it to 'feed'; fetch() is every output any request
// asked for, to compute once; Emit splits one result back into the requests that asked for it.
// A request's own failure (an output it cannot get) lands in failed(); a returned error fails the
// whole batch. Used with ExecuteRequests (nereid/backend_util.h) for the export.
class Batch {
 public:
  // 'feed(BatchInput&)' returns a Status; the batch's rows are known once it has returned.
  template <typename Feed>
  static StatusOr<Batch> Gather(const ModelIo& m, NereidRequest** requests, uint32_t count,
                                std::vector<Status>& failed, Feed&& feed) {
    if (count > 1 && m.max_batch_size <= 0)
      return Internal("a batch of requests for a model without batching");
    Batch b(m, requests, count, failed);
    const uint32_t inputs = NereidRequestInputCount(requests[0]);
    for (uint32_t i = 0; i < inputs; ++i) {
      ASSIGN_OR_RETURN(BatchInput in, GatherInput(m, requests, count, i, b.rows_));
      RETURN_IF_ERROR(feed(in));
    }
    b.fetch_ = OutputsToFetch(requests, count, b.wanted_);
    return b;
  }

  const std::vector<std::string>& fetch() const { return fetch_; }
  bool batching() const { return m_->max_batch_size > 0; }
  int64_t total_rows() const {
    int64_t total = 0;
    for (int64_t r : rows_) total += r;
    return total;
  }
  NereidRequest* request(uint32_t r) const { return requests_[r]; }
  uint32_t count() const { return count_; }
  std::vector<Status>& failed() { return *failed_; }

  // The framework's compute window (NereidNowNs), for the statistics of every request.
  void SetComputeTimes(uint64_t start_ns, uint64_t end_ns) const {
    for (uint32_t r = 0; r < count_; ++r)
      NereidRequestSetComputeTimes(requests_[r], start_ns, end_ns);
  }

  // Splits result 'name' (of the whole batch) back into the requests (ScatterOutput).
  Status Emit(const std::string& name, DataType type, const std::vector<int64_t>& shape,
              const uint8_t* data, size_t bytes) {
    return ScatterOutput(*m_, requests_, count_, rows_, wanted_, name, type, shape, data, bytes,
                         *failed_);
  }

 private:
  Batch(const ModelIo& m, NereidRequest** requests, uint32_t count, std::vector<Status>& failed)
      : m_(&m), requests_(requests), count_(count), failed_(&failed), rows_(count, 1) {}

  const ModelIo* m_;
  NereidRequest** requests_;
  uint32_t count_;
  std::vector<Status>* failed_;
  std::vector<int64_t> rows_;
  std::vector<std::vector<std::string>> wanted_;
  std::vector<std::string> fetch_;
};

}  // namespace nereid::backend
