#include "server/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <array>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "chat/output_parser.h"
#include "core/error.h"
#include "runtime/chat_session.h"
#include "server/openai.h"
#include "server/web_page.h"

namespace zinc::server {

using nlohmann::json;

namespace {

// Prometheus histogram with fixed bucket bounds (seconds).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t total = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
  void observe(double v) {
    for (size_t i = 0; i < bounds.size(); ++i) counts[i] += v <= bounds[i];
    sum += v;
    ++total;
  }
  std::string text(const std::string& name, const std::string& help) const {
    std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    for (size_t i = 0; i < bounds.size(); ++i) out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], counts[i]);
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, total, name, sum, name, total);
    return out;
  }
};

struct Metrics {
  std::mutex mutex;
  uint64_t requests = 0, errors = 0, prompt_tokens = 0, generated_tokens = 0, cancelled = 0;
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram per_token{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
};

std::string sse(const ordered_json& j) { return "data: " + j.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n\n"; }

}  // namespace

struct Server::Impl {
  const gguf::File& file;
  const tokenizer::Tokenizer& tok;
  chat::ChatTemplate tmpl;
  chat::OutputFormat format;
  ServerOptions opts;
  Engine engine;
  httplib::Server http;
  Metrics metrics;
  int64_t started = 0;

  Impl(const gguf::File& f, const tokenizer::Tokenizer& t, chat::ChatTemplate tp, EngineOptions eo, ServerOptions so)
      : file(f),
        tok(t),
        tmpl(std::move(tp)),
        format(chat::detect_output_format(tmpl.source())),
        opts(std::move(so)),
        engine(f, t, std::move(eo)) {
    started = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    routes();
  }

  static void reply_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status();
    res.set_content(e.body().dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  static json parse_body(const httplib::Request& req) {
    try {
      return json::parse(req.body);
    } catch (const json::exception& e) {
      throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
    }
  }

  bool authorized(const httplib::Request& req) const {
    if (opts.api_key.empty()) return true;
    return req.get_header_value("Authorization") == "Bearer " + opts.api_key;
  }

  std::string allowed_origin(const httplib::Request& req) const {
    const auto origin = req.get_header_value("Origin");
    for (const auto& o : opts.cors_origins) {
      if (o == "*" || o == origin) return o == "*" ? "*" : origin;
    }
    return "";
  }

  void check_model(const CompletionRequest& r) const {
    if (!r.model.empty() && r.model != opts.model_id) {
      throw ApiError(404, fmt::format("The model '{}' does not exist; this server has '{}'", r.model, opts.model_id),
                     "invalid_request_error", "model", "model_not_found");
    }
  }

  // The prompt's tokens; `opens_reasoning` tells whether a chat template started the reasoning block.
  std::vector<int32_t> prompt_tokens(const CompletionRequest& r, bool* opens_reasoning) const {
    std::vector<int32_t> ids;
    *opens_reasoning = false;
    if (r.chat) {
      chat::ChatRequest cr;
      cr.messages = r.messages;
      cr.tools = r.tools;
      cr.add_generation_prompt = true;
      cr.enable_thinking = r.enable_thinking ? r.enable_thinking : opts.enable_thinking;
      cr.extra = r.template_vars;
      std::string text;
      try {
        text = tmpl.render(cr);
      } catch (const Error& e) {
        throw ApiError(400, fmt::format("the chat template rejected the conversation: {}", e.what()));
      }
      ids = runtime::tokenize_prompt(tok, text);
      *opens_reasoning = chat::prompt_opens_reasoning(text);
    } else {
      ids = tok.encode(r.prompt, true, true);
    }
    if (ids.empty()) throw ApiError(400, "the prompt is empty", "invalid_request_error", r.chat ? "messages" : "prompt");
    if (static_cast<int64_t>(ids.size()) >= engine.n_ctx()) {
      throw ApiError(400,
                     fmt::format("the prompt has {} tokens; the context holds {} (and needs room for an answer)", ids.size(),
                                 engine.n_ctx()),
                     "invalid_request_error", r.chat ? "messages" : "prompt", "context_length_exceeded");
    }
    return ids;
  }

  // Text of a token as the API shows it (its bytes as the detokenizer would produce them).
  std::string token_text(int32_t id) const { return tok.token_to_piece(id, false); }

  void fill_logprob_texts(CompletionResult& c) const {
    for (const auto& lp : c.gen.logprobs) {
      c.token_texts.push_back(token_text(lp.chosen.token));
      std::vector<std::string> tops;
      for (const auto& t : lp.top) tops.push_back(token_text(t.token));
      c.top_texts.push_back(std::move(tops));
    }
  }

  void record(const runtime::GenerateResult& r) {
    std::lock_guard<std::mutex> lock(metrics.mutex);
    metrics.prompt_tokens += static_cast<uint64_t>(r.prompt_tokens);
    metrics.generated_tokens += r.tokens.size();
    if (!r.tokens.empty()) {
      metrics.ttft.observe(r.first_token_s);
      metrics.per_token.observe(r.decode_s / static_cast<double>(r.tokens.size()));
    }
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    {
      std::lock_guard<std::mutex> lock(metrics.mutex);
      ++metrics.requests;
    }
    const json body = parse_body(req);
    CompletionRequest r = chat ? parse_chat_request(body, opts.defaults) : parse_completion_request(body, opts.defaults);
    check_model(r);
    bool opens_reasoning = false;
    auto prompt = prompt_tokens(r, &opens_reasoning);
    runtime::GenerateOptions g;
    g.max_tokens = r.max_tokens;
    g.stop = r.stop;
    g.top_logprobs = r.logprobs ? r.top_logprobs : -1;
    g.context_shift = opts.context_shift;
    g.n_keep = opts.n_keep;
    g.decode.at_start = chat;  // a completion continues its prompt's text
    auto job = std::make_shared<Job>(std::move(prompt), r.sampling, g);
    if (!engine.submit(job)) {
      res.set_header("Retry-After", "1");
      throw ApiError(503, "the server is busy: every slot is working and the queue is full; retry shortly",
                     "server_busy_error");
    }
    auto result = std::make_shared<CompletionResult>();
    result->id = random_id(chat ? "chatcmpl-" : "cmpl-");
    result->model = opts.model_id;
    result->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    chat::OutputParserOptions popts;
    popts.format = chat ? format : chat::OutputFormat::Plain;
    popts.starts_in_reasoning = opens_reasoning;  // the template opened the reasoning block

    if (!r.stream) {
      chat::OutputParser parser(popts);
      std::string piece;
      while (job->next(piece)) {
        if (!piece.empty()) result->message += parser.push(piece);
      }
      result->message += parser.finish();
      if (!job->error().empty()) throw ApiError(job->error_status() == 499 ? 400 : job->error_status(), job->error());
      result->gen = job->result();
      record(result->gen);
      if (r.logprobs) fill_logprob_texts(*result);
      const ordered_json out = chat ? chat_completion_json(*result, r.logprobs) : text_completion_json(*result, r.logprobs);
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto stream = std::make_shared<StreamTranslator>(*result, chat, popts);
    auto role_sent = std::make_shared<bool>(false);
    // The client went away: stop generating (the slot frees at its next step) and count it once.
    auto gone = std::make_shared<std::function<void()>>([this, job, counted = std::make_shared<std::atomic<bool>>(false)] {
      job->cancel();
      if (!counted->exchange(true)) {
        std::lock_guard<std::mutex> lock(metrics.mutex);
        ++metrics.cancelled;
      }
    });
    const bool include_usage = r.include_usage;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, result, stream, role_sent, gone, include_usage](size_t, httplib::DataSink& sink) {
          auto write_all = [&](const std::vector<ordered_json>& chunks) {
            for (const auto& c : chunks) {
              const std::string s = sse(c);
              if (!sink.write(s.data(), s.size())) return false;
            }
            return true;
          };
          if (!*role_sent) {
            *role_sent = true;
            if (!write_all(stream->start())) {
              (*gone)();
              return false;
            }
          }
          std::string piece;
          if (job->next(piece, 200)) {
            if ((!piece.empty() && !write_all(stream->push(piece))) || (sink.is_writable && !sink.is_writable())) {
              (*gone)();
              return false;
            }
            return true;
          }
          if (!job->error().empty()) {
            const int status = job->error_status() == 499 ? 400 : job->error_status();
            write_all({ApiError(status, job->error(), status >= 500 ? "server_error" : "invalid_request_error").body()});
          } else {
            write_all(stream->finish(job->result(), include_usage));
            record(result->gen);
          }
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        },
        [job, gone](bool success) {
          if (!success && !job->finished()) (*gone)();
        });
  }

  void routes() {
    http.new_task_queue = [n = opts.http_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    http.set_payload_max_length(opts.max_body_bytes);
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const auto origin = allowed_origin(req);
      if (!origin.empty()) {
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Vary", "Origin");
      }
      if (req.method == "OPTIONS") {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
      const bool open = req.path == "/" || req.path == "/health";
      if (!open && !authorized(req)) {
        reply_error(res, ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", "invalid_request_error",
                                  "", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    auto guarded = [this](auto fn) {
      return [this, fn](const httplib::Request& req, httplib::Response& res) {
        try {
          fn(req, res);
        } catch (const ApiError& e) {
          reply_error(res, e);
          std::lock_guard<std::mutex> lock(metrics.mutex);
          ++metrics.errors;
        } catch (const Error& e) {
          reply_error(res, ApiError(400, e.what()));
          std::lock_guard<std::mutex> lock(metrics.mutex);
          ++metrics.errors;
        }
      };
    };
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(web_page_html()), "text/html; charset=utf-8");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const auto s = engine.stats();
      res.set_content(json{{"status", "ok"}, {"slots_idle", s.n_slots - s.busy_slots}, {"slots_busy", s.busy_slots},
                           {"queued", s.queued}}.dump(),
                      "application/json");
    });
    auto model_json = [this] {
      return json{{"id", opts.model_id},
                  {"object", "model"},
                  {"created", started},
                  {"owned_by", "zinc"},
                  {"meta", {{"n_ctx", engine.n_ctx()}, {"architecture", file.get_or<std::string>("general.architecture", "")}}}};
    };
    http.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
      res.set_content(json{{"object", "list"}, {"data", json::array({model_json()})}}.dump(), "application/json");
    });
    http.Get(R"(/v1/models/(.+))", guarded([this, model_json](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != opts.model_id) {
        throw ApiError(404, fmt::format("The model '{}' does not exist", req.matches[1].str()), "invalid_request_error",
                       "model", "model_not_found");
      }
      res.set_content(model_json().dump(), "application/json");
    }));
    http.Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
      completion(req, res, true);
    }));
    http.Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
      completion(req, res, false);
    }));
    http.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
      const json body = parse_body(req);
      if (!body.is_object() || !body.contains("content") || !body["content"].is_string()) {
        throw ApiError(400, "'content': must be a string", "invalid_request_error", "content");
      }
      const bool add_special = body.value("add_special", false), parse_special = body.value("parse_special", true);
      const auto ids = tok.encode(body["content"].get<std::string>(), add_special, parse_special);
      json out = {{"tokens", ids}};
      if (body.value("with_pieces", false)) {
        json pieces = json::array();
        for (int32_t id : ids) pieces.push_back({{"id", id}, {"piece", token_text(id)}});
        out["tokens"] = pieces;
      }
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    }));
    http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
      const json body = parse_body(req);
      if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
        throw ApiError(400, "'tokens': must be an array of token ids", "invalid_request_error", "tokens");
      }
      std::vector<int32_t> ids;
      for (const auto& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= static_cast<int64_t>(tok.vocab().size())) {
          throw ApiError(400, fmt::format("'tokens': {} is not a token id (0..{})", t.dump(), tok.vocab().size() - 1),
                         "invalid_request_error", "tokens");
        }
        ids.push_back(t.get<int32_t>());
      }
      res.set_content(json{{"content", tok.decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    }));
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const auto s = engine.stats();
      std::lock_guard<std::mutex> lock(metrics.mutex);
      std::string out;
      auto counter = [&](const char* name, const char* help, uint64_t v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
      };
      auto gauge = [&](const char* name, const char* help, int v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
      };
      counter("zinc_requests_total", "Completion requests received.", metrics.requests);
      counter("zinc_request_errors_total", "Requests answered with an error.", metrics.errors);
      counter("zinc_requests_cancelled_total", "Requests whose client went away before the end.", metrics.cancelled);
      counter("zinc_prompt_tokens_total", "Prompt tokens of finished requests.", metrics.prompt_tokens);
      counter("zinc_generated_tokens_total", "Tokens generated.", metrics.generated_tokens);
      gauge("zinc_queue_depth", "Requests waiting for a slot.", s.queued);
      gauge("zinc_slots_busy", "Slots generating.", s.busy_slots);
      gauge("zinc_slots_total", "Slots.", s.n_slots);
      out += metrics.ttft.text("zinc_time_to_first_token_seconds", "From request start to the first token.");
      out += metrics.per_token.text("zinc_time_per_output_token_seconds", "Decode time per generated token.");
      res.set_content(out, "text/plain; version=0.0.4");
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // an API error already written
      std::string message = fmt::format("{} {} failed with status {}", req.method, req.path, res.status);
      if (res.status == 404) message = fmt::format("no endpoint {} {}", req.method, req.path);
      if (res.status == 413) message = "the request body is larger than the server accepts (--max-body)";
      reply_error(res, ApiError(res.status, message, res.status >= 500 ? "server_error" : "invalid_request_error"));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      reply_error(res, ApiError(500, what, "server_error"));
    });
  }
};

Server::Server(const gguf::File& file, const tokenizer::Tokenizer& tok, chat::ChatTemplate tmpl, EngineOptions engine,
               ServerOptions options)
    : impl_(std::make_unique<Impl>(file, tok, std::move(tmpl), std::move(engine), std::move(options))) {}

Server::~Server() = default;

int Server::bind() {
  auto& o = impl_->opts;
  const int port = o.port == 0 ? impl_->http.bind_to_any_port(o.host) : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) throw Error(fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)", o.host, o.port));
  o.port = port;
  return port;
}

void Server::run() { impl_->http.listen_after_bind(); }

void Server::stop() { impl_->http.stop(); }

}  // namespace zinc::server
