// dsa::Error: the one exception type the library throws for bad arguments and CUDA failures.
#pragma once

#include <stdexcept>
#include <string>

namespace dsa {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error("dsa: " + what) {}
};

}  // namespace dsa
