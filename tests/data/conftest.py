"""Fixtures shared by the data tests."""
import pytest


@pytest.fixture(params=["compiled", "numpy"])
def decode_kernels(request, monkeypatch):
    """Run the test with the compiled decode kernels, then again with the portable numpy ones forced
    (what a CPU without F16C, or aarch64, gets)."""
    from dlrm.data.reader import decode

    machine, features = ("x86_64", {"f16c": True}) if request.param == "compiled" else ("aarch64", {})
    monkeypatch.setattr(decode, "host_kernels", lambda: decode.select_kernels(machine, features))
    return request.param
