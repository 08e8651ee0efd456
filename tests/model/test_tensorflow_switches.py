"""`import dlrm` sets TensorFlow's oneDNN switch before TensorFlow loads, and leaves a user's own setting alone:
TensorFlow turns oneDNN on by itself only on some x86 CPUs, so without the switch the same model would run
on different kernels (and ~1.4x slower) depending on the machine."""
import json
import os
import platform
import subprocess
import sys

import pytest

from tests.support import ROOT

SWITCH = "TF_ENABLE_ONEDNN_OPTS"
X86 = platform.machine() in ("x86_64", "AMD64")

# Loads the package, then TensorFlow, and reports what TensorFlow decided.
PROBE = """
import json, os
import dlrm
import tensorflow
from tensorflow.python.util import _pywrap_util_port
print(json.dumps({"switch": os.environ.get("TF_ENABLE_ONEDNN_OPTS"), "onednn": _pywrap_util_port.IsMklEnabled()}))
"""


def tensorflow_state(switch):
    env = {key: value for key, value in os.environ.items() if key != SWITCH}
    if switch is not None:
        env[SWITCH] = switch
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not X86, reason="the switch is set on x86 only; TensorFlow's Arm builds choose for themselves")
def test_import_dlrm_turns_onednn_on_where_unset():
    assert tensorflow_state(None) == {"switch": "1", "onednn": True}


def test_a_users_setting_is_kept():
    assert tensorflow_state("0") == {"switch": "0", "onednn": False}
