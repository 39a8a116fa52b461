#pragma once

// Helpers shared by the benchmarks on RocksDB.

#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>

namespace bench {

/// A fresh directory, removed afterwards.
struct temp_dir {
  temp_dir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("troupe-bench-" + std::to_string(rd()) + std::to_string(rd()));
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string str() const { return path.string(); }
  std::filesystem::path path;
};

/// A benchmark whose result is wrong measures nothing: it throws.
inline void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("benchmark result is wrong: ") + what);
}

} // namespace bench
