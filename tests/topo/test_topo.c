/* runtime/device/topo.c: GPUs in PCI order, CUDA_VISIBLE_DEVICES, launcher masks and the per-local-rank
 * GPU and cpuset choice, on recorded topologies (the 2xH200 test host as lstopo recorded it, the
 * same shape with NVML UUIDs, a 2-socket 4-GPU node), plus binding on this machine. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acx/topo.h"
#include "acx_test.h"

#define H200_HOST ACX_TOPO_DATA_DIR "/h200x2-gpu-host.xml"
#define H200_NVML ACX_TOPO_DATA_DIR "/h200x2-1socket.xml"
#define TWO_SOCKET ACX_TOPO_DATA_DIR "/2socket-4gpu.xml"
#define SOCK0 "0-15,32-47"
#define SOCK1 "16-31,48-63"

static acx_topo_t *load(const char *path) {
  acx_topo_t *t = NULL;
  ACX_ASSERT_STATUS(acx_topo_create(path, &t), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  return t;
}

/* Binding of local rank lr of ls, with an optional visible list and launcher mask. */
static acx_status_t choose(acx_topo_t *t, int lr, int ls, const char *visible, const char *mask,
                           const char *const *peers, int device, acx_topo_binding_t *b) {
  acx_topo_request_t req = ACX_TOPO_REQUEST_INIT;
  req.local_rank = lr;
  req.local_size = ls;
  req.visible_devices = visible;
  req.cpuset = mask;
  req.peer_cpusets = peers;
  req.device = device;
  return acx_topo_choose(t, &req, b);
}

static void test_gpu_host_recorded(void) {
  acx_topo_t *t = load(H200_HOST);
  int n = -1;
  ACX_ASSERT_STATUS(acx_topo_gpu_count(t, &n), ACX_OK);
  CU_ASSERT_EQUAL_FATAL(n, 2);
  acx_topo_gpu_t g;
  ACX_ASSERT_STATUS(acx_topo_gpu_get(t, 0, &g), ACX_OK);
  CU_ASSERT_STRING_EQUAL(g.pci_bus_id, "0000:00:06.0");
  CU_ASSERT_STRING_EQUAL(g.cpuset, "0-31");
  CU_ASSERT_EQUAL(g.device_id, 0x2335);
  CU_ASSERT_STRING_EQUAL(g.uuid, "");
  ACX_ASSERT_STATUS(acx_topo_gpu_get(t, 1, &g), ACX_OK);
  CU_ASSERT_STRING_EQUAL(g.pci_bus_id, "0000:00:07.0");
  ACX_ASSERT_STATUS(acx_topo_gpu_get(t, 2, &g), ACX_ERR_OUT_OF_RANGE);

  /* Unbound ranks 0..3: round robin over both GPUs, all 32 cores. */
  const char *bus[4] = {"0000:00:06.0", "0000:00:07.0", "0000:00:06.0", "0000:00:07.0"};
  for (int lr = 0; lr < 4; lr++) {
    acx_topo_binding_t b;
    ACX_ASSERT_STATUS(choose(t, lr, 4, NULL, NULL, NULL, -1, &b), ACX_OK);
    CU_ASSERT_EQUAL(b.gpu, lr % 2);
    CU_ASSERT_STRING_EQUAL(b.pci_bus_id, bus[lr]);
    CU_ASSERT_STRING_EQUAL(b.cpuset, "0-31");
    CU_ASSERT_EQUAL(b.launcher_bound, 0);
  }
  /* CUDA_VISIBLE_DEVICES=1: every rank on CUDA device 0, which is the second GPU. */
  for (int lr = 0; lr < 4; lr++) {
    acx_topo_binding_t b;
    ACX_ASSERT_STATUS(choose(t, lr, 4, "1", NULL, NULL, -1, &b), ACX_OK);
    CU_ASSERT_EQUAL(b.gpu, 0);
    CU_ASSERT_EQUAL(b.gpu_index, 1);
    CU_ASSERT_STRING_EQUAL(b.pci_bus_id, "0000:00:07.0");
  }
  /* A launcher mask narrows the cpuset; the GPU choice stays round robin. */
  acx_topo_binding_t b;
  ACX_ASSERT_STATUS(choose(t, 1, 2, NULL, "8-15", NULL, -1, &b), ACX_OK);
  CU_ASSERT_EQUAL(b.gpu, 1);
  CU_ASSERT_STRING_EQUAL(b.cpuset, "8-15");
  CU_ASSERT_EQUAL(b.launcher_bound, 1);
  CU_ASSERT_STRING_EQUAL(b.gpu_cpuset, "0-31");
  /* No visible GPU: host device kind, cpuset = the launcher's. */
  ACX_ASSERT_STATUS(choose(t, 0, 1, "", "4-5", NULL, -1, &b), ACX_OK);
  CU_ASSERT_EQUAL(b.gpu, -1);
  CU_ASSERT_STRING_EQUAL(b.pci_bus_id, "");
  CU_ASSERT_STRING_EQUAL(b.cpuset, "4-5");
  char line[256];
  CU_ASSERT_PTR_NOT_NULL(strstr(acx_topo_binding_str(&b, line, sizeof line), "no GPU"));
  acx_topo_destroy(t);
}

static void test_two_socket_pci_order_and_locality(void) {
  acx_topo_t *t = load(TWO_SOCKET);
  int n = -1;
  ACX_ASSERT_STATUS(acx_topo_gpu_count(t, &n), ACX_OK);
  CU_ASSERT_EQUAL_FATAL(n, 4); /* the NVSwitch (10de, class 0680) is not a GPU */
  const char *bus[4] = {"0000:18:00.0", "0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"};
  const char *cpus[4] = {SOCK0, SOCK0, SOCK1, SOCK1};
  for (int i = 0; i < 4; i++) {
    acx_topo_gpu_t g;
    ACX_ASSERT_STATUS(acx_topo_gpu_get(t, i, &g), ACX_OK);
    CU_ASSERT_EQUAL(g.index, i);
    CU_ASSERT_STRING_EQUAL(g.pci_bus_id, bus[i]);
    CU_ASSERT_STRING_EQUAL(g.cpuset, cpus[i]);
    CU_ASSERT_EQUAL(g.numa_node, i / 2);
  }
  /* Unbound ranks 0..3: GPU = local rank, cores of the GPU's socket. */
  for (int lr = 0; lr < 4; lr++) {
    acx_topo_binding_t b;
    ACX_ASSERT_STATUS(choose(t, lr, 4, NULL, NULL, NULL, -1, &b), ACX_OK);
    CU_ASSERT_EQUAL(b.gpu, lr);
    CU_ASSERT_STRING_EQUAL(b.pci_bus_id, bus[lr]);
    CU_ASSERT_STRING_EQUAL(b.cpuset, cpus[lr]);
    CU_ASSERT_EQUAL(b.numa_node, lr / 2);
    char line[256];
    CU_ASSERT_PTR_NOT_NULL(strstr(acx_topo_binding_str(&b, line, sizeof line), bus[lr]));
  }
  /* Eight ranks on four GPUs: two per GPU. */
  for (int lr = 0; lr < 8; lr++) {
    acx_topo_binding_t b;
    ACX_ASSERT_STATUS(choose(t, lr, 8, NULL, NULL, NULL, -1, &b), ACX_OK);
    CU_ASSERT_EQUAL(b.gpu, lr % 4);
  }
  acx_topo_destroy(t);
}

static void test_two_socket_launcher_masks(void) {
  acx_topo_t *t = load(TWO_SOCKET);
  /* mpirun --map-by socket --bind-to socket deals ranks alternately: 0,2 on socket 0; 1,3 on 1. */
  const char *peers[4] = {SOCK0, SOCK1, SOCK0, SOCK1};
  const int want[4] = {0, 2, 1, 3};
  for (int lr = 0; lr < 4; lr++) {
    acx_topo_binding_t b;
    ACX_ASSERT_STATUS(choose(t, lr, 4, NULL, NULL, peers, -1, &b), ACX_OK);
    CU_ASSERT_EQUAL(b.gpu, want[lr]);
    CU_ASSERT_STRING_EQUAL(b.cpuset, peers[lr]);
    CU_ASSERT_EQUAL(b.launcher_bound, 1);
  }
  /* Bound to one core each (--bind-to core, ranks by core): rank 2 sits on core 2 of socket 0
   * and still gets a socket-0 GPU; the cpuset is its core. */
  const char *cores[4] = {"0", "1", "16", "17"};
  const int want_core[4] = {0, 1, 2, 3};
  for (int lr = 0; lr < 4; lr++) {
    acx_topo_binding_t b;
    ACX_ASSERT_STATUS(choose(t, lr, 4, NULL, NULL, cores, -1, &b), ACX_OK);
    CU_ASSERT_EQUAL(b.gpu, want_core[lr]);
    CU_ASSERT_STRING_EQUAL(b.cpuset, cores[lr]);
  }
  /* Without the peers' masks: local rank 1 bound to socket 1 deals among the socket-1 GPUs. */
  acx_topo_binding_t b;
  ACX_ASSERT_STATUS(choose(t, 1, 4, NULL, SOCK1, NULL, -1, &b), ACX_OK);
  CU_ASSERT_EQUAL(b.gpu, 3);
  CU_ASSERT_STRING_EQUAL(b.cpuset, SOCK1);
  /* Six ranks all bound to socket 0: socket-0 GPUs first, then spill to socket 1 only when the
   * near ones are equally loaded (least loaded wins over near). */
  const char *crowd[6] = {SOCK0, SOCK0, SOCK0, SOCK0, SOCK0, SOCK0};
  const int want_crowd[6] = {0, 1, 0, 1, 0, 1};
  for (int lr = 0; lr < 6; lr++) {
    ACX_ASSERT_STATUS(choose(t, lr, 6, NULL, NULL, crowd, -1, &b), ACX_OK);
    CU_ASSERT_EQUAL(b.gpu, want_crowd[lr]);
  }
  /* ACX_DEVICE forces GPU 0 on a rank the launcher put on socket 1: the launcher's mask wins. */
  ACX_ASSERT_STATUS(choose(t, 0, 1, NULL, "20-23", NULL, 0, &b), ACX_OK);
  CU_ASSERT_EQUAL(b.gpu, 0);
  CU_ASSERT_STRING_EQUAL(b.gpu_cpuset, SOCK0);
  CU_ASSERT_STRING_EQUAL(b.cpuset, "20-23");
  ACX_ASSERT_STATUS(choose(t, 0, 1, NULL, NULL, NULL, 4, &b), ACX_ERR_NO_DEVICE);
  acx_topo_destroy(t);
}

static void test_cuda_visible_devices(void) {
  acx_topo_t *t = load(TWO_SOCKET);
  int idx[8], n = -1;
  ACX_ASSERT_STATUS(acx_topo_visible(t, "2,3", idx, 8, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 2);
  CU_ASSERT(idx[0] == 2 && idx[1] == 3);
  ACX_ASSERT_STATUS(acx_topo_visible(t, " 3 , 1", idx, 8, &n), ACX_OK);
  CU_ASSERT(n == 2 && idx[0] == 3 && idx[1] == 1);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "0,7,1", idx, 8, &n), ACX_OK); /* ends at the bad entry */
  CU_ASSERT(n == 1 && idx[0] == 0);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "1,1", idx, 8, &n), ACX_OK);
  CU_ASSERT(n == 1 && idx[0] == 1);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "x", idx, 8, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 0);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "", idx, 8, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 0);
  /* No NVML UUIDs in this recording: a UUID cannot be matched, and that is said, not guessed. */
  ACX_ASSERT_STATUS(acx_topo_visible(t, "GPU-8932f937", idx, 8, &n), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "MIG-0", idx, 8, &n), ACX_ERR_NOT_SUPPORTED);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "1", NULL, 8, &n), ACX_ERR_INVALID_ARG);

  /* Through the environment, as the launcher sets it: ranks 0..3 over CUDA devices 0,1 = 2,3. */
  setenv("CUDA_VISIBLE_DEVICES", "2,3", 1);
  for (int lr = 0; lr < 4; lr++) {
    acx_topo_binding_t b;
    ACX_ASSERT_STATUS(choose(t, lr, 4, NULL, NULL, NULL, -1, &b), ACX_OK);
    CU_ASSERT_EQUAL(b.gpu, lr % 2);
    CU_ASSERT_EQUAL(b.gpu_index, 2 + lr % 2);
    CU_ASSERT_STRING_EQUAL(b.cpuset, SOCK1);
  }
  /* A launcher mask on socket 0 with only socket-1 GPUs visible: no near GPU, its mask wins. */
  acx_topo_binding_t b;
  ACX_ASSERT_STATUS(choose(t, 0, 1, NULL, "3", NULL, -1, &b), ACX_OK);
  CU_ASSERT_EQUAL(b.gpu_index, 2);
  CU_ASSERT_STRING_EQUAL(b.cpuset, "3");
  unsetenv("CUDA_VISIBLE_DEVICES");
  acx_topo_destroy(t);

  /* The same host shape recorded with NVML: UUIDs (and unique prefixes) resolve. */
  t = load(H200_NVML);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "GPU-24b36e4e", idx, 8, &n), ACX_OK);
  CU_ASSERT(n == 1 && idx[0] == 1);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "GPU-24b36e4e-8dca-1f55-5ca7-5ecbe5f2a0c1,GPU-8932", idx, 8, &n), ACX_OK);
  CU_ASSERT(n == 2 && idx[0] == 1 && idx[1] == 0);
  ACX_ASSERT_STATUS(acx_topo_visible(t, "GPU-ffff,0", idx, 8, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 0);
  acx_topo_gpu_t g;
  ACX_ASSERT_STATUS(acx_topo_gpu_get(t, 0, &g), ACX_OK);
  CU_ASSERT_STRING_EQUAL(g.pci_bus_id, "0000:19:00.0");
  CU_ASSERT_STRING_EQUAL(g.uuid, "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6");
  setenv("CUDA_VISIBLE_DEVICES", "GPU-24b36e4e", 1);
  ACX_ASSERT_STATUS(choose(t, 0, 1, NULL, NULL, NULL, -1, &b), ACX_OK);
  CU_ASSERT_STRING_EQUAL(b.pci_bus_id, "0000:3b:00.0");
  unsetenv("CUDA_VISIBLE_DEVICES");
  acx_topo_destroy(t);
}

static void test_bad_arguments(void) {
  acx_topo_t *t = NULL;
  ACX_ASSERT_STATUS(acx_topo_create(ACX_TOPO_DATA_DIR "/no-such-topology.xml", &t), ACX_ERR_SYSTEM);
  CU_ASSERT_PTR_NULL(t);
  ACX_ASSERT_STATUS(acx_topo_create(NULL, NULL), ACX_ERR_NULL_ARG);
  t = load(TWO_SOCKET);
  acx_topo_binding_t b;
  ACX_ASSERT_STATUS(choose(t, 4, 4, NULL, NULL, NULL, -1, &b), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(choose(t, -1, 4, NULL, NULL, NULL, -1, &b), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(choose(t, 0, 1, NULL, "zero-to-three", NULL, -1, &b), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(choose(t, 0, 1, NULL, "200-300", NULL, -1, &b), ACX_ERR_INVALID_ARG); /* no such cores */
  const char *peers[2] = {SOCK0, "bogus"};
  ACX_ASSERT_STATUS(choose(t, 1, 2, NULL, NULL, peers, -1, &b), ACX_ERR_INVALID_ARG);
  acx_topo_request_t req = ACX_TOPO_REQUEST_INIT;
  req.size = 8;
  ACX_ASSERT_STATUS(acx_topo_choose(t, &req, &b), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_topo_choose(t, NULL, &b), ACX_ERR_NULL_ARG);
  char small[2];
  int bound;
  ACX_ASSERT_STATUS(acx_topo_process_cpuset(t, small, sizeof small, &bound), ACX_ERR_OVERFLOW);
  acx_topo_destroy(t);
  acx_topo_destroy(NULL);
}

static void test_hwloc_xmlfile_env(void) {
  setenv("HWLOC_XMLFILE", TWO_SOCKET, 1);
  acx_topo_t *t = load(NULL);
  unsetenv("HWLOC_XMLFILE");
  int n = -1;
  ACX_ASSERT_STATUS(acx_topo_gpu_count(t, &n), ACX_OK);
  CU_ASSERT_EQUAL(n, 4);
  /* A recorded topology is another machine: the process is reported unbound. */
  char buf[ACX_TOPO_CPUSET_STRLEN];
  int bound = -1;
  ACX_ASSERT_STATUS(acx_topo_process_cpuset(t, buf, sizeof buf, &bound), ACX_OK);
  CU_ASSERT_STRING_EQUAL(buf, "0-63");
  CU_ASSERT_EQUAL(bound, 0);
  acx_topo_destroy(t);
}

/* This machine: the process mask as the launcher (here sched_setaffinity) left it, and binding. */
static void test_this_machine_binding(void) {
  acx_topo_t *t = load(NULL);
  cpu_set_t saved;
  CU_ASSERT_EQUAL_FATAL(sched_getaffinity(0, sizeof saved, &saved), 0);
  char buf[ACX_TOPO_CPUSET_STRLEN];
  int bound = -1;
  ACX_ASSERT_STATUS(acx_topo_process_cpuset(t, buf, sizeof buf, &bound), ACX_OK);
  printf("\n  this machine: process cpuset %s%s\n", buf, bound ? " (bound)" : "");
  int first = -1;
  for (int i = 0; i < CPU_SETSIZE && first < 0; i++)
    if (CPU_ISSET(i, &saved)) first = i;
  CU_ASSERT_FATAL(first >= 0);
  char one[16];
  snprintf(one, sizeof one, "%d", first);

  ACX_ASSERT_STATUS(acx_topo_bind_thread(one), ACX_OK);
  cpu_set_t now;
  CU_ASSERT_EQUAL(sched_getaffinity(0, sizeof now, &now), 0);
  CU_ASSERT_EQUAL(CPU_COUNT(&now), 1);
  CU_ASSERT(CPU_ISSET(first, &now));
  if (CPU_COUNT(&saved) > 1) { /* a launcher-bound process is seen as bound */
    ACX_ASSERT_STATUS(acx_topo_process_cpuset(t, buf, sizeof buf, &bound), ACX_OK);
    CU_ASSERT_STRING_EQUAL(buf, one);
    CU_ASSERT_EQUAL(bound, 1);
    int ngpu = 0;
    ACX_ASSERT_STATUS(acx_topo_gpu_count(t, &ngpu), ACX_OK);
    acx_topo_binding_t b;
    ACX_ASSERT_STATUS(choose(t, 0, 1, "", NULL, NULL, -1, &b), ACX_OK);
    CU_ASSERT_STRING_EQUAL(b.cpuset, one);
    CU_ASSERT_EQUAL(b.launcher_bound, 1);
  }
  ACX_ASSERT_STATUS(acx_topo_bind_thread(""), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_topo_bind_thread("0-"), ACX_ERR_INVALID_ARG);
  ACX_ASSERT_STATUS(acx_topo_bind_thread("100000"), ACX_ERR_SYSTEM);
  ACX_ASSERT_STATUS(acx_topo_bind_thread(NULL), ACX_ERR_NULL_ARG);
  CU_ASSERT_EQUAL(sched_setaffinity(0, sizeof saved, &saved), 0);
  acx_topo_destroy(t);
}

static void test_print_binding_map(void) {
  acx_topo_t *t = load(TWO_SOCKET);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  setenv("CUDA_VISIBLE_DEVICES", "3,2", 1);
  ACX_ASSERT_STATUS(acx_topo_print(t, 2, f), ACX_OK);
  unsetenv("CUDA_VISIBLE_DEVICES");
  fclose(f);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "cuda0=GPU3 cuda1=GPU2"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "local rank 0: GPU 0 (0000:af:00.0, NUMA 1) cpuset 16-31,48-63"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "local rank 1: GPU 1 (0000:86:00.0, NUMA 1)"));
  CU_ASSERT_PTR_NULL(strstr(text, "local rank 2"));
  free(text);
  ACX_ASSERT_STATUS(acx_topo_print(t, 1, NULL), ACX_ERR_NULL_ARG);
  acx_topo_destroy(t);
}

int main(void) {
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("HWLOC_XMLFILE");
  static const acx_test_case_t cases[] = {
      ACX_TEST(test_gpu_host_recorded),  ACX_TEST(test_two_socket_pci_order_and_locality),
      ACX_TEST(test_two_socket_launcher_masks), ACX_TEST(test_cuda_visible_devices),
      ACX_TEST(test_bad_arguments),      ACX_TEST(test_hwloc_xmlfile_env),
      ACX_TEST(test_this_machine_binding), ACX_TEST(test_print_binding_map), ACX_TEST_END};
  return acx_test_run("topo", cases, NULL, NULL);
}
