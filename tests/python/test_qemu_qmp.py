"""qemu.qmp 0.0.6 as a QGA client (non-negotiating mode) against qemu-ga and guestlinkd.

Covers the three ways the wheel talks to an agent: async `QMPClient(negotiate=False)`, sync
`legacy.QEMUMonitorProtocol.connect(negotiate=False)` and `qmp-shell -N` on a pipe. Run:
`.venv/bin/pytest tests/python`.
"""

import asyncio
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from qemu.qmp import ExecuteError, QMPClient
from qemu.qmp.legacy import QEMUMonitorProtocol

ERRORS = [
    # (command, arguments, class, desc)
    ("guest-nonexistent", None, "CommandNotFound", "The command guest-nonexistent has not been found"),
    ("guest-ping", {"foo": 1}, "GenericError", "Parameter 'foo' is unexpected"),
    ("guest-sync", {"id": "x"}, "GenericError", "Invalid parameter type for 'id', expected: integer"),
    ("guest-shutdown", None, "CommandNotFound", "Command guest-shutdown has been disabled"),
]


def test_async_client(agent):
    async def run():
        q = QMPClient("guestlink-test")
        q.await_greeting = False
        q.negotiate = False
        await q.connect(agent.sock)
        try:
            sync_id = random.randrange(1, 2**31)
            assert await q.execute("guest-sync", {"id": sync_id}) == sync_id
            assert await q.execute("guest-ping") == {}
            info = await q.execute("guest-info")
            assert isinstance(info["version"], str)
            names = {c["name"] for c in info["supported_commands"]}
            assert {"guest-ping", "guest-get-osinfo", "guest-file-read"} <= names
            osinfo = await q.execute("guest-get-osinfo")
            assert osinfo["kernel-release"] == os.uname().release
            for cmd, args, cls, desc in ERRORS:
                with pytest.raises(ExecuteError) as exc:
                    await q.execute(cmd, args)
                assert exc.value.error_class == cls
                assert str(exc.value) == desc
                assert await q.execute("guest-ping") == {}
        finally:
            await q.disconnect()

    asyncio.run(run())


def test_legacy_sync_client(agent):
    q = QEMUMonitorProtocol(agent.sock)
    assert q.connect(negotiate=False) is None
    try:
        sync_id = random.randrange(1, 2**31)
        assert q.cmd("guest-sync", id=sync_id) == sync_id
        assert q.cmd("guest-ping") == {}
        assert "supported_commands" in q.cmd("guest-info")
        assert q.cmd("guest-get-osinfo")["machine"] == os.uname().machine
        tz = q.cmd("guest-get-timezone")
        assert isinstance(tz["offset"], int)
        for cmd, args, cls, desc in ERRORS:
            with pytest.raises(ExecuteError) as exc:
                q.cmd(cmd, **(args or {}))
            assert (exc.value.error_class, str(exc.value)) == (cls, desc)
            # cmd_raw returns the raw reply: the error object with class and desc, no id
            raw = q.cmd_raw(cmd, args)
            assert raw == {"error": {"class": cls, "desc": desc}}
    finally:
        q.close()


def test_qmp_shell_piped(agent):
    shell = Path(sys.executable).with_name("qmp-shell")
    script = "guest-ping\nguest-sync id=5\nguest-get-timezone\nguest-nonexistent\nguest-ping foo=1\n"
    out = subprocess.run([str(shell), "-N", agent.sock], input=script, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    replies = [json.loads(line[line.index("{"):]) for line in out.stdout.splitlines() if line.startswith("(QEMU) {")]
    assert replies[0] == {"return": {}}
    assert replies[1] == {"return": 5}
    assert isinstance(replies[2]["return"]["offset"], int)
    assert replies[3] == {"error": {"class": "CommandNotFound",
                                    "desc": "The command guest-nonexistent has not been found"}}
    assert replies[4] == {"error": {"class": "GenericError", "desc": "Parameter 'foo' is unexpected"}}
    assert len(replies) == 5
