"""A device runtime's refusal of a grid is marked as a launch error, so ``tack.launch`` ends its
traceback at the launch as it does for the CPU (issue 22). HIP's check runs before any driver
call, so it is exercised here without a GPU."""

import importlib

import pytest

from tack.backends import hip_runtime

launch_mod = importlib.import_module("tack.launch")


def test_hip_grid_too_large_is_a_launch_refusal():
    with pytest.raises(ValueError, match="larger than HIP launches") as info:
        hip_runtime.launch(None, {}, (), (2**32,))
    assert getattr(info.value, "tack_launch_error", False)
    assert launch_mod._launch_error(info.value)
