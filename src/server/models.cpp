#include "server/models.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "core/error.h"
#include "core/format.h"
#include "hub/store.h"
#include "runtime/chat_session.h"
#include "server/openai.h"

namespace zinc::server {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The state's name as the API shows it.
const char* state_name(int s) {
  static const char* names[] = {"available", "loading", "loaded", "unloading"};
  return names[s];
}

}  // namespace

LoadedModel::LoadedModel(std::string id, const gguf::File& file, const tokenizer::Tokenizer& tok, chat::ChatTemplate tmpl,
                         const EngineOptions& options)
    : id_(std::move(id)),
      file_(&file),
      tok_(&tok),
      tmpl_(std::move(tmpl)),
      format_(chat::detect_output_format(tmpl_->source())),
      engine_(std::make_unique<Engine>(file, tok, options)) {}

LoadedModel::LoadedModel(std::string id, const std::filesystem::path& path, const EngineOptions& options)
    : id_(std::move(id)),
      own_file_(std::make_unique<gguf::File>(gguf::File::open(path))),
      own_tok_(std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_gguf(*own_file_))),
      file_(own_file_.get()),
      tok_(own_tok_.get()),
      tmpl_(runtime::chat_template_for(*file_, *tok_)),
      format_(chat::detect_output_format(tmpl_->source())),
      engine_(std::make_unique<Engine>(*file_, *tok_, options)) {}

uint64_t LoadedModel::bytes() const {
  return std::max<uint64_t>(file_->size(), engine_->weights_device_bytes()) + engine_->contexts_device_bytes();
}

std::shared_ptr<const sample::GrammarVocab> LoadedModel::grammar_vocab() {
  std::lock_guard<std::mutex> lock(grammar_mutex_);
  if (!grammar_vocab_) grammar_vocab_ = sample::GrammarVocab::from_tokenizer(*tok_);
  return grammar_vocab_;
}

std::pair<std::shared_ptr<const sample::Grammar>, std::shared_ptr<sample::GrammarMaskCache>> LoadedModel::compiled_grammar(
    const std::string& gbnf, const std::string& root) {
  std::lock_guard<std::mutex> lock(grammar_mutex_);
  const std::string key = root + '\0' + gbnf;
  for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
    if (it->text == key) {
      grammars_.splice(grammars_.begin(), grammars_, it);
      return {grammars_.front().grammar, grammars_.front().cache};
    }
  }
  grammars_.push_front({key, std::make_shared<const sample::Grammar>(sample::Grammar::parse(gbnf, root, sample::grammar_token_lookup(*tok_))),
                        std::make_shared<sample::GrammarMaskCache>()});
  if (grammars_.size() > 16) grammars_.pop_back();
  return {grammars_.front().grammar, grammars_.front().cache};
}

ModelPool::ModelPool(ModelPoolOptions options, Loader load, std::unique_ptr<LoadedModel> pinned)
    : options_(std::move(options)), load_(std::move(load)) {
  if (!options_.dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(options_.dir, ec)) {
      throw Error(fmt::format("--models-dir {}: not a directory", options_.dir.string()));
    }
  }
  if (pinned) {
    pinned_id_ = pinned->id();
    Entry& e = entries_[pinned_id_];
    e.id = pinned_id_;
    e.file_bytes = pinned->file().size();
    e.state = State::Loaded;
    e.pinned = true;
    e.model = std::shared_ptr<LoadedModel>(std::move(pinned));
    e.keep_alive_s = -1;
    e.last_used = std::chrono::steady_clock::now();
    e.loaded_at = unix_now();
  }
  rescan();
  if (!on_demand() && entries_.empty()) throw Error("the server has no model (-m MODEL or --models-dir DIR)");
  for (const auto& [alias, target] : options_.aliases) {
    if (!entries_.count(target)) {
      throw Error(fmt::format("--alias {}={}: no model is named '{}'", alias, target, target));
    }
    aliases_[alias] = target;
  }
  if (pinned_id_.size() && on_demand() && options_.max_loaded == 1) {
    throw Error("--max-models 1 leaves no room for other models beside the one -m loads (it stays loaded)");
  }
  if (on_demand()) reaper_ = std::thread([this] { reap(); });
}

ModelPool::~ModelPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

void ModelPool::rescan(bool force) {
  if (!on_demand()) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && scanned_ && std::chrono::duration<double>(now - *scanned_).count() < kRescanS) return;
  scanned_ = now;
  std::map<std::string, std::pair<std::filesystem::path, uint64_t>> found;
  if (!options_.dir.empty()) {
    // Shards after the first of a split model are not models of their own.
    static const std::regex later_shard(R"(-(\d{5})-of-\d{5}$)");
    std::error_code ec;
    auto it = std::filesystem::recursive_directory_iterator(
        options_.dir, std::filesystem::directory_options::skip_permission_denied, ec);
    for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it.depth() > 3) it.disable_recursion_pending();
      const auto& p = it->path();
      if (p.extension() != ".gguf" || !it->is_regular_file(ec)) continue;
      std::string id = p.lexically_relative(options_.dir).replace_extension().generic_string();
      std::smatch m;
      if (std::regex_search(id, m, later_shard) && m[1] != "00001") continue;
      found[id] = {p, it->file_size(ec)};
    }
  }
  if (options_.installed) {
    try {
      for (const auto& m : hub::installed_models()) found.try_emplace(m.id, m.file, m.size);
    } catch (const Error& e) {
      spdlog::warn("installed models: {}", e.what());
    }
  }
  for (auto& [id, where] : found) {
    Entry& e = entries_[id];
    if (e.id.empty()) {
      e.id = id;
      e.keep_alive_s = options_.keep_alive_s;
    }
    if (e.state == State::Available) {
      e.path = where.first;
      e.file_bytes = where.second;
    }
  }
  // Files gone since: forgotten unless loaded (a loaded model keeps its open file).
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool gone = !it->second.pinned && it->second.state == State::Available && !found.count(it->first);
    it = gone ? entries_.erase(it) : std::next(it);
  }
}

ModelPool::Entry* ModelPool::find(const std::string& name) {
  if (name.empty()) {
    if (!pinned_id_.empty()) return &entries_.at(pinned_id_);
    rescan();
    if (entries_.size() == 1) return &entries_.begin()->second;
    Entry* recent = nullptr;
    for (auto& [id, e] : entries_) {
      if (e.state == State::Loaded && (!recent || e.last_used > recent->last_used)) recent = &e;
    }
    if (recent) return recent;
    std::string names;
    for (const auto& [id, e] : entries_) names += (names.empty() ? "" : ", ") + id;
    throw ApiError(400, fmt::format("'model': name the model to use (this server has: {})", names), "invalid_request_error",
                   "model");
  }
  const auto alias = aliases_.find(name);
  const std::string& id = alias != aliases_.end() ? alias->second : name;
  if (auto it = entries_.find(id); it != entries_.end()) return &it->second;
  if (!on_demand()) {
    // One model: it answers whatever name a client was configured with, unless names are strict.
    if (!options_.strict_names) return &entries_.at(pinned_id_);
    throw ApiError(404, fmt::format("The model '{}' does not exist; this server has '{}'", name, pinned_id_),
                   "invalid_request_error", "model", "model_not_found");
  }
  rescan(true);  // a file added since the last look
  if (auto it = entries_.find(id); it != entries_.end()) return &it->second;
  throw ApiError(404, fmt::format("The model '{}' does not exist (GET /v1/models lists this server's)", name),
                 "invalid_request_error", "model", "model_not_found");
}

uint64_t ModelPool::held_bytes(const Entry& e) const {
  return e.state == State::Loaded && e.model ? e.model->bytes() : e.file_bytes;
}

std::shared_ptr<LoadedModel> ModelPool::lease(Entry& e) {
  ++e.leases;
  e.last_used = std::chrono::steady_clock::now();
  struct Lease {
    ModelPool* pool;
    Entry* entry;
    std::shared_ptr<LoadedModel> model;
  };
  // The entry stays in the map while leased (only available entries are forgotten).
  auto holder = std::shared_ptr<Lease>(new Lease{this, &e, e.model}, [](Lease* l) {
    l->model.reset();  // before the entry says idle: an unload then frees the model where it runs
    l->pool->release(*l->entry);
    delete l;
  });
  return std::shared_ptr<LoadedModel>(holder, holder->model.get());
}

void ModelPool::release(Entry& e) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --e.leases;
    e.last_used = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
}

std::shared_ptr<LoadedModel> ModelPool::acquire(const std::string& name, std::optional<double> keep_alive_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  Entry* e = find(name);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.wait_s);
  for (;;) {
    if (!e->pinned) e->keep_alive_s = keep_alive_s.value_or(options_.keep_alive_s);
    if (e->state == State::Loaded) {
      e->unload_requested = false;
      return lease(*e);
    }
    if (e->state == State::Available) {
      // Room: the other loaded models stay within the count and the bytes, the idle ones unloaded
      // least recently used first when they do not.
      std::vector<Entry*> loaded, idle;
      uint64_t bytes = e->file_bytes, pinned_bytes = 0;
      for (auto& [id, other] : entries_) {
        if (&other == e || other.state == State::Available) continue;
        loaded.push_back(&other);
        bytes += held_bytes(other);
        if (other.pinned) pinned_bytes += held_bytes(other);
        if (other.state == State::Loaded && other.leases == 0 && !other.pinned) idle.push_back(&other);
      }
      if (options_.memory_bytes && e->file_bytes + pinned_bytes > options_.memory_bytes) {
        throw ApiError(400,
                       fmt::format("the model '{}' needs {}: more than the server's memory for models ({}, --models-mem) "
                                   "holds{}",
                                   e->id, format_bytes(e->file_bytes), format_bytes(options_.memory_bytes),
                                   pinned_bytes ? " beside the model loaded with -m" : ""),
                       "invalid_request_error", "model", "model_too_large");
      }
      std::sort(idle.begin(), idle.end(), [](Entry* a, Entry* b) { return a->last_used < b->last_used; });
      size_t count = loaded.size() + 1, next = 0;
      std::vector<Entry*> victims;
      const auto over = [&] {
        return (options_.max_loaded > 0 && count > static_cast<size_t>(options_.max_loaded)) ||
               (options_.memory_bytes > 0 && bytes > options_.memory_bytes);
      };
      while (over() && next < idle.size()) {
        victims.push_back(idle[next]);
        bytes -= held_bytes(*idle[next++]);
        --count;
      }
      if (!over()) {
        std::vector<std::shared_ptr<LoadedModel>> freed;
        for (Entry* v : victims) {
          spdlog::info("model {}: unloaded to make room for {}", v->id, e->id);
          v->state = State::Unloading;
          freed.push_back(std::move(v->model));
        }
        e->state = State::Loading;
        const std::string id = e->id;
        const std::filesystem::path path = e->path;
        lock.unlock();
        freed.clear();  // the engines stop here, outside the lock
        lock.lock();
        for (Entry* v : victims) v->state = State::Available;
        unloads_ += static_cast<int64_t>(victims.size());
        cv_.notify_all();
        lock.unlock();
        std::unique_ptr<LoadedModel> model;
        std::string error;
        const auto t0 = std::chrono::steady_clock::now();
        try {
          model = load_(id, path);
        } catch (const std::exception& ex) {
          error = ex.what();
        }
        lock.lock();
        if (!model) {
          e->state = State::Available;
          cv_.notify_all();
          throw ApiError(500, fmt::format("the model '{}' could not be loaded: {}", id, error), "server_error", "model");
        }
        spdlog::info("model {}: loaded in {:.1f} s ({})", id,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     format_bytes(model->bytes()));
        e->model = std::shared_ptr<LoadedModel>(std::move(model));
        e->state = State::Loaded;
        e->loaded_at = unix_now();
        ++loads_;
        cv_.notify_all();
        continue;
      }
    }
    // Loading or unloading, or no room until other models' requests end: wait for a change.
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      throw ApiError(503,
                     fmt::format("the model '{}' is not loaded and every loaded model is in use (--max-models {}); retry "
                                 "shortly",
                                 e->id, options_.max_loaded),
                     "server_busy_error");
    }
  }
}

void ModelPool::load(const std::string& name, std::optional<double> keep_alive_s) { acquire(name, keep_alive_s); }

void ModelPool::unload(const std::string& name) {
  std::unique_lock<std::mutex> lock(mutex_);
  Entry* e = find(name);
  if (e->pinned) {
    throw ApiError(400, fmt::format("the model '{}' was loaded with -m and stays loaded", e->id), "invalid_request_error",
                   "model");
  }
  e->unload_requested = true;
  cv_.notify_all();
}

void ModelPool::reap() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    const auto now = std::chrono::steady_clock::now();
    std::vector<Entry*> expired;
    for (auto& [id, e] : entries_) {
      if (e.state != State::Loaded || e.pinned || e.leases > 0) continue;
      const bool timed_out = e.keep_alive_s >= 0 && std::chrono::duration<double>(now - e.last_used).count() >= e.keep_alive_s;
      if (timed_out || e.unload_requested) expired.push_back(&e);
    }
    if (expired.empty()) continue;
    std::vector<std::shared_ptr<LoadedModel>> freed;
    for (Entry* e : expired) {
      spdlog::info("model {}: unloaded ({})", e->id, e->unload_requested ? "asked" : "idle past its keep-alive");
      e->state = State::Unloading;
      e->unload_requested = false;
      freed.push_back(std::move(e->model));
    }
    lock.unlock();
    freed.clear();
    lock.lock();
    for (Entry* e : expired) e->state = State::Available;
    unloads_ += static_cast<int64_t>(expired.size());
    cv_.notify_all();
  }
}

std::vector<ModelState> ModelPool::list() {
  std::lock_guard<std::mutex> lock(mutex_);
  rescan();
  std::vector<ModelState> out;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [id, e] : entries_) {
    ModelState s;
    s.id = id;
    for (const auto& [alias, target] : aliases_) {
      if (target == id) s.aliases.push_back(alias);
    }
    s.state = state_name(static_cast<int>(e.state));
    s.pinned = e.pinned;
    s.bytes = held_bytes(e);
    s.requests = e.leases;
    if (e.state == State::Loaded && e.model) {
      const auto st = e.model->engine().stats();
      s.backend = e.model->engine().backend_name();
      s.architecture = e.model->file().get_or<std::string>("general.architecture", "");
      s.n_ctx = e.model->engine().n_ctx();
      s.slots = st.n_slots;
      s.busy_slots = st.busy_slots;
      s.loaded_at = e.loaded_at;
      s.weights_device_bytes = e.model->engine().weights_device_bytes();
      s.contexts_device_bytes = e.model->engine().contexts_device_bytes();
      s.drafting = e.model->engine().drafting();
      if (!e.pinned && e.leases == 0 && e.keep_alive_s >= 0) {
        s.expires_in_s = std::max(0.0, e.keep_alive_s - std::chrono::duration<double>(now - e.last_used).count());
      }
    }
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const ModelState& a, const ModelState& b) {
    const auto rank = [](const ModelState& s) { return s.pinned ? 0 : s.state == "available" ? 2 : 1; };
    return rank(a) < rank(b);
  });
  return out;
}

EngineStats ModelPool::stats(int* loaded) {
  std::vector<std::shared_ptr<LoadedModel>> models;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [id, e] : entries_) {
      if (e.state == State::Loaded && e.model) models.push_back(e.model);
    }
  }
  if (loaded) *loaded = static_cast<int>(models.size());
  EngineStats total;
  for (const auto& m : models) {
    const EngineStats s = m->engine().stats();
    total.busy_slots += s.busy_slots;
    total.queued += s.queued;
    total.n_slots += s.n_slots;
    total.steps += s.steps;
    total.step_sequences += s.step_sequences;
    total.step_tokens += s.step_tokens;
    total.step_prompt_tokens += s.step_prompt_tokens;
    total.lane_tokens += s.lane_tokens;
    total.lane_prompts += s.lane_prompts;
    total.draft_tokens += s.draft_tokens;
    total.draft_accepted += s.draft_accepted;
    total.max_step_sequences = std::max(total.max_step_sequences, s.max_step_sequences);
    auto& c = total.cache;
    c.lookups += s.cache.lookups;
    c.hits += s.cache.hits;
    c.tokens_reused += s.cache.tokens_reused;
    c.evictions += s.cache.evictions;
    c.kv_bytes += s.cache.kv_bytes;
    c.checkpoint_bytes += s.cache.checkpoint_bytes;
    c.budget_bytes += s.cache.budget_bytes;
    c.nodes += s.cache.nodes;
    c.checkpoints += s.cache.checkpoints;
    c.host_bytes += s.cache.host_bytes;
    c.host_budget_bytes += s.cache.host_budget_bytes;
    c.host_nodes += s.cache.host_nodes;
    c.spills += s.cache.spills;
    c.restores += s.cache.restores;
  }
  return total;
}

int64_t ModelPool::loads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loads_;
}

int64_t ModelPool::unloads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return unloads_;
}

std::string ModelPool::summary() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = entries_.size() - (pinned_id_.empty() ? 0 : 1);
  std::string where = !options_.dir.empty() ? options_.dir.string() : "the installed models";
  if (!options_.dir.empty() && options_.installed) where += " and the installed models";
  std::string out = fmt::format("{} model{} in {}, loaded on demand", n, n == 1 ? "" : "s", where);
  out += options_.max_loaded > 0 ? fmt::format(", at most {} at once", options_.max_loaded) : ", any number at once";
  if (options_.memory_bytes) out += fmt::format(" within {}", format_bytes(options_.memory_bytes));
  out += options_.keep_alive_s < 0 ? ", kept loaded" : fmt::format(", unloaded after {} idle", format_duration(options_.keep_alive_s));
  return out;
}

double parse_keep_alive(const nlohmann::ordered_json& value, const std::string& param) {
  const auto bad = [&] {
    throw ApiError(400,
                   fmt::format("'{}': a number of seconds or a duration such as \"30s\", \"5m\" or \"1h\" (negative: stay "
                               "loaded)",
                               param),
                   "invalid_request_error", param);
  };
  if (value.is_number()) {
    const double s = value.get<double>();
    if (!std::isfinite(s)) bad();
    return s < 0 ? -1 : s;
  }
  if (!value.is_string()) bad();
  const std::string text = value.get<std::string>();
  if (text.size() > 64) bad();
  static const std::regex number(R"(\s*(-?\d+(\.\d+)?)\s*)");
  std::smatch m;
  if (std::regex_match(text, m, number)) {
    const double s = std::stod(m[1]);
    return s < 0 ? -1 : s;
  }
  // Go's durations, as Ollama's clients send them: "-1m", "1h30m", "500ms".
  static const std::regex whole(R"(((\d+(\.\d+)?)(ms|s|m|h))+)"), part(R"((\d+(?:\.\d+)?)(ms|s|m|h))");
  std::string rest = text;
  const bool negative = !rest.empty() && rest[0] == '-';
  if (negative) rest.erase(0, 1);
  if (rest.empty() || !std::regex_match(rest, whole)) bad();
  double total = 0;
  for (auto it = std::sregex_iterator(rest.begin(), rest.end(), part); it != std::sregex_iterator(); ++it) {
    const std::string unit = (*it)[2];
    total += std::stod((*it)[1]) * (unit == "ms" ? 1e-3 : unit == "s" ? 1 : unit == "m" ? 60 : 3600);
  }
  return negative ? -1 : total;
}

std::string format_duration(double seconds) {
  if (seconds < 0) return "forever";
  if (seconds == 0) return "0s";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return s % 60 ? fmt::format("{}m{}s", s / 60, s % 60) : fmt::format("{}m", s / 60);
  return s % 3600 ? fmt::format("{}h{}m", s / 3600, s % 3600 / 60) : fmt::format("{}h", s / 3600);
}

}  // namespace zinc::server
