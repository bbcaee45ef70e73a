/* The rank's way to the executor library (libacx_exec) for the inline transport. libacx links no
 * CUDA library: a rank that only uses executor processes never loads one. The first inline device
 * loads libacx_exec beside libacx (the install layout and the build tree put them in one
 * directory), else through the loader's search path (LD_LIBRARY_PATH, the runpath); ACX_EXEC_LIBRARY
 * names another file. A program that links the executor objects itself (the tests) is served by
 * those. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "acx/config.h"
#include "acx/version.h"
#include "runtime/base/log.h"
#include "runtime/base/param.h"
#include "runtime/device/device_internal.h"
#include "runtime/proto/exec_api.h"

/* Defined when the executor objects are linked into the program itself. */
extern const acxi_exec_entry_t *acx_exec_entry(uint32_t abi) __attribute__((weak));

#define EXEC_STR_(x) #x
#define EXEC_STR(x) EXEC_STR_(x)
#define EXEC_SONAME "libacx_exec.so." EXEC_STR(ACX_VERSION_MAJOR)

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const acxi_exec_entry_t *loaded;
static acx_status_t load_status = ACX_ERR_NOT_SUPPORTED;
static char load_from[4096];

static const acxi_exec_entry_t *entry_of(void *h, const char *path) {
  acxi_exec_entry_fn fn = (acxi_exec_entry_fn)dlsym(h, ACXI_EXEC_ENTRY_SYMBOL);
  if (!fn) {
    ACX_WARN(DEVICE, "%s has no %s: not an acx executor library", path, ACXI_EXEC_ENTRY_SYMBOL);
    return NULL;
  }
  const acxi_exec_entry_t *e = fn(ACXI_EXEC_ABI);
  if (!e) ACX_WARN(DEVICE, "%s is an executor library of another acx build (interface %u wanted)", path, ACXI_EXEC_ABI);
  return e;
}

static const acxi_exec_entry_t *try_open(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    ACX_INFO(DEVICE, "executor library %s: %s", path, dlerror());
    return NULL;
  }
  const acxi_exec_entry_t *e = entry_of(h, path);
  if (!e) {
    dlclose(h);
    return NULL;
  }
  snprintf(load_from, sizeof load_from, "%s", path);
  return e; /* kept loaded: its threads and CUDA state live as long as the process */
}

static void load(void) {
  if (acx_exec_entry) {
    loaded = acx_exec_entry(ACXI_EXEC_ABI);
    snprintf(load_from, sizeof load_from, "(linked into the program)");
  }
  const char *env = acxi_param_str("ACX_EXEC_LIBRARY");
  if (!loaded && env && *env) {
    loaded = try_open(env);
    if (!loaded) ACX_WARN(DEVICE, "ACX_EXEC_LIBRARY='%s' could not be loaded (%s)", env, dlerror());
    load_status = loaded ? ACX_OK : ACX_ERR_BAD_PARAM;
    return;
  }
  Dl_info info;
  if (!loaded && dladdr((void *)acxi_exec_lib, &info) && info.dli_fname) {
    char lib[4096], path[4200];
    snprintf(lib, sizeof lib, "%s", info.dli_fname);
    snprintf(path, sizeof path, "%s/%s", dirname(lib), EXEC_SONAME);
    loaded = try_open(path);
  }
  if (!loaded) loaded = try_open(EXEC_SONAME);
  if (!loaded) {
    ACX_WARN(DEVICE, "the inline transport needs the executor library %s: not found beside libacx nor on the "
             "loader's path (set ACX_EXEC_LIBRARY, or use the process transport)", EXEC_SONAME);
    load_status = ACX_ERR_NOT_SUPPORTED;
    return;
  }
  ACX_INFO(DEVICE, "executor library for the inline transport: %s", load_from);
  load_status = ACX_OK;
}

acx_status_t acxi_exec_lib(const acxi_exec_entry_t **entry) {
  pthread_once(&load_once, load);
  *entry = loaded;
  return loaded ? ACX_OK : load_status;
}
