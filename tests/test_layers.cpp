// The rules of the house (sim/layers.txt): every include of sim/, optimizers/
// and problems/ goes down the layers or stays in its own; no source file
// stands outside a layer; every layer folder says what it owns (README.md).
// The checker runs on the real tree and, to show that it can fail, on small
// trees with planted violations.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_fixtures.hpp"

namespace fs = std::filesystem;
using bitlab::testing::slurp;
using bitlab::testing::TempDir;

namespace {

struct LayerRules {
  std::vector<std::string> layers;                       // from the ground up
  std::map<std::string, std::set<std::string>> allowed;  // layer -> layers it may include
  std::map<std::string, std::set<std::string>> headers;  // <header> -> layers that may include it
};

LayerRules parse_layer_rules(const std::string& text) {
  LayerRules rules;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto colon = line.find(':', line[0] == '<' ? line.find('>') : 0);
    REQUIRE_MESSAGE(colon != std::string::npos, "sim/layers.txt: no ':' in \"" << line << "\"");
    const std::string key = line.substr(0, colon);
    std::istringstream names(line.substr(colon + 1));
    std::set<std::string> set;
    for (std::string n; names >> n;) set.insert(n);
    if (key[0] == '<') {
      rules.headers[key.substr(1, key.size() - 2)] = set;
    } else {
      rules.layers.push_back(key);
      rules.allowed[key] = set;
    }
  }
  return rules;
}

// The layer a repository path belongs to ("" when it is in none).
std::string layer_of(const std::string& path) {
  static const std::regex kSim("^sim/([a-z_]+)/.+");
  static const std::regex kTop("^(optimizers|problems)/.+");
  std::smatch m;
  if (std::regex_match(path, m, kSim) || std::regex_match(path, m, kTop)) return m[1];
  return "";
}

bool is_source(const fs::path& p) {
  static const std::set<std::string> kExt = {".cpp", ".hpp", ".h", ".cu", ".inc", ".cc"};
  return kExt.count(p.extension().string()) > 0;
}

// Every broken rule under `root`, one line each ("file: what").
std::vector<std::string> layer_violations(const fs::path& root, const LayerRules& rules) {
  std::vector<std::string> out;
  static const std::regex kInclude(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  std::vector<std::string> files;
  for (const char* top : {"sim", "optimizers", "problems"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (e.is_regular_file() && is_source(e.path())) {
        files.push_back(fs::relative(e.path(), root).generic_string());
      }
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    const std::string layer = layer_of(file);
    if (layer.empty() || !rules.allowed.count(layer)) {
      out.push_back(file + ": in no layer of sim/layers.txt");
      continue;
    }
    std::istringstream in(slurp(root / file));
    std::string line;
    for (int no = 1; std::getline(in, line); ++no) {
      std::smatch m;
      if (!std::regex_search(line, m, kInclude)) continue;
      const std::string target = m[2];
      const std::string where = file + ":" + std::to_string(no) + ": ";
      if (m[1] == "<") {
        const auto h = rules.headers.find(target);
        if (h != rules.headers.end() && !h->second.count(layer)) {
          out.push_back(where + "<" + target + "> may only be included by: " + [&] {
            std::string s;
            for (const auto& l : h->second) s += (s.empty() ? "" : ", ") + l;
            return s;
          }());
        }
        continue;
      }
      const std::string to = layer_of(target);
      if (to.empty()) {
        out.push_back(where + "\"" + target + "\" is in no layer");
      } else if (to != layer && !rules.allowed.at(layer).count(to)) {
        out.push_back(where + layer + " may not include " + to + " (\"" + target + "\")");
      }
    }
  }
  // Every layer folder of sim/ says what it owns.
  for (const auto& layer : rules.layers) {
    const fs::path dir =
        (layer == "optimizers" || layer == "problems") ? root / layer : root / "sim" / layer;
    if (fs::is_directory(dir) && !fs::exists(dir / "README.md")) {
      out.push_back(fs::relative(dir, root).generic_string() + "/: no README.md");
    }
  }
  // Every folder of sim/ is a layer.
  if (fs::is_directory(root / "sim")) {
    for (const auto& e : fs::directory_iterator(root / "sim")) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && !rules.allowed.count(name)) {
        out.push_back("sim/" + name + "/: a folder that is no layer of sim/layers.txt");
      }
    }
  }
  return out;
}

// Every source, script, notebook and document of the project (no build
// output; of results/ only its README).
std::vector<fs::path> project_files(const fs::path& root) {
  static const std::set<std::string> kExt = {".cpp", ".hpp", ".h",     ".cu",  ".inc",
                                             ".py",  ".sh",  ".ipynb", ".txt", ".md"};
  std::vector<fs::path> out;
  for (const char* top :
       {"sim", "optimizers", "problems", "tests", "notebooks", "experiments", "docs"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (e.is_regular_file() && kExt.count(e.path().extension().string())) {
        out.push_back(e.path());
      }
    }
  }
  for (const char* file :
       {"CMakeLists.txt", "setup.sh", "README.md", ".ci/run", "results/README.md"}) {
    out.push_back(root / file);
  }
  return out;
}

// A tiny tree in `dir` that keeps every rule; each planted case breaks one.
const fs::path& clean_tree(const TempDir& dir) {
  dir.file("sim/core/README.md", "core");
  dir.file("sim/core/rng.hpp", "#pragma once\n#include <cstdint>\n");
  dir.file("sim/timing/README.md", "timing");
  dir.file("sim/timing/network.hpp", "#include \"sim/core/rng.hpp\"\n");
  dir.file("sim/compress/README.md", "compress");
  dir.file("sim/compress/sign.cpp", "#include \"sim/core/rng.hpp\"\n");
  dir.file("sim/cli/README.md", "cli");
  dir.file("sim/cli/main.cpp", "#include <CLI/CLI.hpp>\n#include \"sim/timing/network.hpp\"\n");
  dir.file("problems/README.md", "problems");
  dir.file("problems/problem.hpp", "#include \"sim/core/rng.hpp\"\n");
  dir.file("optimizers/README.md", "optimizers");
  dir.file("optimizers/adam.cpp", "#include \"sim/compress/sign.hpp\"\n");
  return dir.path;
}

const char* kTinyRules =
    "core:\ncompress: core\ntiming: core\nproblems: core\noptimizers: core compress\n"
    "cli: core compress timing problems optimizers\n<CLI/CLI.hpp>: cli\n";

}  // namespace

TEST_SUITE("layers") {
  TEST_CASE("every include of the real tree keeps the rules of sim/layers.txt") {
    const fs::path root = BITLAB_SOURCE_DIR;
    const LayerRules rules = parse_layer_rules(slurp(root / "sim/layers.txt"));
    REQUIRE(rules.layers.size() >= 10);
    const auto violations = layer_violations(root, rules);
    for (const auto& v : violations) MESSAGE(v);
    CHECK(violations.empty());
  }

  TEST_CASE("the rules themselves only look down: a layer includes layers listed before it") {
    const LayerRules rules =
        parse_layer_rules(slurp(fs::path(BITLAB_SOURCE_DIR) / "sim/layers.txt"));
    std::set<std::string> below;
    for (const auto& layer : rules.layers) {
      for (const auto& to : rules.allowed.at(layer)) {
        CHECK_MESSAGE(below.count(to), layer << " may include " << to << ", listed later");
      }
      below.insert(layer);
    }
    // The rules the design states in words (docs/design.md, "The rules").
    CHECK_FALSE(rules.allowed.at("optimizers").count("problems"));
    CHECK_FALSE(rules.allowed.at("problems").count("optimizers"));
    CHECK_FALSE(rules.allowed.at("optimizers").count("timing"));
    CHECK_FALSE(rules.allowed.at("compress").count("timing"));
    CHECK(rules.headers.at("CLI/CLI.hpp") == std::set<std::string>{"cli"});
  }

  TEST_CASE("the checker passes a clean tree and names each planted violation") {
    const LayerRules rules = parse_layer_rules(kTinyRules);
    CHECK(layer_violations(clean_tree(TempDir()), rules).empty());

    struct Plant {
      const char* what;
      const char* file;
      const char* text;
      const char* expect;  // a piece of the one violation reported
    };
    const Plant plants[] = {
        {"optimizer includes a problem", "optimizers/lamb.cpp",
         "#include \"problems/problem.hpp\"\n",
         "optimizers/lamb.cpp:1: optimizers may not include problems"},
        {"compressor includes the network model", "sim/compress/x.hpp",
         "#include <vector>\n  #  include \"sim/timing/network.hpp\"\n",
         "sim/compress/x.hpp:2: compress may not include timing"},
        {"argv parsed outside the CLI", "sim/timing/flags.cpp", "#include <CLI/CLI.hpp>\n",
         "<CLI/CLI.hpp> may only be included by: cli"},
        {"a loose source file in sim/", "sim/loose.cpp", "int x;\n", "sim/loose.cpp: in no layer"},
        {"an include of no layer", "sim/core/a.cpp", "#include \"lib/thing.hpp\"\n",
         "\"lib/thing.hpp\" is in no layer"},
        {"a folder that is no layer", "sim/extra/README.md", "x",
         "sim/extra/: a folder that is no layer"},
    };
    for (const auto& p : plants) {
      CAPTURE(p.what);
      const TempDir dir;
      clean_tree(dir);
      dir.file(p.file, p.text);
      const auto v = layer_violations(dir.path, rules);
      REQUIRE(v.size() == 1);
      CHECK_MESSAGE(v[0].find(p.expect) != std::string::npos, v[0]);
    }
    const TempDir dir;
    fs::remove(clean_tree(dir) / "sim/timing/README.md");
    const auto v = layer_violations(dir.path, rules);
    REQUIRE(v.size() == 1);
    CHECK(v[0] == "sim/timing/: no README.md");
  }

  TEST_CASE("every document the code cites is in the repository, every section too") {
    // A comment, a doc string in `bitlab list` or a line of command output
    // that names a .md file must name one of this repository (relative to
    // the root or to the citing file's folder), and a "docs/algorithms.md §N"
    // must find its section "## N." there.
    const fs::path root = BITLAB_SOURCE_DIR;
    const std::string algorithms = slurp(root / "docs/algorithms.md");
    static const std::regex kDoc(R"(([A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md)\b)");
    static const std::regex kSection(
        R"(docs/algorithms\.md,? (?:section |§)(\d+)((?:,? (?:and )?§\d+)*))");
    static const std::regex kMore(R"(§(\d+))");
    std::set<std::string> missing;
    int cited = 0;
    for (const auto& file : project_files(root)) {
      if (file.filename() == "test_layers.cpp") continue;  // its planted trees cite made-up files
      const std::string text = slurp(file);
      const std::string name = fs::relative(file, root).generic_string();
      for (std::sregex_iterator it(text.begin(), text.end(), kDoc), end; it != end; ++it) {
        const std::string doc = (*it)[1];
        ++cited;
        if (!fs::exists(root / doc) && !fs::exists(file.parent_path() / doc)) {
          missing.insert(name + ": " + doc);
        }
      }
      for (std::sregex_iterator it(text.begin(), text.end(), kSection), end; it != end; ++it) {
        std::vector<std::string> sections = {(*it)[1]};
        const std::string more = (*it)[2];
        for (std::sregex_iterator m(more.begin(), more.end(), kMore); m != end; ++m) {
          sections.push_back((*m)[1]);
        }
        for (const auto& n : sections) {
          if (algorithms.find("\n## " + n + ". ") == std::string::npos) {
            missing.insert(name + ": docs/algorithms.md §" + n);
          }
        }
      }
    }
    for (const auto& m : missing) MESSAGE("cited but not in the repository: " << m);
    CHECK(missing.empty());
    CHECK(cited > 50);  // the scan reads the citations (about 80 today)
  }

  TEST_CASE("no comment refers to an issue number") {
    // Issues are the tracker's; the code explains itself and cites docs/.
    const fs::path root = BITLAB_SOURCE_DIR;
    static const std::regex kIssue(R"(\bissue #?\d+|\(#\d+\))", std::regex::icase);
    std::vector<std::string> found;
    for (const auto& file : project_files(root)) {
      if (file.filename() == "test_layers.cpp") continue;  // the rule itself names the pattern
      std::istringstream in(slurp(file));
      std::string line;
      for (int no = 1; std::getline(in, line); ++no) {
        if (std::regex_search(line, kIssue)) {
          found.push_back(fs::relative(file, root).generic_string() + ":" + std::to_string(no));
        }
      }
    }
    for (const auto& f : found) MESSAGE("refers to an issue number: " << f);
    CHECK(found.empty());
  }
}
