// The CPU references' work items on the host's threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace dsa::detail {

// Calls run(item, scratch) once for every item in [0, items), on up to one thread per host core;
// each thread makes its own scratch with make_scratch(). Items must write disjoint outputs: then
// the result does not depend on how many threads ran. The first exception is rethrown here.
template <class MakeScratch, class Run>
void for_each_item_on_host_threads(int64_t items, MakeScratch make_scratch, Run run) {
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto worker = [&] {
    try {
      auto scratch = make_scratch();
      for (int64_t item = next++; item < items; item = next++) run(item, scratch);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = items;  // the others stop at their next item
    }
  };
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(items, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < threads; ++i) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones running (and this one) take the rest, same result
    }
  }
  worker();
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace dsa::detail
