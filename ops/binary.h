// Binary elementwise ops with NumPy broadcasting, and their scalar forms. Both operands must share
// a dtype. Gradients of a broadcast operand are summed back to its shape (sum_to).
#pragma once
#include "engine/tensor.h"

namespace eng {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);  // a^b, defined for a > 0 (gradient wrt b uses log a)
Tensor maximum(const Tensor& a, const Tensor& b);  // ties send the gradient to a
Tensor minimum(const Tensor& a, const Tensor& b);  // ties send the gradient to a

Tensor add_scalar(const Tensor& a, double s);  // a + s
Tensor mul_scalar(const Tensor& a, double s);  // a * s
Tensor pow_scalar(const Tensor& a, double p);  // a^p
Tensor rdiv_scalar(double s, const Tensor& a);  // s / a

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add_scalar(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add_scalar(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add_scalar(a, -s); }
inline Tensor operator-(double s, const Tensor& a) { return add_scalar(mul_scalar(a, -1.0), s); }
inline Tensor operator*(const Tensor& a, double s) { return mul_scalar(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul_scalar(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul_scalar(a, 1.0 / s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv_scalar(s, a); }
inline Tensor operator-(const Tensor& a) { return mul_scalar(a, -1.0); }

}  // namespace eng
