// The Node-API layer, and only that: argument validation, type-tagged wrapped objects, cleanup
// hooks, and status -> JS error mapping. All work is done by the core (kv_pool, mapped_file,
// attention), which returns lh_status codes and never throws.
//
// This is the one file built with C++ exceptions (node-addon-api's NAPI_CPP_EXCEPTIONS). Every
// entry point runs inside guarded(), which turns any C++ exception into a JS error, so nothing
// C++ ever unwinds into V8; node-addon-api's own wrapper (NODE_ADDON_API_CPP_EXCEPTIONS_ALL) is
// a second net behind it. The core has no abort() paths.
//
// Errors: every failure is thrown as a JS error with `code` in NATIVE_BAD_ARGUMENT,
// NATIVE_OUT_OF_MEMORY, NATIVE_IO, NATIVE_INTERNAL, built by the factory native/index.js installs
// (app/common's NativeError) or, without one, a plain Error carrying the same fields.
#include <napi.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "attention.h"
#include "bandwidth.h"
#include "cpu_level.h"
#include "dense_stage.h"
#include "gated_delta_net.h"
#include "gguf_repack.h"
#include "heap_trim.h"
#include "infinigen.h"
#include "kv_pool.h"
#include "mapped_file.h"
#include "parallel_ranges.h"
#include "quant_dot.h"
#include "quant_dot_peak.h"
#include "policy_select.h"
#include "row_gather.h"
#include "skew_energy.h"
#include "sparse_attention.h"
#include "status.h"
#include "vulkan_adapters.h"
#include "worker_pool.h"

namespace {

// Bumped whenever the JS-visible surface changes; native/index.js refuses a stale binary.
constexpr int kAbiVersion = 20;

// Type tags: a KvPool argument is only trusted if it carries this tag (napi_type_tag), so a
// MappedFile or a forged object can never be unwrapped as a pool.
const napi_type_tag kKvPoolTag = {0x4c6f6e6768616e64ull, 0x6b76706f6f6c0001ull};
const napi_type_tag kMappedFileTag = {0x4c6f6e6768616e64ull, 0x6d61707065640001ull};
const napi_type_tag kSpeculatorTag = {0x4c6f6e6768616e64ull, 0x73706563756c0001ull};

struct AddonData {
  Napi::FunctionReference error_factory;  // (code, message, details) => Error, or empty
};

const char* code_for(lh_status st) {
  switch (st) {
    case LH_BAD_ARGUMENT: return "NATIVE_BAD_ARGUMENT";
    case LH_OUT_OF_MEMORY:
    case LH_POOL_FULL: return "NATIVE_OUT_OF_MEMORY";
    case LH_IO_ERROR: return "NATIVE_IO";
    case LH_OK:
    case LH_INTERNAL: return "NATIVE_INTERNAL";
  }
  return "NATIVE_INTERNAL";
}

// Builds the JS error for a status. `details` may be empty.
Napi::Error make_error(Napi::Env env, lh_status st, const std::string& message, Napi::Object details = Napi::Object()) {
  if (details.IsEmpty()) details = Napi::Object::New(env);
  details.Set("status", Napi::Number::New(env, static_cast<int>(st)));
  details.Set("statusName", Napi::String::New(env, lh_status_name(st)));
  const Napi::String code = Napi::String::New(env, code_for(st));
  const Napi::String msg = Napi::String::New(env, message);
  AddonData* data = env.GetInstanceData<AddonData>();
  if (data != nullptr && !data->error_factory.IsEmpty()) {
    const Napi::Value err = data->error_factory.Call({code, msg, details});
    if (err.IsObject()) return Napi::Error(env, err);
  }
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("name", Napi::String::New(env, "NativeError"));
  err.Set("code", code);
  err.Set("details", details);
  return err;
}

[[noreturn]] void fail(Napi::Env env, lh_status st, const std::string& message) { throw make_error(env, st, message); }

// Runs an entry point; no C++ exception leaves it except Napi::Error, which node-addon-api
// turns into a pending JS exception.
template <class F>
auto guarded(Napi::Env env, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw make_error(env, LH_OUT_OF_MEMORY, "out of memory inside the native addon");
  } catch (const std::exception& e) {
    throw make_error(env, LH_INTERNAL, std::string("native addon bug: ") + e.what());
  } catch (...) {
    throw make_error(env, LH_INTERNAL, "native addon bug: unknown C++ exception");
  }
}

// ---------------------------------------------------------------------------------------------
// Argument validation
// ---------------------------------------------------------------------------------------------
std::string describe(const Napi::Value& v) {
  if (v.IsNumber()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v.As<Napi::Number>().DoubleValue());
    return buf;
  }
  if (v.IsUndefined()) return "undefined";
  if (v.IsNull()) return "null";
  if (v.IsString()) return "a string";
  if (v.IsTypedArray()) return "a typed array";
  if (v.IsArray()) return "an array";
  if (v.IsBigInt()) return "a bigint";
  if (v.IsObject()) return "an object";
  return "a value of another type";
}

// An integer Number in [lo, hi] (both <= 2^53).
double integer_arg(Napi::Env env, const Napi::Value& v, const char* name, double lo, double hi) {
  if (!v.IsNumber()) fail(env, LH_BAD_ARGUMENT, std::string(name) + " must be a number, got " + describe(v));
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || d < lo || d > hi) {
    char range[96];
    std::snprintf(range, sizeof range, " must be an integer in [%.0f, %.0f], got ", lo, hi);
    fail(env, LH_BAD_ARGUMENT, std::string(name) + range + describe(v));
  }
  return d;
}

uint32_t u32_arg(Napi::Env env, const Napi::Value& v, const char* name, uint32_t lo, uint32_t hi) {
  return static_cast<uint32_t>(integer_arg(env, v, name, lo, hi));
}

// A Float32Array of exactly `length` elements.
Napi::Float32Array f32_arg(Napi::Env env, const Napi::Value& v, const char* name, size_t length) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    fail(env, LH_BAD_ARGUMENT, std::string(name) + " must be a Float32Array, got " + describe(v));
  Napi::Float32Array a = v.As<Napi::Float32Array>();
  if (a.ElementLength() != length)
    fail(env, LH_BAD_ARGUMENT, std::string(name) + " must have " + std::to_string(length) + " elements, has " +
                                   std::to_string(a.ElementLength()));
  return a;
}

Napi::Object object_arg(Napi::Env env, const Napi::Value& v, const char* name) {
  if (!v.IsObject() || v.IsArray() || v.IsFunction()) fail(env, LH_BAD_ARGUMENT, std::string(name) + " must be an object, got " + describe(v));
  return v.As<Napi::Object>();
}

// The optional trailing `attention` argument of every attention entry point (attention_params.h):
// { scale?: number; window?: number; sinks?: Float32Array; softcap?: number }, undefined for the
// default block (scale 1/√headDim, nothing else). `name` prefixes the error messages ("attention" or
// "layerAttention[3]"). The sinks pointer points into the JS array: valid for the call only.
lh_attention_params attention_arg(Napi::Env env, const Napi::Value& v, uint32_t head_dim, uint32_t heads, const std::string& name = "attention") {
  lh_attention_params p = lh_attention_params_default(head_dim);
  if (v.IsUndefined()) return p;
  const Napi::Object o = object_arg(env, v, name.c_str());
  const Napi::Value scale = o.Get("scale");
  if (!scale.IsUndefined()) {
    const double x = scale.IsNumber() ? scale.As<Napi::Number>().DoubleValue() : NAN;
    const float f = static_cast<float>(x);
    if (!scale.IsNumber() || !std::isfinite(f) || !(f > 0.0f))
      fail(env, LH_BAD_ARGUMENT, name + ".scale must be a finite number > 0, got " + describe(scale));
    p.scale = f;
  }
  const Napi::Value window = o.Get("window");
  if (!window.IsUndefined()) p.window = u32_arg(env, window, (name + ".window").c_str(), 0, LH_MAX_TOKENS);
  const Napi::Value softcap = o.Get("softcap");
  if (!softcap.IsUndefined()) {
    const double x = softcap.IsNumber() ? softcap.As<Napi::Number>().DoubleValue() : NAN;
    const float f = static_cast<float>(x);
    if (!softcap.IsNumber() || !std::isfinite(f) || f < 0.0f)
      fail(env, LH_BAD_ARGUMENT, name + ".softcap must be a finite number >= 0 (0: off), got " + describe(softcap));
    p.softcap = f;
  }
  const Napi::Value sinks = o.Get("sinks");
  if (!sinks.IsUndefined()) {
    const Napi::Float32Array a = f32_arg(env, sinks, (name + ".sinks").c_str(), heads);
    for (uint32_t h = 0; h < heads; ++h)
      if (!std::isfinite(a[h])) fail(env, LH_BAD_ARGUMENT, name + ".sinks[" + std::to_string(h) + "] must be finite, got " + describe(Napi::Number::New(env, a[h])));
    p.sinks = a.Data();
  }
  return p;
}

// The trailing argument info[i], or undefined past the end.
Napi::Value arg_or_undefined(const Napi::CallbackInfo& info, size_t i) { return info.Length() > i ? info[i] : info.Env().Undefined(); }

// ---------------------------------------------------------------------------------------------
// KvPool
// ---------------------------------------------------------------------------------------------
class KvPool : public Napi::ObjectWrap<KvPool> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "KvPool",
                       {
                           InstanceAccessor<&KvPool::CapacityTokens>("capacityTokens"),
                           InstanceMethod<&KvPool::LayerCapacityTokens>("layerCapacityTokens"),
                           InstanceMethod<&KvPool::IsRing>("isRing"),
                           InstanceMethod<&KvPool::RingStart>("ringStart"),
                           InstanceMethod<&KvPool::ClearLayer>("clearLayer"),
                           InstanceMethod<&KvPool::ExportRows>("exportRows"),
                           InstanceAccessor<&KvPool::ByteLength>("byteLength"),
                           InstanceAccessor<&KvPool::BytesPerToken>("bytesPerToken"),
                           InstanceAccessor<&KvPool::Layers>("layers"),
                           InstanceAccessor<&KvPool::KvHeads>("kvHeads"),
                           InstanceAccessor<&KvPool::HeadDim>("headDim"),
                           InstanceAccessor<&KvPool::Freed>("freed"),
                           InstanceAccessor<&KvPool::KvType>("kvType"),
                           InstanceAccessor<&KvPool::PartialDim>("partialDim"),
                           InstanceMethod<&KvPool::SetPartialProjection>("setPartialProjection"),
                           InstanceMethod<&KvPool::ReadPartialK>("readPartialK"),
                           InstanceMethod<&KvPool::Append>("append"),
                           InstanceMethod<&KvPool::AppendBatch>("appendBatch"),
                           InstanceMethod<&KvPool::Truncate>("truncate"),
                           InstanceMethod<&KvPool::Length>("length"),
                           InstanceMethod<&KvPool::ReadK>("readK"),
                           InstanceMethod<&KvPool::ReadV>("readV"),
                           InstanceMethod<&KvPool::Position>("position"),
                           InstanceMethod<&KvPool::Reset>("reset"),
                           InstanceMethod<&KvPool::SnapshotLayerBytes>("snapshotLayerBytes"),
                           InstanceMethod<&KvPool::ExportLayer>("exportLayer"),
                           InstanceMethod<&KvPool::ImportLayer>("importLayer"),
                           InstanceAccessor<&KvPool::Evicting>("evicting"),
                           InstanceAccessor<&KvPool::HugePages>("hugePages"),
                           InstanceMethod<&KvPool::Evictions>("evictions"),
                           InstanceMethod<&KvPool::EvictionsTotal>("evictionsTotal"),
                           InstanceMethod<&KvPool::LastSlot>("lastSlot"),
                           InstanceMethod<&KvPool::LastEvicted>("lastEvicted"),
                           InstanceMethod<&KvPool::Counter>("counter"),
                           InstanceMethod<&KvPool::Free>("free"),
                           InstanceMethod<&KvPool::Free>("dispose"),
                       });
  }

  // new KvPool({ budgetBytes, layers, kvHeads, headDim, kvType?: 'fp16' | 'fp32' | 'int8' })
  explicit KvPool(const Napi::CallbackInfo& info) : Napi::ObjectWrap<KvPool>(info), env_(info.Env()) {
    guarded(env_, [&] {
      info.This().As<Napi::Object>().TypeTag(&kKvPoolTag);
      const Napi::Object o = object_arg(env_, info[0], "options");
      lh_kv_pool_config cfg;
      cfg.budget_bytes = static_cast<uint64_t>(integer_arg(env_, o.Get("budgetBytes"), "budgetBytes", 1, 9007199254740991.0));
      cfg.layers = u32_arg(env_, o.Get("layers"), "layers", 1, LH_MAX_LAYERS);
      cfg.kv_heads = u32_arg(env_, o.Get("kvHeads"), "kvHeads", 1, LH_MAX_KV_HEADS);
      cfg.head_dim = u32_arg(env_, o.Get("headDim"), "headDim", 1, LH_MAX_HEAD_DIM);
      cfg.kv_type = LH_KV_F16;
      const Napi::Value kt = o.Get("kvType");
      if (!kt.IsUndefined()) {
        const std::string t = kt.IsString() ? kt.As<Napi::String>().Utf8Value() : std::string();
        if (t == "fp32") cfg.kv_type = LH_KV_F32;
        else if (t == "int8") cfg.kv_type = LH_KV_I8;
        else if (t != "fp16") fail(env_, LH_BAD_ARGUMENT, "kvType must be 'fp16', 'fp32' or 'int8', got " + (kt.IsString() ? "'" + t + "'" : describe(kt)));
      }
      kv_type_ = cfg.kv_type;
      cfg.partial_dim = 0;
      const Napi::Value pd = o.Get("partialDim");
      if (!pd.IsUndefined()) cfg.partial_dim = u32_arg(env_, pd, "partialDim", 0, cfg.head_dim);
      cfg.evict = 0;
      cfg.sinks = cfg.recent = cfg.age_every = 0;
      const Napi::Value ev = o.Get("eviction");
      if (!ev.IsUndefined()) {
        const Napi::Object e = object_arg(env_, ev, "eviction");
        cfg.evict = 1;
        cfg.sinks = u32_arg(env_, e.Get("sinks"), "eviction.sinks", 0, 0x7fffffffu);
        cfg.recent = u32_arg(env_, e.Get("recent"), "eviction.recent", 0, 0x7fffffffu);
        cfg.age_every = u32_arg(env_, e.Get("ageEvery"), "eviction.ageEvery", 1, 0x7fffffffu);
      }
      // layerCapacity?: number[] (one per layer; 0: share what the budget leaves)
      std::vector<uint32_t> layer_capacity;
      cfg.layer_capacity = nullptr;
      const Napi::Value lc = o.Get("layerCapacity");
      if (!lc.IsUndefined()) {
        if (!lc.IsArray()) fail(env_, LH_BAD_ARGUMENT, "layerCapacity must be an array of one token count per layer, got " + describe(lc));
        const Napi::Array arr = lc.As<Napi::Array>();
        if (arr.Length() != cfg.layers)
          fail(env_, LH_BAD_ARGUMENT, "layerCapacity must have one entry per layer (" + std::to_string(cfg.layers) + "), has " + std::to_string(arr.Length()));
        for (uint32_t l = 0; l < cfg.layers; ++l)
          layer_capacity.push_back(u32_arg(env_, arr.Get(l), ("layerCapacity[" + std::to_string(l) + "]").c_str(), 0, LH_MAX_TOKENS));
        cfg.layer_capacity = layer_capacity.data();
      }
      // ringLayers?: boolean[] (one per layer; true: a ring, kv_pool.h "Rings")
      std::vector<uint32_t> layer_ring;
      cfg.layer_ring = nullptr;
      const Napi::Value rl = o.Get("ringLayers");
      if (!rl.IsUndefined()) {
        if (!rl.IsArray()) fail(env_, LH_BAD_ARGUMENT, "ringLayers must be an array of one boolean per layer, got " + describe(rl));
        const Napi::Array arr = rl.As<Napi::Array>();
        if (arr.Length() != cfg.layers)
          fail(env_, LH_BAD_ARGUMENT, "ringLayers must have one entry per layer (" + std::to_string(cfg.layers) + "), has " + std::to_string(arr.Length()));
        for (uint32_t l = 0; l < cfg.layers; ++l) {
          const Napi::Value x = arr.Get(l);
          if (!x.IsBoolean()) fail(env_, LH_BAD_ARGUMENT, "ringLayers[" + std::to_string(l) + "] must be a boolean, got " + describe(x));
          const bool ring = x.As<Napi::Boolean>().Value();
          if (ring && (cfg.evict != 0 || cfg.layer_capacity == nullptr || cfg.layer_capacity[l] == 0))
            fail(env_, LH_BAD_ARGUMENT, "ringLayers[" + std::to_string(l) + "]: a ring needs its own layerCapacity entry (> 0) and a pool without eviction");
          layer_ring.push_back(ring ? 1u : 0u);
        }
        cfg.layer_ring = layer_ring.data();
      }
      cfg.no_huge_pages = 0;
      const Napi::Value hp = o.Get("hugePages");
      if (!hp.IsUndefined()) {
        if (!hp.IsBoolean()) fail(env_, LH_BAD_ARGUMENT, "hugePages must be a boolean, got " + describe(hp));
        cfg.no_huge_pages = hp.As<Napi::Boolean>().Value() ? 0 : 1;
      }
      const lh_status st = lh_kv_pool_init(&pool_, &cfg);
      if (st == LH_BAD_ARGUMENT && cfg.layer_capacity != nullptr)
        fail(env_, st, "budgetBytes " + std::to_string(cfg.budget_bytes) + " does not hold layerCapacity's fixed layers and a token in every shared (0) layer" +
                           (cfg.evict != 0 ? ", or a layer holds no more than sinks + recent = " + std::to_string(static_cast<uint64_t>(cfg.sinks) + cfg.recent) + " tokens"
                                           : std::string()));
      if (st == LH_BAD_ARGUMENT && cfg.evict != 0)
        fail(env_, st, "budgetBytes " + std::to_string(cfg.budget_bytes) + " holds no more than sinks + recent = " +
                           std::to_string(static_cast<uint64_t>(cfg.sinks) + cfg.recent) + " tokens of this shape: nothing could be evicted");
      if (st == LH_BAD_ARGUMENT)
        fail(env_, st, "budgetBytes " + std::to_string(cfg.budget_bytes) +
                           " holds no token of this shape, or more than 2^31-1 tokens");
      if (st == LH_OUT_OF_MEMORY)
        fail(env_, st, "cannot reserve a KV pool of " + std::to_string(cfg.budget_bytes) + " bytes");
      if (st != LH_OK) fail(env_, st, "KV pool init failed");
      if (napi_add_env_cleanup_hook(env_, &KvPool::Cleanup, this) == napi_ok) hook_ = true;
    });
  }

  ~KvPool() override { Release(); }

  static KvPool* FromValue(Napi::Env env, const Napi::Value& v, const char* name) {
    if (!v.IsObject() || !v.As<Napi::Object>().CheckTypeTag(&kKvPoolTag))
      fail(env, LH_BAD_ARGUMENT, std::string(name) + " must be a KvPool from createKvPool(), got " + describe(v));
    return KvPool::Unwrap(v.As<Napi::Object>());
  }

  // The pool, or a NATIVE_BAD_ARGUMENT error if it has been freed.
  lh_kv_pool* Live() {
    if (!lh_kv_pool_live(&pool_)) fail(env_, LH_BAD_ARGUMENT, "this KV pool has been freed");
    return &pool_;
  }

 private:
  void Release() {
    if (hook_) {
      napi_remove_env_cleanup_hook(env_, &KvPool::Cleanup, this);
      hook_ = false;
    }
    lh_kv_pool_free(&pool_);
  }

  // Environment teardown (process exit, worker exit): unmap even if JS never called free().
  static void Cleanup(void* arg) {
    KvPool* self = static_cast<KvPool*>(arg);
    self->hook_ = false;
    lh_kv_pool_free(&self->pool_);
  }

  Napi::Value CapacityTokens(const Napi::CallbackInfo& info) { return Napi::Number::New(env_, pool_.capacity); }
  // layerCapacityTokens(layer) -> the layer's own slots
  Napi::Value LayerCapacityTokens(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      return Napi::Number::New(env_, lh_kv_pool_layer_capacity(p, layer));
    });
  }
  // isRing(layer) -> whether the layer is a ring (kv_pool.h "Rings")
  Napi::Value IsRing(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      return Napi::Boolean::New(env_, lh_kv_pool_is_ring(p, layer));
    });
  }
  // ringStart(layer) -> slot of row 0 (the oldest token held); 0 for a plain layer
  Napi::Value RingStart(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      return Napi::Number::New(env_, p->ring_start[layer]);
    });
  }
  // clearLayer(layer): the layer holds no token (memory stays); non-evicting pools
  Napi::Value ClearLayer(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = SnapshotPool("clearLayer");
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const lh_status st = lh_kv_pool_clear_layer(p, layer);
      if (st != LH_OK) fail(env_, st, "clearLayer failed");
      return env_.Undefined();
    });
  }
  // exportRows(layer, first, tokens, out: Uint8Array (snapshotLayerBytes(tokens))): packs rows [first, first + tokens)
  Napi::Value ExportRows(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = SnapshotPool("exportRows");
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const uint32_t len = lh_kv_pool_length(p, layer);
      const uint32_t first = u32_arg(env_, info[1], "first", 0, len);
      const uint32_t tokens = u32_arg(env_, info[2], "tokens", 0, len - first);
      lh_kv_snapshot_layout sl;
      if (lh_kv_pool_snapshot_layout(p, tokens, &sl) != LH_OK) fail(env_, LH_INTERNAL, "snapshot layout refused checked arguments");
      Napi::Uint8Array out = bytes_arg(info[3], "exportRows", "out", sl.total, tokens);
      const lh_status st = lh_kv_pool_export_rows(p, layer, first, tokens, out.Data(), out.ByteLength());
      if (st != LH_OK) fail(env_, st, "exportRows failed");
      return env_.Undefined();
    });
  }
  Napi::Value ByteLength(const Napi::CallbackInfo& info) { return Napi::Number::New(env_, static_cast<double>(pool_.byte_length)); }
  Napi::Value BytesPerToken(const Napi::CallbackInfo& info) { return Napi::Number::New(env_, static_cast<double>(pool_.bytes_per_token)); }
  Napi::Value Layers(const Napi::CallbackInfo& info) { return Napi::Number::New(env_, pool_.layers); }
  Napi::Value KvHeads(const Napi::CallbackInfo& info) { return Napi::Number::New(env_, pool_.kv_heads); }
  Napi::Value HeadDim(const Napi::CallbackInfo& info) { return Napi::Number::New(env_, pool_.head_dim); }
  Napi::Value Freed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(env_, !lh_kv_pool_live(&pool_)); }
  Napi::Value KvType(const Napi::CallbackInfo& info) {
    return Napi::String::New(env_, kv_type_ == LH_KV_F32 ? "fp32" : kv_type_ == LH_KV_I8 ? "int8" : "fp16");
  }
  Napi::Value PartialDim(const Napi::CallbackInfo& info) { return Napi::Number::New(env_, pool_.partial_dim); }

  // setPartialProjection(layer, proj: Float32Array (kvHeads*headDim*partialDim)): sets A[:, C] of
  // every KV head of the layer and rebuilds the layer's partial rows from the stored keys.
  Napi::Value SetPartialProjection(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      if (p->partial_dim == 0) fail(env_, LH_BAD_ARGUMENT, "this KV pool has no partial key rows (partialDim 0)");
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const Napi::Float32Array proj = f32_arg(env_, info[1], "proj", static_cast<size_t>(p->kv_heads) * p->head_dim * p->partial_dim);
      const lh_status st = lh_kv_pool_set_projection(p, layer, proj.Data());
      if (st != LH_OK) fail(env_, st, "setPartialProjection failed");
      return env_.Undefined();
    });
  }

  // readPartialK(layer, kvHead, slot) -> Float32Array (partialDim)
  Napi::Value ReadPartialK(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      if (p->partial_dim == 0) fail(env_, LH_BAD_ARGUMENT, "this KV pool has no partial key rows (partialDim 0)");
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const uint32_t head = u32_arg(env_, info[1], "kvHead", 0, p->kv_heads - 1);
      const uint32_t len = lh_kv_pool_length(p, layer);
      if (len == 0) fail(env_, LH_BAD_ARGUMENT, "layer " + std::to_string(layer) + " holds no token");
      const uint32_t slot = u32_arg(env_, info[2], "slot", 0, SlotLimit(p, layer, len));
      Napi::Float32Array out = Napi::Float32Array::New(env_, p->partial_dim);
      const lh_status st = lh_kv_pool_read_partial(p, layer, head, slot, out.Data());
      if (st != LH_OK) fail(env_, st, "readPartialK failed");
      return out;
    });
  }

  // append(layer, k: Float32Array (kvHeads*headDim), v: same, position) -> slot
  Napi::Value Append(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const size_t n = static_cast<size_t>(p->kv_heads) * p->head_dim;
      const Napi::Float32Array k = f32_arg(env_, info[1], "k", n);
      const Napi::Float32Array v = f32_arg(env_, info[2], "v", n);
      const uint32_t position = u32_arg(env_, info[3], "position", 0, 0x7fffffff);
      uint32_t slot = 0;
      const lh_status st = lh_kv_pool_append(p, layer, k.Data(), v.Data(), static_cast<int32_t>(position), &slot);
      if (st == LH_POOL_FULL)
        fail(env_, st, "KV pool full: layer " + std::to_string(layer) + " holds " + std::to_string(lh_kv_pool_length(p, layer)) +
                           " of " + std::to_string(lh_kv_pool_layer_capacity(p, layer)) + " tokens");
      if (st != LH_OK) fail(env_, st, "KV pool append failed");
      return Napi::Number::New(env_, slot);
    });
  }

  // appendBatch(layer, k: Float32Array (T*kvHeads*headDim), v: same, firstPosition) -> first slot
  Napi::Value AppendBatch(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const size_t width = static_cast<size_t>(p->kv_heads) * p->head_dim;
      if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
        fail(env_, LH_BAD_ARGUMENT, "k must be a Float32Array, got " + describe(info[1]));
      const size_t n = info[1].As<Napi::TypedArray>().ElementLength();
      if (n == 0 || n % width != 0 || n / width > 0x7fffffffu)
        fail(env_, LH_BAD_ARGUMENT, "k must hold a whole number (>= 1) of tokens of " + std::to_string(width) + " floats, has " + std::to_string(n));
      const Napi::Float32Array k = f32_arg(env_, info[1], "k", n);
      const Napi::Float32Array v = f32_arg(env_, info[2], "v", n);
      const uint32_t tokens = static_cast<uint32_t>(n / width);
      const uint32_t position = u32_arg(env_, info[3], "firstPosition", 0, 0x7fffffffu - (tokens - 1));
      uint32_t slot = 0;
      const lh_status st = lh_kv_pool_append_batch(p, layer, k.Data(), v.Data(), tokens, static_cast<int32_t>(position), &slot);
      if (st == LH_POOL_FULL)
        fail(env_, st, "KV pool full: layer " + std::to_string(layer) + " holds " + std::to_string(lh_kv_pool_length(p, layer)) +
                           " of " + std::to_string(lh_kv_pool_layer_capacity(p, layer)) + " tokens, " + std::to_string(tokens) + " more do not fit");
      if (st != LH_OK) fail(env_, st, "KV pool appendBatch failed");
      return Napi::Number::New(env_, slot);
    });
  }

  // truncate(tokens): every layer keeps at most its first `tokens` slots
  Napi::Value Truncate(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t tokens = u32_arg(env_, info[0], "tokens", 0, 0x7fffffffu);
      const lh_status st = lh_kv_pool_truncate(p, tokens);
      if (st != LH_OK) fail(env_, st, "KV pool truncate failed");
      return env_.Undefined();
    });
  }

  Napi::Value Length(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      return Napi::Number::New(env_, lh_kv_pool_length(p, layer));
    });
  }

  Napi::Value Read(const Napi::CallbackInfo& info, lh_kv_part part) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const uint32_t head = u32_arg(env_, info[1], "kvHead", 0, p->kv_heads - 1);
      const uint32_t len = lh_kv_pool_length(p, layer);
      if (len == 0) fail(env_, LH_BAD_ARGUMENT, "layer " + std::to_string(layer) + " holds no token");
      const uint32_t slot = u32_arg(env_, info[2], "slot", 0, SlotLimit(p, layer, len));
      Napi::Float32Array out = Napi::Float32Array::New(env_, p->head_dim);  // (head_dim)
      const lh_status st = lh_kv_pool_read(p, part, layer, head, slot, out.Data(), nullptr);
      if (st != LH_OK) fail(env_, st, "KV pool read failed");
      return out;
    });
  }
  Napi::Value ReadK(const Napi::CallbackInfo& info) { return Read(info, LH_KV_KEY); }
  Napi::Value ReadV(const Napi::CallbackInfo& info) { return Read(info, LH_KV_VALUE); }

  Napi::Value Evicting(const Napi::CallbackInfo& info) { return Napi::Boolean::New(env_, pool_.evict != 0); }
  // hugePages: the mapping is 2 MiB aligned and madvise(MADV_HUGEPAGE) was accepted
  Napi::Value HugePages(const Napi::CallbackInfo& info) { return Napi::Boolean::New(env_, pool_.huge_pages != 0); }

  const lh_kv_evict_layer* EvictState(const Napi::CallbackInfo& info, lh_kv_pool* p) {
    if (p->evict == 0) fail(env_, LH_BAD_ARGUMENT, "this KV pool was created without eviction");
    const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
    return lh_kv_pool_evict_state(p, layer);
  }
  // evictions(layer) -> tokens evicted from the layer since creation/reset
  Napi::Value Evictions(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value { return Napi::Number::New(env_, static_cast<double>(EvictState(info, Live())->evictions)); });
  }
  Napi::Value EvictionsTotal(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      uint64_t n = 0;
      for (uint32_t l = 0; l < p->layers && p->evict != 0; ++l) n += lh_kv_pool_evict_state(p, l)->evictions;
      return Napi::Number::New(env_, static_cast<double>(n));
    });
  }
  // lastEvicted(layer) -> the position evicted by the layer's latest append, or -1
  Napi::Value LastEvicted(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value { return Napi::Number::New(env_, EvictState(info, Live())->last_evicted); });
  }
  // lastSlot(layer) -> slot of the latest appended token, or -1
  Napi::Value LastSlot(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      return Napi::Number::New(env_, lh_kv_pool_last_slot(p, layer));
    });
  }
  // counter(layer, slot) -> the slot's prefetch counter
  Napi::Value Counter(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      EvictState(info, p);
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const uint32_t slot = u32_arg(env_, info[1], "slot", 0, lh_kv_pool_layer_capacity(p, layer) - 1);
      return Napi::Number::New(env_, p->counter[lh_kv_pool_layer_slot(p, layer, slot)]);
    });
  }

  // position(layer, slot) -> the token position stored in that slot
  Napi::Value Position(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const uint32_t len = lh_kv_pool_length(p, layer);
      if (len == 0) fail(env_, LH_BAD_ARGUMENT, "layer " + std::to_string(layer) + " holds no token");
      const uint32_t slot = u32_arg(env_, info[1], "slot", 0, SlotLimit(p, layer, len));
      float row[LH_MAX_HEAD_DIM];
      int32_t pos = 0;
      const lh_status st = lh_kv_pool_read(p, LH_KV_KEY, layer, 0, slot, row, &pos);
      if (st != LH_OK) fail(env_, st, "KV pool read failed");
      return Napi::Number::New(env_, pos);
    });
  }

  Napi::Value Reset(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      const lh_status st = lh_kv_pool_reset(Live());
      if (st != LH_OK) fail(env_, st, "KV pool reset failed");
      return env_.Undefined();
    });
  }

  // The largest slot a read may name: length − 1, or a ring's capacity − 1 (its rows wrap; the
  // core refuses a slot that holds no token).
  static uint32_t SlotLimit(const lh_kv_pool* p, uint32_t layer, uint32_t len) {
    return lh_kv_pool_is_ring(p, layer) ? lh_kv_pool_layer_capacity(p, layer) - 1 : len - 1;
  }

  // ---- snapshots (kv_pool.h "snapshots": the section layout) ----

  // The live pool for a snapshot call: refuses evicting pools, whose slots are not in position order.
  lh_kv_pool* SnapshotPool(const char* method) {
    lh_kv_pool* p = Live();
    if (p->evict != 0)
      fail(env_, LH_BAD_ARGUMENT, std::string(method) + ": this KV pool evicts (created with `eviction`); snapshots need a pool without eviction, whose slots are in position order");
    return p;
  }

  // A Uint8Array of exactly `bytes` bytes (any offset into its buffer: the core copies bytewise).
  Napi::Uint8Array bytes_arg(const Napi::Value& v, const char* method, const char* name, uint64_t bytes, uint32_t tokens) {
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      fail(env_, LH_BAD_ARGUMENT, std::string(method) + ": " + name + " must be a Uint8Array, got " + describe(v));
    Napi::Uint8Array a = v.As<Napi::Uint8Array>();
    if (a.ByteLength() != bytes)
      fail(env_, LH_BAD_ARGUMENT, std::string(method) + ": " + name + " must be exactly snapshotLayerBytes(" + std::to_string(tokens) +
                                      ") = " + std::to_string(bytes) + " bytes, has " + std::to_string(a.ByteLength()));
    return a;
  }

  // snapshotLayerBytes(tokens) -> bytes of one layer's section for `tokens` slots (0..capacity)
  Napi::Value SnapshotLayerBytes(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = Live();
      const uint32_t tokens = u32_arg(env_, info[0], "tokens", 0, p->capacity);
      lh_kv_snapshot_layout sl;
      if (lh_kv_pool_snapshot_layout(p, tokens, &sl) != LH_OK) fail(env_, LH_INTERNAL, "snapshot layout refused checked arguments");
      return Napi::Number::New(env_, static_cast<double>(sl.total));  // <= byte_length < 2^53
    });
  }

  // exportLayer(layer, tokens, out: Uint8Array (snapshotLayerBytes(tokens))): packs slots [0, tokens)
  Napi::Value ExportLayer(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = SnapshotPool("exportLayer");
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const uint32_t len = lh_kv_pool_length(p, layer);
      const Napi::Value tv = info[1];
      if (tv.IsNumber() && tv.As<Napi::Number>().DoubleValue() > len && tv.As<Napi::Number>().DoubleValue() == std::floor(tv.As<Napi::Number>().DoubleValue()))
        fail(env_, LH_BAD_ARGUMENT, "exportLayer: tokens " + describe(tv) + " is more than layer " + std::to_string(layer) + " holds (" + std::to_string(len) + ")");
      const uint32_t tokens = u32_arg(env_, tv, "tokens", 0, len);
      lh_kv_snapshot_layout sl;
      if (lh_kv_pool_snapshot_layout(p, tokens, &sl) != LH_OK) fail(env_, LH_INTERNAL, "snapshot layout refused checked arguments");
      Napi::Uint8Array out = bytes_arg(info[2], "exportLayer", "out", sl.total, tokens);
      const lh_status st = lh_kv_pool_export_layer(p, layer, tokens, out.Data(), out.ByteLength());
      if (st != LH_OK) fail(env_, st, "exportLayer failed");
      return env_.Undefined();
    });
  }

  // importLayer(layer, tokens, data: Uint8Array (snapshotLayerBytes(tokens))): fills an empty layer
  Napi::Value ImportLayer(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_kv_pool* p = SnapshotPool("importLayer");
      const uint32_t layer = u32_arg(env_, info[0], "layer", 0, p->layers - 1);
      const uint32_t len = lh_kv_pool_length(p, layer);
      if (len != 0)
        fail(env_, LH_BAD_ARGUMENT, "importLayer: layer " + std::to_string(layer) + " holds " + std::to_string(len) +
                                        " tokens; import needs an empty layer (reset() or truncate(0) first)");
      const Napi::Value tv = info[1];
      const uint32_t cap = lh_kv_pool_layer_capacity(p, layer);
      if (tv.IsNumber() && tv.As<Napi::Number>().DoubleValue() > cap && tv.As<Napi::Number>().DoubleValue() == std::floor(tv.As<Napi::Number>().DoubleValue()))
        fail(env_, LH_BAD_ARGUMENT, "importLayer: tokens " + describe(tv) + " is more than the pool's capacity (" + std::to_string(cap) + " tokens in layer " +
                                        std::to_string(layer) + ")");
      const uint32_t tokens = u32_arg(env_, tv, "tokens", 0, cap);
      lh_kv_snapshot_layout sl;
      if (lh_kv_pool_snapshot_layout(p, tokens, &sl) != LH_OK) fail(env_, LH_INTERNAL, "snapshot layout refused checked arguments");
      const Napi::Uint8Array data = bytes_arg(info[2], "importLayer", "data", sl.total, tokens);
      const int64_t bad = tokens == 0 ? -1 : lh_kv_snapshot_bad_position(data.Data() + sl.pos, tokens);
      if (bad >= 0) {
        int32_t x = 0;
        std::memcpy(&x, data.Data() + sl.pos + static_cast<size_t>(bad) * sizeof x, sizeof x);
        fail(env_, LH_BAD_ARGUMENT, "importLayer: position " + std::to_string(x) + " of slot " + std::to_string(bad) +
                                        (x < 0 ? " is negative" : " does not increase on the slot before it") +
                                        "; positions must be >= 0 and strictly increasing (nothing was imported)");
      }
      const lh_status st = lh_kv_pool_import_layer(p, layer, tokens, data.Data(), data.ByteLength());
      if (st != LH_OK) fail(env_, st, "importLayer failed");
      return env_.Undefined();
    });
  }

  // free() / dispose(): unmap now. Idempotent.
  Napi::Value Free(const Napi::CallbackInfo& info) {
    Release();
    return env_.Undefined();
  }

  Napi::Env env_;
  lh_kv_pool pool_{};
  uint32_t kv_type_ = LH_KV_F16;
  bool hook_ = false;
};

// ---------------------------------------------------------------------------------------------
// MappedFile
// ---------------------------------------------------------------------------------------------
// Shared by the wrapper and (external case) the ArrayBuffer's finalizer; whichever goes last
// deletes it. Both run on the JS thread.
struct Mapping {
  lh_mapped_file file{};
  int owners = 0;
};

void release_mapping(Mapping* m) {
  if (--m->owners == 0) {
    lh_mapped_file_close(&m->file);
    delete m;
  }
}

class MappedFile : public Napi::ObjectWrap<MappedFile> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "MappedFile",
                       {
                           InstanceAccessor<&MappedFile::Buffer>("buffer"),
                           InstanceAccessor<&MappedFile::ByteLengthGetter>("byteLength"),
                           InstanceAccessor<&MappedFile::External>("external"),
                           InstanceAccessor<&MappedFile::Closed>("closed"),
                           InstanceMethod<&MappedFile::Close>("close"),
                           InstanceMethod<&MappedFile::Release>("release"),
                           InstanceMethod<&MappedFile::Own>("own"),
                       });
  }

  // new MappedFile(path, { copy?: boolean })
  explicit MappedFile(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MappedFile>(info), env_(info.Env()) {
    guarded(env_, [&] {
      info.This().As<Napi::Object>().TypeTag(&kMappedFileTag);
      if (!info[0].IsString()) fail(env_, LH_BAD_ARGUMENT, "path must be a string, got " + describe(info[0]));
      const std::string path = info[0].As<Napi::String>().Utf8Value();
      if (path.empty() || path.find('\0') != std::string::npos) fail(env_, LH_BAD_ARGUMENT, "path must be a non-empty string without NUL");
      bool force_copy = false;
      if (!info[1].IsUndefined()) force_copy = object_arg(env_, info[1], "options").Get("copy").ToBoolean().Value();

      lh_mapped_file file;
      const lh_status st = lh_mapped_file_open(&file, path.c_str());
      if (st != LH_OK) {
        const int err = file.error;
        Napi::Object details = Napi::Object::New(env_);
        details.Set("path", path);
        details.Set("errno", err);
        throw make_error(env_, st, "cannot map " + path + ": " + (err != 0 ? std::strerror(err) : lh_status_name(st)), details);
      }
      mapping_ = new (std::nothrow) Mapping();
      if (mapping_ == nullptr) {
        lh_mapped_file_close(&file);
        fail(env_, LH_OUT_OF_MEMORY, "out of memory inside the native addon");
      }
      mapping_->file = file;
      mapping_->owners = 1;  // this wrapper
      byte_length_ = file.size;

      napi_value ab = nullptr;
      if (byte_length_ > 0 && !force_copy) {
        // Owned by the buffer too: its finalizer unmaps if nothing else did.
        mapping_->owners += 1;
        const napi_status s = napi_create_external_arraybuffer(env_, mapping_->file.data, byte_length_, &MappedFile::FinalizeBuffer,
                                                               mapping_, &ab);
        if (s == napi_ok) {
          external_ = true;
        } else {
          // napi_no_external_buffers_allowed under Electron's V8 memory cage: copy instead.
          mapping_->owners -= 1;
          ab = nullptr;
          if (env_.IsExceptionPending()) env_.GetAndClearPendingException();
        }
      }
      if (ab == nullptr) {
        void* dst = nullptr;
        if (napi_create_arraybuffer(env_, byte_length_, &dst, &ab) != napi_ok) {
          if (env_.IsExceptionPending()) env_.GetAndClearPendingException();
          release_mapping(mapping_);  // unmaps and deletes: the constructor's destructor never runs
          mapping_ = nullptr;
          fail(env_, LH_OUT_OF_MEMORY, "cannot allocate " + std::to_string(byte_length_) + " bytes to copy " + path);
        }
        if (byte_length_ > 0) std::memcpy(dst, mapping_->file.data, byte_length_);
        lh_mapped_file_close(&mapping_->file);  // the copy is all JS sees; keep no mapping
      }
      buffer_ = Napi::Persistent(Napi::ArrayBuffer(env_, ab));
      if (mapping_->file.data != nullptr && napi_add_env_cleanup_hook(env_, &MappedFile::Cleanup, this) == napi_ok) hook_ = true;
    });
  }

  ~MappedFile() override {
    RemoveHook();
    buffer_.Reset();
    if (mapping_ != nullptr) release_mapping(mapping_);  // the buffer may still own the mapping
    mapping_ = nullptr;
  }

 private:
  static void FinalizeBuffer(napi_env, void*, void* hint) { release_mapping(static_cast<Mapping*>(hint)); }

  static void Cleanup(void* arg) {
    MappedFile* self = static_cast<MappedFile*>(arg);
    self->hook_ = false;
    if (self->mapping_ != nullptr) lh_mapped_file_close(&self->mapping_->file);
  }

  void RemoveHook() {
    if (hook_) {
      napi_remove_env_cleanup_hook(env_, &MappedFile::Cleanup, this);
      hook_ = false;
    }
  }

  Napi::Value Buffer(const Napi::CallbackInfo& info) { return buffer_.IsEmpty() ? env_.Undefined() : buffer_.Value(); }
  Napi::Value ByteLengthGetter(const Napi::CallbackInfo& info) { return Napi::Number::New(env_, static_cast<double>(closed_ ? 0 : byte_length_)); }
  Napi::Value External(const Napi::CallbackInfo& info) { return Napi::Boolean::New(env_, external_); }
  Napi::Value Closed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(env_, closed_); }

  // close(): detach the ArrayBuffer first (JS now sees byteLength 0), then unmap. Idempotent.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      if (closed_) return env_.Undefined();
      if (!buffer_.IsEmpty()) {
        Napi::ArrayBuffer ab = buffer_.Value();
        if (napi_detach_arraybuffer(env_, ab) != napi_ok) fail(env_, LH_INTERNAL, "cannot detach the mapped file's ArrayBuffer");
      }
      closed_ = true;
      RemoveHook();
      if (mapping_ != nullptr) lh_mapped_file_close(&mapping_->file);
      return env_.Undefined();
    });
  }

  // release(offset, length) -> bytes advised: drops the pages of that range from the process (see
  // lh_mapped_file_release); they fault in again when read. 0, doing nothing, for a copied file.
  Napi::Value Release(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      if (closed_) fail(env_, LH_BAD_ARGUMENT, "release: the file is closed");
      const double offset = integer_arg(env_, info[0], "offset", 0, static_cast<double>(byte_length_));
      const double length = integer_arg(env_, info[1], "length", 0, static_cast<double>(byte_length_) - offset);
      if (!external_ || mapping_ == nullptr || mapping_->file.data == nullptr) return Napi::Number::New(env_, 0);
      size_t released = 0;
      const lh_status st = lh_mapped_file_release(&mapping_->file, static_cast<size_t>(offset), static_cast<size_t>(length), &released);
      if (st != LH_OK) fail(env_, st, std::string("release: madvise failed: ") + std::strerror(mapping_->file.error));
      return Napi::Number::New(env_, static_cast<double>(released));
    });
  }

  // own(offset, length, threads = 1) -> bytes owned: the process's own anonymous copy of that
  // range's pages, same bytes at the same addresses (see lh_mapped_file_own). 0, doing nothing, for
  // a copied file (its bytes are V8's already).
  Napi::Value Own(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      if (closed_) fail(env_, LH_BAD_ARGUMENT, "own: the file is closed");
      const double offset = integer_arg(env_, info[0], "offset", 0, static_cast<double>(byte_length_));
      const double length = integer_arg(env_, info[1], "length", 0, static_cast<double>(byte_length_) - offset);
      const double threads = info[2].IsUndefined() ? 1 : integer_arg(env_, info[2], "threads", 1, 256);
      if (!external_ || mapping_ == nullptr || mapping_->file.data == nullptr) return Napi::Number::New(env_, 0);
      size_t owned = 0;
      const lh_status st = lh_mapped_file_own(&mapping_->file, static_cast<size_t>(offset), static_cast<size_t>(length), static_cast<unsigned>(threads), &owned);
      if (st != LH_OK) fail(env_, st, std::string("own: madvise failed: ") + std::strerror(mapping_->file.error));
      return Napi::Number::New(env_, static_cast<double>(owned));
    });
  }

  Napi::Env env_;
  Mapping* mapping_ = nullptr;
  Napi::Reference<Napi::ArrayBuffer> buffer_;
  size_t byte_length_ = 0;
  bool external_ = false;
  bool closed_ = false;
  bool hook_ = false;
};

// ---------------------------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------------------------
// attend(pool, layer, q: Float32Array (heads*headDim), heads, out: Float32Array (heads*headDim))
// attendCausal(pool, layer, q: Float32Array (T*heads*headDim), heads, out: same length): the
// last T tokens of the layer are the queries' own, query i sees slots 0 .. length - T + i.
enum class AttendKind { kDecode, kDecodeRef, kCausal, kCausalRef };

Napi::Value Attend(const Napi::CallbackInfo& info, AttendKind kind) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    KvPool* wrap = KvPool::FromValue(env, info[0], "pool");
    lh_kv_pool* p = wrap->Live();
    const uint32_t layer = u32_arg(env, info[1], "layer", 0, p->layers - 1);
    const uint32_t heads = u32_arg(env, info[3], "heads", 1, LH_MAX_HEADS);
    if (heads % p->kv_heads != 0)
      fail(env, LH_BAD_ARGUMENT, "heads (" + std::to_string(heads) + ") must be a multiple of kvHeads (" + std::to_string(p->kv_heads) + ")");
    const size_t width = static_cast<size_t>(heads) * p->head_dim;
    const bool causal = kind == AttendKind::kCausal || kind == AttendKind::kCausalRef;
    const uint32_t tokens = lh_kv_pool_length(p, layer);
    if (tokens == 0) fail(env, LH_BAD_ARGUMENT, "layer " + std::to_string(layer) + " holds no token to attend to");
    size_t n = width;
    if (causal) {
      if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
        fail(env, LH_BAD_ARGUMENT, "q must be a Float32Array, got " + describe(info[2]));
      n = info[2].As<Napi::TypedArray>().ElementLength();
      if (n == 0 || n % width != 0 || n / width > tokens)
        fail(env, LH_BAD_ARGUMENT, "q must hold 1.." + std::to_string(tokens) + " queries of " + std::to_string(width) +
                                       " floats (the layer's last tokens), has " + std::to_string(n) + " floats");
    }
    const Napi::Float32Array q = f32_arg(env, info[2], "q", n);
    Napi::Float32Array out = f32_arg(env, info[4], "out", n);
    lh_attention_args a{};
    a.q = q.Data();
    a.k = lh_kv_pool_k_rows(p, layer);
    a.v = lh_kv_pool_v_rows(p, layer);
    a.out = out.Data();
    a.head_stride = lh_kv_pool_head_stride(p, layer);
    a.tokens = tokens;
    a.heads = heads;
    a.kv_heads = p->kv_heads;
    a.head_dim = p->head_dim;
    a.kv_type = p->kv_type;
    a.k_scale = lh_kv_pool_k_scales(p, layer);  // int8: (kv_head, capacity); null otherwise
    a.v_scale = lh_kv_pool_v_scales(p, layer);
    const uint32_t queries = static_cast<uint32_t>(n / width);
    // the trailing attention block: attendCausal's 7th argument (after threads), the others' 6th
    const lh_attention_params attn = attention_arg(env, arg_or_undefined(info, kind == AttendKind::kCausal ? 6 : 5), p->head_dim, heads);
    lh_attention_args_set_params(&a, &attn);
    if (a.window != 0) {
      // decode: the query is the layer's latest token; a chunk's queries are its last `queries` slots,
      // each at its own slot's position (the kernel reads those)
      a.positions = lh_kv_pool_positions(p, layer);  // (kv_head, capacity), indexed like the rows
      a.query_position = a.positions[queries == 1 ? lh_kv_pool_last_slot(p, layer) : static_cast<int32_t>(tokens - 1)];
    }
    if (lh_kv_pool_is_ring(p, layer)) {
      // a ring's rows oldest first (attention.h "ring"); a ring layer is a window layer
      if (a.window == 0) fail(env, LH_BAD_ARGUMENT, "layer " + std::to_string(layer) + " is a ring: attention over it needs its window");
      a.ring_start = p->ring_start[layer];
      a.ring_slots = lh_kv_pool_layer_capacity(p, layer);
    }
    // attendCausal's optional 6th argument: threads for the chunk's queries, or for one query's KV
    // heads (default 1)
    const uint32_t threads = kind == AttendKind::kCausal && info.Length() > 5 && !info[5].IsUndefined()
                                 ? u32_arg(env, info[5], "threads", 1, LH_MAX_ATTENTION_THREADS)
                                 : 1;
    lh_status st = LH_INTERNAL;
    switch (kind) {
      case AttendKind::kDecode: st = lh_attention_decode(&a); break;
      case AttendKind::kDecodeRef: st = lh_attention_decode_ref(&a); break;
      case AttendKind::kCausal:
        if (queries == 1 && threads > 1) {
          // a decode step: its KV heads over the shared pool's threads, which the dense stage just
          // ran on (and may still spin), not threads started for the call (attention.h)
          lh_shared_pool_reserve(threads);  // no memory for it: the pool stays smaller, the work is still done
          lh_worker_pool* pool = lh_shared_pool_lock();
          st = lh_attention_decode_pool(&a, pool, lh_attention_decode_pool_threads_used(&a, threads));
          lh_shared_pool_unlock();
        } else {
          st = lh_attention_prefill_threads(&a, queries, threads);
        }
        break;
      case AttendKind::kCausalRef: st = lh_attention_prefill_ref(&a, queries); break;
    }
    if (st == LH_BAD_ARGUMENT) fail(env, st, "attend: q and out must not share memory");
    if (st != LH_OK) fail(env, st, "attend failed");
    return env.Undefined();
  });
}

// ---------------------------------------------------------------------------------------------
// Comparison policies: attention over per-KV-head slot lists, full attention logits
// ---------------------------------------------------------------------------------------------
// attendSlots(pool, layer, q (heads*headDim), heads, slots: Int32Array, offsets: Int32Array (kvHeads+1), out)
Napi::Value AttendSlots(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    KvPool* wrap = KvPool::FromValue(env, info[0], "pool");
    lh_kv_pool* p = wrap->Live();
    const uint32_t layer = u32_arg(env, info[1], "layer", 0, p->layers - 1);
    const uint32_t heads = u32_arg(env, info[3], "heads", 1, LH_MAX_HEADS);
    if (heads % p->kv_heads != 0) fail(env, LH_BAD_ARGUMENT, "heads must be a multiple of kvHeads");
    const size_t width = static_cast<size_t>(heads) * p->head_dim;
    const Napi::Float32Array q = f32_arg(env, info[2], "q", width);
    for (int i : {4, 5}) {
      if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
        fail(env, LH_BAD_ARGUMENT, std::string(i == 4 ? "slots" : "offsets") + " must be an Int32Array, got " + describe(info[i]));
    }
    const Napi::Int32Array slots = info[4].As<Napi::Int32Array>();
    const Napi::Int32Array offsets = info[5].As<Napi::Int32Array>();
    if (offsets.ElementLength() != p->kv_heads + 1) fail(env, LH_BAD_ARGUMENT, "offsets must have kvHeads + 1 elements");
    Napi::Float32Array out = f32_arg(env, info[6], "out", width);
    std::vector<uint32_t> off(p->kv_heads + 1);
    for (uint32_t g = 0; g <= p->kv_heads; ++g) {
      const int32_t o = offsets[g];
      if (o < 0 || static_cast<size_t>(o) > slots.ElementLength() || (g > 0 && o <= static_cast<int32_t>(off[g - 1])))
        fail(env, LH_BAD_ARGUMENT, "offsets must start at 0, increase strictly (no empty list) and end within slots");
      off[g] = static_cast<uint32_t>(o);
    }
    if (off[0] != 0) fail(env, LH_BAD_ARGUMENT, "offsets[0] must be 0");
    // optional 8th argument: threads over the KV heads (default 1)
    const uint32_t threads = info.Length() > 7 && !info[7].IsUndefined() ? u32_arg(env, info[7], "threads", 1, LH_MAX_ATTENTION_THREADS) : 1;
    const lh_attention_params attn = attention_arg(env, arg_or_undefined(info, 8), p->head_dim, heads);
    // the listed rows are read in place (no scratch)
    const lh_status st = lh_attention_slots(p, layer, q.Data(), heads, slots.Data(), off.data(), &attn, out.Data(), threads);
    if (st != LH_OK) fail(env, st, "attendSlots: a slot outside the layer's tokens, or q and out share memory");
    return env.Undefined();
  });
}

// attentionScores(pool, layer, q (heads*headDim), heads, out (heads*tokens), tokens = length(layer))
Napi::Value AttentionScores(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    KvPool* wrap = KvPool::FromValue(env, info[0], "pool");
    lh_kv_pool* p = wrap->Live();
    const uint32_t layer = u32_arg(env, info[1], "layer", 0, p->layers - 1);
    const uint32_t heads = u32_arg(env, info[3], "heads", 1, LH_MAX_HEADS);
    if (heads % p->kv_heads != 0) fail(env, LH_BAD_ARGUMENT, "heads must be a multiple of kvHeads");
    const uint32_t len = lh_kv_pool_length(p, layer);
    const uint32_t tokens = info[5].IsUndefined() ? len : u32_arg(env, info[5], "tokens", 0, len);
    const Napi::Float32Array q = f32_arg(env, info[2], "q", static_cast<size_t>(heads) * p->head_dim);
    Napi::Float32Array out = f32_arg(env, info[4], "out", static_cast<size_t>(heads) * tokens);
    const lh_attention_params attn = attention_arg(env, arg_or_undefined(info, 6), p->head_dim, heads);
    const lh_status st = lh_attention_scores(p, layer, q.Data(), heads, tokens, &attn, out.Data());
    if (st != LH_OK) fail(env, st, "attentionScores failed");
    return env.Undefined();
  });
}

// gatherRows(pool, layer, heads: Int32Array, slots: Int32Array, dest: Int32Array, count, kOut, vOut) -> bytes
// The offload path's upload (row_gather.h): kOut/vOut are Uint16Array (fp16 pools: raw bits) or
// Float32Array (fp32 and int8 pools), a whole number of headDim rows each, the same length.
Napi::Value GatherRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    KvPool* wrap = KvPool::FromValue(env, info[0], "pool");
    lh_kv_pool* p = wrap->Live();
    const uint32_t layer = u32_arg(env, info[1], "layer", 0, p->layers - 1);
    const char* names[3] = {"heads", "slots", "dest"};
    for (int i = 2; i <= 4; ++i) {
      if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
        fail(env, LH_BAD_ARGUMENT, std::string(names[i - 2]) + " must be an Int32Array, got " + describe(info[i]));
    }
    const Napi::Int32Array heads = info[2].As<Napi::Int32Array>(), slots = info[3].As<Napi::Int32Array>(), dest = info[4].As<Napi::Int32Array>();
    const size_t most = std::min(heads.ElementLength(), std::min(slots.ElementLength(), dest.ElementLength()));
    const uint32_t count = u32_arg(env, info[5], "count", 0, static_cast<uint32_t>(std::min<size_t>(most, 0x7fffffffu)));
    const bool f16 = lh_row_buffer_type(p->kv_type) == LH_KV_F16;
    const napi_typedarray_type want = f16 ? napi_uint16_array : napi_float32_array;
    for (int i : {6, 7}) {
      if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != want)
        fail(env, LH_BAD_ARGUMENT, std::string(i == 6 ? "kOut" : "vOut") + (f16 ? " must be a Uint16Array (fp16 pool)" : " must be a Float32Array") + ", got " + describe(info[i]));
    }
    Napi::TypedArray k = info[6].As<Napi::TypedArray>(), v = info[7].As<Napi::TypedArray>();
    if (k.ElementLength() != v.ElementLength() || k.ElementLength() % p->head_dim != 0)
      fail(env, LH_BAD_ARGUMENT, "kOut and vOut must have the same length, a multiple of headDim");
    void* kd = static_cast<char*>(k.ArrayBuffer().Data()) + k.ByteOffset();
    void* vd = static_cast<char*>(v.ArrayBuffer().Data()) + v.ByteOffset();
    const char* kb = static_cast<const char*>(kd);
    const char* vb = static_cast<const char*>(vd);
    if (k.ByteLength() > 0 && kb < vb + v.ByteLength() && vb < kb + k.ByteLength()) fail(env, LH_BAD_ARGUMENT, "kOut and vOut must not share memory");
    uint64_t bytes = 0;
    const lh_status st = lh_kv_pool_gather_rows(p, layer, count, heads.Data(), slots.Data(), dest.Data(), kd, vd, k.ElementLength() / p->head_dim, &bytes);
    if (st != LH_OK) fail(env, st, "gatherRows: a kv head, slot (< length(layer)) or dest row (< rows of kOut) out of range");
    return Napi::Number::New(env, static_cast<double>(bytes));
  });
}

// ---------------------------------------------------------------------------------------------
// Comparison policies: selection over the pool (policy_select.h). Outputs: slots (Int32Array, room
// for every head's list) and offsets (Int32Array, kvHeads + 1); each returns the total count.
// ---------------------------------------------------------------------------------------------
template <class A>
A typed_arg(Napi::Env env, const Napi::Value& v, const char* name, napi_typedarray_type type, const char* type_name, size_t min_length) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type)
    fail(env, LH_BAD_ARGUMENT, std::string(name) + " must be a" + type_name + ", got " + describe(v));
  A a = v.As<A>();
  if (a.ElementLength() < min_length)
    fail(env, LH_BAD_ARGUMENT, std::string(name) + " must have at least " + std::to_string(min_length) + " elements, has " + std::to_string(a.ElementLength()));
  return a;
}
Napi::Int32Array i32_out(Napi::Env env, const Napi::Value& v, const char* name, size_t min_length) {
  return typed_arg<Napi::Int32Array>(env, v, name, napi_int32_array, "n Int32Array", min_length);
}

// An output array's data, or a stand-in where it is empty (an empty typed array has no data pointer,
// and a selection that writes nothing must not be refused for it).
int32_t* out_data(Napi::Int32Array a) {
  static thread_local int32_t none[1];
  return a.ElementLength() > 0 ? a.Data() : none;
}

// scratch of the selection functions: grows to the largest N seen on this thread, then stays
uint8_t* select_scratch(size_t n, size_t* bytes) {
  static thread_local std::vector<uint8_t> scratch;
  const size_t need = lh_select_scratch_bytes(n);
  if (scratch.size() < need) scratch.resize(need);
  *bytes = scratch.size();
  return scratch.data();
}

// offsets (kv_heads + 1, uint32) -> the caller's Int32Array
void copy_offsets(const std::vector<uint32_t>& off, Napi::Int32Array out) {
  for (size_t g = 0; g < off.size(); ++g) out[g] = static_cast<int32_t>(off[g]);
}

// selectStreaming(N, sinks, window, out: Int32Array (>= N)) -> count
Napi::Value SelectStreaming(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint32_t N = u32_arg(env, info[0], "N", 0, LH_MAX_TOKENS);
    const uint32_t sinks = u32_arg(env, info[1], "sinks", 0, LH_MAX_TOKENS);
    const uint32_t window = u32_arg(env, info[2], "window", 0, LH_MAX_TOKENS);
    Napi::Int32Array out = i32_out(env, info[3], "out", N);
    return Napi::Number::New(env, static_cast<double>(lh_select_streaming(N, sinks, window, out_data(out))));
  });
}

// selectH2o(acc: Float32Array (kvHeads*C), live: Uint8Array (kvHeads*C), kvHeads, C, N, budget, recent, slots (>= kvHeads*budget), offsets, threads?)
Napi::Value SelectH2o(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint32_t kvh = u32_arg(env, info[2], "kvHeads", 1, LH_MAX_KV_HEADS);
    const uint32_t C = u32_arg(env, info[3], "C", 1, LH_MAX_TOKENS);
    const uint32_t N = u32_arg(env, info[4], "N", 0, C);
    const uint32_t budget = u32_arg(env, info[5], "budget", 0, N);
    const uint32_t recent = u32_arg(env, info[6], "recent", 0, budget);
    const size_t cells = static_cast<size_t>(kvh) * C;
    const Napi::Float32Array acc = f32_arg(env, info[0], "acc", cells);
    Napi::Uint8Array live = typed_arg<Napi::Uint8Array>(env, info[1], "live", napi_uint8_array, " Uint8Array", cells);
    if (live.ElementLength() != cells) fail(env, LH_BAD_ARGUMENT, "live must have kvHeads * C elements");
    Napi::Int32Array slots = i32_out(env, info[7], "slots", static_cast<size_t>(kvh) * budget);
    Napi::Int32Array offsets = i32_out(env, info[8], "offsets", kvh + 1);
    const uint32_t threads = info.Length() > 9 && !info[9].IsUndefined() ? u32_arg(env, info[9], "threads", 1, LH_MAX_RANGE_THREADS) : 1;
    if (threads > 1) lh_shared_pool_reserve(threads);  // no memory for it: the pool stays smaller, the work is still done
    std::vector<uint32_t> off(kvh + 1);
    static thread_local std::vector<uint8_t> scratch;  // one slice per part
    const size_t need = lh_select_scratch_bytes(N) * std::min(threads, kvh);
    if (scratch.size() < need) scratch.resize(need);
    const lh_status st = lh_select_h2o(acc.Data(), live.Data(), kvh, C, N, budget, recent, out_data(slots), off.data(), scratch.data(), scratch.size(), threads);
    if (st != LH_OK) fail(env, st, "selectH2o: bad arguments");
    copy_offsets(off, offsets);
    return Napi::Number::New(env, off[kvh]);
  });
}

// h2oAccumulate(pool, layer, q (heads*headDim), heads, acc: Float32Array (kvHeads*C), C, n, slots?: Int32Array, offsets?: Int32Array, threads?)
Napi::Value H2oAccumulate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    KvPool* wrap = KvPool::FromValue(env, info[0], "pool");
    lh_kv_pool* p = wrap->Live();
    const uint32_t layer = u32_arg(env, info[1], "layer", 0, p->layers - 1);
    const uint32_t heads = u32_arg(env, info[3], "heads", 1, LH_MAX_HEADS);
    if (heads % p->kv_heads != 0) fail(env, LH_BAD_ARGUMENT, "heads must be a multiple of kvHeads");
    const Napi::Float32Array q = f32_arg(env, info[2], "q", static_cast<size_t>(heads) * p->head_dim);
    const uint32_t C = u32_arg(env, info[5], "C", 1, LH_MAX_TOKENS);
    Napi::Float32Array acc = f32_arg(env, info[4], "acc", static_cast<size_t>(p->kv_heads) * C);
    const uint32_t n = u32_arg(env, info[6], "n", 0, std::min(C, lh_kv_pool_length(p, layer)));
    const int32_t* slots = nullptr;
    std::vector<uint32_t> off;
    if (!info[7].IsUndefined()) {
      const Napi::Int32Array sl = i32_out(env, info[7], "slots", 0);
      const Napi::Int32Array of = i32_out(env, info[8], "offsets", p->kv_heads + 1);
      if (of.ElementLength() != p->kv_heads + 1) fail(env, LH_BAD_ARGUMENT, "offsets must have kvHeads + 1 elements");
      off.resize(p->kv_heads + 1);
      for (uint32_t g = 0; g <= p->kv_heads; ++g) {
        const int32_t o = of[g];
        if (o < 0 || static_cast<size_t>(o) > sl.ElementLength() || (g > 0 && o < static_cast<int32_t>(off[g - 1])) || (g == 0 && o != 0))
          fail(env, LH_BAD_ARGUMENT, "offsets must start at 0, not decrease and end within slots");
        off[g] = static_cast<uint32_t>(o);
      }
      slots = sl.Data();
    }
    size_t longest = n;
    if (slots != nullptr) {
      longest = 0;
      for (uint32_t g = 0; g < p->kv_heads; ++g) longest = std::max<size_t>(longest, off[g + 1] - off[g]);
    }
    const uint32_t threads = info.Length() > 9 && !info[9].IsUndefined() ? u32_arg(env, info[9], "threads", 1, LH_MAX_RANGE_THREADS) : 1;
    if (threads > 1) lh_shared_pool_reserve(threads);
    // per part: one head's logits over its list and their exps; grows, then stays
    static thread_local std::vector<float> logits;
    const size_t need = lh_h2o_scratch_floats(longest) * std::min(threads, p->kv_heads);
    if (logits.size() < need) logits.resize(need);
    const lh_attention_params attn = attention_arg(env, arg_or_undefined(info, 10), p->head_dim, heads);
    const lh_status st = lh_h2o_accumulate(p, layer, q.Data(), heads, acc.Data(), C, n, slots, slots == nullptr ? nullptr : off.data(),
                                           &attn, logits.data(), logits.size(), threads);
    if (st != LH_OK) fail(env, st, "h2oAccumulate: a slot outside the layer's tokens or C");
    return env.Undefined();
  });
}

// questExtendBounds(pool, layer, pageMin, pageMax (kvHeads*maxPages*headDim), maxPages, pageSize, from, to)
Napi::Value QuestExtendBounds(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    KvPool* wrap = KvPool::FromValue(env, info[0], "pool");
    lh_kv_pool* p = wrap->Live();
    const uint32_t layer = u32_arg(env, info[1], "layer", 0, p->layers - 1);
    const uint32_t max_pages = u32_arg(env, info[4], "maxPages", 1, LH_MAX_TOKENS);
    const uint32_t page_size = u32_arg(env, info[5], "pageSize", 1, LH_MAX_TOKENS);
    const uint32_t to = u32_arg(env, info[7], "to", 0, lh_kv_pool_length(p, layer));
    const uint32_t from = u32_arg(env, info[6], "from", 0, to);
    const size_t n = static_cast<size_t>(p->kv_heads) * max_pages * p->head_dim;
    Napi::Float32Array mn = f32_arg(env, info[2], "pageMin", n);
    Napi::Float32Array mx = f32_arg(env, info[3], "pageMax", n);
    const lh_status st = lh_quest_extend_bounds(p, layer, mn.Data(), mx.Data(), max_pages, page_size, from, to);
    if (st != LH_OK) fail(env, st, "questExtendBounds: a slot's page beyond maxPages");
    return env.Undefined();
  });
}

// selectQuest(q (heads*d), heads, kvHeads, d, pageMin, pageMax (kvHeads*maxPages*d), maxPages, N, pageSize, topPages, slots, offsets, threads?)
Napi::Value SelectQuest(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint32_t heads = u32_arg(env, info[1], "heads", 1, LH_MAX_HEADS);
    const uint32_t kvh = u32_arg(env, info[2], "kvHeads", 1, LH_MAX_KV_HEADS);
    const uint32_t d = u32_arg(env, info[3], "d", 1, LH_MAX_HEAD_DIM);
    if (heads % kvh != 0) fail(env, LH_BAD_ARGUMENT, "heads must be a multiple of kvHeads");
    const uint32_t max_pages = u32_arg(env, info[6], "maxPages", 1, LH_MAX_TOKENS);
    const uint32_t page_size = u32_arg(env, info[8], "pageSize", 1, LH_MAX_TOKENS);
    const uint64_t cap = static_cast<uint64_t>(max_pages) * page_size;
    const uint32_t N = u32_arg(env, info[7], "N", 0, static_cast<uint32_t>(std::min<uint64_t>(cap, LH_MAX_TOKENS)));
    const uint32_t top_pages = u32_arg(env, info[9], "topPages", 0, LH_MAX_TOKENS);
    const Napi::Float32Array q = f32_arg(env, info[0], "q", static_cast<size_t>(heads) * d);
    const size_t n = static_cast<size_t>(kvh) * max_pages * d;
    const Napi::Float32Array mn = f32_arg(env, info[4], "pageMin", n);
    const Napi::Float32Array mx = f32_arg(env, info[5], "pageMax", n);
    const uint64_t per = std::min<uint64_t>(N, static_cast<uint64_t>(top_pages) * page_size);
    Napi::Int32Array slots = i32_out(env, info[10], "slots", static_cast<size_t>(kvh * per));
    Napi::Int32Array offsets = i32_out(env, info[11], "offsets", kvh + 1);
    const uint32_t threads = info.Length() > 12 && !info[12].IsUndefined() ? u32_arg(env, info[12], "threads", 1, LH_MAX_RANGE_THREADS) : 1;
    std::vector<uint32_t> off(kvh + 1);
    const size_t pages = N / page_size + 1;
    static thread_local std::vector<uint8_t> scratch;
    const size_t need = std::max(lh_select_scratch_bytes(pages), lh_quest_scratch_bytes(kvh, pages, threads));
    if (scratch.size() < need) scratch.resize(need);
    if (threads > 1) lh_shared_pool_reserve(threads);  // no memory for it: the pool stays smaller, the work is still done
    const lh_status st = lh_select_quest(q.Data(), heads, kvh, d, mn.Data(), mx.Data(), max_pages, N, page_size, top_pages, out_data(slots), off.data(),
                                         scratch.data(), scratch.size(), threads);
    if (st != LH_OK) fail(env, st, "selectQuest: bad arguments");
    copy_offsets(off, offsets);
    return Napi::Number::New(env, off[kvh]);
  });
}

// snapkvCompress(pool, layer, obsQ (window*heads*headDim), heads, P, window, budget, kernel, slots (>= kvHeads*budget), offsets)
Napi::Value SnapkvCompress(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    KvPool* wrap = KvPool::FromValue(env, info[0], "pool");
    lh_kv_pool* p = wrap->Live();
    const uint32_t layer = u32_arg(env, info[1], "layer", 0, p->layers - 1);
    const uint32_t heads = u32_arg(env, info[3], "heads", 1, LH_MAX_HEADS);
    if (heads % p->kv_heads != 0) fail(env, LH_BAD_ARGUMENT, "heads must be a multiple of kvHeads");
    const uint32_t P = u32_arg(env, info[4], "P", 1, lh_kv_pool_length(p, layer));
    const uint32_t budget = u32_arg(env, info[6], "budget", 1, P - 1);
    const uint32_t window = u32_arg(env, info[5], "window", 1, budget);
    const uint32_t kernel = u32_arg(env, info[7], "kernel", 1, 1u << 20);
    if (kernel % 2 != 1) fail(env, LH_BAD_ARGUMENT, "kernel must be odd");
    const Napi::Float32Array obs = f32_arg(env, info[2], "obsQ", static_cast<size_t>(window) * heads * p->head_dim);
    Napi::Int32Array slots = i32_out(env, info[8], "slots", static_cast<size_t>(p->kv_heads) * budget);
    Napi::Int32Array offsets = i32_out(env, info[9], "offsets", p->kv_heads + 1);
    std::vector<uint32_t> off(p->kv_heads + 1);
    size_t bytes = 0;
    uint8_t* scratch = select_scratch(P, &bytes);
    const lh_attention_params attn = attention_arg(env, arg_or_undefined(info, 10), p->head_dim, heads);
    const lh_status st = lh_snapkv_compress(p, layer, obs.Data(), heads, P, window, budget, kernel, &attn, slots.Data(), off.data(), scratch, bytes);
    if (st != LH_OK) fail(env, st, "snapkvCompress: bad arguments");
    copy_offsets(off, offsets);
    return Napi::Number::New(env, off[p->kv_heads]);
  });
}

// skewEnergy(q (tokens*heads*d), k (tokens*kvHeads*d), tokens, heads, kvHeads, d, a (kvHeads*d*d),
//            qEnergy (kvHeads*d, Float64Array, added to), kEnergy (same), reference = false)
Napi::Value SkewEnergy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint32_t tokens = u32_arg(env, info[2], "tokens", 0, LH_MAX_TOKENS);
    const uint32_t heads = u32_arg(env, info[3], "heads", 1, LH_MAX_HEADS);
    const uint32_t kv_heads = u32_arg(env, info[4], "kvHeads", 1, LH_MAX_KV_HEADS);
    const uint32_t d = u32_arg(env, info[5], "headDim", 1, LH_MAX_HEAD_DIM);
    if (heads % kv_heads != 0) fail(env, LH_BAD_ARGUMENT, "heads must be a multiple of kvHeads");
    const Napi::Float32Array q = f32_arg(env, info[0], "q", static_cast<size_t>(tokens) * heads * d);
    const Napi::Float32Array k = f32_arg(env, info[1], "k", static_cast<size_t>(tokens) * kv_heads * d);
    const Napi::Float32Array a = f32_arg(env, info[6], "a", static_cast<size_t>(kv_heads) * d * d);
    auto f64 = [&](const Napi::Value& v, const char* name) {
      if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
        fail(env, LH_BAD_ARGUMENT, std::string(name) + " must be a Float64Array, got " + describe(v));
      Napi::Float64Array x = v.As<Napi::Float64Array>();
      if (x.ElementLength() != static_cast<size_t>(kv_heads) * d)
        fail(env, LH_BAD_ARGUMENT, std::string(name) + " must have " + std::to_string(static_cast<size_t>(kv_heads) * d) + " elements, has " + std::to_string(x.ElementLength()));
      return x;
    };
    Napi::Float64Array qe = f64(info[7], "qEnergy");
    Napi::Float64Array ke = f64(info[8], "kEnergy");
    if (qe.Data() == ke.Data()) fail(env, LH_BAD_ARGUMENT, "qEnergy and kEnergy must not share memory");
    const bool reference = info.Length() > 9 && info[9].IsBoolean() && info[9].As<Napi::Boolean>().Value();
    if (tokens == 0) return env.Undefined();
    const lh_status st = (reference ? lh_skew_energy_ref : lh_skew_energy)(q.Data(), k.Data(), tokens, heads, kv_heads, d, a.Data(), qe.Data(), ke.Data());
    if (st != LH_OK) fail(env, st, "skewEnergy failed");
    return env.Undefined();
  });
}

// setMallocMmapThreshold(bytes) -> whether it was set (glibc only). A fixed threshold: blocks of at
// least `bytes` are mmapped and go back to the system when freed, instead of glibc's default that
// raises the threshold after each such free and then keeps freed weight-sized blocks in the heap.
Napi::Value SetMallocMmapThreshold(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const double bytes = integer_arg(env, info[0], "bytes", 4096, 32.0 * 1024 * 1024);
#if defined(__GLIBC__)
    return Napi::Boolean::New(env, mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes)) == 1);
#else
    (void)bytes;
    return Napi::Boolean::New(env, false);
#endif
  });
}

// mallocTrim() -> whether the C library gave free heap memory back (heap_trim.h).
Napi::Value MallocTrim(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value { return Napi::Boolean::New(env, lh_heap_trim() == 1); });
}

// repackGguf(ggmlType, raw: Uint8Array, n, k, threads)
//   -> { bits, blockSize, b: Uint8Array, scales: Float32Array, zeroPoints: Uint8Array | null, mins: Float32Array | null }
// The outputs are new V8-owned arrays (see gguf_repack.h for their layout).
Napi::Value RepackGguf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint32_t type = u32_arg(env, info[0], "type", 0, 1u << 20);
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      fail(env, LH_BAD_ARGUMENT, "raw must be a Uint8Array, got " + describe(info[1]));
    const Napi::Uint8Array raw = info[1].As<Napi::Uint8Array>();
    const double n = integer_arg(env, info[2], "n", 1, 9007199254740992.0);
    const double k = integer_arg(env, info[3], "k", 1, 9007199254740992.0);
    const uint32_t threads = u32_arg(env, info[4], "threads", 1, LH_REPACK_MAX_THREADS);
    lh_repack_sizes sz;
    if (lh_gguf_repack_sizes(type, static_cast<uint64_t>(n), static_cast<uint64_t>(k), &sz) != LH_OK)
      fail(env, LH_BAD_ARGUMENT, "repackGguf: type " + std::to_string(type) + " at [" + describe(info[2]) + ", " + describe(info[3]) +
                                     "] is not a repackable GGUF type with K a multiple of 32 and whole blocks");
    if (raw.ByteLength() != sz.raw_bytes)
      fail(env, LH_BAD_ARGUMENT, "repackGguf: raw has " + std::to_string(raw.ByteLength()) + " bytes, the tensor needs " + std::to_string(sz.raw_bytes));
    Napi::Uint8Array b = Napi::Uint8Array::New(env, sz.b_bytes);
    Napi::Float32Array scales = Napi::Float32Array::New(env, sz.scales);
    Napi::Value zp = env.Null();
    Napi::Value mins = env.Null();
    uint8_t* zp_data = nullptr;
    float* mins_data = nullptr;
    if (sz.zero_points != 0) {
      Napi::Uint8Array a = Napi::Uint8Array::New(env, sz.zero_points);
      zp_data = a.Data();
      zp = a;
    }
    if (sz.mins != 0) {
      Napi::Float32Array a = Napi::Float32Array::New(env, sz.mins);
      mins_data = a.Data();
      mins = a;
    }
    const lh_status st = lh_gguf_repack(type, raw.Data(), raw.ByteLength(), static_cast<uint64_t>(n), static_cast<uint64_t>(k), threads, b.Data(),
                                        scales.Data(), zp_data, mins_data);
    if (st != LH_OK) fail(env, st, "repackGguf failed");
    Napi::Object out = Napi::Object::New(env);
    out.Set("bits", Napi::Number::New(env, sz.bits));
    out.Set("blockSize", Napi::Number::New(env, sz.block_size));
    out.Set("b", b);
    out.Set("scales", scales);
    out.Set("zeroPoints", zp);
    out.Set("mins", mins);
    return out;
  });
}

// ---------------------------------------------------------------------------------------------
// InfiniGen: selection (for tests) and the Speculator
// ---------------------------------------------------------------------------------------------
lh_infinigen_knobs knobs_arg(Napi::Env env, const Napi::Value& v) {
  const Napi::Object o = object_arg(env, v, "knobs");
  lh_infinigen_knobs k;
  const Napi::Value a = o.Get("alpha"), c = o.Get("cap"), dl = o.Get("denseLayers");
  if (!a.IsNumber() || !c.IsNumber()) fail(env, LH_BAD_ARGUMENT, "knobs.alpha and knobs.cap must be numbers");
  k.alpha = a.As<Napi::Number>().DoubleValue();
  k.cap = c.As<Napi::Number>().DoubleValue();
  k.dense_layers = dl.IsUndefined() ? 0 : u32_arg(env, dl, "knobs.denseLayers", 0, 1u << 30);
  if (!(k.alpha > 0) || !std::isfinite(k.alpha)) fail(env, LH_BAD_ARGUMENT, "knobs.alpha must be a positive number");
  if (!(k.cap > 0 && k.cap <= 1)) fail(env, LH_BAD_ARGUMENT, "knobs.cap must be in (0, 1]");
  return k;
}

// selectInfinigen(layer, { heads, kvHeads, p, slots, qPartial, kPartial, candidates, scale }, knobs)
//   -> { selected: Int32Array[kvHeads], n, candidateCount, counts: Int32Array }
Napi::Value SelectInfinigen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint32_t layer = u32_arg(env, info[0], "layer", 0, 1u << 30);
    const Napi::Object x = object_arg(env, info[1], "input");
    const uint32_t heads = u32_arg(env, x.Get("heads"), "heads", 1, LH_MAX_HEADS);
    const uint32_t kvh = u32_arg(env, x.Get("kvHeads"), "kvHeads", 1, LH_MAX_HEADS);
    const uint32_t p = u32_arg(env, x.Get("p"), "p", 1, LH_MAX_HEAD_DIM);
    const uint32_t slots = u32_arg(env, x.Get("slots"), "slots", 0, 1u << 24);
    if (heads % kvh != 0) fail(env, LH_BAD_ARGUMENT, "heads must be a multiple of kvHeads");
    const Napi::Float32Array q = f32_arg(env, x.Get("qPartial"), "qPartial", static_cast<size_t>(heads) * p);
    const Napi::Float32Array k = f32_arg(env, x.Get("kPartial"), "kPartial", static_cast<size_t>(kvh) * slots * p);
    const Napi::Value cv = x.Get("candidates");
    if (!cv.IsTypedArray() || cv.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array ||
        cv.As<Napi::TypedArray>().ElementLength() != slots)
      fail(env, LH_BAD_ARGUMENT, "candidates must be a Uint8Array of `slots` elements");
    const Napi::Uint8Array cand = cv.As<Napi::Uint8Array>();
    const Napi::Value sv = x.Get("scale");
    if (!sv.IsNumber()) fail(env, LH_BAD_ARGUMENT, "scale must be a number");
    const lh_infinigen_knobs knobs = knobs_arg(env, info[2]);
    std::vector<double> scores(static_cast<size_t>(heads) * slots + 1), comb(slots + 1);
    std::vector<double> values(slots + 1);
    std::vector<int32_t> sel(static_cast<size_t>(kvh) * slots + 1), counts(heads);
    lh_select_input in{heads, kvh, p, slots, q.Data(), k.Data(), static_cast<size_t>(slots) * p, LH_KV_F32, cand.Data(),
                       sv.As<Napi::Number>().DoubleValue()};
    lh_select_scratch scr{scores.data(), comb.data(), values.data()};
    uint32_t n = 0, N = 0;
    bool dense = layer < knobs.dense_layers;
    const lh_status st = lh_infinigen_select(layer, &in, &knobs, &scr, sel.data(), slots, &n, &N, counts.data());
    if (st != LH_OK) fail(env, st, "selectInfinigen: bad input or a non-finite partial score");
    dense = dense || N == 0;
    Napi::Array selected = Napi::Array::New(env, kvh);
    for (uint32_t g = 0; g < kvh; ++g) {
      Napi::Int32Array row = Napi::Int32Array::New(env, n);
      if (n > 0) std::memcpy(row.Data(), sel.data() + static_cast<size_t>(g) * slots, n * sizeof(int32_t));
      selected.Set(g, row);
    }
    Napi::Int32Array c = Napi::Int32Array::New(env, dense ? 0 : heads);
    if (!dense) std::memcpy(c.Data(), counts.data(), heads * sizeof(int32_t));
    Napi::Object r = Napi::Object::New(env);
    r.Set("selected", selected);
    r.Set("n", n);
    r.Set("candidateCount", N);
    r.Set("counts", c);
    return r;
  });
}

class Speculator : public Napi::ObjectWrap<Speculator> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Speculator",
                       {
                           InstanceMethod<&Speculator::Begin>("begin"),
                           InstanceMethod<&Speculator::Attend>("attend"),
                           InstanceMethod<&Speculator::AttendRef>("attendReference"),
                           InstanceMethod<&Speculator::Recall>("recall"),
                           InstanceMethod<&Speculator::Selected>("selected"),
                           InstanceMethod<&Speculator::Stats>("stats"),
                           InstanceMethod<&Speculator::Drain>("drain"),
                           InstanceMethod<&Speculator::ClearStaging>("clearStaging"),
                           InstanceMethod<&Speculator::Free>("free"),
                       });
  }

  // new Speculator(pool, { heads, alpha, cap, denseLayers, scale?, inlineThreads? })
  explicit Speculator(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Speculator>(info), env_(info.Env()) {
    guarded(env_, [&] {
      info.This().As<Napi::Object>().TypeTag(&kSpeculatorTag);
      KvPool* wrap = KvPool::FromValue(env_, info[0], "pool");
      lh_kv_pool* p = wrap->Live();
      if (p->partial_dim == 0) fail(env_, LH_BAD_ARGUMENT, "the pool has no partial key rows (create it with partialDim > 0)");
      const Napi::Object o = object_arg(env_, info[1], "options");
      lh_speculator_config cfg;
      cfg.heads = u32_arg(env_, o.Get("heads"), "heads", 1, LH_MAX_HEADS);
      if (cfg.heads % p->kv_heads != 0) fail(env_, LH_BAD_ARGUMENT, "heads must be a multiple of the pool's kvHeads");
      cfg.knobs = knobs_arg(env_, o);
      const Napi::Value sc = o.Get("scale");
      cfg.scale = sc.IsNumber() ? sc.As<Napi::Number>().DoubleValue() : 1.0 / std::sqrt(static_cast<double>(p->head_dim));
      const Napi::Value it = o.Get("inlineThreads");
      cfg.inline_threads = it.IsUndefined() ? 0 : u32_arg(env_, it, "inlineThreads", 0, LH_MAX_RANGE_THREADS);
      // layerAttention?: one attention block per layer (undefined entries: the default), copied by
      // lh_speculator_create; the sinks arrays are read before this constructor returns
      std::vector<lh_attention_params> layer_attention;
      const Napi::Value la = o.Get("layerAttention");
      if (!la.IsUndefined()) {
        if (!la.IsArray()) fail(env_, LH_BAD_ARGUMENT, "layerAttention must be an array of one attention block per layer, got " + describe(la));
        const Napi::Array arr = la.As<Napi::Array>();
        if (arr.Length() != p->layers)
          fail(env_, LH_BAD_ARGUMENT, "layerAttention must have one entry per layer (" + std::to_string(p->layers) + "), has " + std::to_string(arr.Length()));
        for (uint32_t l = 0; l < p->layers; ++l)
          layer_attention.push_back(attention_arg(env_, arr.Get(l), p->head_dim, cfg.heads, "layerAttention[" + std::to_string(l) + "]"));
        cfg.layer_attention = layer_attention.data();
      }
      pool_ref_ = Napi::Persistent(info[0].As<Napi::Object>());  // keeps the pool object alive
      heads_ = cfg.heads;
      d_ = p->head_dim;
      kvh_ = p->kv_heads;
      layers_ = p->layers;
      const lh_status st = lh_speculator_create(&sp_, p, &cfg);
      if (st != LH_OK) fail(env_, st, "cannot create the speculator");
      if (napi_add_env_cleanup_hook(env_, &Speculator::Cleanup, this) == napi_ok) hook_ = true;
    });
  }
  ~Speculator() override { Release(); }

 private:
  void Release() {
    if (hook_) {
      napi_remove_env_cleanup_hook(env_, &Speculator::Cleanup, this);
      hook_ = false;
    }
    lh_speculator_destroy(sp_);
    sp_ = nullptr;
  }
  static void Cleanup(void* arg) {
    Speculator* self = static_cast<Speculator*>(arg);
    self->hook_ = false;
    lh_speculator_destroy(self->sp_);
    self->sp_ = nullptr;
  }
  lh_speculator* Live() {
    if (sp_ == nullptr) fail(env_, LH_BAD_ARGUMENT, "this speculator has been freed");
    KvPool* wrap = KvPool::FromValue(env_, pool_ref_.Value(), "pool");
    wrap->Live();
    return sp_;
  }
  uint32_t LayerArg(const Napi::Value& v) { return u32_arg(env_, v, "layer", 0, layers_ - 1); }

  Napi::Value Begin(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_speculator* sp = Live();
      const uint32_t layer = LayerArg(info[0]);
      const Napi::Float32Array q = f32_arg(env_, info[1], "qSpec", static_cast<size_t>(heads_) * d_);
      const lh_status st = lh_speculator_begin(sp, layer, q.Data());
      if (st != LH_OK) fail(env_, st, "speculator.begin(" + std::to_string(layer) + "): a dense layer, no projection set, or a job already pending");
      return env_.Undefined();
    });
  }
  Napi::Value AttendAny(const Napi::CallbackInfo& info, bool ref) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_speculator* sp = Live();
      const uint32_t layer = LayerArg(info[0]);
      const Napi::Float32Array q = f32_arg(env_, info[1], "q", static_cast<size_t>(heads_) * d_);
      Napi::Float32Array out = f32_arg(env_, info[2], "out", static_cast<size_t>(heads_) * d_);
      // attend's optional 4th argument: threads over the KV heads (default 1)
      const uint32_t threads = !ref && info.Length() > 3 && !info[3].IsUndefined() ? u32_arg(env_, info[3], "threads", 1, LH_MAX_ATTENTION_THREADS) : 1;
      const lh_status st = ref ? lh_speculator_attend_ref(sp, layer, q.Data(), out.Data()) : lh_speculator_attend(sp, layer, q.Data(), out.Data(), threads);
      if (st != LH_OK) fail(env_, st, "speculator.attend(" + std::to_string(layer) + "): no job begun, or not exactly one token appended since begin()");
      return env_.Undefined();
    });
  }
  Napi::Value Attend(const Napi::CallbackInfo& info) { return AttendAny(info, false); }
  Napi::Value AttendRef(const Napi::CallbackInfo& info) { return AttendAny(info, true); }
  Napi::Value Recall(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_speculator* sp = Live();
      const uint32_t layer = LayerArg(info[0]);
      const Napi::Float32Array q = f32_arg(env_, info[1], "q", static_cast<size_t>(heads_) * d_);
      double r = 0;
      const lh_status st = lh_speculator_recall(sp, layer, q.Data(), &r);
      if (st != LH_OK) fail(env_, st, "speculator.recall: no finished job for this layer");
      return Napi::Number::New(env_, r);
    });
  }
  Napi::Value Selected(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_speculator* sp = Live();
      const uint32_t layer = LayerArg(info[0]);
      const uint32_t g = u32_arg(env_, info[1], "kvHead", 0, kvh_ - 1);
      uint32_t n = 0;
      const int32_t* s = lh_speculator_selected(sp, layer, g, &n);
      if (s == nullptr) fail(env_, LH_BAD_ARGUMENT, "speculator.selected: no finished job for this layer");
      Napi::Int32Array out = Napi::Int32Array::New(env_, n);
      if (n > 0) std::memcpy(out.Data(), s, n * sizeof(int32_t));
      return out;
    });
  }
  Napi::Value Stats(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_speculator* sp = Live();
      const lh_layer_stats* s = lh_speculator_stats(sp, LayerArg(info[0]));
      Napi::Object o = Napi::Object::New(env_);
      o.Set("valid", s->valid != 0);
      o.Set("n", s->n);
      o.Set("candidates", s->candidates);
      o.Set("hits", s->hits);
      o.Set("misses", s->misses);
      o.Set("bytes", static_cast<double>(s->bytes));
      o.Set("beginNs", static_cast<double>(s->begin_ns));
      o.Set("jobStartNs", static_cast<double>(s->job_start_ns));
      o.Set("jobEndNs", static_cast<double>(s->job_end_ns));
      o.Set("specNs", static_cast<double>(s->spec_ns));
      o.Set("gatherNs", static_cast<double>(s->gather_ns));
      o.Set("waitNs", static_cast<double>(s->wait_ns));
      o.Set("attnNs", static_cast<double>(s->attn_ns));
      return o;
    });
  }
  Napi::Value Drain(const Napi::CallbackInfo& info) {
    if (sp_ != nullptr) lh_speculator_drain(sp_);
    return env_.Undefined();
  }
  Napi::Value ClearStaging(const Napi::CallbackInfo& info) {
    if (sp_ != nullptr) lh_speculator_clear_staging(sp_);
    return env_.Undefined();
  }
  Napi::Value Free(const Napi::CallbackInfo& info) {
    Release();
    pool_ref_.Reset();
    return env_.Undefined();
  }

  Napi::Env env_;
  lh_speculator* sp_ = nullptr;
  Napi::ObjectReference pool_ref_;
  uint32_t heads_ = 0, d_ = 0, kvh_ = 0, layers_ = 0;
  bool hook_ = false;
};

// ---------------------------------------------------------------------------------------------
// DenseStage (dense_stage.h): one llama stage over the mapped file's weights, read in place
// ---------------------------------------------------------------------------------------------
// new DenseStage({ stage, layers, hidden, heads, kvHeads, headDim, ffn, vocab, eps, ropeLayout: 0 | 1,
//   rotaryDim? (default headDim: the dimensions RoPE rotates, even), threads, impl?: 'auto' | 'scalar' | 'avx2' | 'avx512', norm: Float32Array [hidden],
//   ffnNorm?: Float32Array [hidden], qNorm?, kNorm?, qSpecNorm?: Float32Array [headDim] (per-head norms: Qwen3, Gemma 3),
//   attnOutput?, ffnGate?, ffnUp?, ffnDown?, q?, k?, v?, qSpec?, lmHead?:
//   { data: Uint8Array (the tensor's bytes in the file), type: GGML type id, rows, cols, bias?: Float32Array } })
// run({ tokens, h, attn?, ropeCos?, ropeSin?, rows?: Uint32Array }) -> { q, k, v, qSpec?, hNext? } | { logits }
// Mixture of experts (stage > 0, dense_stage.h): experts, expertsUsed, expertFfn, normTopK?: boolean,
//   gating?: 'softmax' | 'softmax_weight', router (bias?: the router's), gateExps/upExps/downExps (bias?: [experts·rows]),
//   gateExps, upExps, downExps: matrices (the 3-D expert tensors as [experts·rows, cols]), no ffnGate/Up/Down;
//   run also returns routed: Uint32Array [T, expertsUsed], routedWeights: Float32Array [T, expertsUsed] and
//   expertBytes: the expert weight bytes it read; with a shared expert also sharedFfn, shexpGate, shexpUp,
//   shexpDown: matrices, shexpGateInp: Float32Array [hidden]
// Gemma 4 (dense_stage.h): attnHeadDim?, specHeadDim?, specRotaryDim?, kvShared?, valueFromKey?: booleans,
//   vNorm?: Float32Array [headDim], outputScale?, pleDim?, pleModelProj?, pleInpGate?, pleProj?: matrices,
//   pleProjNorm?: [pleDim], plePostNorm?: [hidden]; run also takes pleTok (stage 0) / ple (stage > 0), and
//   stage 0 with pleDim outputs ple [T, layers·pleDim]; a kvShared stage outputs no k, v
// Qwen3.5 (dense_stage.h): qGated?, attnGated?: booleans, attnCols?, and for a linear-attention layer's
//   stage linKeyHeads, linValueHeads, linHeadDim, linQkv, linZ, linBeta, linAlpha: matrices, linDt, linA:
//   Float32Array [linValueHeads] (no q, k, v; qSpec and qSpecNorm as above); run also takes gate (attnGated),
//   and outputs gate (qGated, an attention layer) or linQkv, linZ, linBeta, linDecay (a linear layer)
// The weights' Uint8Arrays are held (so their ArrayBuffer outlives the stage) and checked before each
// run: a model file closed (its ArrayBuffer detached, byteLength 0) is refused, never read.
const char* qdot_impl_name(lh_qdot_impl i) {
  switch (i) {
    case LH_QDOT_SCALAR: return "scalar";
    case LH_QDOT_AVX2: return "avx2";
    case LH_QDOT_AVX512: return "avx512";
    case LH_QDOT_AMX: return "amx";
    case LH_QDOT_AUTO: return "auto";
  }
  return "auto";
}

class DenseStage : public Napi::ObjectWrap<DenseStage> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "DenseStage",
                       {
                           InstanceMethod<&DenseStage::Run>("run"),
                           InstanceMethod<&DenseStage::Free>("free"),
                           InstanceAccessor<&DenseStage::Impl>("impl"),
                       });
  }

  explicit DenseStage(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DenseStage>(info), env_(info.Env()) {
    guarded(env_, [&] {
      const Napi::Object o = object_arg(env_, info[0], "config");
      lh_dense_stage_config c{};
      c.layers = u32_arg(env_, o.Get("layers"), "layers", 1, LH_MAX_LAYERS);
      c.stage = u32_arg(env_, o.Get("stage"), "stage", 0, c.layers);
      c.hidden = u32_arg(env_, o.Get("hidden"), "hidden", 1, 1u << 20);
      c.heads = u32_arg(env_, o.Get("heads"), "heads", 1, LH_MAX_HEADS);
      c.kv_heads = u32_arg(env_, o.Get("kvHeads"), "kvHeads", 1, LH_MAX_KV_HEADS);
      c.head_dim = u32_arg(env_, o.Get("headDim"), "headDim", 2, LH_MAX_HEAD_DIM);
      c.ffn = u32_arg(env_, o.Get("ffn"), "ffn", 1, 1u << 22);
      c.vocab = u32_arg(env_, o.Get("vocab"), "vocab", 1, 1u << 24);
      const Napi::Value eps = o.Get("eps");
      if (!eps.IsNumber() || !(eps.As<Napi::Number>().DoubleValue() >= 0)) fail(env_, LH_BAD_ARGUMENT, "eps must be a number >= 0, got " + describe(eps));
      c.eps = static_cast<float>(eps.As<Napi::Number>().DoubleValue());
      c.rope_layout = u32_arg(env_, o.Get("ropeLayout"), "ropeLayout", 0, 1);
      const Napi::Value rotary = o.Get("rotaryDim");
      c.rotary_dim = rotary.IsUndefined() ? c.head_dim : u32_arg(env_, rotary, "rotaryDim", 2, c.head_dim);
      if (c.rotary_dim % 2 != 0) fail(env_, LH_BAD_ARGUMENT, "rotaryDim must be even, got " + std::to_string(c.rotary_dim));
      c.threads = u32_arg(env_, o.Get("threads"), "threads", 1, LH_MAX_RANGE_THREADS);
      const Napi::Value impl = o.Get("impl");
      const std::string name = impl.IsString() ? impl.As<Napi::String>().Utf8Value() : impl.IsUndefined() ? "auto" : "";
      if (name == "auto") c.impl = LH_QDOT_AUTO;
      else if (name == "scalar") c.impl = LH_QDOT_SCALAR;
      else if (name == "avx2") c.impl = LH_QDOT_AVX2;
      else if (name == "avx512") c.impl = LH_QDOT_AVX512;
      else if (name == "amx") c.impl = LH_QDOT_AMX;
      else fail(env_, LH_BAD_ARGUMENT, "impl must be 'auto', 'scalar', 'avx2', 'avx512' or 'amx', got " + describe(impl));
      norm_ = Napi::Persistent(f32_arg(env_, o.Get("norm"), "norm", c.hidden));
      c.norm = norm_.Value().Data();
      if (c.stage > 0) {
        ffn_norm_ = Napi::Persistent(f32_arg(env_, o.Get("ffnNorm"), "ffnNorm", c.hidden));
        c.ffn_norm = ffn_norm_.Value().Data();
      }
      const uint32_t qw = c.heads * c.head_dim, kvw = c.kv_heads * c.head_dim;
      const bool post = c.stage > 0, pre = c.stage < c.layers;
      // Gemma 4's per-layer widths and layer kinds (0 / false / absent: as above)
      const auto optional_u32 = [&](const char* key, uint32_t lo, uint32_t hi) -> uint32_t {
        const Napi::Value v = o.Get(key);
        return v.IsUndefined() ? 0 : u32_arg(env_, v, key, lo, hi);
      };
      const auto optional_bool = [&](const char* key) -> uint32_t {
        const Napi::Value v = o.Get(key);
        if (v.IsUndefined()) return 0;
        if (!v.IsBoolean()) fail(env_, LH_BAD_ARGUMENT, std::string(key) + " must be a boolean, got " + describe(v));
        return v.As<Napi::Boolean>().Value() ? 1 : 0;
      };
      c.attn_head_dim = optional_u32("attnHeadDim", 2, LH_MAX_HEAD_DIM);
      c.spec_head_dim = optional_u32("specHeadDim", 2, LH_MAX_HEAD_DIM);
      c.spec_rotary_dim = optional_u32("specRotaryDim", 2, LH_MAX_HEAD_DIM);
      c.kv_shared = optional_bool("kvShared");
      c.v_from_k = optional_bool("valueFromKey");
      c.ple_dim = optional_u32("pleDim", 1, 1u << 16);
      const Napi::Value oscale = o.Get("outputScale");
      if (!oscale.IsUndefined()) {
        if (!oscale.IsNumber() || !(oscale.As<Napi::Number>().DoubleValue() > 0) || !std::isfinite(oscale.As<Napi::Number>().DoubleValue()))
          fail(env_, LH_BAD_ARGUMENT, "outputScale must be a finite number > 0, got " + describe(oscale));
        c.output_scale = static_cast<float>(oscale.As<Napi::Number>().DoubleValue());
      }
      const uint32_t ahd = c.attn_head_dim == 0 ? c.head_dim : c.attn_head_dim, shd = c.spec_head_dim == 0 ? c.head_dim : c.spec_head_dim;
      // Gemma-style layers: optional vectors (the stage copies them), activation, final soft-cap
      const auto optional_vector = [&](const char* key, uint32_t n) -> const float* {
        const Napi::Value v = o.Get(key);
        if (v.IsUndefined()) return nullptr;
        biases_.push_back(f32_arg(env_, v, key, n));
        return biases_.back().Data();
      };
      c.attn_post_norm = optional_vector("attnPostNorm", c.hidden);
      c.ffn_post_norm = optional_vector("ffnPostNorm", c.hidden);
      const Napi::Value act = o.Get("activation");
      const std::string act_name = act.IsString() ? act.As<Napi::String>().Utf8Value() : act.IsUndefined() ? "silu" : "";
      if (act_name == "silu") c.activation = LH_ACT_SILU;
      else if (act_name == "gelu_tanh") c.activation = LH_ACT_GELU_TANH;
      else if (act_name == "swiglu_oai") c.activation = LH_ACT_SWIGLU_OAI;
      else fail(env_, LH_BAD_ARGUMENT, "activation must be 'silu', 'gelu_tanh' or 'swiglu_oai', got " + describe(act));
      const Napi::Value cap = o.Get("finalSoftcap");
      if (!cap.IsUndefined()) {
        if (!cap.IsNumber() || !(cap.As<Napi::Number>().DoubleValue() >= 0) || !std::isfinite(cap.As<Napi::Number>().DoubleValue()))
          fail(env_, LH_BAD_ARGUMENT, "finalSoftcap must be a finite number >= 0, got " + describe(cap));
        c.final_softcap = static_cast<float>(cap.As<Napi::Number>().DoubleValue());
      }
      // Qwen3.5: gated attention, linear-attention layers
      c.q_gated = optional_bool("qGated");
      c.attn_gated = post ? optional_bool("attnGated") : 0;
      c.attn_cols = post ? optional_u32("attnCols", 1, 1u << 20) : 0;
      c.lin_value_heads = pre ? optional_u32("linValueHeads", 1, LH_MAX_HEADS) : 0;
      const bool linear = c.lin_value_heads > 0;
      if (linear) {
        c.lin_key_heads = u32_arg(env_, o.Get("linKeyHeads"), "linKeyHeads", 1, c.lin_value_heads);
        c.lin_head_dim = u32_arg(env_, o.Get("linHeadDim"), "linHeadDim", 1, LH_MAX_HEAD_DIM);
        c.lin_qkv = Matrix(o, "linQkv", true, (2 * c.lin_key_heads + c.lin_value_heads) * c.lin_head_dim);
        c.lin_z = Matrix(o, "linZ", true, c.lin_value_heads * c.lin_head_dim);
        c.lin_beta = Matrix(o, "linBeta", true, c.lin_value_heads);
        c.lin_alpha = Matrix(o, "linAlpha", true, c.lin_value_heads);
        c.lin_dt = optional_vector("linDt", c.lin_value_heads);
        c.lin_a = optional_vector("linA", c.lin_value_heads);
      }
      c.attn_output = Matrix(o, "attnOutput", post, c.hidden);
      c.v_norm = pre && c.kv_shared == 0 ? optional_vector("vNorm", c.head_dim) : nullptr;
      if (c.ple_dim > 0) {
        c.ple_model_proj = Matrix(o, "pleModelProj", !post, c.layers * c.ple_dim);
        c.ple_proj_norm = !post ? optional_vector("pleProjNorm", c.ple_dim) : nullptr;
        c.ple_inp_gate = Matrix(o, "pleInpGate", post, c.ple_dim);
        c.ple_proj = Matrix(o, "pleProj", post, c.hidden);
        c.ple_post_norm = post ? optional_vector("plePostNorm", c.hidden) : nullptr;
      }
      // mixture of experts (dense_stage.h): experts, expertsUsed, expertFfn, normTopK?, router, gateExps, upExps, downExps
      c.n_experts = post ? optional_u32("experts", 1, LH_MOE_MAX_EXPERTS) : 0;
      const bool moe = c.n_experts > 0;
      if (moe) {
        c.n_experts_used = u32_arg(env_, o.Get("expertsUsed"), "expertsUsed", 1, c.n_experts < LH_MOE_MAX_USED ? c.n_experts : LH_MOE_MAX_USED);
        c.expert_ffn = u32_arg(env_, o.Get("expertFfn"), "expertFfn", 1, 1u << 22);
        c.norm_topk = optional_bool("normTopK");
        // gating?: 'softmax' (default) | 'softmax_weight' (gpt-oss: top-k of the logits, softmax over the k)
        const Napi::Value gating = o.Get("gating");
        const std::string gating_name = gating.IsString() ? gating.As<Napi::String>().Utf8Value() : gating.IsUndefined() ? "softmax" : "";
        if (gating_name == "softmax") c.gating = LH_MOE_SOFTMAX;
        else if (gating_name == "softmax_weight") c.gating = LH_MOE_SOFTMAX_WEIGHT;
        else fail(env_, LH_BAD_ARGUMENT, "gating must be 'softmax' or 'softmax_weight', got " + describe(gating));
        c.router = Matrix(o, "router", true, c.n_experts);
        // each either one matrix (the 3-D tensor's rows) or an array of one matrix per expert
        const bool per_expert = o.Get("gateExps").IsArray();
        if (per_expert != o.Get("upExps").IsArray() || per_expert != o.Get("downExps").IsArray())
          fail(env_, LH_BAD_ARGUMENT, "gateExps, upExps and downExps must all be matrices or all arrays of per-expert matrices");
        if (per_expert) {
          c.gate_exps = ExpertMatrices(o, "gateExps", c.n_experts, c.expert_ffn, 0);
          c.up_exps = ExpertMatrices(o, "upExps", c.n_experts, c.expert_ffn, 1);
          c.down_exps = ExpertMatrices(o, "downExps", c.n_experts, c.hidden, 2);
          c.gate_expert = expert_ptrs_[0].data();
          c.up_expert = expert_ptrs_[1].data();
          c.down_expert = expert_ptrs_[2].data();
        } else {
          c.gate_exps = Matrix(o, "gateExps", true, c.n_experts * c.expert_ffn);
          c.up_exps = Matrix(o, "upExps", true, c.n_experts * c.expert_ffn);
          c.down_exps = Matrix(o, "downExps", true, c.n_experts * c.hidden);
        }
        experts_used_ = c.n_experts_used;
        // the shared expert (Qwen3.5-MoE): sharedFfn, shexpGate, shexpUp, shexpDown, shexpGateInp [hidden]
        c.shexp_ffn = optional_u32("sharedFfn", 1, 1u << 22);
        if (c.shexp_ffn > 0) {
          c.shexp_gate = Matrix(o, "shexpGate", true, c.shexp_ffn);
          c.shexp_up = Matrix(o, "shexpUp", true, c.shexp_ffn);
          c.shexp_down = Matrix(o, "shexpDown", true, c.hidden);
          c.shexp_gate_inp = optional_vector("shexpGateInp", c.hidden);
        }
      }
      c.ffn_gate = Matrix(o, "ffnGate", post && !moe, c.ffn);
      c.ffn_up = Matrix(o, "ffnUp", post && !moe, c.ffn);
      c.ffn_down = Matrix(o, "ffnDown", post && !moe, c.hidden);
      const uint32_t gated = c.q_gated != 0 ? 2 : 1;
      c.q = Matrix(o, "q", pre && !linear, qw * gated);
      c.k = Matrix(o, "k", pre && !linear && c.kv_shared == 0, kvw);
      c.v = Matrix(o, "v", pre && !linear && c.kv_shared == 0 && c.v_from_k == 0, kvw);
      c.q_spec = Matrix(o, "qSpec", pre && !o.Get("qSpec").IsUndefined(), c.heads * shd * gated);
      // optional per-head q/k norm [headDim] (Qwen3, Gemma 3); the stage checks they come together
      c.q_norm = HeadNorm(o, "qNorm", pre, q_norm_, c.head_dim);
      c.k_norm = HeadNorm(o, "kNorm", pre, k_norm_, c.head_dim);
      c.q_spec_norm = HeadNorm(o, "qSpecNorm", pre, q_spec_norm_, shd);
      c.lm_head = Matrix(o, "lmHead", !pre, c.vocab);
      layers_ = c.layers;
      stage_ = c.stage;
      hidden_ = c.hidden;
      qw_ = qw;
      kvw_ = kvw;
      attn_w_ = c.attn_cols != 0 ? c.attn_cols : c.heads * ahd;
      linear_ = linear;
      q_gated_ = c.q_gated != 0;
      attn_gated_ = c.attn_gated != 0;
      lin_c_ = (2 * c.lin_key_heads + c.lin_value_heads) * c.lin_head_dim;
      lin_v_ = c.lin_value_heads * c.lin_head_dim;
      lin_hv_ = c.lin_value_heads;
      spec_w_ = c.heads * shd;
      vocab_ = c.vocab;
      half_ = c.rotary_dim / 2;
      spec_half_ = (c.spec_rotary_dim != 0 ? c.spec_rotary_dim : c.spec_head_dim == 0 ? c.rotary_dim : shd) / 2;
      spec_ = c.q_spec.data != nullptr;
      kv_shared_ = c.kv_shared != 0;
      ple_dim_ = c.ple_dim;
      const char* why = nullptr;
      const lh_status st = lh_dense_stage_create(&c, &stage_ptr_, &why);
      if (st != LH_OK) fail(env_, st, std::string("cannot create dense stage ") + std::to_string(c.stage) + ": " + (why ? why : "?") +
                                          (st == LH_BAD_ARGUMENT ? " (a shape, byte size or type without kernels)" : ""));
      biases_.clear();  // copied by the stage
      q_norm_.Reset();
      k_norm_.Reset();
      q_spec_norm_.Reset();
    });
  }
  ~DenseStage() override { lh_dense_stage_free(stage_ptr_); }

 private:
  // one weight: { data, type, rows, cols, bias? } with `rows` checked against the model's shape; absent
  // when not wanted (the stage's other half)
  lh_dense_matrix Matrix(const Napi::Object& o, const char* name, bool wanted, uint32_t rows) {
    lh_dense_matrix m{};
    if (!wanted) return m;
    const Napi::Object w = object_arg(env_, o.Get(name), name);
    const Napi::Value data = w.Get("data");
    if (!data.IsTypedArray() || data.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      fail(env_, LH_BAD_ARGUMENT, std::string(name) + ".data must be a Uint8Array, got " + describe(data));
    const Napi::Uint8Array bytes = data.As<Napi::Uint8Array>();
    m.data = bytes.Data();
    m.bytes = bytes.ByteLength();
    m.type = u32_arg(env_, w.Get("type"), (std::string(name) + ".type").c_str(), 0, 1000);
    m.rows = u32_arg(env_, w.Get("rows"), (std::string(name) + ".rows").c_str(), rows, rows);
    m.cols = u32_arg(env_, w.Get("cols"), (std::string(name) + ".cols").c_str(), 1, 1u << 24);
    const Napi::Value bias = w.Get("bias");
    if (!bias.IsUndefined()) {
      biases_.push_back(f32_arg(env_, bias, (std::string(name) + ".bias").c_str(), rows));
      m.bias = biases_.back().Data();
    }
    weights_.push_back(Napi::Persistent(bytes));
    weight_bytes_.push_back(m.bytes);
    return m;
  }

  // An array of `experts` matrices of `rows` rows each, one type and column count: the stage's shape-only
  // matrix [experts·rows, cols] (data null), the rows' pointers in expert_ptrs_[slot]
  lh_dense_matrix ExpertMatrices(const Napi::Object& o, const char* name, uint32_t experts, uint32_t rows, int slot) {
    const Napi::Array list = o.Get(name).As<Napi::Array>();
    if (list.Length() != experts) fail(env_, LH_BAD_ARGUMENT, std::string(name) + " must hold " + std::to_string(experts) + " matrices, got " + std::to_string(list.Length()));
    lh_dense_matrix whole{};
    expert_ptrs_[slot].clear();
    for (uint32_t e = 0; e < experts; ++e) {
      Napi::Object holder = Napi::Object::New(env_);
      holder.Set("m", list.Get(e));
      const std::string what = std::string(name) + "[" + std::to_string(e) + "]";
      const lh_dense_matrix m = Matrix(holder, "m", true, rows);
      lh_qdot_kernels k{};
      if (m.bias != nullptr || !lh_qdot_kernels_for(m.type, LH_QDOT_SCALAR, &k) || m.cols % k.block_elems != 0 || m.bytes != k.row_bytes(m.cols) * rows)
        fail(env_, LH_BAD_ARGUMENT, what + ": a type without kernels, a bias, or a byte size that is not " + std::to_string(rows) + " rows");
      if (e > 0 && (m.type != whole.type || m.cols != whole.cols)) fail(env_, LH_BAD_ARGUMENT, what + ": every expert must have one type and column count");
      whole.type = m.type;
      whole.cols = m.cols;
      expert_ptrs_[slot].push_back(m.data);
    }
    whole.rows = experts * rows;
    return whole;
  }

  // an optional [head_dim] vector, held in `ref` until the stage has copied it
  const float* HeadNorm(const Napi::Object& o, const char* name, bool wanted, Napi::Reference<Napi::Float32Array>& ref, uint32_t head_dim) {
    if (!wanted || o.Get(name).IsUndefined()) return nullptr;
    ref = Napi::Persistent(f32_arg(env_, o.Get(name), name, head_dim));
    return ref.Value().Data();
  }

  lh_dense_stage* Live() {
    if (stage_ptr_ == nullptr) fail(env_, LH_BAD_ARGUMENT, "this dense stage has been freed");
    for (size_t i = 0; i < weights_.size(); ++i)
      if (weights_[i].Value().ByteLength() != weight_bytes_[i])
        fail(env_, LH_BAD_ARGUMENT, "dense stage " + std::to_string(stage_) + ": the model file it reads has been closed");
    return stage_ptr_;
  }

  const float* Input(const Napi::Object& o, const char* name, size_t n, bool wanted) {
    if (!wanted) return nullptr;
    return f32_arg(env_, o.Get(name), name, n).Data();
  }

  Napi::Value Run(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_dense_stage* st = Live();
      const Napi::Object o = object_arg(env_, info[0], "inputs");
      const uint32_t T = u32_arg(env_, o.Get("tokens"), "tokens", 1, 1u << 20);
      const bool post = stage_ > 0, pre = stage_ < layers_;
      lh_dense_stage_io io{};
      io.tokens = T;
      io.h = Input(o, "h", static_cast<size_t>(T) * hidden_, true);
      io.attn = Input(o, "attn", static_cast<size_t>(T) * attn_w_, post);
      io.gate_in = Input(o, "gate", static_cast<size_t>(T) * attn_w_, post && attn_gated_);
      // a linear layer's stage rotates only q_spec (with its own rows, or these when given)
      const bool rope_rows = pre && (!linear_ || !o.Get("ropeCos").IsUndefined());
      io.rope_cos = Input(o, "ropeCos", static_cast<size_t>(T) * half_, rope_rows);
      io.rope_sin = Input(o, "ropeSin", static_cast<size_t>(T) * half_, rope_rows);
      const bool own_spec_rope = pre && spec_ && !o.Get("specRopeCos").IsUndefined();
      io.spec_rope_cos = Input(o, "specRopeCos", static_cast<size_t>(T) * spec_half_, own_spec_rope);
      io.spec_rope_sin = Input(o, "specRopeSin", static_cast<size_t>(T) * spec_half_, own_spec_rope);
      io.ple_tok = Input(o, "pleTok", static_cast<size_t>(T) * layers_ * ple_dim_, ple_dim_ > 0 && !post);
      io.ple = Input(o, "ple", static_cast<size_t>(T) * ple_dim_, ple_dim_ > 0 && post);
      Napi::Object out = Napi::Object::New(env_);
      Napi::Uint32Array rows;
      if (!pre) {
        const Napi::Value r = o.Get("rows");
        if (!r.IsTypedArray() || r.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
          fail(env_, LH_BAD_ARGUMENT, "rows must be a Uint32Array, got " + describe(r));
        rows = r.As<Napi::Uint32Array>();
        for (size_t i = 0; i < rows.ElementLength(); ++i)
          if (rows[i] >= T) fail(env_, LH_BAD_ARGUMENT, "rows[" + std::to_string(i) + "] = " + std::to_string(rows[i]) + " is not below tokens " + std::to_string(T));
        io.rows = rows.Data();
        io.n_rows = static_cast<uint32_t>(rows.ElementLength());
        Napi::Float32Array logits = Napi::Float32Array::New(env_, static_cast<size_t>(io.n_rows) * vocab_);
        io.logits = logits.Data();
        out.Set("logits", logits);
      } else if (linear_) {
        const auto output = [&](const char* name, size_t n) {
          Napi::Float32Array a = Napi::Float32Array::New(env_, n);
          out.Set(name, a);
          return a.Data();
        };
        io.lin_qkv = output("linQkv", static_cast<size_t>(T) * lin_c_);
        io.lin_z = output("linZ", static_cast<size_t>(T) * lin_v_);
        io.lin_beta = output("linBeta", static_cast<size_t>(T) * lin_hv_);
        io.lin_decay = output("linDecay", static_cast<size_t>(T) * lin_hv_);
        if (spec_) io.q_spec = output("qSpec", static_cast<size_t>(T) * spec_w_);
        if (post) io.h_next = output("hNext", static_cast<size_t>(T) * hidden_);
      } else {
        Napi::Float32Array q = Napi::Float32Array::New(env_, static_cast<size_t>(T) * qw_);
        io.q = q.Data();
        out.Set("q", q);
        if (q_gated_) {
          Napi::Float32Array g = Napi::Float32Array::New(env_, static_cast<size_t>(T) * qw_);
          io.gate = g.Data();
          out.Set("gate", g);
        }
        if (!kv_shared_) {
          Napi::Float32Array k = Napi::Float32Array::New(env_, static_cast<size_t>(T) * kvw_);
          Napi::Float32Array v = Napi::Float32Array::New(env_, static_cast<size_t>(T) * kvw_);
          io.k = k.Data();
          io.v = v.Data();
          out.Set("k", k);
          out.Set("v", v);
        }
        if (ple_dim_ > 0 && !post) {
          Napi::Float32Array ple = Napi::Float32Array::New(env_, static_cast<size_t>(T) * layers_ * ple_dim_);
          io.ple_out = ple.Data();
          out.Set("ple", ple);
        }
        if (spec_) {
          Napi::Float32Array qs = Napi::Float32Array::New(env_, static_cast<size_t>(T) * spec_w_);
          io.q_spec = qs.Data();
          out.Set("qSpec", qs);
        }
        if (post) {
          Napi::Float32Array hn = Napi::Float32Array::New(env_, static_cast<size_t>(T) * hidden_);
          io.h_next = hn.Data();
          out.Set("hNext", hn);
        }
      }
      Napi::Uint32Array routed;
      Napi::Float32Array routed_weights;
      if (experts_used_ > 0) {
        routed = Napi::Uint32Array::New(env_, static_cast<size_t>(T) * experts_used_);
        routed_weights = Napi::Float32Array::New(env_, static_cast<size_t>(T) * experts_used_);
        io.routed = routed.Data();
        io.routed_weights = routed_weights.Data();
      }
      const lh_status s = lh_dense_stage_run(st, &io);
      if (s != LH_OK) fail(env_, s, "dense stage " + std::to_string(stage_) + " failed");
      if (experts_used_ > 0) {
        out.Set("routed", routed);
        out.Set("routedWeights", routed_weights);
        out.Set("expertBytes", Napi::Number::New(env_, static_cast<double>(io.expert_bytes)));
      }
      return out;
    });
  }

  Napi::Value Impl(const Napi::CallbackInfo& info) { return Napi::String::New(env_, qdot_impl_name(lh_dense_stage_impl(stage_ptr_))); }

  // free(): the stage's own memory now, and its hold on the weights' ArrayBuffers. Idempotent.
  Napi::Value Free(const Napi::CallbackInfo& info) {
    return guarded(env_, [&]() -> Napi::Value {
      lh_dense_stage_free(stage_ptr_);
      stage_ptr_ = nullptr;
      weights_.clear();
      norm_.Reset();
      ffn_norm_.Reset();
      return env_.Undefined();
    });
  }

  Napi::Env env_;
  lh_dense_stage* stage_ptr_ = nullptr;
  std::vector<Napi::Reference<Napi::Uint8Array>> weights_;
  std::vector<size_t> weight_bytes_;
  std::vector<Napi::Float32Array> biases_;  // only during the constructor (the stage copies them)
  Napi::Reference<Napi::Float32Array> norm_, ffn_norm_;
  Napi::Reference<Napi::Float32Array> q_norm_, k_norm_, q_spec_norm_;  // only during the constructor
  uint32_t layers_ = 0, stage_ = 0, hidden_ = 0, qw_ = 0, kvw_ = 0, vocab_ = 0, half_ = 0;
  uint32_t attn_w_ = 0, spec_w_ = 0, spec_half_ = 0, ple_dim_ = 0;  // Gemma 4's per-layer widths
  bool spec_ = false, kv_shared_ = false;
  bool linear_ = false, q_gated_ = false, attn_gated_ = false;  // Qwen3.5
  uint32_t lin_c_ = 0, lin_v_ = 0, lin_hv_ = 0;                  // a linear layer's output widths
  uint32_t experts_used_ = 0;  // k of a mixture-of-experts stage, 0: none
  std::vector<const uint8_t*> expert_ptrs_[3];  // per-expert rows (gate, up, down) during the constructor; the stage copies them
};

// gatedDeltaNet({ keyHeads, valueHeads, headDim, convKernel, eps, tokens, qkv, z, beta, decay, conv, norm,
//   state, out, chunk?, threads }): one linear-attention layer's mixer over a chunk (gated_delta_net.h),
//   state (Float32Array [valueHeads·headDim² + (convKernel−1)·C]) advanced in place, out [T, valueHeads·headDim]
//   written. chunk: 0 (default) the chunked form's default, 1 token by token.
Napi::Value GatedDeltaNet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const Napi::Object o = object_arg(env, info[0], "gatedDeltaNet");
    lh_gdn_shape sh{};
    sh.value_heads = u32_arg(env, o.Get("valueHeads"), "valueHeads", 1, LH_MAX_HEADS);
    sh.key_heads = u32_arg(env, o.Get("keyHeads"), "keyHeads", 1, sh.value_heads);
    sh.head_dim = u32_arg(env, o.Get("headDim"), "headDim", 1, LH_MAX_HEAD_DIM);
    sh.conv_kernel = u32_arg(env, o.Get("convKernel"), "convKernel", 1, 64);
    const Napi::Value eps = o.Get("eps");
    if (!eps.IsNumber() || !(eps.As<Napi::Number>().DoubleValue() >= 0)) fail(env, LH_BAD_ARGUMENT, "eps must be a number >= 0, got " + describe(eps));
    sh.eps = static_cast<float>(eps.As<Napi::Number>().DoubleValue());
    if (sh.value_heads % sh.key_heads != 0) fail(env, LH_BAD_ARGUMENT, "valueHeads must be a multiple of keyHeads");
    const uint32_t T = u32_arg(env, o.Get("tokens"), "tokens", 1, 1u << 20);
    const Napi::Value chunk = o.Get("chunk");
    const uint32_t ch = chunk.IsUndefined() ? 0 : u32_arg(env, chunk, "chunk", 0, 4096);
    const uint32_t threads = u32_arg(env, o.Get("threads"), "threads", 1, LH_MAX_RANGE_THREADS);
    const size_t C = (2ull * sh.key_heads + sh.value_heads) * sh.head_dim, V = static_cast<size_t>(sh.value_heads) * sh.head_dim;
    lh_gdn_io io{};
    io.tokens = T;
    io.qkv = f32_arg(env, o.Get("qkv"), "qkv", T * C).Data();
    io.z = f32_arg(env, o.Get("z"), "z", T * V).Data();
    io.beta = f32_arg(env, o.Get("beta"), "beta", static_cast<size_t>(T) * sh.value_heads).Data();
    io.decay = f32_arg(env, o.Get("decay"), "decay", static_cast<size_t>(T) * sh.value_heads).Data();
    io.conv = f32_arg(env, o.Get("conv"), "conv", C * sh.conv_kernel).Data();
    io.norm = f32_arg(env, o.Get("norm"), "norm", sh.head_dim).Data();
    io.state = f32_arg(env, o.Get("state"), "state", lh_gdn_state_floats(&sh)).Data();
    io.out = f32_arg(env, o.Get("out"), "out", T * V).Data();
    const lh_status st = lh_gdn_run(&sh, &io, ch, threads);
    if (st != LH_OK) fail(env, st, "gatedDeltaNet failed");
    return env.Undefined();
  });
}

// denseKernel(ggmlType) -> 'amx' | 'avx512' | 'avx2' | 'scalar' | null: the dot kernels DenseStage would run
// for weights of that type on this CPU (quant_dot.h), null when the type has none.
Napi::Value DenseKernel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint32_t type = u32_arg(env, info[0], "ggmlType", 0, 1000);
    lh_qdot_kernels k{};
    if (!lh_qdot_kernels_for(type, LH_QDOT_AUTO, &k)) return env.Null();
    return Napi::String::New(env, qdot_impl_name(k.impl));
  });
}

// The GGML types that have dot kernels (quant_dot.h), by ggml's names: cpuLevel()'s dense kernels.
constexpr struct {
  uint32_t type;
  const char* name;
} kDenseTypes[] = {{LH_QDOT_F32, "F32"},   {LH_QDOT_F16, "F16"},   {LH_QDOT_Q4_0, "Q4_0"}, {LH_QDOT_Q8_0, "Q8_0"},
                   {LH_QDOT_Q4_K, "Q4_K"}, {LH_QDOT_Q5_K, "Q5_K"}, {LH_QDOT_Q6_K, "Q6_K"}, {LH_QDOT_MXFP4, "MXFP4"}, {LH_QDOT_Q5_0, "Q5_0"}, {LH_QDOT_Q4_1, "Q4_1"}, {LH_QDOT_Q5_1, "Q5_1"}};

// cpuLevel() -> { level, cpu, forced, attention, dense: { F32: 'avx2', ..., Q6_K: 'avx2' } }: the level
// the kernels run at (cpu_level.h: LONGHAND_CPU_LEVEL's cap applied), the CPU's own, whether the cap
// lowered it, and the kernels every dispatch now chooses (attention's LH_ATTN_AUTO, quant_dot's AUTO per
// weight type; 'amx' means AVX512's kernels with AMX tiles in prefill).
Napi::Value CpuLevel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    Napi::Object o = Napi::Object::New(env);
    o.Set("level", lh_cpu_level_name(lh_cpu_level_effective()));
    o.Set("cpu", lh_cpu_level_name(lh_cpu_level_detected()));
    o.Set("forced", lh_cpu_level_forced());
    o.Set("attention", lh_attention_impl_name(LH_ATTN_AUTO));
    Napi::Object dense = Napi::Object::New(env);
    for (const auto& t : kDenseTypes) {
      lh_qdot_kernels k{};
      dense.Set(t.name, lh_qdot_kernels_for(t.type, LH_QDOT_AUTO, &k) ? Napi::Value(Napi::String::New(env, qdot_impl_name(k.impl))) : env.Null());
    }
    o.Set("dense", dense);
    return o;
  });
}

// measureDotPeak(ggmlType, repeats = 5) -> { kernel, tokens, macsPerSecond }: the dot kernels' compute
// peak on one thread (quant_dot_peak.h), for bench/'s prefill bound.
Napi::Value MeasureDotPeak(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint32_t type = u32_arg(env, info[0], "ggmlType", 0, 1000);
    const uint32_t repeats = info[1].IsUndefined() ? 5 : u32_arg(env, info[1], "repeats", 1, LH_PEAK_MAX_REPEATS);
    lh_qdot_peak peak{};
    const lh_status st = lh_qdot_measure_peak(type, repeats, &peak);
    if (st == LH_BAD_ARGUMENT) fail(env, st, "measureDotPeak: GGML type " + std::to_string(type) + " has no dot kernels");
    if (st != LH_OK) fail(env, st, "measureDotPeak: cannot allocate the probe's buffers");
    Napi::Object o = Napi::Object::New(env);
    o.Set("kernel", qdot_impl_name(peak.impl));
    o.Set("tokens", peak.tokens);
    o.Set("macsPerSecond", peak.macs_per_s);
    return o;
  });
}

// measureReadBandwidth(bytes, repeats, threads = 1) -> GB/s (best pass; see bandwidth.h)
// vulkanDevices(library: string) -> { devices: [{ name, vendorId, deviceId, apiVersion, driverVersion,
//   type, shaderFloat16, storageBuffer16Bit, featuresKnown }], error: string | null, step: number }
// (vulkan_adapters.h). A machine without Vulkan is an answer (step != 0, error says why), not a throw.
Napi::Value VulkanDevices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    if (!info[0].IsString()) fail(env, LH_BAD_ARGUMENT, "library must be a string, got " + describe(info[0]));
    const std::string library = info[0].As<Napi::String>().Utf8Value();
    if (library.empty() || library.find('\0') != std::string::npos) fail(env, LH_BAD_ARGUMENT, "library must be a non-empty file name or path");
    std::vector<lh_vulkan_device> devices;
    std::string error;
    const int step = lh_vulkan_devices(library.c_str(), &devices, &error);
    Napi::Array list = Napi::Array::New(env, devices.size());
    for (size_t i = 0; i < devices.size(); i++) {
      const lh_vulkan_device& d = devices[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("name", d.name);
      o.Set("vendorId", Napi::Number::New(env, d.vendor_id));
      o.Set("deviceId", Napi::Number::New(env, d.device_id));
      o.Set("apiVersion", Napi::Number::New(env, d.api_version));
      o.Set("driverVersion", Napi::Number::New(env, d.driver_version));
      o.Set("type", Napi::Number::New(env, d.type));
      o.Set("shaderFloat16", Napi::Boolean::New(env, d.shader_float16));
      o.Set("storageBuffer16Bit", Napi::Boolean::New(env, d.storage_buffer_16bit));
      o.Set("featuresKnown", Napi::Boolean::New(env, d.features_known));
      list.Set(static_cast<uint32_t>(i), o);
    }
    Napi::Object out = Napi::Object::New(env);
    out.Set("devices", list);
    out.Set("error", step == 0 ? env.Null() : Napi::String::New(env, error));
    out.Set("step", Napi::Number::New(env, step));
    return out;
  });
}

Napi::Value MeasureReadBandwidth(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const uint64_t bytes = static_cast<uint64_t>(
        integer_arg(env, info[0], "bytes", static_cast<double>(LH_BANDWIDTH_MIN_BYTES), static_cast<double>(LH_BANDWIDTH_MAX_BYTES)));
    const uint32_t repeats = u32_arg(env, info[1], "repeats", 1, LH_BANDWIDTH_MAX_REPEATS);
    const uint32_t threads = info[2].IsUndefined() ? 1 : u32_arg(env, info[2], "threads", 1, LH_BANDWIDTH_MAX_THREADS);
    double gbs = 0;
    const lh_status st = lh_measure_read_bandwidth(bytes, repeats, threads, &gbs);
    if (st == LH_OUT_OF_MEMORY) fail(env, st, "cannot allocate " + std::to_string(bytes) + " bytes to measure bandwidth");
    if (st != LH_OK) fail(env, st, "measureReadBandwidth failed");
    return Napi::Number::New(env, gbs);
  });
}

Napi::Value SetErrorFactory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    AddonData* data = env.GetInstanceData<AddonData>();
    if (info[0].IsFunction()) data->error_factory = Napi::Persistent(info[0].As<Napi::Function>());
    else if (info[0].IsUndefined() || info[0].IsNull()) data->error_factory.Reset();
    else fail(env, LH_BAD_ARGUMENT, "setErrorFactory expects a function");
    return env.Undefined();
  });
}

// ---------------------------------------------------------------------------------------------
// Test-only fault hook
// ---------------------------------------------------------------------------------------------
// testFault('segv' | 'abort') kills the process the way a bug in native code would: a write
// through a null pointer (a real SIGSEGV from the MMU, not raise()) or abort() (SIGABRT). It
// exists so the crash-isolation tests (engine process dies mid-generation, the window survives)
// can exercise a genuine native fault. Init exports it only when LONGHAND_TEST_FAULTS=1 is in the
// environment at load time, so a user's engine never has it.
Napi::Value TestFault(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const std::string kind = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : std::string();
    if (kind == "segv") {
      // The pointer is read through a volatile so the compiler cannot prove it null and replace
      // the store by a trap instruction (SIGILL); the store itself must fault.
      int* volatile target = nullptr;
      *target = 0x4c48;
    } else if (kind == "abort") {
      std::abort();
    }
    fail(env, LH_BAD_ARGUMENT, "testFault kind must be 'segv' or 'abort', got " + (info[0].IsString() ? "'" + kind + "'" : describe(info[0])));
  });
}

bool test_faults_enabled() {
  const char* flag = std::getenv("LONGHAND_TEST_FAULTS");
  return flag != nullptr && std::strcmp(flag, "1") == 0;
}

// LONGHAND_CPU_LEVEL (cpu_level.h), read as the addon loads, before any kernel is chosen: caps every
// dispatch at that level. Unset or empty: no cap. An unknown name, or a level this CPU lacks, fails
// the load with NATIVE_BAD_ARGUMENT (native/index.js rethrows it as NativeError), so no process runs
// at a level other than the one it asked for.
void apply_cpu_level_env(Napi::Env env) {
  const char* value = std::getenv(LH_CPU_LEVEL_ENV);
  if (value == nullptr || *value == '\0') return;
  lh_cpu_level level = LH_CPU_PORTABLE;
  const bool known = lh_cpu_level_parse(value, &level);
  if (known && lh_cpu_level_force(level) == LH_OK) return;
  const lh_cpu_level cpu = lh_cpu_level_detected();
  std::string allowed;
  for (uint32_t l = LH_CPU_PORTABLE; l <= cpu; ++l) allowed += std::string(allowed.empty() ? "" : ", ") + lh_cpu_level_name(static_cast<lh_cpu_level>(l));
  const std::string shown = std::string(value).substr(0, 64);
  Napi::Object details = Napi::Object::New(env);
  details.Set("variable", LH_CPU_LEVEL_ENV);
  details.Set("value", shown);
  details.Set("reason", known ? "cpu-lacks-level" : "unknown-level");
  details.Set("cpuLevel", lh_cpu_level_name(cpu));
  const std::string message = known ? std::string(LH_CPU_LEVEL_ENV) + "=" + shown + " asks for kernels this CPU cannot run: it has " +
                                          lh_cpu_level_name(cpu) + " at most (allowed: " + allowed + ")"
                                    : std::string(LH_CPU_LEVEL_ENV) + " must be one of portable, avx2, avx512, amx (or unset), got '" + shown +
                                          "' (this CPU allows " + allowed + ")";
  throw make_error(env, LH_BAD_ARGUMENT, message, details);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData<AddonData>(new AddonData());
  apply_cpu_level_env(env);
  exports.Set("abiVersion", Napi::Number::New(env, kAbiVersion));
  exports.Set("attentionKernel", Napi::String::New(env, lh_attention_impl_name(LH_ATTN_AUTO)));
  exports.Set("KvPool", KvPool::Define(env));
  exports.Set("MappedFile", MappedFile::Define(env));
  exports.Set("Speculator", Speculator::Define(env));
  exports.Set("DenseStage", DenseStage::Define(env));
  exports.Set("denseKernel", Napi::Function::New(env, DenseKernel, "denseKernel"));
  exports.Set("gatedDeltaNet", Napi::Function::New(env, GatedDeltaNet, "gatedDeltaNet"));
  exports.Set("cpuLevel", Napi::Function::New(env, CpuLevel, "cpuLevel"));
  exports.Set("measureDotPeak", Napi::Function::New(env, MeasureDotPeak, "measureDotPeak"));
  exports.Set("selectInfinigen", Napi::Function::New(env, SelectInfinigen, "selectInfinigen"));
  exports.Set("attend", Napi::Function::New(env, [](const Napi::CallbackInfo& info) { return Attend(info, AttendKind::kDecode); }, "attend"));
  exports.Set("attendReference", Napi::Function::New(env, [](const Napi::CallbackInfo& info) { return Attend(info, AttendKind::kDecodeRef); }, "attendReference"));
  exports.Set("attendCausal", Napi::Function::New(env, [](const Napi::CallbackInfo& info) { return Attend(info, AttendKind::kCausal); }, "attendCausal"));
  exports.Set("attendCausalReference", Napi::Function::New(env, [](const Napi::CallbackInfo& info) { return Attend(info, AttendKind::kCausalRef); }, "attendCausalReference"));
  exports.Set("attendSlots", Napi::Function::New(env, AttendSlots, "attendSlots"));
  exports.Set("attentionScores", Napi::Function::New(env, AttentionScores, "attentionScores"));
  exports.Set("gatherRows", Napi::Function::New(env, GatherRows, "gatherRows"));
  exports.Set("skewEnergy", Napi::Function::New(env, SkewEnergy, "skewEnergy"));
  exports.Set("selectStreaming", Napi::Function::New(env, SelectStreaming, "selectStreaming"));
  exports.Set("selectH2o", Napi::Function::New(env, SelectH2o, "selectH2o"));
  exports.Set("h2oAccumulate", Napi::Function::New(env, H2oAccumulate, "h2oAccumulate"));
  exports.Set("questExtendBounds", Napi::Function::New(env, QuestExtendBounds, "questExtendBounds"));
  exports.Set("selectQuest", Napi::Function::New(env, SelectQuest, "selectQuest"));
  exports.Set("snapkvCompress", Napi::Function::New(env, SnapkvCompress, "snapkvCompress"));
  exports.Set("repackGguf", Napi::Function::New(env, RepackGguf, "repackGguf"));
  exports.Set("setMallocMmapThreshold", Napi::Function::New(env, SetMallocMmapThreshold, "setMallocMmapThreshold"));
  exports.Set("mallocTrim", Napi::Function::New(env, MallocTrim, "mallocTrim"));
  exports.Set("vulkanDevices", Napi::Function::New(env, VulkanDevices, "vulkanDevices"));
  exports.Set("measureReadBandwidth", Napi::Function::New(env, MeasureReadBandwidth, "measureReadBandwidth"));
  exports.Set("setErrorFactory", Napi::Function::New(env, SetErrorFactory, "setErrorFactory"));
  if (test_faults_enabled()) exports.Set("testFault", Napi::Function::New(env, TestFault, "testFault"));
  return exports;
}

}  // namespace

NODE_API_MODULE(longhand, Init)
