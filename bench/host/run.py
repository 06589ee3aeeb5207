#!/usr/bin/env python3
"""Host file-transfer benchmark: `guestlink file pull/push` vs a naive client that moves 4 KiB per
guest-file-read / guest-file-write call (what qemu-ga-client-style tools do), against the same agent in the
same run.

The agent is started here on a private unix socket with a private statedir and the team's dangerous-RPC block
list, and stopped by its PID. Default agent: Debian's qemu-ga; `--agent PATH` runs another binary with the same
command line (e.g. target/release/guestlinkd).

Usage: python3 bench/host/run.py [--guestlink target/release/guestlink] [--agent /usr/sbin/qemu-ga]
                                 [--size-mib 64] [--repeat 5] [--json]
"""

import argparse
import base64
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The suite's one block list (tests/qemu-ga-blocked-rpcs.txt): one name per line, '#' comments.
BLOCK = ",".join(
    n for n in (l.split("#", 1)[0].strip()
                for l in (Path(__file__).resolve().parents[2] / "tests/qemu-ga-blocked-rpcs.txt").read_text().splitlines())
    if n
)
NAIVE_CHUNK = 4096


class Naive:
    """Minimal QGA client: one request, one reply, 4 KiB per file call."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.buf = b""
        self.s.sendall(b'\xff{"execute":"guest-sync-delimited","arguments":{"id":1234}}\n')
        while b"\xff" not in self.buf:
            self.buf += self.s.recv(65536)
        self.buf = self.buf.split(b"\xff", 1)[1]
        assert self.line()["return"] == 1234

    def line(self):
        while b"\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError("agent closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, execute, **args):
        self.s.sendall(json.dumps({"execute": execute, "arguments": args}).encode() + b"\n")
        reply = self.line()
        if "error" in reply:
            raise RuntimeError(f"{execute}: {reply['error']}")
        return reply["return"]

    def pull(self, guest, host):
        h = self.call("guest-file-open", path=guest, mode="rb")
        with open(host, "wb") as out:
            while True:
                r = self.call("guest-file-read", handle=h, count=NAIVE_CHUNK)
                out.write(base64.b64decode(r["buf-b64"]))
                if r["eof"] or r["count"] == 0:
                    break
        self.call("guest-file-close", handle=h)

    def push(self, host, guest):
        h = self.call("guest-file-open", path=guest, mode="wb")
        with open(host, "rb") as f:
            while True:
                data = f.read(NAIVE_CHUNK)
                if not data:
                    break
                self.call("guest-file-write", handle=h, **{"buf-b64": base64.b64encode(data).decode()})
        self.call("guest-file-close", handle=h)

    def close(self):
        self.s.close()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def start_agent(binary, workdir):
    sock = os.path.join(workdir, "qga.sock")
    state = os.path.join(workdir, "state")
    os.makedirs(state, exist_ok=True)
    proc = subprocess.Popen([binary, "-m", "unix-listen", "-p", sock, "-t", state, "-b", BLOCK],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(workdir, "agent.log"), "wb"))
    deadline = time.time() + 20
    while time.time() < deadline:
        if os.path.exists(sock):
            try:
                Naive(sock).close()
                return proc, sock
            except OSError:
                pass
        if proc.poll() is not None:
            sys.exit(f"agent exited with {proc.returncode}")
        time.sleep(0.05)
    proc.kill()
    sys.exit("agent did not answer within 20 s")


def stop_agent(proc):
    time.sleep(0.2)  # qemu-ga's SIGTERM-after-disconnect deadlock (docs/protocol/qga.md#qemu-ga-sigterm-deadlock)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--guestlink", default=os.path.join(root, "target", "release", "guestlink"))
    ap.add_argument("--agent", default="/usr/sbin/qemu-ga")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON")
    a = ap.parse_args()
    if not os.access(a.guestlink, os.X_OK):
        sys.exit(f"{a.guestlink} missing: cargo build --release -p host")

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="guestlink-bench-") as d:
        proc, sock = start_agent(a.agent, d)
        try:
            src = os.path.join(d, "src.bin")
            with open(src, "wb") as f:
                for _ in range(a.size_mib):
                    f.write(os.urandom(1 << 20))
            want = sha256(src)
            size = a.size_mib << 20
            gl = [a.guestlink, "--socket", sock, "--quiet"]
            results = {k: [] for k in ("guestlink pull", "guestlink push", "naive 4 KiB pull", "naive 4 KiB push")}
            for i in range(a.repeat):
                guest = os.path.join(d, f"guest-{i}.bin")
                back = os.path.join(d, f"back-{i}.bin")
                results["guestlink push"].append(timed(lambda: subprocess.run(gl + ["file", "push", src, guest], check=True)))
                assert sha256(guest) == want
                results["guestlink pull"].append(timed(lambda: subprocess.run(gl + ["file", "pull", guest, back], check=True)))
                assert sha256(back) == want
                os.unlink(back)
                n = Naive(sock)
                nguest = os.path.join(d, f"nguest-{i}.bin")
                results["naive 4 KiB push"].append(timed(lambda: n.push(src, nguest)))
                results["naive 4 KiB pull"].append(timed(lambda: n.pull(nguest, back)))
                n.close()
                assert sha256(nguest) == want and sha256(back) == want
                for p in (guest, back, nguest):
                    os.unlink(p)
        finally:
            stop_agent(proc)

    agent_version = subprocess.run([a.agent, "-V"], capture_output=True, text=True).stdout.strip().splitlines()
    rows = []
    for name, times in results.items():
        med = statistics.median(times)
        rows.append({"case": name, "median_s": round(med, 3), "mb_per_s": round(size / med / 1e6, 1),
                     "runs_s": [round(t, 3) for t in times]})
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)"
    if a.json:
        print(json.dumps({"size_bytes": size, "agent": a.agent, "load": load, "results": rows}, indent=2))
        return
    print(f"agent: {a.agent} ({agent_version[0] if agent_version else '?'}); file: {a.size_mib} MiB random; "
          f"median of {a.repeat}; MB = 10^6 bytes; {load}")
    print("| case | median s | MB/s | runs (s) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['median_s']} | {r['mb_per_s']} | {', '.join(map(str, r['runs_s']))} |")


if __name__ == "__main__":
    main()
