"""The lowered kernel (tack.ir): self-contained, serialized without pickle, and compilable from its bytes alone."""

import json
import math
import struct
import subprocess
import sys

import numpy as np
import pytest

import tack
import tack.types
from tack.backends.cpu import host_target
from tack.codegen import generate
from tack.compiler import lower
from tack.ir import LoweredKernel
from tack.argtypes import typeof_arg
from tack.specialize import specialize

from .util import marked_line

FILE = __file__
WEIGHTS = tack.constant(np.array([[0.25, 0.5], [1.5, -2.0]], dtype=np.float32))
MASK = tack.constant(np.array([True, False, True]))
OFFSET = tack.constant(7)
GAIN = tack.constant(np.float32(1.5))


class Cubic:
    bias = 0.25

    @staticmethod
    def shape_fn(x):
        return x * x * x


@tack.func
def inner(x, k):
    return WEIGHTS[k % 2, (k // 2) % 2] * x + OFFSET


@tack.func
def middle(policy, x, k):
    a, b = inner(x, k), policy.shape_fn(x)
    return a + b + policy.bias, MASK[k % 3]


@tack.kernel
def k_rt(policy, x, out, flags, scale):
    i = tack.tid()
    v, m = middle(policy, x[i], i)
    out[i] = v * scale * GAIN  # ERR v * scale
    flags[i] = m


def pack_slots(values, types, dims):
    """The entry point's argument block: 8-byte slots for each argument, then the three grid extents."""
    fmt = {"bool": "?7x", "int32": "i4x", "int64": "q", "uint32": "I4x", "uint64": "Q",
           "float32": "f4x", "float64": "d"}
    parts = []
    for v, t in zip(values, types):
        if isinstance(v, np.ndarray):        # data pointer, extents (not static), strides (layout A)
            parts.append(struct.pack("<Q", v.ctypes.data))
            if t.shape is None:
                parts.append(struct.pack(f"<{v.ndim}q", *v.shape))
            if t.layout == "A":
                parts.append(struct.pack(f"<{v.ndim}q", *(s // v.itemsize for s in v.strides)))
        else:
            parts.append(struct.pack("<" + fmt[t.name], v))
    d = tuple(dims) + (1,) * (3 - len(dims))
    parts.append(struct.pack("<qqq", *d))
    return b"".join(parts)


def compile_and_run(lowered, values, dims, prefix):
    """Specialize, generate, compile and run a lowered kernel on the host, without tack.launch."""
    types = tuple(typeof_arg(lowered.name, p, v) for p, v in zip(lowered.kernel.params, values))
    typed = specialize(lowered, types, len(dims))
    target = host_target()
    gen = generate(typed, target, prefix)
    fn = target.load(target.emit_object(target.optimize(gen.module)), gen.entry)
    fn(pack_slots(values, types, dims), 0, dims[0])


def inputs():
    x = np.linspace(-2, 2, 9)
    return x, np.zeros(9), np.zeros(9, bool)


def reference():
    x, out, flags = inputs()
    tack.launch(k_rt, dim=9, args=(Cubic, x, out, flags, 2.0))
    return out, flags


def test_the_json_written_and_read_without_recursion_is_jsons():
    """Where json's C codec gives up (Python 3.12 caps its recursion at about 1,500 levels),
    the lowered kernel's JSON is written and read by a loop: the same text as json.dumps, the
    same values as json.loads, malformed text refused, and no deeper than limits.JSON_DEPTH.
    Tested on every Python, though only 3.12 needs it for kernels the bounds allow."""
    from tack import ir
    from tack.limits import JSON_DEPTH
    low = lower(k_rt, {"policy": Cubic})
    data = low.to_bytes()
    hlen = struct.unpack_from("<QI", data, 8)[0]
    text = data[20:20 + hlen].decode()
    doc = json.loads(text)
    assert ir._dumps_flat(doc) == text
    assert ir._loads_flat(text) == doc
    odd = {"s": "q\"\\\u00e9\n", "f": [1.5, -0.0, 1e300, float("inf"), float("-inf")], "e": [{}, []],
           "b": [True, False, None], "n": [0, -7, 2**70], 3: 1, 2.5: 2, None: 3, False: 4}
    assert ir._dumps_flat(odd) == json.dumps(odd, separators=(",", ":"))
    assert ir._loads_flat(json.dumps(odd, indent=1)) == json.loads(json.dumps(odd, indent=1))
    nested = ir._loads_flat(ir._dumps_flat(ir._loads_flat("[" * 5000 + "]" * 5000)))
    for _ in range(4999):
        (nested,) = nested
    assert nested == []
    for bad in ["[1 2]", "[1,]", "[,1]", '{"a" 1}', '{"a":1,}', '{1:2}', "[", "]", "[1]]", "",
                "tru", "[1],", '{"a":1 "b":2}', "[}", "{]"]:
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            ir._loads_flat(bad)
    with pytest.raises(RecursionError):
        ir._loads_flat("[" * (JSON_DEPTH + 1) + "]" * (JSON_DEPTH + 1))


def test_round_trip_is_exact():
    """from_bytes(to_bytes(k)) serializes back to the same bytes and fingerprint, with the same functions, constants and templates."""
    low = lower(k_rt, {"policy": Cubic})
    data = low.to_bytes()
    back = LoweredKernel.from_bytes(data)
    assert back.to_bytes() == data
    assert back.fingerprint() == low.fingerprint()
    assert back.name == "k_rt" and back.kernel.params == ["x", "out", "flags", "scale"]
    assert list(back.functions) == list(low.functions)
    assert back.templates == low.templates
    assert back.debug is False
    for cid, c in low.constants.items():
        got = back.constants[cid].value
        if isinstance(c.value, np.ndarray):
            assert got.dtype == c.value.dtype and got.shape == c.value.shape
            np.testing.assert_array_equal(got, c.value)
            assert not got.flags.writeable
        else:
            assert got == c.value and type(got) is type(c.value)


def test_bytes_hold_no_pickle():
    """The serialized form is a magic, a JSON document and raw array bytes: no pickle stream."""
    data = lower(k_rt, {"policy": Cubic}).to_bytes()
    assert data[:8] == b"TACKLOW1"
    hlen, nblobs = struct.unpack_from("<QI", data, 8)
    doc = json.loads(data[20:20 + hlen])
    assert doc["kernel"]["name"] == "k_rt" and nblobs == len(doc["arrays"]) == 2
    assert b"\x80\x04\x95" not in data and b"\x80\x05\x95" not in data


def test_deserialized_kernel_compiles_and_runs_identically():
    """A kernel rebuilt from bytes compiles through specialize, generate and the CPU target and gives the launch's results."""
    want_out, want_flags = reference()
    back = LoweredKernel.from_bytes(lower(k_rt, {"policy": Cubic}).to_bytes())
    x, out, flags = inputs()
    compile_and_run(back, (x, out, flags, 2.0), (9,), "tack_test_ir_rt")
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(flags, want_flags)


SUBPROCESS = r"""
import json, struct, sys
import numpy as np
from tack.ir import LoweredKernel
from tack.argtypes import typeof_arg
from tack.specialize import specialize
from tack.codegen import generate
from tack.backends.cpu import host_target
low = LoweredKernel.from_bytes(sys.stdin.buffer.read())
x = np.linspace(-2, 2, 9); out = np.zeros(9); flags = np.zeros(9, bool)
values = (x, out, flags, 2.0)
types = tuple(typeof_arg(low.name, p, v) for p, v in zip(low.kernel.params, values))
gen = generate(specialize(low, types, 1), host_target(), "tack_sub")
t = host_target()
fn = t.load(t.emit_object(t.optimize(gen.module)), gen.entry)
slots = struct.pack("<QqQqQqdqqq", x.ctypes.data, 9, out.ctypes.data, 9, flags.ctypes.data, 9, 2.0, 9, 1, 1)
fn(slots, 0, 9)
assert not any(m == "tests" or m.startswith("tests.") for m in sys.modules)
print(json.dumps([out.tolist(), flags.tolist()]))
"""


def test_bytes_alone_compile_in_another_process():
    """A fresh process that never imports the kernel's module compiles and runs it from the bytes alone."""
    want_out, want_flags = reference()
    data = lower(k_rt, {"policy": Cubic}).to_bytes()
    res = subprocess.run([sys.executable, "-c", SUBPROCESS], input=data, capture_output=True,
                         cwd="/", timeout=120)
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    got_out, got_flags = json.loads(res.stdout)
    np.testing.assert_array_equal(got_out, want_out)
    np.testing.assert_array_equal(got_flags, want_flags)


def test_deserialized_kernel_errors_point_at_source():
    """A type error found when specializing a deserialized kernel still names the file, line and source text."""
    back = LoweredKernel.from_bytes(lower(k_rt, {"policy": Cubic}).to_bytes())
    x, out, flags = inputs()
    types = tuple(typeof_arg("k_rt", p, v) for p, v in zip(back.kernel.params, (x, out, flags)))
    types += (tack.types.Tuple((tack.types.float64,)),)      # a tuple where a number is multiplied
    with pytest.raises(tack.CompileError) as ei:
        specialize(back, types, 1)
    lineno, code, _ = marked_line(k_rt)
    msg = str(ei.value)
    assert "k_rt" in msg and f'File "{FILE}", line {lineno}' in msg and code.strip() in msg


class Holder:
    @tack.kernel
    def k_held(x, out):
        i = tack.tid()
        out[i] = x[i] << 1


def test_deserialized_kernel_errors_name_the_kernel_as_lowered():
    """A specialization error of a kernel defined in a class names it by its qualified name
    (``Holder.k_held``) whether its lowered kernel was just made or read back from bytes (the
    cache's copy): the bytes kept only the bare name, so a process that found the lowered
    kernel on disk named the kernel 'k_held' where a cold compile named 'Holder.k_held'."""
    low = lower(Holder.k_held)
    back = LoweredKernel.from_bytes(low.to_bytes())
    assert back.kernel.source.name == low.kernel.source.name == "Holder.k_held"
    types = (tack.types.Array(tack.types.float32, 1, "C", True),) * 2
    msgs = []
    for lk in (low, back):
        with pytest.raises(tack.CompileError) as ei:
            specialize(lk, types, 1)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1] and "in kernel 'Holder.k_held'" in msgs[0]


def _nan(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


class Nans:
    NEG = _nan(0xFFF8000000000000)          # -NaN
    PAYLOAD = _nan(0x7FF8000000000123)      # a NaN with a payload


NEG_NAN = tack.constant(_nan(0xFFF8000000000000))


@tack.kernel
def k_nans(policy, out):
    out[0] = policy.NEG
    out[1] = policy.PAYLOAD
    out[2] = NEG_NAN
    out[3] = math.copysign(1.0, policy.NEG)


def test_nans_keep_their_bits_round_trip():
    """A NaN's sign and payload (a template's attribute, a tack.constant) survive the bytes, and
    the kernel read back computes what the one just lowered does: JSON's NaN is one NaN, so a
    process that found the lowered kernel on disk stored +NaN and copysign gave 1.0 where a
    cold compile stored -NaN and gave -1.0."""
    low = lower(k_nans, {"policy": Nans})
    data = low.to_bytes()
    back = LoweredKernel.from_bytes(data)
    assert back.to_bytes() == data
    got = []
    for k, lk in enumerate((low, back)):
        out = np.zeros(4)
        compile_and_run(lk, (out,), (1,), f"tack_test_ir_nans{k}")
        got.append(out.view(np.uint64).tolist())
    assert got[0] == got[1] == [0xFFF8000000000000, 0x7FF8000000000123, 0xFFF8000000000000,
                                0xBFF0000000000000]
    assert b"nans" not in lower(k_rt, {"policy": Cubic}).to_bytes()     # only where one is needed


def test_debug_flag_survives_round_trip():
    """A debug lowered kernel stays a debug kernel after serialization."""
    low = lower(k_rt, {"policy": Cubic}, True)
    assert LoweredKernel.from_bytes(low.to_bytes()).debug is True


# -- damaged bytes ---------------------------------------------------------------------------

def good_bytes():
    return lower(k_rt, {"policy": Cubic}).to_bytes()


def loads_or_value_error(data):
    """Load ``data``; a failure must be a ValueError.  Returns True if it loaded."""
    try:
        LoweredKernel.from_bytes(data)
    except ValueError:
        return False
    return True


def test_bad_magic_raises_value_error():
    """Bytes that do not start with the magic raise ValueError."""
    data = good_bytes()
    for bad in (b"", b"TACK", b"NOTTACK1" + data[8:], b"\x00" * 64):
        with pytest.raises(ValueError):
            LoweredKernel.from_bytes(bad)


def test_truncated_bytes_raise_value_error():
    """Every truncation of the bytes raises ValueError (never another exception)."""
    data = good_bytes()
    cuts = sorted(set(list(range(0, 40)) + list(range(40, len(data), 7)) + [len(data) - 1]))
    for n in cuts:
        assert not loads_or_value_error(data[:n]), f"truncated to {n} bytes loaded"


def test_trailing_bytes_and_wrong_format_raise_value_error():
    """Trailing bytes or another format number raise ValueError."""
    data = good_bytes()
    with pytest.raises(ValueError):
        LoweredKernel.from_bytes(data + b"\x00")
    hlen, _ = struct.unpack_from("<QI", data, 8)
    head = data[20:20 + hlen].replace(b'"format":1', b'"format":2')
    assert len(head) == hlen
    with pytest.raises(ValueError):
        LoweredKernel.from_bytes(data[:20] + head + data[20 + hlen:])


def test_corrupted_bytes_load_or_raise_value_error():
    """Any single damaged byte either still loads or raises ValueError, never KeyError, TypeError or struct.error."""
    data = good_bytes()
    failures = []
    for pos in range(len(data)):
        for value in (0x00, 0x7B, 0xFF):
            if data[pos] == value:
                continue
            damaged = data[:pos] + bytes([value]) + data[pos + 1:]
            try:
                loads_or_value_error(damaged)
            except Exception as e:      # noqa: BLE001 - collect them all for the message
                failures.append((pos, value, type(e).__name__))
    assert not failures, f"{len(failures)} damaged inputs raised other exceptions, e.g. {failures[:5]}"


def test_a_negated_nan_is_not_folded():
    """``-math.nan`` stays a negation (a folded NaN would lose its sign in the lowered kernel's
    JSON, in a process that loads it from the cache), while ``-(1 / 3)`` is one literal."""
    import math

    import tack
    from tack.compiler import lower

    @tack.kernel
    def k_neg_nan(out):
        out[0] = -math.nan
        out[1] = -(1 / 3)

    body = lower(k_neg_nan, {}).kernel.body
    assert body[0][3][0] == "unop" and body[0][3][3][0] == "const"
    assert body[1][3][0] == "const" and body[1][3][2] == -(1 / 3)
