// The rules of the house (sim/layers.txt): every include of sim/, optimizers/,
// problems/ and python/ (its pybind11 sources, python/src/) goes down the
// layers or stays in its own; no source file
// stands outside a layer; every layer folder says what it owns (README.md).
// Two checkers: one reads the #include lines (with their line numbers), the
// other what the compiler actually included, whatever the spelling (angle
// brackets, "../", a macro, any file extension): the dependency lists the
// build's compiler wrote (-MD, read back with `ninja -t deps`) for every
// translation unit, and `c++ -M -MG` for a header no translation unit of its
// own layer includes. Both run on the real tree and, to show that they can
// fail, on small trees with planted violations.
#include <doctest/doctest.h>
#include <fnmatch.h>
#include <stdio.h>

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
  static const std::regex kTop("^(optimizers|problems|python)/.+");
  std::smatch m;
  if (std::regex_match(path, m, kSim) || std::regex_match(path, m, kTop)) return m[1];
  return "";
}

// Every extension a C, C++ or CUDA source or header goes by.
bool is_source(const fs::path& p) {
  static const std::set<std::string> kExt = {".c",   ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h",
                                             ".hh",  ".hpp", ".hxx", ".inc", ".inl", ".ipp", ".tpp"};
  return kExt.count(p.extension().string()) > 0;
}

bool is_translation_unit(const fs::path& p) {
  static const std::set<std::string> kExt = {".c", ".cc", ".cpp", ".cxx", ".cu"};
  return kExt.count(p.extension().string()) > 0;
}

// Does `path` (a dependency as the compiler wrote it) match `pattern`, a
// reserved header of sim/layers.txt ("CLI/*", "mpi.h")? The pattern's parts
// match consecutive components of the path (fnmatch each); a last part "*"
// takes every component to the end, otherwise the match ends the path. So
// <CLI/*> is every header under a CLI/ folder wherever it is installed, and
// <mpi.h> is mpi.h in any folder.
bool header_matches(const fs::path& path, const std::string& pattern) {
  std::vector<std::string> parts, pat;
  for (const auto& c : path) parts.push_back(c.string());
  for (const auto& c : fs::path(pattern)) pat.push_back(c.string());
  const bool open = !pat.empty() && pat.back() == "*";
  if (open) pat.pop_back();
  for (size_t i = 0; i + pat.size() <= parts.size(); ++i) {
    bool ok = true;
    for (size_t j = 0; j < pat.size() && ok; ++j) {
      ok = fnmatch(pat[j].c_str(), parts[i + j].c_str(), 0) == 0;
    }
    const size_t end = i + pat.size();
    if (ok && (open ? end < parts.size() : end == parts.size())) return true;
  }
  return false;
}

// "a, b, c"
std::string joined(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Every source and header of the layers under `root`, relative.
std::vector<std::string> layer_files(const fs::path& root) {
  std::vector<std::string> files;
  for (const char* top : {"sim", "optimizers", "problems", "python"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (e.is_regular_file() && is_source(e.path())) {
        files.push_back(fs::relative(e.path(), root).generic_string());
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Every broken rule under `root`, one line each ("file: what").
std::vector<std::string> layer_violations(const fs::path& root, const LayerRules& rules) {
  std::vector<std::string> out;
  static const std::regex kInclude(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  for (const auto& file : layer_files(root)) {
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
      const std::string to = layer_of(fs::path(target).lexically_normal().generic_string());
      if (m[1] == "<" && to.empty()) {
        for (const auto& [pattern, layers] : rules.headers) {
          if (header_matches(target, pattern) && !layers.count(layer)) {
            out.push_back(where + "<" + target + "> may only be included by: " + joined(layers));
            break;
          }
        }
        continue;
      }
      if (to.empty()) {
        out.push_back(where + "\"" + target + "\" is in no layer");
      } else if (to != layer && !rules.allowed.at(layer).count(to)) {
        out.push_back(where + layer + " may not include " + to + " (\"" + target + "\")");
      }
    }
  }
  // Every layer folder of sim/ says what it owns.
  for (const auto& layer : rules.layers) {
    const bool top = layer == "optimizers" || layer == "problems" || layer == "python";
    const fs::path dir = top ? root / layer : root / "sim" / layer;
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

// What the compiler included, per file of a layer (repository-relative path ->
// the dependencies it listed, absolute or, for a header -MG could not find,
// as spelled).
using DepMap = std::map<std::string, std::vector<fs::path>>;

// Runs `command` and returns its standard output ("" if it could not start).
std::string command_output(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// The dependencies of a make rule as `c++ -M` writes it ("x.o: a b \ c").
std::vector<fs::path> parse_make_rule(const std::string& text) {
  std::vector<fs::path> deps;
  std::istringstream in(text.substr(text.find(':') + 1));
  for (std::string word; in >> word;) {
    if (word != "\\") deps.push_back(word);
  }
  return deps;
}

// Every file of `files` (relative to `root`) preprocessed alone: `c++ -M -MG`
// lists everything it included, transitively; a header it cannot find
// (<mpi/mpi.h> without MPI) is listed as spelled instead of failing.
DepMap preprocessor_deps(const fs::path& root, const std::vector<std::string>& files) {
  DepMap deps;
  for (const auto& file : files) {
    const std::string text = command_output(std::string(BITLAB_CXX) +
                                            " -std=c++20 -x c++ -M -MG -I" + quoted(root) + " " +
                                            quoted(root / file) + " 2>/dev/null");
    deps[file] = parse_make_rule(text);
  }
  return deps;
}

// The dependency lists the build's compiler wrote for every translation unit
// it compiled (-MD; Ninja keeps them in .ninja_deps), by source file. Only
// lists Ninja marks VALID (written by the latest compile of their source).
DepMap build_deps(const fs::path& root, const fs::path& build) {
  DepMap deps;
  const std::string text = command_output(std::string(BITLAB_MAKE_PROGRAM) + " -C " +
                                          quoted(build) + " -t deps 2>/dev/null");
  std::istringstream in(text);
  std::string line;
  std::vector<fs::path>* current = nullptr;
  bool first = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] != ' ') {
      current = nullptr;
      first = line.find("(VALID)") != std::string::npos;
      continue;
    }
    const fs::path dep = (build / line.substr(line.find_first_not_of(' '))).lexically_normal();
    if (first) {  // the first dependency is the source itself
      first = false;
      const std::string rel = fs::relative(dep, root).generic_string();
      current = rel.rfind("..", 0) == 0 ? nullptr : &deps[rel];
      continue;
    }
    if (current != nullptr) current->push_back(dep);
  }
  return deps;
}

// Every include of `deps` that breaks a rule: a file includes (transitively)
// a file of a layer its own may not include (unless a header it may include
// brought it in, below), a file of the tree that is in no layer, or a
// reserved system header. Files under `generated` (the build folder: the
// precompiled header, version.cpp) are no layer's and pass.
std::vector<std::string> compiled_violations(const fs::path& root, const LayerRules& rules,
                                             const DepMap& deps, const fs::path& generated) {
  std::set<std::string> out, reported;
  const fs::path canon_root = fs::weakly_canonical(root);
  // A dependency of a forbidden layer is no violation when a header of a
  // layer the file may include, which may itself include that layer, brought
  // it in (the optimizers' Cluster interface names the Problem: cluster.hpp
  // includes problem.hpp, which optimizers may not include themselves). The
  // lists are transitive, so this asks the header's own list (`c++ -M`,
  // once per header). What the file wrote itself is still held to the rule
  // by the line reader.
  std::map<std::string, std::set<std::string>> header_deps;
  const auto brought_in = [&](const std::vector<fs::path>& list, const std::string& layer,
                              const std::string& dep, const std::string& dep_layer) {
    for (const auto& other : list) {
      std::error_code ec;
      const fs::path rel_path = fs::relative(fs::weakly_canonical(other), canon_root, ec);
      const std::string rel = rel_path.generic_string();
      const std::string via = layer_of(rel);
      if (via.empty() || via == layer || via == dep_layer || rel.rfind("..", 0) == 0) continue;
      if (!rules.allowed.at(layer).count(via) || !rules.allowed.count(via) ||
          !rules.allowed.at(via).count(dep_layer)) {
        continue;
      }
      if (!header_deps.count(rel)) {
        std::set<std::string>& set = header_deps[rel];
        const DepMap own = preprocessor_deps(root, {rel});  // kept: the loop reads into it
        for (const auto& d : own.at(rel)) {
          const fs::path r = fs::relative(fs::weakly_canonical(root / d), canon_root, ec);
          set.insert(d.is_absolute() ? fs::relative(fs::weakly_canonical(d), canon_root, ec)
                                            .generic_string()
                                     : r.generic_string());
        }
      }
      if (header_deps[rel].count(dep)) return true;
    }
    return false;
  };
  for (const auto& [file, list] : deps) {
    const std::string layer = layer_of(file);
    if (!rules.allowed.count(layer)) continue;  // the text checker names it
    for (const auto& dep : list) {
      const fs::path abs = dep.is_absolute() ? fs::weakly_canonical(dep) : dep.lexically_normal();
      if (!generated.empty() && abs.is_absolute() &&
          fs::relative(abs, fs::weakly_canonical(generated)).native().rfind("..", 0) != 0) {
        continue;
      }
      std::string rel = abs.generic_string();
      if (abs.is_absolute()) {
        const fs::path r = fs::relative(abs, canon_root);
        if (!r.empty() && r.native().rfind("..", 0) != 0) rel = r.generic_string();
      }
      const std::string to = layer_of(rel);
      const bool in_tree = !abs.is_absolute() ? !to.empty() : rel != abs.generic_string();
      const std::string where = file + ": the compiler included " + rel + ": ";
      if (in_tree) {
        if (rel == file) continue;
        if (to.empty()) {
          out.insert(where + "it is in no layer");
        } else if (to != layer && !rules.allowed.at(layer).count(to) &&
                   !brought_in(list, layer, rel, to)) {
          out.insert(where + layer + " may not include " + to);
        }
        continue;
      }
      for (const auto& [pattern, layers] : rules.headers) {
        // One line per file and reserved group (a reserved header pulls in
        // its neighbours, and may match several patterns of its group): the
        // first one the compiler listed.
        if (header_matches(abs, pattern) && !layers.count(layer)) {
          if (reported.insert(file + " " + joined(layers)).second) {
            out.insert(where + "<" + pattern + "> may only be included by: " + joined(layers));
          }
          break;
        }
      }
    }
  }
  return {out.begin(), out.end()};
}

// The real tree's dependencies: the build's lists for its translation units,
// and `c++ -M -MG` for every other file of a layer (a translation unit the
// build did not compile, such as sim/cuda/kernels.cu without CUDA, and a
// header that no translation unit of its own layer includes: one that is
// included by its own layer is held to the rule through that unit's list).
DepMap tree_deps(const fs::path& root, const fs::path& build, std::vector<std::string>* alone) {
  DepMap deps = build_deps(root, build);
  const std::vector<std::string> files = layer_files(root);
  for (auto it = deps.begin(); it != deps.end();) {
    it = std::binary_search(files.begin(), files.end(), it->first) ? std::next(it) : deps.erase(it);
  }
  std::set<std::string> covered;  // "layer file" pairs covered by a unit of the same layer
  const fs::path canon_root = fs::weakly_canonical(root);
  for (const auto& [file, list] : deps) {
    for (const auto& dep : list) {
      const fs::path r = fs::relative(fs::weakly_canonical(dep), canon_root);
      if (layer_of(r.generic_string()) == layer_of(file)) covered.insert(r.generic_string());
    }
  }
  for (const auto& file : files) {
    if (!deps.count(file) && !covered.count(file)) alone->push_back(file);
  }
  const DepMap more = preprocessor_deps(root, *alone);
  deps.insert(more.begin(), more.end());
  return deps;
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
  dir.file("sim/comm/README.md", "comm");
  dir.file("sim/comm/comm.cpp", "#include <mpi.h>\n#include \"sim/core/rng.hpp\"\n");
  dir.file("sim/cli/README.md", "cli");
  dir.file("sim/cli/main.cpp", "#include <CLI/CLI.hpp>\n#include \"sim/timing/network.hpp\"\n");
  dir.file("problems/README.md", "problems");
  dir.file("problems/problem.hpp", "#include \"sim/core/rng.hpp\"\n");
  dir.file("optimizers/README.md", "optimizers");
  dir.file("optimizers/adam.cpp", "#include \"sim/compress/sign.hpp\"\n");
  dir.file("python/README.md", "python");
  dir.file("python/src/module.cpp", "#include \"sim/timing/network.hpp\"\n");
  dir.file("sim/cli/commands.hpp", "#pragma once\n#include <CLI/CLI.hpp>\n");
  return dir.path;
}

const char* kTinyRules =
    "core:\ncomm: core\ncompress: core\ntiming: core\nproblems: core\noptimizers: core compress\n"
    "python: core comm compress timing problems optimizers\n"
    "cli: core comm compress timing problems optimizers\n<CLI/*>: cli\n<mpi.h>: comm\n"
    "<mpi/*>: comm\n";

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
    CHECK(rules.headers.at("CLI/*") == std::set<std::string>{"cli"});
    CHECK(rules.headers.at("mpi.h") == std::set<std::string>{"comm"});
    CHECK(rules.allowed.at("kernels") == std::set<std::string>{"core"});  // the numerics floor
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
        {"another CLI11 header", "sim/timing/app.cpp", "#include <CLI/App.hpp>\n",
         "<CLI/App.hpp> may only be included by: cli"},
        {"MPI through another folder", "sim/timing/m.cpp", "#include <mpi/mpi.h>\n",
         "<mpi/mpi.h> may only be included by: comm"},
        {"a layer in angle brackets", "sim/compress/y.cpp", "#include <sim/timing/network.hpp>\n",
         "sim/compress/y.cpp:1: compress may not include timing"},
        {"a layer through ..", "sim/compress/z.cpp",
         "#include \"sim/compress/../timing/network.hpp\"\n", "compress may not include timing"},
        {"a CUDA header", "sim/compress/k.cuh", "#include \"sim/timing/network.hpp\"\n",
         "sim/compress/k.cuh:1: compress may not include timing"},
        {"a loose source file in sim/", "sim/loose.cpp", "int x;\n", "sim/loose.cpp: in no layer"},
        {"an include of no layer", "sim/core/a.cpp", "#include \"lib/thing.hpp\"\n",
         "\"lib/thing.hpp\" is in no layer"},
        {"a folder that is no layer", "sim/extra/README.md", "x",
         "sim/extra/: a folder that is no layer"},
        {"the Python module includes the CLI", "python/src/list.cpp",
         "#include \"sim/cli/commands.hpp\"\n",
         "python/src/list.cpp:1: python may not include cli"},
        {"the Python module parses argv", "python/src/flags.cpp", "#include <CLI/CLI.hpp>\n",
         "<CLI/CLI.hpp> may only be included by: cli"},
    };
    for (const auto& p : plants) {
      const std::string what = p.what;
      CAPTURE(what);
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

  TEST_CASE("every file, as the compiler saw it, keeps the rules of sim/layers.txt") {
    const fs::path root = BITLAB_SOURCE_DIR;
    const LayerRules rules = parse_layer_rules(slurp(root / "sim/layers.txt"));
    std::vector<std::string> alone;
    const DepMap deps = tree_deps(root, BITLAB_BINARY_DIR, &alone);
    // Every translation unit is read from the build's lists (a test that
    // compiled everything alone would be slow; one that read nothing would
    // pass anything), and every file the build left out is preprocessed.
    // A build without the Python module (BITLAB_PYTHON=OFF, or no pybind11)
    // leaves python/src/ to the preprocessor: the same check, not counted.
    const bool python_built = fs::exists(fs::path(BITLAB_BINARY_DIR) / "python/bitlab");
    size_t units = 0, from_build = 0;
    for (const auto& file : layer_files(root)) {
      if (!is_translation_unit(file)) continue;
      CHECK_MESSAGE(deps.count(file), file << ": no dependency list");
      if (!python_built && layer_of(file) == "python") continue;
      ++units;
      from_build += std::find(alone.begin(), alone.end(), file) == alone.end();
    }
    MESSAGE(units << " translation units, " << from_build << " from the build's lists; "
                  << alone.size() << " files preprocessed alone");
    // A unity build (CMakeLists.txt: UNITY_BUILD) compiles batches of files as
    // one unit, whose list cannot say which file included what: there every
    // file is preprocessed alone (c++ -M, about 25 s on 2 cores), the same check.
    const bool unity = fs::exists(fs::path(BITLAB_BINARY_DIR) / "CMakeFiles/bitlab_core.dir/Unity");
    if (!unity) CHECK(from_build + 3 >= units);  // the .cu and a file added since the last build
    for (const auto& [file, list] : deps) {
      CHECK_MESSAGE(!list.empty(), file << ": the compiler listed no dependency");
    }
    const auto violations = compiled_violations(root, rules, deps, BITLAB_BINARY_DIR);
    for (const auto& v : violations) MESSAGE(v);
    CHECK(violations.empty());
  }

  TEST_CASE("the compiled checker names each planted violation, however it is spelled") {
    // The spellings that passed the line reader before it normalised paths
    // and matched reserved headers by folder, and the ones only a compiler
    // sees (a macro): each planted in a clean tiny tree, preprocessed with
    // `c++ -M -MG`, must give exactly one violation.
    const LayerRules rules = parse_layer_rules(kTinyRules);
    {
      const TempDir dir;
      clean_tree(dir);
      const auto v =
          compiled_violations(dir.path, rules, preprocessor_deps(dir.path, layer_files(dir.path)), {});
      for (const auto& x : v) MESSAGE(x);
      CHECK(v.empty());
    }
    struct Plant {
      const char* what;
      const char* file;
      const char* text;
      const char* expect;
    };
    const Plant plants[] = {
        {"angle brackets", "sim/comm/a.cpp", "#include <sim/timing/network.hpp>\n",
         "sim/comm/a.cpp: the compiler included sim/timing/network.hpp: comm may not include timing"},
        {"a path through ..", "sim/comm/b.cpp", "#include \"sim/comm/../timing/network.hpp\"\n",
         "sim/comm/b.cpp: the compiler included sim/timing/network.hpp: comm may not include timing"},
        {"another CLI11 header", "sim/timing/c.cpp", "#include <CLI/App.hpp>\n",
         "<CLI/*> may only be included by: cli"},
        {"MPI through a folder", "sim/timing/d.cpp", "#include <mpi/mpi.h>\n",
         "may only be included by: comm"},  // found (Debian's multiarch mpi/ links to
                                            // openmpi's mpi.h) or not (-MG), the same rule
        {"an include through a macro", "sim/compress/e.cpp",
         "#define NETWORK_HEADER <sim/timing/network.hpp>\n#include NETWORK_HEADER\n",
         "sim/compress/e.cpp: the compiler included sim/timing/network.hpp: compress may not "
         "include timing"},
        {"a .cuh file", "sim/compress/f.cuh", "#include \"sim/timing/network.hpp\"\n",
         "sim/compress/f.cuh: the compiler included sim/timing/network.hpp: compress may not "
         "include timing"},
        {"a header of no layer", "sim/core/g.hpp", "#include \"tests/helper.hpp\"\n",
         "sim/core/g.hpp: the compiler included tests/helper.hpp: it is in no layer"},
        {"an optimizer includes a problem", "optimizers/h.cpp",
         "#include \"problems/problem.hpp\"\n",
         "optimizers/h.cpp: the compiler included problems/problem.hpp: optimizers may not "
         "include problems"},
    };
    for (const auto& p : plants) {
      const std::string what = p.what;
      CAPTURE(what);
      const TempDir dir;
      clean_tree(dir);
      dir.file("tests/helper.hpp", "#pragma once\n");
      dir.file(p.file, p.text);
      const auto v =
          compiled_violations(dir.path, rules, preprocessor_deps(dir.path, layer_files(dir.path)), {});
      for (const auto& x : v) MESSAGE(x);
      REQUIRE(v.size() == 1);
      CHECK_MESSAGE(v[0].rfind(std::string(p.file) + ": ", 0) == 0, v[0]);
      CHECK_MESSAGE(v[0].find(p.expect) != std::string::npos, v[0]);
    }
  }

  TEST_CASE("the Python module may not reach CLI11, not even through a CLI header") {
    // python/src/ sits beside sim/cli/: a header of the CLI brings CLI11 with
    // it, which the compiled checker sees as two broken rules of the file
    // that included it (the layer, and the reserved header it pulled in).
    const LayerRules rules = parse_layer_rules(kTinyRules);
    const TempDir dir;
    clean_tree(dir);
    dir.file("python/src/list.cpp", "#include \"sim/cli/commands.hpp\"\n");
    const auto v =
        compiled_violations(dir.path, rules, preprocessor_deps(dir.path, layer_files(dir.path)), {});
    for (const auto& x : v) MESSAGE(x);
    REQUIRE(v.size() == 2);
    const auto has = [&v](const std::string& piece) {
      return std::any_of(v.begin(), v.end(), [&piece](const std::string& x) {
        return x.rfind("python/src/list.cpp: the compiler included ", 0) == 0 &&
               x.find(piece) != std::string::npos;
      });
    };
    CHECK(has("sim/cli/commands.hpp: python may not include cli"));
    CHECK(has("<CLI/*> may only be included by: cli"));
    // The real rules put python/ beside cli/, on the same layers, and CLI11 out of its reach.
    const LayerRules real = parse_layer_rules(slurp(fs::path(BITLAB_SOURCE_DIR) / "sim/layers.txt"));
    CHECK_FALSE(real.allowed.at("python").count("cli"));
    CHECK(real.allowed.at("python") == real.allowed.at("cli"));
    CHECK_FALSE(real.headers.at("CLI/*").count("python"));
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
