// Downloads that survive real networks: redirects followed by hand (so a hub's digest headers are
// seen and a token is sent only to the hub), resume of a partial file with Range, retries with
// backoff, stall detection, a free-space check first and while writing, a size cap, and SHA-256
// verification against the published
// digest when the server gives one. The file appears at `dest` only complete and verified (written as
// dest.part, then renamed); a failure that cannot be resumed leaves nothing behind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace zinc::hub {

struct DownloadOptions {
  int retries = 5;              // attempts after the first, resuming each time
  int stall_seconds = 30;       // no byte for this long: drop the connection and retry
  int retry_delay_ms = 1000;    // before the first retry; doubles each time
  std::string token;            // bearer token for the hub's own host (HF_TOKEN)
  // The largest file accepted: a file announced larger is refused before it starts, and a body that
  // grows past it (a server that sends no length, or more than it announced) is stopped and discarded.
  // Hugging Face serves files of at most 50 GB.
  uint64_t max_bytes = 64ull << 30;
  // Large files come down over several connections at once (each a byte range, resumed on its own).
  int connections = 4;
  uint64_t parallel_min_bytes = 256ull << 20;
  // Called as bytes arrive: done, total (0 if unknown), bytes/s over the last seconds.
  std::function<void(uint64_t done, uint64_t total, double rate)> progress;
  // Checked before the file is renamed into place (e.g. that it parses as GGUF); throw to reject it.
  std::function<void(const std::filesystem::path& part)> validate;
};

struct DownloadResult {
  uint64_t size = 0;
  std::string sha256;      // of the file
  bool verified = false;   // the server published a digest and it matched
  uint64_t resumed_from = 0;
  int retries = 0;
  int connections = 1;      // ranges fetched at once
};

// Throws zinc::Error saying what failed (status, digest mismatch, no space, too many stalls).
DownloadResult download(const std::string& url, const std::filesystem::path& dest, const DownloadOptions& options);

// SHA-256 of a file, as lowercase hex.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace zinc::hub
