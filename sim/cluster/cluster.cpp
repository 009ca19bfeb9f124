#include "sim/cluster/cluster.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "sim/core/field_error.hpp"
#include "sim/core/human.hpp"
#include "sim/core/memory.hpp"

namespace bitlab {

BatchSize JsonCodec<BatchSize>::read(const Json& j, std::string_view path) {
  if (j.is_string()) {
    if (j.get<std::string>() == "full") return {true, 0};
    config_fail(path, j, "must be a positive integer or \"full\"");
  }
  if (!j.is_number()) config_fail(path, j, "must be a positive integer or \"full\"");
  const int64_t n = JsonCodec<int64_t>::read(j, path);
  if (n < 1) config_fail(path, j, "must be a positive integer or \"full\"");
  return {false, n};
}

Json JsonCodec<BatchSize>::write(const BatchSize& b) {
  return b.full ? Json("full") : Json(b.samples);
}

Schema<ClusterOptions> ClusterOptions::schema() {
  Schema<ClusterOptions> s;
  s.field("workers", &ClusterOptions::workers, "number of emulated data-parallel workers n",
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(1 << 20)});
  s.field("batch_size", &ClusterOptions::batch_size,
          "samples per worker per step, or \"full\" for the worker's whole shard "
          "(deterministic, no sampling); ignored by problems without a data set");
  s.field("sharding", &ClusterOptions::sharding,
          "how training samples are split over workers: iid (random equal split), contiguous "
          "(in data order), label_skew (per-class Dirichlet(alpha) proportions), replicated "
          "(every worker holds the whole training set)",
          {rules::one_of({"iid", "contiguous", "label_skew", "replicated"})});
  s.field("dirichlet_alpha", &ClusterOptions::dirichlet_alpha,
          "label_skew only: concentration of the per-class Dirichlet; small = each worker "
          "sees few classes",
          {rules::greater(0.0)});
  return s;
}

// ---------------------------------------------------------------------------

BatchSampler::BatchSampler(std::vector<uint32_t> shard, BatchSize batch, uint64_t seed,
                           uint32_t worker)
    : shard_(std::move(shard)), batch_(batch), seed_(seed), worker_(worker) {
  perm_.resize(shard_.size());
}

size_t BatchSampler::batch_samples() const {
  return batch_.full ? shard_.size() : static_cast<size_t>(batch_.samples);
}

void BatchSampler::load_epoch(int64_t epoch) {
  if (epoch == perm_epoch_) return;
  // Fisher-Yates on a fresh copy of the shard (no allocation: perm_ is sized).
  std::copy(shard_.begin(), shard_.end(), perm_.begin());
  RngStream rng(seed_, Purpose::kShuffle, worker_, static_cast<uint64_t>(epoch));
  for (size_t i = perm_.size(); i > 1; --i) {
    const size_t j = rng.next_below(i);
    std::swap(perm_[i - 1], perm_[j]);
  }
  perm_epoch_ = epoch;
}

void BatchSampler::sample(int64_t step, std::vector<uint32_t>& out) {
  if (shard_.empty()) {
    out.clear();
    return;
  }
  if (batch_.full) {
    out.assign(shard_.begin(), shard_.end());
    return;
  }
  const size_t b = static_cast<size_t>(batch_.samples);
  const size_t m = shard_.size();
  out.resize(b);
  // Positions [(step-1)·b, step·b) of the endless sequence of epoch
  // permutations.
  uint64_t pos = static_cast<uint64_t>(step - 1) * b;
  for (size_t k = 0; k < b; ++k, ++pos) {
    load_epoch(static_cast<int64_t>(pos / m));
    out[k] = perm_[pos % m];
  }
}

// ---------------------------------------------------------------------------

static void split_even(const std::vector<uint32_t>& idx, int n,
                       std::vector<std::vector<uint32_t>>& shards) {
  const size_t m = idx.size();
  for (int i = 0; i < n; ++i) {
    const size_t lo = m * static_cast<size_t>(i) / n;
    const size_t hi = m * static_cast<size_t>(i + 1) / n;
    shards[i].insert(shards[i].end(), idx.begin() + lo, idx.begin() + hi);
  }
}

std::vector<std::vector<uint32_t>> make_shards(const Problem& problem, const ClusterOptions& opts,
                                               uint64_t seed) {
  return make_shards(problem.num_train(), problem.train_labels(), problem.num_classes(), opts,
                     seed);
}

std::vector<uint32_t> samples_of_workers(const std::vector<std::vector<uint32_t>>& shards,
                                         WorkerRange local) {
  std::vector<uint32_t> out;
  for (int i = local.begin; i < local.end; ++i) {
    out.insert(out.end(), shards[static_cast<size_t>(i)].begin(),
               shards[static_cast<size_t>(i)].end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::vector<uint32_t>> make_shards(size_t m, std::span<const int32_t> labels,
                                               int classes, const ClusterOptions& opts,
                                               uint64_t seed) {
  const int n = static_cast<int>(opts.workers);
  std::vector<std::vector<uint32_t>> shards(n);
  if (m == 0) return shards;  // no data set: batches are empty
  if (m < static_cast<size_t>(n) && opts.sharding != "replicated") {
    config_fail("cluster.workers", Json(opts.workers),
                "must be <= the problem's " + std::to_string(m) +
                    " training samples (every worker needs a shard)");
  }
  std::vector<uint32_t> all(m);
  std::iota(all.begin(), all.end(), 0u);
  RngStream rng(seed, Purpose::kShard);
  auto shuffle = [&rng](std::vector<uint32_t>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.next_below(i)]);
  };

  if (opts.sharding == "replicated") {
    for (auto& s : shards) s = all;
  } else if (opts.sharding == "contiguous") {
    split_even(all, n, shards);
  } else if (opts.sharding == "iid") {
    shuffle(all);
    split_even(all, n, shards);
  } else {  // label_skew
    if (labels.empty() || classes <= 0) {
      config_fail("cluster.sharding", Json(opts.sharding),
                  "label_skew needs a classification problem (this one has no labels)");
    }
    std::vector<std::vector<uint32_t>> by_class(classes);
    for (size_t j = 0; j < m; ++j) by_class[labels[j]].push_back(static_cast<uint32_t>(j));
    std::vector<double> p(n);
    for (int c = 0; c < classes; ++c) {
      auto& idx = by_class[c];
      shuffle(idx);
      // p ~ Dirichlet(alpha, ..., alpha) from normalised Gamma(alpha) draws.
      double total = 0.0;
      for (int i = 0; i < n; ++i) total += (p[i] = rng.next_gamma(opts.dirichlet_alpha));
      // Cumulative rounding: worker i gets [round(P_{i-1} m_c), round(P_i m_c)).
      double cum = 0.0;
      size_t lo = 0;
      for (int i = 0; i < n; ++i) {
        cum += p[i];
        const size_t hi =
            i == n - 1 ? idx.size()
                       : std::min(idx.size(), static_cast<size_t>(std::llround(
                                                  cum / total * static_cast<double>(idx.size()))));
        shards[i].insert(shards[i].end(), idx.begin() + lo, idx.begin() + std::max(lo, hi));
        lo = std::max(lo, hi);
      }
    }
    for (int i = 0; i < n; ++i) {
      if (shards[i].empty()) {
        config_fail("cluster.dirichlet_alpha", Json(opts.dirichlet_alpha),
                    "leaves worker " + std::to_string(i) +
                        " with no sample; raise dirichlet_alpha, use fewer workers or more "
                        "samples");
      }
      std::sort(shards[i].begin(), shards[i].end());
    }
  }
  return shards;
}

// ---------------------------------------------------------------------------

// The streamed mean's plan and buffers (StreamedMean). mean_over_workers'
// tree is cut at depth ceil(log2 threads); its nodes there, the frontier, are
// tasks computed depth first on one thread each: a node of at most
// kBlockRows workers by computing their gradients into the thread's block and
// summing that (sum_over_workers), a larger one as its left half into the
// node's output, its right half into the thread's partial sum of that level,
// then left += right. The frontier is then combined up to the root, whose add
// finish_mean fuses with the division. Every node's value is the tree's, so
// the mean has mean_over_workers' bits for any thread count. When every row
// fits in the threads' blocks at once (n <= threads × block rows) the rows
// path runs instead: no more memory, and the small-n speed of the rows path.
//
// Across ranks (the MPI backend) the rank's "maxima" — the largest nodes of
// the tree inside its block of workers, in tree order — are each cut as the
// root is above and folded the same way; the nodes above every rank's
// maxima are then summed across the ranks (combine_across): rank q takes
// elements [q·d/R, (q+1)·d/R) of every maximum (an alltoall of fp32 partial
// sums), adds them up the tree as combine() does, the root's add fused with
// the mean's division and rounding, and the mean's ranges are allgathered.
// Every node's value is still the tree's: the simulator's bits.
struct Cluster::Stream {
  // Rows computed before they are summed (StreamedMean::max_block_rows): at
  // 16, the upper levels' passes (3 row-sized streams per node, n/16 nodes)
  // add about a fifth to the block sums' (17 streams per 16 rows); at 8, a half.
  static constexpr int kBlockRows = 16;
  static_assert(kBlockRows <= kGroupWorkers, "a block's workers are one fill_gradients call");
  struct Tree {
    WireDtype wire = WireDtype::kFp32;
    std::vector<float> nodes;    // frontier.size() × stride
    std::vector<float> partial;  // threads × levels × stride
    std::vector<float> mean;     // dim
  };
  int threads = 1;
  int depth = 0;                             // the frontier's depth in the tree
  std::vector<std::pair<int, int>> frontier;  // nodes [lo, hi), in tree order
  int block_rows = 1;
  int levels = 0;
  std::vector<float> blocks;  // threads × block_rows × stride
  std::vector<Tree> trees;    // [0]: opts.wire; [1]: fp32, when fp32_too and wire is not fp32
  int first = 0;              // trees [first, first + folded): what the last
  int folded = 0;             // compute_gradient_mean() folded
  const TakeGradient* take = nullptr;  // this step's taker (the optimizer's), or null
  // StreamedMean::handed: one intake per tree, fed by take_into_mean.
  bool handed = false;
  std::vector<WorkerTreeIntake> intakes;
  bool rows_fit = false;      // every row fits in the blocks at once: the rows path
  // Across ranks (comm distributed): every rank's maxima [lo, hi) in tree
  // order with their owners, this rank's [mine_lo, mine_hi) of them, and
  // where each of its maxima starts in `frontier`.
  Communicator* comm = nullptr;
  std::vector<std::array<int, 3>> maxima;  // lo, hi, owner rank
  int mine_lo = 0, mine_hi = 0;
  std::vector<size_t> maxima_frontier;
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;  // bytes
  std::vector<float> send, recv, columns;  // this rank's maxima; everyone's, my element range
  std::vector<float*> values;              // each maximum's value on this rank

  Stream(StreamedMean o, int workers, WorkerRange local, size_t stride, uint64_t optimizer_bytes)
      : threads(std::max(1, omp_get_max_threads())), handed(o.handed) {
    trees.resize(o.fp32_too && o.wire != WireDtype::kFp32 ? 2 : 1);
    trees[0].wire = o.wire;
    while ((1 << depth) < threads) ++depth;
    // Across ranks: this rank's maxima, each cut into frontier nodes (a
    // handed cluster gives each its own intake instead: allocate()).
    if (o.comm != nullptr && o.comm->distributed()) {
      comm = o.comm;
      find_maxima(0, workers, local.size());
      for (size_t m = 0; m < maxima.size(); ++m) {
        if (maxima[m][2] != comm->rank()) continue;
        if (mine_hi == 0) mine_lo = static_cast<int>(m);
        mine_hi = static_cast<int>(m) + 1;
        if (handed) continue;
        maxima_frontier.push_back(frontier.size());
        cut(maxima[m][0], maxima[m][1], 0);
      }
    } else if (!handed) {
      cut(0, workers, 0);
    }
    if (handed) {
      block_rows = 0;
      intake_n = workers;
      return;
    }
    int largest = 0;
    for (const auto& [lo, hi] : frontier) largest = std::max(largest, hi - lo);
    block_rows = std::min(block_rows_for(o.max_block_rows, stride, optimizer_bytes), largest);
    for (int s = largest; s > block_rows; s -= s / 2) ++levels;  // the right half, ceil(s/2)
    rows_fit = comm == nullptr && workers <= threads * block_rows;
    if (rows_fit) levels = 0;  // the rows path needs no partial sums
  }
  // The most rows a thread's block holds: max_rows (at most kBlockRows),
  // halved while the blocks are smaller than the optimizer's state but more
  // than its share (StreamedMean).
  int block_rows_for(int max_rows, size_t stride, uint64_t optimizer_bytes) const {
    if (max_rows < 1) throw std::logic_error("StreamedMean::max_block_rows must be >= 1");
    const auto bytes = [&](int r) {
      return saturating_mul(static_cast<uint64_t>(threads) * static_cast<uint64_t>(r),
                            static_cast<uint64_t>(stride), sizeof(float));
    };
    int rows = std::min(max_rows, kBlockRows);
    if (bytes(rows) >= optimizer_bytes) return rows;
    while (rows > StreamedMean::kMinBlockRows &&
           bytes(rows) > optimizer_bytes / StreamedMean::kBlockStateShare) {
      rows /= 2;
    }
    return rows;
  }
  // The tree's largest nodes inside one rank's block of b workers, in tree
  // order, each with its owner.
  void find_maxima(int lo, int hi, int b) {
    if (lo / b == (hi - 1) / b) {
      maxima.push_back({lo, hi, lo / b});
      return;
    }
    const int mid = lo + (hi - lo) / 2;
    find_maxima(lo, mid, b);
    find_maxima(mid, hi, b);
  }
  // Element range of rank q: [q·dim/R, (q+1)·dim/R), as Communicator::exact_mean.
  size_t range_begin(size_t dim, int q) const {
    return dim * static_cast<size_t>(q) / static_cast<size_t>(comm->ranks());
  }
  // Across ranks, after this rank's maxima are folded into `values`: the
  // mean of the whole tree into `mean` (every rank).
  void combine_across(size_t dim, int n, std::span<float> mean, WireDtype wire) {
    const int ranks = comm->ranks(), me = comm->rank();
    const size_t lo = range_begin(dim, me), len = range_begin(dim, me + 1) - lo;
    const int mine = mine_hi - mine_lo;
    // Pack: for each rank q, my maxima's elements of q's range, in order.
    float* out = send.data();
    for (int q = 0; q < ranks; ++q) {
      const size_t b = range_begin(dim, q), e = range_begin(dim, q + 1);
      for (int m = 0; m < mine; ++m, out += e - b) std::copy(values[m] + b, values[m] + e, out);
    }
    comm->transport().alltoallv(reinterpret_cast<const uint8_t*>(send.data()), send_counts,
                                send_displs, reinterpret_cast<uint8_t*>(recv.data()), recv_counts,
                                recv_displs);
    // recv: every maximum's elements of my range, in tree order (ranks own
    // their maxima in order).
    size_t next = 0;
    const int mid = n / 2;
    float* left = combine_maxima(0, mid, len, next);
    float* right = combine_maxima(mid, n, len, next);
    finish_mean({left, len}, {right, len}, n, mean.subspan(lo, len), wire);
    // Every rank's range of the mean reaches every rank (fp32 values: the
    // wire-rounded mean travels exactly).
    const std::span<int64_t> bounds =
        comm->staging<int64_t>(Communicator::Staging::kBounds, static_cast<size_t>(ranks) + 1);
    for (int q = 0; q <= ranks; ++q) {
      bounds[q] = static_cast<int64_t>(range_begin(dim, q) * sizeof(float));
    }
    comm->gather_columns(mean.data(), bounds);
  }
  // The node [lo, hi) above the maxima over my element range (recv holds the
  // maxima's, `next` counts them in tree order): left += right, as combine().
  float* combine_maxima(int lo, int hi, size_t len, size_t& next) {
    if (next < maxima.size() && maxima[next][0] == lo && maxima[next][1] == hi) {
      return recv.data() + (next++) * len;
    }
    const int mid = lo + (hi - lo) / 2;
    float* left = combine_maxima(lo, mid, len, next);
    float* right = combine_maxima(mid, hi, len, next);
    for (size_t k = 0; k < len; ++k) left[k] += right[k];
    return left;
  }
  // Whether the node [lo, hi) at depth d is on the frontier (cut and the
  // combination above it agree through this).
  bool on_frontier(int lo, int hi, int d) const { return d == depth || hi - lo == 1; }
  // The node [lo, hi) at depth d above the frontier: its value is left in
  // the buffer of its leftmost frontier node (`next` counts the frontier
  // nodes in tree order); the root's add goes to finish_mean instead.
  float* combine(float* nodes, size_t stride, size_t dim, int lo, int hi, int d,
                 size_t& next) const {
    if (on_frontier(lo, hi, d)) return nodes + (next++) * stride;
    const int mid = lo + (hi - lo) / 2;
    float* left = combine(nodes, stride, dim, lo, mid, d + 1, next);
    float* right = combine(nodes, stride, dim, mid, hi, d + 1, next);
    const int64_t m = static_cast<int64_t>(dim);
#pragma omp parallel for simd schedule(static) if (m > 8192)
    for (int64_t k = 0; k < m; ++k) left[k] += right[k];
    return left;
  }
  // Node buffers per tree: one per frontier node, none on the rows path.
  size_t node_buffers() const { return rows_fit ? 0 : frontier.size(); }
  void cut(int lo, int hi, int d) {
    if (on_frontier(lo, hi, d)) {
      frontier.emplace_back(lo, hi);
      return;
    }
    const int mid = lo + (hi - lo) / 2;
    cut(lo, mid, d + 1);
    cut(mid, hi, d + 1);
  }
  // Which trees this step folds: every one (the mean and, `with_fp32`, the
  // fp32 one), or, when the optimizer takes the gradients (`mean` false),
  // the fp32 tree alone for the grad_norm metric (the last tree: fp32, when
  // asked for).
  void choose_trees(bool mean, bool with_fp32) {
    if (!mean) {
      const bool fp32 = with_fp32 && trees.back().wire == WireDtype::kFp32;
      first = static_cast<int>(trees.size()) - 1;
      folded = fp32 ? 1 : 0;
    } else {
      first = 0;
      folded = with_fp32 && trees.size() > 1 ? 2 : 1;
    }
  }
  // Floats held, for rows of `stride` floats and `dim` parameters.
  uint64_t floats(size_t stride, size_t dim) const {
    if (handed) {
      // Each intake's rows when the workers come in order, and the mean
      // (across ranks: the rank's block, and the exchange's buffers).
      uint64_t rows = static_cast<uint64_t>(WorkerTreeIntake::rows_in_order(intake_workers()));
      if (comm != nullptr) {
        rows = 0;
        for (int m = mine_lo; m < mine_hi; ++m) {
          const auto& node = maxima[static_cast<size_t>(m)];
          rows += static_cast<uint64_t>(WorkerTreeIntake::rows_in_order(node[1] - node[0]));
        }
      }
      const uint64_t across =
          comm == nullptr ? 0
                          : saturating_mul(static_cast<uint64_t>(mine_hi - mine_lo), dim) +
                                saturating_mul(maxima.size(), dim / comm->ranks() + 1);
      return saturating_mul(rows * stride + dim, trees.size()) + across;
    }
    const uint64_t per_tree = saturating_mul(node_buffers() + static_cast<size_t>(threads) *
                                                                   static_cast<size_t>(levels),
                                             stride) +
                              dim;
    // Across ranks: the exchange's packed maxima and their received ranges.
    const uint64_t across =
        comm == nullptr ? 0
                        : saturating_mul(static_cast<uint64_t>(mine_hi - mine_lo), dim) +
                              saturating_mul(maxima.size(), dim / comm->ranks() + 1);
    return saturating_mul(static_cast<uint64_t>(threads) * block_rows, stride) +
           saturating_mul(per_tree, trees.size()) + across;
  }
  int intake_workers() const { return intake_n; }
  int intake_n = 1;  // handed: the workers each intake sums
  void allocate(size_t stride, size_t dim) {
    if (handed) {
      // One intake per tree, of the whole tree, or across ranks of each of
      // this rank's maxima (intakes[t * mine + m]); they allocate their rows
      // as the first step needs them.
      intakes.clear();
      for (Tree& t : trees) {
        if (comm == nullptr) {
          intakes.emplace_back(intake_n, dim, t.wire);
        } else {
          for (int m = mine_lo; m < mine_hi; ++m) {
            const auto& node = maxima[static_cast<size_t>(m)];
            intakes.emplace_back(intake_n, node[0], node[1], dim, t.wire);
          }
        }
        t.mean.assign(dim, 0.0f);
      }
      allocate_across(dim);
      return;
    }
    blocks.assign(static_cast<size_t>(threads) * block_rows * stride, 0.0f);
    allocate_across(dim);
    for (Tree& t : trees) {
      t.nodes.assign(node_buffers() * stride, 0.0f);
      t.partial.assign(static_cast<size_t>(threads) * levels * stride, 0.0f);
      t.mean.assign(dim, 0.0f);
    }
  }
  // Across ranks: the exchange's counts and buffers (combine_across).
  void allocate_across(size_t dim) {
    if (comm != nullptr) {
      const int ranks = comm->ranks(), me = comm->rank(), mine = mine_hi - mine_lo;
      const size_t len = range_begin(dim, me + 1) - range_begin(dim, me);
      send_counts.assign(ranks, 0);
      send_displs.assign(ranks, 0);
      recv_counts.assign(ranks, 0);
      recv_displs.assign(ranks, 0);
      for (int q = 0; q < ranks; ++q) {
        send_counts[q] = static_cast<int64_t>(mine * (range_begin(dim, q + 1) - range_begin(dim, q)) *
                                              sizeof(float));
        if (q > 0) send_displs[q] = send_displs[q - 1] + send_counts[q - 1];
      }
      for (const auto& m : maxima) recv_counts[m[2]] += static_cast<int64_t>(len * sizeof(float));
      for (int q = 1; q < ranks; ++q) recv_displs[q] = recv_displs[q - 1] + recv_counts[q - 1];
      send.assign(static_cast<size_t>(mine) * dim, 0.0f);
      recv.assign(maxima.size() * len, 0.0f);
      values.assign(static_cast<size_t>(mine), nullptr);
    }
  }
  // Handed: the intake of tree t that takes worker w (across ranks: the one
  // of this rank's maxima that holds w).
  WorkerTreeIntake& intake_of(int t, int w) {
    if (comm == nullptr) return intakes[static_cast<size_t>(t)];
    const int mine = mine_hi - mine_lo;
    for (int m = 0; m < mine; ++m) {
      WorkerTreeIntake& in = intakes[static_cast<size_t>(t * mine + m)];
      if (w >= in.lo() && w < in.hi()) return in;
    }
    throw std::out_of_range("Cluster: worker " + std::to_string(w) + " is not this rank's");
  }
};

Cluster::~Cluster() = default;

void Cluster::throw_streamed(const char* what) {
  throw std::logic_error(std::string("Cluster::") + what +
                         ": this cluster streams the gradients' mean and holds no rows");
}

Cluster::Cluster(const ClusterOptions& opts, const Problem& problem, uint64_t seed,
                 WorkerRange local, std::optional<StreamedMean> streamed,
                 uint64_t optimizer_bytes)
    : problem_(problem),
      workers_(static_cast<int>(opts.workers)),
      local_(local.size() > 0 ? local : WorkerRange{0, static_cast<int>(opts.workers)}),
      dim_(problem.dim()),
      stride_((problem.dim() + 15) / 16 * 16),
      optimizer_bytes_(optimizer_bytes),
      seed_(seed) {
  if (streamed) {
    const bool across = streamed->comm != nullptr && streamed->comm->distributed();
    const WorkerRange mine = across ? streamed->comm->local_workers() : WorkerRange{0, workers_};
    if (mine.begin != local_.begin || mine.end != local_.end) {
      throw std::logic_error("Cluster: a streamed mean needs its communicator's workers local");
    }
    stream_ = std::make_unique<Stream>(*streamed, workers_, local_, stride_, optimizer_bytes_);
  }
  try {
    check_memory_fits(memory_estimate(),
                      "cluster.workers = " + std::to_string(workers_) +
                          " workers of d = " + std::to_string(dim_) + " parameters",
                      std::string(!stream_ ? "4-byte floats: one gradient row per worker and the "
                                             "parameters"
                                  : stream_->handed
                                      ? "4-byte floats: the handed-in gradients' tree rows "
                                        "(log2 n + 1 when the workers come in order) and the "
                                        "parameters"
                                      : "4-byte floats: the streamed gradient mean's blocks "
                                        "and partial sums, and the parameters") +
                          (optimizer_bytes_ > 0 ? "; the optimizer's state " +
                                                      human_bytes(static_cast<double>(optimizer_bytes_))
                                                : std::string()),
                      "use fewer workers or a smaller problem");
  } catch (const ConfigError& e) {
    // Too many workers for this machine: an error about cluster.workers, its
    // parts as data (bitlab.ConfigError's field, value, rule).
    throw FieldError(e.what(), "cluster.workers", std::to_string(workers_), e.what());
  }
  params_.assign(dim_, 0.0f);
  problem_.init_params(params(), seed);
  if (stream_) {
    stream_->allocate(stride_, dim_);
  } else {
    grads_.assign(stride_ * static_cast<size_t>(local_.size()), 0.0f);
  }
  losses_.assign(workers_, 0.0);
  auto shards = make_shards(problem, opts, seed);
  samplers_.reserve(workers_);
  batches_.resize(workers_);
  batch_samples_.resize(workers_);
  for (int i = 0; i < workers_; ++i) {
    // Only the local workers keep their shard's indices.
    const bool mine = i >= local_.begin && i < local_.end;
    batch_samples_[i] =
        opts.batch_size.full ? shards[i].size() : static_cast<size_t>(opts.batch_size.samples);
    samplers_.emplace_back(mine ? std::move(shards[i]) : std::vector<uint32_t>{}, opts.batch_size,
                           seed, static_cast<uint32_t>(i));
    shards[i] = {};
    batches_[i].reserve(samplers_[i].batch_samples());
    if (!stream_) workspaces_.push_back(mine ? problem.make_workspace() : nullptr);
  }
  if (stream_) {
    for (int t = 0; t < stream_->threads; ++t) workspaces_.push_back(problem.make_workspace());
  }
}

void Cluster::enable_local_params() {
  if (has_local_params()) return;
  local_params_.assign(stride_ * static_cast<size_t>(local_.size()), 0.0f);
  for (int i = local_.begin; i < local_.end; ++i)
    std::copy(params_.begin(), params_.end(), params(i).begin());
}

std::span<float> Cluster::params(int worker) {
  if (local_params_.empty()) return params();
  return {local_params_.data() + stride_ * static_cast<size_t>(worker - local_.begin), dim_};
}

WorkerBuffers Cluster::local_params() {
  if (local_params_.empty()) return {params_.data(), 0, dim_, workers_};  // all alias the shared
  return {local_params_.data(), stride_, dim_, workers_, local_.begin, local_.size()};
}

void Cluster::fill_gradient(int worker, int64_t step, std::span<float> g, Workspace& ws) {
  // Each worker writes only its own gradient, loss and batch, and draws noise
  // from its own (seed, worker, step) stream.
  samplers_[worker].sample(step, batches_[worker]);
  const RngStream noise(seed_, Purpose::kGradNoise, static_cast<uint32_t>(worker),
                        static_cast<uint64_t>(step));
  // Through loss_grad_workers (one worker), which carries the worker's index:
  // the bits are loss_grad's (Problem's contract).
  WorkerBatch job{batches_[worker], g, &noise, 0.0, worker};
  problem_.loss_grad_workers(params(worker), {&job, 1}, ws);
  losses_[worker] = job.loss;
}

void Cluster::fill_gradients(int lo, int hi, int64_t step, float* rows, Workspace& ws) {
  if (has_local_params() || hi - lo == 1) {
    for (int i = lo; i < hi; ++i) {
      fill_gradient(i, step, {rows + static_cast<size_t>(i - lo) * stride_, dim_}, ws);
    }
    return;
  }
  // Every worker in the group reads the shared parameters: one batched pass.
  std::array<std::optional<RngStream>, kGroupWorkers> noise;
  std::array<WorkerBatch, kGroupWorkers> jobs;
  for (int i = lo; i < hi; ++i) {
    const size_t k = static_cast<size_t>(i - lo);
    samplers_[i].sample(step, batches_[i]);
    noise[k].emplace(seed_, Purpose::kGradNoise, static_cast<uint32_t>(i),
                     static_cast<uint64_t>(step));
    jobs[k] = {batches_[i], {rows + k * stride_, dim_}, &*noise[k], 0.0, i};
  }
  problem_.loss_grad_workers(params(), {jobs.data(), static_cast<size_t>(hi - lo)}, ws);
  for (int i = lo; i < hi; ++i) losses_[i] = jobs[static_cast<size_t>(i - lo)].loss;
}

int Cluster::group_size(int count, int threads, size_t batch_samples, size_t pass_samples) {
  const int per_thread = (count + std::max(1, threads) - 1) / std::max(1, threads);
  const size_t wanted = (pass_samples + std::max<size_t>(1, batch_samples) - 1) /
                        std::max<size_t>(1, batch_samples);
  const int cap = static_cast<int>(std::min<size_t>(wanted, kGroupWorkers));
  return std::clamp(std::min(per_thread, cap), 1, kGroupWorkers);
}

int Cluster::group_size(int count, int threads) const {
  return group_size(count, threads, batch_samples_[static_cast<size_t>(local_.begin)],
                    problem_.pass_samples());
}

void Cluster::compute_gradients(int64_t step) {
  if (stream_) throw_streamed("compute_gradients()");
  const int group = group_size(local_.size(), omp_get_max_threads());
  const int groups = (local_.size() + group - 1) / group;
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < groups; ++k) {
    const int lo = local_.begin + k * group, hi = std::min(local_.end, lo + group);
    fill_gradients(lo, hi, step, grad(lo).data(), *workspaces_[lo]);
  }
}

void Cluster::hand_to_taker(int lo, int hi, const float* rows) {
  if (!stream_->take) return;
  for (int i = lo; i < hi; ++i) {
    (*stream_->take)(i, {rows + static_cast<size_t>(i - lo) * stride_, dim_});
  }
}

// The tree's node over workers [lo, hi) into outs[t] for each folded tree
// (Stream, above); `level` is the first of this thread's free partial sums.
void Cluster::fold_subtree(int lo, int hi, int level, int thread, float* const* outs,
                           int64_t step) {
  Stream& st = *stream_;
  if (hi - lo <= st.block_rows) {
    float* block = st.blocks.data() + static_cast<size_t>(thread) * st.block_rows * stride_;
    fill_gradients(lo, hi, step, block, *workspaces_[thread]);
    hand_to_taker(lo, hi, block);
    for (int t = 0; t < st.folded; ++t) {
      sum_over_workers({block, stride_, dim_, hi - lo}, {outs[t], dim_},
                       st.trees[st.first + t].wire);
    }
    return;
  }
  const int mid = lo + (hi - lo) / 2;
  fold_subtree(lo, mid, level, thread, outs, step);
  float* rights[2] = {};
  for (int t = 0; t < st.folded; ++t) {
    rights[t] = st.trees[st.first + t].partial.data() +
                (static_cast<size_t>(thread) * st.levels + level) * stride_;
  }
  fold_subtree(mid, hi, level + 1, thread, rights, step);
  for (int t = 0; t < st.folded; ++t) {
    float* __restrict o = outs[t];
    const float* __restrict r = rights[t];
#pragma omp simd
    for (size_t k = 0; k < dim_; ++k) o[k] += r[k];
  }
}

void Cluster::compute_gradient_mean(int64_t step, bool with_fp32, const TakeGradient* take) {
  if (!stream_ || stream_->handed) {
    throw std::logic_error("Cluster::compute_gradient_mean: not a streamed cluster that computes");
  }
  Stream& st = *stream_;
  st.take = take;
  st.choose_trees(take == nullptr, with_fp32);
  if (st.rows_fit) {
    // Every row fits in the threads' blocks at once (up to 32 workers on 2
    // threads): the rows path itself, workers in parallel, then the tree
    // summed chunk by chunk in parallel.
    const WorkerBuffers rows{st.blocks.data(), stride_, dim_, workers_};
    const int group = group_size(workers_, st.threads);
    const int groups = (workers_ + group - 1) / group;
#pragma omp parallel for schedule(dynamic, 1) num_threads(st.threads)
    for (int k = 0; k < groups; ++k) {
      const int lo = k * group, hi = std::min(workers_, lo + group);
      fill_gradients(lo, hi, step, rows[lo].data(), *workspaces_[omp_get_thread_num()]);
      hand_to_taker(lo, hi, rows[lo].data());
    }
    for (int t = 0; t < st.folded; ++t) {
      mean_over_workers(rows, st.trees[st.first + t].mean, st.trees[st.first + t].wire);
    }
    return;
  }
  const int frontier = static_cast<int>(st.frontier.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(st.threads)
  for (int f = 0; f < frontier; ++f) {
    float* outs[2] = {};
    for (int t = 0; t < st.folded; ++t) {
      outs[t] = st.trees[st.first + t].nodes.data() + static_cast<size_t>(f) * stride_;
    }
    fold_subtree(st.frontier[f].first, st.frontier[f].second, 0, omp_get_thread_num(), outs, step);
  }
  for (int t = 0; t < st.folded; ++t) {
    Stream::Tree& tree = st.trees[st.first + t];
    if (st.comm != nullptr) {
      // This rank's maxima, each combined up from its frontier nodes, then
      // the tree above them across the ranks.
      for (int m = 0; m < st.mine_hi - st.mine_lo; ++m) {
        const auto& [lo, hi, owner] = st.maxima[static_cast<size_t>(st.mine_lo + m)];
        size_t next = st.maxima_frontier[static_cast<size_t>(m)];
        st.values[static_cast<size_t>(m)] = st.combine(tree.nodes.data(), stride_, dim_, lo, hi, 0, next);
      }
      st.combine_across(dim_, workers_, tree.mean, tree.wire);
      continue;
    }
    if (frontier == 1) {
      finish_mean({tree.nodes.data(), dim_}, {}, workers_, tree.mean, tree.wire);
      continue;
    }
    // The root's halves, then the root: (left + right) / n in the wire.
    const int mid = workers_ / 2;
    size_t next = 0;
    float* left = st.combine(tree.nodes.data(), stride_, dim_, 0, mid, 1, next);
    float* right = st.combine(tree.nodes.data(), stride_, dim_, mid, workers_, 1, next);
    finish_mean({left, dim_}, {right, dim_}, workers_, tree.mean, tree.wire);
  }
}

bool Cluster::takes_handed_gradients() const { return stream_ && stream_->handed; }

void Cluster::begin_taking(bool mean, bool with_fp32) {
  if (!takes_handed_gradients()) {
    throw std::logic_error("Cluster::begin_taking: not a cluster of handed-in gradients");
  }
  Stream& st = *stream_;
  st.choose_trees(mean, with_fp32);
  for (WorkerTreeIntake& in : st.intakes) in.begin();
}

bool Cluster::take_into_mean(int worker, std::span<const RowPiece> pieces) {
  Stream& st = *stream_;
  bool finite = true;
  for (int t = st.first; t < st.first + st.folded; ++t) {
    finite &= st.intake_of(t, worker).take(worker, pieces);
  }
  return finite;
}

void Cluster::finish_taken_mean() {
  Stream& st = *stream_;
  for (int t = st.first; t < st.first + st.folded; ++t) {
    Stream::Tree& tree = st.trees[static_cast<size_t>(t)];
    if (st.comm == nullptr) {
      st.intakes[static_cast<size_t>(t)].finish(tree.mean);
      continue;
    }
    // This rank's maxima, then the tree above them across the ranks (as
    // compute_gradient_mean does with the maxima it folds).
    const int mine = st.mine_hi - st.mine_lo;
    for (int m = 0; m < mine; ++m) {
      const std::span<const float> root = st.intakes[static_cast<size_t>(t * mine + m)].root();
      st.values[static_cast<size_t>(m)] = const_cast<float*>(root.data());
    }
    st.combine_across(dim_, workers_, tree.mean, tree.wire);
  }
}

std::span<const float> Cluster::streamed_mean(WireDtype wire) const {
  if (!stream_) throw std::logic_error("Cluster::streamed_mean: not a streamed cluster");
  for (int t = stream_->first; t < stream_->first + stream_->folded; ++t) {
    if (stream_->trees[t].wire == wire) return stream_->trees[t].mean;
  }
  throw std::logic_error(std::string("Cluster::streamed_mean: no ") + wire_dtype_name(wire) +
                         " mean was folded this step");
}

size_t Cluster::worker_buffer_bytes() const {
  const size_t rows = grads_.size() + local_params_.size();
  return (stream_ ? rows + stream_->floats(stride_, dim_) : rows) * sizeof(float);
}

uint64_t Cluster::memory_estimate() const {
  const uint64_t own = memory_lower_bound();
  return own > UINT64_MAX - optimizer_bytes_ ? UINT64_MAX : own + optimizer_bytes_;
}

uint64_t Cluster::memory_lower_bound() const {
  // The buffers every run holds whatever the optimizer: a gradient row per
  // local worker (padded to `stride_`), or the streamed mean's blocks and
  // partial sums, and the shared parameters. Per-worker parameters (local
  // steps) and the optimizer's state come on top.
  const uint64_t rows = stream_ ? saturating_mul(stream_->floats(stride_, dim_), 4)
                                : saturating_mul(static_cast<uint64_t>(local_.size()), stride_, 4);
  const uint64_t params = saturating_mul(dim_, 4);
  return rows > UINT64_MAX - params ? UINT64_MAX : rows + params;
}

void Cluster::serialize(StateArchive& io) {
  io.field("cluster.params", params_);
  io.field("cluster.local_params", local_params_);
}

}  // namespace bitlab
