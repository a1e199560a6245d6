// Builds small model repositories on disk for unit tests: ONNX graphs written with onnx_proto,
// configs as text. Each TempRepository removes itself.
#pragma once

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace nereid::testing {

// OUT = A + B, all INT32 [batch, 4] (batch symbolic). With 'b_default', B is instead an INT32 [4]
// graph input that is also an initializer ({100, 200, 300, 400}): an optional input.
inline void WriteAddModel(const std::filesystem::path& file, bool b_default = false) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* g = model.mutable_graph();
  g->set_name("add");
  auto value = [](onnx::ValueInfoProto* v, const char* name, bool batch) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::INT32);
    if (batch) t->mutable_shape()->add_dim()->set_dim_param("batch");
    t->mutable_shape()->add_dim()->set_dim_value(4);
  };
  value(g->add_input(), "A", true);
  value(g->add_input(), "B", !b_default);
  value(g->add_output(), "OUT", true);
  if (b_default) {
    auto* b = g->add_initializer();
    b->set_name("B");
    b->set_data_type(onnx::TensorProto::INT32);
    b->add_dims(4);
    for (int v : {100, 200, 300, 400}) b->add_int32_data(v);
  }
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("A");
  n->add_input("B");
  n->add_output("OUT");
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary);
  model.SerializeToOstream(&out);
}

class TempRepository {
 public:
  TempRepository() {
    std::random_device rd;
    root_ = std::filesystem::temp_directory_path() / ("nereid_repo_" + std::to_string(rd()));
    std::filesystem::create_directories(root_);
  }
  ~TempRepository() { std::filesystem::remove_all(root_); }
  const std::filesystem::path& root() const { return root_; }

  void AddModel(const std::string& name, const std::string& config,
                std::initializer_list<int> versions = {1}) {
    std::filesystem::create_directories(root_ / name);
    if (!config.empty()) std::ofstream(root_ / name / "config.pbtxt") << config;
    for (int v : versions) WriteAddModel(root_ / name / std::to_string(v) / "model.onnx");
  }

 private:
  std::filesystem::path root_;
};

inline std::string AddConfig(const std::string& name, int max_batch_size = 8) {
  return "name: \"" + name +
         "\"\nbackend: \"native\"\nmax_batch_size: " + std::to_string(max_batch_size) +
         "\ninput [ { name: \"A\" data_type: TYPE_INT32 dims: [ 4 ] }, { name: \"B\" data_type: "
         "TYPE_INT32 dims: [ 4 ] } ]"
         "\noutput [ { name: \"OUT\" data_type: TYPE_INT32 dims: [ 4 ] } ]\n";
}

}  // namespace nereid::testing
