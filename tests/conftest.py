import os
import shutil

import pytest

from netlab import NetPair

REQUIRED = ("ip", "iptables", "tc")


def pytest_configure(config):
    if os.geteuid() != 0:
        raise pytest.UsageError("the integration tests load eBPF programs and create network namespaces: run them as root")
    missing = [t for t in REQUIRED if shutil.which(t) is None]
    if missing:
        raise pytest.UsageError(f"missing tools {missing}: run `cargo xtask setup`")


@pytest.fixture
def net():
    pair = NetPair()
    try:
        yield pair
    finally:
        pair.close()
