// Error bounds derived from the arithmetic: a reference computed in double beside a bound on how far any
// float32 evaluation of the same formula can land from it.
//
// An Fb holds v, the exact value of a formula on float inputs, and e, a bound on |computed - v| for a
// float32 evaluation. The rules are the standard forward error analysis (Higham, Accuracy and Stability
// of Numerical Algorithms, ch. 2-4; u = 2^-24, the unit roundoff of float32):
//   inputs             exact (e = 0): the test's floats, and constants written as floats (0.35f, not 0.35)
//   a + b, a - b       e_a + e_b, plus one rounding of the result: u (|a| + |b| + e_a + e_b)
//   a * b              |a| e_b + |b| e_a + e_a e_b, plus one rounding
//   a / b              (e_a + |a/b| e_b) / (|b| - e_b), plus one rounding (needs e_b < |b|)
//   sum, dot of n      the terms' errors, plus n u times the sum of the terms' magnitudes: a bound for
//                      every summation order, blocked, tree or SIMD, with or without fused multiply-adds
//   max                the largest error of the arguments (max of computed values is exact)
//   exp, tanh, sqrt    the argument's error carried through the function's slope over [v - e, v + e],
//                      plus kLibmUlps ulps for the library function itself (glibc's expf, tanhf, sqrtf
//                      are within 1 ulp; 2 leaves room for other C libraries; an ulp of x is at most
//                      2^-23 |x|)
//   vk::               the same for GPU shaders, with Vulkan's required precision of each instruction
//                      instead of the C library's (see below)
// A test then checks |got - v| <= e. A kernel that computes another formula of the same function (x / s
// against x * (1 / s)) differs by a rounding or two of the result: write the reference in the kernel's
// formula, as the tests here do.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace zinc::test {

inline constexpr double kU = 0x1p-24;
inline constexpr double kLibmUlps = 2;

struct Fb {
  double v = 0;  // the exact value of the formula on the float inputs
  double e = 0;  // bound on the distance of a float32 evaluation from v
  Fb() = default;
  Fb(double value) : v(value) {}  // NOLINT: an exact input converts implicitly
  Fb(double value, double err) : v(value), e(err) {}
  double mag() const { return std::fabs(v) + e; }  // bound on the magnitude of the computed value
};

// One float rounding of a result: relative u of its computed magnitude.
inline Fb rounded(double v, double e) { return {v, e + kU * (std::fabs(v) + e)}; }

inline Fb operator+(const Fb& a, const Fb& b) { return {a.v + b.v, a.e + b.e + kU * (a.mag() + b.mag())}; }
inline Fb operator-(const Fb& a, const Fb& b) { return {a.v - b.v, a.e + b.e + kU * (a.mag() + b.mag())}; }
inline Fb operator-(const Fb& a) { return {-a.v, a.e}; }
inline Fb operator*(const Fb& a, const Fb& b) {
  return rounded(a.v * b.v, std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e);
}
inline Fb operator/(const Fb& a, const Fb& b) {
  const double q = a.v / b.v;
  const double room = std::fabs(b.v) - b.e;
  return rounded(q, room > 0 ? (a.e + std::fabs(q) * b.e) / room : INFINITY);
}
inline Fb& operator+=(Fb& a, const Fb& b) { return a = a + b; }

// Sum of n terms in any order: each partial sum is at most the sum of the magnitudes, and each of the
// n - 1 additions rounds once (Higham §4.2); n u covers them.
inline Fb sum(const std::vector<Fb>& xs) {
  double v = 0, e = 0, m = 0;
  for (const Fb& x : xs) v += x.v, e += x.e, m += x.mag();
  return {v, e + static_cast<double>(xs.size()) * kU * m};
}

// Dot product of n terms in any order (a product and an addition per term, or one fused multiply-add).
inline Fb dot(const std::vector<Fb>& a, const std::vector<Fb>& b) {
  double v = 0, e = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    v += a[i].v * b[i].v;
    e += std::fabs(a[i].v) * b[i].e + std::fabs(b[i].v) * a[i].e + a[i].e * b[i].e;
    m += a[i].mag() * b[i].mag();
  }
  return {v, e + (static_cast<double>(a.size()) + 1) * kU * m};
}

inline Fb max(const std::vector<Fb>& xs) {
  Fb r{-INFINITY, 0};
  for (const Fb& x : xs) r = {std::max(r.v, x.v), std::max(r.e, x.e)};
  return r;
}

// n ulps of a value of magnitude m (an ulp of x is at most 2^-23 |x|).
inline double ulps(double n, double m) { return n * 2 * kU * m; }

// Library functions: the argument's error through the slope, then the function's own ulps.
inline Fb libm(double v, double e) { return {v, e + ulps(kLibmUlps, std::fabs(v) + e)}; }
inline Fb exp(const Fb& a) {
  const double v = std::exp(a.v);
  return libm(v, v * std::expm1(a.e));  // exp(v + e) - exp(v) = exp(v) (exp(e) - 1)
}
inline Fb tanh(const Fb& a) { return libm(std::tanh(a.v), a.e); }  // slope at most 1
inline Fb sqrt(const Fb& a) {
  const double v = std::sqrt(a.v);
  const double lo = a.v - a.e;
  return libm(v, lo > 0 ? a.e / (std::sqrt(lo) + v) : std::sqrt(a.e));  // |sqrt(x) - sqrt(y)| <= |x - y| / (sqrt x + sqrt y)
}

inline std::vector<Fb> exact(const float* x, size_t n) { return std::vector<Fb>(x, x + n); }

// Shader arithmetic under Vulkan's precision requirements for 32-bit floats (Vulkan specification,
// "Precision and Operation of SPIR-V Instructions"): +, -, * and fma are correctly rounded (the
// operators above); x / y within 2.5 ulps; exp(x) within 3 + 2|x| ulps; log(x) within 3 ulps outside
// [0.5, 2] and 2^-21 absolute inside; inversesqrt within 2 ulps; tanh as its formula in exp.
namespace vk {

inline Fb div(const Fb& a, const Fb& b) {
  const double q = a.v / b.v;
  const double room = std::fabs(b.v) - b.e;
  const double e = room > 0 ? (a.e + std::fabs(q) * b.e) / room : INFINITY;
  return {q, e + ulps(2.5, std::fabs(q) + e)};
}
inline Fb exp(const Fb& a) {
  const double v = std::exp(a.v), e = v * std::expm1(a.e);
  return {v, e + ulps(3 + 2 * (std::fabs(a.v) + a.e), v + e)};
}
inline Fb log(const Fb& a) {
  const double v = std::log(a.v), lo = a.v - a.e;
  const double e = lo > 0 ? a.e / lo : INFINITY;  // slope 1/x
  const bool near_one = a.v - a.e >= 0.5 && a.v + a.e <= 2.0;
  return {v, e + (near_one ? 0x1p-21 : ulps(3, std::fabs(v) + e))};
}
// tanh: Vulkan's precision is inherited from sinh(x) / cosh(x), (e^x - e^-x) / (e^x + e^-x): each exp
// within 3 + 2|x| ulps of its value, so the quotient is within twice that relative to e^x + e^-x, i.e.
// absolutely, plus the subtraction's, addition's and division's roundings.
inline Fb tanh(const Fb& a) {
  const double v = std::tanh(a.v), x = std::fabs(a.v) + a.e;
  return {v, a.e + ulps(2 * (3 + 2 * x), 1.0) + ulps(4.5, std::fabs(v) + a.e)};  // slope at most 1
}
inline Fb inversesqrt(const Fb& a) {
  const double v = 1 / std::sqrt(a.v), lo = a.v - a.e;
  const double e = lo > 0 ? 0.5 * a.e / (lo * std::sqrt(lo)) : INFINITY;  // slope x^-3/2 / 2
  return {v, e + ulps(2, v + e)};
}

}  // namespace vk

}  // namespace zinc::test
