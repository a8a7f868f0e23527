"""``device_args.Staging``, the host side every device runtime shares (OpenCL, Level Zero, CUDA,
HIP, Metal): NumPy arrays put in device buffers and copied back.  Here the "device" is NumPy
memory of its own, so the rules hold whatever runtime this machine has."""

import numpy as np
import pytest

from tack.backends.device_args import Staging, host_copy


class Spec:
    def __init__(self, writable):
        self.writable = writable


def launch(arrays, writes, writable=None):
    """Stage ``arrays`` (their specs writable, or as ``writable`` says), let ``writes`` change
    the device buffers ({argument: {index: value}}), copy back as a runtime does."""
    staging, buffers = Staging(), []

    def upload(host):
        buffers.append(host.copy())
        return len(buffers) - 1, host
    refs = [staging.stage(Spec(True if writable is None else writable[k]), a,
                          a.flags.c_contiguous, a.flags.f_contiguous, upload)[0]
            for k, a in enumerate(arrays)]
    for k, changes in writes.items():
        for index, value in changes.items():
            buffers[refs[k]].reshape(-1)[index] = value
    for _, buf, host in staging.back:       # the runtime's download
        host.reshape(-1)[:] = buffers[buf].reshape(-1)
    staging.finish()


def test_overlapping_written_arrays_come_back_where_changed():
    y = np.zeros(6)
    launch([y[0:4], y[2:6]], {0: {0: 1.0, 1: 1.0, 2: 1.0}, 1: {3: 2.0}})
    assert y.tolist() == [1, 1, 1, 0, 0, 2]             # y[2]: the first's write kept


def test_a_value_written_back_unchanged_in_bits_is_not_a_change():
    """-0.0 written over 0.0 is a change (its bits), NaN over the same NaN is not."""
    y = np.array([0.0, np.nan, 5.0, 7.0])
    launch([y[0:3], y[1:4]], {0: {0: -0.0}, 1: {2: 9.0}})
    assert np.signbit(y[0]) and np.isnan(y[1]) and y[2] == 5.0 and y[3] == 9.0


def test_disjoint_views_and_one_array_twice_are_copied_back_whole():
    """Views that do not overlap (``w[::2]`` and ``w[1::2]``) and the same array passed twice
    (one buffer) are copied back as before: whole, nothing compared."""
    w = np.arange(8.0)
    launch([w[::2], w[1::2]], {0: {0: 10.0}, 1: {3: 20.0}})
    assert w.tolist() == [10, 1, 2, 3, 4, 5, 6, 20]
    y = np.arange(4.0)
    launch([y, y], {1: {2: 9.0}})
    assert y.tolist() == [0, 1, 9, 3]


def test_a_read_only_overlapping_array_is_not_copied_back():
    """An array the kernel cannot write is never copied back: a written one overlapping it is
    copied back whole."""
    y = np.arange(6.0)
    launch([y[0:4], y[2:6]], {0: {3: 30.0}}, writable=[True, False])
    assert y.tolist() == [0, 1, 2, 30, 4, 5]


@pytest.mark.parametrize("array, says", [
    (np.array([object(), [3]], dtype=object), "not a 1-D object array: use bool, int32/64"),
    (np.zeros(3, np.int8), "not a 1-D int8 array"),
    (np.zeros((1,) * 5), "not a 5-D float64 array"),
    (np.zeros(3, "M8[s]"), "not a 1-D datetime64[s] array"),
    (np.zeros(3, ">f8"), "its byte order is not this machine's"),
    (np.ma.masked_array([1.0, 2.0], mask=[0, 1]), "no NumPy masked array: its mask would be lost"),
])
def test_to_device_refuses_what_no_kernel_takes(array, says):
    """Every runtime's ``to_device`` copies through ``host_copy``.  It took any array: an object
    array's pointers were copied to the device, and reading them back crashed the process; an
    int8 or a 5-D one failed only at launch ("argument 'a' is a OpenCLArray", as if device
    arrays were refused), and a masked one lost its mask."""
    with pytest.raises(TypeError, match="to_device takes") as e:
        host_copy(array)
    assert says in str(e.value), str(e.value)


def test_to_device_of_a_device_array_copies_it():
    """A device array given to ``to_device`` (this device's or another's) was read as a 0-d
    object array: "takes an array of rank 1 or more, not a scalar".  Its contents are copied."""
    class DeviceArray:                      # as Tack's device arrays are: layout and numpy()
        layout = "F"

        def numpy(self):
            return np.asfortranarray(np.arange(6.0).reshape(2, 3))
    a, host, layout = host_copy(DeviceArray())
    assert layout == "F" and host.tolist() == [[0, 1, 2], [3, 4, 5]]
