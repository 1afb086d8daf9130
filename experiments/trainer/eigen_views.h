#pragma once
// Row-major Eigen views of the parameter spans the models (mlp.cc, cnn.cc) compute on:
// a weight is a [rows, cols] matrix of its layout entry, a bias a row vector.

#include <Eigen/Core>
#include <span>

#include "experiments/trainer/model.h"

namespace gossip::trainer::eigen_views {

using MatrixR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapR = Eigen::Map<MatrixR>;
using ConstMapR = Eigen::Map<const MatrixR>;
using RowMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowMap = Eigen::Map<const Eigen::RowVectorXf>;

inline Eigen::Index ix(size_t n) { return static_cast<Eigen::Index>(n); }

inline ConstMapR weight(const std::span<float>& t, const TensorShape& shape) {
  return ConstMapR(t.data(), ix(shape.rows), ix(shape.cols));
}

inline ConstRowMap bias(const std::span<float>& t) { return ConstRowMap(t.data(), ix(t.size())); }

}  // namespace gossip::trainer::eigen_views
