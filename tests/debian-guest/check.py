#!/usr/bin/env python3
"""Host side of tests/debian-guest/run: talks to the booted Debian guest.

--mode full (both ports):
1. waits for the in-guest checks (glcheck, lines on checks.log) and fails on any "fail" or a missing one; records
   the `systemd-analyze security guestlink-spice.service` lines (--security-out) and fails when the overall
   exposure is not below SECURITY_MAX;
2. proves guestlinkd answers on org.qemu.guest_agent.0 (guest-sync-delimited + guest-ping over the chardev socket);
3. runs probes through guest-exec, i.e. as children of guestlinkd under its unit's sandbox: /proc readable,
   no private mount namespace, / writable;
4. freezes the real root filesystem with guest-fsfreeze-freeze and shows that the test writer (which reports each
   completed append on writer.log) stops, that guest-fsfreeze-status says "frozen", then thaws and shows the writer
   resumes.
--mode spice-only (the SPICE port and the test control port, no QGA port):
1. the in-guest checks of that boot (only guestlink-spice started, the X session's agent served);
2. the uinput tablet (uinput_pointer): in /proc/bus/input/devices and opened by Xorg; `guestlink mouse` moves the
   pointer (xdotool getmouselocation), the first position after the agent started and after a resize included,
   and a click arrives there (xinput test-xi2);
3. through `guestlink --spice-socket` on the SPICE port and the control port: host -> guest clipboard (xclip -o in
   the guest), guest -> host clipboard (xclip -i in the guest, `guestlink clipboard get`), resize (xrandr).
Prints one line per step; exits non-zero on the first failure.
"""
import argparse
import base64
import json
import os
import random
import re
import socket
import subprocess
import sys
import time

# Highest accepted `systemd-analyze security` exposure of guestlink-spice.service (0 = fully confined, 10 =
# unconfined). Measured 1.2 in the Debian 12 guest (systemd 252); see docs/security.md.
SECURITY_MAX = 2.0


def log(msg):
    print(f"[check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fail(msg):
    log(f"FAIL: {msg}")
    sys.exit(1)


class Agent:
    """Minimal QGA client: one connection, guest-sync-delimited to resynchronise, one command at a time."""

    def __init__(self, path, timeout):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _read_value(self, deadline):
        dec = json.JSONDecoder()
        while True:
            text = self.buf.lstrip(b" \r\n\t")
            if text:
                try:
                    value, end = dec.raw_decode(text.decode("utf-8"))
                    rest = text.decode("utf-8")[end:]
                    self.buf = rest.encode("utf-8")
                    return value
                except (json.JSONDecodeError, UnicodeDecodeError):
                    pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no complete reply (have {self.buf[:200]!r})")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("agent closed the connection")
            self.buf += chunk

    def sync(self, timeout):
        token = random.randint(1, 2**31 - 1)
        self.sock.sendall(b"\xff" + json.dumps({"execute": "guest-sync-delimited", "arguments": {"id": token}}).encode())
        deadline = time.monotonic() + timeout
        while True:  # discard everything up to the 0xFF the agent sends before its reply
            idx = self.buf.find(b"\xff")
            if idx >= 0:
                self.buf = self.buf[idx + 1:]
                break
            if time.monotonic() > deadline:
                raise TimeoutError("no 0xFF delimiter from guest-sync-delimited")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("agent closed the connection")
            self.buf += chunk
        while True:
            reply = self._read_value(deadline)
            if reply.get("return") == token:
                return
            # stale replies from before the sync are dropped

    def cmd(self, execute, arguments=None, timeout=60):
        req = {"execute": execute}
        if arguments is not None:
            req["arguments"] = arguments
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        reply = self._read_value(time.monotonic() + timeout)
        if "error" in reply:
            raise RuntimeError(f"{execute}: {reply['error']}")
        return reply.get("return")


def connect(path, total_timeout):
    """Connect and sync, retrying: guestlinkd may still be starting (udev, Restart=always)."""
    deadline = time.monotonic() + total_timeout
    last = None
    while time.monotonic() < deadline:
        try:
            agent = Agent(path, 10)
            agent.sync(10)
            return agent
        except (OSError, TimeoutError, ConnectionError) as e:
            last = e
            try:
                agent.close()
            except Exception:  # noqa: BLE001 - best effort
                pass
            time.sleep(2)
    fail(f"no answer to guest-sync-delimited on {path} within {total_timeout}s: {last}")


def read_checks(path, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = open(path, errors="replace").read() if os.path.exists(path) else ""
        if "CHECKS DONE" in text:
            return [l.strip() for l in text.replace("\r", "").splitlines() if l.startswith("CHECK ")]
        time.sleep(1)
    fail(f"the in-guest checks did not finish within {timeout}s; got:\n{text}")


def writer_count(path):
    nums = re.findall(r"written (\d+)", open(path, errors="replace").read())
    return int(nums[-1]) if nums else 0


def wait_writer_progress(path, above, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = writer_count(path)
        if n > above:
            return n
        time.sleep(0.2)
    return None


def guest_exec(agent, argv, timeout=60):
    pid = agent.cmd("guest-exec", {"path": argv[0], "arg": argv[1:], "capture-output": True})["pid"]
    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = agent.cmd("guest-exec-status", {"pid": pid})
        if st.get("exited"):
            out = base64.b64decode(st.get("out-data", "")).decode(errors="replace")
            err = base64.b64decode(st.get("err-data", "")).decode(errors="replace")
            return st.get("exitcode"), out, err
        time.sleep(0.2)
    raise TimeoutError(f"guest-exec {argv}: guest-exec-status of pid {pid} not exited within {timeout}s (last: {st})")


# QEMU's QERR_UNSUPPORTED text: the command exists in the schema but this build does not implement it.
UNSUPPORTED = "this feature or command is not currently supported"

# In-guest checks of every boot (glcheck).
COMMON_CHECKS = [
    "mode", "spice-unit-static", "spice-device-wants-spice", "spice-device-not-wants-agent", "spice-wanted-by-device",
    "spice-unit-bound-to-port", "spice-unit-active", "spice-socket", "spice-sandbox", "spice-security-score",
    "verify-guestlinkd", "verify-spice", "verify-xsession", "verify-writer", "verify-session",
    "session-enabled-globally", "user-manager", "session-not-started-yet", "x-session", "start-graphical-session",
    "graphical-session-active", "session-started", "spice-agent-served", "session-in-session-slice",
    "xdg-generator-skips", "desktop-no-autostart-phase",
]
EXPECTED_CHECKS = {
    "full": COMMON_CHECKS + [
        "unit-static", "device-wants-agent", "agent-device-not-wants-spice", "agent-wanted-by-devices",
        "port-device-follows", "unit-bound-to-port", "unit-active", "statedir", "daemon-sandbox",
    ],
    "spice-only": COMMON_CHECKS + ["agent-not-started", "spice-not-restarted"],
}


def in_guest_checks(args):
    """Reads glcheck's results; returns the failures (a failed or missing check, a too high exposure)."""
    lines = read_checks(args.checks_log, args.timeout)
    seen = {}
    for line in lines:
        parts = line.split(" ", 3)
        seen[parts[1]] = parts[2] if len(parts) > 2 else "?"
        log(line)
    failures = []
    if seen.get("mode") != "ok" or f"CHECK mode ok {args.mode}" not in lines:
        failures.append(f"the guest did not see the port layout of mode {args.mode}")
    bad = [n for n, r in seen.items() if r != "ok"] + [n for n in EXPECTED_CHECKS[args.mode] if n not in seen]
    if bad:
        failures.append(f"in-guest check failed or missing: {', '.join(bad)}")
    text = open(args.checks_log, errors="replace").read().replace("\r", "")
    security = [l[len("SECURITY "):] for l in text.splitlines() if l.startswith("SECURITY ")]
    if args.security_out:
        with open(args.security_out, "w") as f:
            f.write("\n".join(security) + "\n")
    m = re.search(r"Overall exposure level for guestlink-spice\.service: ([0-9.]+)", "\n".join(security))
    if not m:
        failures.append("no overall exposure level in `systemd-analyze security guestlink-spice.service`")
    else:
        score = float(m.group(1))
        worst = [l.strip() for l in security if l.startswith("✗")]
        log(f"systemd-analyze security guestlink-spice.service: exposure {score} (max {SECURITY_MAX}); "
            f"{len(worst)} settings flagged:")
        for l in worst:
            log(f"  {l}")
        if score >= SECURITY_MAX:
            failures.append(f"guestlink-spice.service exposure {score} is not below {SECURITY_MAX}")
    return failures


class Control:
    """Client of the guest's test control port (glcontrol): one shell command per line, "@@RC=n@@" after it."""

    def __init__(self, path, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(60)
                self.sock.connect(path)
                self.f = self.sock.makefile("rwb")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def run(self, cmd):
        self.f.write(cmd.encode() + b"\n")
        self.f.flush()
        out = []
        while True:
            line = self.f.readline()
            if not line:
                raise ConnectionError("control port closed")
            text = line.decode(errors="replace")
            if text.startswith("@@RC="):
                return int(text.strip()[5:].rstrip("@")), "".join(out)
            out.append(text)


def poll(what, fn, timeout=90, interval=0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = fn()
        if ok:
            return last
        time.sleep(interval)
    fail(f"timed out waiting for {what}; last: {last!r}")


def lock_unlock(ctl, gl, x):
    """The real systemd-logind locks gltest's X session (`loginctl lock-session`, which sends the session's Lock
    signal): the host's paste gets nothing although the guest still owns its clipboard, and a host copy is not
    offered to the locked session; `loginctl unlock-session`: that copy, made on the same SPICE connection while
    locked, is pasted in the guest, and the guest's clipboard reaches the host again."""
    def guestlink(*a, timeout=60):
        return subprocess.run(gl + list(a), capture_output=True, text=True, timeout=timeout)

    def xclip_out():
        rc, out = ctl.run(f"{x} xclip -o -selection clipboard")
        return rc, out.removesuffix("\n")

    rc, sid = ctl.run("loginctl show-user gltest -p Display --value")
    sid = sid.strip()
    if rc != 0 or not sid:
        fail(f"gltest has no display session: {rc} {sid!r}")
    owned = "owned by the guest while locked"
    rc, out = ctl.run(f"printf '{owned}' >/tmp/gllock && {x} setsid xclip -i -selection clipboard /tmp/gllock "
                      ">/dev/null 2>&1 </dev/null &")
    if rc != 0:
        fail(f"xclip -i in the guest: {rc} {out}")
    poll("the guest to own its clipboard", lambda: (xclip_out() == (0, owned), xclip_out()))
    rc, out = ctl.run(f"loginctl lock-session {sid} && loginctl show-session {sid} -p LockedHint")
    if rc != 0:
        fail(f"loginctl lock-session {sid}: {rc} {out}")
    log(f"lock: loginctl lock-session {sid} ({out.strip()}; no screen locker: logind's Lock signal)")

    # Locked: the host's paste is answered empty (guestlink exits non-zero "... is empty"), the guest still owns it.
    def refused():
        o = guestlink("clipboard", "get")
        return o.returncode != 0 and "empty" in o.stderr, (o.returncode, o.stdout[:200], o.stderr.strip()[-300:])
    r = poll("guestlink clipboard get to be refused while the session is locked", refused, timeout=120, interval=2)
    if xclip_out() != (0, owned):
        fail(f"the guest lost its clipboard while locked: {xclip_out()!r}")
    log(f"locked: guestlink clipboard get refused ({r[2]!r}) while xclip -o in the guest still gives {owned!r}")

    # Locked: a host copy is not offered; it stays on the same connection across the unlock.
    text = "copied on the host while the guest was locked"
    setter = subprocess.Popen(gl + ["clipboard", "set", text, "--loops", "1", "--serve-timeout", "300"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            got = xclip_out()
            if got[1] == text:
                fail("the host's copy reached the locked session")
            if setter.poll() is not None:
                fail(f"guestlink clipboard set exited while locked: {setter.returncode} {setter.stderr.read()[-300:]}")
            time.sleep(2)
        log(f"locked: for 20 s after the host's copy, xclip -o in the guest still gives {xclip_out()[1]!r}")
        rc, out = ctl.run(f"loginctl unlock-session {sid}")
        if rc != 0:
            fail(f"loginctl unlock-session {sid}: {rc} {out}")
        poll("xclip -o in the guest to paste the host's copy after the unlock",
             lambda: (xclip_out() == (0, text), xclip_out()), timeout=120, interval=1)
        _, err = setter.communicate(timeout=90)
    finally:
        if setter.poll() is None:
            setter.kill()
    if setter.returncode != 0:
        fail(f"guestlink clipboard set failed: {err}")
    log(f"unlock: loginctl unlock-session {sid}; the copy made while locked was pasted in the guest: {text!r}")

    # Unlocked: guest -> host works again.
    after = "copied in the guest after the unlock"
    own = (f"printf '{after}' >/tmp/gllock && {x} setsid xclip -i -selection clipboard /tmp/gllock "
           ">/dev/null 2>&1 </dev/null &")
    ctl.run(own)
    tries = 0

    def got():
        nonlocal tries
        tries += 1
        if tries % 20 == 0:  # a new SPICE client may have missed the grab: copy again, as a user would
            ctl.run(own)
        o = guestlink("clipboard", "get")
        return o.returncode == 0 and o.stdout == after, (o.returncode, o.stdout[:200], o.stderr.strip()[-300:])
    poll("guestlink clipboard get to return the guest's text after the unlock", got, timeout=120)
    log(f"unlocked: guestlink clipboard get returned {after!r}")


def spice_only(args):
    failures = in_guest_checks(args)
    if failures:
        for f in failures:
            log(f"FAIL: {f}")
        sys.exit(1)
    ctl = Control(args.control, 60)
    global fail

    def fail_with_logs(msg, _fail=fail):
        # The guest's side of the story: the SPICE service and the session agent (user manager, uid 1000).
        try:
            for cmd in ["journalctl -b -u guestlink-spice.service -o cat --no-pager | tail -40",
                        "journalctl -b _UID=1000 -o cat --no-pager | grep -v '^$' | tail -40"]:
                _, out = ctl.run(cmd)
                log(f"guest: {cmd}\n{out}")
        except Exception as e:  # noqa: BLE001 - diagnostics only
            log(f"guest logs unavailable: {e}")
        _fail(msg)
    fail = fail_with_logs
    rc, out = ctl.run("echo control-ok")
    if rc != 0 or out.strip() != "control-ok":
        fail(f"control port: {rc} {out!r}")
    x = "runuser -u gltest -- env DISPLAY=:99"
    # TCG on a loaded host: give the agent more than the default 5 s to answer each new SPICE client.
    gl = [args.guestlink, "--spice-socket", args.spice, "--connect-timeout", "30", "--agent-timeout", "30"]

    def guestlink(*a, timeout=60):
        return subprocess.run(gl + list(a), capture_output=True, text=True, timeout=timeout)

    # The agent and the port are up: the host sees guestlinkd's capabilities.
    def state():
        o = guestlink("--json", "spice-state")
        return o.returncode == 0, (o.returncode, o.stdout.strip()[:300], o.stderr.strip()[-300:])
    st = poll("guestlink spice-state to answer", state, timeout=120, interval=2)
    log(f"spice-state: {st[1]}")

    uinput_pointer(ctl, guestlink, x)

    # Host -> guest clipboard: the host offers a text, the guest user pastes it from the X clipboard.
    text = "hello from the host ✓ (SPICE port only)"
    def offer():
        return subprocess.Popen(gl + ["clipboard", "set", text, "--loops", "1", "--serve-timeout", "120"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    setter = offer()
    offers = 1

    def pasted():
        nonlocal setter, offers
        if setter.poll() not in (None, 0):
            # The offer never reached the agent (e.g. it did not answer this client in time): offer again, as a
            # SPICE client would on its next connection.
            log(f"guestlink clipboard set exited {setter.returncode}: {setter.stderr.read().strip()[-300:]}; "
                "offering again")
            setter = offer()
            offers += 1
        rc, out = ctl.run(f"{x} xclip -o -selection clipboard")
        # the control port ends every output with a newline
        return rc == 0 and out.removesuffix("\n") == text, (rc, out[:200])
    try:
        poll("xclip -o in the guest to paste the host's text", pasted)
    finally:
        if setter.poll() is not None:
            log(f"guestlink clipboard set exited {setter.returncode}: {setter.stderr.read().strip()[-500:]}")
    try:
        _, err = setter.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        setter.kill()
        fail(f"guestlink clipboard set did not finish after the paste: {setter.communicate()[1]}")
    if setter.returncode != 0:
        fail(f"guestlink clipboard set failed: {err}")
    log(f"clipboard host -> guest: xclip -o in the X session pasted {text!r} (offers: {offers})")

    # Guest -> host clipboard: the guest user copies (xclip -i owns the X clipboard), the host reads it.
    gtext = "copied in the guest\nline two"
    # one command line on the control port: the newline goes through printf's escape
    own = (f"printf 'copied in the guest\\nline two' >/tmp/glclip && {x} setsid xclip -i -selection clipboard /tmp/glclip "
           ">/dev/null 2>&1 </dev/null &")
    rc, out = ctl.run(own)
    if rc != 0:
        fail(f"xclip -i in the guest: {rc} {out}")
    tries = 0

    def got():
        nonlocal tries
        tries += 1
        if tries % 20 == 0:  # a new SPICE client may have missed the grab: copy again, as a user would
            ctl.run(own)
        o = guestlink("clipboard", "get")
        return o.returncode == 0 and o.stdout == gtext, (o.returncode, o.stdout[:200], o.stderr.strip()[-300:])
    poll("guestlink clipboard get to return the guest's text", got, timeout=120)
    log(f"clipboard guest -> host: guestlink clipboard get returned {gtext!r} after {tries} tries")

    # Resize: the host asks for 1024x768; the session agent applies it through RandR.
    o = guestlink("resize", "1024x768")
    if o.returncode != 0:
        fail(f"guestlink resize: {o.returncode} {o.stderr}")

    def resized():
        rc, out = ctl.run(f"{x} xrandr")
        return rc == 0 and "current 1024 x 768" in out, (rc, out.splitlines()[:1])
    poll("xrandr in the guest to show 1024x768", resized)
    log("resize: xrandr in the guest shows current 1024 x 768")
    lock_unlock(ctl, gl, x)
    rc, out = ctl.run("systemctl show -p NRestarts,ActiveState guestlink-spice.service; "
                      "systemctl show -p ExecMainStartTimestampMonotonic guestlinkd.service")
    log(f"after the SPICE traffic: {' '.join(out.split())}")
    if "NRestarts=0" not in out or "ActiveState=active" not in out:
        fail(f"guestlink-spice restarted or stopped during the SPICE traffic: {out}")
    log("all checks passed")


def uinput_pointer(ctl, guestlink, x):
    """The uinput tablet on a real kernel, as the session's Xorg (libinput) sees it: the device exists; MOUSE_STATE
    from the host (`guestlink mouse`) moves X's pointer, the first position after the agent started and the first
    after a resize included (a device X has not opened yet used to swallow it, issue 18); a click at that position
    arrives as a button press and release from the tablet (xinput test-xi2). xf86-input-libinput scales through
    0..65535 onto 0..width-1, so X may read a position one pixel lower: one pixel of slack."""
    rc, out = ctl.run("grep -A4 'N: Name=\"guestlink tablet\"' /proc/bus/input/devices")
    if rc != 0:
        _, devs = ctl.run("cat /proc/bus/input/devices; ls -l /dev/uinput")
        fail(f"no guestlink tablet in /proc/bus/input/devices:\n{devs}")
    log(f"uinput: /proc/bus/input/devices lists {' | '.join(l.strip() for l in out.splitlines())}")

    def xinput_lists():
        rc, out = ctl.run(f"{x} xinput list --name-only")
        return rc == 0 and "guestlink tablet" in out.splitlines(), (rc, out.strip()[-300:])
    poll("xinput list in the guest to show the guestlink tablet", xinput_lists, timeout=60)
    log("uinput: Xorg opened the guestlink tablet (xinput list)")

    def location():
        rc, out = ctl.run(f"{x} xdotool getmouselocation")
        m = re.search(r"x:(-?\d+) y:(-?\d+)", out)
        return (int(m.group(1)), int(m.group(2))) if rc == 0 and m else None

    def first_position_lands(px, py, what):
        before = location()
        o = guestlink("mouse", str(px), str(py))
        if o.returncode != 0:
            fail(f"guestlink mouse {px} {py}: {o.returncode} {o.stderr.strip()[-300:]}")
        # Only this one message: a pointer that stays put fails (one pixel of scaling slack).
        def landed():
            at = location()
            return at is not None and abs(at[0] - px) <= 1 and abs(at[1] - py) <= 1, at
        at = poll(f"the pointer at {px},{py} ({what}); it was at {before}", landed, timeout=30)
        log(f"uinput: {what}: one MOUSE_STATE {px},{py} -> xdotool getmouselocation {at} (before: {before})")

    first_position_lands(100, 150, "first position after the agent started")

    o = guestlink("resize", "800x600")
    if o.returncode != 0:
        fail(f"guestlink resize 800x600: {o.returncode} {o.stderr}")

    def resized():
        rc, out = ctl.run(f"{x} xrandr")
        return rc == 0 and "current 800 x 600" in out, (rc, out.splitlines()[:1])
    poll("xrandr in the guest to show 800x600", resized)
    # The tablet is recreated for the new size: wait until X has the new device before the host's next position,
    # as a client would only send one after the resize.
    time.sleep(3)
    first_position_lands(700, 500, "first position after a resize to 800x600")

    # A click there: `xinput test-xi2 --root` prints the X server's XI2 button events on the root window (there
    # is no other window), line-buffered into a file.
    rc, out = ctl.run(f"rm -f /tmp/glclicks; {x} setsid timeout 90 stdbuf -oL xinput test-xi2 --root "
                      ">/tmp/glclicks 2>&1 </dev/null & sleep 3")
    if rc != 0:
        fail(f"xinput test in the guest: {rc} {out}")
    o = guestlink("mouse", "700", "500", "--click", "left")
    if o.returncode != 0:
        fail(f"guestlink mouse --click left: {o.returncode} {o.stderr.strip()[-300:]}")

    def clicked():
        rc, out = ctl.run("cat /tmp/glclicks")
        press = re.search(r"\(ButtonPress\)\s+device: \d+ \((\d+)\)(?:\s+time: \d+)?\s+detail: 1\b", out)
        release = re.search(r"\(ButtonRelease\)\s+device: \d+ \((\d+)\)(?:\s+time: \d+)?\s+detail: 1\b", out)
        return bool(press and release), out.strip()[-400:]
    poll("xinput test-xi2 to see button 1 pressed and released", clicked, timeout=30)
    at = location()
    if at is None or abs(at[0] - 700) > 1 or abs(at[1] - 500) > 1:
        fail(f"the click moved the pointer away from 700,500: {at}")
    _, ids = ctl.run(f"{x} xinput list --id-only 'guestlink tablet'")
    _, out = ctl.run("cat /tmp/glclicks")
    src = set(re.findall(r"\(Button(?:Press|Release)\)\s+device: \d+ \((\d+)\)", out))
    if src != {ids.strip()}:
        fail(f"the button events came from device(s) {src}, not the guestlink tablet ({ids.strip()})")
    # Where X delivered the press: its root coordinates.
    m = re.search(r"\(ButtonPress\).*?root: (-?[\d.]+)/(-?[\d.]+)", out, re.S)
    if not m or abs(float(m.group(1)) - 700) > 1 or abs(float(m.group(2)) - 500) > 1:
        fail(f"the press was not at 700,500: {m.groups() if m else out[-400:]}")
    log(f"uinput: click at 700,500 arrived: ButtonPress and ButtonRelease of button 1 from the tablet (id {ids.strip()})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["full", "spice-only"], required=True)
    ap.add_argument("--qga")
    ap.add_argument("--spice")
    ap.add_argument("--control")
    ap.add_argument("--guestlink")
    ap.add_argument("--checks-log", required=True)
    ap.add_argument("--writer-log")
    ap.add_argument("--security-out")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    if args.mode == "spice-only":
        if not (args.spice and args.control and args.guestlink):
            ap.error("--mode spice-only needs --spice, --control and --guestlink")
        spice_only(args)
        return
    if not (args.qga and args.writer_log):
        ap.error("--mode full needs --qga and --writer-log")

    # 1. in-guest checks
    failures = in_guest_checks(args)

    # 2. guestlinkd answers on the port udev started it for
    agent = connect(args.qga, 120)
    if agent.cmd("guest-ping") != {}:
        fail("guest-ping did not return {}")
    info = agent.cmd("guest-info")
    log(f"guest-ping ok; guest-info version {info.get('version')!r}, "
        f"{len(info.get('supported_commands', []))} commands")

    enabled = {c["name"] for c in info.get("supported_commands", []) if c.get("enabled")}

    # 3. probes as children of guestlinkd (same sandbox as the daemon); glcheck's daemon-sandbox check covers the
    # daemon itself when this build has no guest-exec
    probes = {
        "proc-readable": ["/bin/sh", "-c", "head -c 64 /proc/1/status && test -r /proc/self/mountinfo"],
        "same-mount-namespace": ["/bin/sh", "-c", 'test "$(readlink /proc/1/ns/mnt)" = "$(readlink /proc/self/ns/mnt)"'],
        "root-writable": ["/bin/sh", "-c", "touch /etc/guestlink-probe && rm /etc/guestlink-probe"],
    }
    exec_hangs = False
    for name, argv in probes.items():
        if "guest-exec" not in enabled:
            log(f"probe {name}: skipped, guest-exec is not enabled in this guestlinkd")
            continue
        if exec_hangs:
            failures.append(f"probe {name}: not run, an earlier guest-exec never reported its exit")
            continue
        try:
            code, out, err = guest_exec(agent, argv, timeout=30)
        except TimeoutError as e:
            failures.append(f"probe {name}: {e}")
            exec_hangs = True
            continue
        except RuntimeError as e:
            if UNSUPPORTED in str(e):
                log(f"probe {name}: skipped, guest-exec is not implemented in this guestlinkd ({e})")
                continue
            failures.append(f"probe {name}: {e}")
            continue
        log(f"probe {name}: exit {code} {out.strip()[:80]!r} {err.strip()[:200]!r}")
        if code != 0:
            failures.append(f"probe {name} failed in guestlinkd's sandbox: exit {code} {err.strip()}")

    # 4. freeze the real root filesystem; the writer must stop, then resume after thaw
    if wait_writer_progress(args.writer_log, 0, 60) is None:
        fail("the test writer never reported progress")
    if agent.cmd("guest-fsfreeze-status") != "thawed":
        fail("filesystems not thawed before the freeze")
    t0 = time.monotonic()
    nfs = agent.cmd("guest-fsfreeze-freeze", timeout=120)
    log(f"guest-fsfreeze-freeze: {nfs} filesystem(s) frozen in {time.monotonic() - t0:.2f}s")
    try:
        if not isinstance(nfs, int) or nfs < 1:
            failures.append(f"guest-fsfreeze-freeze returned {nfs!r}")
        status = agent.cmd("guest-fsfreeze-status")
        if status != "frozen":
            failures.append(f"guest-fsfreeze-status is {status!r} while frozen")
        # a write that was in flight when the freeze started may still complete: allow one more report
        time.sleep(2)
        frozen_at = writer_count(args.writer_log)
        time.sleep(5)
        after = writer_count(args.writer_log)
        log(f"writer while frozen: {frozen_at} -> {after} over 5s")
        if after != frozen_at:
            failures.append(f"writer progressed while / was frozen ({frozen_at} -> {after})")
        # qemu-ga semantics: while frozen only ping/sync/info/fsfreeze-* are allowed
        try:
            agent.cmd("guest-file-open", {"path": "/var/lib/glwriter/progress", "mode": "r"})
            failures.append("guest-file-open was allowed while frozen")
        except RuntimeError as e:
            log(f"guest-file-open while frozen refused as expected: {e}")
    finally:
        thawed = agent.cmd("guest-fsfreeze-thaw", timeout=120)
    log(f"guest-fsfreeze-thaw: {thawed}")
    resumed = wait_writer_progress(args.writer_log, after, 30)
    if resumed is None:
        failures.append("writer did not resume within 30s after the thaw")
    else:
        log(f"writer resumed after thaw: {after} -> {resumed}")
    if agent.cmd("guest-fsfreeze-status") != "thawed":
        failures.append("guest-fsfreeze-status not thawed after thaw")
    h = None
    if {"guest-file-open", "guest-file-read", "guest-file-close"} <= enabled:
        # every append the writer reported made it to the file, in order, none lost across the freeze
        try:
            h = agent.cmd("guest-file-open", {"path": "/var/lib/glwriter/progress", "mode": "r"})
        except RuntimeError as e:
            if UNSUPPORTED not in str(e):
                raise
            log(f"progress file check skipped: guest-file-open is not implemented in this guestlinkd ({e})")
            h = None
    if h is not None:
        data = b""
        while True:
            r = agent.cmd("guest-file-read", {"handle": h, "count": 1 << 20})
            data += base64.b64decode(r.get("buf-b64", ""))
            if r.get("eof") or not r.get("count"):
                break
        agent.cmd("guest-file-close", {"handle": h})
        nums = [int(x) for x in data.split()]
        if nums[: after] != list(range(1, after + 1)):
            failures.append(f"progress file is not 1..{after} in order (len {len(nums)})")
        else:
            log(f"progress file read with guest-file-read: 1..{nums[-1]} in order, nothing lost across the freeze")
    agent.close()

    if failures:
        for f in failures:
            log(f"FAIL: {f}")
        sys.exit(1)
    log("all checks passed")


if __name__ == "__main__":
    main()
