// Runtime dtype / head dims / mask -> the kernel template instance: the one switch both dense
// kernel generations launch through. Host code of .cu files.
#pragma once

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "dsa/dense_attention.h"

namespace dsa::detail {

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<Elem>, integral_constant Dqk, integral_constant Dv, bool_constant causal) for
// the supported (head_dim_qk, head_dim_v) pairs 64/64, 128/128 and 192/128.
template <class F>
void dispatch_dense(DType dtype, int head_dim_qk, bool causal, F&& f) {
  auto by_mask = [&](auto elem, auto dqk, auto dv) {
    if (causal)
      f(elem, dqk, dv, std::true_type{});
    else
      f(elem, dqk, dv, std::false_type{});
  };
  auto by_dims = [&](auto elem) {
    switch (head_dim_qk) {
      case 64: return by_mask(elem, std::integral_constant<int, 64>{}, std::integral_constant<int, 64>{});
      case 128: return by_mask(elem, std::integral_constant<int, 128>{}, std::integral_constant<int, 128>{});
      default: return by_mask(elem, std::integral_constant<int, 192>{}, std::integral_constant<int, 128>{});
    }
  };
  if (dtype == DType::bf16)
    by_dims(TypeTag<__nv_bfloat16>{});
  else
    by_dims(TypeTag<__half>{});
}

}  // namespace dsa::detail
