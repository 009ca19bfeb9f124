#include "problems/datasets.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "sim/rng.hpp"

namespace bitlab {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void data_fail(const std::string& file, const std::string& problem) {
  throw ConfigError("data file " + file + ": " + problem);
}

// The package that ships a data set's files, for the "missing" message.
std::string package_of(const std::string& dataset) {
  return dataset == "fashion_mnist" ? "dataset-fashion-mnist" : "python3-sklearn";
}

// The whole (decompressed) content of a gz or plain file.
std::string read_file_gz(const std::string& path, const std::string& package) {
  if (!fs::exists(path)) {
    data_fail(path, "not found; install the Debian package " + package + " (sudo apt-get install " +
                        package +
                        ", or ./setup.sh) or point problem.data_dir at a folder holding it");
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) data_fail(path, "cannot be opened");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int got = gzread(f, buf, sizeof buf);
    if (got < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      data_fail(path, "truncated or corrupt gzip data (" + msg + ")");
    }
    if (got == 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  // zlib reports a gzip stream cut short only through gzerror at the end.
  int errnum = 0;
  const std::string msg = gzerror(f, &errnum);
  gzclose(f);
  if (errnum != Z_OK) data_fail(path, "truncated or corrupt gzip data (" + msg + ")");
  return out;
}

uint32_t big_endian_u32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t k = 0; k < 4; ++k) v = (v << 8) | static_cast<unsigned char>(bytes[at + k]);
  return v;
}

// Header of an IDX file: magic, then one big-endian u32 per dimension.
std::vector<uint32_t> idx_header(const std::string& bytes, const std::string& path, uint32_t magic,
                                 size_t dims) {
  const size_t header = 4 * (1 + dims);
  if (bytes.size() < header) {
    data_fail(path, "truncated: " + std::to_string(bytes.size()) +
                        " bytes, shorter than the IDX header (" + std::to_string(header) + ")");
  }
  const uint32_t got = big_endian_u32(bytes, 0);
  if (got != magic) {
    char want_hex[16], got_hex[16];
    std::snprintf(want_hex, sizeof want_hex, "0x%08x", magic);
    std::snprintf(got_hex, sizeof got_hex, "0x%08x", got);
    data_fail(path, std::string("wrong magic number ") + got_hex + " (expected " + want_hex +
                        ", an IDX file of unsigned bytes with " + std::to_string(dims) +
                        " dimension(s))");
  }
  std::vector<uint32_t> shape(dims);
  for (size_t k = 0; k < dims; ++k) shape[k] = big_endian_u32(bytes, 4 * (1 + k));
  uint64_t payload = 1;
  for (const uint32_t s : shape) payload *= s;
  if (bytes.size() - header != payload) {
    data_fail(path, std::string(bytes.size() - header < payload ? "truncated" : "too long") +
                        ": the header promises " + std::to_string(payload) +
                        " data bytes, the file holds " + std::to_string(bytes.size() - header));
  }
  return shape;
}

std::string shape_text(const std::vector<uint32_t>& shape) {
  std::string s;
  for (const uint32_t v : shape) s += (s.empty() ? "" : " × ") + std::to_string(v);
  return s;
}

}  // namespace

RawDataset read_idx_pair(const std::string& images_path, const std::string& labels_path) {
  constexpr uint32_t kImagesMagic = 0x00000803, kLabelsMagic = 0x00000801;
  constexpr uint32_t kSide = 28;
  constexpr int kClasses = 10;
  const std::string package = package_of("fashion_mnist");
  const std::string images = read_file_gz(images_path, package);
  const auto ishape = idx_header(images, images_path, kImagesMagic, 3);
  if (ishape[1] != kSide || ishape[2] != kSide) {
    data_fail(images_path, "wrong shape " + shape_text(ishape) + ": expected N × 28 × 28 images");
  }
  const std::string labels = read_file_gz(labels_path, package);
  const auto lshape = idx_header(labels, labels_path, kLabelsMagic, 1);
  if (lshape[0] != ishape[0]) {
    data_fail(labels_path, "wrong shape: " + std::to_string(lshape[0]) + " labels for " +
                               std::to_string(ishape[0]) + " images in " + images_path);
  }
  RawDataset out;
  const Eigen::Index n = ishape[0], pixels = kSide * kSide;
  out.x.resize(n, pixels);
  const auto* src = reinterpret_cast<const unsigned char*>(images.data()) + 16;
  for (Eigen::Index i = 0; i < n * pixels; ++i) out.x.data()[i] = static_cast<float>(src[i]);
  out.labels.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < out.labels.size(); ++i) {
    const int label = static_cast<unsigned char>(labels[8 + i]);
    if (label >= kClasses) {
      data_fail(labels_path, "label " + std::to_string(label) + " of sample " + std::to_string(i) +
                                 " is not in [0, 10)");
    }
    out.labels[i] = label;
  }
  return out;
}

RawDataset read_sklearn_csv(const std::string& path, int features, int classes, bool header,
                            int64_t expected_rows) {
  const std::string text = read_file_gz(path, "python3-sklearn");
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    at = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();

  const auto fields_of = [](std::string_view line) {
    std::vector<std::string_view> f;
    for (size_t at = 0;;) {
      const size_t comma = line.find(',', at);
      f.push_back(line.substr(at, comma == std::string_view::npos ? line.npos : comma - at));
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
    return f;
  };
  const auto where = [&](size_t line_index) { return path + ":" + std::to_string(line_index + 1); };
  const auto number = [&](std::string_view cell, size_t line_index, size_t column) {
    double v = 0.0;
    const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
    if (ec != std::errc() || end != cell.data() + cell.size() || !std::isfinite(v)) {
      data_fail(where(line_index), "column " + std::to_string(column + 1) + ": \"" +
                                       std::string(cell) + "\" is not a number");
    }
    return v;
  };

  size_t first = 0;
  if (header) {
    if (lines.empty()) data_fail(path, "empty file: expected a header line");
    const auto h = fields_of(lines[0]);
    if (h.size() < 2) data_fail(where(0), "header must start with n_samples,n_features");
    const double rows = number(h[0], 0, 0), cols = number(h[1], 0, 1);
    if (cols != features) {
      data_fail(where(0), "wrong shape: the header says " + std::string(h[1]) +
                              " features, expected " + std::to_string(features));
    }
    if (static_cast<int64_t>(h.size()) - 2 != classes) {
      data_fail(where(0), "wrong shape: the header names " + std::to_string(h.size() - 2) +
                              " classes, expected " + std::to_string(classes));
    }
    expected_rows = static_cast<int64_t>(rows);
    first = 1;
  }
  const auto rows = static_cast<int64_t>(lines.size() - first);
  if (expected_rows > 0 && rows != expected_rows) {
    data_fail(path, std::string(rows < expected_rows ? "truncated" : "wrong shape") + ": " +
                        std::to_string(rows) + " data rows, expected " +
                        std::to_string(expected_rows));
  }
  if (rows == 0) data_fail(path, "no data rows");

  RawDataset out;
  out.x.resize(rows, features);
  out.labels.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const size_t li = first + static_cast<size_t>(r);
    const auto f = fields_of(lines[li]);
    if (static_cast<int>(f.size()) != features + 1) {
      data_fail(where(li), "wrong shape: " + std::to_string(f.size()) + " fields, expected " +
                               std::to_string(features + 1) + " (" + std::to_string(features) +
                               " features and the label)");
    }
    for (int c = 0; c < features; ++c) {
      out.x(r, c) = static_cast<float>(number(f[static_cast<size_t>(c)], li, c));
    }
    const double label = number(f.back(), li, static_cast<size_t>(features));
    if (label != std::floor(label) || label < 0 || label >= classes) {
      data_fail(where(li), "label " + std::string(f.back()) + " is not an integer in [0, " +
                               std::to_string(classes) + ")");
    }
    out.labels[static_cast<size_t>(r)] = static_cast<int32_t>(label);
  }
  return out;
}

namespace {

Samples take_rows(const RawDataset& d, const std::vector<uint32_t>& rows) {
  Samples s;
  s.x.resize(static_cast<Eigen::Index>(rows.size()), d.x.cols());
  s.labels.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    s.x.row(static_cast<Eigen::Index>(i)) = d.x.row(rows[i]);
    s.labels[i] = d.labels[rows[i]];
  }
  return s;
}

// A uniformly random permutation of `items` (Fisher–Yates) from `rng`.
void shuffle(std::vector<uint32_t>& items, RngStream& rng) {
  for (size_t i = items.size(); i > 1; --i) {
    std::swap(items[i - 1], items[rng.next_below(i)]);
  }
}

// `keep` > 0: a random subset of that size, in random order; else all, in order.
std::vector<uint32_t> subsample(size_t n, int64_t keep, RngStream& rng, const std::string& field) {
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  if (keep <= 0) return idx;
  if (static_cast<size_t>(keep) > n) {
    config_fail(join_path("problem", field), Json(keep),
                "must be <= " + std::to_string(n) + ", the samples available");
  }
  shuffle(idx, rng);
  idx.resize(static_cast<size_t>(keep));
  return idx;
}

// All of `d` (moved: Fashion-MNIST's training set is 188 MB of floats) when
// keep <= 0, else a seeded random subset of `keep` rows.
Samples keep_rows(RawDataset&& d, int64_t keep, RngStream& rng, const std::string& field) {
  if (keep <= 0) return Samples{std::move(d.x), {}, std::move(d.labels)};
  return take_rows(d, subsample(d.labels.size(), keep, rng, field));
}

// Standardises both sets' columns with the training set's mean and population
// standard deviation (in double); constant columns are only centred.
void standardise(Samples& train, Samples& test) {
  const Eigen::MatrixXd x = train.x.cast<double>();
  const Eigen::RowVectorXd mean = x.colwise().mean();
  const Eigen::RowVectorXd var =
      (x.rowwise() - mean).array().square().colwise().sum() / static_cast<double>(x.rows());
  Eigen::RowVectorXd inv_std(var.size());
  for (Eigen::Index c = 0; c < var.size(); ++c) {
    inv_std(c) = var(c) > 1e-12 ? 1.0 / std::sqrt(var(c)) : 1.0;
  }
  for (Samples* s : {&train, &test}) {
    s->x = ((s->x.cast<double>().rowwise() - mean).array().rowwise() * inv_std.array())
               .cast<float>()
               .matrix();
  }
}

struct SklearnSpec {
  const char* file;
  int features, classes;
  bool header;
  int64_t rows;  // expected rows when the file has no header
};

SklearnSpec sklearn_spec(const std::string& dataset) {
  if (dataset == "digits") return {"digits.csv.gz", 64, 10, false, 1797};
  if (dataset == "breast_cancer") return {"breast_cancer.csv", 30, 2, true, 0};
  return {"wine_data.csv", 13, 3, true, 0};
}

}  // namespace

DatasetSplit load_dataset(const DatasetOptions& o) {
  DatasetSplit out;
  // The split and the held-out subsample come from one stream, the training
  // subsample from its own (worker index 1), so that the held-out set does not
  // change with train_samples.
  RngStream rng(o.data_seed, Purpose::kData);
  RngStream train_rng(o.data_seed, Purpose::kData, 1);
  if (o.dataset == "fashion_mnist") {
    const std::string dir = o.data_dir.empty() ? kFashionMnistDir : o.data_dir;
    const auto path = [&](const char* name) { return (fs::path(dir) / name).string(); };
    out.train = keep_rows(
        read_idx_pair(path("train-images-idx3-ubyte.gz"), path("train-labels-idx1-ubyte.gz")),
        o.train_samples, train_rng, "train_samples");
    out.test = keep_rows(
        read_idx_pair(path("t10k-images-idx3-ubyte.gz"), path("t10k-labels-idx1-ubyte.gz")),
        o.test_samples, rng, "test_samples");
    for (Samples* s : {&out.train, &out.test}) s->x /= 255.0f;
    out.classes = 10;
    out.height = out.width = 28;
    return out;
  }

  const SklearnSpec spec = sklearn_spec(o.dataset);
  const std::string dir = o.data_dir.empty() ? kSklearnDataDir : o.data_dir;
  const RawDataset all = read_sklearn_csv((fs::path(dir) / spec.file).string(), spec.features,
                                          spec.classes, spec.header, spec.rows);
  // Stratified split: per class, a seeded permutation; its first
  // round(test_fraction · count) samples are held out.
  std::vector<uint32_t> train_rows, test_rows;
  for (int c = 0; c < spec.classes; ++c) {
    std::vector<uint32_t> members;
    for (size_t i = 0; i < all.labels.size(); ++i) {
      if (all.labels[i] == c) members.push_back(static_cast<uint32_t>(i));
    }
    shuffle(members, rng);
    const auto held = static_cast<size_t>(std::lround(o.test_fraction * double(members.size())));
    test_rows.insert(test_rows.end(), members.begin(), members.begin() + long(held));
    train_rows.insert(train_rows.end(), members.begin() + long(held), members.end());
  }
  // Interleave the classes (the per-class blocks would make `contiguous`
  // sharding and the train_eval prefix label-sorted).
  shuffle(train_rows, rng);
  shuffle(test_rows, rng);
  const auto pick = [&](const std::vector<uint32_t>& rows, int64_t keep, RngStream& from,
                        const char* field) {
    std::vector<uint32_t> kept;
    for (const uint32_t k : subsample(rows.size(), keep, from, field)) kept.push_back(rows[k]);
    return take_rows(all, kept);
  };
  out.test = pick(test_rows, o.test_samples, rng, "test_samples");
  out.train = pick(train_rows, o.train_samples, train_rng, "train_samples");
  standardise(out.train, out.test);
  out.classes = spec.classes;
  if (o.dataset == "digits") out.height = out.width = 8;
  return out;
}

}  // namespace bitlab
