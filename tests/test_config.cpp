#include <doctest/doctest.h>

#include "sim/engine/config.hpp"

using namespace bitlab;

namespace {
const char* kBase = R"({
  "name": "t", "steps": 5,
  "problem": {"name": "logistic"},
  "optimizer": {"name": "adam", "lr": 0.01}
})";

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    Json raw = parse_json_text(text, "exp.json");
    for (const auto& s : sets) apply_set(raw, s);
    resolve_experiment(raw, "exp", sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_SUITE("config") {
  TEST_CASE("a valid file resolves with every default filled in") {
    Experiment e = resolve_experiment(Json::parse(kBase), "exp");
    CHECK(e.run.steps == 5);
    CHECK(e.cluster.workers == 1);
    CHECK(e.resolved["optimizer"]["beta2"] == 0.999);
    CHECK(e.resolved["optimizer"]["lr"] == 0.01);
    CHECK(e.resolved["cluster"]["batch_size"] == 32);
    CHECK(e.resolved["problem"].contains("dim"));
    CHECK(e.resolved["name"] == "t");
    // The resolved config resolves to itself (a saved config.json re-runs).
    Experiment again = resolve_experiment(e.resolved, "other");
    CHECK(again.resolved == e.resolved);
    // default name: the file's stem
    Json raw = Json::parse(kBase);
    raw.erase("name");
    CHECK(resolve_experiment(raw, "stem").run.name == "stem");
  }

  TEST_CASE("syntax errors give line and column") {
    const std::string msg = error_of("{\n  \"steps\": 5,\n  \"seed\": ,\n}");
    CHECK(msg.find("exp.json:3:11: JSON syntax error") == 0);
  }

  TEST_CASE("each kind of bad value names the path, the value and the rule") {
    Json j = Json::parse(kBase);
    auto with = [&](const std::string& path, const Json& v) {
      Json k = j;
      Json* node = &k;
      std::string rest = path;
      for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
        node = &(*node)[rest.substr(0, dot)];
        rest = rest.substr(dot + 1);
      }
      (*node)[rest] = v;
      return error_of(k.dump());
    };
    CHECK(with("stpes", 3).find("stpes = 3: unknown key; did you mean \"steps\"?") == 0);
    CHECK(with("steps", "ten") == "steps = \"ten\": must be an integer");
    CHECK(with("steps", 0) == "steps = 0: must be >= 1");
    CHECK(with("optimizer.lr", -1) == "optimizer.lr = -1: must be > 0");
    CHECK(with("optimizer.name", "adma").find("optimizer.name = \"adma\": must be one of") == 0);
    CHECK(with("optimizer.name", "adma").find("did you mean \"adam\"?") != std::string::npos);
    CHECK(with("problem.name", "logistc").find("did you mean \"logistic\"?") != std::string::npos);
    CHECK(with("cluster.workers", 0) == "cluster.workers = 0: must be >= 1");
    CHECK(with("cluster.batch_size", "half") ==
          "cluster.batch_size = \"half\": must be a positive integer or \"full\"");
    CHECK(with("cluster.sharding", "iid2").find("did you mean \"iid\"?") != std::string::npos);
    CHECK(with("name", "a/b").find("name = \"a/b\": must use only letters") == 0);
    Json k = j;
    k.erase("optimizer");
    CHECK(error_of(k.dump()) == "optimizer = null: missing; it must be an object with a \"name\"");
    CHECK(error_of("[1, 2]") == "(experiment) = [1,2]: an experiment must be a JSON object");
  }

  TEST_CASE("--set overrides, creates sections, and names itself in errors") {
    Json raw = Json::parse(kBase);
    apply_set(raw, "cluster.workers=4");
    apply_set(raw, "optimizer.lr=0.5");
    apply_set(raw, "cluster.batch_size=full");
    Experiment e = resolve_experiment(raw, "x");
    CHECK(e.cluster.workers == 4);
    CHECK(e.cluster.batch_size.full);
    CHECK(e.resolved["optimizer"]["lr"] == 0.5);

    CHECK(error_of(kBase, {"optimizer.lrr=0.1"})
              .find("--set optimizer.lrr=0.1: optimizer.lrr = 0.1: unknown key; did you mean "
                    "\"lr\"?") == 0);
    CHECK(error_of(kBase, {"steps.x=1"}) ==
          "--set steps.x=1: steps is not an object, so it has no key \"x\"");
    CHECK(error_of(kBase, {"noequals"}).find("--set noequals: must have the form path=value") == 0);
    CHECK(error_of(kBase, {"cluster.workers=-2"}) ==
          "--set cluster.workers=-2: cluster.workers = -2: must be >= 1");
  }
}
