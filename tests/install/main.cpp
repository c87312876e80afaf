#include <cstdio>

#include "dsa/sparse_mla.h"

int main() {
  const dsa::SparseMlaPlan plan = dsa::plan_sparse_mla(1, 16, 2048, dsa::DeviceInfo{132, 232448, 9, 0});
  std::printf("splits %d\n", plan.splits);
  return plan.splits > 0 ? 0 : 1;
}
