#!/usr/bin/env bash
# Installs the build dependencies from Debian when any is missing (sourced by test.sh and bench.sh).
if ! command -v ninja >/dev/null || [ ! -f /usr/include/gtest/gtest.h ] || [ ! -f /usr/include/nlohmann/json.hpp ] ||
   [ ! -f /usr/include/CLI/CLI.hpp ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq cmake ninja-build g++ libgtest-dev nlohmann-json3-dev \
    libcli11-dev >/dev/null
fi
export PATH=/usr/local/cuda/bin:$PATH
