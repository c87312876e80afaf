// The message of the dsa::Error a call throws, or "no error": tests check which argument it names.
#pragma once

#include <string>

#include "dsa/error.h"

namespace dsa::testing {

template <typename Call>
std::string error_message(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace dsa::testing
