// The HTTP/1.1 layer under `zinc serve`: a server that no request, slow socket or crowd of idle
// connections can crash, starve or fill memory with.
//
// One I/O thread owns every connection while its request arrives: it polls all of them, reads what is
// there without blocking, and enforces the limits (head bytes, header count, a deadline for the whole
// head and for the whole body, body size, connections in all and per client address). Only a complete
// request reaches a worker thread, so sockets that send one header line every few seconds cost a
// buffer each, never a worker. Workers run the handler and write the response (with a deadline for
// each write, so a client that stops reading is closed); a kept-alive connection then goes back to
// the I/O thread for its next request. Compressed request bodies are refused (415) rather than
// inflated past the body limit. Handlers of long requests ask Request::client_gone() to stop work
// nobody will read.
//
// The request-head parser and the chunked-body decoder are plain functions of bytes (fuzzed in
// tests/server).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zinc::server::http {

struct Limits {
  size_t max_body_bytes = 8u << 20;   // decoded body (Content-Length or the sum of chunks)
  size_t max_head_bytes = 64u << 10;  // request line and headers together
  int max_headers = 100;
  int head_timeout_ms = 10000;        // from the first byte of a request (or the connection) to its blank line
  int body_timeout_ms = 60000;        // from the end of the head to the last byte of the body
  int idle_timeout_ms = 30000;        // a kept-alive connection may wait this long for its next request
  int write_timeout_ms = 30000;       // a response write that makes no progress this long closes the connection
  int max_connections = 1024;
  int max_connections_per_client = 64;  // per remote address
  int workers = 64;                   // requests handled at once (a stream holds one until it ends)
  int max_waiting = 1024;             // complete requests waiting for a worker; more are answered 503
};

using Headers = std::vector<std::pair<std::string, std::string>>;  // names in lower case, in arrival order

struct Request {
  std::string method, target, path, query, version;  // target = path[?query]; version "HTTP/1.1" or "HTTP/1.0"
  Headers headers;
  std::string body;
  std::string remote_addr;
  std::vector<std::string> matches;  // the route's capture groups

  // The first value of a header ("" when absent); `name` in lower case.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // True once the client has closed its side of the connection or it broke: a handler that works for
  // long without writing (a non-streamed completion) polls it and stops.
  bool client_gone() const;

  int fd = -1;  // the connection (the server's)
};

// Writes a streamed response body as chunks. write() returns false once the client is gone or too
// slow to read (then the handler stops).
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual bool write(std::string_view data) = 0;
  virtual bool client_gone() const = 0;
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  // When set, the status and headers go out first and this writes the body (Transfer-Encoding: chunked).
  std::function<void(StreamWriter&)> stream;

  void set_header(std::string name, std::string value);
  std::string header(std::string_view name) const;
  void set_content(std::string content, std::string content_type);
};

// ---- Parsing (pure) ----

// A request head at the start of `buffer`: kIncomplete until its blank line arrives; kComplete with
// `consumed` bytes (the head) and `out` filled (method, target, path, query, version, headers); or
// kError with the status to answer (400, 413, 415, 431, 501, 505) and a message.
struct HeadResult {
  enum Status { kIncomplete, kComplete, kError } status = kIncomplete;
  size_t consumed = 0;
  int error_status = 0;
  std::string error;
};
HeadResult parse_head(std::string_view buffer, const Limits& limits, Request& out);

// How the body of a parsed head arrives: none, a length, or chunks. Errors as for parse_head.
struct BodyPlan {
  enum Kind { kNone, kLength, kChunked } kind = kNone;
  size_t length = 0;
  int error_status = 0;
  std::string error;
};
BodyPlan plan_body(const Request& head, const Limits& limits);

// Transfer-Encoding: chunked, decoded incrementally: feed() takes bytes as they arrive and appends the
// data to `body`; done() once the last chunk and the trailers are in. Errors (malformed framing, a
// body over the limit) leave error_status set (400 or 413).
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(size_t max_body, size_t max_line = 4096, int max_trailers = 100)
      : max_body_(max_body), max_line_(max_line), max_trailers_(max_trailers) {}
  // Consumes what it can of `data`; returns the bytes consumed (all of them unless done or failed).
  size_t feed(std::string_view data, std::string& body);
  bool done() const { return state_ == kDone; }
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }

 private:
  enum State { kSize, kData, kDataEnd, kTrailer, kDone, kFailed } state_ = kSize;
  size_t fail(int status, std::string message);
  size_t max_body_, max_line_;
  int max_trailers_, trailers_ = 0;
  size_t remaining_ = 0;
  std::string line_;
  int error_status_ = 0;
  std::string error_;
};

// The reason phrase of a status code ("OK", "Not Found", ...).
const char* reason_phrase(int status);

// ---- The server ----

class Server {
 public:
  using Handler = std::function<void(Request&, Response&)>;

  explicit Server(Limits limits);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // `pattern` is a regular expression matched against the whole path; its groups land in
  // Request::matches.
  void route(std::string method, std::string pattern, Handler handler);
  // Runs before routing; returning true means it answered (the route is not called).
  void set_pre_routing(std::function<bool(Request&, Response&)> handler);
  // Fills the body of an answer the server gives itself (404, 408, 413, 415, 431, 503...; `message`
  // says why) or of a handler's answer left without one (`message` empty).
  void set_error_handler(std::function<void(const Request&, Response&, std::string_view message)> handler);

  // Listens on host:port (port 0: any free port) and returns the port. No SO_REUSEPORT: a second
  // server on a port in use fails here. Throws zinc::Error with the reason.
  int bind(const std::string& host, int port);
  // Serves until stop(); returns after every connection is closed and every worker has finished.
  void run();
  // Asks run() to return. Safe from a signal handler (one write to a pipe).
  void stop();

  const Limits& limits() const { return limits_; }

 private:
  struct Impl;
  Limits limits_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zinc::server::http
