"""pytest fixtures: `agent` runs every test against qemu-ga and guestlinkd."""

import os

import pytest

import qga_agents


@pytest.fixture(params=["qemu-ga", "guestlinkd"])
def agent(request):
    kind = request.param
    if kind == "qemu-ga":
        binary = qga_agents.qemu_ga_path()
        if binary is None:
            if qga_agents.gate_on("GUESTLINK_REQUIRE_PEERS"):
                pytest.fail("qemu-ga is not installed but GUESTLINK_REQUIRE_PEERS is set")
            pytest.skip("*** qemu-ga is not installed (apt-get install qemu-guest-agent) ***")
    else:
        binary = qga_agents.guestlinkd_path()
    a = qga_agents.Agent(kind, binary)
    yield a
    if a.proc.poll() is not None:
        a.kill()
        pytest.fail(f"{kind} exited during the test")
    rc = a.stop()
    if kind == "guestlinkd":
        assert rc == 0, f"guestlinkd exit status after SIGTERM: {rc}"
