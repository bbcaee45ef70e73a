/* The CollectiveActor: one per coll (world x local device). It owns the communicator's life beside
 * the hot path: it watches the device (a restarted executor took the NCCL communicator with it),
 * runs the watchdog on a periodic timer, and receives the answers of the watchdog's probes.
 * Operations never pass through it: they go straight from the caller to the executor. */
#include <inttypes.h>

#include "collectives/coll_internal.h"
#include "runtime/base/clock.h"
#include "runtime/base/log.h"

typedef struct coll_actor {
  acx_coll_t *c;
} coll_actor_t;

static acx_status_t actor_init(acx_ctx_t *ctx, void *state, const void *arg) {
  coll_actor_t *a = state;
  a->c = (acx_coll_t *)arg; /* the coll outlives its actor: destroy stops the actor first */
  return ACX_OK;
}

static acx_status_t actor_receive(acx_ctx_t *ctx, void *state, const acx_msg_t *msg) {
  acx_coll_t *c = ((coll_actor_t *)state)->c;
  switch (msg->type) {
  case ACXC_MSG_TICK:
    acxc_coll_watchdog(c);
    return ACX_OK;
  case ACX_MSG_FUTURE_DONE: {
    const acx_future_done_t *d = msg->data;
    if (d->cookie == ACXC_COOKIE_CHECK) acxc_coll_check_done(c, d->future);
    return ACX_OK;
  }
  case ACX_MSG_DEVICE_RESTARTED:
  case ACX_MSG_DEVICE_UNAVAILABLE:
  case ACX_MSG_DEVICE_FATAL: {
    const acx_device_event_t *ev = msg->data;
    if (c->host && !c->hier_on && !acxc_peer_on(c)) {
      /* MPI's communicator lives in the rank: only the buffers of the old generation are gone,
       * and they answer ACX_ERR_STALE_BUFFER by themselves. */
      ACX_INFO(COLL, "device generation %" PRIu64 " -> %" PRIu64 ": host-kind collectives go on (MPI is in the rank)",
               ev->old_generation, ev->new_generation);
      if (msg->type != ACX_MSG_DEVICE_RESTARTED)
        acxc_coll_break(c, msg->type == ACX_MSG_DEVICE_FATAL ? ACX_ERR_DEVICE_FATAL : ACX_ERR_DEVICE_UNAVAILABLE, 0,
                        "the device is gone");
      return ACX_OK;
    }
    /* The NCCL communicator died with the executor; the peers will time out or see an NCCL
     * error. Rebuilding the world is the rebuild protocol's job: leave a clean broken state. */
    acx_status_t cause = msg->type == ACX_MSG_DEVICE_RESTARTED ? ACX_ERR_DEVICE_LOST
                         : msg->type == ACX_MSG_DEVICE_FATAL   ? ACX_ERR_DEVICE_FATAL
                                                               : ACX_ERR_DEVICE_UNAVAILABLE;
    acxc_coll_break(c, cause, 0, ev->reason[0] ? ev->reason : "the device's executor was replaced");
    return ACX_OK;
  }
  case ACXC_MSG_STOP:
    acx_timer_cancel(acx_ctx_system(ctx), c->timer);
    acx_stop_self(ctx);
    acx_reply(ctx, msg, ACX_OK, NULL, 0);
    return ACX_OK;
  default:
    ACX_WARN(COLL, "CollectiveActor: unexpected message type %#x ignored", msg->type);
    return ACX_OK;
  }
}

/* The watchdog ticks often enough that a deadline is noticed within a tenth of the timeout. */
static int64_t tick_ns(const acx_coll_t *c) {
  int64_t t = c->timeout_ns / 10;
  if (t > 100000000) t = 100000000;
  if (t < 1000000) t = 1000000;
  return t;
}

acx_status_t acxc_coll_actor_start(acx_coll_t *c, const char *name) {
  acx_props_t props = ACX_PROPS_INIT;
  props.state_size = sizeof(coll_actor_t);
  props.init = actor_init;
  props.receive = actor_receive;
  props.arg = c;
  acx_ref_t parent = NULL;
  if (acx_device_actor(c->dev, &parent) != ACX_OK) parent = NULL;
  acx_status_t st = acx_spawn(c->sys, parent, &props, name, &c->actor);
  if (st != ACX_OK) {
    ACX_WARN(COLL, "acx_coll_create: cannot spawn the CollectiveActor '%s': %s", name, acx_status_name(st));
    return st;
  }
  st = acx_device_watch(c->dev, c->actor);
  if (st == ACX_OK)
    st = acx_timer_periodic(c->sys, c->actor, tick_ns(c), ACXC_MSG_TICK, NULL, 0, &c->timer);
  if (st != ACX_OK) {
    ACX_WARN(COLL, "acx_coll_create: CollectiveActor '%s' cannot watch the device or start its timer: %s", name,
             acx_status_name(st));
    acx_stop(c->actor);
    acx_ref_release(c->actor);
    c->actor = NULL;
  }
  return st;
}

void acxc_coll_actor_stop(acx_coll_t *c) {
  if (!c->actor) return;
  acx_future_t *f = NULL;
  acx_status_t st = acx_ask(c->actor, ACXC_MSG_STOP, NULL, 0, &f);
  if (st == ACX_OK) {
    st = acx_future_wait(f, 10000000000LL, NULL, 0, NULL);
    acx_future_release(f);
  }
  if (st != ACX_OK) {
    ACX_WARN(COLL, "CollectiveActor did not confirm its stop (%s); stopping it", acx_status_name(st));
    acx_timer_cancel(c->sys, c->timer);
    acx_stop(c->actor);
  }
  acx_ref_release(c->actor);
  c->actor = NULL;
}
