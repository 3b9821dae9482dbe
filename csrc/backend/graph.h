// Compiled FX graphs: built node by node from the lowering table into one
// program (see graph.cc).
#pragma once

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "eager/execute.h"
#include "eager/program_cache.h"

namespace torch_pjrt::backend {

// A value in a graph being built: output `output` of node `node`, or graph
// input -1 - node when `node` is negative.
struct GraphRef {
  int node = 0;
  int output = 0;
};

struct GraphInput {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> shape;
  bool donate = false;  // a mutated input whose old buffer the program may consume
};

struct ExpectedOutput {
  std::optional<c10::ScalarType> dtype;  // unset: not checked
  std::vector<int64_t> shape;
};

struct GraphNode {
  std::string op;  // "aten::add.Tensor"
  pybind11::tuple args;
  pybind11::dict kwargs;
  std::vector<ExpectedOutput> expected;  // torch's dtype and shape per output
};

struct GraphProgram {
  const Program* program = nullptr;
  size_t num_results = 0;
  bool random = false;
  std::vector<GraphInput> inputs;
  // The data checks' meaning, element by element of the one pred[N] output
  // after the results; null when the graph has none.
  std::shared_ptr<const CheckMessages> checks;
};

// Builds (or finds) the program for a graph. `key` identifies the graph's
// structure; the input types are added to it. `reason` is recorded when
// this compiles something new.
std::shared_ptr<GraphProgram> compile_graph(const std::string& name, const std::string& key,
                                            const std::string& reason,
                                            const std::vector<GraphInput>& inputs,
                                            const std::vector<GraphNode>& nodes,
                                            const std::vector<GraphRef>& outputs);

// Runs `graph` on `args` (tensors matching its inputs). Each (input, result)
// in `mutations` writes that result into the input tensor, donating the old
// buffer where only the storage holds it; those results come back unset.
std::vector<c10::optional<at::Tensor>> run_graph(const GraphProgram& graph,
                                                 const std::vector<at::Tensor>& args, int device,
                                                 const std::vector<std::pair<int, int>>& mutations);

}  // namespace torch_pjrt::backend
