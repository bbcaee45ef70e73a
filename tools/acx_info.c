/* acx-info: version, build configuration and every ACX_* parameter with its value. */
#include <stdio.h>
#include <string.h>

#include "acx_build_config.h"
#include "acx/config.h"
#include "acx/topo.h"
#include "collectives/collectives.h"
#include "kernels/kernels.h"

static void usage(void) { printf("usage: acx-info [-p|--params] [-m|--markdown] [-t|--topo] [-h]\n"); }

/* GPUs, cores and the binding map of this machine (or of HWLOC_XMLFILE). */
static int print_topo(void) {
  acx_topo_t *t = NULL;
  acx_status_t s = acx_topo_create(NULL, &t);
  if (s == ACX_OK) s = acx_topo_print(t, 0, stdout);
  acx_topo_destroy(t);
  if (s != ACX_OK) fprintf(stderr, "acx-info: topology: %s\n", acx_status_str(s));
  return s == ACX_OK ? 0 : 1;
}

/* The GPU architectures the CUDA kernels were compiled for (CMAKE_CUDA_ARCHITECTURES): a GPU that
 * none of them runs on cannot be opened. */
static void print_cuda_architectures(void) {
  printf("# cuda architectures: %s\n", ACX_HAVE_CUDA ? ACX_CUDA_ARCHITECTURES : "none (built without CUDA)");
}

/* The registry as a markdown table of defaults (never the values in effect, so the output does
 * not depend on the environment): docs/environment.md is generated from it and checked by a test. */
static void print_md_cell(const char *s) {
  for (; *s; s++) {
    if (*s == '|') putchar('\\'); /* a bar would end the cell */
    putchar(*s);
  }
}

static void print_markdown(void) {
  printf("| Variable | Type | Default | Description |\n|---|---|---|---|\n");
  for (size_t i = 0; i < acx_param_count(); i++) {
    acx_param_info_t p;
    if (acx_param_info(i, &p) != ACX_OK) continue;
    printf("| `%s` | %s | ", p.name, p.type == ACX_PARAM_INT ? "integer" : "string");
    if (*p.default_str) {
      putchar('`');
      print_md_cell(p.default_str);
      putchar('`');
    } else {
      printf("(empty)");
    }
    printf(" | ");
    print_md_cell(p.help);
    printf(" |\n");
  }
}

int main(int argc, char **argv) {
  int params_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--params")) {
      params_only = 1;
    } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--markdown")) {
      print_markdown();
      return 0;
    } else if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--topo")) {
      return print_topo();
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage();
      return 0;
    } else {
      fprintf(stderr, "acx-info: unknown argument '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
  if (!params_only) {
    printf("# acx %s\n", acx_version(NULL));
    printf("# build: cuda=%s mpi=%s nccl=%s\n", acxk_have_cuda() ? "yes" : "no",
           acxc_have_mpi() ? "yes" : "no", acxc_have_nccl() ? "yes" : "no");
    print_cuda_architectures();
    printf("# parameters (value, [env] when set in the environment):\n");
  }
  for (size_t i = 0; i < acx_param_count(); i++) {
    acx_param_info_t p;
    if (acx_param_info(i, &p) != ACX_OK) continue;
    printf("%-24s = %-12s %s  # %s (default %s)\n", p.name, p.value_str, p.from_env ? "[env]" : "     ",
           p.help, p.default_str);
  }
  return 0;
}
