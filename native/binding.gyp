# Longhand native addon. Three targets:
#   longhand_core  static library: KV pool, mapped file, attention kernels + scalar references,
#                  read-bandwidth probe (for bench/).
#                  Plain C++17, no exceptions, no Node headers used.
#   longhand       the Node-API addon (build/Release/longhand.node): src/addon.cc only, the one
#                  file compiled with C++ exceptions (node-addon-api's), all caught at the boundary.
#   native_tests   executable (build/Release/native_tests): C++ tests of the core; links no Node.
# Optimisation: -O3, baseline x86-64-v2 (SSE4.2, POPCNT; runs on any x86-64 from ~2009 on). The
# AVX2/FMA/F16C attention kernel is compiled per function and chosen at run time by cpuid. Never
# -march=native: the binary ships to other machines.
{
  "target_defaults": {
    "cflags_cc!": ["-fno-rtti", "-std=gnu++17", "-std=gnu++1y", "-std=gnu++20", "-O2", "-O0"],
    "cflags_cc": ["-std=c++17", "-O3", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    "cflags!": ["-O2", "-O0"],
    "cflags": ["-O3"],
    "conditions": [
      ["target_arch=='x64'", { "cflags_cc": ["-march=x86-64-v2"] }],
    ],
  },
  "targets": [
    {
      "target_name": "longhand_core",
      "type": "static_library",
      "cflags_cc": ["-fno-exceptions"],
      "sources": [
        "src/cpu_level.cc",
        "src/kv_pool.cc",
        "src/mapped_file.cc",
        "src/gguf_repack.cc",
        "src/attention.cc",
        "src/bandwidth.cc",
        "src/infinigen.cc",
        "src/infinigen_score.cc",
        "src/sparse_attention.cc",
        "src/policy_select.cc",
        "src/row_gather.cc",
        "src/skew_energy.cc",
        "src/heap_trim.cc",
        "src/vulkan_adapters.cc",
        "src/parallel_ranges.cc",
        "src/quant_dot.cc",
        "src/quant_dot_q.cc",
        "src/quant_dot_k.cc",
        "src/quant_dot_mxfp4.cc",
        "src/quant_dot_q5.cc",
        "src/quant_dot_q1.cc",
        "src/quant_dot_peak.cc",
        "src/dense_stage.cc",
        "src/moe_ffn.cc",
        "src/gated_delta_net.cc",
        "src/worker_pool.cc",
        "src/reference/attention_ref.cc",
        "src/reference/infinigen_ref.cc",
      ],
    },
    {
      "target_name": "longhand",
      "dependencies": ["longhand_core"],
      "sources": ["src/addon.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_CPP_EXCEPTIONS_ALL"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-fexceptions"],
      "xcode_settings": { "GCC_ENABLE_CPP_EXCEPTIONS": "YES", "MACOSX_DEPLOYMENT_TARGET": "11.0" },
    },
    {
      "target_name": "native_tests",
      "type": "executable",
      "dependencies": ["longhand_core"],
      "cflags_cc": ["-fno-exceptions"],
      "sources": ["test/native_tests.cc", "test/quant_dot_sweep.cc", "test/quant_dot_bench.cc", "test/quant_dot_q_tests.cc", "test/quant_dot_k_tests.cc", "test/quant_dot_mxfp4_tests.cc", "test/quant_dot_q5_tests.cc", "test/quant_dot_q1_tests.cc", "test/dense_stage_tests.cc", "test/moe_ffn_tests.cc", "test/attention_params_tests.cc", "test/kv_layer_capacity_tests.cc", "test/kv_ring_tests.cc", "test/cpu_level_tests.cc", "test/gated_delta_net_tests.cc", "test/qwen35_stage_tests.cc"],
    },
  ],
}
