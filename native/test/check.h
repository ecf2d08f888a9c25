// The one check function of the native tests (native_tests.cc counts and prints), and the test
// suites kept in files of their own.
#pragma once

// One named check. Prints "ok    name" or "FAIL  name: why" (why: printf of fmt and the rest).
void check(bool ok, const char* name, const char* fmt = "", ...);

// quant_dot_q_tests.cc: F32, F16, Q4_0, Q8_0 dot kernels against the scalar reference and fp64.
void test_quant_dot_q();
// quant_dot_k_tests.cc: Q4_K, Q5_K, Q6_K.
void test_quant_dot_k();
// quant_dot_mxfp4_tests.cc: MXFP4.
void test_quant_dot_mxfp4();
// quant_dot_q5_tests.cc: Q5_0.
void test_quant_dot_q5();
// quant_dot_q1_tests.cc: Q4_1, Q5_1.
void test_quant_dot_q1();
// dense_stage_tests.cc: the native dense stage against a float64 reference, and the worker pool.
void test_dense_stage();
// quant_dot_bench.cc: `native_tests --bench-dot [reps]`, the dot kernels' decode GB/s and prefill speed.
void bench_quant_dot(int reps);
// moe_ffn_tests.cc: the mixture-of-experts MLP of the dense stage against a float64 reference, every weight type.
void test_moe_ffn();
// gated_delta_net_tests.cc: the Gated DeltaNet mixer against a float64 reference; chunked == token by token; threads.
void test_gated_delta_net();
// qwen35_stage_tests.cc: the dense stage's Qwen3.5 fields (gated q and attn, linear layers' pre, shared expert) against float64.
void test_qwen35_stage();
// attention_params_tests.cc: scale, window, sinks and soft-cap in every attention kernel and entry point.
void test_attention_params();
// kv_layer_capacity_tests.cc: per-layer capacities of the KV pool (one allocation, layers of their own sizes).
void test_kv_layer_capacity();
// kv_ring_tests.cc: window layers as rings (the oldest token overwritten), held against layers that keep every token.
void test_kv_ring();
// cpu_level_tests.cc: the level cap (LONGHAND_CPU_LEVEL): every dispatch at most the forced level, same bits.
void test_cpu_level();
