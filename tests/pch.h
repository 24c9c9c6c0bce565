// Precompiled once for every test program that shares the default flags (tests/CMakeLists.txt):
// GoogleTest, nlohmann/json and the project headers most tests include. Build speed only; each
// test still includes what it uses.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "schedules/error.h"
#include "schedules/registry.h"
#include "tests/helpers.h"
