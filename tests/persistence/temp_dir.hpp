#pragma once

#include <filesystem>
#include <random>
#include <string>

namespace test {

/// A fresh directory name under the system's temporary directory, removed
/// (with everything in it) at the end of the scope.
struct temp_dir {
  temp_dir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("troupe-test-" + std::to_string(rd()) + std::to_string(rd()));
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string str() const { return path.string(); }
  std::filesystem::path path;
};

} // namespace test
