// libFuzzer target for the safetensors reader: any input is rejected with zinc::Error or yields tensors
// whose byte ranges lie inside the input and match their shape and dtype.
#include <cstdlib>

#include "convert/safetensors.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto f = zinc::convert::SafetensorsFile::parse({data, size}, "fuzz");
    for (const auto& t : f.tensors()) {
      if (t.data.data() < data || t.data.data() + t.data.size() > data + size) std::abort();
      if (static_cast<uint64_t>(t.n_elements()) * zinc::convert::st_dtype_size(t.dtype) != t.data.size()) std::abort();
    }
  } catch (const zinc::Error&) {
  }
  return 0;
}
