# Detects which GPU backends can be built here and prints one line saying which are.
# A backend set to AUTO is built when its toolchain is present and skipped cleanly otherwise;
# ON makes a missing toolchain a configure error; OFF skips it.

set(ZINC_BACKENDS_BUILT cpu)
set(ZINC_BACKENDS_SKIPPED "")

function(_zinc_backend_decision name mode found why_missing)
  if(mode STREQUAL "OFF")
    set(_built OFF)
    list(APPEND ZINC_BACKENDS_SKIPPED "${name} (disabled)")
  elseif(found)
    set(_built ON)
    list(APPEND ZINC_BACKENDS_BUILT ${name})
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "ZINC_${name}=ON but ${why_missing}")
  else()
    set(_built OFF)
    list(APPEND ZINC_BACKENDS_SKIPPED "${name} (${why_missing})")
  endif()
  string(TOUPPER ${name} _up)
  set(ZINC_HAVE_${_up} ${_built} PARENT_SCOPE)
  set(ZINC_BACKENDS_BUILT ${ZINC_BACKENDS_BUILT} PARENT_SCOPE)
  set(ZINC_BACKENDS_SKIPPED ${ZINC_BACKENDS_SKIPPED} PARENT_SCOPE)
endfunction()

# Vulkan: headers (libvulkan-dev), volk (libvulkan-volk-dev) and glslangValidator (glslang-tools).
set(_vk_found FALSE)
set(_vk_why "")
if(NOT ZINC_VULKAN STREQUAL "OFF")
  find_package(VulkanHeaders CONFIG QUIET)
  find_path(ZINC_VOLK_INCLUDE volk.h)
  find_program(ZINC_GLSLANG glslangValidator)
  if(NOT VulkanHeaders_FOUND)
    set(_vk_why "Vulkan headers not found: install libvulkan-dev")
  elseif(NOT ZINC_VOLK_INCLUDE)
    set(_vk_why "volk not found: install libvulkan-volk-dev")
  elseif(NOT ZINC_GLSLANG)
    set(_vk_why "glslangValidator not found: install glslang-tools")
  else()
    set(_vk_found TRUE)
  endif()
endif()
_zinc_backend_decision(vulkan "${ZINC_VULKAN}" ${_vk_found} "${_vk_why}")

# CUDA: the toolkit (nvcc + runtime library).
set(_cuda_found FALSE)
if(NOT ZINC_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart_static)
    set(_cuda_found TRUE)
  endif()
endif()
_zinc_backend_decision(cuda "${ZINC_CUDA}" ${_cuda_found} "CUDA toolkit (nvcc) not found")
# The GPU architectures the kernels are compiled for: the GPU of this machine where one is visible,
# else every architecture the kernels support (Ampere, Ada, Hopper, and Hopper's PTX for later GPUs).
# A build that only needs the kernels to compile (CI) passes one: -DZINC_CUDA_ARCHS=90.
if(ZINC_HAVE_CUDA AND NOT ZINC_CUDA_ARCHS)
  execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE _smi OUTPUT_QUIET ERROR_QUIET)
  if(_smi EQUAL 0)
    set(_archs native)
  else()
    set(_archs "80-real;86-real;89-real;90")
  endif()
  set(ZINC_CUDA_ARCHS "${_archs}" CACHE STRING "GPU architectures of the CUDA kernels (CMake CUDA_ARCHITECTURES)")
endif()
if(ZINC_HAVE_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES "${ZINC_CUDA_ARCHS}")
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
endif()

# Metal: Apple platforms only.
set(_metal_found FALSE)
if(APPLE AND NOT ZINC_METAL STREQUAL "OFF")
  set(_metal_found TRUE)
endif()
_zinc_backend_decision(metal "${ZINC_METAL}" ${_metal_found} "not an Apple platform")
if(ZINC_HAVE_METAL)
  # No Metal code exists yet; the detection is here so the configure line is truthful on macOS.
  set(ZINC_HAVE_METAL OFF)
  list(REMOVE_ITEM ZINC_BACKENDS_BUILT metal)
  list(APPEND ZINC_BACKENDS_SKIPPED "metal (not implemented yet)")
endif()

# ZINC_RT: the direct AMD runtime over the kernel's compute interface (Linux; the interface's header
# linux/kfd_ioctl.h comes with linux-libc-dev).
set(_rt_found FALSE)
if(NOT ZINC_ZINC_RT STREQUAL "OFF" AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
  include(CheckIncludeFileCXX)
  # The header includes <drm/drm.h> for the kernel's fixed-width types alone; where no drm/drm.h is
  # installed (Debian's linux-libc-dev has none), a build-tree one bringing <linux/types.h> stands in.
  check_include_file_cxx(drm/drm.h ZINC_HAVE_DRM_DRM_H)
  if(NOT ZINC_HAVE_DRM_DRM_H)
    set(ZINC_RT_SHIM_INCLUDE ${PROJECT_BINARY_DIR}/zinc_rt_include)
    file(WRITE ${ZINC_RT_SHIM_INCLUDE}/drm/drm.h
         "// Written by cmake/ZincBackends.cmake: what linux/kfd_ioctl.h needs of drm/drm.h.\n#pragma once\n#include <linux/types.h>\n")
    set(CMAKE_REQUIRED_INCLUDES ${ZINC_RT_SHIM_INCLUDE})
  endif()
  check_include_file_cxx(linux/kfd_ioctl.h ZINC_HAVE_KFD_IOCTL)
  unset(CMAKE_REQUIRED_INCLUDES)
  if(ZINC_HAVE_KFD_IOCTL)
    set(_rt_found TRUE)
  endif()
endif()
_zinc_backend_decision(zinc_rt "${ZINC_ZINC_RT}" ${_rt_found} "linux/kfd_ioctl.h not found: install linux-libc-dev (Linux only)")

string(REPLACE ";" " " _built_str "${ZINC_BACKENDS_BUILT}")
string(REPLACE ";" ", " _skipped_str "${ZINC_BACKENDS_SKIPPED}")
if(_skipped_str STREQUAL "")
  set(_skipped_str "none")
endif()
message(STATUS "ZINC backends: built [${_built_str}]; skipped: ${_skipped_str}")
