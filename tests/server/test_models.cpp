// Keep-alive values as requests and --keep-alive give them (numbers of seconds, Go-style durations as
// Ollama's clients send them, negative for "stay loaded"), and how the server prints them; how often
// the model pool looks at its directory.
#include <gtest/gtest.h>

#include <fstream>

#include "raw_gguf.h"
#include "server/models.h"
#include "server/openai.h"

namespace zinc::server {
namespace {

using nlohmann::ordered_json;

double keep_alive(const ordered_json& v) { return parse_keep_alive(v); }

TEST(KeepAlive, NumbersAreSecondsAndNegativeMeansStay) {
  EXPECT_EQ(keep_alive(0), 0);
  EXPECT_EQ(keep_alive(30), 30);
  EXPECT_EQ(keep_alive(2.5), 2.5);
  EXPECT_EQ(keep_alive(-1), -1);
  EXPECT_EQ(keep_alive(-300), -1);
  EXPECT_EQ(keep_alive("0"), 0);
  EXPECT_EQ(keep_alive("90"), 90);
  EXPECT_EQ(keep_alive("-1"), -1);
}

TEST(KeepAlive, DurationsAddTheirParts) {
  EXPECT_EQ(keep_alive("30s"), 30);
  EXPECT_EQ(keep_alive("5m"), 300);
  EXPECT_EQ(keep_alive("1h"), 3600);
  EXPECT_EQ(keep_alive("1h30m"), 5400);
  EXPECT_EQ(keep_alive("1m30s"), 90);
  EXPECT_DOUBLE_EQ(keep_alive("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(keep_alive("1.5m"), 90);
  EXPECT_EQ(keep_alive("-5m"), -1);
}

TEST(KeepAlive, AnythingElseIsA400NamingTheField) {
  for (const ordered_json& v : {ordered_json("soon"), ordered_json("5 minutes"), ordered_json("m"), ordered_json(""),
                                ordered_json("5x"), ordered_json("1h 30m"), ordered_json("-"), ordered_json(true),
                                ordered_json::array(), ordered_json(nullptr), ordered_json(std::string(65, '1')),
                                ordered_json(std::string(400, '9'))}) {
    try {
      keep_alive(v);
      ADD_FAILURE() << "accepted " << v.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << v.dump();
      EXPECT_EQ(e.body()["error"]["param"], "keep_alive") << v.dump();
    }
  }
}

TEST(KeepAlive, PrintedAsTheServerShowsIt) {
  EXPECT_EQ(format_duration(-1), "forever");
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(300), "5m");
  EXPECT_EQ(format_duration(90), "1m30s");
  EXPECT_EQ(format_duration(3600), "1h");
  EXPECT_EQ(format_duration(5400), "1h30m");
}

TEST(ModelPool, AListingPolledOftenDoesNotWalkTheDirectoryEachTimeButAnUnknownNameDoes) {
  test::TempDir tmp;
  const auto dir = tmp.file("models");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.gguf") << "not read: the loader below opens nothing";
  ModelPoolOptions o;
  o.dir = dir;
  std::vector<std::string> asked;
  ModelPool pool(o, [&](const std::string& id, const std::filesystem::path&) -> std::unique_ptr<LoadedModel> {
    asked.push_back(id);
    throw Error("this test loads no model");
  });
  EXPECT_EQ(pool.list().size(), 1u);
  std::ofstream(dir / "b.gguf") << "x";
  EXPECT_EQ(pool.list().size(), 1u);  // looked less than ModelPool::kRescanS ago
  // A request naming the new file finds it at once (the load fails here, but not with a 404).
  try {
    pool.acquire("b");
    ADD_FAILURE() << "the loader throws";
  } catch (const ApiError& e) {
    EXPECT_NE(e.status(), 404) << e.what();
  }
  EXPECT_EQ(asked, std::vector<std::string>{"b"});
  EXPECT_EQ(pool.list().size(), 2u);
  EXPECT_THROW(pool.acquire("c"), ApiError);
}

}  // namespace
}  // namespace zinc::server
