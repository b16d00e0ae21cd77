#include "server/server.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <list>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <semaphore>
#include <chrono>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "chat/output_parser.h"
#include "core/error.h"
#include "core/format.h"
#include "server/tool_grammar.h"
#include "core/json_bounded.h"
#include "runtime/chat_session.h"
#include "server/http.h"
#include "server/models.h"
#include "server/anthropic.h"
#include "server/openai.h"
#include "server/responses.h"
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
  Histogram queue_wait{{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
};

std::string sse(const ordered_json& j) { return "data: " + j.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n\n"; }

}  // namespace

struct Server::Impl {
  ServerOptions opts;
  EngineOptions engine_options;
  ModelPool models;  // before http: a stream still running holds a lease of its model
  http::Server http;
  Metrics metrics;
  int64_t started = 0;
  mutable std::counting_semaphore<> render_slots{4};

  Impl(std::unique_ptr<LoadedModel> pinned, EngineOptions eo, ServerOptions so)
      : opts(std::move(so)),
        engine_options(std::move(eo)),
        models(pool_options(opts),
               [this](const std::string& id, const std::filesystem::path& path) {
                 return std::make_unique<LoadedModel>(id, path, engine_options);
               },
               std::move(pinned)),
        http(limits(opts)) {
    started = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    routes();
  }

  static ModelPoolOptions pool_options(const ServerOptions& o) {
    ModelPoolOptions p = o.models;
    p.strict_names = o.strict_model_names;
    return p;
  }

  // The budgets a chat template renders within: a prompt is at most the request body plus the
  // template's own text, and never more than the context can take (64 bytes a token is far above any
  // tokenizer's average).
  chat::jinja::RenderOptions render_options(const LoadedModel& m) const {
    chat::jinja::RenderOptions r;
    auto& l = r.limits;
    l.max_output_bytes = std::max<size_t>({size_t{1} << 20, 2 * opts.max_body_bytes, static_cast<size_t>(m.engine().n_ctx()) * 64});
    l.max_string_bytes = 4 * l.max_output_bytes;
    l.max_heap_values = size_t{1} << 20;
    l.max_heap_objects = size_t{1} << 18;
    return r;
  }

  // The model a request names, loaded if it is not (its lease keeps it loaded while the request runs);
  // the body's keep_alive says how long it stays after.
  std::shared_ptr<LoadedModel> model_for(const std::string& name, const ordered_json& body) {
    std::optional<double> keep_alive;
    if (body.is_object() && body.contains("keep_alive")) keep_alive = parse_keep_alive(body["keep_alive"]);
    return models.acquire(name, keep_alive);
  }

  static http::Limits limits(const ServerOptions& o) {
    http::Limits l;
    l.max_body_bytes = o.max_body_bytes;
    l.workers = o.http_threads;
    return l;
  }

  static void reply_error(http::Response& res, const ApiError& e, bool anthropic = false) {
    res.status = e.status();
    const ordered_json body = anthropic ? anthropic_error_json(e) : e.body();
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }
  // Errors of the Anthropic endpoints take Anthropic's shape.
  static bool anthropic_path(const http::Request& req) { return req.path.starts_with("/v1/messages"); }

  // Request bodies keep their keys' order (a JSON schema's properties are generated in the order given).
  static ordered_json parse_body(const http::Request& req) {
    try {
      return parse_json_bounded<ordered_json>(req.body);
    } catch (const JsonTooDeep& e) {
      throw ApiError(400, fmt::format("the request body is refused: {}", e.what()));
    } catch (const json::exception& e) {
      throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
    }
  }

  bool authorized(const http::Request& req) const {
    if (opts.api_key.empty()) return true;
    // OpenAI's clients send the key as a bearer token, Anthropic's in x-api-key.
    return req.header("authorization") == "Bearer " + opts.api_key || req.header("x-api-key") == opts.api_key;
  }

  // The CORS origin to answer with: "*", the request's Origin when --cors-origin names it or when it
  // is a page served by this machine (http://localhost, 127.0.0.1 or [::1], any port: a local app; a
  // remote page cannot claim these), or "".
  std::string allowed_origin(const http::Request& req) const {
    const auto origin = req.header("origin");
    for (const auto& o : opts.cors_origins) {
      if (o == "*" || o == origin) return o == "*" ? "*" : origin;
    }
    for (const char* local : {"http://localhost", "http://127.0.0.1", "http://[::1]"}) {
      const std::string l = local;
      if (origin == l || (origin.rfind(l + ":", 0) == 0 && origin.size() > l.size() + 1 &&
                          origin.find_first_not_of("0123456789", l.size() + 1) == std::string::npos)) {
        return origin;
      }
    }
    return "";
  }

  // DNS rebinding: a page on evil.example whose name is made to resolve to 127.0.0.1 reaches this
  // server with "Host: evil.example". Names are allowed only when they are this server's own
  // (localhost, the --host name, --allowed-hosts); IP literals always are, since rebinding needs a name.
  bool host_allowed(const std::string& host_header) const {
    if (host_header.empty()) return true;  // HTTP/1.0 clients; every browser sends Host
    std::string h = host_header;
    if (h.front() == '[') {
      h = h.substr(0, h.find(']') + 1);
    } else if (const size_t colon = h.rfind(':'); colon != std::string::npos) {
      h = h.substr(0, colon);
    }
    for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!h.empty() && h.back() == '.') h.pop_back();
    in6_addr a6;
    in_addr a4;
    if (::inet_pton(AF_INET, h.c_str(), &a4) == 1) return true;
    if (h.size() > 2 && h.front() == '[' && ::inet_pton(AF_INET6, h.substr(1, h.size() - 2).c_str(), &a6) == 1) return true;
    if (h == "localhost" || (h.size() > 10 && h.ends_with(".localhost"))) return true;
    std::string own = opts.host;
    for (char& c : own) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (h == own) return true;
    for (const auto& a : opts.allowed_hosts) {
      if (a == "*" || a == h) return true;
    }
    return false;
  }

  // A browser names the page that sent a request in Origin. Requests from this server's own page
  // (same origin) and from --cors-origin origins are served; any other page is refused, whatever the
  // content type (a text/plain POST needs no CORS preflight, so the browser would otherwise deliver it).
  bool origin_allowed(const http::Request& req) const {
    const std::string origin = req.header("origin");
    if (origin.empty()) return true;  // not from a browser page
    if (!allowed_origin(req).empty()) return true;
    const std::string host = req.header("host");
    return !host.empty() && (origin == "http://" + host || origin == "https://" + host);
  }

  // POST /v1/embeddings: every input's vector, pooled as the request, the server (--pooling) or the model
  // says, in that order.
  void embeddings(const http::Request& req, http::Response& res) {
    const ordered_json body = parse_body(req);
    const EmbeddingRequest r = parse_embedding_request(body);
    const auto m = model_for(r.model, body);
    const tokenizer::Tokenizer& tok = m->tok();
    Engine& engine = m->engine();
    std::optional<runtime::Pooling> pooling;
    if (!r.pooling.empty()) pooling = runtime::pooling_from_name(r.pooling);
    else if (!opts.pooling.empty()) pooling = runtime::pooling_from_name(opts.pooling);
    else pooling = runtime::declared_pooling(m->file());
    if (!pooling) {
      throw ApiError(400, "this model declares no pooling (it is not an embedding model): send \"pooling\": \"mean\", "
                          "\"cls\" or \"last\", or start the server with --pooling",
                     "invalid_request_error", "pooling");
    }
    std::vector<std::vector<int32_t>> inputs = r.tokens;
    for (const std::string& t : r.texts) inputs.push_back(tok.encode(t, true, false));
    int64_t total = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string where = r.size() == 1 ? "input" : fmt::format("input[{}]", i);
      for (int32_t id : inputs[i]) {
        if (id >= static_cast<int32_t>(tok.vocab().size())) {
          throw ApiError(400, fmt::format("'{}': {} is not a token id (0..{})", where, id, tok.vocab().size() - 1),
                         "invalid_request_error", "input");
        }
      }
      if (inputs[i].empty()) throw ApiError(400, fmt::format("'{}': no tokens", where), "invalid_request_error", "input");
      if (static_cast<int64_t>(inputs[i].size()) > engine.n_ctx()) {
        throw ApiError(400, fmt::format("'{}': {} tokens, more than the context of {} (zinc serve -c)", where,
                                        inputs[i].size(), engine.n_ctx()),
                       "invalid_request_error", "input", "context_length_exceeded");
      }
      total += static_cast<int64_t>(inputs[i].size());
    }
    std::vector<std::vector<float>> vectors = engine.embed(inputs, *pooling, r.normalize && !r.dimensions);
    if (r.dimensions) {
      const auto dim = vectors.empty() ? 0 : static_cast<int64_t>(vectors[0].size());
      if (*r.dimensions > dim) {
        throw ApiError(400, fmt::format("'dimensions': {} is more than this model's {}", *r.dimensions, dim),
                       "invalid_request_error", "dimensions");
      }
      for (auto& v : vectors) {
        v.resize(static_cast<size_t>(*r.dimensions));
        double norm = 0;
        for (float x : v) norm += static_cast<double>(x) * x;
        if (r.normalize && norm > 0) {
          for (float& x : v) x = static_cast<float>(x / std::sqrt(norm));
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(metrics.mutex);
      metrics.prompt_tokens += static_cast<uint64_t>(total);
    }
    res.set_content(embeddings_json(vectors, r.base64, m->id(), total).dump(), "application/json");
  }

  // The request's thinking settings against the server's defaults (a template that reads
  // reasoning_effort, as GPT-OSS's does, is left to use it itself).
  ThinkingPlan thinking(const LoadedModel& m, const CompletionRequest& r) const {
    return plan_thinking(r, m.tmpl().source().find("reasoning_effort") != std::string::npos, opts.enable_thinking,
                         opts.reasoning_budget);
  }

  // The prompt's tokens; `opens_reasoning` tells whether a chat template started the reasoning block.
  std::vector<int32_t> prompt_tokens(const LoadedModel& m, const CompletionRequest& r, bool* opens_reasoning) const {
    const tokenizer::Tokenizer& tok = m.tok();
    std::vector<int32_t> ids;
    *opens_reasoning = false;
    if (r.chat) {
      chat::ChatRequest cr;
      cr.messages = r.messages;
      cr.tools = r.tools;
      cr.add_generation_prompt = true;
      cr.enable_thinking = thinking(m, r).enable_thinking;
      cr.extra = r.template_vars;
      std::string text;
      try {
        // A few renders at a time, each within budgets that fit any prompt the context could hold: a
        // hostile template or conversation costs bounded memory, whatever the number of requests.
        render_slots.acquire();
        struct Release {
          std::counting_semaphore<>& s;
          ~Release() { s.release(); }
        } release{render_slots};
        text = m.tmpl().render(cr, render_options(m));
      } catch (const Error& e) {
        throw ApiError(400, fmt::format("the chat template rejected the conversation: {}", e.what()));
      }
      ids = runtime::tokenize_prompt(tok, text);
      *opens_reasoning = chat::prompt_opens_reasoning(text);
    } else {
      ids = tok.encode(r.prompt, true, true);
    }
    if (ids.empty()) throw ApiError(400, "the prompt is empty", "invalid_request_error", r.chat ? "messages" : "prompt");
    if (static_cast<int64_t>(ids.size()) >= m.engine().n_ctx()) {
      throw ApiError(400,
                     fmt::format("the prompt has {} tokens; the context holds {} (and needs room for an answer)", ids.size(),
                                 m.engine().n_ctx()),
                     "invalid_request_error", r.chat ? "messages" : "prompt", "context_length_exceeded");
    }
    return ids;
  }

  // Text of a token as the API shows it (its bytes as the detokenizer would produce them).
  static std::string token_text(const LoadedModel& m, int32_t id) { return m.tok().token_to_piece(id, false); }

  static void fill_logprob_texts(const LoadedModel& m, CompletionResult& c) {
    for (const auto& lp : c.gen.logprobs) {
      c.token_texts.push_back(token_text(m, lp.chosen.token));
      std::vector<std::string> tops;
      for (const auto& t : lp.top) tops.push_back(token_text(m, t.token));
      c.top_texts.push_back(std::move(tops));
    }
  }

  void record(const runtime::GenerateResult& r, const Job& job) {
    {
      std::lock_guard<std::mutex> lock(metrics.mutex);
      metrics.queue_wait.observe(job.queue_wait_s());
    }
    spdlog::info("completion: {} prompt tokens ({} cached), {} generated ({}) · first token {:.0f} ms · {:.1f} tok/s",
                 r.prompt_tokens, r.cached_tokens, r.tokens.size(), runtime::stop_reason_name(r.reason),
                 r.first_token_s * 1e3, r.decode_tokens_per_s());
    std::lock_guard<std::mutex> lock(metrics.mutex);
    metrics.prompt_tokens += static_cast<uint64_t>(r.prompt_tokens);
    metrics.generated_tokens += r.tokens.size();
    if (!r.tokens.empty()) {
      metrics.ttft.observe(r.first_token_s);
      metrics.per_token.observe(r.decode_s / static_cast<double>(r.tokens.size()));
    }
  }

  void count_cancelled() {
    std::lock_guard<std::mutex> lock(metrics.mutex);
    ++metrics.cancelled;
  }

  // Starts a request on the engine: its prompt, its generation options, its job. 503 when every slot
  // is busy and the queue is full.
  std::shared_ptr<Job> start_job(LoadedModel& m, const CompletionRequest& r, const ordered_json& body, bool* opens_reasoning,
                                 http::Response& res) {
    auto prompt = prompt_tokens(m, r, opens_reasoning);
    runtime::GenerateOptions g;
    g.max_tokens = r.max_tokens;
    if (opts.max_tokens >= 0 && !body.contains("max_tokens") && !body.contains("max_completion_tokens")) {
      g.max_tokens = opts.max_tokens;
    }
    g.stop = r.stop;
    g.top_logprobs = r.logprobs ? r.top_logprobs : -1;
    g.context_shift = opts.context_shift;
    g.n_keep = opts.n_keep;
    g.decode.at_start = r.chat;  // a completion continues its prompt's text
    if (r.chat) {
      const chat::ReasoningMarkers markers = chat::reasoning_markers(m.format());
      g.reasoning = {thinking(m, r).budget, markers.open, markers.close, markers.conclusion, *opens_reasoning};
    }
    const OutputConstraint constraint = output_constraint(m.format(), r, opts.grammar);
    // A grammar of the whole answer lets a thinking model open its reasoning block first, where the
    // prompt did not (Harmony's forced calls say so themselves).
    // Whether the grammar writes the headers after an analysis message (a Harmony forced call's does).
    bool headers_after_reasoning = m.format() == chat::OutputFormat::Harmony && constraint.param == "tool_choice";
    if (!constraint.gbnf.empty() && constraint.trigger.empty() && r.chat && !*opens_reasoning &&
        thinking(m, r).enable_thinking.value_or(true) && !headers_after_reasoning) {
      const std::string wrapped = with_reasoning_lead(m.format(), constraint.gbnf);
      try {
        if (!wrapped.empty()) std::tie(g.grammar, g.grammar_cache) = m.compiled_grammar(wrapped, kAfterReasoning);
        headers_after_reasoning = g.grammar != nullptr;
      } catch (const Error&) {  // a vocabulary without the block's tokens, or a rule of that name: the grammar alone
      }
    }
    if (!constraint.gbnf.empty() && !g.grammar) {
      try {
        std::tie(g.grammar, g.grammar_cache) = m.compiled_grammar(constraint.gbnf);
      } catch (const Error& e) {  // a <text> token this model's vocabulary does not have
        // A lazy grammar only helps: without it the calls are free, as they would be anyway.
        if (constraint.trigger.empty()) throw ApiError(400, e.what(), "invalid_request_error", constraint.param);
      }
    }
    if (g.grammar) {
      g.grammar_vocab = m.grammar_vocab();
      g.grammar_overlap = m.engine().backend_name() != "cpu";
      g.grammar_trigger = constraint.trigger;
      g.grammar_trigger_at_start = constraint.trigger_at_start;
      // A Harmony grammar that writes the headers after reasoning (a forced call's, or the final channel's):
      // the budget's conclusion ends the analysis message only, not opening the final channel as it
      // otherwise does.
      const std::string& close = g.reasoning.close;
      const size_t end = close.empty() ? std::string::npos : g.reasoning.conclusion.find(close);
      if (m.format() == chat::OutputFormat::Harmony && headers_after_reasoning && end != std::string::npos) {
        g.reasoning.conclusion.resize(end + close.size());
      }
    }
    auto job = std::make_shared<Job>(std::move(prompt), r.sampling, g);
    if (!m.engine().submit(job)) {
      res.set_header("Retry-After", "1");
      throw ApiError(503, "the server is busy: every slot is working and the queue is full; retry shortly",
                     "server_busy_error");
    }
    return job;
  }

  // A whole answer (not streamed) into `result`: its parsed message and generation result. False when
  // the client went away (the job is cancelled, the response marked unsent).
  bool collect(Job& job, const chat::OutputParserOptions& popts, CompletionResult& result, const http::Request& req,
               http::Response& res) {
    chat::OutputParser parser(popts);
    std::string piece;
    while (job.next(piece, 100)) {
      if (!piece.empty()) result.message += parser.push(piece);
      // Nobody will read the answer once the client has gone: stop, and free the slot at the next step.
      if (req.client_gone()) {
        job.cancel();
        count_cancelled();
        while (job.next(piece, 100)) {
        }
        res.status = 499;  // not sent: the connection is closed
        return false;
      }
    }
    result.message += parser.finish();
    if (!job.error().empty()) throw ApiError(job.error_status() == 499 ? 400 : job.error_status(), job.error());
    result.gen = job.result();
    record(result.gen, job);
    return true;
  }

  // The SSE headers of a streamed answer.
  static void stream_headers(http::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_header("Content-Type", "text/event-stream");
  }

  // The loop of a streamed answer, whatever the API: start() once, push(piece) for each piece the job
  // generates, then finish() when it succeeded or fail(status, message) when it did not. start, push and
  // finish return false when the client has gone, which cancels the job (its slot frees at the next step).
  void pump(Job& job, http::StreamWriter& w, const std::function<bool()>& start,
            const std::function<bool(const std::string&)>& push, const std::function<bool()>& finish,
            const std::function<void(int, const std::string&)>& fail) {
    const auto gone = [&] {
      job.cancel();
      count_cancelled();
      std::string rest;
      while (job.next(rest, 100)) {
      }
    };
    if (!start()) return gone();
    std::string piece;
    while (job.next(piece, 200)) {
      if ((!piece.empty() && !push(piece)) || (piece.empty() && w.client_gone())) return gone();
    }
    if (!job.error().empty()) return fail(job.error_status() == 499 ? 400 : job.error_status(), job.error());
    finish();
    record(job.result(), job);
  }

  // SSE events with names ("event:" lines), as the Messages and Responses APIs stream.
  template <class Event>
  static bool write_events(http::StreamWriter& w, const std::vector<Event>& events) {
    for (const auto& [name, data] : events) {
      if (!w.write("event: " + name + "\n" + sse(data))) return false;
    }
    return true;
  }

  // POST /v1/messages: Anthropic's Messages API on the same engine (anthropic.h).
  void messages(const http::Request& req, http::Response& res) {
    {
      std::lock_guard<std::mutex> lock(metrics.mutex);
      ++metrics.requests;
    }
    const ordered_json body = parse_body(req);
    const MessagesRequest mr = parse_messages_request(body, opts.defaults);
    const auto model = model_for(mr.chat.model, body);
    bool opens_reasoning = false;
    auto job = start_job(*model, mr.chat, body, &opens_reasoning, res);
    const auto input_tokens = static_cast<int64_t>(job->prompt_size());
    auto result = std::make_shared<CompletionResult>();
    result->id = random_id("msg_");
    result->model = model->id();
    chat::OutputParserOptions popts;
    popts.format = model->format();
    popts.starts_in_reasoning = opens_reasoning;
    const std::vector<std::string> stop = mr.chat.stop;
    if (!mr.stream) {
      if (!collect(*job, popts, *result, req, res)) return;
      res.set_content(message_json(*result, stop).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }
    stream_headers(res);
    res.stream = [this, model, job, result, popts, input_tokens, stop](http::StreamWriter& w) {
      MessagesStream stream(*result, popts, input_tokens);
      pump(
          *job, w, [&] { return write_events(w, stream.start()); },
          [&](const std::string& piece) { return write_events(w, stream.push(piece)); },
          [&] { return write_events(w, stream.finish(job->result(), stop)); },
          [&](int status, const std::string& message) {
            write_events(w, std::vector<MessagesStream::Event>{{"error", anthropic_error_json(ApiError(status, message))}});
          });
    };
  }

  // POST /v1/responses: OpenAI's Responses API on the same engine (responses.h), continuing a kept
  // response when the request names one.
  void responses(const http::Request& req, http::Response& res) {
    {
      std::lock_guard<std::mutex> lock(metrics.mutex);
      ++metrics.requests;
    }
    const ordered_json body = parse_body(req);
    auto rr = std::make_shared<ResponsesRequest>(parse_responses_request(body, opts.defaults));
    // The conversation so far: the kept one's, then this request's input (its instructions not included).
    auto conversation = std::make_shared<ordered_json>(ordered_json::array());
    if (!rr->previous_response_id.empty()) {
      const auto previous = stored_responses.get(rr->previous_response_id);
      if (!previous) {
        throw ApiError(400, fmt::format("Previous response with id '{}' not found.", rr->previous_response_id),
                       "invalid_request_error", "previous_response_id", "previous_response_not_found");
      }
      *conversation = previous->conversation;
      auto& messages = rr->chat.messages;
      messages.insert(messages.begin() + static_cast<std::ptrdiff_t>(rr->instructions), conversation->begin(),
                      conversation->end());
    }
    for (size_t i = rr->instructions + conversation->size(); i < rr->chat.messages.size(); ++i) {
      conversation->push_back(rr->chat.messages[i]);
    }
    const auto model = model_for(rr->chat.model, body);
    bool opens_reasoning = false;
    auto job = start_job(*model, rr->chat, body, &opens_reasoning, res);
    auto result = std::make_shared<CompletionResult>();
    result->id = random_id("resp_");
    result->model = model->id();
    result->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    result->response_fields = {{"store", rr->store},
                               {"previous_response_id", rr->previous_response_id.empty() ? ordered_json() : ordered_json(rr->previous_response_id)}};
    chat::OutputParserOptions popts;
    popts.format = model->format();
    popts.starts_in_reasoning = opens_reasoning;
    // A finished response is kept, with its conversation, for the next turn and GET /v1/responses/{id}.
    const auto keep = [this, rr, conversation](const CompletionResult& r, const ordered_json& response) {
      if (!rr->store) return;
      ordered_json c = *conversation;
      c.push_back(response_assistant_message(r));
      stored_responses.put(r.id, {std::move(c), response});
    };
    if (!rr->stream) {
      if (!collect(*job, popts, *result, req, res)) return;
      const ordered_json out = response_json(*result, rr->chat);
      keep(*result, out);
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }
    stream_headers(res);
    res.stream = [this, model, job, result, popts, rr, keep](http::StreamWriter& w) {
      ResponsesStream stream(*result, rr->chat, popts);
      pump(
          *job, w, [&] { return write_events(w, stream.start()); },
          [&](const std::string& piece) { return write_events(w, stream.push(piece)); },
          [&] {
            const auto events = stream.finish(job->result());
            keep(*result, events.back().second["response"]);
            return write_events(w, events);
          },
          [&](int status, const std::string& message) {
            ordered_json e = ApiError(status, message, status >= 500 ? "server_error" : "invalid_request_error").body();
            e["type"] = "error";
            write_events(w, std::vector<ResponsesStream::Event>{{"error", e}});
          });
    };
  }

  // GET and DELETE /v1/responses/{id}: a kept response.
  void stored_response(const http::Request& req, http::Response& res, bool erase) {
    const std::string id = req.matches[0];
    const auto not_found = [&] {
      return ApiError(404, fmt::format("No response with id '{}' is kept here (responses made with store false are not)", id),
                      "invalid_request_error", "response_id", "not_found");
    };
    if (erase) {
      if (!stored_responses.erase(id)) throw not_found();
      res.set_content(ordered_json({{"id", id}, {"object", "response"}, {"deleted", true}}).dump(), "application/json");
      return;
    }
    const auto kept = stored_responses.get(id);
    if (!kept) throw not_found();
    res.set_content(kept->response.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }
  ResponseStore stored_responses;

  void completion(const http::Request& req, http::Response& res, bool chat) {
    {
      std::lock_guard<std::mutex> lock(metrics.mutex);
      ++metrics.requests;
    }
    const ordered_json body = parse_body(req);
    CompletionRequest r = chat ? parse_chat_request(body, opts.defaults) : parse_completion_request(body, opts.defaults);
    const auto model = model_for(r.model, body);
    for (const auto& [id, bias] : r.sampling.logit_bias) {
      if (id >= static_cast<int64_t>(model->tok().vocab().size())) {
        throw ApiError(400, fmt::format("'logit_bias': {} is not a token id (0..{})", id, model->tok().vocab().size() - 1),
                       "invalid_request_error", "logit_bias");
      }
    }
    bool opens_reasoning = false;
    auto job = start_job(*model, r, body, &opens_reasoning, res);
    auto result = std::make_shared<CompletionResult>();
    result->id = random_id(chat ? "chatcmpl-" : "cmpl-");
    result->model = model->id();
    result->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    chat::OutputParserOptions popts;
    popts.format = chat ? model->format() : chat::OutputFormat::Plain;
    popts.starts_in_reasoning = opens_reasoning;  // the template opened the reasoning block

    if (!r.stream) {
      if (!collect(*job, popts, *result, req, res)) return;
      if (r.logprobs) fill_logprob_texts(*model, *result);
      const ordered_json out = chat ? chat_completion_json(*result, r.logprobs) : text_completion_json(*result, r.logprobs);
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }

    stream_headers(res);
    const bool include_usage = r.include_usage;
    res.stream = [this, model, job, result, chat, popts, include_usage](http::StreamWriter& w) {
      StreamTranslator stream(*result, chat, popts);
      const auto write_all = [&](const std::vector<ordered_json>& chunks) {
        for (const auto& c : chunks) {
          if (!w.write(sse(c))) return false;
        }
        return true;
      };
      pump(
          *job, w, [&] { return write_all(stream.start()); },
          [&](const std::string& piece) { return write_all(stream.push(piece)); },
          [&] { return write_all(stream.finish(job->result(), include_usage)) && w.write("data: [DONE]\n\n"); },
          [&](int status, const std::string& message) {
            write_all({ApiError(status, message, status >= 500 ? "server_error" : "invalid_request_error").body()});
            w.write("data: [DONE]\n\n");
          });
    };
  }

  // A request's boolean field: `fallback` when absent, 400 when not a boolean.
  static bool bool_field(const ordered_json& body, const char* name, bool fallback) {
    if (!body.contains(name)) return fallback;
    if (!body[name].is_boolean()) throw ApiError(400, fmt::format("'{}': must be true or false", name), "invalid_request_error", name);
    return body[name].get<bool>();
  }

  void routes() {
    http.set_pre_routing([this](http::Request& req, http::Response& res) {
      const auto refuse = [&req, &res](const std::string& message, const char* code) {
        reply_error(res, ApiError(403, message, "invalid_request_error", "", code), anthropic_path(req));
        return true;
      };
      if (const std::string host = req.header("host"); !host_allowed(host)) {
        return refuse(fmt::format("requests for host '{}' are refused: this server answers to localhost and its own "
                                  "addresses (start it with --allowed-hosts {} to accept that name)", host, host),
                      "host_not_allowed");
      }
      if (const std::string origin = req.header("origin"); !origin_allowed(req)) {
        return refuse(fmt::format("requests from the web page at {} are refused (start the server with --cors-origin {} "
                                  "to allow that page)", origin, origin),
                      "origin_not_allowed");
      }
      const auto origin = allowed_origin(req);
      if (!origin.empty()) {
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Vary", "Origin");
      }
      if (req.method == "OPTIONS") {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key, Anthropic-Version");
        res.status = 204;
        return true;
      }
      const bool open = req.path == "/" || req.path == "/health";
      if (!open && !authorized(req)) {
        reply_error(res, ApiError(401, "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)",
                                  "invalid_request_error", "", "invalid_api_key"),
                    anthropic_path(req));
        return true;
      }
      return false;
    });
    auto guarded = [this](auto fn) {
      return [this, fn](http::Request& req, http::Response& res) {
        const bool anthropic = anthropic_path(req);
        try {
          fn(req, res);
          return;
        } catch (const ApiError& e) {
          reply_error(res, e, anthropic);
        } catch (const Error& e) {
          reply_error(res, ApiError(400, e.what()), anthropic);
        } catch (const std::exception& e) {
          reply_error(res, ApiError(500, e.what(), "server_error"), anthropic);
        }
        std::lock_guard<std::mutex> lock(metrics.mutex);
        ++metrics.errors;
      };
    };
    http.route("GET", "/", [](http::Request&, http::Response& res) {
      res.set_content(std::string(web_page_html()), "text/html; charset=utf-8");
    });
    http.route("GET", "/health", [this](http::Request&, http::Response& res) {
      int loaded = 0;
      const auto s = models.stats(&loaded);
      res.set_content(json{{"status", "ok"}, {"slots_idle", s.n_slots - s.busy_slots}, {"slots_busy", s.busy_slots},
                           {"queued", s.queued}, {"models_loaded", loaded}}.dump(),
                      "application/json");
    });
    // A model as GET /v1/models shows it: OpenAI's fields, then its state on this server (zinc ps reads them).
    auto model_json = [this](const ModelState& m) {
      json j = {{"id", m.id}, {"object", "model"}, {"created", m.loaded_at ? m.loaded_at : started}, {"owned_by", "zinc"},
                {"status", m.state}, {"pinned", m.pinned}, {"bytes", m.bytes}, {"requests", m.requests},
                {"aliases", m.aliases}};
      if (m.state == "loaded") {
        j["meta"] = {{"n_ctx", m.n_ctx}, {"architecture", m.architecture}, {"backend", m.backend}, {"slots", m.slots},
                     {"slots_busy", m.busy_slots}};
        j["expires_in"] = m.expires_in_s ? json(*m.expires_in_s) : json(nullptr);
      }
      return j;
    };
    http.route("GET", "/v1/models", guarded([this, model_json](http::Request&, http::Response& res) {
      json data = json::array();
      for (const auto& m : models.list()) data.push_back(model_json(m));
      res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    }));
    http.route("GET", R"(/v1/models/(.+))", guarded([this, model_json](http::Request& req, http::Response& res) {
      for (const auto& m : models.list()) {
        if (m.id == req.matches[0] || std::find(m.aliases.begin(), m.aliases.end(), req.matches[0]) != m.aliases.end() ||
            (!models.on_demand() && !opts.strict_model_names)) {
          res.set_content(model_json(m).dump(), "application/json");
          return;
        }
      }
      throw ApiError(404, fmt::format("The model '{}' does not exist", req.matches[0]), "invalid_request_error", "model",
                     "model_not_found");
    }));
    // Loading and unloading by hand: {"model": NAME} (and for a load, "keep_alive").
    const auto model_field = [](const ordered_json& body) {
      if (!body.is_object() || !body.contains("model") || !body["model"].is_string()) {
        throw ApiError(400, "'model': must be the name of a model", "invalid_request_error", "model");
      }
      return body["model"].get<std::string>();
    };
    http.route("POST", "/models/load", guarded([this, model_field](http::Request& req, http::Response& res) {
      const ordered_json body = parse_body(req);
      const auto m = model_for(model_field(body), body);
      res.set_content(json{{"model", m->id()}, {"status", "loaded"}}.dump(), "application/json");
    }));
    http.route("POST", "/models/unload", guarded([this, model_field](http::Request& req, http::Response& res) {
      const std::string name = model_field(parse_body(req));
      models.unload(name);
      res.set_content(json{{"model", name}, {"status", "unloading"}}.dump(), "application/json");
    }));
    http.route("POST", "/v1/chat/completions", guarded([this](http::Request& req, http::Response& res) {
      completion(req, res, true);
    }));
    http.route("POST", "/v1/completions", guarded([this](http::Request& req, http::Response& res) {
      completion(req, res, false);
    }));
    http.route("POST", "/v1/messages", guarded([this](http::Request& req, http::Response& res) { messages(req, res); }));
    http.route("POST", "/v1/responses", guarded([this](http::Request& req, http::Response& res) { responses(req, res); }));
    http.route("GET", R"(/v1/responses/([A-Za-z0-9_-]+))",
               guarded([this](http::Request& req, http::Response& res) { stored_response(req, res, false); }));
    http.route("DELETE", R"(/v1/responses/([A-Za-z0-9_-]+))",
               guarded([this](http::Request& req, http::Response& res) { stored_response(req, res, true); }));
    http.route("POST", "/v1/embeddings", guarded([this](http::Request& req, http::Response& res) { embeddings(req, res); }));
    http.route("POST", "/v1/messages/count_tokens", guarded([this](http::Request& req, http::Response& res) {
      const ordered_json body = parse_body(req);
      const MessagesRequest mr = parse_messages_request(body, opts.defaults, true);
      const auto model = model_for(mr.chat.model, body);
      bool opens_reasoning = false;
      const auto ids = prompt_tokens(*model, mr.chat, &opens_reasoning);
      res.set_content(ordered_json({{"input_tokens", ids.size()}}).dump(), "application/json");
    }));
    http.route("POST", "/tokenize", guarded([this](http::Request& req, http::Response& res) {
      const ordered_json body = parse_body(req);
      if (!body.is_object() || !body.contains("content") || !body["content"].is_string()) {
        throw ApiError(400, "'content': must be a string", "invalid_request_error", "content");
      }
      const bool add_special = bool_field(body, "add_special", false), parse_special = bool_field(body, "parse_special", true),
                 with_pieces = bool_field(body, "with_pieces", false);
      const auto model = model_for(string_field(body, "model"), body);
      const auto ids = model->tok().encode(body["content"].get<std::string>(), add_special, parse_special);
      json out = {{"tokens", ids}};
      if (with_pieces) {
        json pieces = json::array();
        for (int32_t id : ids) pieces.push_back({{"id", id}, {"piece", token_text(*model, id)}});
        out["tokens"] = pieces;
      }
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    }));
    http.route("POST", "/detokenize", guarded([this](http::Request& req, http::Response& res) {
      const ordered_json body = parse_body(req);
      if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
        throw ApiError(400, "'tokens': must be an array of token ids", "invalid_request_error", "tokens");
      }
      const auto model = model_for(string_field(body, "model"), body);
      const tokenizer::Tokenizer& tok = model->tok();
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
    http.route("GET", "/metrics", [this](http::Request&, http::Response& res) {
      int loaded = 0;
      const auto s = models.stats(&loaded);
      const int64_t loads = models.loads(), unloads = models.unloads();
      std::lock_guard<std::mutex> lock(metrics.mutex);
      std::string out;
      auto counter = [&](const char* name, const char* help, uint64_t v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
      };
      auto gauge64 = [&](const char* name, const char* help, uint64_t v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
      };
      auto gauge = [&](const char* name, const char* help, int v) { gauge64(name, help, static_cast<uint64_t>(std::max(v, 0))); };
      counter("zinc_requests_total", "Completion requests received.", metrics.requests);
      counter("zinc_request_errors_total", "Requests answered with an error.", metrics.errors);
      counter("zinc_requests_cancelled_total", "Requests whose client went away before the end.", metrics.cancelled);
      counter("zinc_prompt_tokens_total", "Prompt tokens of finished requests.", metrics.prompt_tokens);
      counter("zinc_generated_tokens_total", "Tokens generated.", metrics.generated_tokens);
      gauge("zinc_queue_depth", "Requests waiting for a slot.", s.queued);
      gauge("zinc_slots_busy", "Slots generating.", s.busy_slots);
      gauge("zinc_slots_total", "Slots.", s.n_slots);
      counter("zinc_steps_total", "Steps run (each carries every active sequence's tokens).", static_cast<uint64_t>(s.steps));
      counter("zinc_step_sequences_total", "Sequences carried by the steps, summed (/ steps: the mean batch).",
              static_cast<uint64_t>(s.step_sequences));
      counter("zinc_step_tokens_total", "Tokens evaluated by the steps, summed.", static_cast<uint64_t>(s.step_tokens));
      counter("zinc_step_prompt_tokens_total", "Prompt tokens evaluated in chunks beside decoding sequences, summed.",
              static_cast<uint64_t>(s.step_prompt_tokens));
      counter("zinc_lane_prompts_total", "Prompts read on a context of their own beside decoding sequences (--prompt-lane).",
              static_cast<uint64_t>(s.lane_prompts));
      counter("zinc_lane_prompt_tokens_total", "Their tokens, summed.", static_cast<uint64_t>(s.lane_tokens));
      counter("zinc_draft_tokens_total", "Speculative decoding: tokens the draft model proposed and the model verified.",
              static_cast<uint64_t>(s.draft_tokens));
      counter("zinc_draft_accepted_tokens_total",
              "Speculative decoding: drafted tokens the model chose (/ zinc_draft_tokens_total: the acceptance).",
              static_cast<uint64_t>(s.draft_accepted));
      gauge("zinc_step_sequences_max", "The most sequences one step has carried (by a model loaded now).",
            s.max_step_sequences);
      counter("zinc_prefix_cache_lookups_total", "Prompts looked up in the prefix cache.", static_cast<uint64_t>(s.cache.lookups));
      counter("zinc_prefix_cache_hits_total", "Prompts that found a cached prefix.", static_cast<uint64_t>(s.cache.hits));
      counter("zinc_prefix_cache_tokens_reused_total", "Prompt tokens taken from the prefix cache instead of evaluated.",
              static_cast<uint64_t>(s.cache.tokens_reused));
      counter("zinc_prefix_cache_evictions_total", "Cached blocks evicted for room.", static_cast<uint64_t>(s.cache.evictions));
      gauge64("zinc_prefix_cache_kv_bytes", "Bytes of KV blocks the prefix cache holds.", s.cache.kv_bytes);
      gauge64("zinc_prefix_cache_checkpoint_bytes", "Bytes of recurrent-state checkpoints the prefix cache holds.",
              s.cache.checkpoint_bytes);
      gauge64("zinc_prefix_cache_budget_bytes", "The prefix caches' budgets (--cache-mem), summed over loaded models.",
              s.cache.budget_bytes);
      gauge64("zinc_prefix_cache_host_bytes", "Bytes of KV blocks and checkpoints the prefix cache keeps in host memory.",
              s.cache.host_bytes);
      gauge64("zinc_prefix_cache_host_budget_bytes", "The prefix caches' host-memory budgets (--cache-ram), summed.",
              s.cache.host_budget_bytes);
      counter("zinc_prefix_cache_spills_total", "Cached blocks moved from the device to host memory.",
              static_cast<uint64_t>(s.cache.spills));
      counter("zinc_prefix_cache_restores_total", "Cached blocks written back from host memory for a prompt.",
              static_cast<uint64_t>(s.cache.restores));
      gauge("zinc_models_loaded", "Models loaded now.", loaded);
      counter("zinc_model_loads_total", "Models loaded on demand.", static_cast<uint64_t>(loads));
      counter("zinc_model_unloads_total", "Models unloaded (idle past their keep-alive, asked, or for room).",
              static_cast<uint64_t>(unloads));
      out += metrics.ttft.text("zinc_time_to_first_token_seconds", "From request start to the first token.");
      out += metrics.queue_wait.text("zinc_queue_wait_seconds", "From a request's arrival to its slot.");
      out += metrics.per_token.text("zinc_time_per_output_token_seconds", "Decode time per generated token.");
      res.set_content(out, "text/plain; version=0.0.4");
    });
    http.set_error_handler([](const http::Request& req, http::Response& res, std::string_view why) {
      std::string message = why.empty() ? fmt::format("{} {} failed with status {}", req.method, req.path, res.status)
                                        : std::string(why);
      if (why.empty() && res.status == 404) message = fmt::format("no endpoint {} {}", req.method, req.path);
      if (why.empty() && res.status == 405) message = fmt::format("{} does not answer {}", req.path, req.method);
      const char* type = res.status == 503 ? "server_busy_error" : res.status >= 500 ? "server_error" : "invalid_request_error";
      reply_error(res, ApiError(res.status, message, type));
    });
  }
};

Server::Server(const gguf::File& file, const tokenizer::Tokenizer& tok, chat::ChatTemplate tmpl, EngineOptions engine,
               ServerOptions options) {
  auto pinned = std::make_unique<LoadedModel>(options.model_id, file, tok, std::move(tmpl), engine);
  impl_ = std::make_unique<Impl>(std::move(pinned), std::move(engine), std::move(options));
}

Server::Server(EngineOptions engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(nullptr, std::move(engine), std::move(options))) {}

Server::~Server() = default;

std::string Server::memory_summary() const {
  for (const auto& m : impl_->models.list()) {
    if (!m.pinned) continue;
    if (m.weights_device_bytes == 0) return m.backend;
    return fmt::format("{}: weights {} once, a context of {} sequence{} of {} tokens {}", m.backend,
                       format_bytes(m.weights_device_bytes), m.slots, m.slots == 1 ? "" : "s", m.n_ctx,
                       format_bytes(m.contexts_device_bytes));
  }
  return "";
}

std::string Server::drafting() const {
  for (const auto& m : impl_->models.list()) {
    if (m.pinned) return m.drafting;
  }
  return "";
}

std::string Server::models_summary() const { return impl_->models.on_demand() ? impl_->models.summary() : ""; }

int Server::bind() {
  auto& o = impl_->opts;
  o.port = impl_->http.bind(o.host, o.port);
  return o.port;
}

void Server::run() { impl_->http.run(); }

void Server::stop() { impl_->http.stop(); }

}  // namespace zinc::server
