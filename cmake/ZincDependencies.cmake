# Third-party libraries, all from Debian packages (see scripts/deps.sh for the package names).

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)          # libspdlog-dev (brings fmt)
find_package(CLI11 REQUIRED)           # libcli11-dev
find_package(nlohmann_json REQUIRED)   # nlohmann-json3-dev
find_package(OpenSSL REQUIRED)         # libssl-dev (SHA-256; HTTPS through cpp-httplib)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)  # libcpp-httplib-dev

if(ZINC_BUILD_TESTS)
  find_package(GTest REQUIRED)         # libgtest-dev, libgmock-dev
endif()
