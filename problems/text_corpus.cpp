#include "problems/text_corpus.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

namespace fs = std::filesystem;

std::vector<std::string> default_fortune_files() {
  const std::string dir = kFortuneDir;
  return {dir + "fortunes", dir + "literature", dir + "riddles"};
}

std::vector<std::string> split_fortunes(const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  const auto flush = [&] {
    if (current.find_first_not_of(" \t\r\n") != std::string::npos) out.push_back(current);
    current.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const bool has_newline = end != std::string::npos;
    if (!has_newline) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    if (line == "%" || line == "%\r") {
      flush();
    } else {
      current.append(line);
      current.push_back('\n');
    }
    pos = has_newline ? end + 1 : end;
  }
  flush();
  return out;
}

namespace {

// A byte that plain text is made of: printable ASCII, UTF-8 continuation and
// lead bytes, and the whitespace/overstrike controls the fortune files use
// (tab, newline, carriage return, form feed, backspace).
bool text_byte(unsigned char c) {
  return c >= 0x20 || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\b';
}

std::string read_text_file(const std::string& file, const std::string& path) {
  const std::string package_hint =
      file.rfind(kFortuneDir, 0) == 0
          ? "file not found; the fortune files come from the Debian packages fortunes-min "
            "(fortunes, literature, riddles) and fortunes (the others): run ./setup.sh or "
            "apt-get install fortunes fortunes-min"
          : "file not found";
  std::error_code ec;
  if (!fs::exists(file, ec)) config_fail(path, file, package_hint);
  if (fs::is_directory(file, ec)) config_fail(path, file, "is a directory, not a text file");
  std::ifstream in(file, std::ios::binary);
  if (!in) config_fail(path, file, "cannot be opened for reading");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.empty()) config_fail(path, file, "file is empty");
  // Binary if it holds a NUL byte or if more than 1 % of its bytes are other
  // control characters (the real fortune files hold a few: BEL, ESC).
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    config_fail(path, file,
                "not a text file (NUL byte at offset " + std::to_string(nul) +
                    "; the .dat index files are binary: name the plain file)");
  }
  const auto controls = static_cast<size_t>(std::count_if(
      text.begin(), text.end(), [](char c) { return !text_byte(static_cast<unsigned char>(c)); }));
  if (controls * 100 > text.size()) {
    config_fail(path, file,
                "not a text file (" + std::to_string(controls) + " of " +
                    std::to_string(text.size()) +
                    " bytes are control characters; at most 1 % "
                    "may be)");
  }
  return text;
}

}  // namespace

TextCorpus load_text_corpus(const CorpusSpec& spec) {
  const std::string files_path = join_path(spec.path, "files");
  if (spec.files.empty()) config_fail(files_path, Json::array(), "must name at least one file");
  std::vector<std::string> fortunes;
  for (size_t f = 0; f < spec.files.size(); ++f) {
    const std::string path = join_path(files_path, std::to_string(f));
    const auto parts = split_fortunes(read_text_file(spec.files[f], path));
    if (parts.empty()) {
      config_fail(path, spec.files[f], "holds no fortunes (only blank text and % lines)");
    }
    fortunes.insert(fortunes.end(), parts.begin(), parts.end());
  }

  // Split by whole fortunes: a seeded Fisher-Yates shuffle of the indices;
  // the first n_test go to the held-out split. Each split then keeps file
  // order.
  const size_t n = fortunes.size();
  const auto n_test = static_cast<size_t>(static_cast<double>(n) * spec.test_fraction + 0.5);
  if (n_test < 1 || n_test >= n) {
    config_fail(join_path(spec.path, "test_fraction"), spec.test_fraction,
                "leaves " + std::to_string(n_test) + " of " + std::to_string(n) +
                    " fortunes held out; each split needs at least one fortune");
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  RngStream rng(spec.data_seed, Purpose::kData);
  for (size_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.next_below(i + 1)]);
  std::vector<bool> held_out(n, false);
  for (size_t k = 0; k < n_test; ++k) held_out[order[k]] = true;

  TextCorpus corpus;
  std::string train_text, test_text;
  for (size_t i = 0; i < n; ++i) {
    std::string& dst = held_out[i] ? test_text : train_text;
    dst += fortunes[i];
    dst += "%\n";
    (held_out[i] ? corpus.test_fortunes : corpus.train_fortunes) += 1;
  }

  // Vocabulary from the training split only, in byte order after <unk>.
  std::array<bool, 256> seen{};
  for (const char c : train_text) seen[static_cast<unsigned char>(c)] = true;
  std::array<int32_t, 256> id{};
  corpus.vocab.push_back(0);  // <unk>
  for (int b = 0; b < 256; ++b) {
    id[b] = kUnkToken;
    if (seen[b]) {
      id[b] = static_cast<int32_t>(corpus.vocab.size());
      corpus.vocab.push_back(static_cast<unsigned char>(b));
    }
  }
  const auto tokenise = [&](const std::string& text, std::vector<int32_t>& out) {
    out.reserve(text.size());
    for (const char c : text) out.push_back(id[static_cast<unsigned char>(c)]);
  };
  tokenise(train_text, corpus.train_tokens);
  tokenise(test_text, corpus.test_tokens);
  corpus.unknown_test_tokens = static_cast<size_t>(
      std::count(corpus.test_tokens.begin(), corpus.test_tokens.end(), kUnkToken));
  return corpus;
}

}  // namespace bitlab
