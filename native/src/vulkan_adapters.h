// The Vulkan physical devices this process can see, read through the Vulkan loader itself
// (dlopen'ed, so the addon links no Vulkan library and runs where there is none).
//
// Why: onnxruntime-node's WebGPU provider (Dawn) runs on Vulkan on Linux, and it tells JS nothing
// about the adapter it picked. The engine's device report (issue 33) needs the adapter's name, its
// vendor, whether it is a software rasteriser (VK_PHYSICAL_DEVICE_TYPE_CPU: SwiftShader, lavapipe)
// and its 16-bit float features; Dawn reads the same properties from the same loader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct lh_vulkan_device {
  std::string name;          // VkPhysicalDeviceProperties::deviceName
  uint32_t vendor_id = 0;    // PCI vendor id (or a Khronos vendor id for software devices)
  uint32_t device_id = 0;
  uint32_t api_version = 0;  // VK_MAKE_API_VERSION packed
  uint32_t driver_version = 0;
  // VkPhysicalDeviceType: 0 other, 1 integrated GPU, 2 discrete GPU, 3 virtual GPU, 4 CPU (software)
  int32_t type = 0;
  bool shader_float16 = false;        // VkPhysicalDeviceShaderFloat16Int8Features::shaderFloat16
  bool storage_buffer_16bit = false;  // VkPhysicalDevice16BitStorageFeatures::storageBuffer16BitAccess
  bool features_known = false;        // false: the device is Vulkan 1.0 and the two above were not read
};

// Loads `library` (e.g. "libvulkan.so.1", found as dlopen finds it) and lists its physical devices.
// Returns 0 with `devices` filled (possibly empty: a loader with no driver), or a nonzero step at
// which it stopped with `error` saying why: 1 the loader could not be opened, 2 a loader function
// is missing, 3 vkCreateInstance failed, 4 vkEnumeratePhysicalDevices failed. Never throws; the
// library stays loaded (Dawn loads the same one later; unloading a driver with threads is unsafe).
int lh_vulkan_devices(const char* library, std::vector<lh_vulkan_device>* devices, std::string* error);
