// A plain-text corpus for the transformer language model: fortune files as
// Debian's `fortunes` / `fortunes-min` packages ship them (plain text, one
// fortune after another, separated by lines holding a single `%`).
//
// Loading validates every file (missing, empty, not text), splits the corpus
// into training and held-out text by whole fortunes (a seeded shuffle, so a
// fortune never straddles the split), and tokenises it character by
// character (bytes): the vocabulary is the set of bytes that occur in the
// training split, in byte order, after id 0 = <unk>; a held-out byte that the
// training split never shows maps to <unk>. Errors are ConfigErrors naming
// the option path (`problem.files.<i>`), the file and the rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bitlab {

// Where the Debian packages install the fortune files.
inline constexpr const char* kFortuneDir = "/usr/share/games/fortunes/";

// The default corpus: the three files of `fortunes-min` (about 98 kB, 821
// fortunes), always installed together with `fortunes`.
std::vector<std::string> default_fortune_files();

// Splits one fortune file's text into fortunes (the text between lines that
// hold a single `%`; each fortune keeps its trailing newline; blank ones are
// dropped).
std::vector<std::string> split_fortunes(const std::string& text);

struct CorpusSpec {
  std::vector<std::string> files;
  double test_fraction = 0.1;    // share of the fortunes held out (at least one each side)
  uint64_t data_seed = 0;        // seeds the split
  std::string path = "problem";  // option path for messages
};

struct TextCorpus {
  // vocab[id] is the byte of token id; vocab[0] (<unk>) is unused (0).
  std::vector<unsigned char> vocab;
  // Token streams: each split's fortunes in file order, each followed by the
  // separator "%\n" (so the model sees where a fortune ends).
  std::vector<int32_t> train_tokens, test_tokens;
  size_t train_fortunes = 0, test_fortunes = 0;
  size_t unknown_test_tokens = 0;  // held-out bytes mapped to <unk>
  int32_t vocab_size() const { return static_cast<int32_t>(vocab.size()); }
};

inline constexpr int32_t kUnkToken = 0;

// Reads, validates, splits and tokenises. Throws ConfigError.
TextCorpus load_text_corpus(const CorpusSpec& spec);

}  // namespace bitlab
