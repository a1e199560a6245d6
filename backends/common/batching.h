// Batching, shared by the backends that run one batch of requests as one framework call: join
// each input's requests along the batch dimension (GatherInput), compute the outputs any request
// asked for once (OutputsToFetch), and split each result back by rows (ScatterOutput).
#pragma once

#include <algorithm>
#include <cstring>
#include <list>
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
  if (batching && spec != m.inputs.end() && spec->second.ragged) {
    // Every request's elements end to end, whatever their shapes (Triton's ragged batching).
    int64_t elements = 0;
    for (const NereidTensor& part : in.parts)
      elements += ElementCount(std::vector<int64_t>(part.shape, part.shape + part.dims_count));
    in.shape = {elements};
  } else if (spec != m.inputs.end() && spec->second.has_reshape) {
    in.shape = BatchPrefixed(in.shape, batching, spec->second.reshape);
  }
  // The server checked each request's bytes against its shape; the backend checks again that
  // what it is about to read (after any reshape) is exactly what it was given.
  if (type != DataType::kBytes)
    RETURN_IF_ERROR(FitShape(in.first.name, type, in.total_bytes, in.shape));
  return in;
}

// The shape of input 'name' in each request.
inline StatusOr<std::vector<std::vector<int64_t>>> RequestShapes(NereidRequest** requests,
                                                                 uint32_t count,
                                                                 const std::string& name) {
  std::vector<std::vector<int64_t>> shapes(count);
  for (uint32_t r = 0; r < count; ++r) {
    NereidTensor t;
    RETURN_IF_ERROR(FromError(NereidRequestInputByName(requests[r], name.c_str(), &t)));
    shapes[r].assign(t.shape, t.shape + t.dims_count);
  }
  return shapes;
}

// The values and shape of batch input 't' for a batch of requests whose source input has
// 'shapes' (Triton's BatchInput kinds: element counts per request, plain or accumulated, with a
// leading zero; the largest count as the shape alone; each batch item's shape after the batch
// dimension, as rows or flattened).
inline StatusOr<std::pair<std::vector<double>, std::vector<int64_t>>> BatchTensorValues(
    const BatchTensor& t, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<double> v;
  std::vector<int64_t> shape;
  if (t.kind == "BATCH_ELEMENT_COUNT" || t.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT" ||
      t.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO") {
    const bool accumulate = t.kind != "BATCH_ELEMENT_COUNT";
    if (t.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO") v.push_back(0);
    double sum = 0;
    for (const auto& s : shapes) {
      const double n = static_cast<double>(ElementCount(s));
      sum += n;
      v.push_back(accumulate ? sum : n);
    }
    shape = {static_cast<int64_t>(v.size())};
  } else if (t.kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE") {
    int64_t most = 0;
    for (const auto& s : shapes) most = std::max(most, ElementCount(s));
    v.assign(static_cast<size_t>(most), 0);
    shape = {most};
  } else if (t.kind == "BATCH_ITEM_SHAPE" || t.kind == "BATCH_ITEM_SHAPE_FLATTEN") {
    int64_t items = 0, rank = 0;
    for (const auto& s : shapes) {
      if (s.empty())
        return InvalidArgument("batch input '" + t.targets[0] + "': source input '" + t.source +
                               "' has no batch dimension");
      rank = static_cast<int64_t>(s.size()) - 1;
      items += s[0];
      for (int64_t item = 0; item < s[0]; ++item)
        for (size_t d = 1; d < s.size(); ++d) v.push_back(static_cast<double>(s[d]));
    }
    if (static_cast<int64_t>(v.size()) != items * rank)
      return InvalidArgument("batch input '" + t.targets[0] + "': the requests' '" + t.source +
                             "' differ in rank");
    shape = t.kind == "BATCH_ITEM_SHAPE" ? std::vector<int64_t>{items, rank}
                                         : std::vector<int64_t>{items * rank};
  } else {
    return Unsupported("batch input kind '" + t.kind + "'");
  }
  return std::make_pair(std::move(v), std::move(shape));
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

// batch_output BATCH_SCATTER_WITH_INPUT_SHAPE: result [elements of every request's 'source',
// ...] split in request order, each request's part shaped as its 'source' (then the result's
// later dims).
inline Status ScatterByInputShape(NereidRequest** requests, uint32_t count,
                                  const std::vector<std::vector<std::string>>& wanted,
                                  const std::string& name, const std::string& source, DataType type,
                                  const std::vector<int64_t>& result_shape, const uint8_t* data,
                                  size_t bytes, std::vector<Status>& failed) {
  if (type == DataType::kBytes || result_shape.empty())
    return Unsupported("output '" + name +
                       "': scattering by input shape needs a fixed-size "
                       "type and a first dimension");
  ASSIGN_OR_RETURN(const auto shapes, RequestShapes(requests, count, source));
  const std::vector<int64_t> inner(result_shape.begin() + 1, result_shape.end());
  const size_t element_bytes = DataTypeSize(type) * static_cast<size_t>(ElementCount(inner));
  int64_t total = 0;
  for (const auto& s : shapes) total += ElementCount(s);
  if (total != result_shape[0] || static_cast<size_t>(total) * element_bytes != bytes)
    return Internal("output '" + name + "' has shape " + ShapeString(result_shape) + " but the " +
                    "batch's '" + source + "' holds " + std::to_string(total) + " elements");
  size_t at = 0;
  for (uint32_t r = 0; r < count; ++r) {
    const size_t part = static_cast<size_t>(ElementCount(shapes[r])) * element_bytes;
    const size_t begin = at;
    at += part;
    if (std::find(wanted[r].begin(), wanted[r].end(), name) == wanted[r].end() || !failed[r].ok())
      continue;
    std::vector<int64_t> shape = shapes[r];
    shape.insert(shape.end(), inner.begin(), inner.end());
    auto buffer = AllocateOutput(requests[r], name, type, shape, part);
    if (!buffer.ok()) {
      failed[r] = buffer.status();
      continue;
    }
    if (part > 0) std::memcpy(buffer->data, data + begin, part);
  }
  return Status::Ok();
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
  if (auto scatter = m.scatter_outputs.find(name); batching && scatter != m.scatter_outputs.end())
    return ScatterByInputShape(requests, count, wanted, name, scatter->second, type, result_shape,
                               data, bytes, failed);
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
    // The batch inputs: made here, held by the batch while the framework reads them.
    for (const BatchTensor& t : m.batch_inputs) {
      ASSIGN_OR_RETURN(const auto shapes, RequestShapes(requests, count, t.source));
      ASSIGN_OR_RETURN(auto values, BatchTensorValues(t, shapes));
      std::vector<uint8_t> bytes(values.first.size() * 4);
      for (size_t k = 0; k < values.first.size(); ++k) {
        const float f = static_cast<float>(values.first[k]);
        const auto n = static_cast<int32_t>(values.first[k]);
        std::memcpy(
            bytes.data() + k * 4,
            t.type == DataType::kFp32 ? static_cast<const void*>(&f) : static_cast<const void*>(&n),
            4);
      }
      b.made_.push_back(std::move(bytes));
      b.made_shapes_.push_back(std::move(values.second));
      for (const std::string& target : t.targets) {
        BatchInput in;
        in.first.name = target.c_str();
        in.first.datatype = static_cast<NereidDataType>(t.type);
        in.first.data = b.made_.back().data();
        in.first.byte_size = b.made_.back().size();
        in.first.memory_type = NEREID_MEMORY_CPU;
        in.first.shape = b.made_shapes_.back().data();
        in.first.dims_count = static_cast<uint32_t>(b.made_shapes_.back().size());
        in.parts = {in.first};
        in.shape = b.made_shapes_.back();
        in.total_bytes = in.first.byte_size;
        RETURN_IF_ERROR(feed(in));
      }
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
  // The batch inputs' bytes and shapes (a list: what the framework was handed stays put).
  std::list<std::vector<uint8_t>> made_;
  std::list<std::vector<int64_t>> made_shapes_;
};

}  // namespace nereid::backend
