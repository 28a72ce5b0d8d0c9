// Element types and devices. f32 is the working type; f64 exists so that gradient checks
// by finite differences are precise (central differences in f32 lose ~3 digits); i64 holds
// indices (token ids, targets, gather indices) and is never differentiated. u8 holds raw bytes: a quantized weight's
// blocks (ops/quant.h), read through raw_data() only; no arithmetic op takes it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace eng {

enum class DType : uint8_t { F32, F64, I64, U8 };
enum class Device : uint8_t { CPU, CUDA };

using Shape = std::vector<int64_t>;

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : t == DType::U8 ? 1 : 8; }
inline const char* dtype_name(DType t) {
  return t == DType::F32 ? "f32" : t == DType::F64 ? "f64" : t == DType::U8 ? "u8" : "i64";
}
inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64; }

[[noreturn]] void fail_not_floating(const char* where);
inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// Runs BODY with `T` bound to the C++ type of a floating DTYPE; an i64 tensor is an error that
// names the calling function (math kernels are instantiated for f32 and f64 only).
#define ENG_DISPATCH(DTYPE, T, ...)                  \
  do {                                               \
    if ((DTYPE) == ::eng::DType::F32) {              \
      using T = float;                               \
      __VA_ARGS__;                                   \
    } else if ((DTYPE) == ::eng::DType::F64) {       \
      using T = double;                              \
      __VA_ARGS__;                                   \
    } else {                                         \
      ::eng::fail_not_floating(__func__);            \
    }                                                \
  } while (0)

// Like ENG_DISPATCH, but i64 too: for copies, fills and element access.
#define ENG_DISPATCH_ALL(DTYPE, T, ...)              \
  do {                                               \
    if ((DTYPE) == ::eng::DType::I64) {              \
      using T = int64_t;                             \
      __VA_ARGS__;                                   \
    } else {                                         \
      ENG_DISPATCH(DTYPE, T, __VA_ARGS__);           \
    }                                                \
  } while (0)

}  // namespace eng
