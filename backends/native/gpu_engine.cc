// The GPU engine's runtime: per instance a stream, cuBLAS, device buffers for a compiled model's
// values (gpu_model.h), pinned staging, the GEMM tuner, and a CUDA graph per row count replaying
// the steps (EnqueueSteps: one kernel launch or copy per step).
#include "gpu_engine.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <thread>

#include "cpu/gemm_int8.h"
#include "cpu/parallel.h"
#include "cuda/conv.h"
#include "cuda/elementwise.h"
#include "cuda/epilogue.h"
#include "cuda/gemm.h"
#include "cuda/gemm_int8.h"
#include "cuda/tensor_ops.h"
#include "gemm_tuner.h"
#include "gpu_graphs.h"
#include "gpu_model.h"
#include "gpu_steps.h"
#include "nereid/backend_util.h"

namespace nereid::native {

// Buckets tuned when an instance starts; larger ones on first use.
constexpr int64_t kEagerTuneRows = 64;
constexpr int64_t kExactTuneMinRows = 1024, kExactTuneMaxRows = 8192;  // (TuneFor)

namespace {

// A request's indices into a table (an input a Gather reads): each in [-limit, limit), as ONNX's
// Gather wants, checked before anything runs. Indices in device memory are not read back.
template <typename I>
Status CheckIndexPart(const IoSpec& io, const GpuPart& part, size_t* at) {
  const auto* v = static_cast<const I*>(part.data);
  for (size_t i = 0; i < part.bytes / sizeof(I); ++i, ++*at)
    if (v[i] < -io.index_limit || v[i] >= io.index_limit)
      return InvalidArgument("input '" + io.name + "' has index " + std::to_string(v[i]) +
                             " at element " + std::to_string(*at) + ": indices must lie in [" +
                             std::to_string(-io.index_limit) + ", " +
                             std::to_string(io.index_limit - 1) + "]");
  return Status::Ok();
}

Status CheckIndices(const IoSpec& io, const GpuFeed& feed) {
  if (io.index_limit <= 0) return Status::Ok();
  size_t at = 0;
  for (const GpuPart& part : feed.parts) {
    if (part.device)
      return InvalidArgument("input '" + io.name +
                             "' indexes a table and must come in host memory (its indices are "
                             "checked before the model runs)");
    RETURN_IF_ERROR(io.type == DataType::kInt64 ? CheckIndexPart<int64_t>(io, part, &at)
                                                : CheckIndexPart<int32_t>(io, part, &at));
  }
  return Status::Ok();
}

// The rows a ragged plan runs for 'tokens' tokens (a CUDA graph each): multiples of 16 up to 512,
// then of a sixteenth of the power of two below, so at most 1/16 of the rows are padding.
int64_t RaggedBucket(int64_t tokens) {
  int64_t step = 16;
  while (step * 32 < tokens) step *= 2;
  return (tokens + step - 1) / step * step;
}

}  // namespace

class GpuInstance final : public GemmBench {
 public:
  explicit GpuInstance(std::shared_ptr<const GpuModel> model) : m_(std::move(model)) {}
  ~GpuInstance() override {
    cudaSetDevice(m_->device);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    graphs_.Clear();
    ReleaseBuffers();
    cublas_.reset();
    for (cudaEvent_t e : split_events_)
      if (e != nullptr) cudaEventDestroy(e);
    if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    CUDA_RETURN(cudaSetDevice(m_->device), "cudaSetDevice");
    CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    CUDA_RETURN(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking),
                "cudaStreamCreate");
    for (cudaEvent_t& e : split_events_)
      CUDA_RETURN(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    RETURN_IF_ERROR(phases_.Init());
    cublas_ = std::make_unique<kc::CublasGemm>();
    if (std::string e = cublas_->Init(stream_); !e.empty()) return Internal(e);
    std::vector<size_t> gemms;
    for (size_t i = 0; i < m_->steps.size(); ++i)
      if (m_->steps[i].kind == Step::kGemm) gemms.push_back(i);
    tuner_ = std::make_unique<GemmTuner>(m_->steps.size(), std::move(gemms));
    RETURN_IF_ERROR(Grow(kEagerTuneRows));  // once, rather than bucket by bucket
    for (int64_t rows = 1; rows <= kEagerTuneRows; rows = TuneBucket(rows + 1))
      RETURN_IF_ERROR(tuner_->Tune(*this, rows));
    if (m_->ragged()) RETURN_IF_ERROR(WarmRagged());
    return Status::Ok();
  }

  // The GEMMs' choices for 'rows' rows: tuned on first use of their bucket. A ragged plan's
  // buckets of 1,024-8,192 tokens (a graph each, all captured at load) are tuned again at their
  // exact count, among the bucket's three fastest of Nereid's kernels and cuBLAS: which tile fills
  // the SMs best turns on the count where a GEMM is a few waves of tiles, and a TuneBucket holds
  // counts up to 1.5x apart. (Above 8,192 rows the waves are many, and the load time grows.)
  Status TuneFor(int64_t rows) {
    const int64_t bucket = TuneBucket(rows);
    if (!tuner_->Tuned(bucket)) RETURN_IF_ERROR(tuner_->Tune(*this, bucket));
    if (m_->ragged() && rows >= kExactTuneMinRows && rows <= kExactTuneMaxRows && rows != bucket &&
        !tuner_->Tuned(rows))
      return tuner_->Tune(*this, rows, bucket);
    return Status::Ok();
  }

  // A ragged plan's token count changes from batch to batch, and each bucket of it has a graph of
  // its own: all of them, up to the most tokens a batch holds, are tuned and captured (and run
  // once, on zeros) here, so that no request waits for a capture and no buffer grows later.
  Status WarmRagged() {
    const int64_t most = RaggedBucket((m_->ragged_sequences - 1) * m_->ragged_max_length);
    RETURN_IF_ERROR(Grow(std::max(most, m_->ragged_sequences)));
    for (size_t i = 0; i < m_->inputs.size(); ++i)
      std::memset(staging_in_[i].data, 0, static_cast<size_t>(capacity_) * m_->inputs[i].row_bytes);
    std::vector<int64_t> sequences;
    for (int64_t rows = 16; rows <= most; rows = RaggedBucket(rows + 1)) {
      RETURN_IF_ERROR(TuneFor(rows));
      // Sequences of the longest length while a batch may hold them; the rest is padding.
      sequences.clear();
      for (int64_t left = rows;
           left > 0 && static_cast<int64_t>(sequences.size()) + 1 < m_->ragged_sequences;
           left -= sequences.back())
        sequences.push_back(std::min(left, m_->ragged_max_length));
      WriteSequences(rows, sequences);
      if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(rows, true, 0));
      RETURN_IF_ERROR(LaunchGraph(rows, 0));
      CUDA_RETURN(cudaStreamSynchronize(stream_), "GPU execution");
    }
    return Status::Ok();
  }

  std::string tuning() const { return tuner_->Describe(); }
  uint64_t device_ns() const { return device_ns_; }

  Status Run(int64_t rows, const std::vector<GpuFeed>& feeds,
             const std::vector<GpuDestination>& destinations, std::vector<GpuResult>* results,
             uint64_t* start_ns, uint64_t* end_ns, const std::vector<int64_t>* sequences) {
    if (rows < 1) return InvalidArgument("a GPU run needs at least one row");
    // A ragged plan runs its tokens padded to a bucket (the padding a sequence of its own).
    const int64_t run_rows = m_->ragged() ? RaggedBucket(rows) : rows;
    if (m_->ragged()) {
      if (sequences == nullptr || sequences->empty() ||
          static_cast<int64_t>(sequences->size()) >= m_->ragged_sequences)
        return InvalidArgument("a ragged plan runs 1 to " +
                               std::to_string(m_->ragged_sequences - 1) + " sequences at a time");
      int64_t total = 0;
      for (int64_t n : *sequences) {
        if (n < 1 || n > m_->ragged_max_length)
          return InvalidArgument(
              "a sequence of " + std::to_string(n) + " tokens: this model takes 1 to " +
              std::to_string(m_->ragged_max_length) + " (parameter nereid.max_sequence_length)");
        total += n;
      }
      if (total != rows) return InvalidArgument("the sequences' tokens are not the rows");
    } else if (sequences != nullptr) {
      return InvalidArgument("sequences given to a plan that is not ragged");
    }
    CUDA_RETURN(cudaSetDevice(m_->device), "cudaSetDevice");
    RETURN_IF_ERROR(Grow(std::max(run_rows, m_->ragged_sequences)));
    RETURN_IF_ERROR(TuneFor(run_rows));
    *start_ns = NereidNowNs();
    // Which copies go straight between request memory and the device (bit i: input i; bit
    // inputs + o: output o); the others pass through staging. A graph is captured per row count
    // and mask.
    constexpr size_t kDirectMin = 64 << 10, kDirectPartMin = 16 << 10;
    const size_t ni = m_->inputs.size();
    uint64_t direct = 0;
    direct_src_.assign(ni, {});
    copies_.clear();  // (a run refused part way leaves none behind)
    direct_dst_.assign(m_->outputs.size(), {});
    for (size_t i = 0; i < ni; ++i) {
      const IoSpec& io = m_->inputs[i];
      if (io.engine_made) continue;  // (written below)
      const GpuFeed* feed = nullptr;
      for (const auto& f : feeds)
        if (f.name == io.name) feed = &f;
      if (feed == nullptr) return InvalidArgument("input '" + io.name + "' is missing");
      const size_t want = static_cast<size_t>(rows) * io.row_bytes;
      size_t total = 0;
      bool on_device = false;
      for (const GpuPart& part : feed->parts) total += part.bytes, on_device |= part.device;
      if (total != want)
        return InvalidArgument("input '" + io.name + "' has the wrong size for " +
                               std::to_string(rows) + " rows");
      RETURN_IF_ERROR(CheckIndices(io, *feed));
      const bool large_pinned =
          feed->parts.size() == 1 && feed->parts[0].pinned && want >= kDirectMin;
      if ((on_device || large_pinned) && i < 32) {
        direct |= uint64_t{1} << i;
        direct_src_[i] = feed->parts;
        continue;
      }
      if (on_device) return Unsupported("more than 32 inputs in device memory");
      // Host -> staging: each request's part lands at its rows (this is also the batch gather).
      uint8_t* dst = static_cast<uint8_t*>(staging_in_[i].data);
      size_t at = 0;
      for (const GpuPart& part : feed->parts) {
        copies_.push_back({dst + at, static_cast<const uint8_t*>(part.data), part.bytes});
        at += part.bytes;
      }
      // A ragged plan's padding rows: zeros (token 0, masked out, a sequence of its own).
      std::memset(dst + at, 0, static_cast<size_t>(run_rows - rows) * io.row_bytes);
    }
    // A split run's parts tuned before anything is staged (tuning writes the arena), in buckets
    // the buffers already hold (growing them would move staging under copies_).
    const int64_t split_first = SplitFirst(run_rows);
    const bool split = Splits(run_rows, direct) && TuneBucket(split_first) <= capacity_ &&
                       TuneBucket(run_rows - split_first) <= capacity_;
    if (split) {
      RETURN_IF_ERROR(TuneFor(split_first));
      RETURN_IF_ERROR(TuneFor(run_rows - split_first));
    }
    StageCopies();
    if (m_->ragged()) WriteSequences(run_rows, *sequences);
    // Outputs copied straight into the caller's memory: device memory always; page-locked memory
    // where one part holds 64 KiB or more, or several hold 16 KiB each on average (a copy each
    // costs a few microseconds; through staging, the bytes cross the host's memory once more:
    // 1.3 ms for a ragged batch of 64 encoders' 14 MB). Only the real rows (a ragged plan's
    // tokens or sequences, not its bucket's padding).
    for (size_t o = 0; o < m_->outputs.size() && o < destinations.size(); ++o) {
      const GpuDestination& d = destinations[o];
      const size_t bytes = static_cast<size_t>(OutputRows(m_->outputs[o], rows, sequences)) *
                           m_->outputs[o].row_bytes;
      if (ni + o >= 64) continue;
      std::vector<GpuDestinationPart> parts;
      if (d.data != nullptr) {
        parts = {{d.data, bytes, d.device, !d.device}};
      } else {
        // Pinned parts that follow one another (slices of the server's block for a batch) are
        // one copy.
        for (const GpuDestinationPart& part : d.parts) {
          GpuDestinationPart* last = parts.empty() ? nullptr : &parts.back();
          if (last != nullptr && last->pinned && part.pinned &&
              static_cast<uint8_t*>(last->data) + last->bytes == part.data)
            last->bytes += part.bytes;
          else
            parts.push_back(part);
        }
      }
      if (parts.empty()) continue;
      size_t total = 0;
      bool device = false, locked = true;
      for (const GpuDestinationPart& part : parts) {
        total += part.bytes, device |= part.device;
        locked = locked && (part.device || part.pinned);
      }
      const bool large =
          locked && total >= parts.size() * (parts.size() == 1 ? kDirectMin : kDirectPartMin);
      if (total != bytes)
        return InvalidArgument("the destination of output '" + m_->outputs[o].name + "' holds " +
                               std::to_string(total) + " bytes, not its " + std::to_string(bytes));
      if (device || large) {
        direct |= uint64_t{1} << (ni + o);
        direct_dst_[o] = std::move(parts);
      }
    }
    const uint64_t gathered_ns = NereidNowNs();
    const bool measured = phases_.Begin();
    auto mark = [&](int i) { return phases_.Mark(i, stream_); };
    CUDA_RETURN(mark(0), "cudaEventRecord");
    if (split) {
      CUDA_RETURN(mark(1), "cudaEventRecord");
      if (Status parts = EnqueueSplit(run_rows, split_first, direct); !parts.ok()) {
        // Nothing of this run may still be copying once the caller frees the request's memory
        // or the next run starts: the copy stream is not ordered with the next run's work.
        cudaStreamSynchronize(copy_stream_);
        cudaStreamSynchronize(stream_);
        return parts;
      }
      CUDA_RETURN(mark(2), "cudaEventRecord");
    } else {
      RETURN_IF_ERROR(EnqueueDirect(run_rows, direct, true));
      if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(run_rows, true, direct));
      CUDA_RETURN(mark(1), "cudaEventRecord");
      RETURN_IF_ERROR(LaunchGraph(run_rows, direct));
      CUDA_RETURN(mark(2), "cudaEventRecord");
      if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(run_rows, false, direct));
      RETURN_IF_ERROR(EnqueueDirect(run_rows, direct, false));
    }
    CUDA_RETURN(mark(3), "cudaEventRecord");
    const uint64_t enqueued_ns = NereidNowNs();
    CUDA_RETURN(cudaStreamSynchronize(stream_), "GPU execution");
    *end_ns = NereidNowNs();
    if (measured)
      phases_.Note(run_rows, direct, copies_in_graph_,
                   {*start_ns, gathered_ns, enqueued_ns, *end_ns});
    device_ns_ = phases_.DeviceNs();
    results->clear();
    for (size_t i = 0; i < m_->outputs.size(); ++i) {
      const IoSpec& io = m_->outputs[i];
      GpuResult r;
      r.name = io.name;
      r.type = io.type;
      const int64_t out_rows = OutputRows(io, rows, sequences);
      r.shape = {out_rows};
      r.shape.insert(r.shape.end(), io.dims.begin(), io.dims.end());
      r.in_destination = !direct_dst_[i].empty();
      r.data = static_cast<const uint8_t*>(!r.in_destination            ? staging_out_[i].data
                                           : direct_dst_[i].size() == 1 ? direct_dst_[i][0].data
                                                                        : nullptr);
      r.bytes = static_cast<size_t>(out_rows) * io.row_bytes;
      results->push_back(std::move(r));
    }
    return Status::Ok();
  }

  std::vector<GpuOutputInfo> outputs() const {
    std::vector<GpuOutputInfo> out;
    for (const IoSpec& io : m_->outputs)
      out.push_back(
          {io.name, io.type, io.dims, io.row_bytes, io.sequences, m_->ragged() && !io.sequences});
    return out;
  }

  // ProfileGpuSteps.
  StatusOr<std::vector<GpuStepTime>> ProfileSteps(int64_t rows, int reps) {
    // (A ragged plan: the tokens' bucket, the last run's sequences still on the device.)
    if (m_->ragged()) rows = RaggedBucket(rows);
    if (rows < 1 || rows > capacity_)
      return InvalidArgument("the step profile needs a run of " + std::to_string(rows) +
                             " rows first");
    RETURN_IF_ERROR(TuneFor(rows));
    const size_t n = m_->steps.size();
    std::vector<cudaEvent_t> events(n + 1, nullptr);
    struct Release {
      std::vector<cudaEvent_t>& e;
      ~Release() {
        for (cudaEvent_t x : e)
          if (x != nullptr) cudaEventDestroy(x);
      }
    } release{events};
    for (cudaEvent_t& e : events) CUDA_RETURN(cudaEventCreate(&e), "cudaEventCreate");
    std::vector<GpuStepTime> out(n);
    for (size_t i = 0; i < n; ++i) {
      const Step& s = m_->steps[i];
      out[i].kind = StepKindName(s.kind);
      out[i].us = -1;
      if (s.kind == Step::kGemm) {
        const int64_t m = StepRows(s, rows);
        const GemmChoice* choice = tuner_->Choice(i, m);
        out[i].detail = std::to_string(m * s.outer) + "x" + std::to_string(s.n) + "x" +
                        std::to_string(s.k) + " " + (choice ? choice->Name() : "cuBLAS");
      }
    }
    const StepBuffers buffers = Buffers();
    for (int rep = 0; rep < std::max(reps, 1); ++rep) {
      CUDA_RETURN(cudaEventRecord(events[0], stream_), "cudaEventRecord");
      for (size_t i = 0; i < n; ++i) {
        RETURN_IF_ERROR(EnqueueStep(i, rows, buffers));
        CUDA_RETURN(cudaEventRecord(events[i + 1], stream_), "cudaEventRecord");
      }
      CUDA_RETURN(cudaEventSynchronize(events[n]), "GPU execution");
      for (size_t i = 0; i < n; ++i) {
        float ms = 0;
        CUDA_RETURN(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "cudaEventElapsedTime");
        if (out[i].us < 0 || ms * 1e3 < out[i].us) out[i].us = ms * 1e3;
      }
    }
    return out;
  }

 private:
  // The copies into pinned staging of one run, made by StageCopies.
  struct HostCopy {
    uint8_t* dst;
    const uint8_t* src;
    size_t bytes;
  };

  // Runs copies_ (and clears it): one thread below kParallelCopyMin bytes; above, pieces of
  // kCopyPiece bytes over a team of copy threads, as one thread copies pageable memory at ~5 GB/s
  // (a batch of 64 images of 3x224x224 FP32, 38 MB: 7.7 ms on one thread).
  void StageCopies() {
    constexpr size_t kParallelCopyMin = 4 << 20, kCopyPiece = 1 << 20;
    size_t total = 0;
    for (const HostCopy& c : copies_) total += c.bytes;
    if (total < kParallelCopyMin) {
      for (const HostCopy& c : copies_) std::memcpy(c.dst, c.src, c.bytes);
      copies_.clear();
      return;
    }
    if (copy_team_ == nullptr) {
      const int threads =
          std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 2, 8);
      copy_team_ = std::make_unique<kernels::ThreadTeam>(threads);
    }
    std::vector<HostCopy> pieces;
    for (const HostCopy& c : copies_)
      for (size_t at = 0; at < c.bytes; at += kCopyPiece)
        pieces.push_back({c.dst + at, c.src + at, std::min(kCopyPiece, c.bytes - at)});
    copy_team_->Run(static_cast<int64_t>(pieces.size()),
                    [&](int64_t k) { std::memcpy(pieces[k].dst, pieces[k].src, pieces[k].bytes); });
    copies_.clear();
  }

  std::vector<HostCopy> copies_;
  std::unique_ptr<kernels::ThreadTeam> copy_team_;  // made on the first large copy
  // A value's device buffer; while the second part of a split run is enqueued, a direct input's
  // is its prefetch buffer (EnqueueSplit).
  void* Buf(int id) const {
    const int owner = m_->Resolve(id);
    return static_cast<size_t>(owner) < shifted_.size() && shifted_[owner] != nullptr
               ? shifted_[owner]
               : buffers_[owner];
  }

  Status Allocate(NereidMemoryType type, size_t bytes, NereidBuffer* out) {
    RETURN_IF_ERROR(backend::FromError(
        NereidMemoryAllocate(type, m_->device, std::max<size_t>(bytes, 1), out)));
    return Status::Ok();
  }

  void ReleaseBuffers() {
    for (auto* list : {&staging_in_, &staging_out_})
      for (auto& b : *list)
        if (b.data != nullptr) NereidMemoryRelease(b.data);
    for (auto* b : {&arena_, &acc_, &quantized_, &row_scale_, &absmax_, &conv_workspace_})
      if (b->data != nullptr) NereidMemoryRelease(b->data);
    for (auto& b : prefetch_)
      if (b.data != nullptr) NereidMemoryRelease(b.data);
    prefetch_.clear();
    buffers_.clear(), staging_in_.clear(), staging_out_.clear();
    arena_ = acc_ = quantized_ = row_scale_ = absmax_ = conv_workspace_ = NereidBuffer{};
  }

  // Sizes every buffer for at least 'rows' rows (doubling), dropping graphs captured for the old
  // buffers.
  Status Grow(int64_t rows) {
    if (rows <= capacity_) return Status::Ok();
    const int64_t capacity = std::max(rows, capacity_ * 2);
    cudaStreamSynchronize(stream_);
    graphs_.Clear();
    ReleaseBuffers();
    capacity_ = 0;
    // The activations: one arena, each value at its planned offset (gpu_model.h).
    RETURN_IF_ERROR(
        Allocate(NEREID_MEMORY_GPU, static_cast<size_t>(capacity * m_->arena_row_bytes), &arena_));
    buffers_.assign(m_->values.size(), nullptr);
    for (size_t id = 0; id < m_->values.size(); ++id)
      if (m_->arena_offset[id] >= 0)
        buffers_[id] = static_cast<uint8_t*>(arena_.data) + capacity * m_->arena_offset[id];
    // cuBLAS's accumulators (rows x n), or the partial sums of a K-split GemmSm90 (up to 4 splits
    // up to 512 rows, 8 up to 64: beyond that the tiles alone fill the GPU).
    int64_t acc = 1;
    for (const Step& s : m_->steps)
      if (s.kind == Step::kGemm) {
        const int64_t m = capacity * s.outer;  // a GEMM's rows at the capacity
        acc = std::max({acc, s.n * m, 4 * s.n * std::min<int64_t>(m, 512),
                        8 * s.n * std::min<int64_t>(m, 64)});
      }
    RETURN_IF_ERROR(Allocate(NEREID_MEMORY_GPU, static_cast<size_t>(acc) * 4, &acc_));
    acc_floats_ = acc;
    if (m_->int8_gemms > 0 || m_->int8_convs > 0) {  // int8 activations, quantized per row
      const int64_t vectors = capacity * m_->int8_max_vectors;
      RETURN_IF_ERROR(Allocate(NEREID_MEMORY_GPU, static_cast<size_t>(capacity * m_->int8_max_in),
                               &quantized_));
      RETURN_IF_ERROR(Allocate(NEREID_MEMORY_GPU, static_cast<size_t>(vectors) * 4, &row_scale_));
      if (m_->int8_convs > 0)
        RETURN_IF_ERROR(Allocate(NEREID_MEMORY_GPU, static_cast<size_t>(capacity) * 4, &absmax_));
    }
    // The partial sums of convolutions split over blocks (only the tensor-core kernel, bf16/fp16,
    // splits; without the workspace it runs unsplit).
    if (m_->convs > 0 && m_->float_type != kc::ElemType::kF32)
      RETURN_IF_ERROR(
          Allocate(NEREID_MEMORY_GPU, kc::kConvWorkspaceFloats * sizeof(float), &conv_workspace_));
    bool pinned = true;
    for (int dir = 0; dir < 2; ++dir) {
      const auto& ios = dir == 0 ? m_->inputs : m_->outputs;
      auto& staging = dir == 0 ? staging_in_ : staging_out_;
      staging.assign(ios.size(), NereidBuffer{});
      for (size_t i = 0; i < ios.size(); ++i) {
        RETURN_IF_ERROR(
            Allocate(NEREID_MEMORY_CPU_PINNED, capacity * ios[i].row_bytes, &staging[i]));
        pinned = pinned && staging[i].memory_type == NEREID_MEMORY_CPU_PINNED;
      }
    }
    // Copies from page-locked staging are captured in the graph; from pageable memory they run as
    // separate (driver-staged) copies around it.
    copies_in_graph_ = pinned;
    // Where the device sees page-locked staging (the same address under unified addressing): small
    // copies then run as a kernel reading or writing it (kc::CopyBytes) instead of a copy node.
    for (int dir = 0; dir < 2; ++dir) {
      const auto& staging = dir == 0 ? staging_in_ : staging_out_;
      auto& mapped = dir == 0 ? mapped_in_ : mapped_out_;
      mapped.assign(staging.size(), nullptr);
      for (size_t i = 0; i < staging.size() && pinned; ++i)
        if (cudaHostGetDevicePointer(&mapped[i], staging[i].data, 0) != cudaSuccess) {
          cudaGetLastError();  // not mapped: copy nodes serve
          mapped[i] = nullptr;
        }
    }
    capacity_ = capacity;
    return Status::Ok();
  }

  // The copies between request memory (host or device) and the device buffers chosen for this
  // run, outside any graph: inputs part by part at their rows, outputs whole.
  Status EnqueueDirect(int64_t rows, uint64_t direct, bool to_device) {
    const size_t ni = m_->inputs.size();
    const auto& ios = to_device ? m_->inputs : m_->outputs;
    for (size_t i = 0; i < ios.size(); ++i) {
      if (!(direct >> (to_device ? i : ni + i) & 1)) continue;
      if (!to_device) {
        RETURN_IF_ERROR(CopyOut(i, 0, SIZE_MAX));
        continue;
      }
      uint8_t* device = static_cast<uint8_t*>(Buf(ios[i].value));
      size_t at = 0;
      for (const GpuPart& part : direct_src_[i]) {
        CUDA_RETURN(cudaMemcpyAsync(device + at, part.data, part.bytes, cudaMemcpyDefault, stream_),
                    "copy to the GPU");
        at += part.bytes;
      }
    }
    return Status::Ok();
  }

  // The staging copies (those not direct in this run): 'rows' rows between the device's first
  // rows and staging's from row 'host_row' on (a split run's second part: its own rows).
  Status EnqueueCopies(int64_t rows, bool to_device, uint64_t direct, int64_t host_row = 0) {
    const size_t ni = m_->inputs.size();
    const auto& ios = to_device ? m_->inputs : m_->outputs;
    for (size_t i = 0; i < ios.size(); ++i) {
      if (direct >> (to_device ? i : ni + i) & 1) continue;
      const size_t bytes = static_cast<size_t>(RowsOf(ios[i], rows)) * ios[i].row_bytes;
      const size_t skip = static_cast<size_t>(host_row) * ios[i].row_bytes;
      void* host = static_cast<uint8_t*>((to_device ? staging_in_ : staging_out_)[i].data) + skip;
      void* device = Buf(ios[i].value);
      void* mapped = (to_device ? mapped_in_ : mapped_out_)[i];
      if (mapped != nullptr) mapped = static_cast<uint8_t*>(mapped) + skip;
      constexpr size_t kKernelCopyMax = 64 << 10;  // beyond this the copy engine is faster
      if (mapped != nullptr && bytes <= kKernelCopyMax) {
        CUDA_RETURN(to_device ? kc::CopyBytes(device, mapped, bytes, stream_)
                              : kc::CopyBytes(mapped, device, bytes, stream_),
                    to_device ? "copy to the GPU" : "copy from the GPU");
        continue;
      }
      CUDA_RETURN(to_device ? cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_)
                            : cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
                  to_device ? "copy to the GPU" : "copy from the GPU");
    }
    return Status::Ok();
  }

  // The real rows of an output of a run of 'rows' (a ragged plan's tokens, not its bucket's, or
  // its sequences).
  static int64_t OutputRows(const IoSpec& io, int64_t rows, const std::vector<int64_t>* sequences) {
    return io.sequences && sequences != nullptr ? static_cast<int64_t>(sequences->size()) : rows;
  }

  // The rows of an input, output or step when the graph runs 'rows': a ragged plan's values per
  // sequence have a row per sequence (its capacity of them).
  int64_t RowsOf(const IoSpec& io, int64_t rows) const {
    return io.sequences ? m_->ragged_sequences : rows;
  }

  // A ragged plan's own inputs for 'sequences' packed end to end, padded to 'run_rows': each
  // token's position in its sequence and its sequence (the padding's -1: attention skips it),
  // each sequence's end (the padding pooled as one more sequence, those after it empty).
  void WriteSequences(int64_t run_rows, const std::vector<int64_t>& sequences) {
    for (size_t i = 0; i < m_->inputs.size(); ++i) {
      const IoSpec& io = m_->inputs[i];
      if (!io.engine_made) continue;
      auto* out = static_cast<int32_t*>(staging_in_[i].data);
      if (io.value == m_->sequence_ends) {
        int64_t end = 0;
        for (int64_t s = 0; s < m_->ragged_sequences; ++s) {
          end = static_cast<size_t>(s) < sequences.size() ? end + sequences[s] : run_rows;
          out[s] = static_cast<int32_t>(end);
        }
        continue;
      }
      const bool positions = io.value == m_->positions;
      int64_t t = 0;
      for (size_t s = 0; s < sequences.size(); ++s)
        for (int64_t p = 0; p < sequences[s]; ++p, ++t)
          out[t] = static_cast<int32_t>(positions ? p : static_cast<int64_t>(s));
      for (; t < run_rows; ++t) out[t] = positions ? 0 : -1;
    }
  }

  StepBuffers Buffers() const {
    return {[this](int id) { return Buf(id); }, quantized_.data,
            static_cast<float*>(row_scale_.data), static_cast<unsigned*>(absmax_.data),
            static_cast<float*>(conv_workspace_.data)};
  }

  // The rows step 's' runs when the graph runs 'rows' (after a ragged plan's pooling: its
  // sequences).
  int64_t StepRows(const Step& s, int64_t rows) const {
    return s.sequences ? m_->ragged_sequences : rows;
  }

  Status EnqueueStep(size_t i, int64_t rows, const StepBuffers& buffers) {
    const Step& s = m_->steps[i];
    const int64_t n = StepRows(s, rows);
    if (s.kind == Step::kGemm) return RunGemm(s, n, tuner_->Choice(i, n));
    return LaunchStep(*m_, s, n, buffers, stream_);
  }

  Status EnqueueSteps(int64_t rows) {
    const StepBuffers buffers = Buffers();
    for (size_t i = 0; i < m_->steps.size(); ++i) {
      if (m_->steps[i].norm_follows) {
        ASSIGN_OR_RETURN(const bool fused, RunGemmAndNorm(i, StepRows(m_->steps[i], rows)));
        if (fused) {
          ++i;  // the norm ran too
          continue;
        }
      }
      RETURN_IF_ERROR(EnqueueStep(i, rows, buffers));
    }
    return Status::Ok();
  }

  // GEMM step 'i' (Step::norm_follows) and the LayerNorm after it as two kernels, where cuBLAS
  // runs the GEMM: its accumulators left in acc_, and the norm taking the epilogue's sum from
  // them. False (nothing run) where one of Nereid's kernels runs it, epilogue fused.
  StatusOr<bool> RunGemmAndNorm(size_t i, int64_t rows) {
    const Step& s = m_->steps[i];
    const Step& ln = m_->steps[i + 1];
    const GemmChoice* choice = tuner_->Choice(i, rows);
    if (choice != nullptr && choice->impl != GemmChoice::Impl::kCublas) return false;
    kc::GemmProblem p = Problem(s, rows);
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    if (!aligned(acc_.data) || !aligned(p.residual) || !aligned(Buf(ln.out))) return false;
    const float* sum_bias = p.bias;
    const void* residual = p.residual;
    p.bias = nullptr, p.residual = nullptr;
    p.out_type = kc::ElemType::kF32, p.y = acc_.data;  // cuBLAS writes it straight
    if (std::string e = cublas_->Run(p, nullptr); !e.empty()) return Internal(e);
    CUDA_RETURN(kc::LayerNormOfSum(m_->values[ln.out].type, static_cast<const float*>(acc_.data),
                                   sum_bias, residual, Buf(ln.out), p.m, p.n,
                                   static_cast<const float*>(ln.w), ln.bias, ln.epsilon, stream_),
                "layer norm kernel");
    return true;
  }

  kc::GemmProblem Problem(const Step& s, int64_t rows) const {
    kc::GemmProblem p;
    p.m = rows * s.outer, p.n = s.n, p.k = s.k;
    p.ab_type = m_->float_type;
    p.x = Buf(s.in), p.w = s.w, p.y = Buf(s.out);
    p.out_type = m_->values[s.out].type;
    p.alpha = s.alpha, p.bias = s.bias, p.act = s.act;
    p.residual = s.residual >= 0 ? Buf(s.residual) : nullptr;
    p.residual_first = s.residual_first;
    p.tf32 = m_->precision == Precision::kTf32;
    p.workspace = static_cast<float*>(acc_.data), p.workspace_floats = acc_floats_;
    if (s.w_scale != nullptr) {
      p.ab_type = kc::ElemType::kI8;
      p.x = quantized_.data, p.x_scale = static_cast<const float*>(row_scale_.data);
      p.w_scale = s.w_scale;
    }
    return p;
  }

  // One GEMM on the implementation 'choice' names (cuBLAS with the epilogue kernel when null).
  Status RunGemm(const Step& s, int64_t rows, const GemmChoice* choice) {
    const kc::GemmProblem p = Problem(s, rows);
    if (p.ab_type == kc::ElemType::kI8) {
      CUDA_RETURN(kc::QuantizeRowsInt8(m_->values[s.in].type, Buf(s.in), rows * s.outer, s.k,
                                       static_cast<int8_t*>(quantized_.data),
                                       static_cast<float*>(row_scale_.data), stream_),
                  "int8 quantization");
      if (choice != nullptr && choice->impl == GemmChoice::Impl::kSm90)
        return CudaError(kc::GemmSm90(p, stream_, choice->sm90), "int8 GEMM kernel");
      if (choice != nullptr && choice->impl == GemmChoice::Impl::kConv)
        return CudaError(kc::GemmAsConv(p, stream_), "int8 GEMM kernel");
      if (choice != nullptr && choice->impl == GemmChoice::Impl::kSmallM)
        return CudaError(kc::GemmSmallM(p, stream_, choice->variant), "int8 GEMM kernel");
      if (choice == nullptr && !kc::SmallMInt8Supported(p))
        return CudaError(kc::GemmSm90(p, stream_), "int8 GEMM kernel");
      return CudaError(kc::GemmSmallMInt8(p, stream_), "int8 GEMM kernel");
    }
    if (choice != nullptr && choice->impl == GemmChoice::Impl::kSmallM)
      return CudaError(kc::GemmSmallM(p, stream_, choice->variant), "GEMM kernel");
    if (choice != nullptr && choice->impl == GemmChoice::Impl::kSm90)
      return CudaError(kc::GemmSm90(p, stream_, choice->sm90), "GEMM kernel");
    if (choice != nullptr && choice->impl == GemmChoice::Impl::kConv)
      return CudaError(kc::GemmAsConv(p, stream_), "GEMM kernel");
    if (std::string e = cublas_->Run(p, static_cast<float*>(acc_.data)); !e.empty())
      return Internal(e);
    return Status::Ok();
  }

  // ---- GemmBench: what the tuner runs and times ----

  Status PrepareTuning(int64_t rows) override {
    RETURN_IF_ERROR(Grow(rows));
    // A small non-zero pattern (about 0.0115 as fp32, bf16 or fp16): never time on zeros.
    CUDA_RETURN(cudaMemsetAsync(arena_.data, 0x3C,
                                static_cast<size_t>(capacity_ * m_->arena_row_bytes), stream_),
                "cudaMemset");
    return Status::Ok();
  }

  kc::GemmProblem Problem(size_t step, int64_t rows) const override {
    return Problem(m_->steps[step], rows);
  }

  // Each candidate is timed as it runs when serving, inside a CUDA graph: 20 launches captured
  // once, the graph uploaded, then replayed 3 times (CUDA events, the fastest replay counts).
  // Timed eagerly instead, cuBLAS's host cost per call (its heuristics) would count against it
  // although a graph replay never pays it.
  StatusOr<float> Time(size_t step, int64_t rows, const GemmChoice& choice) override {
    const Step& s = m_->steps[step];
    for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(RunGemm(s, rows, &choice));
    ASSIGN_OR_RETURN(cudaGraphExec_t exec, CaptureGraph(stream_, [&] {
                       for (int i = 0; i < 20; ++i) RETURN_IF_ERROR(RunGemm(s, rows, &choice));
                       return Status::Ok();
                     }));
    cudaEvent_t start = nullptr, stop = nullptr;
    cudaError_t e = cudaEventCreate(&start);
    if (e == cudaSuccess) e = cudaEventCreate(&stop);
    if (e == cudaSuccess) e = cudaGraphUpload(exec, stream_);  // no timed replay pays the upload
    float best_ms = -1;
    for (int replay = 0; replay < 3 && e == cudaSuccess; ++replay) {
      float ms = 0;
      if ((e = cudaEventRecord(start, stream_)) != cudaSuccess ||
          (e = cudaGraphLaunch(exec, stream_)) != cudaSuccess ||
          (e = cudaEventRecord(stop, stream_)) != cudaSuccess ||
          (e = cudaEventSynchronize(stop)) != cudaSuccess ||
          (e = cudaEventElapsedTime(&ms, start, stop)) != cudaSuccess)
        break;
      if (best_ms < 0 || ms < best_ms) best_ms = ms;
    }
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(exec);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    CUDA_RETURN(e, "GEMM tuning");
    return best_ms;
  }

  // Replays the graph captured for 'rows' and this run's direct copies (capturing it on first
  // use).
  // (part: 0 a whole run or a split run's first part; 2 its second part, whose staging rows start
  // at 'host_row' and whose direct inputs are read from their prefetch buffers.)
  Status LaunchGraph(int64_t rows, uint64_t direct, int part = 0, int64_t host_row = 0) {
    return graphs_.Launch({rows, direct, part}, stream_, [&] {
      if (copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(rows, true, direct, host_row));
      RETURN_IF_ERROR(EnqueueSteps(rows));
      if (copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(rows, false, direct, host_row));
      return Status::Ok();
    });
  }

  // A large batch handed over in page-locked memory (a client's batch, in the server's pinned pool
  // or shared memory) crosses PCIe at ~50 GB/s: ResNet-50's 256 images (154 MB) take ~3 ms, a
  // fifth of the run. Such a run goes in two parts: the first part's rows (a quarter, SplitFirst)
  // cross, then the network runs them while the rest cross on a copy stream into a buffer of
  // their own; the second part then runs from there. Only for models whose rows are independent
  // (batching, not ragged, not a fixed first dimension), every direct input one host part, at least
  // kSplitMinRows rows and 32 MiB of direct input. In the server's environment
  // NEREID_GPU_SPLIT_RUNS=0 turns it off (for comparisons), NEREID_GPU_SPLIT_MIN_BYTES=N sets the
  // input size (tests/e2e/test_gpu_vision.py: small images).
  static constexpr int64_t kSplitMinRows = 64;
  static constexpr int64_t kSplitFirstPercent = 25;

  bool Splits(int64_t rows, uint64_t direct) const {
    static const bool enabled = [] {
      const char* v = std::getenv("NEREID_GPU_SPLIT_RUNS");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    static const size_t min_bytes = [] {
      const char* v = std::getenv("NEREID_GPU_SPLIT_MIN_BYTES");
      char* end = nullptr;
      const unsigned long long n = v != nullptr ? std::strtoull(v, &end, 10) : 0;
      return v != nullptr && end != v && *end == '\0' && n > 0 ? static_cast<size_t>(n)
                                                               : size_t{32} << 20;
    }();
    if (!enabled || m_->ragged() || m_->fixed_rows > 0 || rows < kSplitMinRows) return false;
    size_t bytes = 0;
    for (size_t i = 0; i < m_->inputs.size(); ++i) {
      if (!(direct >> i & 1)) continue;
      if (direct_src_[i].size() != 1 || direct_src_[i][0].device) return false;
      bytes += direct_src_[i][0].bytes;
    }
    return bytes >= min_bytes;
  }

  // Bytes [lo, hi) of direct output o (hi past its end: to its end): from the device's first
  // bytes to their place in the destination's parts (a split run's parts: their own rows).
  Status CopyOut(size_t o, size_t lo, size_t hi) {
    const auto* device = static_cast<const uint8_t*>(Buf(m_->outputs[o].value));
    size_t at = 0;  // the part's first byte in the output
    for (const GpuDestinationPart& part : direct_dst_[o]) {
      const size_t begin = std::max(at, lo), end = std::min(at + part.bytes, hi);
      if (begin < end)
        CUDA_RETURN(cudaMemcpyAsync(static_cast<uint8_t*>(part.data) + (begin - at),
                                    device + (begin - lo), end - begin, cudaMemcpyDefault, stream_),
                    "copy from the GPU");
      at += part.bytes;
    }
    return Status::Ok();
  }

  // The first part's rows of a split run of 'rows': only its copy stays exposed, so it is the
  // smaller part, large enough that its run outlasts the rest's copy (ResNet-50 at batch 256
  // computes a row in ~50 us and copies one in ~12). A multiple of 8 rows, at least 8, at most
  // half. NEREID_GPU_SPLIT_FIRST=P (percent of the rows, 1-50) sets it for comparisons.
  static int64_t SplitFirst(int64_t rows) {
    static const int64_t percent = [] {
      const char* v = std::getenv("NEREID_GPU_SPLIT_FIRST");
      char* end = nullptr;
      const long n = v != nullptr ? std::strtol(v, &end, 10) : 0;
      return v != nullptr && end != v && *end == '\0' && n >= 1 && n <= 50 ? n : kSplitFirstPercent;
    }();
    const int64_t first = (rows * percent + 799) / 800 * 8;
    return std::clamp<int64_t>(first, 8, rows / 2);
  }

  Status EnqueueSplit(int64_t rows, int64_t first, uint64_t direct) {
    const int64_t second = rows - first;  // (both tuned: Run)
    const size_t ni = m_->inputs.size();
    if (!split_logged_) {
      split_logged_ = true;
      const std::string line = "GPU run of " + std::to_string(rows) + " rows split in " +
                               std::to_string(first) + " + " + std::to_string(second) +
                               ": the second part's input crosses to the device while the " +
                               "first part runs";
      NereidLog(NEREID_LOG_INFO, __FILE__, __LINE__, line.c_str());
    }
    if (prefetch_.empty()) {  // (freed with the other buffers when they grow)
      // The largest second part of a run that fits the buffers.
      int64_t most = 0;
      for (int64_t r = kSplitMinRows; r <= capacity_; ++r) most = std::max(most, r - SplitFirst(r));
      prefetch_rows_ = most;
      prefetch_.assign(ni, NereidBuffer{});
      for (size_t i = 0; i < ni; ++i)
        RETURN_IF_ERROR(Allocate(
            NEREID_MEMORY_GPU, static_cast<size_t>(most) * m_->inputs[i].row_bytes, &prefetch_[i]));
    }
    if (second > prefetch_rows_)
      return Internal("a split run's second part outgrows its prefetch buffers");
    // The copy stream starts once the stream's earlier work (the last run's reads) is done.
    CUDA_RETURN(cudaEventRecord(split_events_[0], stream_), "cudaEventRecord");
    CUDA_RETURN(cudaStreamWaitEvent(copy_stream_, split_events_[0]), "cudaStreamWaitEvent");
    for (int part = 0; part < 2; ++part) {
      for (size_t i = 0; i < ni; ++i) {
        if (!(direct >> i & 1)) continue;
        const size_t rb = m_->inputs[i].row_bytes;
        const auto* src = static_cast<const uint8_t*>(direct_src_[i][0].data);
        CUDA_RETURN(part == 0 ? cudaMemcpyAsync(Buf(m_->inputs[i].value), src, first * rb,
                                                cudaMemcpyHostToDevice, copy_stream_)
                              : cudaMemcpyAsync(prefetch_[i].data, src + first * rb, second * rb,
                                                cudaMemcpyHostToDevice, copy_stream_),
                    "copy to the GPU");
      }
      CUDA_RETURN(cudaEventRecord(split_events_[1 + part], copy_stream_), "cudaEventRecord");
    }
    CUDA_RETURN(cudaStreamWaitEvent(stream_, split_events_[1]), "cudaStreamWaitEvent");
    if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(first, true, direct));
    RETURN_IF_ERROR(LaunchGraph(first, direct));  // (the graph of a whole run of 'first' rows)
    if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(first, false, direct));
    for (size_t o = 0; o < m_->outputs.size(); ++o)
      if (direct >> (ni + o) & 1) RETURN_IF_ERROR(CopyOut(o, 0, first * m_->outputs[o].row_bytes));
    // The second part: its direct inputs read from the prefetch buffers (also by its copies out,
    // where an output is an input).
    CUDA_RETURN(cudaStreamWaitEvent(stream_, split_events_[2]), "cudaStreamWaitEvent");
    shifted_.assign(m_->values.size(), nullptr);
    for (size_t i = 0; i < ni; ++i)
      if (direct >> i & 1) shifted_[m_->Resolve(m_->inputs[i].value)] = prefetch_[i].data;
    Status second_part = [&]() -> Status {
      if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(second, true, direct, first));
      RETURN_IF_ERROR(LaunchGraph(second, direct, 2, first));
      if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(second, false, direct, first));
      for (size_t o = 0; o < m_->outputs.size(); ++o)
        if (direct >> (ni + o) & 1)
          RETURN_IF_ERROR(
              CopyOut(o, first * m_->outputs[o].row_bytes, rows * m_->outputs[o].row_bytes));
      return Status::Ok();
    }();
    shifted_.clear();
    return second_part;
  }

  std::shared_ptr<const GpuModel> m_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kc::CublasGemm> cublas_;
  int64_t capacity_ = 0;
  NereidBuffer arena_{};        // the activations (GpuModel's plan)
  std::vector<void*> buffers_;  // per value: its place in the arena (owners), or null
  std::vector<NereidBuffer> staging_in_, staging_out_;
  std::vector<void*> mapped_in_, mapped_out_;  // the staging buffers' device addresses, or null
  NereidBuffer acc_{};
  int64_t acc_floats_ = 0;
  NereidBuffer quantized_{}, row_scale_{};  // int8 GEMMs: x quantized per row, and its scales
  NereidBuffer absmax_{};          // int8 convolutions: each image's largest magnitude (as bits)
  NereidBuffer conv_workspace_{};  // kc::kConvWorkspaceFloats: split convolutions
  bool copies_in_graph_ = false;
  // Split runs (EnqueueSplit): the copy stream, its events (the stream's work before, each part's
  // input across), the second part's direct inputs, and the values Buf() then redirects.
  cudaStream_t copy_stream_ = nullptr;
  std::array<cudaEvent_t, 3> split_events_{};
  std::vector<NereidBuffer> prefetch_;
  int64_t prefetch_rows_ = 0;
  std::vector<void*> shifted_;
  bool split_logged_ = false;                     // (the first split run is logged)
  GraphCache graphs_;                             // by (rows, direct mask, part)
  std::vector<std::vector<GpuPart>> direct_src_;  // per input: this run's direct parts, or none
  // Per output: this run's direct destination (its parts), or none.
  std::vector<std::vector<GpuDestinationPart>> direct_dst_;
  std::unique_ptr<GemmTuner> tuner_;  // which implementation runs each GEMM, by row count
  PhaseLog phases_;
  uint64_t device_ns_ = 0;  // the last run's device time
};

StatusOr<GpuInstancePtr> CreateGpuInstance(std::shared_ptr<const GpuModel> model) {
  if (model->device == kGpuPlanOnly)
    return InvalidArgument("a model compiled without a device (kGpuPlanOnly) cannot run");
  GpuInstancePtr instance(new GpuInstance(std::move(model)));
  RETURN_IF_ERROR(instance->Init());
  return instance;
}

uint64_t LastDeviceNs(const GpuInstance& instance) { return instance.device_ns(); }

StatusOr<std::vector<GpuStepTime>> ProfileGpuSteps(GpuInstance& instance, int64_t rows, int reps) {
  return instance.ProfileSteps(rows, reps);
}

Status RunOnGpu(GpuInstance& instance, int64_t rows, const std::vector<GpuFeed>& feeds,
                const std::vector<GpuDestination>& destinations, std::vector<GpuResult>* results,
                uint64_t* compute_start_ns, uint64_t* compute_end_ns,
                const std::vector<int64_t>* sequences) {
  return instance.Run(rows, feeds, destinations, results, compute_start_ns, compute_end_ns,
                      sequences);
}

std::vector<GpuOutputInfo> GpuOutputs(const GpuInstance& instance) { return instance.outputs(); }

void DestroyGpuInstance(GpuInstance* instance) { delete instance; }

std::string GemmTuning(const GpuInstance& instance) { return instance.tuning(); }

}  // namespace nereid::native
