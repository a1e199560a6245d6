// ProtobufWriter: protocol buffers' wire format, by hand, for the few OTLP messages the tracer
// sends (opentelemetry.proto.trace.v1: Span, Event, KeyValue, AnyValue; the collector's
// ExportTraceServiceRequest). Field numbers are those of the opentelemetry-proto definitions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nereid::trace {

struct ProtobufWriter {
  std::string s;
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      s.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    s.push_back(static_cast<char>(v));
  }
  void Tag(int field, int wire) { Varint(static_cast<uint64_t>(field) << 3 | wire); }
  void Bytes(int field, std::string_view v) {
    Tag(field, 2);
    Varint(v.size());
    s.append(v);
  }
  void Fixed64(int field, uint64_t v) {
    Tag(field, 1);
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  }
  void Int(int field, uint64_t v) {
    Tag(field, 0);
    Varint(v);
  }
  void StringAttribute(int field, std::string_view key, std::string_view value) {
    ProtobufWriter any, kv;
    any.Bytes(1, value);  // AnyValue.string_value
    kv.Bytes(1, key);
    kv.Bytes(2, any.s);
    Bytes(field, kv.s);
  }
  void IntAttribute(int field, std::string_view key, int64_t value) {
    ProtobufWriter any, kv;
    any.Int(3, static_cast<uint64_t>(value));  // AnyValue.int_value
    kv.Bytes(1, key);
    kv.Bytes(2, any.s);
    Bytes(field, kv.s);
  }
};

}  // namespace nereid::trace
