#!/usr/bin/env python3
"""QGA benchmark: guestlinkd vs qemu-ga side by side, same method as docs/protocol/qga.md#qemu-ga-performance.

Every phase starts a fresh agent (`-m unix-listen`, private statedir, dangerous RPCs blocked), connects and sends
0xFF + guest-sync-delimited. Phases:

* ping  — 200 warm-up + 2000 sequential guest-ping on one connection, RTT with perf_counter_ns (median, p99) from
          the request's bytes out to the reply's line in (the client's JSON work is not timed);
* read  — guest-file-open + guest-file-read(count=C) until eof + close on a 64 MiB random file (page cache warm),
          for C = 4 KiB, 1 MiB and 48 MiB; the client base64-decodes and SHA-256-verifies; wall time open→close;
* read-48M-pinned — the 48 MiB read with the agent pinned to CPU 0 and this client to CPU 1 (`sched_setaffinity`,
          as `taskset` does; the host's reader does not share the guest's CPU in a VM): the agent CPU of this phase
          is its own cost, not spinning on EAGAIN while the reader waits for the CPU it holds;
* ping-same-cpu, ping-cross-cpu — the ping phase with the agent and this client both on CPU 0, then the agent on
          CPU 0 and the client on CPU 1. On a VM whose idle vCPUs halt, waking a process on the other CPU can
          cost more than the request itself (~50 µs on the 2026-12-04 machine), so the unpinned RTT depends on where
          the scheduler puts the two; same-CPU shows the agent's own cost, cross-CPU the wake-up path. Each ping
          phase also reports the agent's CPU per ping (all its threads' `se.sum_exec_runtime` from
          /proc/PID/task/*/sched around the 2000 timed pings; the row is left out on a kernel without it);
* idle  — the agent started the same way, no client ever connects; VmRSS 10 s after the start (and the
          smaps_rollup split: anonymous vs file-backed);
* null  — a third agent in the ping phases only: `null_qga.rs` (built with `rustc -O`), one blocking thread that
          answers guest-ping and guest-sync-delimited with one read(2) and one write(2) each. Its RTT is the floor
          any agent reaches on this machine (the kernel's wake-ups and this client), so its ratio to qemu-ga says
          how low the guestlinkd/qemu-ga ratio can go at all;
* footprint — not a run of the agents: the server package's Installed-Size plus what its dependencies add to a
          Debian minbase, against qemu-guest-agent's (`footprint.py` beside this script). The package is --deb
          (default: the newest target/debian/guestlinkd_*_amd64.deb, from packaging/build-debs); unless GUESTLINKD
          is set, every other phase then runs the guestlinkd of that package, so one run measures what a server
          guest installs;
* agent peak RSS (VmHWM from /proc/PID/status, fresh agent per phase so it is the phase's peak) and agent CPU
  seconds (utime+stime from /proc/PID/stat) per phase.

Each phase runs --reps times per agent (agents interleaved) and medians are reported. Python stdlib only:

    packaging/build-debs         # the server package: the footprint phase's, and the guestlinkd the others run
    .venv/bin/python bench/qga/run.py [--reps 3] [--json out.json] [--agents qemu-ga,guestlinkd,null] [--idle-secs 10]
        [--phases ping,ping-same-cpu,ping-cross-cpu,read-4K,read-1M,read-48M,read-48M-pinned,idle,footprint]
        [--smaps] [--deb target/debian/guestlinkd_<v>_amd64.deb]

`GUESTLINKD=/path` overrides the binary (default: the package's with the footprint phase, otherwise
target/release/guestlinkd, built when missing or stale: `--phases` without footprint needs no package).
"""

import argparse
import base64
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import footprint

WORKSPACE = Path(__file__).resolve().parents[2]
# The suite's one block list (tests/qemu-ga-blocked-rpcs.txt): one name per line, '#' comments.
DANGEROUS = ",".join(
    n for n in (l.split("#", 1)[0].strip() for l in (WORKSPACE / "tests/qemu-ga-blocked-rpcs.txt").read_text().splitlines()) if n
)
FILE_SIZE = 64 * 1024 * 1024
COUNTS = [("4K", 4096), ("1M", 1024 * 1024), ("48M", 48 * 1024 * 1024)]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def qemu_ga_path():
    for p in ("/usr/sbin/qemu-ga", "/usr/bin/qemu-ga"):
        if os.path.exists(p):
            return p
    sys.exit("qemu-ga is not installed (apt-get install qemu-guest-agent)")


def guestlinkd_path():
    if os.environ.get("GUESTLINKD"):
        return os.environ["GUESTLINKD"]
    subprocess.run(["cargo", "build", "--release", "-p", "guest-daemon", "--bin", "guestlinkd"],
                   cwd=WORKSPACE, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", WORKSPACE / "target"))
    return str(target / "release" / "guestlinkd")


def server_deb(given):
    """The server package for the footprint phase: `given`, or the newest one packaging/build-debs made."""
    if given:
        return given
    debs = sorted((WORKSPACE / "target/debian").glob("guestlinkd_*_amd64.deb"), key=lambda p: p.stat().st_mtime)
    if not debs:
        sys.exit("the footprint phase needs the server package: run packaging/build-debs (or pass --deb)")
    return str(debs[-1])


def deb_guestlinkd(deb, workdir):
    """Unpacks `deb` into `workdir` and returns the path of its guestlinkd."""
    root = os.path.join(workdir, "deb")
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    return os.path.join(root, "usr/sbin/guestlinkd")


def null_qga_path(workdir):
    """Builds the null agent (std only) into `workdir`."""
    out = os.path.join(workdir, "null-qga")
    subprocess.run(["rustc", "--edition", "2021", "-O", str(WORKSPACE / "bench/qga/null_qga.rs"), "-o", out],
                   check=True)
    return out


def pin_self(cpu):
    """Pins the calling process to `cpu`, or does nothing with None; returns the previous CPU set."""
    before = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    return before


class Agent:
    def __init__(self, kind, binary, pin=None, connect=True):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="guestlink-bench-")
        self.sock_path = os.path.join(self.dir, "qga.sock")
        state = os.path.join(self.dir, "state")
        os.mkdir(state)
        conf = os.path.join(self.dir, "qemu-ga.conf")
        Path(conf).write_text("[general]\n")
        args = [binary, "-m", "unix-listen", "-p", self.sock_path, "-t", state, "-b", DANGEROUS]
        if kind == "guestlinkd":
            args += ["-c", conf]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=self.dir, env=dict(os.environ, QGA_CONF=conf),
                                     preexec_fn=None if pin is None else (lambda: pin_self(pin)))
        self.sock = self.rfile = None
        if not connect:
            return
        deadline = time.monotonic() + 10
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(self.sock_path)
                break
            except OSError:
                self.sock.close()
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} did not start")
                time.sleep(0.02)
        self.sock.settimeout(300)
        self.rfile = self.sock.makefile("rb", buffering=1 << 20)
        self.sync()

    def send(self, obj):
        self.sock.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def recv(self):
        line = self.rfile.readline()
        if not line:
            raise RuntimeError(f"{self.kind} closed the connection")
        return json.loads(line)

    def call(self, execute, arguments=None):
        req = {"execute": execute}
        if arguments is not None:
            req["arguments"] = arguments
        self.send(req)
        r = self.recv()
        if "error" in r:
            raise RuntimeError(f"{self.kind}: {execute}: {r['error']}")
        return r["return"]

    def sync(self):
        sync_id = random.randrange(1, 2**31)
        self.sock.sendall(b"\xff" + json.dumps({"execute": "guest-sync-delimited", "arguments": {"id": sync_id}})
                          .encode() + b"\n")
        while True:
            b = self.rfile.read(1)
            if not b:
                raise RuntimeError("EOF before 0xFF")
            if b == b"\xff":
                break
        assert self.recv() == {"return": sync_id}

    def status(self, key):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])  # kB
        return 0

    def cpu_seconds(self):
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def exec_ns(self):
        """CPU time of all the agent's threads in ns (`se.sum_exec_runtime` of /proc/PID/task/*/sched, printed in ms
        with ns precision), or None without CONFIG_SCHED_DEBUG. /proc/PID/stat's clock ticks (10 ms) are far too
        coarse for 2000 pings of a few µs each."""
        total = 0.0
        try:
            for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
                for line in (task / "sched").read_text().splitlines():
                    if line.startswith("se.sum_exec_runtime"):
                        total += float(line.split(":")[1])
        except OSError:
            return None
        return int(total * 1e6)

    def smaps_rollup(self):
        """kB per smaps_rollup key (Rss, Anonymous, ...)."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/smaps_rollup").read_text().splitlines()[1:]:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0])
        return out

    def smaps_by_mapping(self):
        """kB of Rss per mapped file (and [heap], [stack], anonymous), largest first."""
        out, name = {}, None
        for line in Path(f"/proc/{self.proc.pid}/smaps").read_text().splitlines():
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                name = os.path.basename(head[5]) if len(head) > 5 else "[anonymous]"
                if len(head) > 5:
                    name += f" ({head[1]})"
            elif head[0] == "Rss:":
                out[name] = out.get(name, 0) + int(head[1])
        return dict(sorted(((k, v) for k, v in out.items() if v), key=lambda kv: -kv[1]))

    def stop(self):
        if self.rfile is not None:
            self.rfile.close()
            self.sock.close()
        time.sleep(0.2)  # qemu-ga's SIGTERM-after-disconnect deadlock (docs/protocol/qga.md#qemu-ga-sigterm-deadlock)
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = "killed"
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def phase_ping(agent):
    for _ in range(200):
        agent.call("guest-ping")
    # Timed: the request's bytes out to the reply's line in. The client's JSON encoding and decoding stay outside
    # the timed window (before 2026-12-04 they were inside, adding the same ~5 µs of Python to both agents).
    req = json.dumps({"execute": "guest-ping"}, separators=(",", ":")).encode() + b"\n"
    rtts = []
    cpu0 = agent.exec_ns()
    for _ in range(2000):
        t0 = time.perf_counter_ns()
        agent.sock.sendall(req)
        line = agent.rfile.readline()
        rtts.append(time.perf_counter_ns() - t0)
        assert json.loads(line) == {"return": {}}, line
    cpu1 = agent.exec_ns()
    rtts.sort()
    res = {"ping_median_us": statistics.median(rtts) / 1000, "ping_p99_us": rtts[int(len(rtts) * 0.99) - 1] / 1000}
    if cpu0 is not None and cpu1 is not None:
        # The agent's own CPU per request, whichever CPU it ran on: what the RTT cannot separate from the kernel's
        # wake-ups and the client.
        res["cpu_per_ping_us"] = (cpu1 - cpu0) / 2000 / 1000
    return res


def phase_read(agent, path, count, digest):
    t0 = time.perf_counter()
    h = agent.call("guest-file-open", {"path": path, "mode": "r"})
    sha = hashlib.sha256()
    total = 0
    while True:
        r = agent.call("guest-file-read", {"handle": h, "count": count})
        data = base64.b64decode(r["buf-b64"])
        assert len(data) == r["count"]
        sha.update(data)
        total += len(data)
        if r["eof"]:
            break
    agent.call("guest-file-close", {"handle": h})
    wall = time.perf_counter() - t0
    assert total == FILE_SIZE and sha.hexdigest() == digest, "content mismatch"
    return {"mb_s": FILE_SIZE / 1e6 / wall}


def phase_idle(kind, binary, secs, smaps=False):
    """Starts the agent, never connects, reads its memory `secs` after the start (with `smaps`, per mapping)."""
    agent = Agent(kind, binary, connect=False)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(agent.sock_path):
            if agent.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} did not start")
            time.sleep(0.02)
        time.sleep(max(0.0, agent.started + secs - time.monotonic()))
        roll = agent.smaps_rollup()
        res = {"idle_rss_kb": agent.status("VmRSS"), "idle_anon_kb": roll.get("Anonymous", 0),
               "idle_file_kb": roll.get("Rss", 0) - roll.get("Anonymous", 0), "threads": agent.status("Threads"),
               "cpu_s": agent.cpu_seconds()}
        if smaps:
            res["smaps_kb"] = agent.smaps_by_mapping()
    finally:
        res["exit"] = agent.stop()
    return res


# CPUs (agent, client) per pinned phase; other phases run unpinned.
PINS = {"read-48M-pinned": (0, 1), "ping-same-cpu": (0, 0), "ping-cross-cpu": (0, 1)}


def run_phase(kind, binary, name, fn):
    agent_cpu, client_cpu = PINS.get(name, (None, None))
    agent = Agent(kind, binary, pin=agent_cpu)
    before = pin_self(client_cpu)
    try:
        idle_hwm = agent.status("VmHWM")
        cpu0 = agent.cpu_seconds()
        res = fn(agent)
        res["cpu_s"] = agent.cpu_seconds() - cpu0
        res["hwm_kb"] = agent.status("VmHWM")
        res["idle_hwm_kb"] = idle_hwm
    finally:
        os.sched_setaffinity(0, before)
        res_rc = agent.stop()
    res["exit"] = res_rc
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--agents", default="qemu-ga,guestlinkd,null",
                    help="comma-separated, qemu-ga first for the ratio columns; null runs the ping phases only")
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("--idle-secs", type=float, default=10.0, help="idle phase: read VmRSS this long after start")
    ap.add_argument("--smaps", action="store_true", help="idle phase: also print Rss per mapping (/proc/PID/smaps)")
    ap.add_argument("--phases", help="comma-separated subset of: ping,ping-same-cpu,ping-cross-cpu,read-4K,read-1M,"
                    "read-48M,read-48M-pinned,idle,footprint")
    ap.add_argument("--deb", help="footprint phase: the server package (default: the newest in target/debian)")
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        sys.exit("the pinned phase needs CPUs 0 and 1")
    kinds = args.agents.split(",")
    if set(kinds) - {"qemu-ga", "guestlinkd", "null"}:
        sys.exit(f"unknown agents: {sorted(set(kinds) - {'qemu-ga', 'guestlinkd', 'null'})}")
    # The read phases' file (`path`, `digest`) is made in the work dir below, before any phase runs.
    phases = [("ping", phase_ping), ("ping-same-cpu", phase_ping), ("ping-cross-cpu", phase_ping)] + [
        (f"read-{label}", (lambda c: lambda a: phase_read(a, path, c, digest))(count)) for label, count in COUNTS
    ] + [("read-48M-pinned", lambda a: phase_read(a, path, 48 << 20, digest)), ("idle", None)]
    names = [p for p, _ in phases] + ["footprint"]
    wanted = args.phases.split(",") if args.phases else names
    if set(wanted) - set(names):
        sys.exit(f"unknown phases: {sorted(set(wanted) - set(names))}")
    phases = [p for p in phases if p[0] in wanted]
    deb = server_deb(args.deb) if "footprint" in wanted else None

    tmp = tempfile.mkdtemp(prefix="guestlink-bench-data-")
    try:
        builders = {"qemu-ga": qemu_ga_path, "null": lambda: null_qga_path(tmp),
                    "guestlinkd": (lambda: deb_guestlinkd(deb, tmp)) if deb and not os.environ.get("GUESTLINKD")
                    else guestlinkd_path}
        binaries = {k: builders[k]() for k in kinds}
        raw = {k: {p: [] for p, _ in phases} for k in kinds}
        if deb:
            ours, ref = footprint.measure(deb)
            print(f"footprint: {footprint.describe(ours)}\nfootprint: {footprint.describe(ref)}", file=sys.stderr)
            for kind, fp in (("guestlinkd", ours), ("qemu-ga", ref)):
                if kind in raw:
                    raw[kind]["footprint"] = [fp]
        path = os.path.join(tmp, "random-64M")
        with open(path, "wb") as f:
            f.write(os.urandom(FILE_SIZE))
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        for rep in range(args.reps):
            for pname, fn in phases:
                for kind in kinds:
                    if kind == "null" and not pname.startswith("ping"):
                        continue
                    if pname == "idle":
                        res = phase_idle(kind, binaries[kind], args.idle_secs, args.smaps)
                    else:
                        res = run_phase(kind, binaries[kind], pname, fn)
                    raw[kind][pname].append(res)
                    print(f"rep {rep + 1} {pname:9} {kind:10} {res}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(kind, phase, key):
        return statistics.median(r[key] for r in raw[kind][phase])

    rows = [
        ("server package + what it adds to a Debian minbase (kB)", "footprint", "footprint_kb", "≤ 1×",
         lambda r: r <= 1.0),
        ("guest-ping median RTT (µs)", "ping", "ping_median_us", "≤ 0.6×", lambda r: r <= 0.6),
        ("guest-ping p99 RTT (µs)", "ping", "ping_p99_us", "", None),
        ("idle VmHWM (kB)", "ping", "idle_hwm_kb", "", None),
        ("guest-ping median RTT, agent and client on CPU 0 (µs)", "ping-same-cpu", "ping_median_us", "", None),
        ("guest-ping median RTT, agent on CPU 0, client on CPU 1 (µs)", "ping-cross-cpu", "ping_median_us", "", None),
        ("agent CPU per guest-ping, unpinned (µs)", "ping", "cpu_per_ping_us", "", None),
        ("agent CPU per guest-ping, agent and client on CPU 0 (µs)", "ping-same-cpu", "cpu_per_ping_us", "", None),
    ]
    for label, _ in COUNTS:
        target = ("≥ 2×", lambda r: r >= 2.0) if label == "48M" else ("", None)
        rows.append((f"read 64 MiB, count {label} (MB/s)", f"read-{label}", "mb_s", *target))
    for label, _ in COUNTS:
        target = ("≤ 0.45×", lambda r: r <= 0.45) if label == "48M" else ("", None)
        rows.append((f"peak VmHWM, count {label} (kB)", f"read-{label}", "hwm_kb", *target))
    rows.append(("read 64 MiB, count 48M, pinned (MB/s)", "read-48M-pinned", "mb_s", "", None))
    rows.append(("peak VmHWM, count 48M, pinned (kB)", "read-48M-pinned", "hwm_kb", "", None))
    for label, _ in COUNTS:
        rows.append((f"agent CPU s per 64 MiB, count {label}", f"read-{label}", "cpu_s", "", None))
    rows.append(("agent CPU s per 64 MiB, count 48M, **pinned**", "read-48M-pinned", "cpu_s", "≤ 0.25×",
                 lambda r: r <= 0.25))
    secs = f"{args.idle_secs:g} s"
    rows += [
        (f"idle VmRSS {secs} after start, no client (kB)", "idle", "idle_rss_kb", "≤ 1×", lambda r: r <= 1.0),
        ("  of which anonymous (kB)", "idle", "idle_anon_kb", "", None),
        ("  of which file-backed (kB)", "idle", "idle_file_kb", "", None),
        ("  threads", "idle", "threads", "", None),
    ]

    print(f"\nQGA benchmark — {platform.node()}, {os.cpu_count()} CPUs, kernel {platform.release()}, "
          f"{args.reps} reps (medians), agents: " + ", ".join(f"{k}={binaries[k]}" for k in kinds)
          + (f"; server package: {deb}" if deb else ""))
    # Ratio columns: every other agent against the first (qemu-ga); the target's verdict is guestlinkd's.
    base, others = kinds[0], kinds[1:]
    header = "| metric | " + " | ".join(kinds) + "".join(f" | {k}/{base}" for k in others) + " | target |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for title, phase, key, target, check in rows:
        if not raw[base].get(phase) or any(key not in r for r in raw[base][phase]):
            continue
        have = {k for k in kinds if raw[k].get(phase) and all(key in r for r in raw[k][phase])}
        vals = {k: med(k, phase, key) for k in have}
        fmt = "{:,.2f}" if key == "cpu_s" else "{:,.1f}"
        cells = [(fmt.format(vals[k]) if isinstance(vals[k], float) else f"{vals[k]:,}") if k in have else "—"
                 for k in kinds]
        line = f"| {title} | " + " | ".join(cells)
        verdict = ""
        for k in others:
            ratio = vals[k] / vals[base] if k in have and vals[base] else None
            line += " | —" if ratio is None else f" | {ratio:.2f}×"
            if k == "guestlinkd" and check is not None and ratio is not None:
                verdict = " ✅" if check(ratio) else " ❌"
        print(line + f" | {target}{verdict} |")
    exits = {k: sorted({str(r['exit']) for p in raw[k].values() for r in p if 'exit' in r}) for k in kinds}
    print(f"\nexit statuses after SIGTERM: {exits}")
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
