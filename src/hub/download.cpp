#include "hub/download.h"

#include <fmt/format.h>
#include <httplib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fcntl.h>
#include <unistd.h>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"

namespace zinc::hub {

namespace {

struct Url {
  std::string origin;  // scheme://host[:port]
  std::string path;    // /path?query
  std::string host;
};

Url parse_url(const std::string& url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) throw Error(fmt::format("'{}' is not a URL", url));
  const auto path_start = url.find('/', scheme_end + 3);
  Url u;
  u.origin = url.substr(0, path_start);
  u.path = path_start == std::string::npos ? "/" : url.substr(path_start);
  u.host = url.substr(scheme_end + 3, (path_start == std::string::npos ? url.size() : path_start) - scheme_end - 3);
  return u;
}

std::string resolve_location(const Url& base, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  if (!location.empty() && location[0] == '/') return base.origin + location;
  const auto slash = base.path.rfind('/');
  return base.origin + base.path.substr(0, slash + 1) + location;
}

std::unique_ptr<httplib::Client> client_for(const Url& u, int stall_seconds) {
  auto c = std::make_unique<httplib::Client>(u.origin);
  c->set_connection_timeout(stall_seconds, 0);
  c->set_read_timeout(stall_seconds, 0);
  c->set_follow_location(false);
  return c;
}

// A 64-hex-digit digest in a header value (quotes and a W/ prefix allowed), or "".
std::string sha256_in(std::string v) {
  if (v.rfind("W/", 0) == 0) v = v.substr(2);
  v.erase(std::remove(v.begin(), v.end(), '"'), v.end());
  if (v.size() != 64) return "";
  for (char& c : v) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return v;
}

struct Target {
  std::string url;     // after redirects
  std::string digest;  // published SHA-256, or ""
  uint64_t size = 0;   // 0 if unknown
  bool ranges = false; // the server said it serves byte ranges
};

httplib::Headers auth_headers(const Url& u, const Url& hub, const std::string& token) {
  httplib::Headers h{{"User-Agent", "zinc"}};
  if (!token.empty() && u.host == hub.host) h.emplace("Authorization", "Bearer " + token);
  return h;
}

// A size header's value: digits only, or a clear error naming the header.
uint64_t size_header(const std::string& url, const char* name, const std::string& v) {
  if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw Error(fmt::format("{}: the server's {} header ('{}') is not a size in bytes", url, name, v.substr(0, 40)));
  }
  return std::stoull(v);
}

// Free space where `part` is written, checked every so often while it grows: a disk that fills up
// stops the download with the part kept (to resume once there is room), not a truncated file.
class SpaceWatch {
 public:
  explicit SpaceWatch(std::filesystem::path dir) : dir_(std::move(dir)) {}
  void wrote(uint64_t n) {
    since_ += n;
    if (since_ < (64u << 20)) return;
    since_ = 0;
    std::error_code ec;
    const auto space = std::filesystem::space(dir_, ec);
    if (!ec && space.available < (64u << 20)) {
      throw Error(fmt::format("the disk holding {} is full (under 64 MB free); free some space and run the same pull "
                              "again to resume", dir_.string()));
    }
  }

 private:
  std::filesystem::path dir_;
  uint64_t since_ = 0;
};

std::string status_error(const std::string& url, int status) {
  if (status == 401 || status == 403) {
    return fmt::format("{}: access denied ({}); for gated models set HF_TOKEN to a token that has access", url, status);
  }
  if (status == 404) return fmt::format("{}: not found (404)", url);
  return fmt::format("{}: the server answered {}", url, status);
}

// Follows redirects with HEAD requests, collecting the hub's digest and size on the way.
Target locate(const std::string& url, const DownloadOptions& o) {
  const Url hub = parse_url(url);
  Target t;
  std::string current = url;
  for (int hop = 0; hop < 10; ++hop) {
    const Url u = parse_url(current);
    auto c = client_for(u, o.stall_seconds);
    auto res = c->Head(u.path, auth_headers(u, hub, o.token));
    if (!res) {
      throw Error(fmt::format("{}: cannot reach the server ({} error); check the network or HF_ENDPOINT", current,
                              httplib::to_string(res.error())));
    }
    if (t.digest.empty()) t.digest = sha256_in(res->get_header_value("X-Linked-Etag"));
    if (t.size == 0 && res->has_header("X-Linked-Size")) {
      t.size = size_header(current, "X-Linked-Size", res->get_header_value("X-Linked-Size"));
    }
    if (res->status >= 300 && res->status < 400 && res->has_header("Location")) {
      current = resolve_location(u, res->get_header_value("Location"));
      continue;
    }
    if (res->status != 200) throw Error(status_error(current, res->status));
    if (t.digest.empty()) t.digest = sha256_in(res->get_header_value("ETag"));
    if (t.size == 0 && res->has_header("Content-Length")) {
      t.size = size_header(current, "Content-Length", res->get_header_value("Content-Length"));
    }
    t.ranges = res->get_header_value("Accept-Ranges") == "bytes";
    t.url = current;
    if (t.size > o.max_bytes) {
      throw Error(fmt::format("{}: the file is {:.1f} GB, larger than the {:.1f} GB this pull accepts (--max-size)", url,
                              static_cast<double>(t.size) / 1e9, static_cast<double>(o.max_bytes) / 1e9));
    }
    return t;
  }
  throw Error(fmt::format("{}: too many redirects", url));
}

DownloadResult finish_download(const Target& t, const std::filesystem::path& part, const std::filesystem::path& meta,
                               const std::filesystem::path& dest, const DownloadOptions& o, DownloadResult r) {
  namespace fs = std::filesystem;
  r.size = fs::file_size(part);
  if (t.size > 0 && r.size != t.size) {
    throw Error(fmt::format("{}: got {} bytes, expected {}", t.url, r.size, t.size));
  }
  r.sha256 = sha256_file(part);
  if (!t.digest.empty()) {
    if (r.sha256 != t.digest) {
      fs::remove(part);
      fs::remove(meta);
      throw Error(fmt::format("{}: SHA-256 mismatch (published {}, downloaded {}); the file was discarded", t.url,
                              t.digest, r.sha256));
    }
    r.verified = true;
  }
  if (o.validate) {
    try {
      o.validate(part);
    } catch (...) {
      fs::remove(part);
      fs::remove(meta);
      throw;
    }
  }
  fs::rename(part, dest);
  fs::remove(meta);
  return r;
}


// Fetches the file as o.connections byte ranges at once into a preallocated `part`, each range resumed
// on its own after a drop or a stall; `state` (the meta file's content) records each range's progress
// so a later run continues where this one stopped.
void fetch_parallel(const Target& t, const std::string& url, const std::filesystem::path& part,
                    const std::filesystem::path& meta, nlohmann::json state, const DownloadOptions& o, DownloadResult& r) {
  struct Segment {
    uint64_t start = 0, end = 0;  // [start, end)
    std::atomic<uint64_t> done{0};
  };
  std::vector<std::unique_ptr<Segment>> segs;
  if (state.contains("segments")) {
    for (const auto& sg : state["segments"]) {
      auto seg = std::make_unique<Segment>();
      seg->start = sg.at(0).get<uint64_t>();
      seg->end = sg.at(1).get<uint64_t>();
      seg->done = std::min(sg.at(2).get<uint64_t>(), seg->end - seg->start);
      segs.push_back(std::move(seg));
    }
  } else {
    const uint64_t n = static_cast<uint64_t>(o.connections), per = (t.size + n - 1) / n;
    for (uint64_t s0 = 0; s0 < t.size; s0 += per) {
      auto seg = std::make_unique<Segment>();
      seg->start = s0;
      seg->end = std::min(t.size, s0 + per);
      segs.push_back(std::move(seg));
    }
  }
  const int fd = ::open(part.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) throw Error(fmt::format("{}: cannot write", part.string()));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::ftruncate(fd, static_cast<off_t>(t.size)) != 0) throw Error(fmt::format("{}: cannot allocate", part.string()));
  uint64_t resumed = 0;
  for (const auto& sg : segs) resumed += sg->done;
  r.resumed_from = resumed;
  r.connections = static_cast<int>(segs.size());
  auto save = [&] {
    nlohmann::json j = state;
    j["segments"] = nlohmann::json::array();
    for (const auto& sg : segs) j["segments"].push_back({sg->start, sg->end, sg->done.load()});
    const auto tmp = meta.string() + ".tmp";
    std::ofstream(tmp) << j.dump();
    std::filesystem::rename(tmp, meta);
  };
  save();
  const Url hub = parse_url(url), target = parse_url(t.url);
  std::atomic<bool> failed{false};
  std::atomic<int> retries{0};
  std::string failure;
  std::mutex failure_mutex;
  SpaceWatch space_watch(part.parent_path());
  std::vector<std::thread> workers;
  for (auto& segp : segs) {
    workers.emplace_back([&, seg = segp.get()] {
      int delay = o.retry_delay_ms;
      for (int attempt = 0; seg->done < seg->end - seg->start && !failed; ++attempt) {
        auto c = client_for(target, o.stall_seconds);
        httplib::Headers h = auth_headers(target, hub, o.token);
        h.emplace("Range", fmt::format("bytes={}-{}", seg->start + seg->done, seg->end - 1));
        int status = 0;
        auto res = c->Get(
            target.path, h,
            [&](const httplib::Response& resp) {
              status = resp.status;
              return status == 206;
            },
            [&](const char* data, size_t n) {
              const uint64_t room = seg->end - seg->start - seg->done;
              const size_t take = static_cast<size_t>(std::min<uint64_t>(room, n));
              {
                std::lock_guard<std::mutex> lock(failure_mutex);
                try {
                  space_watch.wrote(take);
                } catch (const Error& e) {
                  failure = e.what();
                  failed = true;
                  return false;
                }
              }
              if (::pwrite(fd, data, take, static_cast<off_t>(seg->start + seg->done)) != static_cast<ssize_t>(take)) return false;
              seg->done += take;
              return !failed.load();
            });
        if (seg->done >= seg->end - seg->start) break;
        if (status != 0 && status != 206) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          failure = status == 200 ? fmt::format("{}: the server ignored a byte range", t.url) : status_error(t.url, status);
          failed = true;
          break;
        }
        if (attempt >= o.retries) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          failure = fmt::format("{}: a range keeps failing ({})", t.url, res ? "connection closed early" : httplib::to_string(res.error()));
          failed = true;
          break;
        }
        ++retries;
        std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        delay *= 2;
      }
    });
  }
  // Progress and the resume record from this thread, while the ranges come in.
  auto last = std::chrono::steady_clock::now();
  uint64_t last_done = resumed;
  for (;;) {
    bool running = false;
    uint64_t done = 0;
    for (const auto& sg : segs) {
      done += sg->done;
      running = running || sg->done < sg->end - sg->start;
    }
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last).count();
    if (o.progress) o.progress(done, t.size, s > 0 ? static_cast<double>(done - last_done) / s : 0.0);
    if (!running || failed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (s >= 1.0) {
      save();
      last = now;
      last_done = done;
    }
  }
  for (auto& w : workers) w.join();
  save();
  r.retries = retries;
  if (failed) {
    throw Error(fmt::format("{} ({} of {} bytes kept; run the same pull again to resume)", failure,
                            [&] { uint64_t d = 0; for (const auto& sg : segs) d += sg->done; return d; }(), t.size));
  }
}

}  // namespace

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read", path.string()));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

DownloadResult download(const std::string& url, const std::filesystem::path& dest, const DownloadOptions& o) {
  namespace fs = std::filesystem;
  const Target t = locate(url, o);
  const fs::path part = dest.string() + ".part", meta = dest.string() + ".part.json";
  fs::create_directories(dest.parent_path());
  // A partial file resumes only if it is the same content (same digest and size); a parallel one also
  // records how far each of its ranges got.
  const nlohmann::json want = {{"url", url}, {"sha256", t.digest}, {"size", t.size}};
  nlohmann::json have;
  {
    std::ifstream in(meta);
    try {
      if (in) have = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception&) {
    }
    if (!have.is_object() || have.value("url", "") != url || have.value("sha256", "") != t.digest ||
        have.value("size", uint64_t{0}) != t.size) {
      fs::remove(part);
      have = want;
      std::ofstream(meta) << want.dump();
    }
  }
  DownloadResult r;
  const bool resume_parallel = have.contains("segments") && fs::exists(part);
  const bool start_parallel = !fs::exists(part) && o.connections > 1 && t.ranges && t.size >= o.parallel_min_bytes &&
                              t.size >= static_cast<uint64_t>(o.connections);
  if (resume_parallel || start_parallel) {
    if (t.size > 0) {
      const auto space = fs::space(dest.parent_path());
      if (!resume_parallel && space.available < t.size + (64u << 20)) {
        throw Error(fmt::format("not enough free disk space in {}: {:.1f} GB needed, {:.1f} GB free",
                                dest.parent_path().string(), static_cast<double>(t.size) / 1e9,
                                static_cast<double>(space.available) / 1e9));
      }
    }
    fetch_parallel(t, url, part, meta, resume_parallel ? have : want, o, r);
    return finish_download(t, part, meta, dest, o, r);
  }
  uint64_t offset = fs::exists(part) ? fs::file_size(part) : 0;
  r.resumed_from = offset;
  if (t.size > 0) {
    if (offset > t.size) {
      fs::remove(part);
      offset = r.resumed_from = 0;
    }
    const auto space = fs::space(dest.parent_path());
    const uint64_t need = t.size - offset;
    if (space.available < need + (64u << 20)) {
      throw Error(fmt::format("not enough free disk space in {}: {:.1f} GB needed, {:.1f} GB free", dest.parent_path().string(),
                              static_cast<double>(need) / 1e9, static_cast<double>(space.available) / 1e9));
    }
  }
  const Url hub = parse_url(url), target = parse_url(t.url);
  int delay = o.retry_delay_ms;
  for (int attempt = 0;; ++attempt) {
    offset = fs::exists(part) ? fs::file_size(part) : 0;
    if (t.size > 0 && offset == t.size) break;
    auto c = client_for(target, o.stall_seconds);
    httplib::Headers h = auth_headers(target, hub, o.token);
    if (offset > 0) h.emplace("Range", fmt::format("bytes={}-", offset));
    std::ofstream out(part, std::ios::binary | std::ios::app);
    int status = 0;
    bool restart = false, too_big = false;
    std::string disk_full;
    SpaceWatch space_watch(dest.parent_path());
    const uint64_t cap = t.size > 0 ? t.size : o.max_bytes;
    uint64_t done = offset;
    auto window_start = std::chrono::steady_clock::now();
    uint64_t window_bytes = 0;
    double rate = 0;
    auto res = c->Get(
        target.path, h,
        [&](const httplib::Response& resp) {
          status = resp.status;
          if (status == 200 && offset > 0) restart = true;  // the server ignored the range: start over
          return status == 200 || status == 206;
        },
        [&](const char* data, size_t n) {
          if (restart) {
            out.close();
            out.open(part, std::ios::binary | std::ios::trunc);
            done = 0;
            restart = false;
          }
          if (done + n > cap) {  // more than announced, or past the cap when nothing was announced
            too_big = true;
            return false;
          }
          try {
            space_watch.wrote(n);
          } catch (const Error& e) {
            disk_full = e.what();
            return false;
          }
          out.write(data, static_cast<std::streamsize>(n));
          done += n;
          window_bytes += n;
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
          if (s >= 0.5) {
            rate = static_cast<double>(window_bytes) / s;
            window_bytes = 0;
            window_start = std::chrono::steady_clock::now();
          }
          if (o.progress) o.progress(done, t.size, rate);
          return static_cast<bool>(out);
        });
    out.close();
    if (too_big) {
      fs::remove(part);
      fs::remove(meta);
      throw Error(t.size > 0 ? fmt::format("{}: the server sent more than the {} bytes it announced; nothing was kept", t.url, t.size)
                             : fmt::format("{}: the server sent more than {:.1f} GB without saying how much (--max-size "
                                           "raises the limit); nothing was kept",
                                           t.url, static_cast<double>(o.max_bytes) / 1e9));
    }
    if (!disk_full.empty()) throw Error(disk_full);
    if (res && (res->status == 200 || res->status == 206) && (t.size == 0 || done == t.size)) break;
    if (res && status != 0 && status != 200 && status != 206) {
      if (status == 416 && t.size > 0 && offset >= t.size) break;  // already complete
      fs::remove(part);
      fs::remove(meta);
      throw Error(status_error(t.url, status));
    }
    if (attempt >= o.retries) {
      throw Error(fmt::format("{}: the download keeps failing ({}; {} of {} bytes kept, run the same pull again to resume)",
                              t.url, res ? "connection closed early" : httplib::to_string(res.error()), done, t.size));
    }
    ++r.retries;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    delay *= 2;
  }
  return finish_download(t, part, meta, dest, o, r);
}


}  // namespace zinc::hub
