#include "problems/datasets.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "sim/core/rng.hpp"

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

// A gz or plain file read front to back through zlib, so a data set can be
// streamed row by row (a rank keeps only its shard's rows) and validated on
// the way. Every failure names the file.
class GzReader {
 public:
  GzReader(std::string path, const std::string& package) : path_(std::move(path)) {
    if (!fs::exists(path_)) {
      data_fail(path_, "not found; install the Debian package " + package +
                           " (sudo apt-get install " + package +
                           ", or ./setup.sh) or point problem.data_dir at a folder holding it");
    }
    f_ = gzopen(path_.c_str(), "rb");
    if (f_ == nullptr) data_fail(path_, "cannot be opened");
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() {
    if (f_ != nullptr) gzclose(f_);
  }

  const std::string& path() const { return path_; }
  // Reads up to n bytes; fewer only at the end of the data.
  size_t read(void* dst, size_t n) {
    auto* out = static_cast<char*>(dst);
    size_t got_total = 0;
    while (got_total < n) {
      const auto want = static_cast<unsigned>(std::min<size_t>(n - got_total, 1u << 30));
      const int got = gzread(f_, out + got_total, want);
      if (got < 0) corrupt();
      if (got == 0) break;
      got_total += static_cast<size_t>(got);
    }
    return got_total;
  }
  // Reads and counts the rest of the data.
  size_t rest() {
    char buf[1 << 16];
    size_t total = 0;
    for (size_t got; (got = read(buf, sizeof buf)) > 0;) total += got;
    return total;
  }
  // zlib reports a gzip stream cut short only through gzerror at the end.
  void finish() {
    int errnum = 0;
    gzerror(f_, &errnum);
    if (errnum != Z_OK) corrupt();
  }

 private:
  [[noreturn]] void corrupt() {
    int errnum = 0;
    const std::string msg = gzerror(f_, &errnum);
    data_fail(path_, "truncated or corrupt gzip data (" + msg + ")");
  }
  std::string path_;
  gzFile f_ = nullptr;
};

// The whole (decompressed) content of a gz or plain file.
std::string read_file_gz(const std::string& path, const std::string& package) {
  GzReader in(path, package);
  std::string out;
  char buf[1 << 16];
  for (size_t got; (got = in.read(buf, sizeof buf)) > 0;) out.append(buf, got);
  in.finish();
  return out;
}

uint32_t big_endian_u32(const unsigned char* bytes) {
  uint32_t v = 0;
  for (size_t k = 0; k < 4; ++k) v = (v << 8) | bytes[k];
  return v;
}

[[noreturn]] void payload_fail(const std::string& path, uint64_t promised, uint64_t held) {
  data_fail(path, std::string(held < promised ? "truncated" : "too long") +
                      ": the header promises " + std::to_string(promised) +
                      " data bytes, the file holds " + std::to_string(held));
}

// The most rows a scikit-learn CSV header may claim.
constexpr double kMaxCsvRows = 1e9;
// The most items an IDX header may promise: 100× Fashion-MNIST's training set.
constexpr uint32_t kMaxIdxItems = 6000000;

// Header of an IDX file: magic, then one big-endian u32 per dimension.
// Returns the shape and the payload size it promises.
std::vector<uint32_t> read_idx_header(GzReader& in, uint32_t magic, size_t dims,
                                      uint64_t& payload) {
  const size_t header = 4 * (1 + dims);
  unsigned char bytes[4 * 4];
  const size_t got = in.read(bytes, header);
  if (got < header) {
    in.finish();
    data_fail(in.path(), "truncated: " + std::to_string(got) +
                             " bytes, shorter than the IDX header (" + std::to_string(header) +
                             ")");
  }
  const uint32_t found = big_endian_u32(bytes);
  if (found != magic) {
    char want_hex[16], got_hex[16];
    std::snprintf(want_hex, sizeof want_hex, "0x%08x", magic);
    std::snprintf(got_hex, sizeof got_hex, "0x%08x", found);
    data_fail(in.path(), std::string("wrong magic number ") + got_hex + " (expected " + want_hex +
                             ", an IDX file of unsigned bytes with " + std::to_string(dims) +
                             " dimension(s))");
  }
  std::vector<uint32_t> shape(dims);
  for (size_t k = 0; k < dims; ++k) shape[k] = big_endian_u32(bytes + 4 * (1 + k));
  // Checked before anything is allocated from it: a header promising 0 items,
  // or 0xFFFFFFFF (which would zero 4.2 GB before "truncated"), is corrupt.
  if (shape[0] == 0 || shape[0] > kMaxIdxItems) {
    in.finish();
    data_fail(in.path(), "the header promises " + std::to_string(shape[0]) +
                             " items: must be in [1, " + std::to_string(kMaxIdxItems) +
                             "] (Fashion-MNIST has 60000 and 10000); the file is corrupt or "
                             "not this data set");
  }
  payload = 1;
  for (const uint32_t s : shape) payload *= s;
  return shape;
}

// Reads exactly `n` payload bytes (of `payload` promised, `done` already read)
// into dst; a shorter file fails with the byte count it holds.
void read_payload(GzReader& in, void* dst, size_t n, uint64_t payload, uint64_t done) {
  const size_t got = in.read(dst, n);
  if (got < n) {
    in.finish();
    payload_fail(in.path(), payload, done + got);
  }
}

// After the promised payload: the file must end there.
void expect_end(GzReader& in, uint64_t payload) {
  const size_t extra = in.rest();
  in.finish();
  if (extra > 0) payload_fail(in.path(), payload, payload + extra);
}

std::string shape_text(const std::vector<uint32_t>& shape) {
  std::string s;
  for (const uint32_t v : shape) s += (s.empty() ? "" : " × ") + std::to_string(v);
  return s;
}

}  // namespace

namespace {

constexpr uint32_t kIdxSide = 28;
constexpr int kIdxClasses = 10;

// Opens an IDX image file and checks its header: N × 28 × 28 unsigned bytes.
uint32_t open_idx_images(GzReader& in, uint64_t& payload) {
  const auto shape = read_idx_header(in, 0x00000803, 3, payload);
  if (shape[1] != kIdxSide || shape[2] != kIdxSide) {
    data_fail(in.path(), "wrong shape " + shape_text(shape) + ": expected N × 28 × 28 images");
  }
  return shape[0];
}

// Reads an IDX label file of `images` labels in [0, 10) (for images_path).
std::vector<int32_t> read_idx_labels(const std::string& labels_path, uint32_t images,
                                     const std::string& images_path) {
  GzReader in(labels_path, package_of("fashion_mnist"));
  uint64_t payload = 0;
  const auto shape = read_idx_header(in, 0x00000801, 1, payload);
  if (shape[0] != images) {
    data_fail(labels_path, "wrong shape: " + std::to_string(shape[0]) + " labels for " +
                               std::to_string(images) + " images in " + images_path);
  }
  std::vector<unsigned char> bytes(shape[0]);
  read_payload(in, bytes.data(), bytes.size(), payload, 0);
  expect_end(in, payload);
  std::vector<int32_t> labels(bytes.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (bytes[i] >= kIdxClasses) {
      data_fail(labels_path, "label " + std::to_string(bytes[i]) + " of sample " +
                                 std::to_string(i) + " is not in [0, 10)");
    }
    labels[i] = bytes[i];
  }
  return labels;
}

// Streams the images of an opened IDX file (header read), keeping image r in
// row dest[r] of x (dest[r] < 0: skipped); every image is read, so the file
// is validated to its end whatever is kept.
void read_idx_images(GzReader& in, uint32_t images, uint64_t payload,
                     const std::vector<int32_t>& dest, RowMatrixF& x) {
  constexpr size_t kPixels = kIdxSide * kIdxSide;
  std::vector<unsigned char> image(kPixels);
  for (uint32_t r = 0; r < images; ++r) {
    read_payload(in, image.data(), kPixels, payload, uint64_t(r) * kPixels);
    if (dest[r] < 0) continue;
    float* row = x.row(dest[r]).data();
    for (size_t k = 0; k < kPixels; ++k) row[k] = static_cast<float>(image[k]);
  }
  expect_end(in, payload);
}

}  // namespace

RawDataset read_idx_pair(const std::string& images_path, const std::string& labels_path) {
  GzReader in(images_path, package_of("fashion_mnist"));
  uint64_t payload = 0;
  const uint32_t n = open_idx_images(in, payload);
  RawDataset out;
  out.labels = read_idx_labels(labels_path, n, images_path);
  out.x.resize(n, kIdxSide * kIdxSide);
  std::vector<int32_t> dest(n);
  std::iota(dest.begin(), dest.end(), 0);
  read_idx_images(in, n, payload, dest, out.x);
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
    // Checked before the count is used: 1e300 rows is no int64, and 0 rows
    // would let any number of data rows pass.
    if (!(rows >= 1 && rows <= kMaxCsvRows && rows == std::floor(rows))) {
      data_fail(where(0), "the header claims " + std::string(h[0]) +
                              " rows: must be a whole number in [1, 1e9]");
    }
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

// How many samples of n `keep` keeps (<= 0: all); above n is refused.
size_t kept_count(size_t n, int64_t keep, const std::string& field) {
  if (keep <= 0) return n;
  if (static_cast<size_t>(keep) > n) {
    config_fail(join_path("problem", field), Json(keep),
                "must be <= " + std::to_string(n) + ", the samples available");
  }
  return static_cast<size_t>(keep);
}

// `keep` > 0: a random subset of that size, in random order; else all, in order.
std::vector<uint32_t> subsample(size_t n, int64_t keep, RngStream& rng, const std::string& field) {
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  if (keep <= 0) return idx;
  const size_t kept = kept_count(n, keep, field);
  shuffle(idx, rng);
  idx.resize(kept);
  return idx;
}

// All of `d` (moved: Fashion-MNIST's training set is 188 MB of floats) when
// keep <= 0, else a seeded random subset of `keep` rows.
Samples keep_rows(RawDataset&& d, int64_t keep, RngStream& rng, const std::string& field) {
  if (keep <= 0) return Samples{std::move(d.x), {}, std::move(d.labels), {}};
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

namespace {

// Training samples the first-k evaluation column reads (train_eval_samples;
// 0 = all).
size_t train_eval_prefix(const DatasetOptions& o, size_t train_count) {
  return o.train_eval_samples > 0 ? std::min(static_cast<size_t>(o.train_eval_samples), train_count)
                                  : train_count;
}

}  // namespace

DatasetSplit load_dataset(const DatasetOptions& o, const DataScope& scope) {
  DatasetSplit out;
  // The split and the held-out subsample come from one stream, the training
  // subsample from its own (worker index 1), so that the held-out set does not
  // change with train_samples.
  RngStream rng(o.data_seed, Purpose::kData);
  RngStream train_rng(o.data_seed, Purpose::kData, 1);
  if (o.dataset == "fashion_mnist") {
    const std::string dir = o.data_dir.empty() ? kFashionMnistDir : o.data_dir;
    const auto path = [&](const char* name) { return (fs::path(dir) / name).string(); };
    // Training set, streamed: labels first (the sharding needs them), then
    // only the images this process holds are kept (every image is still read
    // and the file validated to its end).
    const std::string images_path = path("train-images-idx3-ubyte.gz");
    GzReader images(images_path, package_of(o.dataset));
    uint64_t payload = 0;
    const uint32_t raw_count = open_idx_images(images, payload);
    const std::vector<int32_t> raw_labels =
        read_idx_labels(path("train-labels-idx1-ubyte.gz"), raw_count, images_path);
    // Training sample j is image sample_image[j] (a seeded subset, or all).
    const std::vector<uint32_t> sample_image =
        subsample(raw_count, o.train_samples, train_rng, "train_samples");
    Samples& train = out.train;
    train.labels.resize(sample_image.size());
    for (size_t j = 0; j < sample_image.size(); ++j) train.labels[j] = raw_labels[sample_image[j]];
    const auto keep = held_samples(scope, sample_image.size(), train.labels, kIdxClasses,
                                   train_eval_prefix(o, sample_image.size()));
    train.allocate_rows(sample_image.size(), kIdxSide * kIdxSide, keep);
    // Image sample_image[j] goes to sample j's row (−1: not held, skipped).
    std::vector<int32_t> dest(raw_count, -1);
    for (size_t j = 0; j < sample_image.size(); ++j) {
      dest[sample_image[j]] = train.held_row(static_cast<uint32_t>(j));
    }
    read_idx_images(images, raw_count, payload, dest, train.x);
    // Held-out set: only the process that evaluates reads it.
    if (scope.evaluates) {
      out.test = keep_rows(
          read_idx_pair(path("t10k-images-idx3-ubyte.gz"), path("t10k-labels-idx1-ubyte.gz")),
          o.test_samples, rng, "test_samples");
    } else {
      out.test.x.resize(0, kIdxSide * kIdxSide);
    }
    for (Samples* s : {&out.train, &out.test}) s->x /= 255.0f;
    out.classes = kIdxClasses;
    out.height = out.width = kIdxSide;
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
  // These sets are small (at most 1797 rows): read, split and standardised
  // whole (the statistics need every training row), then only the held rows
  // are kept.
  out.train.hold_only(held_samples(scope, out.train.count(), out.train.labels, spec.classes,
                                   train_eval_prefix(o, out.train.count())));
  if (!scope.evaluates) out.test = Samples{RowMatrixF(0, spec.features), {}, {}, {}};
  out.classes = spec.classes;
  if (o.dataset == "digits") out.height = out.width = 8;
  return out;
}

DatasetSize dataset_size(const DatasetOptions& o) {
  if (o.dataset == "fashion_mnist") {
    const std::string dir = o.data_dir.empty() ? kFashionMnistDir : o.data_dir;
    const std::string images_path = (fs::path(dir) / "train-images-idx3-ubyte.gz").string();
    GzReader images(images_path, package_of(o.dataset));
    uint64_t payload = 0;
    const uint32_t count = open_idx_images(images, payload);
    // subsample()'s count and rule, without drawing the subset.
    return {kept_count(count, o.train_samples, "train_samples"), kIdxSide * kIdxSide, kIdxClasses,
            kIdxSide, kIdxSide};
  }
  const DatasetSplit split = load_dataset(o);
  return {split.train.count(), split.train.x.cols(), split.classes, split.height, split.width};
}

}  // namespace bitlab
