// The convolution's data movement (problems/cnn.cpp): im2col, its transpose
// and its adjoint col2im, for 5×5-style k × k kernels, stride 1, no padding,
// on NHWC samples. Dispatched like matmul (conv_kernels.inc compiled for SSE2,
// AVX2 and AVX-512, picked by active_isa()), because these loops are most of
// the CNN's time outside its products and a 40-float run is 10 SSE2 vectors
// but 5 AVX2 ones (the AVX-512 variant moves 8 floats too: conv_avx512.cpp).
// im2col only copies; col2im adds, and its bits matter: every input element
// is the sum, from +0, of its column entries in the order
// of the column rows (s, y, x) and, within a row, ky — the same in every
// variant (one rounded addition per term, lanes never mix); the `matmul`
// suite checks each variant against a scalar loop bit for bit.
#pragma once

#include <cstddef>

#include "sim/core/isa.hpp"

namespace bitlab {

// The shape of an im2col: n samples of h × w × c floats (NHWC, contiguous),
// a k × k kernel; each of the n·(h−k+1)·(w−k+1) column rows is ld ≥ k·k·c
// floats long, column (ky·k + kx)·c + ch of row (s, y, x) holding input
// (s, y + ky, x + kx, ch).
struct ConvShape {
  size_t n, h, w, c, k, ld;
};

// cols ← im2col(in); the columns past k·k·c are not written, except that with
// one channel, k < 8 and ld ≥ k·k + 8 − k the 8 − k columns right after k·k
// may receive input values (the last run moved as 8 floats).
void im2col(const ConvShape& s, const float* in, float* cols);
// in ← col2im(cols): zeros, then every column entry added onto its input
// element, rows in order.
void col2im(const ConvShape& s, const float* cols, float* in);
// One single-channel h × w sample's transposed column matrix (k·k rows of
// (h−k+1)·(w−k+1) floats): row ky·k + kx holds input (y + ky, x + kx) for
// every output pixel (y, x), raster order.
void im2col_t(size_t h, size_t w, size_t k, const float* in, float* cols_t);

// One h × w NCHW plane's 2×2 max pooling, stride 2, into (h/2) × (w/2): each
// window's first maximum in (dy, dx) order (a later element must be strictly
// greater). Selects only: every variant gives the same bits.
void max_pool_plane(const float* t, size_t h, size_t w, float* out);
// Its gradient through the relu: dt (h × w, every element written) holds, at
// each window's maximum found again from the relu output t, (0 + dpooled)
// times [t > 0], and 0·[t > 0] elsewhere.
void unpool_relu_plane(const float* t, size_t h, size_t w, const float* dpooled, float* dt);
// The same for an NHWC sample (h × w pixels of c channels): pooled pixel
// (y, x) channel ch from pixels (2y + dy, 2x + dx).
void max_pool_nhwc(const float* t, size_t h, size_t w, size_t c, float* out);
void unpool_relu_nhwc(const float* t, size_t h, size_t w, size_t c, const float* dpooled,
                      float* dt);
// v ← relu(v + bias): one rounded addition and a select per element; for
// rows of `cols` channels, bias[ch] for channel ch.
void bias_relu(float* v, size_t n, float bias);
void bias_relu_rows(float* v, size_t rows, size_t cols, const float* bias);

// The same with a forced variant (tests; std::invalid_argument when this CPU
// lacks it).
void im2col_isa(Isa isa, const ConvShape& s, const float* in, float* cols);
void col2im_isa(Isa isa, const ConvShape& s, const float* cols, float* in);
void im2col_t_isa(Isa isa, size_t h, size_t w, size_t k, const float* in, float* cols_t);
void max_pool_plane_isa(Isa isa, const float* t, size_t h, size_t w, float* out);
void unpool_relu_plane_isa(Isa isa, const float* t, size_t h, size_t w, const float* dpooled,
                           float* dt);
void bias_relu_isa(Isa isa, float* v, size_t n, float bias);
void max_pool_nhwc_isa(Isa isa, const float* t, size_t h, size_t w, size_t c, float* out);
void unpool_relu_nhwc_isa(Isa isa, const float* t, size_t h, size_t w, size_t c,
                          const float* dpooled, float* dt);
void bias_relu_rows_isa(Isa isa, float* v, size_t rows, size_t cols, const float* bias);

}  // namespace bitlab
