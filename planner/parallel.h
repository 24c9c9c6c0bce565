// The planner's threads: units of work run on a number of threads, each unit whole on one, the
// first exception (by unit index) rethrown on the caller's thread once every thread has stopped.
#pragma once

#include <cstddef>
#include <functional>

namespace stagecraft::planner {

// The threads a search runs on: `requested`, or every core the machine reports when 0
// (std::thread::hardware_concurrency, 1 when it reports none).
int search_threads(int requested);

// Calls fn(i) for every i in [0, units), on at most `threads` threads (the caller's among them),
// handing out units in index order as threads come free. fn must only write what unit i owns.
void run_units(size_t units, int threads, const std::function<void(size_t)>& fn);

}  // namespace stagecraft::planner
