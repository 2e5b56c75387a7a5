// Catalog YAML files embedded into the binary at build time (cmake/embed_catalog.cmake), so
// `rlsim` runs from any directory. Paths are repository-relative, for error messages.
#pragma once

#include <cstddef>

namespace rlsim::sim::catalog_data {

struct File {
  const char* path;
  const char* text;
};

extern const File kDevices[];
extern const std::size_t kDevicesCount;
extern const File kModels[];
extern const std::size_t kModelsCount;
extern const File kCalibration[];  // models/calibration/default.yaml
extern const std::size_t kCalibrationCount;

}  // namespace rlsim::sim::catalog_data
