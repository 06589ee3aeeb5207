#!/usr/bin/env python3
"""Host side of bench/spice-vm: runs the steps against each guest stack in turn and prints the ratios.

The guest is driven through its control port (org.guestlink.bench.0, guest/glbench running guest/glstack); the
SPICE port com.redhat.spice.0 is a unix-socket chardev of QEMU, and the host side of every step is the release
`guestlink --spice-socket` (the client side of vdagent on the raw port). Per repetition the stacks run in turn, in
an order that rotates from one repetition to the next; each step starts its stack afresh (not timed):

* file:     `guestlink send-file` of a 64 MiB random file, timed from spawn to exit (the CLI exits on the agent's
            SUCCESS status); the file in the guest's Downloads (tmpfs) is then checked (size, sha256), or for the
            null agents that store nothing (null, null-py) their log line;
* clip-h2g: `guestlink clipboard set` of 16 MiB of text; timed from spawn until the guest has it: `xclip -o` in the
            X session returns all of it (polled every 50 ms), or for the null agent its log says it got it;
* clip-g2h: an X client in the guest (xclip) owns 16 MiB of text (the null agent holds it itself); `guestlink
            clipboard get` timed from spawn to the last byte, retried (as bench/spice/run does) while empty.

No step asserts a time: the ratios and the targets of issue #17 are printed. Usage: see bench/spice-vm/run.
"""

import argparse
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time

FILE = 64 << 20
CLIP = 16 << 20
STEP_TIMEOUT = 600
PASTE_TIMEOUT = 150  # the guest's wait for a host->guest paste
COUNTING = ("null", "null-py")  # null agents that count a file without storing it (null-store stores it)


def log(msg):
    print(f"[drive {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Control:
    """The guest's control port: one command line in, its output and "@@RC=n@@" out."""

    def __init__(self, path, timeout):
        end = time.monotonic() + timeout
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX)
                self.s.connect(path)
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.5)
        self.buf = b""
        # The guest's service starts when udev sees the port; QEMU holds what we send until the guest opens it.
        # Probe rarely: every unanswered probe is answered later, and under TCG each takes seconds.
        while True:
            try:
                self.s.sendall(b"echo ready\n")
                if "ready" in self.reply(30):
                    break
            except (TimeoutError, socket.timeout):
                pass
            if time.monotonic() > end:
                raise RuntimeError("the guest's control port never answered")
        # Earlier probes may have been buffered and answered late: skip replies up to a unique one.
        nonce = f"sync-{os.getpid()}-{time.monotonic_ns()}"
        self.send(f"echo {nonce}")
        while nonce not in self.reply(60):
            pass
        self.s.settimeout(None)

    def send(self, cmd):
        self.s.sendall(cmd.encode() + b"\n")

    def reply(self, timeout=STEP_TIMEOUT):
        self.s.settimeout(timeout)
        try:
            while b"@@RC=" not in self.buf or not self.buf.split(b"@@RC=", 1)[1].count(b"\n"):
                d = self.s.recv(65536)
                if not d:
                    raise RuntimeError("control port closed")
                self.buf += d
        finally:
            self.s.settimeout(None)
        out, rest = self.buf.split(b"@@RC=", 1)
        rc, self.buf = rest.split(b"\n", 1)
        rc = int(rc.rstrip(b"@"))
        text = out.decode(errors="replace").strip()
        if rc != 0:
            raise RuntimeError(f"guest command failed ({rc}): {text}")
        return text

    def poll(self):
        """Whether the answer to the last command is in (then consumed); raises if the command failed."""
        self.s.setblocking(False)
        try:
            self.buf += self.s.recv(65536)
        except BlockingIOError:
            pass
        finally:
            self.s.setblocking(True)
        if b"@@RC=" in self.buf and b"\n" in self.buf.split(b"@@RC=", 1)[1]:
            self.reply()
            return True
        return False

    def run(self, cmd, timeout=STEP_TIMEOUT):
        self.send(cmd)
        return self.reply(timeout)


class Bench:
    """Transport (a): com.redhat.spice.0 on a unix-socket chardev, the host side is `guestlink --spice-socket`."""

    def __init__(self, a):
        self.a, self.ctl = a, None
        self.cli = [a.guestlink, "--spice-socket", a.spice, "-q"]  # a.guestlink: set by install_bins

    def start(self, stack, clip=0):
        self.ctl.run(f"glstack start {stack}" + (f" {clip}" if clip and stack.startswith("null") else ""))

    def step_file(self, stack, path, want):
        self.start(stack)
        t0 = time.perf_counter()
        o = subprocess.run([*self.cli, "send-file", path], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=STEP_TIMEOUT)
        t = time.perf_counter() - t0
        if o.returncode != 0:
            raise RuntimeError(f"{stack}: send-file exit {o.returncode}: {o.stderr!r}")
        got = self.ctl.run(f"glstack file {os.path.basename(path)} {FILE}")
        if stack in COUNTING:
            if f"{FILE} bytes" not in got:
                raise RuntimeError(f"{stack}: the null agent did not count the file: {got!r}")
        elif got.split() != [str(FILE), want]:
            raise RuntimeError(f"{stack}: received file differs: {got!r}")
        return t

    def step_clip_h2g(self, stack, path):
        self.start(stack)
        self.ctl.send(f"glstack paste-wait {CLIP} {PASTE_TIMEOUT}")
        time.sleep(0.3)  # the waiter is polling before the host sets the clipboard
        def offer():
            return subprocess.Popen([*self.cli, "clipboard", "set", "--file", path, "--type", "text", "--loops", "1",
                                     "--serve-timeout", str(STEP_TIMEOUT)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        t0 = time.perf_counter()
        setter, offers = offer(), 1
        try:
            while not self.ctl.poll():
                if setter.poll() not in (None, 0):
                    # The offer did not reach the agent (it did not answer this client in time): offer again, as
                    # tests/debian-guest/check.py does; the clock keeps running from the first offer.
                    log(f"  {stack}: clipboard set exit {setter.returncode}: {setter.stderr.read()[-200:]!r}; again")
                    setter, offers = offer(), offers + 1
                time.sleep(0.005)
            t = time.perf_counter() - t0
        except Exception:
            setter.kill()
            raise
        if offers > 1:
            log(f"  {stack}: {offers} offers")
        try:
            setter.wait(timeout=60)
        except subprocess.TimeoutExpired:
            setter.kill()  # some agents ask again; the paste is what is timed
        return t

    def step_clip_g2h(self, stack):
        self.start(stack, CLIP)
        if not stack.startswith("null"):
            self.ctl.run(f"glstack copy {CLIP}")
        for tries in range(1, 101):
            t0 = time.perf_counter()
            o = subprocess.run([*self.cli, "clipboard", "get"], stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=STEP_TIMEOUT)
            t = time.perf_counter() - t0
            if o.returncode == 0 and len(o.stdout) == CLIP and o.stdout.count(b"x") == CLIP:
                return t
            time.sleep(0.2)
        raise RuntimeError(f"{stack}: clipboard get never returned the text ({len(o.stdout)} bytes, {o.stderr!r})")


class SpiceBench(Bench):
    """Transport (b): `-chardev spicevmc` behind QEMU's spice-server; the host side is spice-gtk (SpiceClientGLib)
    in this process. Each step's clock starts at the client's call (file_copy_async, the clipboard grab, the
    clipboard request) on an already connected session; the agent is seen connected (and, for guest->host, its
    grab is seen) before the clock starts."""

    def __init__(self, a):
        super().__init__(a)
        import gi

        gi.require_version("SpiceClientGLib", "2.0")
        from gi.repository import Gio, GLib, GObject, SpiceClientGLib

        self.Gio, self.GLib = Gio, GLib
        self.on = GObject.Object.connect  # SpiceSession.connect shadows GObject.connect
        self.main, self.host_clip, self.guest_grab, self.guest_data = None, b"", None, None
        self.session = SpiceClientGLib.Session(uri=a.spice)
        self.on(self.session, "channel-new", self._channel_new)
        self.SpiceClientGLib = SpiceClientGLib
        if not self.session.connect():
            raise RuntimeError(f"spice_session_connect({a.spice}) failed")
        self.pump("main channel", lambda: self.main is not None, 120)

    def _channel_new(self, _session, channel):
        if isinstance(channel, self.SpiceClientGLib.MainChannel):
            self.main = channel
            self.on(channel, "main-clipboard-selection-request", self._clip_request)
            self.on(channel, "main-clipboard-selection-grab", self._clip_grab)
            self.on(channel, "main-clipboard-selection", self._clip_data)

    def _clip_request(self, main, selection, typ):
        main.clipboard_selection_notify(selection, typ, self.host_clip)
        return True

    def _clip_grab(self, main, selection, types, ntypes):
        self.guest_grab = ntypes
        return True

    def _clip_data(self, main, selection, typ, data, size):
        import ctypes

        self.guest_data = ctypes.string_at(data, size) if isinstance(data, int) else bytes(data or b"")[:size]

    def pump(self, what, cond, timeout=STEP_TIMEOUT):
        ctx = self.GLib.MainContext.default()
        end = time.monotonic() + timeout
        tick = self.GLib.timeout_add(5, lambda: True)  # a blocking iteration wakes at least every 5 ms
        try:
            while not cond():
                if time.monotonic() > end:
                    raise RuntimeError(f"{what}: not reached within {timeout}s")
                ctx.iteration(True)
        finally:
            self.GLib.source_remove(tick)

    def start(self, stack, clip=0):
        # The agent's (re)start is seen by spice-server: wait until the client sees it disconnected and back.
        self.ctl.send("glstack stop")
        self.pump("control reply", lambda: self.ctl.poll())
        self.pump("agent gone", lambda: not self.main.props.agent_connected, 60)
        # Forget the old agent's clipboard before the new one starts: a null agent grabs as soon as the client's
        # capabilities arrive, within glstack's settle time, so its grab is already here when start returns.
        self.guest_grab = self.guest_data = None
        self.ctl.send(f"glstack start {stack}" + (f" {clip}" if clip and stack.startswith("null") else ""))
        self.pump("control reply", lambda: self.ctl.poll())
        self.pump("agent-connected", lambda: self.main.props.agent_connected, 60)

    def step_file(self, stack, path, want):
        self.start(stack)
        done = {}

        def finished(main, result, _data=None):
            try:
                done["ok"] = main.file_copy_finish(result)
            except self.GLib.Error as e:
                done["ok"], done["err"] = False, e.message

        t0 = time.perf_counter()
        self.main.file_copy_async([self.Gio.File.new_for_path(path)], self.Gio.FileCopyFlags.NONE, None, None, None,
                                  finished, None)
        self.pump("file copy", lambda: "ok" in done)
        t = time.perf_counter() - t0
        if not done["ok"]:
            raise RuntimeError(f"{stack}: file_copy_async: {done.get('err')}")
        got = self.ctl.run(f"glstack file {os.path.basename(path)} {FILE}")
        if stack in COUNTING:
            if f"{FILE} bytes" not in got:
                raise RuntimeError(f"{stack}: the null agent did not count the file: {got!r}")
        elif got.split() != [str(FILE), want]:
            raise RuntimeError(f"{stack}: received file differs: {got!r}")
        return t

    def step_clip_h2g(self, stack, path):
        self.start(stack)
        with open(path, "rb") as f:
            self.host_clip = f.read()
        self.ctl.send(f"glstack paste-wait {CLIP} {PASTE_TIMEOUT}")
        time.sleep(0.3)
        t0 = time.perf_counter()
        self.main.clipboard_selection_grab(0, [1])  # CLIPBOARD, UTF8_TEXT
        self.pump("the guest's paste", self.ctl.poll)
        return time.perf_counter() - t0

    def step_clip_g2h(self, stack):
        self.start(stack, CLIP)
        if not stack.startswith("null"):
            self.ctl.send(f"glstack copy {CLIP}")
            self.pump("control reply", self.ctl.poll)
        self.pump("the guest's clipboard grab", lambda: self.guest_grab is not None, 120)
        t0 = time.perf_counter()
        self.main.clipboard_selection_request(0, 1)
        self.pump("the guest's clipboard data", lambda: self.guest_data is not None)
        t = time.perf_counter() - t0
        if len(self.guest_data) != CLIP or self.guest_data.count(b"x") != CLIP:
            raise RuntimeError(f"{stack}: got {len(self.guest_data)} bytes of clipboard")
        return t


def install_bins(a, ctl):
    """Copies the binaries (once all are there and none changed for 10 s: a build may still be writing them) to a
    staging dir, makes an ext4 of them in the guest's second disk, and has the guest install them."""
    names = ["guestlinkd", "guestlink-session", "guestlink"]
    paths = [os.path.join(a.bins, n) for n in names]
    end = time.monotonic() + a.wait_bins
    while not all(os.access(p, os.X_OK) for p in paths) or \
            max(os.stat(p).st_mtime for p in paths) > time.time() - 10:
        if time.monotonic() > end:
            raise RuntimeError(f"binaries missing in {a.bins}: {names}")
        time.sleep(5)
    stage = os.path.join(a.work, "bins")
    os.makedirs(stage, exist_ok=True)
    for p in paths + [a.null_agent]:
        subprocess.run(["cp", p, stage], check=True)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(["cp", os.path.join(here, "..", "spice", "null-agent"), os.path.join(stage, "null-agent.py")],
                   check=True)
    a.guestlink = os.path.join(stage, "guestlink")
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", stage, a.bins_img], check=True)
    got = ctl.run("glstack install", 300)
    log("installed in the guest:\n" + got)
    for p in paths:
        log(f"host: {subprocess.run(['sha256sum', p], capture_output=True, text=True).stdout.strip()}")


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--transport", default="socket", choices=["socket", "spicevmc"])
    ap.add_argument("--spice", required=True,
                    help="socket: the unix socket of QEMU's com.redhat.spice.0 chardev; spicevmc: spice://HOST?port=N")
    ap.add_argument("--control", required=True)
    ap.add_argument("--bins", required=True, help="guestlinkd, guestlink-session (for the guest), guestlink (host CLI)")
    ap.add_argument("--wait-bins", type=float, default=0, help="wait this long for the binaries to appear")
    ap.add_argument("--bins-img", required=True, help="the guest's second disk: an ext4 of the binaries is made here")
    ap.add_argument("--null-agent", required=True, help="the native null agent (built by run)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--stacks", default="guestlink,vdagent,null")
    ap.add_argument("--steps", default="file,clip-h2g,clip-g2h")
    ap.add_argument("--json")
    a = ap.parse_args()
    stacks, steps = a.stacks.split(","), a.steps.split(",")

    fpath, cpath = os.path.join(a.work, "file64.bin"), os.path.join(a.work, "clip16.txt")
    data = os.urandom(FILE)
    with open(fpath, "wb") as f:
        f.write(data)
    fsha = hashlib.sha256(data).hexdigest()
    with open(cpath, "wb") as f:
        f.write(os.urandom(CLIP // 2).hex().encode())

    log("waiting for the guest (boot under TCG)")
    t_boot = time.monotonic()
    ctl = Control(a.control, 900)
    install_bins(a, ctl)
    b = Bench(a) if a.transport == "socket" else SpiceBench(a)
    b.ctl = ctl
    log(f"guest up after {time.monotonic() - t_boot:.0f}s")
    res = {s: {st: [] for st in steps} for s in stacks}
    failed = {s: {st: 0 for st in steps} for s in stacks}
    loads = []
    for rep in range(a.reps):
        order = stacks[rep % len(stacks):] + stacks[:rep % len(stacks)]
        for stack in order:
            for step in steps:
                try:
                    if step == "file":
                        t = b.step_file(stack, fpath, fsha)
                    elif step == "clip-h2g":
                        t = b.step_clip_h2g(stack, cpath)
                    else:
                        t = b.step_clip_g2h(stack)
                except Exception as e:
                    # Recorded and counted; the run goes on with the next step.
                    log(f"rep {rep + 1} {stack} {step} FAILED: {e}")
                    failed[stack][step] += 1
                    try:
                        log("guest logs:\n" + b.ctl.run("glstack logs", 120))
                    except Exception as e2:
                        log(f"(no guest logs: {e2})")
                        raise
                    continue
                res[stack][step].append(t)
                extra = f" = {FILE / t / 2**20:.1f} MiB/s" if step == "file" else ""
                log(f"rep {rep + 1} {stack:9} {step:8} {t:7.3f} s{extra}")
            info = b.ctl.run("glstack info")
            loads.append({"rep": rep + 1, "stack": stack, "host_load": open("/proc/loadavg").read().split()[:3],
                          "guest": info})
            log(f"  host load {' '.join(loads[-1]['host_load'])}; guest: {info.replace(chr(10), '; ')}")
    b.ctl.run("glstack stop")

    print(f"\nmedians of {a.reps} repetitions (s; file also MiB/s)")
    print(f"{'stack':10}" + "".join(f"{s:>16}" for s in steps))
    for s in stacks:
        row = ""
        for st in steps:
            m = med(res[s][st])
            row += f"{m:9.3f} ({FILE / m / 2**20:4.1f})" if st == "file" else f"{m:16.3f}"
        print(f"{s:10}{row}")
        bad = {st: n for st, n in failed[s].items() if n}
        if bad:
            print(f"{'':10}failed steps: {bad}")
    print("\ntargets (issue #17)")
    g = res.get("guestlink")
    if g:
        for other, key, want, text in (("null", "file", 0.9, "64 MiB throughput vs null agent  >= 0.9x"),
                                       ("vdagent", "file", 1.5, "64 MiB throughput vs spice-vdagent >= 1.5x"),
                                       ("vdagent", "clip-h2g", 0.8, "16 MiB clipboard host->guest time <= 0.8x vdagent"),
                                       ("vdagent", "clip-g2h", 0.8, "16 MiB clipboard guest->host time <= 0.8x vdagent")):
            if other not in res or key not in steps:
                continue
            r = med(res[other][key]) / med(g[key]) if key == "file" else med(g[key]) / med(res[other][key])
            ok = r >= want if key == "file" else r <= want
            print(f"  {text}: {r:.2f}x {'met' if ok else 'NOT met'}")
    refs = (("null-store", "null", "file", "null agent storing the file vs null agent (what storing costs)"),
            ("guestlink", "null-store", "file", "guestlink vs null agent storing the file"))
    lines = []
    for s, other, key, text in refs:
        if s in res and other in res and key in steps and res[s][key] and res[other][key]:
            r = med(res[other][key]) / med(res[s][key])
            lines.append(f"  {text}: {r:.2f}x (throughput)")
    if lines:
        print("\nreferences\n" + "\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": res, "failed": failed, "loads": loads, "reps": a.reps, "transport": a.transport}, f, indent=1)


if __name__ == "__main__":
    main()
