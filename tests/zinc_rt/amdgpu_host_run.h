// Runs a kernel of shaders/amdgpu/ compiled for the host (amdgpu_host.h): each workgroup's work-items
// as fibers of one thread that meet at its barriers, one workgroup after another (a kernel's __local arrays are one
// static per kernel on the host, so workgroups must not overlap).
#pragma once

#include <array>
#include <cstdint>
#include <functional>

namespace zinc::backend::zinc_rt::host {

// Calls `kernel` once per work-item of a grid of `groups` workgroups of `block` work-items each.
void run(std::array<uint32_t, 3> groups, std::array<uint32_t, 3> block, const std::function<void()>& kernel);

}  // namespace zinc::backend::zinc_rt::host
