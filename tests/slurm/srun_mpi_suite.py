#!/usr/bin/env python3
"""Runs every ctest test labelled `mpi` of a build through Slurm instead of mpiexec, and those
labelled `gpu-mpi` too where this machine has a GPU (without one they would only start and skip).

A test launched as `mpiexec -n N [launcher options] program args` becomes
`srun --mpi=<plugin> --overcommit -n N program args` (environment from the test's ENVIRONMENT
property and mpiexec's `-x NAME=VALUE`); any other command runs as it is inside `salloc`, so an
mpirun it starts goes through Slurm. The verdict follows ctest's rules (SKIP_RETURN_CODE,
PASS/FAIL/SKIP_REGULAR_EXPRESSION, WILL_FAIL). Prints one line per test and exits non-zero when
any test failed.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

LAUNCHERS = {"mpiexec", "mpirun", "orterun", "mpiexec.openmpi", "mpirun.openmpi",
             "mpiexec.hydra", "mpirun.mpich", "mpiexec.mpich"}
NP_FLAGS = {"-n", "-np", "--np", "-c", "--n"}
SKIP_CODE = 77
# ctest's regular expressions (KWSys) let '.' match a newline and anchor ^ $ to the whole output.
CTEST_RE = re.DOTALL


def load_tests(build, label, exclude_label):
    out = subprocess.run(["ctest", "--test-dir", build, "-L", label, "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
    tests = []
    for t in json.loads(out).get("tests", []):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels = props.get("LABELS", [])
        if exclude_label in labels or "command" not in t:
            continue
        tests.append({"name": t["name"], "command": t["command"],
                      "timeout": float(props.get("TIMEOUT", 120)),
                      "env": props.get("ENVIRONMENT", []),
                      "cwd": props.get("WORKING_DIRECTORY", build),
                      "skip_code": int(props.get("SKIP_RETURN_CODE", SKIP_CODE)),
                      "pass_re": props.get("PASS_REGULAR_EXPRESSION", []),
                      "fail_re": props.get("FAIL_REGULAR_EXPRESSION", []),
                      "skip_re": props.get("SKIP_REGULAR_EXPRESSION", []),
                      "will_fail": bool(props.get("WILL_FAIL", False))})
    return tests


def have_gpu():
    """Whether an NVIDIA GPU is visible: a device node, or nvidia-smi listing one."""
    if os.path.exists("/dev/nvidia0"):
        return True
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return out.lstrip().startswith("GPU")


def translate(cmd):
    """(ntasks, program argv, extra env) for an mpiexec command line, or None for other commands."""
    if os.path.basename(cmd[0]) not in LAUNCHERS:
        return None
    ntasks, env, i = 1, {}, 1
    while i < len(cmd):
        a = cmd[i]
        if a in NP_FLAGS and i + 1 < len(cmd):
            ntasks = int(cmd[i + 1])
            i += 2
        elif a == "-x" and i + 1 < len(cmd):
            name, sep, value = cmd[i + 1].partition("=")
            if sep:
                env[name] = value
            i += 2
        elif not a.startswith("-") and os.path.isfile(a) and os.access(a, os.X_OK):
            return ntasks, cmd[i:], env
        else:
            i += 1  # a launcher option (--oversubscribe, --bind-to none...): Slurm places tasks itself
    raise ValueError("no program found in launcher command: %s" % " ".join(cmd))


def verdict(t, rc, out):
    """ctest's rules: skip code or skip regex, else the pass regex (exit code ignored) or the exit
    code, then the fail regex, then WILL_FAIL inverts."""
    if rc == "timeout":
        return "FAILED (timeout)"
    if rc == t["skip_code"] or any(re.search(r, out, CTEST_RE) for r in t["skip_re"]):
        return "Skipped"
    ok = any(re.search(r, out, CTEST_RE) for r in t["pass_re"]) if t["pass_re"] else rc == 0
    if any(re.search(r, out, CTEST_RE) for r in t["fail_re"]):
        ok = False
    if t["will_fail"]:
        ok = not ok
    return "Passed" if ok else "FAILED (%s)" % rc


def run_one(t, args):
    env = dict(os.environ)
    for kv in t["env"]:
        name, _, value = kv.partition("=")
        env[name] = value
    minutes = max(1, int(t["timeout"] // 60) + 1)
    common = ["--overcommit", "--time=%d" % minutes, "--job-name=acx-" + t["name"]]
    tr = translate(t["command"])
    if tr is None:
        argv = ["salloc", "-n", str(args.alloc_tasks)] + common + ["--"] + t["command"]
        how = "salloc"
    else:
        ntasks, prog, extra = tr
        env.update(extra)
        argv = ["srun", "--mpi=" + args.mpi, "-n", str(ntasks), "--kill-on-bad-exit=1"] + common + prog
        how = "srun -n %d" % ntasks
    start = time.monotonic()
    p = subprocess.Popen(argv, cwd=t["cwd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=t["timeout"])
        rc = p.returncode
    except subprocess.TimeoutExpired:
        # srun forwards SIGINT/SIGTERM to the step; the job's time limit is the backstop.
        os.killpg(p.pid, signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        rc = "timeout"
    return how, rc, out, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", required=True)
    ap.add_argument("--mpi", default="pmix", help="srun --mpi plugin")
    ap.add_argument("--label", default=None,
                    help="ctest label regex (default: ^mpi$, and ^gpu-mpi$ too where a GPU is visible)")
    ap.add_argument("--exclude-label", default="slurm")
    ap.add_argument("--alloc-tasks", type=int, default=2, help="tasks of the salloc for non-mpiexec tests")
    args = ap.parse_args()
    why = ""
    if args.label is None:
        gpu = have_gpu()
        args.label = "^(gpu-)?mpi$" if gpu else "^mpi$"
        why = "" if gpu else " (no GPU here: the gpu-mpi tests are left out)"
    tests = load_tests(args.build, args.label, args.exclude_label)
    print("srun_mpi_suite: %d tests labelled %s%s" % (len(tests), args.label, why), flush=True)
    failed, skipped = [], []
    for t in tests:
        try:
            how, rc, out, secs = run_one(t, args)
        except ValueError as e:
            how, rc, out, secs = "-", "bad command", str(e), 0.0
        v = verdict(t, rc, out) if how != "-" else "FAILED (%s)" % rc
        if v == "Skipped":
            skipped.append(t["name"])
        elif v != "Passed":
            failed.append(t["name"])
        print("  %-40s %-14s %-12s %6.2fs" % (t["name"], how, v, secs), flush=True)
        if v.startswith("FAILED"):
            sys.stdout.write(out[-6000:])
    print("srun_mpi_suite: %d passed, %d skipped, %d failed%s" %
          (len(tests) - len(failed) - len(skipped), len(skipped), len(failed),
           (": " + " ".join(failed)) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
