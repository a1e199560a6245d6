// Builds small ONNX graphs in memory for the engine's tests (the CPU's and the GPU compiler's):
// an empty model of an opset, FP32 and INT64 initializers, FP32 value infos, nodes named after
// their op and output, and their attributes.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nereid::native::onnx_builder {

// A model of the default domain at 'opset' with an empty graph (model->mutable_graph()).
inline std::unique_ptr<onnx::ModelProto> NewModel(int64_t opset, int64_t ir_version = 8) {
  auto model = std::make_unique<onnx::ModelProto>();
  model->set_ir_version(ir_version);
  model->add_opset_import()->set_version(opset);
  return model;
}

inline void AddFloatTensor(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims,
                           const std::vector<float>& values) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
}

// A 1-D INT64 initializer.
inline void AddInt64Tensor(onnx::GraphProto* g, const std::string& name,
                           const std::vector<int64_t>& values) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
}

// An FP32 value of 'dims' (each set as given) on a graph's inputs or outputs.
inline void AddValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
                         const std::string& name, std::vector<int64_t> dims) {
  auto* v = list->Add();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

// A node named "<op>_<output>".
inline onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                                std::vector<std::string> inputs, const std::string& output) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + output);
  for (auto& i : inputs) n->add_input(i);
  n->add_output(output);
  return n;
}

inline void SetInts(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t e : v) a->add_ints(e);
}

inline void SetInt(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void SetString(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

}  // namespace nereid::native::onnx_builder
