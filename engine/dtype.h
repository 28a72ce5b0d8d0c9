// Element types and devices. f32 is the working type; f64 exists so that gradient checks
// by finite differences are precise (central differences in f32 lose ~3 digits).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace eng {

enum class DType : uint8_t { F32, F64 };
enum class Device : uint8_t { CPU, CUDA };

using Shape = std::vector<int64_t>;

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 8; }
inline const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : "f64"; }
inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// Runs BODY with `T` bound to the C++ type of DTYPE.
#define ENG_DISPATCH(DTYPE, T, ...)        \
  do {                                     \
    if ((DTYPE) == ::eng::DType::F32) {    \
      using T = float;                     \
      __VA_ARGS__;                         \
    } else {                               \
      using T = double;                    \
      __VA_ARGS__;                         \
    }                                      \
  } while (0)

}  // namespace eng
