// Tests of the transformer language model and its text corpus: the
// hand-written backward pass against finite differences (in double, every
// tensor), the causal mask, the loader's validation, and a short run that
// learns.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "problems/text_corpus.hpp"
#include "problems/transformer.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/cli_fixtures.hpp"
#include "tests/fixtures.hpp"

using namespace bitlab;
using namespace bitlab::testing;
namespace fs = std::filesystem;

namespace {

// Small enough for a finite-difference check of every tensor, big enough to
// have two blocks, two heads and an MLP wider than d_model.
TransformerShape tiny_shape() {
  TransformerShape s;
  s.vocab = 7;
  s.context = 5;
  s.d_model = 8;
  s.layers = 2;
  s.heads = 2;
  s.mlp_ratio = 2;
  return s;
}

std::vector<int32_t> random_windows(const TransformerShape& s, size_t count, uint64_t seed) {
  RngStream rng(seed, Purpose::kTest);
  std::vector<int32_t> w(count * static_cast<size_t>(s.context + 1));
  for (auto& t : w) t = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(s.vocab)));
  return w;
}

// GPT-2 init plus noise on every coordinate, so that layer-norm gains and
// biases and all biases are away from their special initial values (1 and 0)
// and every term of the backward pass is exercised.
template <class S>
std::vector<S> random_params(const TransformerNet<S>& net, uint64_t seed) {
  std::vector<S> x(net.dim());
  net.init(x, seed, 0.3);
  RngStream rng(seed + 1, Purpose::kTest);
  for (auto& v : x) v += static_cast<S>(0.2 * rng.next_normal());
  return x;
}

}  // namespace

TEST_SUITE("transformer") {
  TEST_CASE("gradient matches central finite differences in double, in every tensor") {
    const TransformerShape s = tiny_shape();
    const TransformerNet<double> net(s);
    const auto windows = random_windows(s, 3, 11);
    std::vector<double> x = random_params(net, 5);
    std::vector<double> g(net.dim());
    auto ws = net.make_workspace();
    const double loss = net.loss(x, windows, 3, g, *ws);
    CHECK(std::isfinite(loss));
    // h = 1e-5: the truncation error of a central difference is O(h²·f''')
    // ≈ 1e-10 for these O(1) parameters, the rounding error ≈ ε·|f|/h ≈ 1e-11
    // (f ≈ 2, ε = 2.2e-16), so an error above 1e-7 + 1e-6·|g| is a wrong
    // derivative, not noise: a missing term of the backward pass is O(|g|).
    const double h = 1e-5;
    RngStream pick(3, Purpose::kTest);
    std::vector<double> dummy;
    size_t checked = 0, nonzero = 0;
    for (const TensorInfo& t : net.tensors()) {
      CAPTURE(t.name);
      for (int k = 0; k < 6; ++k) {
        const size_t i = t.offset + pick.next_below(t.size);
        const double saved = x[i];
        x[i] = saved + h;
        const double up = net.loss(x, windows, 3, dummy, *ws);
        x[i] = saved - h;
        const double down = net.loss(x, windows, 3, dummy, *ws);
        x[i] = saved;
        const double fd = (up - down) / (2 * h);
        CAPTURE(i);
        CHECK(std::abs(fd - g[i]) <= 1e-7 + 1e-6 * std::abs(g[i]));
        ++checked;
        nonzero += std::abs(g[i]) > 1e-6;
      }
    }
    CHECK(checked == 6 * net.tensors().size());
    // Most checked coordinates carry a real gradient (a check of zeros
    // against zeros would prove little).
    CHECK(nonzero > checked * 3 / 4);
  }

  TEST_CASE("the float network computes the double network's loss and gradient") {
    const TransformerShape s = tiny_shape();
    const TransformerNet<double> net_d(s);
    const TransformerNet<float> net_f(s);
    const auto windows = random_windows(s, 4, 12);
    const std::vector<double> xd = random_params(net_d, 6);
    const std::vector<float> xf(xd.begin(), xd.end());
    std::vector<double> gd(net_d.dim());
    std::vector<float> gf(net_f.dim());
    auto wd = net_d.make_workspace();
    auto wf = net_f.make_workspace();
    const std::vector<double> xd_rounded(xf.begin(), xf.end());
    const double ld = net_d.loss(xd_rounded, windows, 4, gd, *wd);
    const double lf = net_f.loss(xf, windows, 4, gf, *wf);
    // fp32 arithmetic through ~10 layers of products of length <= 16: a
    // relative error of a few 1e-6 in the loss and 1e-4 in the gradient's
    // norm is rounding; a float-only bug would be O(1).
    CHECK(lf == doctest::Approx(ld).epsilon(1e-5));
    double diff = 0, norm = 0;
    for (size_t i = 0; i < gd.size(); ++i) {
      diff += (gf[i] - gd[i]) * (gf[i] - gd[i]);
      norm += gd[i] * gd[i];
    }
    CHECK(std::sqrt(diff) <= 1e-4 * std::sqrt(norm));
  }

  TEST_CASE("several workers' windows in one pass get the bits each gets alone") {
    // loss_groups runs every product over all groups' windows; each group's
    // loss and gradient must be loss()'s for its windows alone, for any
    // grouping (the cluster groups workers by thread count). Tiny shapes whose
    // rows are not a multiple of any vector width; an empty group.
    const TransformerShape s = tiny_shape();
    const TransformerNet<float> net(s);
    const std::vector<size_t> counts = {2, 0, 3, 1};
    const auto windows = random_windows(s, 6, 21);
    const std::vector<float> x = random_params(net, 8);
    const size_t w = static_cast<size_t>(s.context + 1);
    std::vector<std::vector<float>> alone(counts.size(), std::vector<float>(net.dim()));
    std::vector<double> alone_loss(counts.size());
    size_t first = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      auto ws = net.make_workspace();
      alone_loss[k] = net.loss(x, std::span(windows).subspan(first * w, counts[k] * w), counts[k],
                               alone[k], *ws);
      first += counts[k];
    }
    std::vector<std::vector<float>> together(counts.size(), std::vector<float>(net.dim(), 9.0f));
    std::vector<TransformerNet<float>::Group> groups;
    for (size_t k = 0; k < counts.size(); ++k) groups.push_back({counts[k], together[k]});
    auto ws = net.make_workspace();
    net.loss_groups(x, windows, groups, *ws);
    for (size_t k = 0; k < counts.size(); ++k) {
      CAPTURE(k);
      CHECK(std::memcmp(&groups[k].loss, &alone_loss[k], sizeof(double)) == 0);
      CHECK(std::memcmp(together[k].data(), alone[k].data(), net.dim() * sizeof(float)) == 0);
    }
  }

  TEST_CASE("the causal mask: logits at position t do not depend on tokens after t") {
    for (const bool causal : {true, false}) {
      CAPTURE(causal);
      TransformerShape s = tiny_shape();
      s.causal = causal;  // false: the planted bug the check must catch
      const TransformerNet<double> net(s);
      const std::vector<double> x = random_params(net, 7);
      auto windows = random_windows(s, 1, 13);
      auto ws = net.make_workspace();
      std::vector<double> none;
      net.loss(x, windows, 1, none, *ws);
      const auto before = TransformerNet<double>::Matrix(TransformerNet<double>::logits(*ws));
      const int t = 2;  // change every input token after position t
      for (int k = t + 1; k < s.context; ++k) windows[k] = (windows[k] + 1) % s.vocab;
      net.loss(x, windows, 1, none, *ws);
      const auto& after = TransformerNet<double>::logits(*ws);
      bool past_same = true;
      for (int r = 0; r <= t; ++r) past_same = past_same && after.row(r) == before.row(r);
      CHECK(past_same == causal);
      CHECK(after.row(s.context - 1) != before.row(s.context - 1));
    }
  }

  TEST_CASE("tensors: every weight, bias and gain is its own tensor; GPT-2 init") {
    const TransformerShape s = tiny_shape();
    const TransformerNet<float> net(s);
    const auto& ts = net.tensors();
    CHECK(ts.size() == 2 + 12 * static_cast<size_t>(s.layers) + 3);
    CHECK(ts.front().name == "tok_emb.weight");
    CHECK(ts.back().name == "head.weight");
    size_t offset = 0;
    for (const auto& t : ts) {
      CHECK(t.offset == offset);
      offset += t.size;
    }
    CHECK(offset == net.dim());
    std::vector<float> x(net.dim());
    net.init(x, 1, 0.02);
    for (const auto& t : ts) {
      CAPTURE(t.name);
      const std::span<const float> v(x.data() + t.offset, t.size);
      if (t.name.ends_with(".gain")) {
        CHECK(std::all_of(v.begin(), v.end(), [](float e) { return e == 1.0f; }));
      } else if (t.name.ends_with(".bias")) {
        CHECK(std::all_of(v.begin(), v.end(), [](float e) { return e == 0.0f; }));
      } else {
        double ss = 0;
        for (const float e : v) ss += double{e} * e;
        const double rms = std::sqrt(ss / static_cast<double>(v.size()));
        const bool residual = t.name.ends_with("proj.weight");
        const double expect = residual ? 0.02 / std::sqrt(2.0 * s.layers) : 0.02;
        // >= 32 draws per tensor: the sample RMS is within ±40 % of σ with
        // probability > 0.999.
        CHECK(rms == doctest::Approx(expect).epsilon(0.4));
      }
    }
  }

  TEST_CASE("fortune files: split by % lines, split by whole fortunes, vocabulary from training") {
    CHECK(split_fortunes("a\nb\n%\nc\n%\n\n%\nd") ==
          std::vector<std::string>{"a\nb\n", "c\n", "d\n"});
    TempDir d;
    std::string text;
    for (int i = 0; i < 40; ++i) text += "fortune " + std::to_string(i) + "\n%\n";
    text += "zzz Q\n%\n";  // only 'Q' and 'z' are rare
    const auto file = d.file("f", text);
    const TextCorpus a = load_text_corpus({{file}, 0.25, 1});
    const TextCorpus b = load_text_corpus({{file}, 0.25, 1});
    const TextCorpus c = load_text_corpus({{file}, 0.25, 2});
    CHECK(a.train_fortunes + a.test_fortunes == 41);
    CHECK(a.test_fortunes == 10);  // round(41 · 0.25)
    CHECK(a.train_tokens == b.train_tokens);
    CHECK(a.test_tokens == b.test_tokens);
    CHECK(a.test_tokens != c.test_tokens);
    // Vocabulary: <unk> then the training bytes in byte order.
    CHECK(a.vocab[0] == 0);
    CHECK(std::is_sorted(a.vocab.begin() + 1, a.vocab.end()));
    std::set<unsigned char> train_bytes;
    for (const int32_t t : a.train_tokens) {
      REQUIRE(t > 0);
      train_bytes.insert(a.vocab[static_cast<size_t>(t)]);
    }
    CHECK(train_bytes.size() + 1 == a.vocab.size());
    // Every fortune is followed by the separator "%\n".
    CHECK(a.vocab[static_cast<size_t>(a.train_tokens.back())] == '\n');
    CHECK(a.vocab[static_cast<size_t>(a.train_tokens[a.train_tokens.size() - 2])] == '%');
    const size_t unk =
        static_cast<size_t>(std::count(a.test_tokens.begin(), a.test_tokens.end(), 0));
    CHECK(unk == a.unknown_test_tokens);
    // A test byte the training split lacks maps to <unk>: find a seed where
    // "zzz Q" is held out.
    bool found = false;
    for (uint64_t seed = 0; seed < 40 && !found; ++seed) {
      const TextCorpus s = load_text_corpus({{file}, 0.25, seed});
      if (s.unknown_test_tokens > 0) {
        found = true;
        CHECK(s.unknown_test_tokens == 4);  // z, z, z, Q: the other fortunes have neither
      }
    }
    CHECK(found);
  }

  TEST_CASE("bad corpora name the option, the file and the rule") {
    TempDir d;
    const auto empty = d.file("empty", "");
    const auto binary = d.file("binary", std::string("abc\n%\nde\0f\n", 11));
    const auto blank = d.file("blank", "\n%\n  \n%\n");
    const auto ok = d.file("ok", "one\n%\ntwo\n%\n");
    CHECK(config_error_message([&] {
            load_text_corpus({{ok, "/nope/x"}, 0.5, 0});
          }) == "problem.files.1 = \"/nope/x\": file not found");
    const std::string missing = config_error_message([&] {
      load_text_corpus({{std::string(kFortuneDir) + "no-such-file"}, 0.5, 0});
    });
    CHECK(missing.find("no-such-file\": file not found") != std::string::npos);
    CHECK(missing.find("fortunes-min") != std::string::npos);
    CHECK(config_error_message([&] {
            load_text_corpus({{empty}, 0.5, 0});
          }) == "problem.files.0 = \"" + empty + "\": file is empty");
    CHECK(config_error_message([&] {
            load_text_corpus({{binary}, 0.5, 0});
          }).find("\": not a text file (NUL byte at offset 8") != std::string::npos);
    const auto controls = d.file("controls", "a\x01\x02\n%\nb\n");
    CHECK(config_error_message([&] {
            load_text_corpus({{controls}, 0.5, 0});
          }).find("not a text file (2 of 8 bytes are control characters") != std::string::npos);
    CHECK(config_error_message([&] {
            load_text_corpus({{blank}, 0.5, 0});
          }).find("holds no fortunes") != std::string::npos);
    CHECK(config_error_message([&] {
            load_text_corpus({{ok}, 0.9, 0});
          }) ==
          "problem.test_fraction = 0.9: leaves 2 of 2 fortunes held out; each split needs at "
          "least one fortune");
    CHECK(config_error_message([&] {
            load_text_corpus({{d.path.string()}, 0.5, 0});
          }).find("is a directory") != std::string::npos);
  }

  TEST_CASE("bitlab run with a missing corpus file: exit 2, no results folder") {
    TempDir d;
    const auto file = d.file("exp.json", R"({"steps": 2, "problem": {"name": "transformer",
        "files": ["/usr/share/games/fortunes/no-such-file"]}, "optimizer": {"name": "adam"}})");
    const fs::path out = d.path / "never";
    const Result r = run_bitlab(d, "run " + file + " --out " + out.string());
    CHECK(r.status == 2);
    CHECK(r.err.find("problem.files.0 = \"/usr/share/games/fortunes/no-such-file\": file not "
                     "found") != std::string::npos);
    CHECK(r.err.find("fortunes-min") != std::string::npos);
    CHECK(!fs::exists(out));
    const auto bad_heads = d.file("heads.json", R"({"problem": {"name": "transformer",
        "d_model": 30, "heads": 4}, "optimizer": {"name": "adam"}})");
    const Result h = run_bitlab(d, "run " + bad_heads + " --out " + out.string());
    CHECK(h.status == 2);
    CHECK(h.err.find("problem.heads = 4: must divide d_model = 30") != std::string::npos);
    CHECK(!fs::exists(out));
  }

  TEST_CASE("a short Adam run on the fortunes learns: held-out loss far below log(vocab)") {
    if (!fortunes_installed()) {
      MESSAGE("skipped: the Debian package fortunes-min is not installed (./setup.sh installs it)");
      return;
    }
    // A small model so the test stays fast: 2 workers × 16 windows of 32
    // characters, 150 steps (≈ 150k tokens, about 1.7 passes over the
    // training text).
    const Experiment e = resolve_experiment(Json::parse(R"({
        "steps": 150, "eval_every": 150, "seed": 1,
        "problem": {"name": "transformer", "context": 32, "stride": 32, "d_model": 32,
                    "layers": 1, "heads": 2, "eval_windows": 64},
        "cluster": {"workers": 2, "batch_size": 16},
        "optimizer": {"name": "adam", "lr": 0.003}})"),
                                            "t");
    Simulation sim(e);
    const auto cols = sim.eval_columns();
    REQUIRE(cols == std::vector<std::string>{"eval_loss", "eval_perplexity", "train_subset_loss"});
    const std::vector<double> initial = sim.evaluate();
    StepMetrics last;
    for (int64_t t = 0; t < e.run.steps; ++t) last = sim.step();
    REQUIRE(last.eval.size() == 3);
    MESSAGE("eval_loss " << initial[0] << " -> " << last.eval[0] << ", perplexity "
                         << last.eval[1]);
    // At initialisation the logits are ≈ 0: loss ≈ log(vocab) (≈ 4.5 nats
    // for the ~90 characters). Character unigram frequencies alone give
    // ≈ 3.1 nats on English text; 2.7 needs context.
    CHECK(initial[0] > 4.0);
    CHECK(last.eval[0] < 2.7);
    CHECK(last.eval[1] == doctest::Approx(std::exp(last.eval[0])));
    CHECK(last.eval[2] < 2.7);
  }

  TEST_CASE("evaluation is the same for 1 and 2 threads") {
    if (!fortunes_installed()) {
      MESSAGE("skipped: the Debian package fortunes-min is not installed (./setup.sh installs it)");
      return;
    }
    const Experiment e = resolve_experiment(Json::parse(R"({
        "steps": 1, "problem": {"name": "transformer", "context": 16, "d_model": 16,
                                "layers": 1, "heads": 2, "eval_windows": 40},
        "cluster": {"workers": 2, "batch_size": 4}, "optimizer": {"name": "adam"}})"),
                                            "t");
    const int saved = omp_get_max_threads();
    std::vector<double> one, two;
    {
      omp_set_num_threads(1);
      Simulation sim(e);
      one = sim.evaluate();
    }
    {
      omp_set_num_threads(2);
      Simulation sim(e);
      two = sim.evaluate();
    }
    omp_set_num_threads(saved);
    REQUIRE(one.size() == 3);
    CHECK(std::memcmp(one.data(), two.data(), 3 * sizeof(double)) == 0);
  }
}
