# Warnings and sanitizer flags shared by every ZINC target (applied through zinc_target_defaults).

add_library(zinc_options INTERFACE)
target_compile_options(zinc_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wno-missing-field-initializers>
  # GCC 12 reports false -Wrestrict overlaps inside std::string concatenation (GCC bug 105329).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>)

if(ZINC_SANITIZE)
  set(_zinc_san -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_compile_options(zinc_options INTERFACE ${_zinc_san})
  target_link_options(zinc_options INTERFACE ${_zinc_san})
endif()

if(ZINC_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ZINC_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Coverage instrumentation for everything the fuzz targets link; the targets add -fsanitize=fuzzer.
  target_compile_options(zinc_options INTERFACE -fsanitize=fuzzer-no-link)
endif()

# zinc_library(NAME SOURCES... [DEPS ...]): one static library per concern.
function(zinc_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
                                             ${PROJECT_BINARY_DIR}/include)
  target_link_libraries(${name} PUBLIC zinc_options ${ARG_DEPS})
endfunction()
