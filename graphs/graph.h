// A model as a graph of operators (docs/graphs.md): what Merak's graph sharding (shard.h) cuts
// into a sequence of subgraphs and the planner's balancing groups into pipeline stages. Nodes
// are in topological order: every input of a node comes before it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stagecraft::graphs {

struct Node {
  std::string name;                 // unique within the graph
  std::string kind;                 // operator: input, embedding, linear, attention, layernorm, add, gelu, loss, ...
  std::vector<int> inputs;          // producers (indices of earlier nodes), in argument order
  std::vector<std::int64_t> shape;  // output shape of one microbatch, e.g. (b, s, h)
  std::string dtype = "fp16";       // output element type: fp32, fp16, bf16, int64, int32 or bool
  double param_bytes = 0;           // parameters this node owns (0 when it shares another's)
  std::string shares = "";          // name of the node whose parameters it uses (tied embeddings)
  double fwd_flops = 0;             // forward FLOPs of one microbatch
  double bwd_flops = -1;            // backward FLOPs; < 0: twice the forward (Megatron-LM SC21)
  std::string tp = "";              // tensor-parallel rule: "", column, row, vocab, replicated
  double fwd_s = -1;                // measured seconds of its forward, one microbatch (partition
  double bwd_s = -1;                // --measure); < 0: priced from its FLOPs at the cluster's rate
  int heads = 0;                    // attention: query heads (0: not given; the core is then priced
                                    // from its FLOPs alone)
  std::string kernel = "materialized";  // attention: materialized or fused (one flash kernel)
  bool causal = true;               // attention: masks the future (decoders)
  bool dropout = false;             // attention: dropout on its probabilities; add: a bias-dropout-add
  double saved_bytes = -1;          // what its backward keeps that the node makes, one microbatch:
                                    // its output and internal tensors (an attention core's softmax
                                    // and dropout mask); < 0: its output alone

  double backward_flops() const { return bwd_flops < 0 ? 2 * fwd_flops : bwd_flops; }
};

struct Graph {
  std::string name;         // the model's name
  std::vector<Node> nodes;  // topological order

  int index_of(const std::string& node_name) const;  // -1 when absent
  // Users of each node (indices of the nodes that read it), in node order.
  std::vector<std::vector<int>> users() const;
};

// Bytes of one element of `dtype` (fp32 and int32 4, fp16 and bf16 2, int64 8, bool 1);
// throws InputError otherwise.
int dtype_bytes(const std::string& dtype, const std::string& what);
// Bytes of a node's output for one microbatch.
double output_bytes(const Node& n);
// Bytes its backward keeps from it (saved_bytes, else its output).
double kept_bytes(const Node& n);

// Reads a graph from its JSON (docs/graphs.md): {"format": "stagecraft-graph", "name": ...,
// "nodes": [{"name", "kind", "inputs": [names], "shape", "dtype", "param_bytes", "shares",
// "fwd_flops", "bwd_flops", "tp", "saved_bytes", "fwd_s", "bwd_s"}]}. Throws InputError naming the node and field: unknown or
// later inputs, duplicate names, negative sizes, an unknown dtype or tp rule.
Graph from_json(const nlohmann::json& j, const std::string& what = "graph");
Graph load_graph(const std::string& path);
nlohmann::json to_json(const Graph& g);

}  // namespace stagecraft::graphs
