// Tests of the real data sets: the Debian-shipped files load with the shapes
// and classes they should have; split, subsampling and standardisation do
// what problems/datasets.hpp says; and every kind of bad file (missing,
// truncated, wrong magic, wrong shape, non-numeric cell) is refused with a
// message naming the file and the problem — through temp copies, and once
// through the real `bitlab run`.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_fixtures.hpp"
#include "problems/datasets.hpp"

using namespace bitlab;
using bitlab::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

DatasetOptions options(const std::string& dataset, const std::string& dir = "") {
  DatasetOptions o;
  o.dataset = dataset;
  o.data_dir = dir;
  return o;
}

// A big-endian IDX file: magic, dims, payload.
std::string idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                      const std::string& payload) {
  std::string out;
  const auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
  };
  put(magic);
  for (const uint32_t d : dims) put(d);
  return out + payload;
}

void write_gz(const fs::path& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == int(bytes.size()));
  gzclose(f);
}

void write_plain(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A valid miniature Fashion-MNIST (n train, m test images) in `dir`.
void write_mini_fashion(const fs::path& dir, uint32_t n, uint32_t m) {
  for (const auto& [prefix, count] : {std::pair{"train", n}, std::pair{"t10k", m}}) {
    std::string pixels(size_t(count) * 784, '\0'), labels(count, '\0');
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>((i * 7) % 256);
    for (uint32_t i = 0; i < count; ++i) labels[i] = static_cast<char>(i % 10);
    write_gz(dir / (std::string(prefix) + "-images-idx3-ubyte.gz"),
             idx_bytes(0x803, {count, 28, 28}, pixels));
    write_gz(dir / (std::string(prefix) + "-labels-idx1-ubyte.gz"),
             idx_bytes(0x801, {count}, labels));
  }
}

std::string wine_csv() {
  return bitlab::testing::slurp(fs::path(kSklearnDataDir) / "wine_data.csv");
}

}  // namespace

TEST_SUITE("datasets") {
  TEST_CASE(
      "the scikit-learn sets load with their shapes, a stratified split and standardisation") {
    struct Expect {
      const char* name;
      Eigen::Index rows, features;
      int classes;
    };
    for (const Expect e : {Expect{"digits", 1797, 64, 10}, Expect{"breast_cancer", 569, 30, 2},
                           Expect{"wine", 178, 13, 3}}) {
      CAPTURE(e.name);
      const DatasetSplit d = load_dataset(options(e.name));
      CHECK(d.classes == e.classes);
      CHECK(d.train.x.cols() == e.features);
      CHECK(d.test.x.cols() == e.features);
      CHECK(Eigen::Index(d.train.count() + d.test.count()) == e.rows);
      // Stratified: each class's held-out share is round(0.25 · its size),
      // so within one sample of a quarter of it.
      for (int c = 0; c < e.classes; ++c) {
        const auto in = [c](const Samples& s) { return std::ranges::count(s.labels, c); };
        const double total = double(in(d.train) + in(d.test));
        CHECK(total > 0);
        CHECK(std::abs(double(in(d.test)) - 0.25 * total) <= 0.5 + 1e-9);
      }
      // Standardised with the training set's statistics: mean 0, std 1 (or
      // 0 for a constant column) on the training set. Float storage of
      // double-computed values: 1e-5 covers the rounding of ~500 values.
      const Eigen::MatrixXd x = d.train.x.cast<double>();
      const Eigen::RowVectorXd mean = x.colwise().mean();
      for (Eigen::Index c = 0; c < x.cols(); ++c) {
        const double sd = std::sqrt((x.col(c).array() - mean(c)).square().mean());
        CHECK(std::abs(mean(c)) < 1e-5);
        CHECK((std::abs(sd - 1.0) < 1e-5 || sd < 1e-6));
      }
      // The test set is scaled with the same statistics, not its own: its
      // mean is close to 0 but not exactly.
      CHECK(d.test.x.cast<double>().colwise().mean().cwiseAbs().maxCoeff() > 1e-4);
    }
  }

  TEST_CASE("the split and subsamples are functions of data_seed") {
    DatasetOptions o = options("wine");
    const DatasetSplit a = load_dataset(o), b = load_dataset(o);
    CHECK(a.train.x == b.train.x);
    CHECK(a.test.labels == b.test.labels);
    o.data_seed = 1;
    const DatasetSplit c = load_dataset(o);
    CHECK(a.train.x.rows() == c.train.x.rows());
    CHECK(a.train.x != c.train.x);
    o.train_samples = 40;
    o.test_samples = 10;
    const DatasetSplit s = load_dataset(o);
    CHECK(s.train.count() == 40);
    CHECK(s.test.count() == 10);
    o.train_samples = 1000;
    CHECK(error_of([&] { load_dataset(o); }) ==
          "problem.train_samples = 1000: must be <= 133, the samples available");
  }

  TEST_CASE("Fashion-MNIST: the package's files, official split, pixels in [0, 1]") {
    if (!fs::exists(fs::path(kFashionMnistDir) / "train-images-idx3-ubyte.gz")) {
      MESSAGE("skipped: Fashion-MNIST not installed (package dataset-fashion-mnist)");
      return;
    }
    DatasetOptions o = options("fashion_mnist");
    o.train_samples = 1000;
    const DatasetSplit d = load_dataset(o);
    CHECK(d.train.count() == 1000);
    CHECK(d.test.count() == 10000);
    CHECK(d.train.x.cols() == 784);
    CHECK(d.height == 28);
    CHECK(d.train.x.minCoeff() == 0.0f);
    CHECK(d.train.x.maxCoeff() == 1.0f);
    // Roughly balanced: each of the 10 classes is 10 % of the official sets.
    for (int c = 0; c < 10; ++c) CHECK(std::ranges::count(d.test.labels, c) == 1000);
  }

  TEST_CASE("IDX files: a valid copy loads; each kind of damage is named") {
    TempDir tmp;
    write_mini_fashion(tmp.path, 30, 20);
    const DatasetSplit ok = load_dataset(options("fashion_mnist", tmp.path.string()));
    CHECK(ok.train.count() == 30);
    CHECK(ok.test.count() == 20);
    CHECK(ok.train.labels[13] == 3);
    CHECK(ok.train.x(0, 1) == 7.0f / 255.0f);
    // The held-out subsample does not depend on the training subsample.
    DatasetOptions sub = options("fashion_mnist", tmp.path.string());
    sub.test_samples = 7;
    const DatasetSplit all_train = load_dataset(sub);
    sub.train_samples = 11;
    const DatasetSplit some_train = load_dataset(sub);
    CHECK(some_train.train.count() == 11);
    CHECK(all_train.test.x == some_train.test.x);
    CHECK(all_train.test.labels == some_train.test.labels);
    const auto labels = tmp.path / "train-labels-idx1-ubyte.gz";
    const auto images = tmp.path / "train-images-idx3-ubyte.gz";
    const auto load = [&] { load_dataset(options("fashion_mnist", tmp.path.string())); };

    SUBCASE("missing: names the file and the package") {
      fs::remove(images);
      const std::string e = error_of(load);
      CHECK(contains(e, images.string() + ": not found"));
      CHECK(contains(e, "apt-get install dataset-fashion-mnist"));
    }
    SUBCASE("truncated gzip stream") {
      std::string gz = bitlab::testing::slurp(images);
      write_plain(images, gz.substr(0, gz.size() / 2));
      const std::string e = error_of(load);
      CHECK(contains(e, "data file " + images.string() + ": truncated or corrupt gzip data"));
    }
    SUBCASE("payload shorter than the header says") {
      write_gz(labels, idx_bytes(0x801, {30}, std::string(29, '\1')));
      CHECK(error_of(load) == "data file " + labels.string() +
                                  ": truncated: the header promises 30 data bytes, the file "
                                  "holds 29");
    }
    SUBCASE("wrong magic number") {
      write_gz(labels, idx_bytes(0x803, {30}, std::string(30, '\1')));
      CHECK(contains(error_of(load), labels.string() + ": wrong magic number 0x00000803 "
                                                       "(expected 0x00000801"));
    }
    SUBCASE("wrong shape: images not 28×28, labels not one per image") {
      write_gz(images, idx_bytes(0x803, {30, 27, 28}, std::string(30 * 27 * 28, '\0')));
      CHECK(contains(error_of(load), images.string() + ": wrong shape 30 × 27 × 28"));
      write_mini_fashion(tmp.path, 30, 20);
      write_gz(labels, idx_bytes(0x801, {29}, std::string(29, '\1')));
      CHECK(contains(error_of(load), labels.string() + ": wrong shape: 29 labels for 30 images"));
    }
    SUBCASE("a header promising 0 items, or 0xFFFFFFFF, is refused before allocating") {
      write_gz(labels, idx_bytes(0x801, {0}, ""));
      CHECK(contains(error_of(load), labels.string() + ": the header promises 0 items: must be "
                                                       "in [1, 6000000]"));
      write_mini_fashion(tmp.path, 30, 20);
      write_gz(images, idx_bytes(0x803, {0xFFFFFFFFu, 28, 28}, std::string(28 * 28, '\0')));
      CHECK(contains(error_of(load), images.string() + ": the header promises 4294967295 items"));
    }
    SUBCASE("label out of range") {
      std::string l(30, '\1');
      l[4] = 12;
      write_gz(labels, idx_bytes(0x801, {30}, l));
      CHECK(contains(error_of(load), "label 12 of sample 4 is not in [0, 10)"));
    }
  }

  TEST_CASE("scikit-learn CSVs: each kind of damage is named with file:line") {
    TempDir tmp;
    const auto wine = tmp.path / "wine_data.csv";
    const auto load = [&] { load_dataset(options("wine", tmp.path.string())); };
    const std::string good = wine_csv();
    write_plain(wine, good);
    CHECK(load_dataset(options("wine", tmp.path.string())).train.count() ==
          133);  // 178 − (15 + 18 + 12) held out

    SUBCASE("missing: names the file and the package") {
      fs::remove(wine);
      CHECK(contains(error_of(load), "apt-get install python3-sklearn"));
    }
    SUBCASE("non-numeric cell") {
      std::string bad = good;
      bad.replace(bad.find("14.23"), 5, "14.x3");
      write_plain(wine, bad);
      CHECK(error_of(load) ==
            "data file " + wine.string() + ":2: column 1: \"14.x3\" is not a number");
    }
    SUBCASE("a row with a field missing") {
      std::string bad = good;
      bad.replace(bad.find("14.23,"), 6, "");
      write_plain(wine, bad);
      CHECK(contains(error_of(load), wine.string() + ":2: wrong shape: 13 fields, expected 14"));
    }
    SUBCASE("truncated: fewer rows than the header says") {
      // The header and the first 50 rows.
      size_t cut = 0;
      for (int line = 0; line < 51; ++line) cut = good.find('\n', cut) + 1;
      write_plain(wine, good.substr(0, cut));
      CHECK(contains(error_of(load), wine.string() + ": truncated: 50 data rows, expected 178"));
    }
    SUBCASE("a header claiming 1e300 rows, or 0, is refused") {
      for (const char* claim : {"1e300", "0", "2.5"}) {
        std::string bad = good;
        bad.replace(0, 3, claim);
        write_plain(wine, bad);
        CHECK(contains(error_of(load), wine.string() + ":1: the header claims " +
                                           std::string(claim) +
                                           " rows: must be a whole number in [1, 1e9]"));
      }
    }
    SUBCASE("header with the wrong feature count") {
      std::string bad = good;
      bad.replace(0, 6, "178,12");
      write_plain(wine, bad);
      CHECK(contains(error_of(load), ":1: wrong shape: the header says 12 features, expected 13"));
    }
    SUBCASE("label out of range") {
      std::string bad = good;
      const size_t eol = bad.find('\n', bad.find('\n') + 1);  // end of the first data row
      REQUIRE(eol != std::string::npos);
      bad[eol - 1] = '7';  // its label
      write_plain(wine, bad);
      CHECK(contains(error_of(load), ":2: label 7 is not an integer in [0, 3)"));
    }
  }

  TEST_CASE("bitlab run with a missing data file: exit 2, the file and package named, no results") {
    TempDir tmp;
    const std::string exp = tmp.file(
        "exp.json",
        R"({"name": "x", "steps": 2, "problem": {"name": "softmax_regression", "dataset": "digits",
            "data_dir": ")" +
            tmp.path.string() + R"("}, "cluster": {"workers": 2, "batch_size": 4},
            "optimizer": {"name": "adam"}})");
    const auto out = tmp.path / "out";
    const auto r = bitlab::testing::run_bitlab(tmp, "run " + exp + " --out " + out.string());
    CHECK(r.status == 2);
    CHECK(contains(r.err, (tmp.path / "digits.csv.gz").string() + ": not found"));
    CHECK(contains(r.err, "python3-sklearn"));
    CHECK(!fs::exists(out));
  }
}
