/* Every number the rank (libacx) and the executor (libacx_exec) must agree on, in one place: the
 * limits both sides check, the op ranges of the command record (runtime/proto/cmd.h) and the
 * extension slots of the engine (kernels/exec/engine.h). Each has a line saying why it is what
 * it is; the static asserts at the end keep the ranges and slots apart. Plain macros, no types:
 * every other header of the protocol includes this one and uses these names. */
#ifndef ACXI_LIMITS_H
#define ACXI_LIMITS_H

/* ---- limits ---------------------------------------------------------------------------------- */

/* Executor streams per device. The engine's real capacity: a buffer's readers (engine_cuda.c), a
 * module's launches (lib_rtc_exec.c) and a coll's used streams (coll.c) are 64-bit stream masks,
 * and the library executors keep one handle per stream in tables this long. acx_device_open
 * refuses more before it starts an executor. */
#define ACXI_MAX_STREAMS 64
/* The bit of stream s in those 64-bit masks (s < ACXI_MAX_STREAMS once validated; the mask only
 * keeps a bad index from shifting past the word). */
#define ACXI_STREAM_BIT(s) ((unsigned long long)1 << ((s) & (ACXI_MAX_STREAMS - 1)))

/* Slots of each command and reply ring (ACX_RING_SLOTS): a power of two (indices wrap by mask),
 * at least 2 (one being written while one is read), at most 2^20 (a 128 MiB command ring: far
 * beyond any in-flight depth, and a bad value cannot make the control block absurd). */
#define ACXI_RING_SLOTS_MIN 2u
#define ACXI_RING_SLOTS_MAX (1u << 20)

/* A PCI bus id with its NUL ("0000:18:00.0" is 13): the device config, the engine parameters and
 * acx-executor's --pci-bus-id all hold this many bytes. */
#define ACXI_PCI_BUS_ID_LEN 32

/* Library requests (runtime/proto/lib_ops.h): buffer operands of one descriptor (cuBLASLt's
 * matmul has the most: A B C D bias aux scale_a scale_b). */
#define ACXK_MAX_OPERANDS 8
/* The descriptor body's bytes: every library's body fits (static asserts in lib_ops.h; cuTENSOR's
 * contraction is the largest). */
#define ACXK_DESC_BODY 512
/* cuTENSOR: modes per tensor and distinct mode labels of one contraction (what the descriptor
 * body holds for three tensors). */
#define ACXK_TENSOR_MAX_MODES 8
#define ACXK_TENSOR_MAX_LABELS 12
/* NVRTC: kernel arguments of one launch, and a kernel name with its NUL (GET_FUNCTION): both
 * travel in the descriptor body. */
#define ACXK_RTC_MAX_ARGS 24
#define ACXK_RTC_NAME_MAX 256

/* Collectives (runtime/proto/coll_ops.h): members of one group (acx_coll_group_end sends them as
 * one command; the rank refuses the one beyond), and groups in flight in the coll's host region
 * (the rank waits for the executor's `consumed` before it reuses a slot). Together they size that
 * region: 8 x 512 x 40 bytes. */
#define ACXC_GROUP_MAX 512
#define ACXC_GROUP_SLOTS 8

/* Shareable memory (ACXI_OP_IPC_EXPORT/IMPORT): the bytes of one handle, the rank's
 * acxi_ipc_handle_t and the executor's acxi_ipc_wire_t alike. A CUDA IPC handle is 64 bytes; the
 * rest is the head both kinds share (cmd.h). */
#define ACXI_IPC_HANDLE_BYTES 96

/* ---- op ranges of acxi_cmd_t.op ---------------------------------------------------------------- */

/* Core ops (acxi_op_t in cmd.h), served by every engine or by the loop itself. 0 is no op: a
 * zeroed record is never a valid command. */
#define ACXI_OP_CORE_FIRST 0x001u
#define ACXI_OP_CORE_LAST 0x0ffu
/* Everything from here on is handled by a registered extension (acxi_ext_find). 0x100-0x1ff is
 * not assigned: room for a future extension below the collectives. */
#define ACXI_OP_EXT_BASE 0x100u
/* Collectives (acxc_op_t, the NCCL extension "nccl"). */
#define ACXC_OP_FIRST 0x200u
#define ACXC_OP_LAST 0x2ffu
/* Libraries (the extension "acx-libs"), one sub-range per library, each sized to its op count
 * with room to grow. */
#define ACXK_OP_LIB_FIRST 0x300u
#define ACXK_OP_BLAS_FIRST 0x300u   /* 0x300-0x33f cuBLAS */
#define ACXK_OP_BLASLT_FIRST 0x340u /* 0x340-0x35f cuBLASLt */
#define ACXK_OP_FFT_FIRST 0x360u    /* 0x360-0x37f cuFFT */
#define ACXK_OP_RAND_FIRST 0x380u   /* 0x380-0x39f cuRAND */
#define ACXK_OP_SOLVER_FIRST 0x3a0u /* 0x3a0-0x3bf cuSOLVER */
#define ACXK_OP_SPARSE_FIRST 0x3c0u /* 0x3c0-0x3cf cuSPARSE */
#define ACXK_OP_DNN_FIRST 0x3d0u    /* 0x3d0-0x3df cuDNN */
#define ACXK_OP_RTC_FIRST 0x3e0u    /* 0x3e0-0x3ef NVRTC and modules */
#define ACXK_OP_TENSOR_FIRST 0x3f0u /* 0x3f0-0x3ff cuTENSOR */
#define ACXK_OP_LIB_LAST 0x3ffu
/* acx's own collectives between the executors of one node through each other's memory (the
 * extension "peer": runtime/proto/peer_ops.h, kernels/peer/). */
#define ACXP_OP_FIRST 0x400u
#define ACXP_OP_LAST 0x40fu
/* Tests' own extensions (tests/gpu/test_engine_cuda.c): far above every product range, so that a
 * product range may grow without meeting them. */
#define ACXI_OP_TEST_FIRST 0x3f00u

/* ---- extension slots (acxi_engine_api_t.ext_state) -------------------------------------------- */

/* Per-engine state pointers: one per registered extension, fixed at build time, so an engine
 * holds a small array instead of a map. */
#define ACXI_EXT_MAX 16
#define ACXC_EXT_SLOT 2                   /* the NCCL extension (kernels/nccl/nccl_exec.c) */
#define ACXK_LIB_EXT_SLOT 8               /* the libraries (kernels/libs/lib_exec.c) */
#define ACXP_EXT_SLOT 3                   /* the peer collectives (kernels/peer/peer_exec.c) */
#define ACXI_EXT_SLOT_TEST (ACXI_EXT_MAX - 1) /* tests' own extensions */

/* ---- they do not overlap ----------------------------------------------------------------------- */

_Static_assert(ACXI_MAX_STREAMS >= 1 && ACXI_MAX_STREAMS <= 64 && (ACXI_MAX_STREAMS & (ACXI_MAX_STREAMS - 1)) == 0,
               "stream masks are 64-bit words indexed by stream: at most 64 streams, a power of two");
_Static_assert(ACXI_RING_SLOTS_MIN >= 2 && (ACXI_RING_SLOTS_MAX & (ACXI_RING_SLOTS_MAX - 1)) == 0,
               "ring slot bounds are powers of two");
_Static_assert(ACXI_OP_CORE_FIRST > 0 && ACXI_OP_CORE_LAST < ACXI_OP_EXT_BASE,
               "core ops lie below the extensions' base");
_Static_assert(ACXI_OP_EXT_BASE <= ACXC_OP_FIRST && ACXC_OP_FIRST <= ACXC_OP_LAST,
               "the collectives' ops are extension ops");
_Static_assert(ACXC_OP_LAST < ACXK_OP_LIB_FIRST && ACXK_OP_LIB_FIRST <= ACXK_OP_LIB_LAST,
               "the libraries' ops follow the collectives'");
_Static_assert(ACXK_OP_LIB_FIRST == ACXK_OP_BLAS_FIRST && ACXK_OP_BLAS_FIRST < ACXK_OP_BLASLT_FIRST &&
                   ACXK_OP_BLASLT_FIRST < ACXK_OP_FFT_FIRST && ACXK_OP_FFT_FIRST < ACXK_OP_RAND_FIRST &&
                   ACXK_OP_RAND_FIRST < ACXK_OP_SOLVER_FIRST && ACXK_OP_SOLVER_FIRST < ACXK_OP_SPARSE_FIRST &&
                   ACXK_OP_SPARSE_FIRST < ACXK_OP_DNN_FIRST && ACXK_OP_DNN_FIRST < ACXK_OP_RTC_FIRST &&
                   ACXK_OP_RTC_FIRST < ACXK_OP_TENSOR_FIRST && ACXK_OP_TENSOR_FIRST <= ACXK_OP_LIB_LAST,
               "the libraries' sub-ranges are in order inside the libraries' range");
_Static_assert(ACXK_OP_LIB_LAST < ACXP_OP_FIRST && ACXP_OP_FIRST <= ACXP_OP_LAST,
               "the peer collectives' ops follow the libraries'");
_Static_assert(ACXP_OP_LAST < ACXI_OP_TEST_FIRST, "tests' extension ops lie above every product range");
_Static_assert(ACXC_EXT_SLOT >= 0 && ACXC_EXT_SLOT < ACXI_EXT_MAX && ACXK_LIB_EXT_SLOT >= 0 &&
                   ACXK_LIB_EXT_SLOT < ACXI_EXT_MAX && ACXI_EXT_SLOT_TEST >= 0 && ACXI_EXT_SLOT_TEST < ACXI_EXT_MAX,
               "every extension slot indexes ext_state");
_Static_assert(ACXC_EXT_SLOT != ACXK_LIB_EXT_SLOT && ACXC_EXT_SLOT != ACXI_EXT_SLOT_TEST &&
                   ACXK_LIB_EXT_SLOT != ACXI_EXT_SLOT_TEST && ACXP_EXT_SLOT >= 0 && ACXP_EXT_SLOT < ACXI_EXT_MAX &&
                   ACXP_EXT_SLOT != ACXC_EXT_SLOT && ACXP_EXT_SLOT != ACXK_LIB_EXT_SLOT &&
                   ACXP_EXT_SLOT != ACXI_EXT_SLOT_TEST,
               "extension slots are unique");
#endif
