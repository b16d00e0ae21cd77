# Third-party libraries, all from Debian packages (see scripts/deps.sh for the package names).

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)          # libspdlog-dev (brings fmt)
find_package(CLI11 REQUIRED)           # libcli11-dev
find_package(nlohmann_json REQUIRED)   # nlohmann-json3-dev

if(ZINC_BUILD_TESTS)
  find_package(GTest REQUIRED)         # libgtest-dev, libgmock-dev
endif()
