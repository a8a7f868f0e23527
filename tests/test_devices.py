"""tack.devices() lists what this process can launch on, each with the target it compiles for;
tack.to_device() keeps an array on a device across launches."""

import numpy as np
import pytest

import tack
from tack.backends import opencl_runtime, runtime


def test_the_cpu_comes_first_with_its_archspec_target():
    devs = tack.devices()
    assert devs[0].device == "cpu" and devs[0].target == f"cpu:{runtime('cpu').host_arch()}"


def test_only_devices_that_are_there_are_listed():
    """A runtime whose driver is missing (CUDA, HIP, Level Zero here) lists nothing; OpenCL's
    devices are listed with the SPIR-V target they compile for."""
    listed = {d.device.split(":")[0] for d in tack.devices()}
    for kind in ("cuda", "hip", "level_zero", "metal"):
        assert (kind in listed) == runtime(kind).available()
    if opencl_runtime.available():
        assert any(d.device == "opencl:0" and d.target == "spirv:generic" for d in tack.devices())


def test_to_device_on_the_cpu_is_the_array_itself():
    a = np.arange(3.0)
    assert tack.to_device(a, "cpu") is a


@tack.kernel
def k_twice(a):
    i = tack.tid()
    a[i] = a[i] * 2.0


@pytest.mark.skipif(not opencl_runtime.available(), reason="no OpenCL device: run ci/install-opencl.sh")
def test_a_device_array_stays_on_the_device_across_launches():
    """Two launches on an OpenCL device array: no copy back in between, and .numpy() gives the
    result of both."""
    d = tack.to_device(np.arange(4.0), "opencl")
    tack.launch(k_twice, 4, (d,), device="opencl")
    tack.launch(k_twice, 4, (d,), device="opencl")
    np.testing.assert_array_equal(d.numpy(), np.arange(4.0) * 4)


@pytest.mark.skipif(not opencl_runtime.available(), reason="no OpenCL device: run ci/install-opencl.sh")
def test_a_device_array_to_the_cpu_comes_back_as_a_numpy_array():
    """``to_device(d, "cpu")`` of an OpenCL device array gave the device array back, which a CPU
    launch then refused: it is now the array's copy on the host, which the launch takes."""
    d = tack.to_device(np.arange(4.0), "opencl")
    h = tack.to_device(d, "cpu")
    assert type(h) is np.ndarray
    tack.launch(k_twice, 4, (h,))
    np.testing.assert_array_equal(h, np.arange(4.0) * 2)
    np.testing.assert_array_equal(d.numpy(), np.arange(4.0))     # a copy: the device's unchanged


@pytest.mark.skipif(not opencl_runtime.available(), reason="no OpenCL device: run ci/install-opencl.sh")
@pytest.mark.parametrize("name", ["opencl:-1", "opencl:-5", "opencl:+0", "opencl: 0", "opencl:0_0", "opencl:٠"])
def test_a_device_index_that_is_not_digits_is_refused(name):
    """``int()`` took these: -5 raised IndexError from inside the runtime, and -1 ran on the last
    device under a second context of its own, whose arrays "lived on" a device of the same name
    as the kernel's.  Only digits name an index now, as the message says."""
    with pytest.raises(ValueError, match=r"not an OpenCL device name: .* \(use 'opencl' or 'opencl:<index>'\)"):
        tack.launch(k_twice, 4, (np.arange(4.0),), device=name)
    with pytest.raises(ValueError, match="not an OpenCL device name"):
        tack.to_device(np.arange(4.0), name)


@pytest.mark.skipif(not opencl_runtime.available(), reason="no OpenCL device: run ci/install-opencl.sh")
def test_a_device_array_on_the_cpu_is_a_clear_error():
    """A device array given to a CPU launch is refused naming the argument (its memory is not
    this process's to read), even after the same kernel ran on the CPU with a NumPy array."""
    tack.launch(k_twice, 4, (np.arange(4.0),))
    d = tack.to_device(np.arange(4.0), "opencl")
    with pytest.raises(TypeError, match="argument 'a' is an array on a device"):
        tack.launch(k_twice, 4, (d,))
