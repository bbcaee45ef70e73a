/* C side of the Fortran module `acx` (fortran/acx.f90): what Fortran cannot do through
 * iso_c_binding alone -- MPI_Comm_f2c, filling the C config structs, tokens as plain fixed-width
 * records -- and the element-count view of buffers that Fortran arrays give (offsets and counts
 * in elements of the array's type, checked against the buffer's dtype here, where acx logs). */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <string.h>

#include "acx/coll.h"
#include "acx/device.h"
#include "acx/token.h"
#include "acx/world.h"
#include "runtime/base/log.h"

/* Mirrors type(acx_token_info) of acx.f90 (bind(c)): fixed-width fields only, so both compilers
 * lay it out the same; unsigned 64-bit values travel as their bit pattern. */
typedef struct acx_token_info_f {
  int32_t version;
  int32_t owner_rank;
  int32_t node;
  int32_t devid_type;
  int64_t buffer_id;
  int64_t generation;
  int64_t epoch;
  int64_t bytes;
  int64_t key;
  int32_t dtype;
  int32_t rights;
  int32_t checksum;
  int32_t reserved; /* keeps the layout explicit: device starts at a multiple of 8 */
  uint8_t device[ACX_TOKEN_PCI_ID_BYTES];
} acx_token_info_f_t;

_Static_assert(sizeof(acx_token_info_f_t) == 104, "acx_token_info_f_t must match type(acx_token_info)");

acx_status_t acx_world_init_f(MPI_Fint comm, int device, int bind_caller, acx_world_t **world);
acx_status_t acx_system_create_f(int threads, acx_system_t **sys);
acx_status_t acx_device_open_f(acx_system_t *sys, int kind, int transport, int streams, const acx_world_t *world,
                               acx_device_t **dev);
acx_status_t acx_world_binding_str_f(const acx_world_t *world, char *buf, size_t len);
acx_status_t acx_buffer_alloc_f(acx_device_t *dev, int64_t count, int dtype, int managed, int64_t timeout_ns,
                                acx_buffer_t **buf);
acx_status_t acx_buffer_free_f(acx_buffer_t *buf, int64_t timeout_ns);
acx_status_t acx_buffer_info_f(acx_buffer_t *buf, int64_t *count, int *dtype, int64_t *generation);
acx_status_t acx_buffer_write_f(acx_buffer_t *buf, int dtype, int64_t offset, const void *src, int64_t count,
                                uint32_t stream, int64_t timeout_ns);
acx_status_t acx_buffer_read_f(acx_buffer_t *buf, int dtype, int64_t offset, void *dst, int64_t count,
                               uint32_t stream, int64_t timeout_ns);
acx_status_t acx_buffer_fill_f(acx_buffer_t *buf, int dtype, int64_t offset, int64_t count, uint64_t pattern,
                               uint32_t stream, int64_t timeout_ns);
acx_status_t acx_buffer_copy_f(acx_buffer_t *dst, int64_t dst_offset, acx_buffer_t *src, int64_t src_offset,
                               int64_t count, uint32_t stream, int64_t timeout_ns);
acx_status_t acx_coll_create_f(acx_world_t *world, acx_device_t *dev, acx_system_t *sys, int64_t timeout_ns,
                               acx_coll_t **coll);
acx_status_t acx_allreduce_f(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, int64_t count, int op,
                             uint32_t stream, int64_t timeout_ns);
acx_status_t acx_broadcast_f(acx_coll_t *coll, acx_buffer_t *buf, int64_t count, int root, uint32_t stream,
                             int64_t timeout_ns);
acx_status_t acx_buffer_export_f(acx_buffer_t *buf, unsigned rights, uint8_t *token);
acx_status_t acx_token_encode_f(const acx_token_info_f_t *info, uint8_t *token);
acx_status_t acx_token_decode_f(const uint8_t *token, int64_t len, acx_token_info_f_t *info);

acx_status_t acx_world_init_f(MPI_Fint comm, int device, int bind_caller, acx_world_t **world) {
  ACX_CHECK_NULL(world);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  /* MPI_Comm_f2c is only defined between MPI_Init and MPI_Finalize: say so rather than let the
   * MPI library fail on it. */
  if (!initialized || finalized) {
    ACX_WARN(INIT, "acx_world_init (Fortran): MPI is %s", finalized ? "already finalized" : "not initialised");
    return ACX_ERR_INVALID_STATE;
  }
  acx_world_config_t cfg = ACX_WORLD_CONFIG_INIT;
  cfg.device = device < 0 ? -1 : device;
  cfg.bind_caller = bind_caller ? 1 : 0;
  return acx_world_init(MPI_Comm_f2c(comm), &cfg, world);
}

acx_status_t acx_system_create_f(int threads, acx_system_t **sys) {
  acx_system_config_t cfg = ACX_SYSTEM_CONFIG_INIT;
  cfg.threads = threads;
  cfg.name = "fortran";
  return acx_system_create(&cfg, sys);
}

acx_status_t acx_device_open_f(acx_system_t *sys, int kind, int transport, int streams, const acx_world_t *world,
                               acx_device_t **dev) {
  ACX_CHECK_ARG(kind >= ACX_DEVICE_KIND_DEFAULT && kind <= ACX_DEVICE_KIND_CUDA,
                "acx_device_open (Fortran): argument 'kind'=%d is not an ACX_DEVICE_KIND_*", kind);
  ACX_CHECK_ARG(transport >= ACX_TRANSPORT_DEFAULT && transport <= ACX_TRANSPORT_INLINE,
                "acx_device_open (Fortran): argument 'transport'=%d is not an ACX_TRANSPORT_*", transport);
  acx_device_config_t cfg = ACX_DEVICE_CONFIG_INIT;
  cfg.kind = (acx_device_kind_t)kind;
  cfg.transport = (acx_transport_t)transport;
  cfg.streams = streams;
  /* The world chose this rank's GPU by PCI locality; open that one by bus id, which does not
   * depend on CUDA_VISIBLE_DEVICES ordinals. */
  acx_topo_binding_t binding;
  memset(&binding, 0, sizeof binding);
  if (world && kind != ACX_DEVICE_KIND_HOST) {
    ACXCHECK(acx_world_binding(world, &binding));
    if (binding.pci_bus_id[0]) cfg.pci_bus_id = binding.pci_bus_id;
  }
  return acx_device_open(sys, &cfg, dev);
}

acx_status_t acx_world_binding_str_f(const acx_world_t *world, char *buf, size_t len) {
  ACX_CHECK_NULL(buf);
  ACX_CHECK_ARG(len > 0, "acx_world_binding_str (Fortran): argument 'len' is 0");
  acx_topo_binding_t binding;
  memset(&binding, 0, sizeof binding);
  ACXCHECK(acx_world_binding(world, &binding));
  acx_topo_binding_str(&binding, buf, len);
  return ACX_OK;
}

/* Element size of a dtype named from Fortran, or 0 (logged) when it names none. */
static size_t elem_size(const char *fn, const char *arg, int dtype) {
  size_t sz = dtype >= 0 && dtype < ACX_DTYPE_COUNT ? acx_dtype_size((acx_dtype_t)dtype) : 0;
  if (sz == 0) ACX_WARN(BUFFER, "%s (Fortran): argument '%s'=%d is not an ACX_DTYPE_*", fn, arg, dtype);
  return sz;
}

/* [offset, offset + count) elements of `esize` bytes as a byte range; count < 0: to the end of a
 * buffer of `total` bytes. ACX_ERR_INVALID_ARG for a negative offset, ACX_ERR_OVERFLOW when the
 * byte count does not fit a size_t. */
static acx_status_t elem_range(const char *fn, int64_t offset, int64_t count, size_t esize, size_t total,
                               size_t *off_bytes, size_t *bytes) {
  ACX_CHECK_ARG(offset >= 0, "%s (Fortran): argument 'offset'=%lld is negative", fn, (long long)offset);
  if ((uint64_t)offset > SIZE_MAX / esize || (count > 0 && (uint64_t)count > SIZE_MAX / esize)) {
    ACX_WARN(BUFFER, "%s (Fortran): offset %lld or count %lld elements of %zu bytes overflow", fn,
             (long long)offset, (long long)count, esize);
    return ACX_ERR_OVERFLOW;
  }
  *off_bytes = (size_t)offset * esize;
  if (count >= 0) {
    *bytes = (size_t)count * esize;
  } else {
    if (*off_bytes > total) {
      ACX_WARN(BUFFER, "%s (Fortran): offset %lld is past the buffer's %zu elements", fn, (long long)offset,
               total / esize);
      return ACX_ERR_OUT_OF_RANGE;
    }
    *bytes = total - *off_bytes;
  }
  return ACX_OK;
}

/* The buffer's bytes and dtype, and the element size a Fortran array of `dtype` must have to be
 * copied in or out of it: typed buffers take only their own type, untyped ones any. */
static acx_status_t match_array(const char *fn, acx_buffer_t *buf, int dtype, size_t *esize, size_t *total) {
  if (!buf) {
    ACX_WARN(BUFFER, "%s (Fortran): argument 'buf' is a null handle (never allocated, or freed)", fn);
    return ACX_ERR_NULL_ARG;
  }
  acx_buffer_info_t info;
  memset(&info, 0, sizeof info);
  ACXCHECK(acx_buffer_query(buf, &info));
  *esize = elem_size(fn, "dtype", dtype);
  if (*esize == 0) return ACX_ERR_BAD_DTYPE;
  if (info.dtype != ACX_DTYPE_BYTE && (int)info.dtype != dtype) {
    ACX_WARN(BUFFER, "%s (Fortran): the array holds %s, the buffer %s", fn, acx_dtype_name((acx_dtype_t)dtype),
             acx_dtype_name(info.dtype));
    return ACX_ERR_BAD_DTYPE;
  }
  *total = info.bytes;
  return ACX_OK;
}

acx_status_t acx_buffer_alloc_f(acx_device_t *dev, int64_t count, int dtype, int managed, int64_t timeout_ns,
                                acx_buffer_t **buf) {
  ACX_CHECK_NULL(buf);
  *buf = NULL;
  size_t esize = elem_size("acx_buffer_alloc", "dtype", dtype);
  if (esize == 0) return ACX_ERR_BAD_DTYPE;
  ACX_CHECK_ARG(count > 0, "acx_buffer_alloc (Fortran): argument 'count'=%lld is not positive", (long long)count);
  if ((uint64_t)count > SIZE_MAX / esize) {
    ACX_WARN(BUFFER, "acx_buffer_alloc (Fortran): %lld elements of %zu bytes overflow", (long long)count, esize);
    return ACX_ERR_OVERFLOW;
  }
  return acx_buffer_alloc(dev, (size_t)count * esize, (acx_dtype_t)dtype, managed ? ACX_MEM_MANAGED : ACX_MEM_DEVICE,
                          timeout_ns, buf);
}

/* Fortran holds one reference per handle: free the memory, then drop the handle, whatever the
 * free said (a stale or closed device frees nothing, and the handle must not leak either way). */
acx_status_t acx_buffer_free_f(acx_buffer_t *buf, int64_t timeout_ns) {
  ACX_CHECK_NULL(buf);
  acx_status_t st = acx_buffer_free(buf, timeout_ns);
  /* A buffer of a closed device has nothing left to free: releasing it is the whole job. */
  if (st == ACX_ERR_INVALID_STATE) st = ACX_OK;
  acx_buffer_release(buf);
  return st;
}

acx_status_t acx_buffer_info_f(acx_buffer_t *buf, int64_t *count, int *dtype, int64_t *generation) {
  ACX_CHECK_NULL(count);
  ACX_CHECK_NULL(dtype);
  ACX_CHECK_NULL(generation);
  acx_buffer_info_t info;
  memset(&info, 0, sizeof info);
  ACXCHECK(acx_buffer_query(buf, &info));
  *count = (int64_t)(info.bytes / acx_dtype_size(info.dtype));
  *dtype = (int)info.dtype;
  *generation = (int64_t)info.generation;
  return ACX_OK;
}

acx_status_t acx_buffer_write_f(acx_buffer_t *buf, int dtype, int64_t offset, const void *src, int64_t count,
                                uint32_t stream, int64_t timeout_ns) {
  size_t esize = 0, total = 0, off = 0, bytes = 0;
  ACXCHECK(match_array("acx_buffer_write", buf, dtype, &esize, &total));
  ACX_CHECK_ARG(count >= 0, "acx_buffer_write (Fortran): argument 'count'=%lld is negative", (long long)count);
  ACXCHECK(elem_range("acx_buffer_write", offset, count, esize, total, &off, &bytes));
  if (bytes == 0) return ACX_OK;
  ACX_CHECK_NULL(src);
  return acx_buffer_write(buf, off, src, bytes, stream, timeout_ns);
}

acx_status_t acx_buffer_read_f(acx_buffer_t *buf, int dtype, int64_t offset, void *dst, int64_t count,
                               uint32_t stream, int64_t timeout_ns) {
  size_t esize = 0, total = 0, off = 0, bytes = 0;
  ACXCHECK(match_array("acx_buffer_read", buf, dtype, &esize, &total));
  ACX_CHECK_ARG(count >= 0, "acx_buffer_read (Fortran): argument 'count'=%lld is negative", (long long)count);
  ACXCHECK(elem_range("acx_buffer_read", offset, count, esize, total, &off, &bytes));
  if (bytes == 0) return ACX_OK;
  ACX_CHECK_NULL(dst);
  return acx_buffer_read(buf, off, dst, bytes, stream, timeout_ns);
}

acx_status_t acx_buffer_fill_f(acx_buffer_t *buf, int dtype, int64_t offset, int64_t count, uint64_t pattern,
                               uint32_t stream, int64_t timeout_ns) {
  size_t esize = 0, total = 0, off = 0, bytes = 0;
  ACXCHECK(match_array("acx_buffer_fill", buf, dtype, &esize, &total));
  ACXCHECK(elem_range("acx_buffer_fill", offset, count, esize, total, &off, &bytes));
  if (bytes == 0) return ACX_OK;
  return acx_buffer_fill(buf, off, bytes, pattern, (unsigned)esize, stream, timeout_ns);
}

acx_status_t acx_buffer_copy_f(acx_buffer_t *dst, int64_t dst_offset, acx_buffer_t *src, int64_t src_offset,
                               int64_t count, uint32_t stream, int64_t timeout_ns) {
  ACX_CHECK_NULL(dst);
  ACX_CHECK_NULL(src);
  acx_buffer_info_t info;
  memset(&info, 0, sizeof info);
  ACXCHECK(acx_buffer_query(src, &info));
  size_t esize = acx_dtype_size(info.dtype), soff = 0, doff = 0, bytes = 0, dbytes = 0;
  ACXCHECK(elem_range("acx_buffer_copy", src_offset, count, esize, info.bytes, &soff, &bytes));
  /* The destination offset counts in the same elements: src's, which a typed dst shares. */
  ACXCHECK(elem_range("acx_buffer_copy", dst_offset, 0, esize, SIZE_MAX, &doff, &dbytes));
  if (bytes == 0) return ACX_OK;
  return acx_buffer_copy(dst, doff, src, soff, bytes, stream, timeout_ns);
}

acx_status_t acx_coll_create_f(acx_world_t *world, acx_device_t *dev, acx_system_t *sys, int64_t timeout_ns,
                               acx_coll_t **coll) {
  acx_coll_config_t cfg = ACX_COLL_CONFIG_INIT;
  cfg.timeout_ns = timeout_ns > 0 ? timeout_ns : 0;
  return acx_coll_create(world, dev, sys, &cfg, coll);
}

acx_status_t acx_allreduce_f(acx_coll_t *coll, acx_buffer_t *send, acx_buffer_t *recv, int64_t count, int op,
                             uint32_t stream, int64_t timeout_ns) {
  ACX_CHECK_NULL(send);
  acx_buffer_info_t info;
  memset(&info, 0, sizeof info);
  ACXCHECK(acx_buffer_query(send, &info));
  /* An all-reduce reduces elements: an untyped buffer gives no type to reduce in. */
  if (info.dtype == ACX_DTYPE_BYTE) {
    ACX_WARN(COLL, "acx_allreduce (Fortran): argument 'send' is an untyped (byte) buffer");
    return ACX_ERR_BAD_DTYPE;
  }
  size_t n = count < 0 ? info.bytes / acx_dtype_size(info.dtype) : (size_t)count;
  return acx_allreduce_sync(coll, send, recv, n, info.dtype, (acx_redop_t)op, stream, timeout_ns);
}

acx_status_t acx_broadcast_f(acx_coll_t *coll, acx_buffer_t *buf, int64_t count, int root, uint32_t stream,
                             int64_t timeout_ns) {
  ACX_CHECK_NULL(buf);
  acx_buffer_info_t info;
  memset(&info, 0, sizeof info);
  ACXCHECK(acx_buffer_query(buf, &info));
  size_t n = count < 0 ? info.bytes / acx_dtype_size(info.dtype) : (size_t)count;
  return acx_broadcast_sync(coll, buf, buf, n, info.dtype, root, stream, timeout_ns);
}

static void info_from_token(const acx_token_t *t, acx_token_info_f_t *info) {
  memset(info, 0, sizeof *info);
  info->version = (int32_t)t->version;
  info->owner_rank = t->owner_rank;
  info->node = t->node;
  info->devid_type = (int32_t)t->devid_type;
  info->buffer_id = (int64_t)t->buffer_id;
  info->generation = (int64_t)t->generation;
  info->epoch = (int64_t)t->epoch;
  info->bytes = (int64_t)t->bytes;
  info->key = (int64_t)t->key;
  info->dtype = (int32_t)t->dtype;
  info->rights = (int32_t)t->rights;
  info->checksum = (int32_t)t->checksum;
  memcpy(info->device, &t->device, sizeof info->device);
}

acx_status_t acx_buffer_export_f(acx_buffer_t *buf, unsigned rights, uint8_t *token) {
  ACX_CHECK_NULL(token);
  acx_token_t t;
  memset(&t, 0, sizeof t);
  ACXCHECK(acx_buffer_export(buf, rights, &t));
  /* An export's fields are the ones encode checks, so this cannot fail short of a bug; the
   * export stays recorded either way (acx_buffer_unexport revokes it). */
  return acx_token_encode(&t, token, ACX_TOKEN_BYTES, NULL);
}

acx_status_t acx_token_encode_f(const acx_token_info_f_t *info, uint8_t *token) {
  ACX_CHECK_NULL(info);
  ACX_CHECK_NULL(token);
  acx_token_t t;
  memset(&t, 0, sizeof t);
  t.version = (uint32_t)info->version;
  t.owner_rank = info->owner_rank;
  t.node = info->node;
  t.devid_type = (acx_token_devid_t)info->devid_type;
  memcpy(&t.device, info->device, sizeof t.device);
  t.buffer_id = (uint64_t)info->buffer_id;
  t.generation = (uint64_t)info->generation;
  t.epoch = (uint64_t)info->epoch;
  t.bytes = (uint64_t)info->bytes;
  t.dtype = (acx_dtype_t)info->dtype;
  t.rights = (uint32_t)info->rights;
  t.key = (uint64_t)info->key;
  return acx_token_encode(&t, token, ACX_TOKEN_BYTES, NULL);
}

acx_status_t acx_token_decode_f(const uint8_t *token, int64_t len, acx_token_info_f_t *info) {
  ACX_CHECK_NULL(token);
  ACX_CHECK_NULL(info);
  ACX_CHECK_ARG(len >= 0, "acx_token_decode (Fortran): argument 'len'=%lld is negative", (long long)len);
  acx_token_t t;
  memset(&t, 0, sizeof t);
  ACXCHECK(acx_token_decode(token, (size_t)len, &t));
  info_from_token(&t, info);
  return ACX_OK;
}
