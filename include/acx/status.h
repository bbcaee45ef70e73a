/* acx status codes: one acx_status_t for the whole API, grouped by what an error affects so a
 * supervisor can act on the group (ACX_STATUS_GROUP, ACX_IS_*_ERROR). Every public function
 * returns one and writes its results through pointers. */
#ifndef ACX_STATUS_H
#define ACX_STATUS_H

/* Exported from libacx, which hides everything else (cmake/libacx.map). */
#pragma GCC visibility push(default)

#ifdef __cplusplus
extern "C" {
#endif

typedef enum acx_status {
  ACX_OK = 0,

  /* 1xx argument and usage: the caller's mistake; retrying the same call fails the same way. */
  ACX_ERR_INVALID_ARG = 100,   /* an argument is out of its domain (the log line names it) */
  ACX_ERR_NULL_ARG = 101,      /* a required pointer or reference is NULL */
  ACX_ERR_INVALID_STATE = 102, /* the object is not in a state that allows the call */
  ACX_ERR_NOT_SUPPORTED = 103, /* not available in this build or on this device kind */
  ACX_ERR_BAD_DTYPE = 104,     /* element type unknown or not allowed for this operation */
  ACX_ERR_OUT_OF_RANGE = 105,  /* offset/size outside the object */
  ACX_ERR_OVERFLOW = 106,      /* a size computation overflows */
  ACX_ERR_BAD_PARAM = 107,     /* an ACX_* environment parameter has an invalid value */

  /* 2xx resources of the host process. */
  ACX_ERR_NO_MEMORY = 200,  /* host allocation failed */
  ACX_ERR_QUEUE_FULL = 201, /* a bounded queue stayed full until the deadline */
  ACX_ERR_SYSTEM = 202,     /* an OS call failed (errno is logged) */
  ACX_ERR_TIMEOUT = 203,    /* a wait reached its deadline */

  /* 3xx actors. */
  ACX_ERR_ACTOR_STOPPED = 300, /* the target actor has stopped; the message became a dead letter */
  ACX_ERR_NAME_TAKEN = 301,    /* an actor with this name already exists under this parent */
  ACX_ERR_NOT_FOUND = 302,     /* no actor at this path */
  ACX_ERR_ACTOR_FAILED = 303,  /* the actor failed while handling the request */
  ACX_ERR_CANCELLED = 304,     /* the request, timer or future was cancelled */
  ACX_ERR_ESCALATED = 305,     /* a supervisor gave up (max restarts) and escalated */
  ACX_ERR_SYSTEM_STOPPING = 306, /* the actor system is shutting down */

  /* 4xx device. 40x: the device is still usable; 45x: the executor incarnation is gone. */
  ACX_ERR_DEVICE = 400,          /* a device call failed; the device is still usable */
  ACX_ERR_DEVICE_OOM = 401,      /* device memory exhausted */
  ACX_ERR_NO_DEVICE = 402,       /* no such device, or no usable GPU on this machine */
  ACX_ERR_DEVICE_LOST = 450,     /* the executor died, faulted or stopped answering; retry after restart */
  ACX_ERR_DEVICE_FATAL = 451,    /* sticky fault in inline mode: the process cannot use the GPU again */
  ACX_ERR_DEVICE_UNAVAILABLE = 452, /* the device gave up restarting (restart limit reached) */

  /* 5xx buffers and tokens. */
  ACX_ERR_STALE_BUFFER = 500,  /* the buffer belongs to an earlier device generation */
  ACX_ERR_UNKNOWN_BUFFER = 501, /* no buffer with this id on the device */
  ACX_ERR_BAD_TOKEN = 502,     /* a token is malformed (magic, version, checksum, size) */
  ACX_ERR_STALE_TOKEN = 503,   /* a token names an old generation or world epoch, or a revoked export */
  ACX_ERR_DENIED = 504,        /* the token lacks the right for this access */

  /* 6xx world and collectives. */
  ACX_ERR_WORLD_REBUILDING = 600, /* retryable: the world is being rebuilt */
  ACX_ERR_PEER_LOST = 601,        /* a peer rank failed */
  ACX_ERR_COLL_TIMEOUT = 602,     /* a collective passed its deadline; the communicator was aborted */
  ACX_ERR_NCCL = 603,             /* NCCL returned an error (code in the log) */
  ACX_ERR_MPI = 604,              /* MPI returned an error */
  ACX_ERR_BAD_LAUNCH = 605,       /* the launcher gave an inconsistent world (e.g. missing PMIx) */

  /* 7xx CUDA libraries: the library's own code travels with the reply and is logged. */
  ACX_ERR_LIBRARY = 700,
  ACX_ERR_LIBRARY_INFO = 701, /* a solver reported info != 0 (singular, not positive definite) */
  ACX_ERR_COMPILE = 702       /* NVRTC compilation failed; the log carries the compiler output */
} acx_status_t;

#define ACX_STATUS_GROUP(s) ((int)(s) / 100)
#define ACX_IS_OK(s) ((s) == ACX_OK)
#define ACX_IS_ARG_ERROR(s) (ACX_STATUS_GROUP(s) == 1)
#define ACX_IS_RESOURCE_ERROR(s) (ACX_STATUS_GROUP(s) == 2)
#define ACX_IS_ACTOR_ERROR(s) (ACX_STATUS_GROUP(s) == 3)
#define ACX_IS_DEVICE_ERROR(s) (ACX_STATUS_GROUP(s) == 4)
#define ACX_IS_DEVICE_LOST(s) ((int)(s) >= 450 && (int)(s) < 500)
#define ACX_IS_BUFFER_ERROR(s) (ACX_STATUS_GROUP(s) == 5)
#define ACX_IS_WORLD_ERROR(s) (ACX_STATUS_GROUP(s) == 6)
#define ACX_IS_LIBRARY_ERROR(s) (ACX_STATUS_GROUP(s) == 7)
/* Errors after which the same request may succeed once the runtime has recovered. */
#define ACX_IS_RETRYABLE(s) \
  ((s) == ACX_ERR_DEVICE_LOST || (s) == ACX_ERR_WORLD_REBUILDING || (s) == ACX_ERR_QUEUE_FULL || \
   (s) == ACX_ERR_TIMEOUT)

/* The code's name and a short description, e.g. "ACX_ERR_STALE_BUFFER: buffer from an earlier
 * device generation". Never NULL; unknown codes give "ACX_ERR_<unknown>". Any thread. */
const char *acx_status_str(acx_status_t s);
/* Just the name, e.g. "ACX_ERR_STALE_BUFFER". Never NULL. Any thread. */
const char *acx_status_name(acx_status_t s);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
