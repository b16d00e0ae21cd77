// The HTTP layer's parsers on hand-written requests: what a complete head is, each limit and the status
// it answers, body framing (length, chunks, the combinations that smuggle requests), and chunked
// decoding whatever the split of the bytes.
#include <gtest/gtest.h>

#include <string>

#include "server/http.h"

namespace zinc::server::http {
namespace {

HeadResult parse(const std::string& text, Request& r, Limits l = {}) { return parse_head(text, l, r); }

TEST(HttpHead, ParsesARequestAndLeavesTheBody) {
  Request r;
  const std::string text = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type:  text/plain \r\n\r\n{}";
  const HeadResult h = parse(text, r);
  ASSERT_EQ(h.status, HeadResult::kComplete) << h.error;
  EXPECT_EQ(h.consumed, text.size() - 2);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/chat/completions");
  EXPECT_EQ(r.query, "x=1");
  EXPECT_EQ(r.version, "HTTP/1.1");
  EXPECT_EQ(r.header("content-type"), "text/plain");
  EXPECT_EQ(r.header("host"), "a");
  EXPECT_FALSE(r.has_header("Host"));  // names are stored in lower case
}

TEST(HttpHead, WaitsForTheBlankLineAndAcceptsBareLineFeeds) {
  Request r;
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\n", r).status, HeadResult::kIncomplete);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\n\r", r).status, HeadResult::kIncomplete);
  const HeadResult h = parse("\r\nGET /health HTTP/1.0\nHost: a\n\n", r);
  ASSERT_EQ(h.status, HeadResult::kComplete) << h.error;
  EXPECT_EQ(r.path, "/health");
  EXPECT_EQ(r.version, "HTTP/1.0");
}

TEST(HttpHead, RefusesWhatItCannotTrust) {
  struct Case {
    std::string text;
    int status;
  } cases[] = {
      {"GET /\r\n\r\n", 400},                                   // no version
      {"GET / HTTP/2.0\r\n\r\n", 505},                          // another version
      {"GET  / HTTP/1.1\r\n\r\n", 400},                         // two spaces
      {"GET x HTTP/1.1\r\n\r\n", 400},                          // not a path
      {"G(T / HTTP/1.1\r\n\r\n", 400},                          // method not a token
      {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400},   // obsolete line folding
      {"GET / HTTP/1.1\r\nNo colon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad name: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\x01z\r\n\r\n", 400},             // control character in a value
      {"GET /\x7f HTTP/1.1\r\n\r\n", 400},
  };
  for (const auto& c : cases) {
    Request r;
    const HeadResult h = parse(c.text, r);
    EXPECT_EQ(h.status, HeadResult::kError) << c.text;
    EXPECT_EQ(h.error_status, c.status) << c.text << ": " << h.error;
  }
}

TEST(HttpHead, LimitsHeadersAndHeadBytes) {
  Limits l;
  l.max_headers = 3;
  l.max_head_bytes = 200;
  Request r;
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", r, l).status, HeadResult::kComplete);
  HeadResult h = parse("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", r, l);
  EXPECT_EQ(h.error_status, 431);
  EXPECT_NE(h.error.find("more than 3 headers"), std::string::npos) << h.error;
  // Too long, whether or not the blank line has arrived.
  const std::string big = "GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n";
  EXPECT_EQ(parse(big, r, l).error_status, 431);
  EXPECT_EQ(parse(big + "\r\n", r, l).error_status, 431);
}

Request head_with(Headers headers) {
  Request r;
  r.method = "POST";
  r.headers = std::move(headers);
  return r;
}

TEST(HttpBody, FramingAndItsRefusals) {
  Limits l;
  l.max_body_bytes = 100;
  BodyPlan p = plan_body(head_with({{"content-length", "42"}}), l);
  EXPECT_EQ(p.kind, BodyPlan::kLength);
  EXPECT_EQ(p.length, 42u);
  EXPECT_EQ(plan_body(head_with({}), l).kind, BodyPlan::kNone);
  EXPECT_EQ(plan_body(head_with({{"transfer-encoding", "Chunked"}}), l).kind, BodyPlan::kChunked);
  EXPECT_EQ(plan_body(head_with({{"content-length", "101"}}), l).error_status, 413);
  EXPECT_EQ(plan_body(head_with({{"content-length", "99999999999999999999999"}}), l).error_status, 400);
  EXPECT_EQ(plan_body(head_with({{"content-length", "-1"}}), l).error_status, 400);
  EXPECT_EQ(plan_body(head_with({{"content-length", "1"}, {"content-length", "2"}}), l).error_status, 400);
  EXPECT_EQ(plan_body(head_with({{"content-length", "5"}, {"transfer-encoding", "chunked"}}), l).error_status, 400);
  EXPECT_EQ(plan_body(head_with({{"transfer-encoding", "gzip, chunked"}}), l).error_status, 501);
  EXPECT_EQ(plan_body(head_with({{"content-encoding", "gzip"}, {"content-length", "5"}}), l).error_status, 415);
  EXPECT_EQ(plan_body(head_with({{"content-encoding", "br"}, {"content-length", "5"}}), l).error_status, 415);
  EXPECT_EQ(plan_body(head_with({{"content-encoding", "identity"}, {"content-length", "5"}}), l).kind, BodyPlan::kLength);
}

TEST(HttpChunked, DecodesWhateverTheSplit) {
  const std::string wire = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  for (size_t step = 1; step <= wire.size(); ++step) {
    ChunkedDecoder d(100);
    std::string body;
    size_t used = 0;
    for (size_t i = 0; i < wire.size() && !d.done(); i += step) {
      const std::string_view part = std::string_view(wire).substr(i, step);
      used += d.feed(part, body);
      ASSERT_EQ(d.error_status(), 0) << d.error();
    }
    ASSERT_TRUE(d.done()) << step;
    EXPECT_EQ(body, "hello world") << step;
    EXPECT_EQ(used, wire.size() - 4) << step;  // "NEXT" (a pipelined request) is left
  }
}

TEST(HttpChunked, RefusesBadFramingAndBigBodies) {
  auto status = [](const std::string& wire, size_t max = 10) {
    ChunkedDecoder d(max);
    std::string body;
    d.feed(wire, body);
    EXPECT_LE(body.size(), max);
    return d.error_status();
  };
  EXPECT_EQ(status("zz\r\n"), 400);
  EXPECT_EQ(status("\r\n"), 400);
  EXPECT_EQ(status("3\r\nabcd\r\n"), 400);         // longer than its size
  EXPECT_EQ(status("b\r\n"), 413);                 // one chunk over the limit
  EXPECT_EQ(status("6\r\nabcdef\r\n6\r\n"), 413);  // the sum over the limit
  EXPECT_EQ(status("fffffffffffffffffff\r\n"), 400);
  EXPECT_EQ(status(std::string(5000, '1')), 400);  // a size line without end
}

}  // namespace
}  // namespace zinc::server::http
