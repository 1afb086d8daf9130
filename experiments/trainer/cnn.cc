#include "experiments/trainer/cnn.h"

#include <algorithm>
#include <array>
#include <cassert>

#include "experiments/trainer/eigen_views.h"

namespace gossip::trainer {
namespace {

using namespace eigen_views;

constexpr size_t kSide = Cnn::kSide, kK = Cnn::kKernel, kPad = kK / 2;
constexpr size_t kSide2 = kSide / 2;

constexpr std::array<TensorShape, Cnn::kNumTensors> kCnnLayout = {{
    {"conv1.weight", Cnn::kChannels1, kK* kK * 1},
    {"conv1.bias", Cnn::kChannels1, 1},
    {"conv2.weight", Cnn::kChannels2, kK* kK* Cnn::kChannels1},
    {"conv2.bias", Cnn::kChannels2, 1},
    {"fc1.weight", Cnn::kHidden, Cnn::kFlat},
    {"fc1.bias", Cnn::kHidden, 1},
    {"fc2.weight", Cnn::kOutputs, Cnn::kHidden},
    {"fc2.bias", Cnn::kOutputs, 1},
}};

// Rows of `cols` ([batch * side * side, kK * kK * channels]) are the zero-padded
// kK x kK patches of an NHWC input, kernel position outer, channel inner.
void im2col(const float* in, size_t batch, size_t side, size_t channels, float* cols) {
  const size_t width = kK * kK * channels;
  for (size_t b = 0; b < batch; ++b)
    for (size_t y = 0; y < side; ++y)
      for (size_t x = 0; x < side; ++x) {
        float* row = cols + ((b * side + y) * side + x) * width;
        for (size_t ky = 0; ky < kK; ++ky)
          for (size_t kx = 0; kx < kK; ++kx) {
            float* dst = row + (ky * kK + kx) * channels;
            const size_t iy = y + ky, jx = x + kx;  // in padded coordinates
            if (iy < kPad || jx < kPad || iy - kPad >= side || jx - kPad >= side) {
              std::fill(dst, dst + channels, 0.0f);
            } else {
              const float* src = in + ((b * side + iy - kPad) * side + jx - kPad) * channels;
              std::copy(src, src + channels, dst);
            }
          }
      }
}

// The adjoint of im2col: every patch entry's gradient added back to its input.
void col2im(const float* cols, size_t batch, size_t side, size_t channels, float* in) {
  const size_t width = kK * kK * channels;
  std::fill(in, in + batch * side * side * channels, 0.0f);
  for (size_t b = 0; b < batch; ++b)
    for (size_t y = 0; y < side; ++y)
      for (size_t x = 0; x < side; ++x) {
        const float* row = cols + ((b * side + y) * side + x) * width;
        for (size_t ky = 0; ky < kK; ++ky)
          for (size_t kx = 0; kx < kK; ++kx) {
            const size_t iy = y + ky, jx = x + kx;
            if (iy < kPad || jx < kPad || iy - kPad >= side || jx - kPad >= side) continue;
            const float* src = row + (ky * kK + kx) * channels;
            float* dst = in + ((b * side + iy - kPad) * side + jx - kPad) * channels;
            for (size_t c = 0; c < channels; ++c) dst[c] += src[c];
          }
      }
}

// 2x2 max-pool, stride 2, of an NHWC map; argmax holds each output's input index.
void max_pool(const float* in, size_t batch, size_t side, size_t channels, float* out,
              uint32_t* argmax) {
  const size_t half = side / 2;
  for (size_t b = 0; b < batch; ++b)
    for (size_t y = 0; y < half; ++y)
      for (size_t x = 0; x < half; ++x)
        for (size_t c = 0; c < channels; ++c) {
          size_t best = ((b * side + 2 * y) * side + 2 * x) * channels + c;
          for (size_t dy = 0; dy < 2; ++dy)
            for (size_t dx = 0; dx < 2; ++dx) {
              const size_t i = ((b * side + 2 * y + dy) * side + 2 * x + dx) * channels + c;
              if (in[i] > in[best]) best = i;
            }
          const size_t o = ((b * half + y) * half + x) * channels + c;
          out[o] = in[best];
          argmax[o] = static_cast<uint32_t>(best);
        }
}

}  // namespace

std::span<const TensorShape, Cnn::kNumTensors> Cnn::layout() { return kCnnLayout; }

size_t Cnn::num_parameters() { return layout_numel(kCnnLayout); }

Result<Cnn> Cnn::create(std::vector<std::span<float>> parameters) {
  GOSSIP_RETURN_IF_ERROR(check_layout("CNN", kCnnLayout, parameters));
  return Cnn(std::move(parameters));
}

Cnn::Cnn(std::vector<std::span<float>> parameters)
    : parameters_(std::move(parameters)), gradients_(num_parameters(), 0.0f) {}

void Cnn::init(uint64_t seed) { he_init(kCnnLayout, parameters_, seed); }

std::vector<std::span<float>> Cnn::gradients() {
  return tensor_views(kCnnLayout, gradients_.data());
}

void Cnn::forward(const float* inputs, size_t batch) {
  const size_t pixels1 = batch * kSide * kSide, pixels2 = batch * kSide2 * kSide2;
  cols1_.resize(pixels1 * kK * kK);
  conv1_.resize(pixels1 * kChannels1);
  pool1_.resize(pixels2 * kChannels1);
  argmax1_.resize(pool1_.size());
  cols2_.resize(pixels2 * kK * kK * kChannels1);
  conv2_.resize(pixels2 * kChannels2);
  pool2_.resize(batch * kFlat);
  argmax2_.resize(pool2_.size());
  hidden_.resize(batch * kHidden);
  logits_.resize(batch * kOutputs);

  im2col(inputs, batch, kSide, 1, cols1_.data());
  MapR a1(conv1_.data(), ix(pixels1), ix(kChannels1));
  a1.noalias() = ConstMapR(cols1_.data(), ix(pixels1), ix(kK * kK)) *
                 weight(parameters_[0], kCnnLayout[0]).transpose();
  a1.rowwise() += bias(parameters_[1]);
  a1 = a1.cwiseMax(0.0f);
  max_pool(conv1_.data(), batch, kSide, kChannels1, pool1_.data(), argmax1_.data());

  im2col(pool1_.data(), batch, kSide2, kChannels1, cols2_.data());
  MapR a2(conv2_.data(), ix(pixels2), ix(kChannels2));
  a2.noalias() = ConstMapR(cols2_.data(), ix(pixels2), ix(kK * kK * kChannels1)) *
                 weight(parameters_[2], kCnnLayout[2]).transpose();
  a2.rowwise() += bias(parameters_[3]);
  a2 = a2.cwiseMax(0.0f);
  max_pool(conv2_.data(), batch, kSide2, kChannels2, pool2_.data(), argmax2_.data());

  MapR h(hidden_.data(), ix(batch), ix(kHidden));
  h.noalias() = ConstMapR(pool2_.data(), ix(batch), ix(kFlat)) *
                weight(parameters_[4], kCnnLayout[4]).transpose();
  h.rowwise() += bias(parameters_[5]);
  h = h.cwiseMax(0.0f);
  MapR logits(logits_.data(), ix(batch), ix(kOutputs));
  logits.noalias() = h * weight(parameters_[6], kCnnLayout[6]).transpose();
  logits.rowwise() += bias(parameters_[7]);
}

float Cnn::forward_backward(std::span<const float> inputs, std::span<const uint8_t> labels) {
  const size_t batch = labels.size();
  assert(batch > 0 && inputs.size() == batch * kImagePixels);
  forward(inputs.data(), batch);
  const float loss = softmax_backward(logits_, labels, kOutputs);  // logits_ <- dL/dlogits
  const size_t pixels1 = batch * kSide * kSide, pixels2 = batch * kSide2 * kSide2;
  auto grads = gradients();
  const auto b = ix(batch);

  ConstMapR g(logits_.data(), b, ix(kOutputs));
  ConstMapR h(hidden_.data(), b, ix(kHidden));
  MapR(grads[6].data(), ix(kOutputs), ix(kHidden)).noalias() = g.transpose() * h;
  RowMap(grads[7].data(), ix(kOutputs)) = g.colwise().sum();
  d_hidden_.resize(batch * kHidden);
  MapR dh(d_hidden_.data(), b, ix(kHidden));
  dh.noalias() = g * weight(parameters_[6], kCnnLayout[6]);
  dh = (h.array() > 0.0f).select(dh, 0.0f);  // ReLU passes where the activation was positive

  ConstMapR p2(pool2_.data(), b, ix(kFlat));
  MapR(grads[4].data(), ix(kHidden), ix(kFlat)).noalias() = dh.transpose() * p2;
  RowMap(grads[5].data(), ix(kHidden)) = dh.colwise().sum();
  d_pool2_.resize(batch * kFlat);
  MapR(d_pool2_.data(), b, ix(kFlat)).noalias() = dh * weight(parameters_[4], kCnnLayout[4]);

  // Max-pool: each pooled gradient goes to the input it came from; ReLU as above.
  d_conv2_.assign(pixels2 * kChannels2, 0.0f);
  for (size_t o = 0; o < d_pool2_.size(); ++o) d_conv2_[argmax2_[o]] += d_pool2_[o];
  for (size_t i = 0; i < d_conv2_.size(); ++i)
    if (conv2_[i] <= 0.0f) d_conv2_[i] = 0.0f;
  ConstMapR da2(d_conv2_.data(), ix(pixels2), ix(kChannels2));
  ConstMapR cols2(cols2_.data(), ix(pixels2), ix(kK * kK * kChannels1));
  MapR(grads[2].data(), ix(kChannels2), ix(kK * kK * kChannels1)).noalias() =
      da2.transpose() * cols2;
  RowMap(grads[3].data(), ix(kChannels2)) = da2.colwise().sum();
  d_cols2_.resize(cols2_.size());
  MapR(d_cols2_.data(), ix(pixels2), ix(kK * kK * kChannels1)).noalias() =
      da2 * weight(parameters_[2], kCnnLayout[2]);
  d_pool1_.resize(pool1_.size());
  col2im(d_cols2_.data(), batch, kSide2, kChannels1, d_pool1_.data());

  d_conv1_.assign(pixels1 * kChannels1, 0.0f);
  for (size_t o = 0; o < d_pool1_.size(); ++o) d_conv1_[argmax1_[o]] += d_pool1_[o];
  for (size_t i = 0; i < d_conv1_.size(); ++i)
    if (conv1_[i] <= 0.0f) d_conv1_[i] = 0.0f;
  ConstMapR da1(d_conv1_.data(), ix(pixels1), ix(kChannels1));
  ConstMapR cols1(cols1_.data(), ix(pixels1), ix(kK * kK));
  MapR(grads[0].data(), ix(kChannels1), ix(kK * kK)).noalias() = da1.transpose() * cols1;
  RowMap(grads[1].data(), ix(kChannels1)) = da1.colwise().sum();
  return loss;
}

Cnn::Score Cnn::score(std::span<const float> inputs, std::span<const uint8_t> labels) {
  assert(inputs.size() == labels.size() * kImagePixels);
  Score total;
  for (size_t begin = 0; begin < labels.size(); begin += kScoreBatch) {
    const size_t n = std::min(kScoreBatch, labels.size() - begin);
    forward(inputs.data() + begin * kImagePixels, n);
    const Score s = score_logits(logits_, labels.subspan(begin, n), kOutputs);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
  }
  return total;
}

}  // namespace gossip::trainer
