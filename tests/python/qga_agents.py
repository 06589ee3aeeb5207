"""Start qemu-ga or guestlinkd on a private unix socket for the Python client tests.

Same safety rules as the Rust harness (tests/src/agent.rs): the dangerous commands are always blocked, the
statedir and config file are private, the agent is stopped by its own PID (qemu-ga: 0.2 s after the last
client disconnected, with a SIGKILL fallback for its SIGTERM deadlock).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

WORKSPACE = Path(__file__).resolve().parents[2]


def blocked_rpcs(path=WORKSPACE / "tests" / "qemu-ga-blocked-rpcs.txt"):
    """The suite's one block list (tests/qemu-ga-blocked-rpcs.txt, also read by the Rust harness and the benchmarks)."""
    names = (line.split("#", 1)[0].strip() for line in Path(path).read_text().splitlines())
    return [n for n in names if n]


def gate_on(var="GUESTLINK_REQUIRE_PEERS"):
    """The Rust harness's gate rule (tests/src/gate.rs): on when set to anything but "" or "0"."""
    return os.environ.get(var, "") not in ("", "0")


DANGEROUS = blocked_rpcs()
_built = {}


def qemu_ga_path():
    for p in ("/usr/sbin/qemu-ga", "/usr/bin/qemu-ga"):
        if os.path.exists(p):
            return p
    return None


def guestlinkd_path(release=False):
    """$GUESTLINKD, else build the guest-daemon package (once per process) and use target/{debug,release}/guestlinkd."""
    if os.environ.get("GUESTLINKD"):
        return os.environ["GUESTLINKD"]
    if release not in _built:
        cmd = ["cargo", "build", "-p", "guest-daemon", "--bin", "guestlinkd"] + (["--release"] if release else [])
        subprocess.run(cmd, cwd=WORKSPACE, check=True)
        target = Path(os.environ.get("CARGO_TARGET_DIR", WORKSPACE / "target"))
        _built[release] = str(target / ("release" if release else "debug") / "guestlinkd")
    return _built[release]


class Agent:
    """A running agent; `kind` is "qemu-ga" or "guestlinkd"."""

    def __init__(self, kind, binary, extra_args=()):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="guestlink-py-")
        self.sock = os.path.join(self.dir, "qga.sock")
        state = os.path.join(self.dir, "state")
        os.mkdir(state)
        conf = os.path.join(self.dir, "qemu-ga.conf")
        Path(conf).write_text("[general]\n")
        args = [binary, "-m", "unix-listen", "-p", self.sock, "-t", state, "-b", ",".join(DANGEROUS)]
        if kind == "guestlinkd":
            args += ["-c", conf]
        args += list(extra_args)
        self.stderr = open(os.path.join(self.dir, "stderr.log"), "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     cwd=self.dir, env=dict(os.environ, QGA_CONF=conf))
        deadline = time.monotonic() + 10
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{kind} did not create its socket: {Path(self.stderr.name).read_text()}")
            time.sleep(0.02)

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        """SIGTERM and return the exit status (None if it had to be killed)."""
        if self.kind == "qemu-ga":
            time.sleep(0.2)
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        self._cleanup()
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._cleanup()

    def _cleanup(self):
        self.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
