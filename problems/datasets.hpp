// Real data sets read from the files Debian packages ship (no downloads):
//
//   fashion_mnist /usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
//                  (package dataset-fashion-mnist): 60 000 + 10 000 images 28×28, 10 classes
//   digits         <sklearn>/digits.csv.gz        1797 × 64 (8×8 images, 0..16), 10 classes
//   breast_cancer  <sklearn>/breast_cancer.csv    569 × 30, 2 classes (0 malignant, 1 benign)
//   wine           <sklearn>/wine_data.csv        178 × 13, 3 classes
//   (<sklearn> = /usr/lib/python3/dist-packages/sklearn/datasets/data, package python3-sklearn)
//
// Every reader validates what it reads and throws ConfigError naming the file
// and the problem: missing (with the Debian package to install), truncated,
// wrong magic number, wrong shape, a non-numeric or out-of-range CSV cell
// (file:line). Files are read through zlib's gz functions, which read plain
// files unchanged, so a .gz and an uncompressed copy both work.
//
// Preparation (load_dataset), a pure function of the options:
//   * split: Fashion-MNIST keeps its official train/test files. The sklearn
//     sets have no split: a stratified one, drawn once from
//     RngStream(data_seed, Purpose::kData) — within each class a seeded
//     permutation, the first round(test_fraction·class size) samples go to the
//     test set — so every class is in both sets in its proportion.
//   * subsampling: `train_samples` / `test_samples` > 0 keep a seeded random
//     subset of that size (0 keeps all), to keep experiments and tests small.
//     The training subset has its own stream, so the held-out set does not
//     depend on train_samples.
//   * scaling: Fashion-MNIST pixels are divided by 255 (→ [0, 1]; per-pixel
//     standardisation would blow up the nearly constant border pixels). The
//     sklearn sets are standardised per feature with the TRAINING set's mean
//     and standard deviation only (population std; a feature constant on the
//     training set, like digits' always-blank corner pixels, is only centred).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "problems/synthetic.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kSklearnDataDir =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data";

// The data options every real problem shares.
struct DatasetOptions {
  std::string dataset = "digits";
  std::string data_dir;  // "" = where the Debian package puts the files
  int64_t train_samples = 0;
  int64_t test_samples = 0;
  double test_fraction = 0.25;
  int64_t train_eval_samples = 2048;
  uint64_t data_seed = 0;
};

// Adds the DatasetOptions fields to the schema of a problem's options struct
// O (which derives from DatasetOptions): their JSON names, docs and rules live
// here, once. `datasets` are the values `dataset` accepts.
template <class O>
Schema<O>& add_dataset_fields(Schema<O>& s, std::vector<std::string> datasets);

// A labelled data set as read from its files: rows of raw feature values.
struct RawDataset {
  RowMatrixF x;
  std::vector<int32_t> labels;
};

// Reads one IDX file pair (images idx3 + labels idx1, gz or plain). Checks the
// magic numbers (0x803, 0x801), 28×28 images, equal counts, labels in [0, 10)
// and that the files are exactly as long as their headers say.
RawDataset read_idx_pair(const std::string& images_path, const std::string& labels_path);

// Reads a scikit-learn data CSV: rows of `features` numbers and an integer
// label in [0, classes). With `header` the first line is sklearn's
// "n_samples,n_features,class names..." and must match `features`/`classes`;
// the row count must equal n_samples (or `expected_rows` when > 0).
RawDataset read_sklearn_csv(const std::string& path, int features, int classes, bool header,
                            int64_t expected_rows);

struct DatasetSplit {
  Samples train, test;
  int classes = 0;
  int64_t height = 0, width = 0;  // image size when the features are an image, else 0
};

// Loads, validates, splits, subsamples and scales the set `o.dataset`. Under a
// restricting `scope` only the training rows of the scope's workers (and, when
// it evaluates, the first train_eval_samples) keep their features, and the
// held-out set is read only when it evaluates. Fashion-MNIST's training images
// are streamed, so the rest are never stored; the scikit-learn sets are small
// and read whole first (standardising needs every training row).
DatasetSplit load_dataset(const DatasetOptions& o, const DataScope& scope = {});

// What load_dataset(o) gives, without holding the features: the training
// samples (after train_samples), the features, classes and image size.
// Fashion-MNIST's count comes from its training images' header (16 bytes
// read); the scikit-learn sets (at most 1797 rows) are loaded as
// load_dataset does, which decides their stratified split. Throws as
// load_dataset for a missing file or train_samples above the samples there.
struct DatasetSize {
  size_t train = 0;
  int64_t features = 0;
  int classes = 0;
  int64_t height = 0, width = 0;  // as DatasetSplit
};
DatasetSize dataset_size(const DatasetOptions& o);

template <class O>
Schema<O>& add_dataset_fields(Schema<O>& s, std::vector<std::string> datasets) {
  static_assert(std::is_base_of_v<DatasetOptions, O>);
  // Explicit <V>: the members belong to the base, so the pointer-to-member
  // converts to O's instead of being deduced.
  s.template field<std::string>(
       "dataset", &O::dataset,
       "data set: digits, breast_cancer, wine (scikit-learn CSVs, package python3-sklearn), "
       "fashion_mnist (package dataset-fashion-mnist)",
       {rules::one_of(std::move(datasets))})
      .template field<std::string>(
          "data_dir", &O::data_dir,
          "folder holding the data set's files; \"\" = where the Debian package installs them")
      .template field<int64_t>("train_samples", &O::train_samples,
                               "training samples kept (a seeded random subset); 0 = all",
                               {rules::at_least<int64_t>(0)})
      .template field<int64_t>("test_samples", &O::test_samples,
                               "held-out samples kept for eval_loss/eval_accuracy (a seeded "
                               "random subset); 0 = all",
                               {rules::at_least<int64_t>(0)})
      .template field<double>("test_fraction", &O::test_fraction,
                              "scikit-learn sets only (they have no split): fraction of each "
                              "class held out, stratified and seeded by data_seed",
                              {rules::greater(0.0), rules::at_most(0.5)})
      .template field<int64_t>("train_eval_samples", &O::train_eval_samples,
                               "train_loss_eval is the loss on the first this-many training "
                               "samples (a fixed subsample, the same for every run); 0 = all",
                               {rules::at_least<int64_t>(0)})
      .template field<uint64_t>("data_seed", &O::data_seed,
                                "seed of the split and subsamples; independent of the run seed");
  return s;
}

}  // namespace bitlab
