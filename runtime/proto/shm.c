/* memfd segments, the executor control block and fd passing. The rank creates every segment
 * (it outlives executor incarnations when it is a host region) and hands the executor its fd. */
#define _GNU_SOURCE
#include "runtime/proto/shm.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/clock.h"
#include "runtime/base/log.h"

acx_status_t acxi_shm_create(const char *name, size_t bytes, acxi_shm_t *shm) {
  ACX_CHECK_NULL(name);
  ACX_CHECK_NULL(shm);
  ACX_CHECK_ARG(bytes > 0 && bytes <= (size_t)INT64_MAX, "acxi_shm_create: bytes=%zu out of range", bytes);
  acx_status_t res = ACX_OK;
  shm->fd = -1;
  shm->addr = NULL;
  shm->bytes = 0;
  int fd = memfd_create(name, MFD_CLOEXEC);
  SYSCHECKGOTO(fd, res, err);
  SYSCHECKGOTO(ftruncate(fd, (off_t)bytes), res, err_close_fd);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ACX_WARN(EXEC, "mmap of %zu shared bytes failed: %s", bytes, strerror(errno));
    res = errno == ENOMEM ? ACX_ERR_NO_MEMORY : ACX_ERR_SYSTEM;
    goto err_close_fd;
  }
  shm->addr = p;
  shm->bytes = bytes;
  shm->fd = fd;
  return ACX_OK;
err_close_fd:
  close(fd);
err:
  return res;
}

acx_status_t acxi_shm_map(int fd, size_t bytes, acxi_shm_t *shm) {
  ACX_CHECK_NULL(shm);
  ACX_CHECK_ARG(fd >= 0, "acxi_shm_map: fd=%d is not a descriptor", fd);
  acx_status_t res = ACX_OK;
  struct stat st;
  SYSCHECKGOTO(fstat(fd, &st), res, err);
  if (bytes == 0) bytes = (size_t)st.st_size;
  if (bytes == 0 || (off_t)bytes > st.st_size) {
    ACX_WARN(EXEC, "shared segment fd %d holds %lld bytes, %zu wanted", fd, (long long)st.st_size, bytes);
    return ACX_ERR_OUT_OF_RANGE;
  }
  int mine = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  SYSCHECKGOTO(mine, res, err);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
  if (p == MAP_FAILED) {
    ACX_WARN(EXEC, "mmap of %zu shared bytes failed: %s", bytes, strerror(errno));
    res = ACX_ERR_SYSTEM;
    goto err_close_fd;
  }
  shm->addr = p;
  shm->bytes = bytes;
  shm->fd = mine;
  return ACX_OK;
err_close_fd:
  close(mine);
err:
  return res;
}

acx_status_t acxi_shm_open_peer(const char *who, int32_t pid, int32_t fd, uint64_t dev, uint64_t ino, uint64_t bytes,
                                int *out) {
  *out = -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/%" PRId32 "/fd/%" PRId32, pid, fd);
  int f = open(path, O_RDWR | O_CLOEXEC);
  if (f < 0) {
    ACX_WARN(EXEC, "%s: the shared memory of process %" PRId32 " (%s) cannot be opened: %s (its owner is gone or "
             "freed it%s)", who, pid, path, strerror(errno),
             errno == EACCES || errno == EPERM ? ", or it runs as another user" : "");
    return ACX_ERR_PEER_LOST;
  }
  struct stat sb;
  if (fstat(f, &sb) != 0) {
    ACX_WARN(EXEC, "%s: fstat of %s failed: %s", who, path, strerror(errno));
    close(f);
    return ACX_ERR_SYSTEM;
  }
  if ((uint64_t)sb.st_dev != dev || (uint64_t)sb.st_ino != ino || (uint64_t)sb.st_size != bytes) {
    ACX_WARN(EXEC, "%s: %s is another file than the shared one (%lld bytes, %" PRIu64 " shared): its owner freed it",
             who, path, (long long)sb.st_size, bytes);
    close(f);
    return ACX_ERR_PEER_LOST;
  }
  *out = f;
  return ACX_OK;
}

void acxi_shm_destroy(acxi_shm_t *shm) {
  if (!shm) return;
  if (shm->addr) munmap(shm->addr, shm->bytes);
  if (shm->fd >= 0) close(shm->fd);
  shm->addr = NULL;
  shm->bytes = 0;
  shm->fd = -1;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The one layout of a control block: header, command ring, reply ring. 0 for a bad slot count. */
static size_t ctrl_layout(uint32_t slots, size_t *cmd_off, size_t *cpl_off) {
  size_t cmd_bytes = acxi_ring_bytes(slots, sizeof(acxi_cmd_t));
  size_t cpl_bytes = acxi_ring_bytes(slots, sizeof(acxi_cpl_t));
  if (!cmd_bytes || !cpl_bytes) return 0;
  *cmd_off = align64(sizeof(acxi_ctrl_t));
  *cpl_off = align64(*cmd_off + cmd_bytes);
  return *cpl_off + cpl_bytes;
}

acx_status_t acxi_ctrl_view_init(acxi_ctrl_view_t *v, void *addr, uint32_t slots) {
  ACX_CHECK_NULL(v);
  ACX_CHECK_NULL(addr);
  size_t cmd_off, cpl_off;
  ACX_CHECK_ARG(ctrl_layout(slots, &cmd_off, &cpl_off) != 0,
                "acxi_ctrl_view_init: slots=%u is not a power of two in [%u, %u]", slots, ACXI_RING_SLOTS_MIN,
                ACXI_RING_SLOTS_MAX);
  unsigned char *base = addr;
  v->ctrl = addr;
  ACXCHECK(acxi_ring_view_init(&v->cmds, (acxi_ring_t *)(base + cmd_off), slots, sizeof(acxi_cmd_t)));
  ACXCHECK(acxi_ring_view_init(&v->cpls, (acxi_ring_t *)(base + cpl_off), slots, sizeof(acxi_cpl_t)));
  return ACX_OK;
}

acx_status_t acxi_ctrl_create(uint32_t slots, uint64_t generation, acxi_shm_t *shm) {
  ACX_CHECK_NULL(shm);
  size_t cmd_off, cpl_off;
  size_t total = ctrl_layout(slots, &cmd_off, &cpl_off);
  if (!total) {
    ACX_WARN(EXEC, "ACX_RING_SLOTS=%u must be a power of two in [%u, %u]", slots, ACXI_RING_SLOTS_MIN,
             ACXI_RING_SLOTS_MAX);
    return ACX_ERR_BAD_PARAM;
  }
  ACXCHECK(acxi_shm_create("acx-ctrl", total, shm));
  acxi_ctrl_t *c = acxi_ctrl(shm);
  c->magic = ACXI_SHM_CTRL_MAGIC;
  c->version = ACXI_PROTOCOL_VERSION;
  c->slots = slots;
  c->total_bytes = total;
  c->generation = generation;
  c->cmd_ring_off = cmd_off;
  c->cpl_ring_off = cpl_off;
  atomic_init(&c->executor_pid, 0);
  atomic_init(&c->state, ACXI_EXEC_STARTING);
  atomic_init(&c->heartbeat_ns, acxi_now_ns());
  atomic_init(&c->progress_ns, acxi_now_ns());
  atomic_init(&c->sticky, 0);
  atomic_init(&c->promote, ACXI_STANDBY_WAIT);
  acx_status_t res;
  unsigned char *base = shm->addr;
  ACXCHECKGOTO(acxi_ring_init((acxi_ring_t *)(base + cmd_off), slots, sizeof(acxi_cmd_t)), res, err_destroy_shm);
  ACXCHECKGOTO(acxi_ring_init((acxi_ring_t *)(base + cpl_off), slots, sizeof(acxi_cpl_t)), res, err_destroy_shm);
  return ACX_OK;
err_destroy_shm:
  acxi_shm_destroy(shm);
  return res;
}

acx_status_t acxi_ctrl_attach(int fd, acxi_shm_t *shm) {
  ACXCHECK(acxi_shm_map(fd, 0, shm));
  acxi_ctrl_t *c = acxi_ctrl(shm);
  acx_status_t res = ACX_ERR_INVALID_ARG;
  if (shm->bytes < sizeof(acxi_ctrl_t) || c->magic != ACXI_SHM_CTRL_MAGIC) {
    ACX_WARN(EXEC, "fd %d is not an acx control block (bad magic)", fd);
    goto err_destroy_shm;
  }
  if (c->version != ACXI_PROTOCOL_VERSION) {
    ACX_WARN(EXEC, "control block speaks protocol %u, this executor %u: rank and executor come from "
             "different builds", c->version, ACXI_PROTOCOL_VERSION);
    goto err_destroy_shm;
  }
  size_t cmd_off, cpl_off;
  size_t total = ctrl_layout(c->slots, &cmd_off, &cpl_off);
  if (!total || c->total_bytes != total || total > shm->bytes || c->cmd_ring_off != cmd_off ||
      c->cpl_ring_off != cpl_off) {
    ACX_WARN(EXEC, "control block layout (%u slots, %" PRIu64 " bytes) does not fit its %zu bytes", c->slots,
             c->total_bytes, shm->bytes);
    goto err_destroy_shm;
  }
  unsigned char *base = shm->addr;
  ACXCHECKGOTO(acxi_ring_check((acxi_ring_t *)(base + cmd_off), sizeof(acxi_cmd_t), cpl_off - cmd_off), res,
               err_destroy_shm);
  ACXCHECKGOTO(acxi_ring_check((acxi_ring_t *)(base + cpl_off), sizeof(acxi_cpl_t), total - cpl_off), res,
               err_destroy_shm);
  return ACX_OK;
err_destroy_shm:
  acxi_shm_destroy(shm);
  return res;
}

void acxi_ctrl_set_sticky(const acxi_ctrl_view_t *v, acx_status_t status, int lib_code, const char *fmt, ...) {
  acxi_ctrl_t *c = v->ctrl;
  uint32_t expected = 0;
  /* A private claim value (2) first, so that a reader seeing sticky == 1 sees a whole message. */
  if (!atomic_compare_exchange_strong_explicit(&c->sticky, &expected, 2, memory_order_acquire,
                                               memory_order_relaxed))
    return;
  c->sticky_status = (int32_t)status;
  c->sticky_lib_code = lib_code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->sticky_msg, sizeof c->sticky_msg, fmt, ap);
  va_end(ap);
  /* release: the message fields above are visible to whoever acquires sticky == 1. */
  atomic_store_explicit(&c->sticky, 1, memory_order_release);
  atomic_store_explicit(&c->state, ACXI_EXEC_FAILED, memory_order_release);
  acxi_ring_wake(&v->cpls); /* the rank's poller sleeps on this doorbell */
}

acx_status_t acxi_fd_send(int sock, int fd, const void *data, size_t len, int64_t deadline_ns) {
  ACX_CHECK_ARG(len > 0, "acxi_fd_send: len must be > 0");
  struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(&u, 0, sizeof u);
    msg.msg_control = u.buf;
    msg.msg_controllen = sizeof u.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  ssize_t n;
  for (;;) {
    /* Never blocks: a stopped peer with a full socket buffer must not hold us past the deadline. */
    n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) break;
    if (errno == EINTR) continue;
    int64_t left = deadline_ns - acxi_now_ns();
    if (left <= 0) {
      ACX_WARN(EXEC, "sendmsg on socket %d: the peer took nothing until the deadline", sock);
      return ACX_ERR_TIMEOUT;
    }
    struct pollfd p = {.fd = sock, .events = POLLOUT};
    poll(&p, 1, (int)(left / 1000000 < 10 ? left / 1000000 + 1 : 10));
  }
  if (n != (ssize_t)len) {
    ACX_WARN(EXEC, "sendmsg on socket %d failed: %s", sock, n < 0 ? strerror(errno) : "short write");
    return ACX_ERR_SYSTEM;
  }
  return ACX_OK;
}

acx_status_t acxi_fd_recv(int sock, int *fd, void *data, size_t len, int64_t deadline_ns) {
  ACX_CHECK_NULL(fd);
  *fd = -1;
  for (;;) {
    int64_t left = deadline_ns - acxi_now_ns();
    if (left <= 0) return ACX_ERR_TIMEOUT;
    struct pollfd p = {.fd = sock, .events = POLLIN};
    int r = poll(&p, 1, (int)(left / 1000000 + 1));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      ACX_WARN(EXEC, "poll on socket %d failed: %s", sock, strerror(errno));
      return ACX_ERR_SYSTEM;
    }
    if (r > 0) break;
  }
  struct iovec iov = {.iov_base = data, .iov_len = len};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  ssize_t n;
  do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0) {
    ACX_WARN(EXEC, "recvmsg on socket %d: %s", sock, n < 0 ? strerror(errno) : "peer closed");
    return ACX_ERR_SYSTEM;
  }
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(cm), sizeof(int));
  if ((size_t)n != len) {
    ACX_WARN(EXEC, "recvmsg on socket %d: %zd bytes, %zu expected", sock, n, len);
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return ACX_ERR_SYSTEM;
  }
  return ACX_OK;
}
