// flashinfer-guard conformance oracle: FlashInfer's REAL host planners, driven over JSON lines.
//
// This file contains no FlashInfer code. It #includes <flashinfer/attention/scheduler.cuh> (and,
// for the CUDA-core decode planner, the decode params / variant headers) from a FlashInfer wheel
// that tests/conformance/oracle.py downloads at test time, and calls FlashInfer's own
//   PrefillPlan<int32_t>            (FA2 prefill planner; prefill wrappers, tensor-core decode)
//   DecodePlan<...>                 (CUDA-core decode planner) with the real
//     BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP_SIZE, HEAD_DIM, ...> as its
//     work-estimation function, the group size dispatched through FlashInfer's own
//     DISPATCH_GQA_GROUP_SIZE exactly like csrc/batch_decode.cu does (HEAD_DIM is a JIT
//     constant there; this harness instantiates 64/96/128/192/256/512, real-CUDA build 64/128/256)
//   PrefillSM90Plan<int32_t>        (FA3 planner, int buffer only)
//   MLAPlan<int32_t>                (the MLA planner; FA2 and FA3 MLA plans both call it)
//
// How allocations are read: scheduler.cuh allocates through flashinfer::AlignedAllocator. Before
// including scheduler.cuh we define a subclass FigTracingAllocator whose aligned_alloc_offset()
// forwards to the real AlignedAllocator::aligned_alloc_offset (the real arithmetic, the real
// overflow error) and records (name, size, alignment) as FlashInfer passed them together with the
// offset FlashInfer's allocator returned; scheduler.cuh's uses of the name AlignedAllocator are
// pointed at the subclass with a macro. The buffer ("float"/"int") is told by the allocator's
// base pointer. Nothing is recomputed here. Cross-checks performed on every request:
//   * the int total equals the byte count FlashInfer passes to cudaMemcpyAsync (its own
//     int_allocator.num_allocated_bytes()) where the planner copies;
//   * offsets stored in plan_info (v_offset, s_offset, request_indices_offset, ...) equal the
//     traced offsets of the allocations with those names;
//   * with "verify": true in the request, each allocation k is re-run with its buffer one byte
//     short of offset_k + bytes_k; FlashInfer's own overflow message must then name allocation k
//     with the same size and alignment (independent of the tracing subclass).
//
// Build modes (see oracle.py / ci/gpu_planner_check.sh):
//   default          CUDA runtime stubbed here (no GPU, no libcudart): SM count, compute
//                    capability, shared-memory limits and occupancy come from each request.
//   -DFIG_REAL_CUDA  real CUDA runtime and the real decode kernel (decode.cuh) for occupancy;
//                    request fields num_sms/cc/blocks_per_sm are ignored, the device decides.
//   -DFIG_SHARED_LIB a shared library instead of a program (stubbed CUDA runtime as the
//                    default): fig_request(json) -> json, the same protocol; used in-process by
//                    tests/realcalls/standin.py under the frameworks' real plan() calls.
// Signature macros (set by the build from the release's scheduler.cuh):
//   FIG_HAS_COLOCATED  PrefillPlan takes num_colocated_ctas        (0.6.x+)
//   FIG_HAS_UNIFORM    PrefillPlan takes uniform_q_len             (0.6.16+)
//   FIG_HAS_FIXED_UNIFORM PrefillPlan takes fixed_uniform_q_len    (0.7.4+)
//   FIG_HAS_KV_DTYPE   PrefillPlan takes kv_dtype_bytes            (0.7.0+)
//   FIG_HAS_MLA        scheduler.cuh has MLAPlan                   (every pinned release)
//   FIG_MLA_STAGED     MLAPlan returns staged_int_workspace_bytes instead of copying (0.7.0+)
//
// Protocol: one JSON object per stdin line
//   {"id": str, "planner": "prefill"|"decode"|"sm90", "params": {...}, "verify": bool?}
// one JSON object per stdout line
//   {"id", "ok": true, "float_bytes", "int_bytes", "padded_batch_size", "cta_tile_q", "split_kv",
//    "plan_info": [the planner's plan_info.ToVector()],
//    "allocations": [{"name","buffer","bytes","align","offset"}, ...]}
//   or {"id", "ok": false, "error": msg}.
// Params (snake_case C++ names; missing ones take the defaults below; ones a release lacks are
// ignored): qo_indptr, kv_indptr (pages), kv_len_arr (sm90), indptr (decode), total_num_rows
// (default qo_indptr[-1]), batch_size (default len(indptr)-1), num_qo_heads, num_kv_heads,
// head_dim_qk, head_dim_vo, head_dim (decode; also the default for head_dim_qk/vo),
// page_size (1), enable_cuda_graph (false), window_left (-1), fixed_split_size (-1),
// disable_split_kv (false), num_colocated_ctas (0), uniform_q_len (0), fixed_uniform_q_len
// (false), kv_dtype_bytes (2), causal (false), num_sms (132), cc_major (9), cc_minor (0),
// blocks_per_sm (1), max_smem_per_sm / max_smem_per_block_optin (defaults from cc),
// float_workspace_bytes / int_workspace_bytes (default: effectively unlimited).
// blocks_per_sm -1: the occupancy query answers from the launch the planner asks about
// (its block size and dynamic shared memory, FlashInfer's own kernel configuration) and the
// GPU's limits: with FIG_HAS_ARCH_TRAITS (the CCCL headers FlashInfer's wheel ships, 0.6.x+)
// NVIDIA's own per-compute-capability table, cuda::arch_traits_for (cuda/__device/arch_traits.h:
// max threads, max blocks and shared memory per SM, shared memory reserved per block); without
// it the request's max_threads_per_sm, max_blocks_per_sm, reserved_smem_per_block (1024),
// max_smem_per_sm. Registers are not known without the compiled kernel, so this is an upper
// bound (the occupancy calculator's threads/blocks/shared-memory limits).
// planner "mla" (FIG_HAS_MLA): MLAPlan with qo_indptr, kv_indptr (pages; only copied), kv_len_arr,
// batch_size, num_heads (128), head_dim_o (512), causal (true), num_sms; replies also
// total_num_works, cluster_size, num_clusters, merge_ctas, stride (the per-work array stride,
// max_total_num_works) and, with "want_works": true, works_valid, work_indptr and works (one
// [q_indptr, kv_indptr, partial_indptr, q_len, kv_len, q_start, kv_start, kv_end] per work).
// planner "prefill_workspace_size" (FIG_HAS_WS_SIZE, FlashInfer >= 0.7.0): FlashInfer's own
// PrefillPlanWorkspaceSize (the size-only planner behind the wrappers' workspace_size(), PR
// #3741) with the prefill params; replies float_workspace_size, int_workspace_size.

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#ifdef FIG_HAS_ARCH_TRAITS
#include <cuda/__device/arch_traits.h>
#endif

#include <flashinfer/allocator.h>

// ---------------------------------------------------------------------------------------------
// Allocation tracing (a subclass; the arithmetic stays FlashInfer's).
namespace fig {
struct Alloc {
  std::string name;
  std::string buffer;
  uint64_t bytes, align, offset;
};
static std::vector<Alloc> g_trace;
static void* g_float_base = nullptr;
static void* g_int_base = nullptr;
static long long g_memcpy_bytes = -1;
}  // namespace fig

namespace flashinfer {
struct FigTracingAllocator : public AlignedAllocator {
  using AlignedAllocator::AlignedAllocator;
  size_t aligned_alloc_offset(size_t size, size_t alignment, std::string name) {
    size_t off = AlignedAllocator::aligned_alloc_offset(size, alignment, name);
    const char* buf = base_ptr == fig::g_float_base ? "float"
                      : base_ptr == fig::g_int_base ? "int"
                                                    : "unknown";
    fig::g_trace.push_back({name, buf, (uint64_t)size, (uint64_t)alignment, (uint64_t)off});
    return off;
  }
};
}  // namespace flashinfer

#define AlignedAllocator FigTracingAllocator
#include <flashinfer/attention/scheduler.cuh>
#undef AlignedAllocator

#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/variants.cuh>
#ifdef FIG_REAL_CUDA
#include <flashinfer/attention/decode.cuh>
#endif

// ---------------------------------------------------------------------------------------------
// CUDA runtime stubs (host-only build). Values come from the current request.
namespace fig {
struct Device {
  int num_sms = 132, cc_major = 9, cc_minor = 0, blocks_per_sm = 1;
  int smem_per_sm = 233472, smem_optin = 232448, smem_per_block = 49152;
  int max_threads_per_sm = 2048, max_blocks_per_sm = 32, reserved_smem_per_block = 1024;
  long long last_block_size = -1, last_smem = -1;  // the last occupancy query's launch
};
// blocks_per_sm < 0: the occupancy calculator's bound for this launch (threads, blocks, smem)
static int occupancy_of(Device& d, int block_size, size_t smem) {
  d.last_block_size = block_size;
  d.last_smem = (long long)smem;
  if (d.blocks_per_sm >= 0) return d.blocks_per_sm;
  long long max_threads = d.max_threads_per_sm, max_blocks = d.max_blocks_per_sm;
  long long smem_sm = d.smem_per_sm, reserved = d.reserved_smem_per_block;
#ifdef FIG_HAS_ARCH_TRAITS
  {
    auto t = ::cuda::arch_traits_for(::cuda::compute_capability{d.cc_major * 10 + d.cc_minor});
    max_threads = t.max_threads_per_multiprocessor;
    max_blocks = t.max_blocks_per_multiprocessor;
    smem_sm = (long long)t.max_shared_memory_per_multiprocessor;
    reserved = (long long)t.reserved_shared_memory_per_block;
  }
#endif
  int warps = (block_size + 31) / 32;
  int by_threads = warps ? (int)(max_threads / (warps * 32)) : (int)max_blocks;
  long long per_block = (long long)smem + reserved;
  int by_smem = per_block > 0 ? (int)(smem_sm / per_block) : (int)max_blocks;
  int n = (int)max_blocks;
  if (by_threads < n) n = by_threads;
  if (by_smem < n) n = by_smem;
  return n;
}
static Device g_dev;
}  // namespace fig

#ifndef FIG_REAL_CUDA
// Kernel symbols the planners take the address of (only to ask for occupancy, which is stubbed).
namespace flashinfer {
template <PosEncodingMode POS_ENCODING_MODE, uint32_t num_stages_smem, uint32_t tile_size_per_bdx,
          uint32_t vec_size, uint32_t bdx, uint32_t bdy, uint32_t bdz, typename AttentionVariant,
          typename Params>
__global__ void BatchDecodeWithPagedKVCacheKernel(const __grid_constant__ Params params) {}
}  // namespace flashinfer

#if !defined(__CUDA_ARCH__)  // host pass only: the device pass has its own declarations
extern "C" {
cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaSetDevice(int) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = fig::g_dev.num_sms; break;
    case cudaDevAttrComputeCapabilityMajor: *value = fig::g_dev.cc_major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = fig::g_dev.cc_minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = fig::g_dev.smem_per_sm; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = fig::g_dev.smem_optin; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = fig::g_dev.smem_per_block; break;
    default:
      fprintf(stderr, "harness: unstubbed cudaDeviceGetAttribute(%d)\n", (int)attr);
      return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void*,
                                                                    int block_size, size_t smem) {
  *numBlocks = fig::occupancy_of(fig::g_dev, block_size, smem);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks,
                                                                             const void*, int block_size,
                                                                             size_t smem, unsigned int) {
  *numBlocks = fig::occupancy_of(fig::g_dev, block_size, smem);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFuncSetAttribute(const void*, enum cudaFuncAttribute, int) {
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                      enum cudaMemcpyKind, cudaStream_t) {
  fig::g_memcpy_bytes = (long long)count;
  if (count) memcpy(dst, src, count);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind) {
  if (count) memcpy(dst, src, count);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetLastError(void) { return cudaSuccess; }
const char* CUDARTAPI cudaGetErrorString(cudaError_t e) {
  static thread_local char buf[64];
  snprintf(buf, sizeof(buf), "cudaError %d", (int)e);
  return buf;
}
// Fat-binary registration that nvcc emits for the kernel stub above.
void** CUDARTAPI __cudaRegisterFatBinary(void*) {
  static void* handle = nullptr;
  return &handle;
}
void CUDARTAPI __cudaRegisterFatBinaryEnd(void**) {}
void CUDARTAPI __cudaUnregisterFatBinary(void**) {}
void CUDARTAPI __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*,
                                      dim3*, dim3*, int*) {}
void CUDARTAPI __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3*, dim3*, size_t*, void*) {
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return cudaSuccess;
}
}
#endif  // !__CUDA_ARCH__
#endif  // FIG_REAL_CUDA

// ---------------------------------------------------------------------------------------------
// Tiny JSON (objects, arrays, numbers, strings, bools, null).
namespace fig {
struct JVal {
  enum T { NUL, BOOL, NUM, STR, ARR, OBJ } t = NUL;
  bool b = false;
  long long i = 0;
  double d = 0;
  bool is_int = true;
  std::string s;
  std::vector<JVal> a;
  std::vector<std::pair<std::string, JVal>> o;
  const JVal* get(const std::string& k) const {
    for (auto& kv : o)
      if (kv.first == k) return &kv.second;
    return nullptr;
  }
};
struct JParser {
  const char* p;
  const char* e;
  void ws() {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
  }
  [[noreturn]] void fail(const char* m) { throw std::runtime_error(std::string("bad JSON: ") + m); }
  std::string str() {
    if (*p != '"') fail("expected string");
    ++p;
    std::string r;
    while (p < e && *p != '"') {
      if (*p == '\\') {
        ++p;
        if (p >= e) fail("escape");
        char c = *p++;
        switch (c) {
          case 'n': r += '\n'; break;
          case 't': r += '\t'; break;
          case 'r': r += '\r'; break;
          case 'b': r += '\b'; break;
          case 'f': r += '\f'; break;
          case 'u': {
            if (e - p < 4) fail("\\u");
            unsigned cp = std::stoul(std::string(p, 4), nullptr, 16);
            p += 4;
            if (cp < 0x80) r += (char)cp;
            else if (cp < 0x800) { r += (char)(0xC0 | (cp >> 6)); r += (char)(0x80 | (cp & 63)); }
            else { r += (char)(0xE0 | (cp >> 12)); r += (char)(0x80 | ((cp >> 6) & 63)); r += (char)(0x80 | (cp & 63)); }
            break;
          }
          default: r += c;
        }
      } else {
        r += *p++;
      }
    }
    if (p >= e) fail("unterminated string");
    ++p;
    return r;
  }
  JVal val() {
    ws();
    if (p >= e) fail("unexpected end");
    JVal v;
    if (*p == '{') {
      v.t = JVal::OBJ;
      ++p;
      ws();
      if (*p == '}') { ++p; return v; }
      while (true) {
        ws();
        std::string k = str();
        ws();
        if (*p != ':') fail("expected :");
        ++p;
        v.o.emplace_back(k, val());
        ws();
        if (*p == ',') { ++p; continue; }
        if (*p == '}') { ++p; break; }
        fail("expected , or }");
      }
    } else if (*p == '[') {
      v.t = JVal::ARR;
      ++p;
      ws();
      if (*p == ']') { ++p; return v; }
      while (true) {
        v.a.push_back(val());
        ws();
        if (*p == ',') { ++p; continue; }
        if (*p == ']') { ++p; break; }
        fail("expected , or ]");
      }
    } else if (*p == '"') {
      v.t = JVal::STR;
      v.s = str();
    } else if (!strncmp(p, "true", 4)) { v.t = JVal::BOOL; v.b = true; p += 4; }
    else if (!strncmp(p, "false", 5)) { v.t = JVal::BOOL; v.b = false; p += 5; }
    else if (!strncmp(p, "null", 4)) { v.t = JVal::NUL; p += 4; }
    else {
      const char* s = p;
      if (*p == '-') ++p;
      while (p < e && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' ||
                       *p == '+' || *p == '-')) {
        if (*p == '.' || *p == 'e' || *p == 'E') v.is_int = false;
        ++p;
      }
      if (s == p) fail("unexpected character");
      v.t = JVal::NUM;
      std::string tok(s, p);
      if (v.is_int) { v.i = std::stoll(tok); v.d = (double)v.i; }
      else { v.d = std::stod(tok); v.i = (long long)v.d; }
    }
    return v;
  }
};

static std::string jstr(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    switch (c) {
      case '"': r += "\\\""; break;
      case '\\': r += "\\\\"; break;
      case '\n': r += "\\n"; break;
      case '\t': r += "\\t"; break;
      case '\r': r += "\\r"; break;
      default:
        if ((unsigned char)c < 0x20) { char b[8]; snprintf(b, 8, "\\u%04x", c); r += b; }
        else r += c;
    }
  }
  return r + "\"";
}

struct Params {
  const JVal* o;
  bool has(const char* k) const { return o && o->get(k) && o->get(k)->t != JVal::NUL; }
  long long i(const char* k, long long dflt) const {
    if (!has(k)) return dflt;
    const JVal* v = o->get(k);
    if (v->t == JVal::BOOL) return v->b;
    if (v->t != JVal::NUM) throw std::runtime_error(std::string("param ") + k + " must be a number");
    return v->i;
  }
  bool b(const char* k, bool dflt) const { return i(k, dflt) != 0; }
  std::vector<int32_t> arr(const char* k) const {
    std::vector<int32_t> r;
    if (!has(k)) return r;
    const JVal* v = o->get(k);
    if (v->t != JVal::ARR) throw std::runtime_error(std::string("param ") + k + " must be an array");
    for (auto& x : v->a) r.push_back((int32_t)x.i);
    return r;
  }
};

// ---------------------------------------------------------------------------------------------
// Buffers: device buffers are address ranges (the float one is never touched by the planners;
// the int one only receives the cudaMemcpyAsync), the page-locked int buffer is real memory.
static const uint64_t kFloatBase = 1ull << 44;              // fake, 4096-aligned
static const uint64_t kUnlimitedFloat = 1ull << 62;
static const uint64_t kIntMapBytes = 8ull << 30;            // reserved, touched lazily
static char* g_int_dev = nullptr;
static uint64_t g_int_cap = kIntMapBytes;
static char* g_int_host = nullptr;

static void init_buffers() {
  g_float_base = (void*)(uintptr_t)kFloatBase;
#ifdef FIG_REAL_CUDA
  // A real device int buffer (so the memcpy is real) and a host staging buffer.
  g_int_cap = 256ull << 20;
  if (cudaMalloc((void**)&g_int_dev, g_int_cap) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); exit(3); }
  g_int_host = (char*)mmap(nullptr, kIntMapBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
#else
  g_int_dev = (char*)mmap(nullptr, kIntMapBytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  g_int_host = (char*)mmap(nullptr, kIntMapBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
#endif
  if (g_int_dev == MAP_FAILED || g_int_host == MAP_FAILED) { perror("mmap"); exit(3); }
  g_int_base = g_int_dev;
}

struct Result {
  bool ok = true;
  std::string error;
  long long padded_batch_size = -1, cta_tile_q = -1;
  int split_kv = -1;
  std::vector<std::pair<std::string, long long>> plan_offsets;  // name -> plan_info offset
  std::vector<int64_t> plan_info;  // the planner's plan_info.ToVector(), what plan() returns
  std::vector<Alloc> allocs;
  std::vector<std::pair<std::string, long long>> extras;  // planner-specific numbers (MLA)
  std::string extra_json;                                 // planner-specific arrays (MLA works)
  long long staged_bytes = -1;  // MLAPlan >= 0.7.0: staged_int_workspace_bytes it returns
};

static void set_device(const Params& P) {
  Device d;
  d.num_sms = (int)P.i("num_sms", 132);
  d.cc_major = (int)P.i("cc_major", 9);
  d.cc_minor = (int)P.i("cc_minor", 0);
  d.blocks_per_sm = (int)P.i("blocks_per_sm", 1);
  int cc = d.cc_major * 10 + d.cc_minor;
  // CUDA programming guide, "Technical Specifications per Compute Capability".
  int sm_kb = 100, optin_kb = 99;
  if (cc == 80 || cc == 87) { sm_kb = 164; optin_kb = 163; }
  else if (cc == 90 || cc == 100 || cc == 103 || cc == 110) { sm_kb = 228; optin_kb = 227; }
  else if (cc == 70 || cc == 72) { sm_kb = 96; optin_kb = 96; }
  else if (cc == 75) { sm_kb = 64; optin_kb = 64; }
  d.smem_per_sm = (int)P.i("max_smem_per_sm", sm_kb * 1024);
  d.max_threads_per_sm = (int)P.i("max_threads_per_sm", 2048);
  d.max_blocks_per_sm = (int)P.i("max_blocks_per_sm", 32);
  d.reserved_smem_per_block = (int)P.i("reserved_smem_per_block", 1024);
  d.smem_optin = (int)P.i("max_smem_per_block_optin", optin_kb * 1024);
  g_dev = d;
}

// Sizes of the two buffers for this run: {float, int}; overridable for overflow probing.
struct Sizes {
  uint64_t float_bytes, int_bytes;
};

static std::string run_prefill(const Params& P, Sizes sz, Result& R) {
  auto qo = P.arr("qo_indptr");
  auto kv = P.arr("kv_indptr");
  uint32_t batch_size = (uint32_t)P.i("batch_size", qo.empty() ? 0 : (long long)qo.size() - 1);
  if (qo.size() < batch_size + 1 || kv.size() < batch_size + 1)
    throw std::runtime_error("harness: qo_indptr/kv_indptr shorter than batch_size + 1");
  uint32_t total_num_rows = (uint32_t)P.i("total_num_rows", qo.empty() ? 0 : qo[batch_size]);
  long long hd = P.i("head_dim", 128);
  uint32_t num_qo_heads = (uint32_t)P.i("num_qo_heads", 32);
  uint32_t num_kv_heads = (uint32_t)P.i("num_kv_heads", num_qo_heads);
  uint32_t head_dim_qk = (uint32_t)P.i("head_dim_qk", hd);
  uint32_t head_dim_vo = (uint32_t)P.i("head_dim_vo", hd);
  uint32_t page_size = (uint32_t)P.i("page_size", 1);
  bool enable_cuda_graph = P.b("enable_cuda_graph", false);
  int32_t window_left = (int32_t)P.i("window_left", -1);
  int32_t fixed_split_size = (int32_t)P.i("fixed_split_size", -1);
  bool disable_split_kv = P.b("disable_split_kv", false);
  int64_t num_colocated_ctas = P.i("num_colocated_ctas", 0);
  int64_t uniform_q_len = P.i("uniform_q_len", 0);
  bool fixed_uniform_q_len = P.b("fixed_uniform_q_len", false);
  uint32_t kv_dtype_bytes = (uint32_t)P.i("kv_dtype_bytes", 2);
  (void)num_colocated_ctas; (void)uniform_q_len; (void)fixed_uniform_q_len; (void)kv_dtype_bytes;

  flashinfer::PrefillPlanInfo info;
  cudaError_t st = flashinfer::PrefillPlan<int32_t>(
      g_float_base, sz.float_bytes, g_int_dev, g_int_host, sz.int_bytes, info, qo.data(),
      kv.data(), total_num_rows, batch_size, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo,
      page_size, enable_cuda_graph, /*sizeof_dtype_o=*/2, window_left, fixed_split_size,
      disable_split_kv,
#ifdef FIG_HAS_COLOCATED
      num_colocated_ctas,
#endif
#ifdef FIG_HAS_UNIFORM
      uniform_q_len,
#endif
#ifdef FIG_HAS_FIXED_UNIFORM
      fixed_uniform_q_len,
#endif
      /*stream=*/nullptr
#ifdef FIG_HAS_KV_DTYPE
      , kv_dtype_bytes
#endif
  );
  if (st != cudaSuccess) return std::string("PrefillPlan returned ") + cudaGetErrorString(st);
  R.padded_batch_size = info.padded_batch_size;
  R.cta_tile_q = info.cta_tile_q;
  R.split_kv = info.split_kv;
  R.plan_info = info.ToVector();
  R.plan_offsets = {{"batch_prefill_request_indices", info.request_indices_offset},
                    {"batch_prefill_qo_tile_indices", info.qo_tile_indices_offset},
                    {"batch_prefill_kv_tile_indices", info.kv_tile_indices_offset},
                    {"batch_prefill_o_indptr", info.o_indptr_offset},
                    {"batch_prefill_kv_chunk_size_ptr", info.kv_chunk_size_ptr_offset},
                    {"batch_prefill_total_num_rows", info.total_num_rows_offset},
                    {"batch_prefill_merge_indptr", info.merge_indptr_offset},
                    {"batch_prefill_block_valid_mask", info.block_valid_mask_offset},
                    {"batch_prefill_tmp_v", info.v_offset},
                    {"batch_prefill_tmp_s", info.s_offset}};
  return "";
}

// CUDA-core decode: csrc/batch_decode.cu's plan() body for one JIT-compiled HEAD_DIM. The group
// size goes through FlashInfer's own DISPATCH_GQA_GROUP_SIZE (its supported set differs by
// release), the work estimation is FlashInfer's BatchDecodeWithPagedKVCacheWorkEstimationDispatched.
template <uint32_t HEAD_DIM>
static cudaError_t decode_plan_hd(flashinfer::DecodePlanInfo& info, Sizes sz, int32_t* indptr,
                                  uint32_t batch_size, uint32_t num_qo_heads,
                                  uint32_t num_kv_heads, uint32_t page_size,
                                  bool enable_cuda_graph) {
  using namespace flashinfer;
  using Params_ = BatchDecodeParams<half, half, half, int32_t>;
  using Variant = DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/false,
                                   /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;
  cudaError_t st = cudaSuccess;
  DISPATCH_GQA_GROUP_SIZE(num_qo_heads / num_kv_heads, GROUP_SIZE, {
    auto work_estimation_func =
        BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP_SIZE, HEAD_DIM,
                                                            PosEncodingMode::kNone, Variant,
                                                            Params_>;
    st = DecodePlan<HEAD_DIM, PosEncodingMode::kNone, Variant, Params_>(
        g_float_base, sz.float_bytes, g_int_dev, g_int_host, sz.int_bytes, info, indptr,
        batch_size, num_qo_heads, page_size, enable_cuda_graph, /*stream=*/nullptr,
        work_estimation_func);
  });
  return st;
}

static std::string run_decode(const Params& P, Sizes sz, Result& R) {
  auto indptr = P.arr("indptr");
  if (indptr.empty()) indptr = P.arr("kv_indptr");
  uint32_t batch_size = (uint32_t)P.i("batch_size", indptr.empty() ? 0 : (long long)indptr.size() - 1);
  if (indptr.size() < batch_size + 1)
    throw std::runtime_error("harness: indptr shorter than batch_size + 1");
  uint32_t num_qo_heads = (uint32_t)P.i("num_qo_heads", 32);
  uint32_t num_kv_heads = (uint32_t)P.i("num_kv_heads", num_qo_heads);
  long long hd = P.i("head_dim", P.i("head_dim_qk", 128));
  uint32_t page_size = (uint32_t)P.i("page_size", 1);
  bool enable_cuda_graph = P.b("enable_cuda_graph", false);
  if (num_kv_heads == 0 || num_qo_heads % num_kv_heads != 0) {
    // FlashInfer's Python wrapper rejects this before planning (the C++ would truncate).
    throw std::runtime_error("harness: num_qo_heads must be divisible by num_kv_heads");
  }
  flashinfer::DecodePlanInfo info;
  cudaError_t st;
  // HEAD_DIM is a JIT constant in FlashInfer (no head-dim dispatch on this path); the harness
  // instantiates the head dims below.
  switch (hd) {
    case 64: st = decode_plan_hd<64>(info, sz, indptr.data(), batch_size, num_qo_heads, num_kv_heads, page_size, enable_cuda_graph); break;
    case 128: st = decode_plan_hd<128>(info, sz, indptr.data(), batch_size, num_qo_heads, num_kv_heads, page_size, enable_cuda_graph); break;
    case 256: st = decode_plan_hd<256>(info, sz, indptr.data(), batch_size, num_qo_heads, num_kv_heads, page_size, enable_cuda_graph); break;
#ifndef FIG_REAL_CUDA
    // 80: phi-2, stablelm (SGLang's FlashInfer decode JIT-compiles the model's head dim)
    case 80: st = decode_plan_hd<80>(info, sz, indptr.data(), batch_size, num_qo_heads, num_kv_heads, page_size, enable_cuda_graph); break;
    case 96: st = decode_plan_hd<96>(info, sz, indptr.data(), batch_size, num_qo_heads, num_kv_heads, page_size, enable_cuda_graph); break;
    case 192: st = decode_plan_hd<192>(info, sz, indptr.data(), batch_size, num_qo_heads, num_kv_heads, page_size, enable_cuda_graph); break;
    case 512: st = decode_plan_hd<512>(info, sz, indptr.data(), batch_size, num_qo_heads, num_kv_heads, page_size, enable_cuda_graph); break;
#endif
    default:
      throw std::runtime_error("harness: decode head_dim " + std::to_string(hd) +
                               " is not instantiated in this harness build");
  }
  if (st != cudaSuccess) return std::string("DecodePlan returned ") + cudaGetErrorString(st);
  R.padded_batch_size = info.padded_batch_size;
  R.split_kv = info.split_kv;
  R.plan_info = info.ToVector();
  R.plan_offsets = {{"batch_decode_request_indices", info.request_indices_offset},
                    {"batch_decode_kv_tile_indices", info.kv_tile_indices_offset},
                    {"batch_decode_o_indptr", info.o_indptr_offset},
                    {"batch_decode_kv_chunk_size_ptr", info.kv_chunk_size_ptr_offset},
                    {"batch_decode_block_valid_mask", info.block_valid_mask_offset},
                    {"batch_decode_tmp_v", info.v_offset},
                    {"batch_decode_tmp_s", info.s_offset}};
  return "";
}

// For ci/gpu_planner_check.sh: what the device says (real build) or what the stubs say.
static std::string device_info_json() {
  int dev = 0, sms = 0, ma = 0, mi = 0, smem_sm = 0, optin = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, dev);
  cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  std::ostringstream o;
  o << "\"num_sms\":" << sms << ",\"cc_major\":" << ma << ",\"cc_minor\":" << mi
    << ",\"max_smem_per_sm\":" << smem_sm << ",\"max_smem_per_block_optin\":" << optin;
  return o.str();
}

// Occupancy of the CUDA-core decode kernel the planner asks about, with the launch shape
// BatchDecodeWithPagedKVCacheWorkEstimationDispatched uses (half q/kv/o, no pos-encoding, default
// variant). Only used to hand the same blocks_per_sm to the model on a real GPU.
template <uint32_t HEAD_DIM>
static int decode_occupancy_hd(uint32_t group) {
  using namespace flashinfer;
  using Params_ = BatchDecodeParams<half, half, half, int32_t>;
  using Variant = DefaultAttention<false, false, false, false>;
  using DTypeKV = half;
  int n = -1;
  auto cc = GetCudaComputeCapability();
  DISPATCH_GQA_GROUP_SIZE(group, GROUP_SIZE, {
    DISPATCH_COMPUTE_CAP_DECODE_NUM_STAGES_SMEM(cc, NUM_STAGES_SMEM, {
      constexpr uint32_t vec_size = std::max(16UL / sizeof(DTypeKV), HEAD_DIM / 32UL);
      constexpr uint32_t bdx = HEAD_DIM / vec_size;
      constexpr uint32_t bdy = GROUP_SIZE;
      constexpr uint32_t num_threads = std::max(128U, bdx * bdy);
      constexpr uint32_t bdz = num_threads / (bdx * bdy);
      constexpr uint32_t tile_size_per_bdx = GROUP_SIZE == 1 ? (sizeof(DTypeKV) == 1 ? 2U : 4U) : 1U;
      const uint32_t smem_size =
          2 * NUM_STAGES_SMEM * tile_size_per_bdx * bdy * bdz * HEAD_DIM * sizeof(DTypeKV) +
          std::max(tile_size_per_bdx * num_threads * sizeof(DTypeKV*), 2 * bdy * bdz * sizeof(float));
      auto kernel = BatchDecodeWithPagedKVCacheKernel<PosEncodingMode::kNone, NUM_STAGES_SMEM,
                                                      tile_size_per_bdx, vec_size, bdx, bdy, bdz,
                                                      Variant, Params_>;
      int nb = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, num_threads, smem_size) ==
          cudaSuccess)
        n = nb;
    });
  });
  return n;
}

static int decode_occupancy(uint32_t head_dim, uint32_t group) {
  switch (head_dim) {
    case 64: return decode_occupancy_hd<64>(group);
    case 128: return decode_occupancy_hd<128>(group);
    case 256: return decode_occupancy_hd<256>(group);
    default: return -1;
  }
}

static std::string run_sm90(const Params& P, Sizes sz, Result& R) {
  auto qo = P.arr("qo_indptr");
  auto kv = P.arr("kv_indptr");
  auto kvlen = P.arr("kv_len_arr");
  uint32_t batch_size = (uint32_t)P.i("batch_size", qo.empty() ? 0 : (long long)qo.size() - 1);
  if (kv.empty()) kv.assign(batch_size + 1, 0);
  if (qo.size() < batch_size + 1 || kv.size() < batch_size + 1 || kvlen.size() < batch_size)
    throw std::runtime_error("harness: qo_indptr/kv_indptr/kv_len_arr shorter than batch_size");
  uint32_t total_num_rows = (uint32_t)P.i("total_num_rows", qo[batch_size]);
  long long hd = P.i("head_dim", 128);
  uint32_t num_qo_heads = (uint32_t)P.i("num_qo_heads", 32);
  uint32_t num_kv_heads = (uint32_t)P.i("num_kv_heads", num_qo_heads);
  uint32_t head_dim_qk = (uint32_t)P.i("head_dim_qk", hd);
  uint32_t head_dim_vo = (uint32_t)P.i("head_dim_vo", hd);
  uint32_t page_size = (uint32_t)P.i("page_size", 1);
  bool causal = P.b("causal", false);
  bool enable_cuda_graph = P.b("enable_cuda_graph", false);
  flashinfer::PrefillPlanSM90Info info;
  cudaError_t st = flashinfer::PrefillSM90Plan<int32_t>(
      g_float_base, sz.float_bytes, g_int_dev, g_int_host, sz.int_bytes, info,
      qo.data(), kv.data(), kvlen.data(), total_num_rows, batch_size, num_qo_heads, num_kv_heads,
      head_dim_qk, head_dim_vo, page_size, causal, enable_cuda_graph, /*sizeof_dtype_o=*/2,
      /*stream=*/nullptr);
  if (st != cudaSuccess) return std::string("PrefillSM90Plan returned ") + cudaGetErrorString(st);
  R.plan_info = info.ToVector();
  R.plan_offsets = {{"batch_prefill_sm90_qo_tile_indices", info.qo_tile_indices_offset},
                    {"batch_prefill_sm90_qo_offset", info.qo_indptr_offset},
                    {"batch_prefill_sm90_kv_offset", info.kv_indptr_offset},
                    {"batch_prefill_sm90_qo_len", info.qo_len_offset},
                    {"batch_prefill_sm90_kv_len", info.kv_len_offset},
                    {"batch_prefill_sm90_head_indices", info.head_indices_offset},
                    {"batch_prefill_sm90_work_indptr", info.work_indptr_offset},
                    {"batch_prefill_sm90_batch_indices", info.batch_indices_offset}};
  return "";
}

// MLAPlan<int32_t> (csrc/batch_mla_plan.cu, csrc/batch_mla_sm90_plan.cu). Nothing is recomputed:
// the works count is the tail of the work_indptr array FlashInfer wrote to the page-locked int
// buffer (work_indptr[num_blks_y], written last, so intact even when the per-work arrays of
// stride max_total_num_works spill into each other); the merge CTAs are the non-zero entries of
// mla_merge_partial_stride (num_sm entries, each a row tile size > 0, written after the spilling
// arrays before it). With "want_works": the per-work arrays as FlashInfer laid them out (only
// meaningful while total_num_works <= the stride; the reply says so).
#ifdef FIG_HAS_MLA
static std::string run_mla(const Params& P, Sizes sz, Result& R) {
  auto qo = P.arr("qo_indptr");
  auto kv = P.arr("kv_indptr");
  auto kvlen = P.arr("kv_len_arr");
  uint32_t batch_size = (uint32_t)P.i("batch_size", qo.empty() ? 0 : (long long)qo.size() - 1);
  if (batch_size == 0)
    throw std::runtime_error("harness: MLAPlan divides by batch_size; batch_size must be > 0");
  if (kv.empty()) kv.assign(batch_size + 1, 0);
  if (qo.size() < batch_size + 1 || kv.size() < batch_size + 1 || kvlen.size() < batch_size)
    throw std::runtime_error("harness: qo_indptr/kv_indptr/kv_len_arr shorter than batch_size");
  uint32_t num_heads = (uint32_t)P.i("num_heads", 128);
  uint32_t head_dim_o = (uint32_t)P.i("head_dim_o", 512);
  bool causal = P.b("causal", true);
  flashinfer::MLAPlanInfo info;
  size_t staged = 0;
  (void)staged;
  cudaError_t st = flashinfer::MLAPlan<int32_t>(
      g_float_base, sz.float_bytes, g_int_dev, g_int_host, sz.int_bytes, info,
#ifdef FIG_MLA_STAGED
      staged,
#endif
      qo.data(), kv.data(), kvlen.data(), batch_size, num_heads, head_dim_o, causal,
      /*stream=*/nullptr);
  if (st != cudaSuccess) return std::string("MLAPlan returned ") + cudaGetErrorString(st);
#ifdef FIG_MLA_STAGED
  R.staged_bytes = (long long)staged;
#endif
  R.plan_info = info.ToVector();
  R.plan_offsets = {{"mla_q_indptr", info.q_indptr_offset},
                    {"mla_kv_indptr", info.kv_indptr_offset},
                    {"mla_partial_indptr", info.partial_indptr_offset},
                    {"mla_merge_packed_offset_start", info.merge_packed_offset_start_offset},
                    {"mla_merge_packed_offset_end", info.merge_packed_offset_end_offset},
                    {"mla_merge_partial_packed_offset_start", info.merge_partial_packed_offset_start_offset},
                    {"mla_merge_partial_packed_offset_end", info.merge_partial_packed_offset_end_offset},
                    {"mla_merge_partial_stride", info.merge_partial_stride_offset},
                    {"mla_q_len", info.q_len_offset},
                    {"mla_kv_len", info.kv_len_offset},
                    {"mla_q_start", info.q_start_offset},
                    {"mla_kv_start", info.kv_start_offset},
                    {"mla_kv_end", info.kv_end_offset},
                    {"mla_work_indptr", info.work_indptr_offset},
                    {"mla_partial_o", info.partial_o_offset},
                    {"mla_partial_lse", info.partial_lse_offset}};
  const int32_t* host = (const int32_t*)g_int_host;
  long long num_clusters = info.num_blks_y;
  const int32_t* work_indptr = host + info.work_indptr_offset / 4;
  std::string bad;
  if (work_indptr[0] != 0) bad += "work_indptr[0] != 0; ";
  for (long long c = 0; c < num_clusters; ++c)
    if (work_indptr[c + 1] < work_indptr[c]) bad += "work_indptr decreases; ";
  long long works = work_indptr[num_clusters];
  long long stride = (info.kv_indptr_offset - info.q_indptr_offset) / 4;
  int num_sm = g_dev.num_sms;
  long long merge = 0;
  const int32_t* mstride = host + info.merge_partial_stride_offset / 4;
  for (int k = 0; k < num_sm; ++k)
    if (mstride[k] != 0) ++merge;
  if (!bad.empty()) throw std::runtime_error("HARNESS CROSS-CHECK FAILED: " + bad);
  R.extras = {{"total_num_works", works},
              {"cluster_size", info.num_blks_x},
              {"num_clusters", num_clusters},
              {"merge_ctas", merge},
              {"stride", stride}};
  bool want = P.b("want_works", false);
  if (want) {
    std::ostringstream o;
    o << ",\"works_valid\":" << (works <= stride ? "true" : "false") << ",\"work_indptr\":[";
    for (long long c = 0; c <= num_clusters; ++c) o << (c ? "," : "") << work_indptr[c];
    o << "],\"works\":[";
    if (works <= stride) {
      const int64_t offs[8] = {info.q_indptr_offset, info.kv_indptr_offset, info.partial_indptr_offset,
                               info.q_len_offset,    info.kv_len_offset,    info.q_start_offset,
                               info.kv_start_offset, info.kv_end_offset};
      for (long long w = 0; w < works; ++w) {
        o << (w ? ",[" : "[");
        for (int k = 0; k < 8; ++k) o << (k ? "," : "") << host[offs[k] / 4 + w];
        o << "]";
      }
    }
    o << "]";
    R.extra_json = o.str();
  }
  return "";
}
#endif  // FIG_HAS_MLA

static Result run_once(const std::string& planner, const Params& P, Sizes sz) {
  Result R;
  g_trace.clear();
  g_memcpy_bytes = -1;
  try {
    std::string err;
    if (planner == "prefill") err = run_prefill(P, sz, R);
    else if (planner == "decode") err = run_decode(P, sz, R);
    else if (planner == "sm90") err = run_sm90(P, sz, R);
#ifdef FIG_HAS_MLA
    else if (planner == "mla") err = run_mla(P, sz, R);
#endif
    else throw std::runtime_error("harness: unknown planner '" + planner + "'");
    if (!err.empty()) { R.ok = false; R.error = err; }
  } catch (const flashinfer::Error& e) {
    R.ok = false;
    R.error = e.what();
  } catch (const std::exception& e) {
    R.ok = false;
    R.error = e.what();
  }
  R.allocs = g_trace;
  // Give back host pages a large plan touched (the buffers are lazily committed mappings).
  uint64_t touched = 0;
  for (auto& a : R.allocs)
    if (a.buffer == "int") touched = std::max<uint64_t>(touched, a.offset + a.bytes);
  if (!R.ok || touched > (64ull << 20)) {
    madvise(g_int_host, kIntMapBytes, MADV_DONTNEED);
#ifndef FIG_REAL_CUDA
    madvise(g_int_dev, kIntMapBytes, MADV_DONTNEED);
#endif
  }
  return R;
}

static uint64_t total_of(const std::vector<Alloc>& a, const char* buf) {
  uint64_t t = 0;
  for (auto& x : a)
    if (x.buffer == buf) t = std::max<uint64_t>(t, x.offset + x.bytes);
  return t;
}

#ifdef FIG_HAS_WS_SIZE
// FlashInfer's own size-only prefill planner (scheduler.cuh PrefillPlanWorkspaceSize, what
// csrc/batch_prefill.cu BatchPrefillWithKVCacheWorkspaceSize calls for the wrappers'
// workspace_size()): the float and int workspace a plan() with these params needs.
static std::string prefill_workspace_size(const Params& P, size_t& fbytes, size_t& ibytes) {
  auto qo = P.arr("qo_indptr");
  auto kv = P.arr("kv_indptr");
  uint32_t batch_size = (uint32_t)P.i("batch_size", qo.empty() ? 0 : (long long)qo.size() - 1);
  if (qo.size() < batch_size + 1 || kv.size() < batch_size + 1)
    throw std::runtime_error("harness: qo_indptr/kv_indptr shorter than batch_size + 1");
  long long hd = P.i("head_dim", 128);
  cudaError_t st = flashinfer::PrefillPlanWorkspaceSize<int32_t>(
      fbytes, ibytes, qo.data(), kv.data(), (uint32_t)P.i("total_num_rows", qo[batch_size]), batch_size,
      (uint32_t)P.i("num_qo_heads", 32), (uint32_t)P.i("num_kv_heads", P.i("num_qo_heads", 32)),
      (uint32_t)P.i("head_dim_qk", hd), (uint32_t)P.i("head_dim_vo", hd), (uint32_t)P.i("page_size", 1),
      P.b("enable_cuda_graph", false), /*sizeof_dtype_o=*/2, (int32_t)P.i("window_left", -1),
      (int32_t)P.i("fixed_split_size", -1), P.b("disable_split_kv", false), P.i("num_colocated_ctas", 0),
      P.i("uniform_q_len", 0),
#ifdef FIG_HAS_FIXED_UNIFORM
      P.b("fixed_uniform_q_len", false),
#endif
      /*stream=*/nullptr
#ifdef FIG_HAS_KV_DTYPE
      , (uint32_t)P.i("kv_dtype_bytes", 2)
#endif
  );
  if (st != cudaSuccess) return std::string("PrefillPlanWorkspaceSize returned ") + cudaGetErrorString(st);
  return "";
}
#endif

static std::string handle(const JVal& req) {
  const JVal* idv = req.get("id");
  std::string id = idv ? (idv->t == JVal::STR ? idv->s : std::to_string(idv->i)) : "";
  std::ostringstream out;
  out << "{\"id\":" << jstr(id);
  const JVal* pl = req.get("planner");
  std::string planner = pl && pl->t == JVal::STR ? pl->s : "prefill";
  Params P{req.get("params")};
  Result R;
  if (planner == "prefill_workspace_size") {
#ifdef FIG_HAS_WS_SIZE
    try {
      set_device(P);
      size_t fb = 0, ib = 0;
      std::string err = prefill_workspace_size(P, fb, ib);
      if (err.empty())
        out << ",\"ok\":true,\"float_workspace_size\":" << fb << ",\"int_workspace_size\":" << ib << "}";
      else
        out << ",\"ok\":false,\"error\":" << jstr(err) << "}";
    } catch (const std::exception& e) {
      out << ",\"ok\":false,\"error\":" << jstr(e.what()) << "}";
    }
#else
    out << ",\"ok\":false,\"error\":\"this FlashInfer has no PrefillPlanWorkspaceSize\"}";
#endif
    return out.str();
  }
  if (planner == "device_info" || planner == "decode_occupancy") {
    try {
      set_device(P);
      if (planner == "device_info") {
        out << ",\"ok\":true," << device_info_json() << "}";
      } else {
        uint32_t q = (uint32_t)P.i("num_qo_heads", 32), kv = (uint32_t)P.i("num_kv_heads", q);
        int n = decode_occupancy((uint32_t)P.i("head_dim", 128), kv ? q / kv : 0);
        out << ",\"ok\":true,\"blocks_per_sm\":" << n << ",\"block_size\":" << g_dev.last_block_size
            << ",\"dynamic_smem\":" << g_dev.last_smem << "}";
      }
    } catch (const std::exception& e) {
      out << ",\"ok\":false,\"error\":" << jstr(e.what()) << "}";
    }
    return out.str();
  }
  try {
    set_device(P);
    uint64_t fsz = (uint64_t)P.i("float_workspace_bytes", (long long)kUnlimitedFloat);
    uint64_t isz = (uint64_t)P.i("int_workspace_bytes", (long long)g_int_cap);
    if (isz > g_int_cap) isz = g_int_cap;
    R = run_once(planner, P, {fsz, isz});
    if (R.ok) {
      // Cross-checks (any failure is a harness bug and is reported as such).
      std::string bad;
      for (auto& a : R.allocs)
        if (a.buffer == "unknown") bad += "allocation " + a.name + " on an unknown buffer; ";
      uint64_t ib = total_of(R.allocs, "int");
      if (g_memcpy_bytes >= 0 && (uint64_t)g_memcpy_bytes != ib)
        bad += "int total " + std::to_string(ib) + " != bytes copied " + std::to_string(g_memcpy_bytes) + "; ";
      if (R.staged_bytes >= 0 && (uint64_t)R.staged_bytes != ib)
        bad += "int total " + std::to_string(ib) + " != staged bytes " + std::to_string(R.staged_bytes) + "; ";
      for (auto& po : R.plan_offsets) {
        for (auto& a : R.allocs)
          if (a.name == po.first && (long long)a.offset != po.second)
            bad += "plan_info offset of " + po.first + " differs; ";
      }
      bool verify = req.get("verify") && req.get("verify")->t == JVal::BOOL && req.get("verify")->b;
      if (verify && bad.empty()) {
        // Independent check through FlashInfer's own overflow message.
        std::vector<Alloc> ref = R.allocs;
        for (size_t k = 0; k < ref.size(); ++k) {
          const Alloc& a = ref[k];
          if (a.bytes == 0) continue;  // an empty allocation cannot overflow
          Sizes s2{fsz, isz};
          (a.buffer == "float" ? s2.float_bytes : s2.int_bytes) = a.offset + a.bytes - 1;
          Result R2 = run_once(planner, P, s2);
          std::ostringstream want;
          want << "Buffer overflow when allocating memory for " << a.name << " with size "
               << a.bytes << " and alignment " << a.align << ", but only ";
          if (R2.ok || R2.error.find(want.str()) == std::string::npos)
            bad += "verify: shrinking the " + a.buffer + " buffer did not fail at " + a.name +
                   " (" + (R2.ok ? std::string("ok") : R2.error) + "); ";
        }
        g_trace.clear();
      }
      if (!bad.empty()) { R.ok = false; R.error = "HARNESS CROSS-CHECK FAILED: " + bad; }
    }
  } catch (const std::exception& e) {
    R.ok = false;
    R.error = e.what();
  }
  if (!R.ok) {
    out << ",\"ok\":false,\"error\":" << jstr(R.error) << "}";
    return out.str();
  }
  out << ",\"ok\":true,\"float_bytes\":" << total_of(R.allocs, "float")
      << ",\"int_bytes\":" << total_of(R.allocs, "int");
  if (R.padded_batch_size >= 0) out << ",\"padded_batch_size\":" << R.padded_batch_size;
  else out << ",\"padded_batch_size\":null";
  if (R.cta_tile_q >= 0) out << ",\"cta_tile_q\":" << R.cta_tile_q;
  else out << ",\"cta_tile_q\":null";
  if (R.split_kv >= 0) out << ",\"split_kv\":" << (R.split_kv ? "true" : "false");
  else out << ",\"split_kv\":null";
  for (auto& kv : R.extras) out << ",\"" << kv.first << "\":" << kv.second;
  out << R.extra_json;
  out << ",\"plan_info\":[";
  for (size_t k = 0; k < R.plan_info.size(); ++k) out << (k ? "," : "") << R.plan_info[k];
  out << "]";
  out << ",\"allocations\":[";
  for (size_t k = 0; k < R.allocs.size(); ++k) {
    auto& a = R.allocs[k];
    out << (k ? "," : "") << "{\"name\":" << jstr(a.name) << ",\"buffer\":\"" << a.buffer
        << "\",\"bytes\":" << a.bytes << ",\"align\":" << a.align << ",\"offset\":" << a.offset
        << "}";
  }
  out << "]}";
  return out.str();
}
}  // namespace fig

#ifdef FIG_SHARED_LIB
// Shared-library build (tests/realcalls/standin.py loads it with ctypes): the same request/reply
// protocol as the program below, one call per request, inside the test process.
extern "C" {
int fig_init() {
  static bool done = false;
  if (!done) {
    fig::init_buffers();
    done = true;
  }
  return 0;
}
const char* fig_request(const char* line) {
  static std::string reply;
  fig_init();
  try {
    std::string text(line ? line : "");
    fig::JParser jp{text.data(), text.data() + text.size()};
    fig::JVal req = jp.val();
    reply = fig::handle(req);
  } catch (const std::exception& e) {
    reply = std::string("{\"id\":null,\"ok\":false,\"error\":") + fig::jstr(e.what()) + "}";
  }
  return reply.c_str();
}
int fig_has_colocated() {
#ifdef FIG_HAS_COLOCATED
  return 1;
#else
  return 0;
#endif
}
}
#else
int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  fig::init_buffers();
  if (argc > 1 && std::string(argv[1]) == "--info") {
    std::cout << "{\"colocated\":"
#ifdef FIG_HAS_COLOCATED
              << 1
#else
              << 0
#endif
              << ",\"real_cuda\":"
#ifdef FIG_REAL_CUDA
              << 1
#else
              << 0
#endif
              << "}\n";
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    std::string reply;
    try {
      fig::JParser jp{line.data(), line.data() + line.size()};
      fig::JVal req = jp.val();
      reply = fig::handle(req);
    } catch (const std::exception& e) {
      reply = std::string("{\"id\":null,\"ok\":false,\"error\":") + fig::jstr(e.what()) + "}";
    }
    std::cout << reply << '\n';
    std::cout.flush();
  }
  return 0;
}
#endif  // FIG_SHARED_LIB
