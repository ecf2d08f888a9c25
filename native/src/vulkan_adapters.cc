// See vulkan_adapters.h. The few Vulkan types used are declared here with the layouts of the
// Vulkan headers (vulkan_core.h), which are not installed on every build machine.
#include "vulkan_adapters.h"

#if defined(__linux__) || defined(__APPLE__)
#include <dlfcn.h>
#define LH_HAVE_DLOPEN 1
#endif

#include <cstring>

namespace {

using VkInstance = struct VkInstance_T*;
using VkPhysicalDevice = struct VkPhysicalDevice_T*;
using VkResult = int32_t;
using VkBool32 = uint32_t;
using PFN_vkVoidFunction = void (*)();

constexpr int32_t kAppInfoType = 0;            // VK_STRUCTURE_TYPE_APPLICATION_INFO
constexpr int32_t kInstanceCreateInfoType = 1; // VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
constexpr int32_t kFeatures2Type = 1000059000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2
constexpr int32_t kFloat16Int8Type = 1000082000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES
constexpr int32_t k16BitStorageType = 1000083000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES
constexpr uint32_t kApi11 = (1u << 22) | (1u << 12); // VK_API_VERSION_1_1

struct VkApplicationInfo {
  int32_t sType;
  const void* pNext;
  const char* pApplicationName;
  uint32_t applicationVersion;
  const char* pEngineName;
  uint32_t engineVersion;
  uint32_t apiVersion;
};

struct VkInstanceCreateInfo {
  int32_t sType;
  const void* pNext;
  uint32_t flags;
  const VkApplicationInfo* pApplicationInfo;
  uint32_t enabledLayerCount;
  const char* const* ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char* const* ppEnabledExtensionNames;
};

// The head of VkPhysicalDeviceProperties; the rest (limits, sparse properties: 824 bytes in all on
// 64-bit targets) is received into the padding of PropertiesStorage and not read.
struct VkPhysicalDevicePropertiesHead {
  uint32_t apiVersion;
  uint32_t driverVersion;
  uint32_t vendorID;
  uint32_t deviceID;
  int32_t deviceType;
  char deviceName[256];
};

union PropertiesStorage {
  VkPhysicalDevicePropertiesHead head;
  alignas(8) unsigned char bytes[4096];
};

struct VkPhysicalDevice16BitStorageFeatures {
  int32_t sType;
  void* pNext;
  VkBool32 storageBuffer16BitAccess;
  VkBool32 uniformAndStorageBuffer16BitAccess;
  VkBool32 storagePushConstant16;
  VkBool32 storageInputOutput16;
};

struct VkPhysicalDeviceShaderFloat16Int8Features {
  int32_t sType;
  void* pNext;
  VkBool32 shaderFloat16;
  VkBool32 shaderInt8;
};

struct VkPhysicalDeviceFeatures2 {
  int32_t sType;
  void* pNext;
  VkBool32 features[55];  // VkPhysicalDeviceFeatures: 55 VkBool32
};

using PFN_vkGetInstanceProcAddr = PFN_vkVoidFunction (*)(VkInstance, const char*);
using PFN_vkCreateInstance = VkResult (*)(const VkInstanceCreateInfo*, const void*, VkInstance*);
using PFN_vkDestroyInstance = void (*)(VkInstance, const void*);
using PFN_vkEnumeratePhysicalDevices = VkResult (*)(VkInstance, uint32_t*, VkPhysicalDevice*);
using PFN_vkGetPhysicalDeviceProperties = void (*)(VkPhysicalDevice, void*);
using PFN_vkGetPhysicalDeviceFeatures2 = void (*)(VkPhysicalDevice, VkPhysicalDeviceFeatures2*);

}  // namespace

int lh_vulkan_devices(const char* library, std::vector<lh_vulkan_device>* devices, std::string* error) {
  devices->clear();
#if !defined(LH_HAVE_DLOPEN)
  (void)library;
  *error = "Vulkan is only looked for on Linux and macOS";
  return 1;
#else
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    *error = std::string("cannot open ") + library + ": " + (why ? why : "unknown reason");
    return 1;
  }
  auto get_proc = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (get_proc == nullptr) {
    *error = std::string(library) + " has no vkGetInstanceProcAddr";
    return 2;
  }
  auto create = reinterpret_cast<PFN_vkCreateInstance>(get_proc(nullptr, "vkCreateInstance"));
  if (create == nullptr) {
    *error = "the Vulkan loader has no vkCreateInstance";
    return 2;
  }
  VkApplicationInfo app{kAppInfoType, nullptr, "longhand", 1, "longhand", 1, kApi11};
  VkInstanceCreateInfo info{kInstanceCreateInfoType, nullptr, 0, &app, 0, nullptr, 0, nullptr};
  VkInstance instance = nullptr;
  const VkResult created = create(&info, nullptr, &instance);
  if (created != 0 || instance == nullptr) {
    *error = "vkCreateInstance failed with VkResult " + std::to_string(created) + " (no Vulkan driver (ICD) is installed, or none loads)";
    return 3;
  }
  auto destroy = reinterpret_cast<PFN_vkDestroyInstance>(get_proc(instance, "vkDestroyInstance"));
  auto enumerate = reinterpret_cast<PFN_vkEnumeratePhysicalDevices>(get_proc(instance, "vkEnumeratePhysicalDevices"));
  auto properties = reinterpret_cast<PFN_vkGetPhysicalDeviceProperties>(get_proc(instance, "vkGetPhysicalDeviceProperties"));
  auto features2 = reinterpret_cast<PFN_vkGetPhysicalDeviceFeatures2>(get_proc(instance, "vkGetPhysicalDeviceFeatures2"));
  if (destroy == nullptr || enumerate == nullptr || properties == nullptr) {
    if (destroy) destroy(instance, nullptr);
    *error = "the Vulkan loader lacks vkEnumeratePhysicalDevices or vkGetPhysicalDeviceProperties";
    return 2;
  }
  uint32_t count = 0;
  VkResult listed = enumerate(instance, &count, nullptr);
  std::vector<VkPhysicalDevice> handles(count);
  if (listed == 0 && count > 0) listed = enumerate(instance, &count, handles.data());
  if (listed != 0 && listed != 5 /* VK_INCOMPLETE */) {
    destroy(instance, nullptr);
    *error = "vkEnumeratePhysicalDevices failed with VkResult " + std::to_string(listed);
    return 4;
  }
  handles.resize(count);
  for (VkPhysicalDevice handle : handles) {
    PropertiesStorage props;
    std::memset(&props, 0, sizeof props);
    properties(handle, &props);
    lh_vulkan_device d;
    d.name.assign(props.head.deviceName, strnlen(props.head.deviceName, sizeof props.head.deviceName));
    d.vendor_id = props.head.vendorID;
    d.device_id = props.head.deviceID;
    d.api_version = props.head.apiVersion;
    d.driver_version = props.head.driverVersion;
    d.type = props.head.deviceType;
    // vkGetPhysicalDeviceFeatures2 is core from 1.1; a 1.0 device's features chain is not read
    if (features2 != nullptr && props.head.apiVersion >= kApi11) {
      VkPhysicalDevice16BitStorageFeatures storage{k16BitStorageType, nullptr, 0, 0, 0, 0};
      VkPhysicalDeviceShaderFloat16Int8Features f16{kFloat16Int8Type, &storage, 0, 0};
      VkPhysicalDeviceFeatures2 all;
      std::memset(&all, 0, sizeof all);
      all.sType = kFeatures2Type;
      all.pNext = &f16;
      features2(handle, &all);
      d.shader_float16 = f16.shaderFloat16 != 0;
      d.storage_buffer_16bit = storage.storageBuffer16BitAccess != 0;
      d.features_known = true;
    }
    devices->push_back(std::move(d));
  }
  destroy(instance, nullptr);
  return 0;
#endif
}
