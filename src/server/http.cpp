#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <regex>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "core/format.h"

namespace zinc::server::http {

namespace {

using Clock = std::chrono::steady_clock;

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// RFC 9110 token characters (method and header names).
bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of a header in a request's list (first occurrence).
const std::string* find_header(const Headers& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

bool has_token(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (iequals(trim_ows(list.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

// ---- Request / Response ----

std::string Request::header(std::string_view name) const {
  const std::string* v = find_header(headers, name);
  return v ? *v : std::string();
}

bool Request::has_header(std::string_view name) const { return find_header(headers, name) != nullptr; }

bool Request::client_gone() const {
  if (fd < 0) return true;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

void Response::set_header(std::string name, std::string value) {
  name = lowered(name);
  for (auto& [k, v] : headers) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

std::string Response::header(std::string_view name) const {
  const std::string* v = find_header(headers, lowered(name));
  return v ? *v : std::string();
}

void Response::set_content(std::string content, std::string content_type) {
  body = std::move(content);
  set_header("content-type", std::move(content_type));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

// ---- Parsing ----

HeadResult parse_head(std::string_view buffer, const Limits& limits, Request& out) {
  HeadResult r;
  auto error = [&](int status, std::string message) {
    r.status = HeadResult::kError;
    r.error_status = status;
    r.error = std::move(message);
    return r;
  };
  // Empty lines before a request line are ignored (RFC 9112 §2.2).
  size_t start = 0;
  while (start < buffer.size() && (buffer[start] == '\r' || buffer[start] == '\n') && start < 16) ++start;
  // The head ends at the first empty line (CRLF CRLF, or bare LFs).
  size_t end = std::string_view::npos, after = 0;
  for (size_t i = buffer.find('\n', start); i != std::string_view::npos; i = buffer.find('\n', i + 1)) {
    if (i + 1 < buffer.size() && buffer[i + 1] == '\n') {
      end = i + 1, after = i + 2;
      break;
    }
    if (i + 2 < buffer.size() && buffer[i + 1] == '\r' && buffer[i + 2] == '\n') {
      end = i + 1, after = i + 3;
      break;
    }
    if (i - start > limits.max_head_bytes) break;
  }
  if (end == std::string_view::npos) {
    if (buffer.size() - start > limits.max_head_bytes) {
      return error(431, fmt::format("the request head is larger than {} bytes", limits.max_head_bytes));
    }
    return r;  // incomplete
  }
  if (end - start > limits.max_head_bytes) {
    return error(431, fmt::format("the request head is larger than {} bytes", limits.max_head_bytes));
  }
  std::string_view head = buffer.substr(start, end - start);
  // Lines, each without its CR LF.
  auto next_line = [&head]() {
    const size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  };
  const std::string_view request_line = next_line();
  const size_t sp1 = request_line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : request_line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || request_line.find(' ', sp2 + 1) != std::string_view::npos) {
    return error(400, "the request line is not METHOD TARGET VERSION");
  }
  const std::string_view method = request_line.substr(0, sp1), target = request_line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = request_line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), is_tchar)) return error(400, "the method is not a token");
  if (target.empty() || target.front() != '/') return error(400, "the request target is not a path");
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return error(400, "the request target has a control character");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.size() == 8 && version.substr(0, 5) == "HTTP/") return error(505, "only HTTP/1.0 and HTTP/1.1 are served");
    return error(400, "the request line has no HTTP version");
  }
  out.method = method;
  out.target = target;
  out.version = version;
  const size_t q = target.find('?');
  out.path = target.substr(0, q);
  out.query = q == std::string_view::npos ? std::string() : std::string(target.substr(q + 1));
  out.headers.clear();
  while (!head.empty()) {
    const std::string_view line = next_line();
    if (line.empty()) continue;
    if (line.front() == ' ' || line.front() == '\t') return error(400, "folded header lines are not accepted");
    if (static_cast<int>(out.headers.size()) >= limits.max_headers) {
      return error(431, fmt::format("the request has more than {} headers", limits.max_headers));
    }
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos) return error(400, "a header line has no name");
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_tchar)) return error(400, "a header name is not a token");
    const std::string_view value = trim_ows(line.substr(colon + 1));
    for (char c : value) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) return error(400, "a header value has a control character");
    }
    out.headers.emplace_back(lowered(name), std::string(value));
  }
  r.status = HeadResult::kComplete;
  r.consumed = after;
  return r;
}

BodyPlan plan_body(const Request& head, const Limits& limits) {
  BodyPlan plan;
  auto error = [&](int status, std::string message) {
    plan.error_status = status;
    plan.error = std::move(message);
    return plan;
  };
  bool chunked = false, has_length = false;
  size_t length = 0;
  for (const auto& [k, v] : head.headers) {
    if (k == "transfer-encoding") {
      if (!iequals(trim_ows(v), "chunked") || chunked) return error(501, "only Transfer-Encoding: chunked is accepted");
      chunked = true;
    } else if (k == "content-length") {
      if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return error(400, "Content-Length is not a number");
      }
      const size_t n = std::stoull(v);
      if (has_length && n != length) return error(400, "two different Content-Length headers");
      has_length = true;
      length = n;
    } else if (k == "content-encoding") {
      if (!iequals(trim_ows(v), "identity")) {
        return error(415, "compressed request bodies (Content-Encoding) are not accepted; send the body uncompressed");
      }
    }
  }
  if (chunked && has_length) return error(400, "both Transfer-Encoding and Content-Length");
  if (chunked) {
    plan.kind = BodyPlan::kChunked;
  } else if (has_length && length > 0) {
    if (length > limits.max_body_bytes) {
      return error(413, fmt::format("the request body ({} bytes) is larger than the server accepts ({} bytes, --max-body)",
                                    length, limits.max_body_bytes));
    }
    plan.kind = BodyPlan::kLength;
    plan.length = length;
  }
  return plan;
}

size_t ChunkedDecoder::fail(int status, std::string message) {
  state_ = kFailed;
  error_status_ = status;
  error_ = std::move(message);
  return 0;
}

size_t ChunkedDecoder::feed(std::string_view data, std::string& body) {
  size_t used = 0;
  while (used < data.size() && state_ != kDone && state_ != kFailed) {
    if (state_ == kData) {
      const size_t n = std::min(remaining_, data.size() - used);
      body.append(data.substr(used, n));
      used += n;
      remaining_ -= n;
      if (remaining_ == 0) state_ = kDataEnd;
      continue;
    }
    // Line states: collect up to LF.
    const size_t nl = data.find('\n', used);
    const size_t take = (nl == std::string_view::npos ? data.size() : nl) - used;
    if (line_.size() + take > max_line_) return fail(400, "a chunk-size or trailer line is too long");
    line_.append(data.substr(used, take));
    used += take;
    if (nl == std::string_view::npos) break;
    ++used;  // the LF
    std::string_view line(line_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (state_ == kDataEnd) {
      if (!line.empty()) return fail(400, "a chunk is longer than its size");
      state_ = kSize;
    } else if (state_ == kSize) {
      const std::string_view hex = trim_ows(line.substr(0, line.find(';')));
      if (hex.empty() || hex.size() > 15) return fail(400, "a chunk size is not a hexadecimal number");
      size_t n = 0;
      for (char c : hex) {
        const int d = c >= '0' && c <= '9' ? c - '0' : lower(c) >= 'a' && lower(c) <= 'f' ? lower(c) - 'a' + 10 : -1;
        if (d < 0) return fail(400, "a chunk size is not a hexadecimal number");
        n = n * 16 + static_cast<size_t>(d);
      }
      if (n > max_body_ || body.size() + n > max_body_) {
        return fail(413, fmt::format("the request body is larger than the server accepts ({} bytes, --max-body)", max_body_));
      }
      remaining_ = n;
      state_ = n == 0 ? kTrailer : kData;
    } else if (state_ == kTrailer) {
      if (line.empty()) {
        state_ = kDone;
      } else if (++trailers_ > max_trailers_) {
        return fail(431, "too many trailer lines");
      }
    }
    line_.clear();
  }
  return used;
}

// ---- The server ----

namespace {

std::string peer_address(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

// Sends all of `data` on a non-blocking socket, waiting up to `timeout_ms` for each bit of progress.
bool send_all(int fd, std::string_view data, int timeout_ms) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int rc;
      do {
        rc = ::poll(&p, 1, timeout_ms);
      } while (rc < 0 && errno == EINTR);
      if (rc <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
      continue;
    }
    return false;
  }
  return true;
}

std::string status_line_and_headers(int status, const Headers& headers, bool keep_alive, bool chunked,
                                    size_t content_length) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", status, reason_phrase(status));
  for (const auto& [k, v] : headers) {
    if (k == "content-length" || k == "transfer-encoding" || k == "connection") continue;
    out += k;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  if (chunked) {
    out += "transfer-encoding: chunked\r\n";
  } else {
    out += fmt::format("content-length: {}\r\n", content_length);
  }
  out += keep_alive ? "connection: keep-alive\r\n\r\n" : "connection: close\r\n\r\n";
  return out;
}

class ChunkWriter : public StreamWriter {
 public:
  ChunkWriter(const Request& req, int timeout_ms) : req_(req), timeout_ms_(timeout_ms) {}
  bool write(std::string_view data) override {
    if (failed_) return false;
    if (data.empty()) return !client_gone();
    std::string frame = fmt::format("{:x}\r\n", data.size());
    frame.append(data);
    frame += "\r\n";
    failed_ = !send_all(req_.fd, frame, timeout_ms_);
    return !failed_;
  }
  bool client_gone() const override { return failed_ || req_.client_gone(); }
  bool failed() const { return failed_; }

 private:
  const Request& req_;
  int timeout_ms_;
  bool failed_ = false;
};

}  // namespace

struct Server::Impl {
  struct Route {
    std::string method;
    std::regex pattern;
    Handler handler;
  };

  // A connection while the I/O thread reads its request.
  struct Conn {
    int fd = -1;
    std::string peer;
    std::string buf;  // received and not yet consumed
    Request req;
    enum Phase { kHead, kBody, kDraining } phase = kHead;
    size_t drained = 0;
    BodyPlan plan;
    std::unique_ptr<ChunkedDecoder> chunks;
    Clock::time_point deadline;
    bool started = false;  // a byte of the current request has arrived
    size_t scanned = 0;    // bytes of buf already searched for the head's end
    Clock::time_point since;  // when it began waiting for its current request
  };

  explicit Impl(const Limits& l) : limits(l) {}

  const Limits& limits;
  std::vector<Route> routes;
  std::function<bool(Request&, Response&)> pre_routing;
  std::function<void(const Request&, Response&, std::string_view)> error_handler;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::atomic<bool> stopping{false};

  // Connection counts (accept in the I/O thread, close anywhere).
  std::mutex count_mutex;
  int open_connections = 0;
  std::unordered_map<std::string, int> per_peer;

  // Complete requests waiting for a worker, and connections handed back for their next request.
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::unique_ptr<Conn>> ready, returned;
  std::vector<int> active_fds;  // connections a worker holds (shut down on stop)
  bool workers_stop = false;

  void close_conn(int fd, const std::string& peer) {
    ::close(fd);
    std::lock_guard<std::mutex> lock(count_mutex);
    --open_connections;
    auto it = per_peer.find(peer);
    if (it != per_peer.end() && --it->second <= 0) per_peer.erase(it);
  }

  void wake_io() {
    const char c = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake[1], &c, 1);
  }

  // An answer the server gives itself (errors found while reading), written without blocking for
  // long. The connection then drains: what the client still sends is read and dropped for a moment
  // before the close, since closing a socket with unread input resets it, and a reset can destroy
  // the answer before the client reads it.
  void answer_and_drain(Conn& c, int status, const std::string& message, const Headers& extra = {}) {
    Response res;
    res.status = status;
    res.headers = extra;
    Request& req = c.req;
    req.fd = c.fd;
    if (error_handler) error_handler(req, res, message);
    if (res.body.empty()) res.set_content(message + "\n", "text/plain; charset=utf-8");
    send_all(c.fd, status_line_and_headers(status, res.headers, false, false, res.body.size()) + res.body, 1000);
    ::shutdown(c.fd, SHUT_WR);
    c.phase = Conn::kDraining;
    c.buf.clear();
    c.deadline = Clock::now() + std::chrono::milliseconds(kDrainMs);
  }

  static constexpr int kDrainMs = 2000;
  static constexpr int kStaleMs = 1000;
  static constexpr size_t kDrainBytes = 16u << 20;

  // Reads and drops what a draining connection receives; true while it should stay open.
  bool drain(Conn& c) {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.drained += static_cast<size_t>(n);
        if (c.drained > kDrainBytes) return false;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }

  void start_request(Conn& c, Clock::time_point now, int wait_ms) {
    c.req = Request();
    c.req.remote_addr = c.peer;
    c.phase = Conn::kHead;
    c.plan = BodyPlan();
    c.chunks.reset();
    c.scanned = 0;
    c.since = Clock::now();  // not the loop's time: connections accepted together keep their order
    c.started = !c.buf.empty();
    c.deadline = now + std::chrono::milliseconds(c.started ? limits.head_timeout_ms : wait_ms);
  }

  // Advances a connection's parse with the bytes it holds. Returns true when its request is complete
  // (then it goes to a worker), false to keep reading; on an error the connection is answered and
  // closed (fd = -1).
  bool advance(Conn& c, Clock::time_point now) {
    if (c.phase == Conn::kHead) {
      if (!c.started && !c.buf.empty()) {
        c.started = true;
        c.deadline = now + std::chrono::milliseconds(limits.head_timeout_ms);
      }
      // Parse only once the blank line is there: a head that trickles in byte by byte is searched
      // once in all, not once per byte.
      const size_t from = c.scanned > 3 ? c.scanned - 3 : 0;
      const bool ended = c.buf.find("\n\n", from) != std::string::npos || c.buf.find("\n\r\n", from) != std::string::npos;
      c.scanned = c.buf.size();
      if (!ended && c.buf.size() <= limits.max_head_bytes + 16) return false;
      const HeadResult h = parse_head(c.buf, limits, c.req);
      if (h.status == HeadResult::kIncomplete) return false;
      if (h.status == HeadResult::kError) {
        answer_and_drain(c, h.error_status, h.error);
        return false;
      }
      c.buf.erase(0, h.consumed);
      c.plan = plan_body(c.req, limits);
      if (c.plan.error_status) {
        answer_and_drain(c, c.plan.error_status, c.plan.error);
        return false;
      }
      c.phase = Conn::kBody;
      c.deadline = now + std::chrono::milliseconds(limits.body_timeout_ms);
      if (c.plan.kind == BodyPlan::kChunked) c.chunks = std::make_unique<ChunkedDecoder>(limits.max_body_bytes);
      if (c.plan.kind != BodyPlan::kNone && has_token(c.req.header("expect"), "100-continue")) {
        send_all(c.fd, "HTTP/1.1 100 Continue\r\n\r\n", 1000);
      }
    }
    if (c.plan.kind == BodyPlan::kLength) {
      const size_t take = std::min(c.plan.length - c.req.body.size(), c.buf.size());
      c.req.body.append(c.buf, 0, take);
      c.buf.erase(0, take);
      return c.req.body.size() == c.plan.length;
    }
    if (c.plan.kind == BodyPlan::kChunked) {
      const size_t used = c.chunks->feed(c.buf, c.req.body);
      c.buf.erase(0, used);
      if (c.chunks->error_status()) {
        answer_and_drain(c, c.chunks->error_status(), c.chunks->error());
        return false;
      }
      return c.chunks->done();
    }
    return true;
  }

  // Reads what the socket holds (without blocking). False when the peer closed or the socket broke.
  bool read_some(Conn& c) {
    char buf[16384];
    // Never hold much more than a head, or the rest of a body, unparsed: the parse refuses the excess.
    const size_t cap = c.phase == Conn::kHead ? limits.max_head_bytes + sizeof buf : limits.max_body_bytes + sizeof buf;
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.buf.append(buf, static_cast<size_t>(n));
        if (c.buf.size() > cap) return true;  // advance() will refuse it
        continue;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }

  // Closes the connection (of `peer`, when given) that has waited longest, and at least a second, for
  // its request to complete. False when there is none (all are younger or with a worker).
  bool evict_stalest(std::vector<std::unique_ptr<Conn>>& conns, const std::string* peer) {
    // A connection younger than this is not stale: its request may be on its way.
    const auto young = Clock::now() - std::chrono::milliseconds(kStaleMs);
    Conn* stalest = nullptr;
    for (auto& c : conns) {
      if (!c || c->fd < 0 || c->phase == Conn::kDraining || (peer && c->peer != *peer) || c->since > young) continue;
      if (!stalest || c->since < stalest->since) stalest = c.get();
    }
    if (!stalest) return false;
    // A connection just accepted may hold a request not read yet: it is answered, not dropped.
    if (!stalest->started && read_some(*stalest) && !stalest->buf.empty()) stalest->started = true;
    if (stalest->started) {
      answer_and_drain(*stalest, 503, "this connection was closed to make room for others; retry", {{"retry-after", "1"}});
    } else {
      close_conn(stalest->fd, stalest->peer);
      stalest->fd = -1;
    }
    return true;
  }

  // Accepts every waiting connection; false when the process is out of descriptors.
  bool accept_all(std::vector<std::unique_ptr<Conn>>& conns, Clock::time_point now) {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->peer = peer_address(ss);
      bool over_all = false, over_mine = false;
      {
        std::lock_guard<std::mutex> lock(count_mutex);
        ++open_connections;
        const int mine = ++per_peer[c->peer];
        over_all = open_connections > limits.max_connections;
        over_mine = mine > limits.max_connections_per_client;
      }
      // Past a limit, the connection that has waited longest without completing a request (its own
      // client's when that client is over its share) makes room: sockets that are slow or idle can
      // never lock out a new request. Only when every connection is busy with a request is the new
      // one refused.
      if ((over_all || over_mine) && !evict_stalest(conns, over_mine ? &c->peer : nullptr)) {
        answer_and_drain(*c, 503, "too many connections; retry shortly", {{"retry-after", "1"}});
        conns.push_back(std::move(c));
        continue;
      }
      start_request(*c, now, limits.head_timeout_ms);
      conns.push_back(std::move(c));
    }
  }

  void io_loop() {
    std::vector<std::unique_ptr<Conn>> conns;
    std::deque<std::unique_ptr<Conn>> fresh;
    std::vector<pollfd> fds;
    auto accept_paused_until = Clock::now();
    while (!stopping.load()) {
      auto now = Clock::now();
      {
        std::lock_guard<std::mutex> lock(queue_mutex);
        fresh.swap(returned);
      }
      // A returned connection may already hold its next (pipelined) request.
      for (auto& c : fresh) {
        start_request(*c, now, limits.idle_timeout_ms);
        if (!c->buf.empty() && advance(*c, now)) {
          dispatch(c);
        } else if (c->fd >= 0) {
          conns.push_back(std::move(c));
        }
      }
      fresh.clear();

      const bool accepting = now >= accept_paused_until;
      fds.assign({{wake[0], POLLIN, 0}, {listen_fd, static_cast<short>(accepting ? POLLIN : 0), 0}});
      auto next = accepting ? now + std::chrono::hours(1) : accept_paused_until;
      for (const auto& c : conns) {
        fds.push_back({c->fd, POLLIN | POLLRDHUP, 0});
        next = std::min(next, c->deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
      const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(wait + 1, 0, 60000)));
      if (rc < 0 && errno != EINTR) break;
      now = Clock::now();
      if (fds[0].revents & POLLIN) {
        char drain[64];
        while (::read(wake[0], drain, sizeof drain) > 0) {
        }
      }
      if (stopping.load()) break;
      for (size_t i = 0; i < conns.size(); ++i) {
        auto& c = conns[i];
        const short ev = fds[i + 2].revents;
        if (c->phase == Conn::kDraining) {
          if (((ev & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)) && !drain(*c)) || now >= c->deadline) {
            close_conn(c->fd, c->peer);
            c->fd = -1;
          }
          continue;
        }
        if (ev & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)) {
          const bool open = read_some(*c);
          if (advance(*c, now)) {
            dispatch(c);
            continue;
          }
          if (c->phase == Conn::kDraining) continue;
          if (c->fd >= 0 && !open) {
            close_conn(c->fd, c->peer);
            c->fd = -1;
          }
        }
        if (c->fd >= 0 && now >= c->deadline) {
          if (c->started) {
            answer_and_drain(*c, 408, c->phase == Conn::kHead ? "the request head did not arrive in time"
                                                               : "the request body did not arrive in time");
          } else {
            close_conn(c->fd, c->peer);  // an idle connection: closed quietly
            c->fd = -1;
          }
        }
      }
      if ((fds[1].revents & POLLIN) && !accept_all(conns, now)) {
        accept_paused_until = now + std::chrono::milliseconds(100);  // out of descriptors: try again shortly
      }
      std::erase_if(conns, [](const auto& c) { return !c || c->fd < 0; });
    }
    for (auto& c : conns) {
      if (c && c->fd >= 0) close_conn(c->fd, c->peer);
    }
  }

  // A complete request: to a worker, or 503 when too many wait already.
  void dispatch(std::unique_ptr<Conn>& c) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      if (static_cast<int>(ready.size()) < limits.max_waiting) {
        ready.push_back(std::move(c));
        queue_cv.notify_one();
        return;
      }
    }
    answer_and_drain(*c, 503, "the server is busy; retry shortly", {{"retry-after", "1"}});
  }

  void handle(Conn& c, Response& res) {
    Request& req = c.req;
    req.fd = c.fd;
    try {
      if (pre_routing && pre_routing(req, res)) return;
      bool path_known = false;
      for (const auto& r : routes) {
        std::smatch m;
        if (!std::regex_match(req.path, m, r.pattern)) continue;
        path_known = true;
        if (r.method != req.method) continue;
        req.matches.assign(m.begin() + 1, m.end());
        r.handler(req, res);
        return;
      }
      res.status = path_known ? 405 : 404;
    } catch (const std::exception& e) {
      res = Response();
      res.status = 500;
      res.set_content(std::string("internal error: ") + e.what() + "\n", "text/plain; charset=utf-8");
    }
  }

  void worker() {
    for (;;) {
      std::unique_ptr<Conn> c;
      {
        std::unique_lock<std::mutex> lock(queue_mutex);
        queue_cv.wait(lock, [&] { return workers_stop || !ready.empty(); });
        if (ready.empty()) return;
        c = std::move(ready.front());
        ready.pop_front();
        active_fds.push_back(c->fd);
      }
      const Request& req = c->req;
      bool keep_alive = req.version == "HTTP/1.1" ? !has_token(req.header("connection"), "close")
                                                  : has_token(req.header("connection"), "keep-alive");
      Response res;
      const auto t0 = std::chrono::steady_clock::now();
      handle(*c, res);
      if (!res.stream && res.status >= 400 && res.body.empty() && error_handler) error_handler(req, res, "");
      bool ok = true;
      if (res.stream) {
        ok = send_all(c->fd, status_line_and_headers(res.status, res.headers, keep_alive, true, 0), limits.write_timeout_ms);
        if (ok) {
          ChunkWriter w(req, limits.write_timeout_ms);
          try {
            res.stream(w);
          } catch (const std::exception&) {
            ok = false;  // mid-body: nothing sensible to send; close
          }
          ok = ok && !w.failed() && send_all(c->fd, "0\r\n\r\n", limits.write_timeout_ms);
        }
      } else {
        if (req.method == "HEAD") res.body.clear();
        ok = send_all(c->fd, status_line_and_headers(res.status, res.headers, keep_alive, false, res.body.size()) + res.body,
                      limits.write_timeout_ms);
      }
      // One line per request at info level (zinc serve --log-level info); completions add their own.
      spdlog::info("{} {} {} {:.0f} ms{}", req.method, terminal_safe(req.path), res.status,
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                   ok ? "" : " (client gone)");
      {
        std::lock_guard<std::mutex> lock(queue_mutex);
        std::erase(active_fds, c->fd);
      }
      if (ok && keep_alive && !stopping.load() && !req.client_gone()) {
        std::lock_guard<std::mutex> lock(queue_mutex);
        returned.push_back(std::move(c));
        wake_io();
      } else {
        ::shutdown(c->fd, SHUT_RDWR);
        close_conn(c->fd, c->peer);
      }
    }
  }
};

Server::Server(Limits limits) : limits_(limits), impl_(std::make_unique<Impl>(limits_)) {
  if (::pipe2(impl_->wake, O_NONBLOCK | O_CLOEXEC) != 0) throw Error("cannot create the server's wake-up pipe");
}

Server::~Server() {
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
  for (int fd : impl_->wake) {
    if (fd >= 0) ::close(fd);
  }
}

void Server::route(std::string method, std::string pattern, Handler handler) {
  impl_->routes.push_back({std::move(method), std::regex(pattern), std::move(handler)});
}

void Server::set_pre_routing(std::function<bool(Request&, Response&)> handler) { impl_->pre_routing = std::move(handler); }

void Server::set_error_handler(std::function<void(const Request&, Response&, std::string_view)> handler) {
  impl_->error_handler = std::move(handler);
}

int Server::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    throw Error(fmt::format("cannot listen on {}:{}: {}", host, port, ::gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR lets a restarted server take its port while old connections linger in TIME_WAIT;
    // it does not let two servers listen on one port (SO_REUSEPORT would, and is not set).
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 512) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      const int bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                         : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      ::freeaddrinfo(res);
      if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
      impl_->listen_fd = fd;
      return bound;
    }
    why = errno == EADDRINUSE ? "the address is already in use (is another server running on this port?)" : std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  throw Error(fmt::format("cannot listen on {}:{}: {}", host, port, why));
}

void Server::run() {
  if (impl_->listen_fd < 0) throw Error("the server is not bound to an address");
  std::vector<std::thread> workers;
  for (int i = 0; i < std::max(1, limits_.workers); ++i) workers.emplace_back([this] { impl_->worker(); });
  impl_->io_loop();
  {
    std::lock_guard<std::mutex> lock(impl_->queue_mutex);
    impl_->workers_stop = true;
    // Requests not started are dropped; those in progress see their connection shut down.
    for (auto& c : impl_->ready) impl_->close_conn(c->fd, c->peer);
    impl_->ready.clear();
    for (int fd : impl_->active_fds) ::shutdown(fd, SHUT_RDWR);
  }
  impl_->queue_cv.notify_all();
  for (auto& t : workers) t.join();
  for (auto& c : impl_->returned) impl_->close_conn(c->fd, c->peer);
  impl_->returned.clear();
  ::close(impl_->listen_fd);
  impl_->listen_fd = -1;
}

void Server::stop() {
  impl_->stopping.store(true);
  impl_->wake_io();
}

}  // namespace zinc::server::http
