// Managed models: `zinc pull` (download with progress, resume and verification), `zinc list` (installed,
// or --available: the catalog with what fits this machine), `zinc rm`, and `zinc ps` (what a running
// server has loaded).
#include <fmt/format.h>

#include <httplib.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/json_util.h"
#include "backend/probe.h"
#include "cli/terminal.h"
#include "core/format.h"
#include "core/system_info.h"
#include "hub/catalog.h"
#include "hub/store.h"
#include "server/models.h"

namespace zinc::cli {

namespace {

using nlohmann::json;

struct PullArgs {
  std::string spec;
  int retries = 5, stall_seconds = 30, retry_delay_ms = 1000;
  int connections = 4;
  uint64_t parallel_min_mb = 256;
  double max_size_gb = 64;
};

int run_pull(const PullArgs& a, const GlobalOptions& global) {
  hub::DownloadOptions o;
  o.retries = a.retries;
  o.stall_seconds = a.stall_seconds;
  o.retry_delay_ms = a.retry_delay_ms;
  o.connections = a.connections;
  o.parallel_min_bytes = a.parallel_min_mb << 20;
  o.max_bytes = static_cast<uint64_t>(a.max_size_gb * 1e9);
  if (const char* t = std::getenv("HF_TOKEN"); t && *t) o.token = t;
  Progress bar("pull");
  o.progress = [&](uint64_t done, uint64_t total, double rate) { bar.update(done, total, rate); };
  const hub::PullResult r = hub::pull(a.spec, o);
  bar.finish();
  if (global.json) {
    fmt::print("{}\n", dump_json(json{{"id", r.model.id},
                                      {"file", r.model.file.string()},
                                      {"size", r.model.size},
                                      {"architecture", r.model.architecture},
                                      {"sha256", r.model.sha256},
                                      {"verified", r.model.verified},
                                      {"already_installed", r.already_installed},
                                      {"resumed_from", r.download.resumed_from},
                                      {"retries", r.download.retries},
                                      {"connections", r.download.connections}}));
  } else if (r.already_installed) {
    fmt::print("{} is already installed: {}\n", r.model.id, r.model.file.string());
  } else {
    fmt::print("{}: installed at {} ({}, {}{}{})\n", r.model.id, r.model.file.string(), format_bytes(r.model.size),
               r.model.verified ? "SHA-256 verified" : "no published digest to verify",
               r.download.resumed_from ? fmt::format(", resumed from {}", format_bytes(r.download.resumed_from)) : "",
               r.download.retries ? fmt::format(", {} retries", r.download.retries) : "");
  }
  return 0;
}

// A table: aligned columns (two spaces apart), or with --markdown a Markdown table.
void print_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows, bool markdown) {
  if (markdown) {
    std::string h = "|", r = "|";
    for (const auto& c : head) {
      h += " " + c + " |";
      r += "---|";
    }
    fmt::print("{}\n{}\n", h, r);
    for (const auto& row : rows) {
      std::string line = "|";
      for (const auto& c : row) line += " " + c + " |";
      fmt::print("{}\n", line);
    }
    return;
  }
  // Widths in code points: a file name may hold UTF-8.
  const auto width = [](const std::string& s) {
    size_t n = 0;
    for (unsigned char ch : s) n += (ch & 0xc0) != 0x80;
    return n;
  };
  std::vector<size_t> w(head.size(), 0);
  for (size_t i = 0; i < head.size(); ++i) w[i] = width(head[i]);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < w.size(); ++i) w[i] = std::max(w[i], width(row[i]));
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      out += cells[i];
      if (i + 1 < cells.size()) out += std::string(w[i] - width(cells[i]) + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    fmt::print("{}\n", out);
  };
  line(head);
  for (const auto& row : rows) line(row);
}

int run_list(bool available, bool markdown, const GlobalOptions& global) {
  const auto installed = hub::installed_models();
  if (!available) {
    if (global.json) {
      json out = json::array();
      for (const auto& m : installed) {
        out.push_back({{"id", m.id}, {"file", m.file.string()}, {"size", m.size}, {"architecture", m.architecture},
                       {"source", m.source}, {"sha256", m.sha256}, {"verified", m.verified}});
      }
      fmt::print("{}\n", dump_json(out));
      return 0;
    }
    if (installed.empty()) {
      fmt::print("no models installed in {} (zinc list --available shows the catalog; zinc pull ID)\n",
                 hub::models_dir().string());
      return 0;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& m : installed) rows.push_back({m.id, format_bytes(m.size), m.architecture, terminal_safe(m.file.string())});
    print_table({"model", "size", "architecture", "file"}, rows, markdown);
    return 0;
  }
  // Where a model could run: system memory for the CPU, and each GPU the backends see.
  struct Place {
    std::string name;
    uint64_t bytes;
  };
  std::vector<Place> places{{"CPU", memory_info().total_bytes}};
  for (const auto& b : backend::probe_all()) {
    if (!b.ready) continue;
    for (size_t i = 0; i < b.devices.size(); ++i) {
      const auto& d = b.devices[i];
      if (d.kind.find("GPU") == std::string::npos || d.memory_bytes == 0) continue;
      places.push_back({fmt::format("{}:{} {}", b.name, i, d.name), d.memory_bytes});
    }
  }
  json out = json::array();
  for (const auto& e : hub::catalog()) {
    json fits = json::object();
    for (const auto& p : places) fits[p.name] = e.min_memory_bytes <= p.bytes;
    out.push_back({{"id", e.id},
                   {"repo", e.repo},
                   {"file", e.file},
                   {"quant", e.quant},
                   {"size", e.size_bytes},
                   {"architecture", e.architecture},
                   {"min_memory", e.min_memory_bytes},
                   {"fits", fits},
                   {"installed", hub::find_installed(e.id).has_value()}});
  }
  if (global.json) {
    fmt::print("{}\n", dump_json(out));
    return 0;
  }
  std::vector<std::string> head{"model", "quant", "download", "memory needed"};
  for (const auto& p : places) head.push_back(fmt::format("fits {} ({:.0f} GB)", p.name, static_cast<double>(p.bytes) / 1e9));
  head.push_back("installed");
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : out) {
    std::vector<std::string> row{e["id"].get<std::string>(), e["quant"].get<std::string>(),
                                 fmt::format("{:.1f} GB", e["size"].get<double>() / 1e9),
                                 fmt::format("{:.0f} GB", e["min_memory"].get<double>() / 1e9)};
    for (const auto& p : places) row.push_back(e["fits"][p.name].get<bool>() ? "yes" : "no");
    row.push_back(e["installed"].get<bool>() ? "yes" : "");
    rows.push_back(std::move(row));
  }
  print_table(head, rows, markdown);
  return 0;
}

struct PsArgs {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  bool all = false, markdown = false;
};

// `zinc ps`: the models a running server has loaded (GET /v1/models), or with --all every one it serves.
int run_ps(const PsArgs& a, const GlobalOptions& global) {
  std::string url = a.url;
  if (url.find("://") == std::string::npos) url = "http://" + url;
  while (url.ends_with('/')) url.pop_back();
  httplib::Client client(url);
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  httplib::Headers headers;
  if (!a.api_key.empty()) headers.emplace("Authorization", "Bearer " + a.api_key);
  const auto res = client.Get("/v1/models", headers);
  if (!res) throw Error(fmt::format("{}: no server answers there ({})", url, httplib::to_string(res.error())));
  if (res->status != 200) throw Error(fmt::format("{}/v1/models answered {}: {}", url, res->status, res->body));
  json models;
  try {
    models = json::parse(res->body).at("data");
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}/v1/models: not a model list ({})", url, e.what()));
  }
  json shown = json::array();
  for (const auto& m : models) {
    if (a.all || m.value("status", "loaded") != "available") shown.push_back(m);
  }
  if (global.json) {
    fmt::print("{}\n", shown.dump(2));
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : shown) {
    const std::string status = m.value("status", "loaded");
    std::string until = "-";
    if (status == "loaded") {
      if (m.value("pinned", false)) {
        until = "kept (-m)";
      } else if (m.value("requests", 0) > 0) {
        until = "in use";
      } else if (m.contains("expires_in") && m["expires_in"].is_number()) {
        until = "idle, unloads in " + server::format_duration(m["expires_in"].get<double>());
      } else {
        until = "idle, kept";
      }
    }
    const json meta = m.value("meta", json::object());
    rows.push_back({m.value("id", ""), status, format_bytes(m.value("bytes", uint64_t{0})), meta.value("backend", "-"),
                    meta.contains("n_ctx") ? std::to_string(meta["n_ctx"].get<int64_t>()) : "-",
                    meta.contains("slots") ? fmt::format("{}/{}", meta.value("slots_busy", 0), meta.value("slots", 0)) : "-",
                    until});
  }
  if (rows.empty()) {
    fmt::print("{} has no model loaded{}\n", url, a.all ? "" : " (--all lists those it can load)");
    return 0;
  }
  print_table({"model", "status", "size", "backend", "context", "busy", "until"}, rows, a.markdown);
  return 0;
}

void add_hub_commands(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto p = std::make_shared<PullArgs>();
  CLI::App* pull = app.add_subcommand("pull", "Download a model: a catalog id, hf://owner/repo/file.gguf or an https:// URL");
  pull->add_option("model", p->spec, "What to download")->required();
  pull->add_option("--retries", p->retries, "Attempts after a failure, each resuming")->capture_default_str();
  pull->add_option("--stall-timeout", p->stall_seconds, "Seconds without data before reconnecting")->capture_default_str();
  pull->add_option("--retry-delay-ms", p->retry_delay_ms, "Wait before the first retry (doubles each time)")
      ->capture_default_str();
  pull->add_option("--connections", p->connections, "Byte ranges fetched at once for large files")
      ->capture_default_str()
      ->check(CLI::Range(1, 32));
  pull->add_option("--parallel-min-mb", p->parallel_min_mb, "Files at least this large use several connections")
      ->capture_default_str();
  pull->add_option("--max-size", p->max_size_gb, "Largest file accepted, in GB (a server that sends more is cut off)")
      ->capture_default_str()
      ->check(CLI::Range(0.000001, 1e6));
  pull->callback([p, &global, &run] { run = [p, &global] { return run_pull(*p, global); }; });

  auto available = std::make_shared<bool>(false), markdown = std::make_shared<bool>(false);
  CLI::App* list = app.add_subcommand("list", "Installed models (--available: the catalog)");
  list->add_flag("--available", *available, "Show the catalog of managed models and what fits this machine");
  list->add_flag("--markdown", *markdown, "A Markdown table instead of aligned columns");
  list->callback([available, markdown, &global, &run] {
    run = [available, markdown, &global] { return run_list(*available, *markdown, global); };
  });

  auto ps = std::make_shared<PsArgs>();
  CLI::App* ps_cmd = app.add_subcommand("ps", "Models a running zinc serve has loaded (--all: every one it serves)");
  ps_cmd->add_option("--url", ps->url, "The server")->capture_default_str();
  ps_cmd->add_option("--api-key", ps->api_key, "Its API key (zinc serve --api-key)");
  ps_cmd->add_flag("--all", ps->all, "Also the models it would load on demand");
  ps_cmd->add_flag("--markdown", ps->markdown, "A Markdown table instead of aligned columns");
  ps_cmd->callback([ps, &global, &run] { run = [ps, &global] { return run_ps(*ps, global); }; });

  auto id = std::make_shared<std::string>();
  CLI::App* rm = app.add_subcommand("rm", "Remove an installed model");
  rm->add_option("model", *id, "Installed model id")->required();
  rm->callback([id, &run] {
    run = [id] {
      hub::remove_installed(*id);
      fmt::print("removed {}\n", *id);
      return 0;
    };
  });
}

}  // namespace

ZINC_COMMAND(3, add_hub_commands);

}  // namespace zinc::cli
