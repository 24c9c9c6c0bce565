// The torch headers every runtime translation unit needs, precompiled once (CMake
// target_precompile_headers) to keep LibTorch's compile time down.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
