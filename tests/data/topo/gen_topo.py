#!/usr/bin/env python3
"""Writes the recorded GPU-node topologies used by tests/topo (hwloc 2.x XML).

There is no GPU on the development machine, so these shapes are written from what lstopo shows
on such nodes; rerun after editing: python3 gen_topo.py (check with lstopo-no-graphics -i FILE).
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def bm(bits):
    """hwloc bitmap string: 32-bit hex words, most significant first."""
    v = 0
    for b in bits:
        v |= 1 << b
    words = []
    while True:
        words.append(v & 0xFFFFFFFF)
        v >>= 32
        if v == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


class W:
    def __init__(self):
        self.lines = []
        self.gp = 1

    def gpi(self):
        self.gp += 1
        return self.gp

    def add(self, depth, text):
        self.lines.append("  " * depth + text)


def sets(cpus, nodes):
    c, n = bm(cpus), bm(nodes)
    return 'cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"' % (c, c, n, n)


def pcidev(w, d, busid, cls, vendor, device, osdevs=()):
    if not osdevs:
        w.add(d, '<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s [%s:%s] [%s:%s] a1" '
              'pci_link_speed="31.507692"/>' % (w.gpi(), busid, cls, vendor, device, vendor, device))
        return
    w.add(d, '<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s [%s:%s] [%s:%s] a1" '
          'pci_link_speed="31.507692">' % (w.gpi(), busid, cls, vendor, device, vendor, device))
    for name, ostype, infos in osdevs:
        w.add(d + 1, '<object type="OSDev" gp_index="%d" name="%s" osdev_type="%d">' % (w.gpi(), name, ostype))
        for k, v in infos:
            w.add(d + 2, '<info name="%s" value="%s"/>' % (k, v))
        w.add(d + 1, "</object>")
    w.add(d, "</object>")


def gpu_osdevs(idx, uuid, model):
    # As hwloc's NVML (osdev_type 1 = GPU) and CUDA (5 = co-processor) backends record them.
    return [("nvml%d" % idx, 1, [("Backend", "NVML"), ("GPUVendor", "NVIDIA Corporation"),
                                 ("GPUModel", model), ("NVIDIASerial", "165224%07d" % idx),
                                 ("NVIDIAUUID", uuid)]),
            ("cuda%d" % idx, 5, [("CoProcType", "CUDA"), ("Backend", "CUDA"),
                                 ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", model)])]


def host_bridge(w, d, domain_bus, devices):
    """devices: list of (busid, cls, vendor, device, osdevs), each behind its own PCIe switch port."""
    lo, hi = domain_bus
    w.add(d, '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">'
          % (w.gpi(), lo, hi))
    for busid, cls, vendor, device, osdevs in devices:
        bus = int(busid.split(":")[1], 16)
        w.add(d + 1, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" bridge_pci="0000:[%02x-%02x]" '
              'pci_busid="0000:%02x:00.0" pci_type="0604 [1000:c030] [1000:a064] b0" pci_link_speed="31.507692">'
              % (w.gpi(), bus, bus, lo))
        pcidev(w, d + 2, busid, cls, vendor, device, osdevs)
        w.add(d + 1, "</object>")
    w.add(d, "</object>")


def package(w, d, pkg, cores, pus_of_core, node, mem, bridges):
    allpus = [p for c in cores for p in pus_of_core(c)]
    w.add(d, '<object type="Package" os_index="%d" %s gp_index="%d">' % (pkg, sets(allpus, [node]), w.gpi()))
    w.add(d + 1, '<info name="CPUVendor" value="GenuineIntel"/>')
    w.add(d + 1, '<info name="CPUModel" value="Intel(R) Xeon(R) Platinum 8480+"/>')
    w.add(d + 1, '<object type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="%d"/>'
          % (node, sets(allpus, [node]), w.gpi(), mem))
    for c in cores:
        pus = pus_of_core(c)
        w.add(d + 1, '<object type="Core" os_index="%d" %s gp_index="%d">' % (c, sets(pus, [node]), w.gpi()))
        for p in pus:
            w.add(d + 2, '<object type="PU" os_index="%d" %s gp_index="%d"/>' % (p, sets([p], [node]), w.gpi()))
        w.add(d + 1, "</object>")
    for b in bridges:
        host_bridge(w, d + 1, *b)
    w.add(d, "</object>")


def machine(path, allpus, nodes, hostname, body):
    w = W()
    w.add(0, '<?xml version="1.0" encoding="UTF-8"?>')
    w.add(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    w.add(0, '<topology version="2.0">')
    c, n = bm(allpus), bm(nodes)
    w.add(1, '<object type="Machine" os_index="0" cpuset="%s" complete_cpuset="%s" allowed_cpuset="%s" '
          'nodeset="%s" complete_nodeset="%s" allowed_nodeset="%s" gp_index="1">' % (c, c, c, n, n, n))
    for k, v in (("Backend", "Linux"), ("OSName", "Linux"), ("HostName", hostname),
                 ("Architecture", "x86_64"), ("hwlocVersion", "2.9.0")):
        w.add(2, '<info name="%s" value="%s"/>' % (k, v))
    body(w)
    w.add(1, "</object>")
    w.add(0, "</topology>")
    with open(os.path.join(HERE, path), "w") as f:
        f.write("\n".join(w.lines) + "\n")


H200 = ("0302", "10de", "2335")
NIC = ("0207", "15b3", "1021")   # ConnectX-7
NVSWITCH = ("0680", "10de", "22a3")  # NVIDIA, but not a GPU: must not be counted


def gpu(busid, idx=None, uuid=None):
    osd = gpu_osdevs(idx, uuid, "NVIDIA H200") if uuid else ()
    return (busid,) + H200 + (osd,)


# The GPU test host shape: one socket, 32 cores without SMT, one NUMA node, 2 x H200 behind their
# own host bridges, with the NVML and CUDA OS devices that hwloc records when the driver is there.
UUID0 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
UUID1 = "GPU-24b36e4e-8dca-1f55-5ca7-5ecbe5f2a0c1"
machine("h200x2-1socket.xml", range(32), [0], "gpuhost", lambda w: package(
    w, 2, 0, range(32), lambda c: [c], 0, 2 * 1024**4,
    [((0x3a, 0x3b), [gpu("0000:3b:00.0", 1, UUID1)]),   # listed first: PCI order must not depend on XML order
     ((0x18, 0x19), [gpu("0000:19:00.0", 0, UUID0)]),
     ((0x4a, 0x4b), [("0000:4b:00.0",) + NIC + ((),)])]))

# A two-socket node with 4 GPUs, 2 per socket, 16 cores x 2 hardware threads per socket
# (Linux numbering: socket 0 = PUs 0-15 and their siblings 32-47), recorded without NVML.
def two_socket(w):
    package(w, 2, 0, range(16), lambda c: [c, c + 32], 0, 512 * 1024**3,
            [((0x3a, 0x3b), [gpu("0000:3b:00.0")]),
             ((0x17, 0x18), [gpu("0000:18:00.0")]),
             ((0x06, 0x07), [("0000:07:00.0",) + NVSWITCH + ((),)]),
             ((0x5d, 0x5e), [("0000:5e:00.0",) + NIC + ((),)])])
    package(w, 2, 1, range(16, 32), lambda c: [c, c + 32], 1, 512 * 1024**3,
            [((0x85, 0x86), [gpu("0000:86:00.0")]),
             ((0xae, 0xaf), [gpu("0000:af:00.0")])])


machine("2socket-4gpu.xml", range(64), [0, 1], "gpunode", two_socket)
