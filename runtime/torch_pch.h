// The torch headers every runtime translation unit needs, precompiled once (CMake
// target_precompile_headers) to keep LibTorch's compile time down.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>  // ProcessGroup, Work (and 2.x's Backend)
// PyTorch wheels ship ProcessGroupGloo.hpp without gloo's own headers; such a build has NCCL
// only and refuses --backend gloo for more than one rank (runtime/compat.cpp, docs/gpu.md).
#if __has_include(<gloo/algorithm.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define STAGECRAFT_WITH_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
