#!/usr/bin/python3
"""Host side of tests/desktop-guest/run: a real SPICE client (spice-gtk's SpiceClientGLib) against the booted guest.

1. QGA (org.qemu.guest_agent.0 on a unix socket): waits for guestlinkd, for the desktop of the autologin user (the
   X session, or with --desktop sway the compositor started from a tty login) and for its guestlink-session, which
   must have been started by guestlink-spice's agent launcher (a unit guestlink-session-auto-<session> of the user's
   manager: nothing else in these images starts one); guest-side checks run through guest-exec as that user.
2. SPICE: connects to QEMU's spice-server, connects the display channel, waits for the main channel's
   agent-connected, then:
   - resize to two sizes (main channel update_display + send_monitor_config): the guest's RandR screen (xrandr;
     sway: swaymsg's output mode) and the client's primary surface (display channel width/height) reach the size;
   - clipboard host -> guest (a grab answered on request; read in the guest with xclip / wl-paste) and guest ->
     host (xclip / wl-copy owns the clipboard in the guest; the client sees the grab and requests the text);
   - file_copy_async of a small and a 20 MiB file; sha256 checked in the guest's ~/Downloads.
Prints one line per step with its duration; exits non-zero on the first failure.
"""
import argparse
import base64
import ctypes
import hashlib
import json
import os
import random
import re
import socket
import sys
import time

import gi

gi.require_version("SpiceClientGLib", "2.0")
from gi.repository import Gio, GLib, GObject, SpiceClientGLib  # noqa: E402

# SpiceSession.connect / SpiceChannel.connect (spice_*_connect) shadow GObject.connect: signals use this.
on = GObject.Object.connect

USER = "gltest"
HOME = f"/home/{USER}"
X_ENV = ["env", "DISPLAY=:0", f"XAUTHORITY={HOME}/.Xauthority"]
# sway from a tty: the compositor's Wayland and IPC sockets in the user's runtime dir.
WL_ENV = ["sh", "-c", 'export XDG_RUNTIME_DIR=/run/user/$(id -u); '
          'for s in "$XDG_RUNTIME_DIR"/wayland-[0-9]*; do [ -S "$s" ] && export WAYLAND_DISPLAY=${s##*/} && break; done; '
          'export SWAYSOCK=$(ls "$XDG_RUNTIME_DIR"/sway-ipc.*.sock 2>/dev/null | head -1); exec "$@"', "-"]
DESKTOP = "wm"  # --desktop
UTF8_TEXT = 1  # VD_AGENT_CLIPBOARD_UTF8_TEXT
SELECTION_CLIPBOARD = 0
T0 = time.monotonic()


def log(msg):
    print(f"[client {time.strftime('%H:%M:%S')} +{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


QGA = None  # set once guestlinkd answers, for the diagnostics on failure
IDLE = time.sleep  # what waiting for the guest does; once the SPICE client runs, it keeps its main loop going


def fail(msg):
    log(f"FAIL: {msg}")
    if QGA is not None:
        diagnose(QGA)
    sys.exit(1)


def diagnose(q):
    """What went wrong in the guest: the display manager, X, the session agent."""
    cmds = [
        "systemctl --no-pager status lightdm guestlinkd guestlink-spice guestlink-agent-launch.socket | head -60",
        "loginctl list-sessions --no-legend; for s in $(loginctl list-sessions --no-legend | awk '{print $1}'); "
        "do loginctl show-session $s -p Type -p Class -p Active -p State -p Display; done",
        "journalctl -b --no-pager -o cat -u lightdm -u guestlinkd | tail -40",
        "journalctl -b --no-pager -u guestlink-spice -u 'guestlink-agent-launch@*' | tail -40",
        "journalctl -b --no-pager -o cat SYSLOG_IDENTIFIER=guestlink-session | tail -40",
        "tail -30 /var/log/Xorg.0.log; tail -30 /var/log/lightdm/lightdm.log",
        f"tail -30 {HOME}/.xsession-errors; cat {HOME}/xrandr-at-start.txt; tail -30 {HOME}/sway.log",
    ]
    for c in cmds:
        try:
            rc, out, err = q.exec(["/bin/sh", "-c", c + " 2>&1"], 30)
            print(f"--- guest: {c}\n{out}{err}", flush=True)
        except Exception as e:  # noqa: BLE001 - diagnostics are best effort
            print(f"--- guest: {c}: {e}", flush=True)


class Qga:
    """Minimal QGA client over the chardev socket: guest-sync-delimited, then one command at a time."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.buf = b""

    def _value(self, deadline):
        dec = json.JSONDecoder()
        while True:
            text = self.buf.lstrip(b" \r\n\t")
            if text:
                try:
                    value, end = dec.raw_decode(text.decode())
                    self.buf = text.decode()[end:].encode()
                    return value
                except (json.JSONDecodeError, UnicodeDecodeError):
                    pass
            if time.monotonic() > deadline:
                raise TimeoutError("no complete QGA reply")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("QGA socket closed")
            self.buf += chunk

    def sync(self):
        token = random.randint(1, 2**31 - 1)
        self.sock.sendall(b"\xff" + json.dumps({"execute": "guest-sync-delimited", "arguments": {"id": token}}).encode())
        deadline = time.monotonic() + 10
        while b"\xff" not in self.buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no 0xFF from guest-sync-delimited")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("QGA socket closed")
            self.buf += chunk
        self.buf = self.buf[self.buf.index(b"\xff") + 1:]
        while self._value(deadline).get("return") != token:
            pass

    def cmd(self, execute, arguments=None, timeout=60):
        req = {"execute": execute}
        if arguments is not None:
            req["arguments"] = arguments
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        reply = self._value(time.monotonic() + timeout)
        if "error" in reply:
            raise RuntimeError(f"{execute}: {reply['error']}")
        return reply.get("return")

    def exec(self, argv, timeout=60):
        """Runs argv in the guest; (exit code, stdout, stderr)."""
        pid = self.cmd("guest-exec", {"path": argv[0], "arg": argv[1:], "capture-output": True})["pid"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.cmd("guest-exec-status", {"pid": pid})
            if st.get("exited"):
                out = base64.b64decode(st.get("out-data", "")).decode(errors="replace")
                err = base64.b64decode(st.get("err-data", "")).decode(errors="replace")
                return st.get("exitcode"), out, err
            IDLE(0.3)
        raise TimeoutError(f"guest-exec {argv} did not exit within {timeout}s")

    def as_user(self, argv, timeout=60):
        env = WL_ENV if DESKTOP == "sway" else X_ENV
        return self.exec(["/usr/sbin/runuser", "-u", USER, "--", *env, *argv], timeout)


def qga_connect(path, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        q = None
        try:
            q = Qga(path)
            q.sync()
            if q.cmd("guest-ping") == {}:
                return q
        except (OSError, TimeoutError, ConnectionError, RuntimeError) as e:
            last = e
        # QEMU's chardev serves one client at a time: close before the next try, or it never accepts it.
        if q is not None:
            q.sock.close()
        time.sleep(2)
    fail(f"guestlinkd did not answer on {path} within {timeout}s: {last}")


def wait_guest(what, fn, timeout, every=2.0):
    """Polls fn() (a truthy value ends it) until timeout; returns the value. Shows the guest's state once when
    half the time has passed."""
    start = time.monotonic()
    deadline = start + timeout
    last = None
    shown = False
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        if not shown and QGA is not None and time.monotonic() - start > min(90, timeout / 2):
            log(f"still waiting for {what}; guest state:")
            diagnose(QGA)
            shown = True
        time.sleep(every)
    fail(f"{what}: not reached within {timeout}s (last: {last!r})")


def xrandr_size(q):
    """The guest's RandR screen size and the sizes of the lit outputs, from `xrandr --current` (sway: the first
    active output's mode, from `swaymsg -t get_outputs`)."""
    if DESKTOP == "sway":
        rc, out, err = q.as_user(["swaymsg", "-r", "-t", "get_outputs"])
        if rc != 0:
            return None
        try:
            outs = [o for o in json.loads(out) if o.get("active")]
        except ValueError:
            return None
        sizes = [(o["name"], o["current_mode"]["width"], o["current_mode"]["height"]) for o in outs]
        return ((sizes[0][1], sizes[0][2]) if sizes else None), sizes
    rc, out, err = q.as_user(["xrandr", "--current"])
    if rc != 0:
        return None
    m = re.search(r"current (\d+) x (\d+)", out)
    outputs = re.findall(r"^(\S+) connected (?:primary )?(\d+)x(\d+)\+", out, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else None, outputs


class Client:
    """spice-gtk session: main and display channels, clipboard and file-copy plumbing."""

    def __init__(self, uri):
        self.session = SpiceClientGLib.Session(uri=uri)
        self.main = None
        self.display = None
        self.host_clip = b""
        self.guest_grab = None  # types the guest announced
        self.guest_data = None  # data the guest sent
        on(self.session, "channel-new", self._channel_new)
        if not self.session.connect():
            fail(f"spice_session_connect({uri}) failed")

    def _channel_new(self, _session, channel):
        if isinstance(channel, SpiceClientGLib.MainChannel):
            self.main = channel
            on(channel, "main-clipboard-selection-request", self._clip_request)
            on(channel, "main-clipboard-selection-grab", self._clip_grab)
            on(channel, "main-clipboard-selection", self._clip_data)
        elif isinstance(channel, SpiceClientGLib.DisplayChannel) and self.display is None:
            self.display = channel
            channel.connect()  # spice_channel_connect: a client without a widget connects the display itself

    # The guest pastes what the client grabbed.
    def _clip_request(self, main, selection, typ):
        main.clipboard_selection_notify(selection, typ, list(self.host_clip))
        return True

    def _clip_grab(self, main, selection, types, ntypes):
        arr = ctypes.cast(types, ctypes.POINTER(ctypes.c_uint32)) if isinstance(types, int) else None
        self.guest_grab = [arr[i] for i in range(ntypes)] if arr else [UTF8_TEXT]
        return True

    def _clip_data(self, main, selection, typ, data, size):
        self.guest_data = ctypes.string_at(data, size) if isinstance(data, int) else bytes(data or b"")[:size]

    def pump(self, what, cond, timeout, quiet=False):
        ctx = GLib.MainContext.default()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while ctx.pending():
                ctx.iteration(False)
            v = cond()
            if v:
                return v
            ctx.iteration(False)
            time.sleep(0.02)
        if not quiet:
            fail(f"{what}: not reached within {timeout}s")

    def surface(self):
        return (self.display.props.width, self.display.props.height) if self.display else None


def step(name, fn):
    """Runs one check; `fn` returns False for a recorded, non-fatal miss (logged as such, never as "ok")."""
    t = time.monotonic()
    if fn() is False:
        log(f"MISSED {name} ({time.monotonic() - t:.1f}s), recorded above")
        return
    log(f"ok {name} ({time.monotonic() - t:.1f}s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qga", required=True)
    ap.add_argument("--spice", required=True, help="host:port")
    ap.add_argument("--display", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--desktop", default="wm", choices=["wm", "sway"])
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--no-follow", action="store_true",
                    help="control run: the guest's follower is off; expect the resize NOT to reach the guest")
    args = ap.parse_args()

    global QGA, DESKTOP
    DESKTOP = args.desktop
    q = qga_connect(args.qga, args.timeout)
    QGA = q
    log("ok guestlinkd answers guest-ping (boot)")
    what = "sway of the tty autologin user" if DESKTOP == "sway" else "X session of the autologin user"
    wait_guest(what, lambda: (xrandr_size(q) or (None,))[0], 300, 3)
    log(f"ok desktop up: {xrandr_size(q)}")
    rc, out, _ = q.exec(["/bin/loginctl", "list-sessions", "--no-legend"])
    log(f"logind sessions: {out.strip()!r}")
    wait_guest("guestlink-session running", lambda: q.exec(["/usr/bin/pgrep", "-u", USER, "-f", "^/usr/bin/guestlink-session "])[0] == 0,
               180, 2)
    t_boot = time.monotonic() - T0
    log(f"ok guestlink-session runs; boot to desktop + agent took {t_boot:.0f}s")
    # Who started it: only guestlink-spice's launcher makes units named guestlink-session-auto-<session>.
    rc, out, _ = q.exec(["/bin/sh", "-c", "for p in $(pgrep -u %s -f '^/usr/bin/guestlink-session '); do cat /proc/$p/cgroup; "
                         "tr '\\0' '\\n' </proc/$p/environ | grep -E '^(DISPLAY|WAYLAND_DISPLAY|XDG_SESSION_ID)='; done" % USER])
    log(f"agent cgroup and display: {out.strip()!r}")
    if "/guestlink-session-auto-" not in out:
        fail("guestlink-session was not started by the agent launcher (not in a guestlink-session-auto-* unit)")
    rc, out, _ = q.exec(["/bin/journalctl", "-o", "cat", "--no-pager", "-u", "guestlink-spice.service", "-u",
                         "guestlink-agent-launch@*.service"])
    lines = [x for x in out.splitlines() if "launch" in x or "agent" in x]
    log("guestlink-spice / launcher journal:\n  " + "\n  ".join(lines[-8:]))
    if "ok: started guestlink-session-auto-" not in out:
        fail("no successful launch in guestlink-spice's journal")
    log("ok the agent was started by guestlink-spice's launcher, in the user's service manager")
    t_checks = time.monotonic()

    c = Client(f"spice://{args.spice}")
    global IDLE
    IDLE = lambda secs: c.pump("idle", lambda: False, secs, quiet=True)  # noqa: E731
    c.pump("main channel", lambda: c.main is not None, 60)
    c.pump("agent-connected", lambda: c.main.props.agent_connected, 120)
    c.pump("display primary surface", lambda: c.surface() and c.surface()[0] > 0, 120)
    log(f"ok SPICE connected, agent-connected, primary surface {c.surface()}")

    # --- resize ---
    if args.no_follow:
        start = xrandr_size(q)
        c.main.update_display_enabled(0, True, False)
        c.main.update_display(0, 0, 0, 1280, 720, False)
        c.main.send_monitor_config()
        IDLE(60)
        now = xrandr_size(q)
        log(f"control run (follower off): guest xrandr {start} -> {now} 60 s after asking for 1280x720; "
            f"client surface {c.surface()}")
        if now and now[0] == (1280, 720):
            fail("the guest resized with the follower off: this display device gave the size to the agent")
        log("ok without the follower the guest keeps its size (the display device only changed the preferred mode)")
        c.session.disconnect()
        log("PASS (control)")
        return
    resize_failed = []
    for w, h in [(1280, 720), (1152, 864)]:
        def resize(w=w, h=h):
            c.main.update_display_enabled(0, True, False)
            c.main.update_display(0, 0, 0, w, h, False)
            if not c.main.send_monitor_config():
                fail("send_monitor_config returned false")
            deadline = time.monotonic() + 120
            got = None
            while time.monotonic() < deadline:
                c.pump("pump", lambda: True, 1)
                got = xrandr_size(q)
                if got and got[0] == (w, h) and c.surface() == (w, h):
                    return
                time.sleep(1)
            if DESKTOP == "sway":
                # Recorded, not fatal: what sway/wlroots on Debian 12 does with each display device is in
                # docs/desktops.md; this run is about the agent being there (clipboard, files below).
                log(f"NOT RESIZED (sway): guest {got}, client surface {c.surface()}")
                resize_failed.append((w, h))
                return False
            fail(f"resize to {w}x{h}: guest xrandr {got}, client surface {c.surface()}")
        step(f"resize {w}x{h} (guest RandR screen and client primary surface)", resize)

    # Which path resized the guest: with QXL and virtio-vga spice-server gives the client's size to the display
    # device (a preferred-mode change the session follows), with std VGA to the agent (a monitors config).
    rc, out, _ = q.exec(["/bin/journalctl", "-o", "cat", "--no-pager", "SYSLOG_IDENTIFIER=guestlink-session"])
    follows = out.count("following it")
    applies = out.count("applying monitors config")
    log(f"resize path in the guest: {follows} preferred-mode follow(s), {applies} RandR apply(s) in the agent's journal")
    if args.display in ("qxl", "virtio") and follows < 2 and not resize_failed:
        fail("expected the two resizes to come through the display device's preferred mode (follow_preferred)")

    # --- clipboard host -> guest ---
    def host_to_guest():
        c.host_clip = f"host->guest {random.getrandbits(64):x} ✓".encode()
        c.main.clipboard_selection_grab(SELECTION_CLIPBOARD, [UTF8_TEXT])
        deadline = time.monotonic() + 60
        out = None
        while time.monotonic() < deadline:
            c.pump("pump", lambda: True, 0.5)
            paste = ["wl-paste", "-n"] if DESKTOP == "sway" else ["xclip", "-o", "-selection", "clipboard"]
            rc, out, _ = q.as_user(["timeout", "20", *paste], 40)
            if rc == 0 and out.encode() == c.host_clip:
                return
            time.sleep(1)
        fail(f"guest clipboard {out!r}, expected {c.host_clip!r}")
    step(f"clipboard host->guest ({'wl-paste' if DESKTOP == 'sway' else 'xclip -o'} in the guest)", host_to_guest)

    # --- clipboard guest -> host ---
    def guest_to_host():
        text = f"guest->host {random.getrandbits(64):x} ✓"
        c.guest_grab = None
        c.guest_data = None
        copy = "wl-copy" if DESKTOP == "sway" else "xclip -i -selection clipboard"
        rc, out, err = q.as_user(["sh", "-c", f'printf %s "$1" | {copy} >/dev/null 2>&1', "-", text])
        if rc != 0:
            fail(f"{copy} in the guest: {rc} {err}")
        c.pump("guest clipboard grab", lambda: c.guest_grab is not None, 60)
        if UTF8_TEXT not in c.guest_grab:
            fail(f"guest grab without UTF8_TEXT: {c.guest_grab}")
        c.main.clipboard_selection_request(SELECTION_CLIPBOARD, UTF8_TEXT)
        c.pump("guest clipboard data", lambda: c.guest_data is not None, 60)
        if c.guest_data != text.encode():
            fail(f"client got {c.guest_data!r}, expected {text.encode()!r}")
    step(f"clipboard guest->host ({'wl-copy' if DESKTOP == 'sway' else 'xclip -i'} in the guest)", guest_to_host)

    # --- file copy ---
    for name, size in [("small.txt", 1000), ("big.bin", 20 * 1024 * 1024)]:
        def copy(name=name, size=size):
            path = os.path.join(args.work, name)
            with open(path, "wb") as f:
                f.write(os.urandom(size))
            want = hashlib.sha256(open(path, "rb").read()).hexdigest()
            done = {}

            def finished(main, result, _data=None):
                try:
                    done["ok"] = main.file_copy_finish(result)
                except GLib.Error as e:
                    done["ok"] = False
                    done["err"] = e.message
            c.main.file_copy_async([Gio.File.new_for_path(path)], Gio.FileCopyFlags.NONE, None, None, None, finished, None)
            c.pump(f"file copy {name}", lambda: "ok" in done, 600)
            if not done["ok"]:
                fail(f"file_copy_async {name}: {done.get('err')}")
            rc, out, err = q.exec(["/usr/bin/sha256sum", f"{HOME}/Downloads/{name}"])
            if rc != 0 or out.split()[0] != want:
                fail(f"{name} in the guest: rc {rc} {out!r} {err!r}, want {want}")
        step(f"file copy {name} ({size} bytes, sha256 in ~/Downloads)", copy)

    log(f"client checks took {time.monotonic() - t_checks:.0f}s (boot to desktop {t_boot:.0f}s)")
    if resize_failed:
        log(f"resizes that did not reach the guest: {resize_failed}")
    c.session.disconnect()
    log("PASS")


if __name__ == "__main__":
    main()
