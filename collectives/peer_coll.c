/* acx's own all-reduce between the executors of one node (issue 17), the rank side: where the
 * world is one node of 2 to ACXP_MAX_RANKS ranks and every rank wants it, acx_coll_create (and
 * every rebuild) gives each rank an area that every other rank's executor maps, and the
 * all-reduces it takes go to the extension "peer" (kernels/peer/) instead of NCCL or MPI: one
 * command, no host in the loop on CUDA. Two parts, chosen per size:
 *  - the small all-reduces, of at most ACX_COLL_PEER_MAX_KB (one-shot, push lines): ACX_COLL_PEER
 *    -1 (the default) takes them on GPUs from 3 ranks, ranks sharing a GPU only under MPS; 1 also
 *    on the host kind, at 2 ranks and on shared GPUs without MPS (ranks sharing GPUs bypass the
 *    hierarchical collectives' groups for them);
 *  - the large ones, of at least ACX_COLL_PEER_BIG_MIN_KB (the two-shot): ACX_COLL_PEER_BIG_KB -1
 *    (the default) takes them on 2 GPUs, one rank each or as many each under MPS (then with
 *    groups: the ranks of a GPU sum first), where it was measured to win; N > 0 wherever the path
 *    is on.
 * Everything between, and everything where neither part is on, takes NCCL (or MPI). The protocol
 * and its arithmetic: runtime/proto/peer_ops.h.
 *
 * Set-up is collective and all-or-nothing: every rank says whether it wants each part and whether
 * each step worked, and the ranks agree (MPI MIN) before any operation can take it, so either
 * every rank sends a given all-reduce to the peer path or none does. The set is made anew with
 * the communicator by a rebuild (fresh areas, the operation count back at 1), and its abort word
 * is raised when the coll breaks, so that executors waiting for a lost peer leave at once. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/coll_internal.h"
#include "collectives/world_internal.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/device/device_internal.h"
#include "runtime/proto/peer_ops.h"

/* The two-shot's groups, as acxp_ctl_t's fields of these names (runtime/proto/peer_ops.h). */
typedef struct groups {
  int32_t groups, per_group; /* 0, 0: none */
  int8_t grp[ACXP_MAX_RANKS], lane[ACXP_MAX_RANKS], at[ACXP_MAX_RANKS];
} groups_t;

struct acxc_peer {
  uint64_t id;                          /* the set in the executor (0: not registered) */
  uint64_t generation;                  /* device generation it was registered in */
  acx_buffer_t *mine;                   /* my area */
  acx_buffer_t *imp[ACXP_MAX_RANKS];    /* the peers' areas, mapped here (NULL at my rank) */
  acx_host_mem_t *ctlmem;               /* the control block, kept across rebuilds */
  acxp_ctl_t *ctl;
  uint64_t slot_bytes;                  /* every rank's: the smallest ACX_COLL_PEER_MAX_KB */
  uint64_t ll_bytes;                    /* every rank's: the smallest ACX_COLL_PEER_LL_KB */
  uint64_t big_bytes;                   /* every rank's: the smallest ACX_COLL_PEER_BIG_KB (0: off) */
  uint64_t big_blocks;                  /* every rank's: the smallest ACX_COLL_PEER_BIG_BLOCKS */
  uint64_t big_min;                     /* every rank's: the smallest ACX_COLL_PEER_BIG_MIN_KB (bytes) */
  int small_on;                         /* every rank takes the all-reduces of at most slot_bytes */
  int groups_on;                        /* every rank has ACX_COLL_PEER_BIG_GROUPS on */
  int small_groups_kb;                  /* every rank's: the smallest ACX_COLL_PEER_SMALL_GROUPS (-1: auto) */
  int slot_auto;                        /* every rank's ACX_COLL_PEER_MAX_KB is -1: the slot after the groups */
  int ll_groups;                        /* every rank's: the smallest ACX_COLL_PEER_LL_GROUPS (-1: auto) */
  int big_auto;                         /* every rank has ACX_COLL_PEER_BIG_KB=-1 (auto) */
  groups_t grp;                         /* the two-shot's groups */
  uint64_t seq;                         /* the last operation's number (NCCL path: under the submit lock;
                                           worker path: the worker's) */
  _Atomic uint64_t ops;                 /* operations sent down the path (acxc_peer_ops) */
};

/* Why this rank wants no part of the path, or NULL. ACX_COLL_PEER=-1 (the default, auto) keeps it
 * to GPUs whose peer-to-peer NCCL may use; 0 never. */
static const char *unwanted(const acx_coll_t *c) {
  int64_t want = acxi_param_int("ACX_COLL_PEER");
  if (want == 0) return "ACX_COLL_PEER=0";
  if (want < 0) {
    if (c->host_kind) return "ACX_COLL_PEER=-1 (auto) takes it on GPUs only (1: on the host kind too)";
    const char *p2p = getenv("NCCL_P2P_DISABLE");
    if (p2p && *p2p && strcmp(p2p, "0"))
      return "ACX_COLL_PEER=-1 (auto): NCCL_P2P_DISABLE is set (1: the own path anyway)";
  }
  if (c->world->nodes != 1) return "the world spans nodes";
  if (c->size < 2 || c->size > ACXP_MAX_RANKS) return "the world is not 2 to 16 ranks";
  const int64_t kb = acxi_param_int("ACX_COLL_PEER_MAX_KB");
  if (kb == 0 || kb < -1) return "ACX_COLL_PEER_MAX_KB is neither positive nor -1 (auto)";
  return NULL;
}

/* Why this rank does not want the small all-reduces (up to ACX_COLL_PEER_MAX_KB) on the path, or
 * NULL. Auto takes them where they were measured to win (docs/benchmark.md): 3 or more ranks, one
 * per GPU (three 4xH100 hosts) or ranks sharing GPUs under MPS (one). */
static const char *small_unwanted(const acx_coll_t *c) {
  if (acxi_param_int("ACX_COLL_PEER") > 0) return NULL;
  /* Two GPUs: NCCL's path is as fast on some hosts and faster on others (docs/benchmark.md). */
  if (c->size < 3) return "ACX_COLL_PEER=-1 (auto) takes the small all-reduces from 3 ranks (1: at 2 too)";
  /* Ranks sharing a GPU: under MPS their kernels run at once and the own path beat the ordered
   * hierarchical path at every size measured (docs/benchmark.md); without MPS the GPU
   * time-slices their contexts, and a kernel waiting for another context's waits for its slice. */
  char mps[256];
  if (acxc_world_gpu_sharers(c->world) > 1 && !acxc_hier_mps(mps, sizeof mps))
    return "ACX_COLL_PEER=-1 (auto): ranks share a GPU without MPS (no control pipe in $CUDA_MPS_PIPE_DIRECTORY "
           "or /tmp/nvidia-mps), the hierarchical collectives take the small all-reduces (1: the own path anyway)";
  return NULL;
}

/* The two-shot's big slot this rank asks for (KiB, ACX_COLL_PEER_BIG_KB; 0: none, *why says why).
 * -1 (the default, auto) asks for ACXP_BIG_AUTO_KB on GPUs where the ranks are on 2 GPUs, one rank
 * each, where it was measured above NCCL from 2 MiB on 2xH100 and 2xH200 (1.1-1.7x,
 * docs/benchmark.md; at 4 ranks on 4 GPUs it was not: 0.98 to 1.02x NCCL's busbw from 256 MiB on
 * 4xH200), and where ranks share GPUs under MPS with the two-shot with groups on: make_groups()
 * keeps it where every GPU has as many ranks (2 GPUs: ACXP_BIG_AUTO_GROUPS2_KB), else the
 * hierarchical path takes them. With groups on 4xH200 (session 29, 1 GiB): 0.91 (4 per GPU) and
 * 0.96 (2 per GPU) of one rank per GPU through NCCL, against 0.30 and 0.46 through the
 * hierarchical path. */
static int big_wanted(const acx_coll_t *c, const char **why) {
  int64_t kb = acxi_param_int("ACX_COLL_PEER_BIG_KB");
  char mps[256];
  *why = NULL;
  if (kb == 0) *why = "ACX_COLL_PEER_BIG_KB=0";
  else if (kb < 0 && c->host_kind) *why = "ACX_COLL_PEER_BIG_KB=-1 (auto) takes them on GPUs only (N: on the host kind too)";
  else if (kb < 0 && acxc_world_gpu_sharers(c->world) <= 1 && c->size != 2)
    *why = "ACX_COLL_PEER_BIG_KB=-1 (auto) takes them at one rank per GPU on 2 GPUs only (N: the two-shot with N KiB "
           "slots anyway)";
  else if (kb < 0 && acxc_world_gpu_sharers(c->world) > 1 && acxi_param_int("ACX_COLL_PEER_BIG_GROUPS") <= 0)
    *why = "ACX_COLL_PEER_BIG_KB=-1 (auto): ranks share GPUs and ACX_COLL_PEER_BIG_GROUPS is off (N: the two-shot "
           "anyway)";
  else if (kb < 0 && acxc_world_gpu_sharers(c->world) > 1 && !acxc_hier_mps(mps, sizeof mps))
    *why = "ACX_COLL_PEER_BIG_KB=-1 (auto): ranks share GPUs without MPS (N: the two-shot anyway)";
  if (*why) return 0;
  if (kb < 0) kb = ACXP_BIG_AUTO_KB;
  if (kb < ACXP_BIG_MIN / 1024) kb = ACXP_BIG_MIN / 1024;
  return kb > (1 << 20) ? 1 << 20 : (int)kb;
}

/* MPI_Allgather of `bytes` per rank over the world, within the deadline (a late exchange is
 * parked with its memory, which MPI may still write). */
acx_status_t acxc_coll_allgather(acx_coll_t *c, const void *mine, size_t bytes, void *all, int64_t deadline,
                                 const char *what) {
  unsigned char *buf = malloc((size_t)(c->size + 1) * bytes);
  if (!buf) return ACX_ERR_NO_MEMORY;
  memcpy(buf, mine, bytes);
  MPI_Request req;
  if (MPI_Iallgather(buf, (int)bytes, MPI_BYTE, buf + bytes, (int)bytes, MPI_BYTE, c->world->comm, &req) !=
      MPI_SUCCESS) {
    free(buf);
    return ACX_ERR_MPI;
  }
  acx_status_t st = acxc_world_wait(req, buf, deadline);
  if (st == ACX_ERR_TIMEOUT)
    ACX_WARN(COLL, "%s: a rank did not take part in the exchange in time", what);
  if (st != ACX_OK) return st; /* buf is parked */
  memcpy(all, buf + bytes, (size_t)c->size * bytes);
  free(buf);
  return ACX_OK;
}

/* The two-shot's group of this rank (runtime/proto/peer_ops.h), as a number its group's ranks
 * share: the ranks of its GPU; on the host kind the hierarchical collectives' groups where the coll
 * is hierarchical (ACX_COLL_HIER_GROUP), else each rank its own. */
static int32_t big_color(const acx_coll_t *c, const acxc_peer_t *p) {
  if (!p->groups_on) return c->rank;
  if (!c->host_kind) return c->world->n_gpu_peers > 0 ? c->world->gpu_peers[0] : c->rank;
  return c->hier_on ? acxc_hier_color(c) : c->rank;
}

/* The groups from every rank's color into p->grp: groups of equal size, at least 2, in the order
 * of their lowest ranks, places in rank order. Returns 0 (no groups: p->grp all 0) where they are
 * not, saying why when some ranks share a color. */
static int big_groups(const acx_coll_t *c, const int32_t *color, acxc_peer_t *p) {
  groups_t *gp = &p->grp;
  const int n = c->size;
  int grp[ACXP_MAX_RANKS], size[ACXP_MAX_RANKS] = {0}, G = 0;
  for (int q = 0; q < n; q++) {
    int g = 0;
    while (g < G && color[gp->at[g]] != color[q]) g++; /* at[g]: group g's first rank, for now */
    if (g == G) gp->at[G++] = (int8_t)q;
    grp[q] = g;
    size[g]++;
  }
  if (G == n) {
    memset(gp, 0, sizeof *gp);
    return 0;
  }
  const int K = size[0];
  for (int g = 1; g < G; g++)
    if (size[g] != K) {
      ACX_INFO(COLL, "own all-reduce: the groups (ranks of one GPU%s) have different sizes (%d and %d): the two-shot "
               "sends every rank's parts separately", c->host_kind ? "; host kind: ACX_COLL_HIER_GROUP" : "", K, size[g]);
      memset(gp, 0, sizeof *gp);
      return 0;
    }
  int placed[ACXP_MAX_RANKS] = {0};
  for (int q = 0; q < n; q++) {
    gp->grp[q] = (int8_t)grp[q];
    gp->lane[q] = (int8_t)placed[grp[q]]++;
    gp->at[grp[q] * K + gp->lane[q]] = (int8_t)q;
  }
  gp->groups = G;
  gp->per_group = K;
  return 1;
}

/* Releases what this rank holds of the set; the executor's side was destroyed or is gone. */
static void release(acxc_peer_t *p) {
  for (int q = 0; q < ACXP_MAX_RANKS; q++)
    if (p->imp[q]) {
      acx_buffer_release(p->imp[q]);
      p->imp[q] = NULL;
    }
  if (p->mine) {
    acx_buffer_release(p->mine);
    p->mine = NULL;
  }
  p->id = 0;
}

/* The two-shot's groups (every rank takes part: p->big_bytes is agreed), before the areas are
 * made: auto (every rank -1) takes the two-shot where ranks share GPUs only in groups, every GPU
 * with as many ranks (2 or more GPUs), so where they turn out otherwise it goes; on 2 GPUs its big
 * slot is ACXP_BIG_AUTO_GROUPS2_KB (every rank alike: they decide from the same colors). */
static acx_status_t make_groups(acx_coll_t *c, acxc_peer_t *p, int64_t deadline) {
  memset(&p->grp, 0, sizeof p->grp);
  if (!p->big_bytes) return ACX_OK;
  int32_t me = big_color(c, p), color[ACXP_MAX_RANKS];
  acx_status_t st = acxc_coll_allgather(c, &me, sizeof me, color, deadline, "own all-reduce set-up (groups)");
  if (st != ACX_OK) return st;
  int grouped = big_groups(c, color, p);
  if (p->big_auto && acxc_world_gpu_sharers(c->world) > 1 && (!grouped || p->grp.groups < 2)) {
    ACX_INFO(COLL, "own all-reduce: ACX_COLL_PEER_BIG_KB=-1 (auto): the ranks are not on 2 or more GPUs with as "
             "many ranks each: large all-reduces through %s", c->host_kind ? "MPI" : "NCCL");
    memset(&p->grp, 0, sizeof p->grp);
    p->big_bytes = 0;
  } else if (p->big_auto && p->grp.groups == 2) {
    p->big_bytes = (uint64_t)ACXP_BIG_AUTO_GROUPS2_KB * 1024;
  }
  return ACX_OK;
}

/* This rank's half of the set-up; the caller agrees with the others afterwards. */
static acx_status_t build(acx_coll_t *c, acxc_peer_t *p, int64_t deadline) {
  acx_device_t *dev = c->dev;
  ACXCHECK(make_groups(c, p, deadline));
  if (p->slot_auto) /* the same on every rank: the groups are */
    p->slot_bytes = (uint64_t)(p->grp.groups ? ACXC_PEER_SLOT_KB_GROUPS : ACXC_PEER_SLOT_KB_DEFAULT) * 1024;
  if (p->ll_bytes > p->slot_bytes) p->ll_bytes = p->slot_bytes; /* nothing larger takes the own path */
  /* With groups the one-shot with groups (ACX_COLL_PEER_SMALL_GROUPS) from gos bytes, its partial
   * regions in the areas. Auto: from 1 MiB / K^2, i.e. where the plain one-shot would load K^2
   * (G - 1) slots of that or more over each GPU's link (2xH200 under MPS, session 27, once each
   * partial sum crosses once per GPU: the one-shot with groups the faster from 256 KiB at 2 ranks
   * per GPU (512 KiB 10.0-10.2 us against 12.5-13.0) and above the push lines at 4 (128 KiB
   * 14.2-15.6 against 16.3-17.8); the plain one below. Session 22's 4 MiB / K^2 predates that). */
  uint64_t gos = 0;
  if (p->grp.groups && p->small_on && p->small_groups_kb) {
    const uint64_t K = (uint64_t)p->grp.per_group;
    gos = p->small_groups_kb < 0 ? ((uint64_t)1 << 20) / (K * K) : (uint64_t)p->small_groups_kb * 1024;
    if (gos <= p->ll_bytes) gos = p->ll_bytes + 1;
    if (gos > p->slot_bytes) gos = 0; /* no one-shot that large */
  }
  size_t area = (size_t)ACXP_AREA_BYTES_SET(p->slot_bytes, p->big_bytes, gos ? p->grp.groups : 0);
  acx_status_t st = acxi_buffer_alloc_shareable(dev, area, ACX_DTYPE_BYTE, acxi_left_ns(deadline), &p->mine);
  /* Flags and lines start at 0: operation numbers start at 1 (a line left by an earlier user of
   * the memory could carry the number waited for). */
  if (st == ACX_OK) st = acx_buffer_fill(p->mine, 0, ACXP_FLAG_BYTES, 0, 4, 0, acxi_left_ns(deadline));
  if (st == ACX_OK)
    st = acx_buffer_fill(p->mine, ACXP_LL_OFF(0, 0, p->slot_bytes), ACXP_LL_REGION_BYTES, 0, 4, 0,
                         acxi_left_ns(deadline));
  if (st == ACX_OK && p->big_bytes) /* the two-shot's flags */
    st = acx_buffer_fill(p->mine, ACXP_BIG_OFF(p->slot_bytes), 2 * ACXP_BIG_FLAG_BYTES + ACXP_BIG_PUB_BYTES + ACXP_BIG_REGTAB_BYTES, 0, 4, 0,
                         acxi_left_ns(deadline));
  acxi_ipc_handle_t h;
  memset(&h, 0, sizeof h);
  if (st == ACX_OK) st = acxi_buffer_ipc_export(p->mine, &h, acxi_left_ns(deadline));
  /* Every rank takes part in the exchange, an empty handle where its own steps failed. */
  acxi_ipc_handle_t *all = calloc((size_t)c->size, sizeof *all);
  if (!all) return ACX_ERR_NO_MEMORY;
  acx_status_t x = acxc_coll_allgather(c, &h, sizeof h, all, deadline, "own all-reduce set-up (areas)");
  if (x != ACX_OK) {
    free(all);
    return x;
  }
  acxi_ipc_handle_t none;
  memset(&none, 0, sizeof none);
  for (int q = 0; st == ACX_OK && q < c->size; q++) {
    if (q == c->rank) continue;
    if (!memcmp(&all[q], &none, sizeof none)) {
      st = ACX_ERR_PEER_LOST; /* that rank's own steps failed: it says so in its log */
      break;
    }
    st = acxi_buffer_ipc_import(dev, &all[q], ACX_DTYPE_BYTE, acxi_left_ns(deadline), &p->imp[q]);
    /* Asked for (1): a warning; auto (-1) falls back quietly, the GPUs may just not be peers. */
    if (st != ACX_OK && acxi_param_int("ACX_COLL_PEER") > 0)
      ACX_WARN(COLL, "own all-reduce set-up: rank %d's area cannot be mapped by this rank's executor: %s (are the "
               "devices peers? CUDA IPC needs peer access between the GPUs)", q, acx_status_name(st));
    else if (st != ACX_OK)
      ACX_INFO(COLL, "own all-reduce set-up: rank %d's area cannot be mapped by this rank's executor: %s (no peer "
               "access between the GPUs?)", q, acx_status_name(st));
  }
  free(all);
  if (st != ACX_OK) return st;
  if (!p->ctlmem) {
    void *ptr = NULL;
    size_t bytes = 0;
    st = acx_host_alloc(dev, sizeof(acxp_ctl_t), &p->ctlmem);
    if (st == ACX_OK) st = acx_host_mem_ptr(p->ctlmem, &ptr, &bytes);
    if (st != ACX_OK) return st;
    p->ctl = ptr;
  }
  memset(p->ctl, 0, sizeof *p->ctl);
  p->ctl->magic = ACXP_CTL_MAGIC;
  p->ctl->slot_bytes = p->slot_bytes;
  p->ctl->ll_bytes = p->ll_bytes;
  p->ctl->big_bytes = p->big_bytes;
  p->ctl->big_blocks = p->big_blocks;
  for (int q = 0; q < c->size; q++) p->ctl->area[q] = q == c->rank ? p->mine->id : p->imp[q]->id;
  /* With groups a GPU runs K kernels of the two-shot at once, whose blocks must all be resident
   * (block b waits for its group's blocks b): K x 128 blocks did not fit an H100 under MPS and ran
   * 15x slower (session 18), K x 64 did. So each rank runs big_blocks / K. */
  if (p->grp.groups) {
    p->ctl->groups = p->grp.groups;
    p->ctl->per_group = p->grp.per_group;
    memcpy(p->ctl->grp, p->grp.grp, sizeof p->ctl->grp);
    memcpy(p->ctl->lane, p->grp.lane, sizeof p->ctl->lane);
    memcpy(p->ctl->at, p->grp.at, sizeof p->ctl->at);
    p->ctl->big_blocks = p->big_blocks / (uint64_t)p->grp.per_group ? p->big_blocks / (uint64_t)p->grp.per_group : 1;
    p->ctl->small_groups = (int32_t)gos;
    /* Push lines with groups: auto from 4 ranks per GPU (session 22, 2xH100 under MPS: 0.2-1.1 us
     * faster at 8-64 KiB at 4 per GPU, 0-0.9 us slower at 2). */
    p->ctl->ll_groups = p->small_on && p->ll_bytes && (p->ll_groups > 0 || (p->ll_groups < 0 && p->grp.per_group >= 4));
  }
  atomic_store_explicit(&p->ctl->abort, 0, memory_order_release);
  uint64_t id = acxc_next_comm_id();
  uint64_t gen = atomic_load_explicit(&dev->generation, memory_order_acquire);
  acxi_cmd_t cmd = {.op = ACXP_OP_SETUP, .arg = {id, (uint64_t)c->size, (uint64_t)c->rank, p->ctlmem->id}};
  st = acxi_device_call(dev, &cmd, NULL, 0, 0, -1, acxi_left_ns(deadline), NULL);
  if (st != ACX_OK) return st;
  p->id = id;
  p->generation = gen;
  p->seq = 0;
  return ACX_OK;
}

acx_status_t acxc_peer_create(acx_coll_t *c, acx_status_t st, int64_t timeout_ns) {
  const char *why = st == ACX_OK ? unwanted(c) : "the communicator's own set-up failed";
  const char *swhy = why ? why : small_unwanted(c), *bwhy = why;
  int bigkb = why ? 0 : big_wanted(c, &bwhy);
  int64_t kb = acxi_param_int("ACX_COLL_PEER_MAX_KB");
  int64_t llkb = acxi_param_int("ACX_COLL_PEER_LL_KB");
  int64_t bb = acxi_param_int("ACX_COLL_PEER_BIG_BLOCKS");
  int64_t minkb = acxi_param_int("ACX_COLL_PEER_BIG_MIN_KB");
  int64_t sgkb = acxi_param_int("ACX_COLL_PEER_SMALL_GROUPS");
  /* One agreement (MPI MIN) of everything the ranks must have alike: whether the path is on and
   * its slot, whether each part is, the push lines' limit, the two-shot's slot, blocks, the
   * smallest all-reduce it takes and whether it works in groups. Every rank takes part, also one whose communicator failed. */
  enum { SLOT, SMALL, LL, BIG, BLOCKS, BIGMIN, GROUPS, BIGAUTO, SMALLGROUPS, LLGROUPS, SLOTAUTO, NAGREE };
  int mine[NAGREE] = {
      [SLOT] = why ? 0 : (int)(kb < 0 || kb > (1 << 20) ? (1 << 20) : kb), /* auto: as large as any */
      [SLOTAUTO] = kb < 0,
      [SMALL] = !swhy,
      [LL] = llkb <= 0 ? 0 : llkb > ACXP_LL_MAX / 1024 ? ACXP_LL_MAX / 1024 : (int)llkb,
      [BIG] = bigkb,
      /* block b waits for the peers' blocks b, so every rank runs as many */
      [BLOCKS] = bb < 1 ? 1 : bb > ACXP_BIG_MAX_BLOCKS ? ACXP_BIG_MAX_BLOCKS : (int)bb,
      [BIGMIN] = minkb < 0 ? -1 : minkb > INT_MAX ? INT_MAX : (int)minkb, /* -1: auto, after the groups */
      [GROUPS] = acxi_param_int("ACX_COLL_PEER_BIG_GROUPS") > 0,
      [BIGAUTO] = acxi_param_int("ACX_COLL_PEER_BIG_KB") < 0,
      [LLGROUPS] = acxi_param_int("ACX_COLL_PEER_LL_GROUPS") < 0 ? -1 : acxi_param_int("ACX_COLL_PEER_LL_GROUPS") > 0,
      [SMALLGROUPS] = sgkb < 0 ? -1 : sgkb > (1 << 20) ? (1 << 20) : (int)sgkb, /* -1: auto, after the groups */
  };
  int lo[NAGREE] = {0};
  acx_status_t ag = acxc_coll_agree_min_n(c, mine, lo, NAGREE);
  if (ag != ACX_OK) return st != ACX_OK ? st : ag;
  if (st != ACX_OK) return st;
  if (lo[SLOT] <= 0 || (lo[SMALL] <= 0 && lo[BIG] <= 0)) {
    if (why) ACX_INFO(COLL, "own all-reduce off on rank %d: %s", c->rank, why);
    else if (swhy && bwhy) ACX_INFO(COLL, "own all-reduce off on rank %d: small all-reduces: %s; large: %s", c->rank, swhy, bwhy);
    else ACX_INFO(COLL, "own all-reduce off: another rank does not want it (its log says why)");
    return ACX_OK;
  }
  acxc_peer_t *p = c->peer;
  if (!p && !(p = c->peer = calloc(1, sizeof *p))) return ACX_ERR_NO_MEMORY;
  p->slot_auto = lo[SLOTAUTO] > 0;
  p->slot_bytes = (uint64_t)lo[SLOT] * 1024; /* with slot_auto, set in build() once the groups are known */
  p->small_on = lo[SMALL] > 0;
  p->ll_bytes = lo[LL] > 0 ? (uint64_t)lo[LL] * 1024 : 0;
  if (p->ll_bytes > p->slot_bytes) p->ll_bytes = p->slot_bytes; /* nothing larger takes the own path */
  p->big_bytes = lo[BIG] > 0 ? (uint64_t)lo[BIG] * 1024 : 0;
  p->big_blocks = lo[BLOCKS] > 0 ? (uint64_t)lo[BLOCKS] : 1;
  p->big_min = lo[BIGMIN] < 0 ? 0 : (uint64_t)lo[BIGMIN] * 1024;
  p->groups_on = lo[GROUPS] > 0;
  p->big_auto = lo[BIGAUTO] > 0;
  p->small_groups_kb = lo[SMALLGROUPS];
  p->ll_groups = lo[LLGROUPS];
  int64_t deadline = acxi_deadline(timeout_ns > 0 ? timeout_ns : c->world->timeout_ns);
  acx_status_t local = build(c, p, deadline);
  /* ACX_COLL_PEER_BIG_MIN_KB=-1 (auto; every rank decides alike: the groups come from the same
   * colors): one rank per GPU, NCCL up to 2 MiB; with groups, the two-shot from just above the
   * one-shot's slot, since the alternative there is the hierarchical path (session 21, 2xH100
   * under MPS: 512 KiB - 1 MiB in 69-81 us at 2 ranks per GPU and 94-130 at 4 through it, 20-22
   * and 29-34 through the two-shot with groups). */
  if (lo[BIGMIN] < 0) p->big_min = p->grp.groups ? 0 : ACXC_PEER_BIG_MIN_DEFAULT;
  if (local != ACX_OK && local != ACX_ERR_PEER_LOST)
    ACX_WARN(COLL, "own all-reduce set-up failed on rank %d: %s", c->rank, acx_status_name(local));
  int ok = 0;
  ag = acxc_coll_agree_min(c, local == ACX_OK, &ok);
  if (ag == ACX_OK && ok) {
    char small[240], big[280], sg[96] = "";
    const uint64_t gkb = ((uint64_t)p->ctl->small_groups + 1023) / 1024;
    if (p->ctl->ll_groups && p->ctl->small_groups)
      snprintf(sg, sizeof sg, " (with groups: the push lines, the one-shot from %" PRIu64 " KiB)", gkb);
    else if (p->ctl->ll_groups)
      snprintf(sg, sizeof sg, " (with groups: the push lines)");
    else if (p->ctl->small_groups)
      snprintf(sg, sizeof sg, " (with groups from %" PRIu64 " KiB)", gkb);
    if (p->small_on)
      snprintf(small, sizeof small, "all-reduces up to %" PRIu64 " KiB one-shot%s", p->slot_bytes / 1024, sg);
    else
      snprintf(small, sizeof small, "small all-reduces through %s (%s)", c->host_kind ? "MPI" : "NCCL",
               swhy ? swhy : "another rank does not want them");
    if (p->big_bytes)
      snprintf(big, sizeof big, "%s %" PRIu64 " KiB two-shot in chunks of %" PRIu64 " KiB (%" PRIu64 " blocks on GPUs%s)",
               p->big_min > p->slot_bytes ? "from" : "above", (p->big_min > p->slot_bytes ? p->big_min : p->slot_bytes) / 1024,
               p->big_bytes / 2048, p->ctl->big_blocks,
               p->ctl->groups ? (c->host_kind ? ", the hierarchical groups summed first" : ", the ranks of a GPU summed first")
                              : "");
    else
      snprintf(big, sizeof big, "larger ones through %s", c->host_kind ? "MPI" : "NCCL");
    ACX_INFO(COLL, "own all-reduce on: rank %d of %d, %s, %s, through the executors' areas (set %" PRIu64 ")", c->rank,
             c->size, small, big, p->id);
    return ACX_OK;
  }
  /* Off for every rank: a rank that could not make its part keeps the others from using theirs. */
  acxc_peer_destroy(c, 1000000000LL);
  if (ag != ACX_OK) return ag;
  if (acxi_param_int("ACX_COLL_PEER") > 0)
    ACX_WARN(COLL, "own all-reduce off: %s; all-reduces take %s", local == ACX_OK ? "another rank's set-up failed"
             : "this rank's set-up failed", c->host_kind ? "MPI" : "NCCL");
  else
    ACX_INFO(COLL, "own all-reduce off (ACX_COLL_PEER=-1, auto): %s; all-reduces take %s",
             local == ACX_OK ? "another rank's set-up failed" : "this rank's set-up failed", c->host_kind ? "MPI" : "NCCL");
  return ACX_OK;
}

void acxc_peer_destroy(acx_coll_t *c, int64_t timeout_ns) {
  acxc_peer_t *p = c->peer;
  if (!p) return;
  if (p->id && atomic_load_explicit(&c->dev->generation, memory_order_acquire) == p->generation) {
    int64_t ms = timeout_ns > 0 ? timeout_ns / 1000000 : 1000;
    acxi_cmd_t cmd = {.op = ACXP_OP_DESTROY, .arg = {p->id, 0, 0, 0, (uint64_t)ms}};
    acx_status_t st = acxi_device_call(c->dev, &cmd, NULL, 0, 0, -1, (ms + 1000) * 1000000, NULL);
    if (st != ACX_OK && !ACX_IS_DEVICE_LOST(st)) {
      /* Operations may still run against the control block (they leave at their own timeout):
       * the next set gets a new one; this one is left to them, never freed under them. */
      ACX_WARN(COLL, "own all-reduce: DESTROY of set %" PRIu64 ": %s; its control block (%zu bytes) is left to the "
               "operations still running", p->id, acx_status_name(st), sizeof(acxp_ctl_t));
      p->ctlmem = NULL;
      p->ctl = NULL;
    }
  }
  release(p);
}

void acxc_peer_free(acx_coll_t *c) {
  acxc_peer_t *p = c->peer;
  if (!p) return;
  release(p);
  if (p->ctlmem) acx_host_free(p->ctlmem);
  free(p);
  c->peer = NULL;
}

void acxc_peer_abort(acx_coll_t *c, acx_status_t cause) {
  acxc_peer_t *p = c->peer;
  if (p && p->ctl && p->id) atomic_store_explicit(&p->ctl->abort, (int32_t)cause, memory_order_release);
}

int acxc_peer_takes(const acx_coll_t *c, const acxc_opdesc_t *d) {
  const acxc_peer_t *p = c->peer;
  if (!p || !p->id || d->op != ACXC_OP_ALLREDUCE || d->count == 0) return 0;
  uint64_t bytes = (uint64_t)d->count * acx_dtype_size(d->dtype);
  if (bytes <= p->slot_bytes) return p->small_on;
  return p->big_bytes && bytes >= p->big_min;
}

int acxc_peer_parts(const acx_coll_t *c, uint64_t *slot_bytes, uint64_t *big_min) {
  const acxc_peer_t *p = c->peer;
  if (!p || !p->id) return 0;
  if (slot_bytes) *slot_bytes = p->slot_bytes;
  if (big_min) *big_min = p->big_bytes ? (p->big_min > p->slot_bytes ? p->big_min : p->slot_bytes + 1) : 0;
  return (p->small_on ? ACXC_PEER_SMALL : 0) | (p->big_bytes ? ACXC_PEER_BIG : 0) |
         (p->big_bytes && p->grp.groups ? ACXC_PEER_GROUPS : 0);
}

int acxc_peer_on(const acx_coll_t *c) { return c->peer && c->peer->id; }

int acxc_peer_group(const acx_coll_t *c, int *peers, int cap, uint64_t *set_id) {
  const acxc_peer_t *p = c->peer;
  *set_id = p ? p->id : 0;
  if (!p || !p->id || !p->grp.groups) return 0;
  int n = 0;
  for (int q = 0; q < c->size; q++)
    if (q != c->rank && p->grp.grp[q] == p->grp.grp[c->rank] && n < cap) peers[n++] = q;
  return n;
}

acx_status_t acxc_peer_fence(acx_coll_t *c, acx_future_t **f) {
  acxi_cmd_t cmd = {.op = ACXP_OP_FENCE, .arg = {c->peer->id}};
  return acxi_device_submit(c->dev, &cmd, NULL, 0, 0, -1, acxi_deadline(acxi_device_timeout(c->dev, -1)), f);
}

acx_status_t acxc_peer_reg(acx_coll_t *c, uint64_t set_id, int slot, int peer, acx_buffer_t *imp, int64_t deadline) {
  const int64_t left = acxi_left_ns(deadline);
  const int64_t ms = left / 1000000;
  acxi_cmd_t cmd = {.op = ACXP_OP_REG, .buf = {imp ? imp->id : 0},
                    .arg = {set_id, (uint64_t)slot, (uint64_t)peer, 0, (uint64_t)(ms > 0 ? ms : 1)}};
  acxi_bufarg_t ba = {imp, "registration mapping"};
  acx_future_t *f = NULL;
  acx_status_t st = acxi_device_submit(c->dev, &cmd, imp ? &ba : NULL, imp ? 1 : 0, 0, -1, deadline, &f);
  if (st != ACX_OK) return st;
  st = acx_future_wait(f, acxi_left_ns(deadline), NULL, 0, NULL);
  acx_future_release(f);
  return st;
}

uint64_t acxc_peer_ops(const acx_coll_t *c) {
  return c->peer ? atomic_load_explicit(&c->peer->ops, memory_order_relaxed) : 0;
}

/* Sends operation number p->seq + 1; on success it is counted. The executor's own bound on the
 * wait is a backstop at 1.5 times the coll's timeout: the coll's watchdog (or the worker) breaks
 * the coll at the operation's deadline first, and the break's abort word ends the executor's wait. */
static acx_status_t send_op(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **f) {
  acxc_peer_t *p = c->peer;
  int64_t ms = c->timeout_ns / 1000000 * 3 / 2;
  /* The registration slots of send and recv (peer_ops.h, "Registered buffers"): looked up only for
   * the two-shot with groups, the one variant that reads through them. */
  uint64_t regs = 0;
  if (p->grp.groups && (uint64_t)d->count * acx_dtype_size(d->dtype) > p->slot_bytes) {
    int ss = acxc_reg_slot_of(c, d->send), rs = d->recv == d->send ? ss : acxc_reg_slot_of(c, d->recv);
    regs = (uint64_t)(ss + 1) | (uint64_t)(rs + 1) << 8;
  }
  acxi_cmd_t cmd = {.op = ACXP_OP_ALLREDUCE, .stream = d->stream, .dtype = (uint32_t)d->dtype, .bytes = d->count,
                    .buf = {d->send->id, d->recv->id},
                    .arg = {p->id, (uint64_t)d->redop, regs, p->seq + 1, (uint64_t)(ms > 0 ? ms : 1)}};
  acxi_bufarg_t ba[2] = {{d->send, "send"}, {d->recv, "recv"}};
  acx_status_t st = acxi_device_submit(c->dev, &cmd, ba, d->recv == d->send ? 1 : 2, 0, -1,
                                       acxi_deadline(acxi_device_timeout(c->dev, -1)), f);
  if (st != ACX_OK) return st;
  p->seq++;
  atomic_fetch_add_explicit(&p->ops, 1, memory_order_relaxed);
  return ACX_OK;
}

acx_status_t acxc_peer_start(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **f) { return send_op(c, d, f); }

acx_status_t acxc_peer_finish(acx_coll_t *c, acx_future_t *f, int64_t deadline) {
  acx_status_t st = acx_future_wait(f, acxi_left_ns(deadline), NULL, 0, NULL);
  if (st == ACX_ERR_TIMEOUT) {
    acxc_coll_break(c, ACX_ERR_COLL_TIMEOUT, 1, "an all-reduce of the own path passed its deadline "
                    "(ACX_COLL_TIMEOUT): a peer did not take part");
    /* The abort word makes the executor let go at its next look; the buffers stay held till then. */
    if (acx_future_wait(f, 5000000000LL, NULL, 0, NULL) == ACX_ERR_TIMEOUT)
      ACX_WARN(COLL, "own all-reduce: the executor did not end the operation within 5 s of the abort");
    st = ACX_ERR_COLL_TIMEOUT;
  }
  acx_future_release(f);
  return st;
}

acx_status_t acxc_peer_submit(acx_coll_t *c, const acxc_opdesc_t *d, acx_future_t **done) {
  acx_future_t *f = NULL;
  acx_status_t st = send_op(c, d, done ? &f : NULL);
  if (st != ACX_OK) return st;
  return acxc_coll_issued(c, d->stream, f, done);
}
