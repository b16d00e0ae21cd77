// This machine's memory read bandwidth, measured (every thread streams its slice of a buffer far larger
// than the caches) and cached per CPU and thread count in $ZINC_HOME/bandwidth.json (default
// ~/.cache/zinc), so benchmarks can say how close a run is to the roofline without re-measuring.
#pragma once

#include <string>

#include "core/thread_pool.h"

#include "core/knobs.h"  // zinc_home()

namespace zinc {

// Best of five passes over 512 MiB, in GB/s.
double measure_read_bandwidth(ThreadPool& pool);

// The cached figure for this CPU and thread count, measuring (and storing) it the first time. A cache
// that cannot be read or written is ignored.
double cached_read_bandwidth(ThreadPool& pool);

// Measures again and replaces the cached figure (after a measurement taken on a busy machine).
double refresh_read_bandwidth(ThreadPool& pool);

}  // namespace zinc
