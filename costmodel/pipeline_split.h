// How a model's transformer layers are split over the stages of one pipeline chain, in
// Megatron-Core's three ways (NVIDIA/Megatron-LM d98e8a64):
//  - a layout string (--pipeline-model-parallel-layout; megatron/core/transformer/
//    pipeline_parallel_layer_layout.py): one entry per virtual stage, separated by '|', in
//    virtual-stage order (entry i on pipeline rank i % pp, chunk i / pp); 'E' the embedding,
//    't' a transformer layer, 'm' a multi-token prediction layer, 'L' the loss; "x*n" repeats a
//    character and "(...)*n" a group; commas are cosmetic. "Et*3|(tt|)*29m|L" is DeepSeek-V3's
//    pp 16 layout.
//  - the embedding and the loss counted as one layer each (--account-for-embedding-in-pipeline-
//    split, --account-for-loss-in-pipeline-split; megatron/core/transformer/transformer_block.py
//    get_num_layers_to_build): (layers + 1 + 1) / stages layers a stage, less one on the first
//    stage and one on the last. Llama 3.1 405B's 126 layers on 128 virtual stages are the
//    embedding alone, 126 stages of one layer, and the loss alone.
//  - stagecraft's own: plan.stage_layers, or as even as possible (costs.h partition_layers).
// The first stage holds the embedding and the last the head and the loss; the multi-token
// prediction layers sit on the last stage, or where a layout puts them (a stage of their own
// then computes their output head as well). Only the first and last stages, and a stage of
// multi-token prediction layers, may hold no transformer layer.
#pragma once

#include <string>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::costmodel {

// A layout read: transformer layers per virtual stage and the stage of the multi-token
// prediction layers (-1: none).
struct LayoutSplit {
  std::vector<int> layers;  // (stages) transformer layers of each virtual stage
  int mtp_stage = -1;       // the stage holding the multi-token prediction layers
};
// The layout `text` (plan.pipeline_layout) checked against the model (num_layers, mtp_layers)
// and the schedule's `stages` per chain; throws InputError naming plan.pipeline_layout, the
// value and what is allowed.
LayoutSplit parse_layout(const std::string& text, const ModelSpec& m, int stages);
std::vector<int> layout_stage_layers(const std::string& text, const ModelSpec& m, int stages);
// Virtual stages of a layout (its entries), as Megatron-LM derives the virtual pipeline size
// from it (arguments.py: entries / pp); throws InputError on a malformed string.
int layout_stage_count(const std::string& text);

// The model part (stage of a chain) holding the multi-token prediction layers: the layout's, else
// the last; -1 when the model has none.
int mtp_model_part(const ModelSpec& m, const ParallelPlan& p, int stages);

// Megatron-Core's split with the embedding and/or the loss counted as layers; throws InputError
// when layers plus those do not divide into `stages` (as Megatron-Core refuses them).
std::vector<int> accounted_stage_layers(const ModelSpec& m, int stages, bool embedding, bool loss);

// Megatron-Core's uneven first and last pipeline ranks (--decoder-first-pipeline-num-layers,
// --decoder-last-pipeline-num-layers; transformer_block.py get_num_layers_to_build): the first
// (last) rank holds `first` (`last`) layers, -1 where not given, the other ranks the rest evenly,
// each rank's layers split evenly over its `chunks` virtual stages; per virtual stage (entry
// v x pp + r). Throws InputError where Megatron-Core's divisibility asserts would fail.
std::vector<int> uneven_stage_layers(const ModelSpec& m, int pp, int chunks, int first, int last);

// The layout string of a split (what --emit megatron writes): the embedding on the first stage,
// the model's multi-token prediction layers and the loss on the last, "x*n" for runs.
std::string layout_of(const std::vector<int>& stage_layers, int mtp_layers);

}  // namespace stagecraft::costmodel
