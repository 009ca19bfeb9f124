#include "sim/kernels/conv.hpp"

#include <stdexcept>
#include <string>

namespace bitlab {

namespace isa_kernels {
// sim/kernels/conv_{sse2,avx2,avx512}.cpp: one source, three instruction sets.
using Im2col = void(const ConvShape&, const float*, float*);
using Col2im = void(const ConvShape&, const float*, float*);
using Im2colT = void(size_t, size_t, size_t, const float*, float*);
Im2col conv_sse2_im2col, conv_avx2_im2col, conv_avx512_im2col;
Col2im conv_sse2_col2im, conv_avx2_col2im, conv_avx512_col2im;
Im2colT conv_sse2_im2col_t, conv_avx2_im2col_t, conv_avx512_im2col_t;
using Pool = void(const float*, size_t, size_t, float*);
using Unpool = void(const float*, size_t, size_t, const float*, float*);
using BiasRelu = void(float*, size_t, float);
Pool conv_sse2_max_pool_plane, conv_avx2_max_pool_plane, conv_avx512_max_pool_plane;
Unpool conv_sse2_unpool_relu_plane, conv_avx2_unpool_relu_plane, conv_avx512_unpool_relu_plane;
BiasRelu conv_sse2_bias_relu, conv_avx2_bias_relu, conv_avx512_bias_relu;
using PoolNhwc = void(const float*, size_t, size_t, size_t, float*);
using UnpoolNhwc = void(const float*, size_t, size_t, size_t, const float*, float*);
using BiasReluRows = void(float*, size_t, size_t, const float*);
PoolNhwc conv_sse2_max_pool_nhwc, conv_avx2_max_pool_nhwc, conv_avx512_max_pool_nhwc;
UnpoolNhwc conv_sse2_unpool_relu_nhwc, conv_avx2_unpool_relu_nhwc, conv_avx512_unpool_relu_nhwc;
BiasReluRows conv_sse2_bias_relu_rows, conv_avx2_bias_relu_rows, conv_avx512_bias_relu_rows;
}  // namespace isa_kernels

namespace {
using namespace isa_kernels;

struct ConvKernels {
  Im2col* im2col;
  Col2im* col2im;
  Im2colT* im2col_t;
  Pool* max_pool_plane;
  Unpool* unpool_relu_plane;
  BiasRelu* bias_relu;
  PoolNhwc* max_pool_nhwc;
  UnpoolNhwc* unpool_relu_nhwc;
  BiasReluRows* bias_relu_rows;
};

ConvKernels kernels_for(Isa isa) {
  return for_isa<ConvKernels>(
      isa,
      {conv_sse2_im2col, conv_sse2_col2im, conv_sse2_im2col_t, conv_sse2_max_pool_plane,
       conv_sse2_unpool_relu_plane, conv_sse2_bias_relu, conv_sse2_max_pool_nhwc,
       conv_sse2_unpool_relu_nhwc, conv_sse2_bias_relu_rows},
      {conv_avx2_im2col, conv_avx2_col2im, conv_avx2_im2col_t, conv_avx2_max_pool_plane,
       conv_avx2_unpool_relu_plane, conv_avx2_bias_relu, conv_avx2_max_pool_nhwc,
       conv_avx2_unpool_relu_nhwc, conv_avx2_bias_relu_rows},
      {conv_avx512_im2col, conv_avx512_col2im, conv_avx512_im2col_t, conv_avx512_max_pool_plane,
       conv_avx512_unpool_relu_plane, conv_avx512_bias_relu, conv_avx512_max_pool_nhwc,
       conv_avx512_unpool_relu_nhwc, conv_avx512_bias_relu_rows});
}

const ConvKernels& active_conv() {
  static const ConvKernels k = kernels_for(active_isa());
  return k;
}

ConvKernels checked(Isa isa, const char* what) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string(what) + ": instruction set " + isa_name(isa) +
                                " is not supported by this CPU");
  return kernels_for(isa);
}
}  // namespace

void im2col(const ConvShape& s, const float* in, float* cols) { active_conv().im2col(s, in, cols); }
void col2im(const ConvShape& s, const float* cols, float* in) { active_conv().col2im(s, cols, in); }
void im2col_t(size_t h, size_t w, size_t k, const float* in, float* cols_t) {
  active_conv().im2col_t(h, w, k, in, cols_t);
}

void max_pool_plane(const float* t, size_t h, size_t w, float* out) {
  active_conv().max_pool_plane(t, h, w, out);
}
void unpool_relu_plane(const float* t, size_t h, size_t w, const float* dpooled, float* dt) {
  active_conv().unpool_relu_plane(t, h, w, dpooled, dt);
}
void bias_relu(float* v, size_t n, float bias) { active_conv().bias_relu(v, n, bias); }
void max_pool_nhwc(const float* t, size_t h, size_t w, size_t c, float* out) {
  active_conv().max_pool_nhwc(t, h, w, c, out);
}
void unpool_relu_nhwc(const float* t, size_t h, size_t w, size_t c, const float* dpooled,
                      float* dt) {
  active_conv().unpool_relu_nhwc(t, h, w, c, dpooled, dt);
}
void bias_relu_rows(float* v, size_t rows, size_t cols, const float* bias) {
  active_conv().bias_relu_rows(v, rows, cols, bias);
}

void im2col_isa(Isa isa, const ConvShape& s, const float* in, float* cols) {
  checked(isa, "im2col_isa").im2col(s, in, cols);
}
void col2im_isa(Isa isa, const ConvShape& s, const float* cols, float* in) {
  checked(isa, "col2im_isa").col2im(s, cols, in);
}
void im2col_t_isa(Isa isa, size_t h, size_t w, size_t k, const float* in, float* cols_t) {
  checked(isa, "im2col_t_isa").im2col_t(h, w, k, in, cols_t);
}

void max_pool_plane_isa(Isa isa, const float* t, size_t h, size_t w, float* out) {
  checked(isa, "max_pool_plane_isa").max_pool_plane(t, h, w, out);
}
void unpool_relu_plane_isa(Isa isa, const float* t, size_t h, size_t w, const float* dpooled,
                           float* dt) {
  checked(isa, "unpool_relu_plane_isa").unpool_relu_plane(t, h, w, dpooled, dt);
}
void bias_relu_isa(Isa isa, float* v, size_t n, float bias) {
  checked(isa, "bias_relu_isa").bias_relu(v, n, bias);
}
void max_pool_nhwc_isa(Isa isa, const float* t, size_t h, size_t w, size_t c, float* out) {
  checked(isa, "max_pool_nhwc_isa").max_pool_nhwc(t, h, w, c, out);
}
void unpool_relu_nhwc_isa(Isa isa, const float* t, size_t h, size_t w, size_t c,
                          const float* dpooled, float* dt) {
  checked(isa, "unpool_relu_nhwc_isa").unpool_relu_nhwc(t, h, w, c, dpooled, dt);
}
void bias_relu_rows_isa(Isa isa, float* v, size_t rows, size_t cols, const float* bias) {
  checked(isa, "bias_relu_rows_isa").bias_relu_rows(v, rows, cols, bias);
}

}  // namespace bitlab
