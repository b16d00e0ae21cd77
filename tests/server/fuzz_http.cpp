// libFuzzer target: bytes as they arrive on a connection. The head parser and the chunked decoder must
// never crash, never consume more than they were given, never keep a body over the limit, and give
// the same result for the body whether the bytes come at once or one by one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zinc::server::http;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Limits limits;
  limits.max_body_bytes = 4096;
  limits.max_head_bytes = 2048;
  limits.max_headers = 20;
  Request req;
  const HeadResult h = parse_head(bytes, limits, req);
  if (h.status == HeadResult::kError && (h.error_status < 400 || h.error.empty())) std::abort();
  if (h.status == HeadResult::kComplete) {
    if (h.consumed > size || static_cast<int>(req.headers.size()) > limits.max_headers || req.path.empty()) std::abort();
    const BodyPlan plan = plan_body(req, limits);
    if (plan.kind == BodyPlan::kLength && plan.length > limits.max_body_bytes) std::abort();
  }
  // The whole input as a chunked body, at once and byte by byte.
  ChunkedDecoder whole(limits.max_body_bytes), bytewise(limits.max_body_bytes);
  std::string a, b;
  const size_t used = whole.feed(bytes, a);
  size_t used_b = 0;
  for (size_t i = 0; i < size && !bytewise.done() && !bytewise.error_status(); ++i) used_b += bytewise.feed(bytes.substr(i, 1), b);
  if (used > size || a.size() > limits.max_body_bytes || b.size() > limits.max_body_bytes) std::abort();
  if (whole.done() != bytewise.done() || (whole.done() && (a != b || used != used_b))) std::abort();
  if ((whole.error_status() != 0) != (bytewise.error_status() != 0)) std::abort();
  return 0;
}
