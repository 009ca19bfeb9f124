#include <doctest/doctest.h>

#include "sim/core/schema.hpp"

using namespace bitlab;

namespace {
struct Opts {
  double lr = 0.1;
  int64_t steps = 10;
  bool flag = false;
  std::string mode = "a";
  static Schema<Opts> schema() {
    Schema<Opts> s;
    s.field("lr", &Opts::lr, "learning rate", {rules::greater(0.0)});
    s.field("steps", &Opts::steps, "steps", {rules::at_least<int64_t>(0)});
    s.field("flag", &Opts::flag, "a flag");
    s.field("mode", &Opts::mode, "mode", {rules::one_of({"alpha", "beta"})});
    s.check([](const Opts& o, const std::string& path) {
      if (o.flag && o.steps == 0)
        config_fail(join_path(path, "steps"), Json(o.steps), "must be > 0 when flag is true");
    });
    return s;
  }
};

std::string error_of(const Json& j) {
  try {
    Opts::schema().read(j, "opt");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_SUITE("schema") {
  TEST_CASE("defaults are filled and values read") {
    Opts o = Opts::schema().read(Json::parse(R"({"lr": 0.5, "mode": "beta"})"), "opt");
    CHECK(o.lr == 0.5);
    CHECK(o.steps == 10);
    CHECK(o.mode == "beta");
    const Json w = Opts::schema().write(o);
    CHECK(w.dump() == R"({"lr":0.5,"steps":10,"flag":false,"mode":"beta"})");
  }

  TEST_CASE("messages name the path, the value and the rule") {
    CHECK(error_of(Json::parse(R"({"lr": -1})")) == "opt.lr = -1: must be > 0");
    CHECK(error_of(Json::parse(R"({"lr": "fast"})")) == "opt.lr = \"fast\": must be a number");
    CHECK(error_of(Json::parse(R"({"steps": 1.5})")) == "opt.steps = 1.5: must be a whole number");
    CHECK(error_of(Json::parse(R"({"steps": 1e3, "flag": 1})")) ==
          "opt.flag = 1: must be true or false");
    CHECK(error_of(Json::parse(R"({"mode": "alpah"})")) ==
          "opt.mode = \"alpah\": must be one of \"alpha\", \"beta\"; did you mean \"alpha\"?");
    CHECK(error_of(Json::parse(R"({"flag": true, "steps": 0})")) ==
          "opt.steps = 0: must be > 0 when flag is true");
    const std::string unknown = error_of(Json::parse(R"({"lrr": 1})"));
    CHECK(unknown.find("opt.lrr = 1: unknown key; did you mean \"lr\"?") == 0);
    CHECK(error_of(Json::parse("[1]")) == "opt = [1]: must be a JSON object");
  }

  TEST_CASE("integers: whole floats accepted, range checked") {
    CHECK(Opts::schema().read(Json::parse(R"({"steps": 1e3})"), "").steps == 1000);
    CHECK(error_of(Json::parse(R"({"steps": -1})")) == "opt.steps = -1: must be >= 0");
    CHECK(error_of(Json::parse(R"({"steps": 1e300})")) ==
          "opt.steps = 1e+300: must be a whole number");
  }

  TEST_CASE("a former name is read as the field's name, never written; both at once is refused") {
    Schema<Opts> s = Opts::schema();
    s.alias("rate", "lr");
    const Opts o = s.read(Json::parse(R"({"rate": 0.25})"), "opt");
    CHECK(o.lr == 0.25);
    CHECK(s.write(o).contains("lr"));
    CHECK_FALSE(s.write(o).contains("rate"));
    // The renamed value still meets the field's rules, named by the new name.
    std::string why;
    try {
      s.read(Json::parse(R"({"rate": -1})"), "opt");
    } catch (const ConfigError& e) {
      why = e.what();
    }
    CHECK(why.find("opt.lr") != std::string::npos);
    why.clear();
    try {
      s.read(Json::parse(R"({"rate": 0.25, "lr": 0.5})"), "opt");
    } catch (const ConfigError& e) {
      why = e.what();
    }
    CHECK(why.find("opt.rate") != std::string::npos);
    CHECK(why.find("former name of \"lr\"") != std::string::npos);
  }

  TEST_CASE("closest_match") {
    CHECK(closest_match("adm", {"adam", "sgd", "lamb"}) == "adam");
    CHECK(closest_match("zzzzzz", {"adam", "sgd"}).empty());
  }
}
