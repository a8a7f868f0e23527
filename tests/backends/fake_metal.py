"""A simulated Metal for tests/backends/test_metal_runtime.py: the driver's side of the boundary
``tack.backends.metal_runtime._metal`` only, on a machine without macOS.

It answers the pyobjc calls the runtime makes, as pyobjc does (out-parameters returned as
``(result, error)``, ``contents().as_buffer(n)``...), and it really runs the MSL it is given:
``newLibraryWithSource:options:error:`` compiles the source with g++ against the host stand-in
for ``<metal_stdlib>`` (tests/backends/metal_shim) plus a dispatcher written from the entry's
own parameter list (each ``[[buffer(k)]]`` cast from the k-th bound buffer), and a dispatch
runs every thread of every threadgroup on the CPU.  Buffers are host memory.

Like Metal's validation layer, it fails a command buffer that leaves a buffer index the kernel
declares unbound, binds a params struct of the wrong size, or asks for more threads per
threadgroup than the pipeline allows; it records the compile options it was given.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metal_shim")
_BUILT = {}                             # source digest -> (library path, [(index, kind, type)])
_WORK = tempfile.TemporaryDirectory(prefix="tack-fake-metal-")     # removed at exit


class Size:
    def __init__(self, width, height, depth):
        self.width, self.height, self.depth = int(width), int(height), int(depth)


class NSError:
    def __init__(self, text):
        self.text = text

    def localizedDescription(self):
        return self.text


class _Contents:
    def __init__(self, mem):
        self.mem = mem

    def as_buffer(self, n):
        return memoryview(self.mem)[:n]


class Buffer:
    def __init__(self, mem):
        self.mem = mem                  # np.uint8 host memory

    def length(self):
        return self.mem.nbytes

    def contents(self):
        return _Contents(self.mem)


class CompileOptions:
    def __init__(self):
        self.fast_math, self.math_mode, self.language_version = True, 2, None

    @classmethod
    def alloc(cls):
        return cls()

    def init(self):
        return self

    def setFastMathEnabled_(self, on):
        self.fast_math = bool(on)

    def setLanguageVersion_(self, v):
        self.language_version = int(v)


class CompileOptions15(CompileOptions):
    """macOS 15's options: fastMathEnabled deprecated for mathMode (0 = safe)."""

    def setMathMode_(self, mode):
        self.math_mode = int(mode)


def _params_of(source: str, entry: str) -> list:
    """[(buffer index or None, 'ptr'|'ref'|'gid', C type)] of ``kernel void <entry>(...)``."""
    head = f"kernel void {entry}("
    at = source.index(head) + len(head)
    text = source[at:source.index(")\n{", at)]
    out = []
    for part in (p.strip() for p in text.split(",\n")):
        m = re.match(r"(.*?)\s*(\w+)\s*\[\[(buffer\((\d+)\)|thread_position_in_grid)\]\]$", part)
        assert m, part
        ctype = m.group(1)
        if m.group(4) is None:
            out.append((None, "gid", ctype))
        elif ctype.endswith("&"):
            out.append((int(m.group(4)), "ref", ctype[:-1].strip()))
        else:
            out.append((int(m.group(4)), "ptr", ctype))
    return out


def build(source: str, entry: str):
    """(ctypes library with tack_dispatch, params) of ``source`` compiled against the shim; or
    (None, the compiler's messages)."""
    digest = hashlib.sha256((entry + "\0" + source).encode()).hexdigest()
    if digest in _BUILT:
        path, params = _BUILT[digest]
        return ctypes.CDLL(path), params
    try:
        params = _params_of(source, entry)
    except (ValueError, AssertionError) as e:
        return None, f"program_source: error: no kernel function '{entry}' ({e})"
    args = []
    for index, kind, ctype in params:
        if kind == "gid":
            args.append("uint3{(uint)x, (uint)y, (uint)z}")
        elif kind == "ref":
            args.append(f"*({ctype}*)bufs[{index}]")
        else:
            args.append(f"({ctype})bufs[{index}]")
    sizes = [f"sizeof({t})" for _, k, t in params if k == "ref"]
    driver = (f'\nextern "C" long tack_params_size() {{ return {sizes[0] if sizes else 0}; }}\n'
              f'extern "C" void tack_dispatch(void** bufs, long n0, long n1, long n2) {{\n'
              f'  for (long z = 0; z < n2; z++) for (long y = 0; y < n1; y++) '
              f'for (long x = 0; x < n0; x++)\n    {entry}({", ".join(args)});\n}}\n')
    work = os.path.join(_WORK.name, digest[:16])
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "k.cpp")
    with open(src, "w") as f:
        f.write(source + driver)
    lib = os.path.join(work, "k.so")
    cxx = shutil.which("g++") or shutil.which("clang++")
    r = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-w", "-fno-fast-math",
                        f"-I{SHIM}", "-x", "c++", src, "-o", lib],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, r.stderr[-2000:]
    _BUILT[digest] = (lib, params)
    return ctypes.CDLL(lib), params


class Function:
    def __init__(self, library, name):
        self.library, self.name = library, name


class Library:
    def __init__(self, device, source, options):
        self.device, self.source, self.options = device, source, options
        self.names = re.findall(r"kernel void (\w+)\(", source)

    def functionNames(self):
        return list(self.names)

    def newFunctionWithName_(self, name):
        return Function(self, name) if name in self.names else None


class Pipeline:
    def __init__(self, function, lib, params):
        self.function, self.lib, self.params = function, lib, params
        self.lib.tack_dispatch.argtypes = [ctypes.c_void_p] + [ctypes.c_long] * 3
        self.lib.tack_params_size.restype = ctypes.c_long

    def maxTotalThreadsPerThreadgroup(self):
        return self.function.library.device.pipeline_max

    def threadExecutionWidth(self):
        return 32


class Encoder:
    def __init__(self, cb):
        self.cb, self.pipeline, self.bound, self.dispatch = cb, None, {}, None

    def setComputePipelineState_(self, p):
        self.pipeline = p

    def setBuffer_offset_atIndex_(self, buf, offset, index):
        assert offset == 0
        self.bound[int(index)] = buf.mem

    def setBytes_length_atIndex_(self, data, n, index):
        self.bound[int(index)] = np.frombuffer(bytes(data), np.uint8, count=n).copy()

    def dispatchThreadgroups_threadsPerThreadgroup_(self, groups, local):
        self.dispatch = (groups, local)

    def endEncoding(self):
        self.cb.encoded.append(self)


class CommandBuffer:
    def __init__(self, queue):
        self.queue, self.encoded, self._status, self._error = queue, [], 0, None

    def computeCommandEncoder(self):
        return Encoder(self)

    def commit(self):
        self._status = 2                # committed

    def waitUntilCompleted(self):
        for enc in self.encoded:
            problem = self._run(enc)
            if problem:
                self._status, self._error = 5, NSError(problem)
                return
        self._status = 4                # completed

    def _run(self, enc):
        p = enc.pipeline
        groups, local = enc.dispatch
        threads = local.width * local.height * local.depth
        if threads > p.maxTotalThreadsPerThreadgroup():
            return f"threadsPerThreadgroup {threads} > {p.maxTotalThreadsPerThreadgroup()}"
        bufs = (ctypes.c_void_p * 32)()
        for index, kind, ctype in p.params:
            if index is None:
                continue
            mem = enc.bound.get(index)
            if mem is None:
                return f"Compute Function({p.function.name}): missing buffer binding at index {index}"
            if kind == "ref" and mem.nbytes != p.lib.tack_params_size():
                return (f"Compute Function({p.function.name}): {ctype} at index {index} is "
                        f"{p.lib.tack_params_size()} bytes; {mem.nbytes} bound")
            bufs[index] = mem.ctypes.data
        self.queue.device.dispatched.append(((groups.width, groups.height, groups.depth),
                                             (local.width, local.height, local.depth)))
        p.lib.tack_dispatch(bufs, groups.width * local.width, groups.height * local.height,
                            groups.depth * local.depth)
        return None

    def status(self):
        return self._status

    def error(self):
        return self._error


class Queue:
    def __init__(self, device):
        self.device = device

    def commandBuffer(self):
        return CommandBuffer(self)


class Device:
    def __init__(self, name="Apple M2 (simulated)", pipeline_max=1024):
        self._name, self.pipeline_max = name, pipeline_max
        self.libraries, self.buffers, self.dispatched = [], 0, []

    def name(self):
        return self._name

    def maxThreadsPerThreadgroup(self):
        return Size(1024, 1024, 1024)

    def newCommandQueue(self):
        return Queue(self)

    def newLibraryWithSource_options_error_(self, source, options, error):
        assert error is None
        entry = re.findall(r"kernel void (\w+)\(", source)
        if not entry:
            return None, NSError("program_source: no kernel function")
        lib, params = build(str(source), entry[0])
        if lib is None:
            return None, NSError(f"Compilation failed: \n\n{params}")
        library = Library(self, source, options)
        library.built = (lib, params)
        self.libraries.append(library)
        return library, None

    def newComputePipelineStateWithFunction_error_(self, function, error):
        lib, params = function.library.built
        return Pipeline(function, lib, params), None

    def newBufferWithBytes_length_options_(self, data, n, options):
        assert options == 0             # shared storage: the CPU reads it back
        self.buffers += 1
        return Buffer(np.frombuffer(data, np.uint8, count=n).copy())

    def newBufferWithLength_options_(self, n, options):
        self.buffers += 1
        return Buffer(np.zeros(n, np.uint8))


class FakeMetal:
    """The module the runtime imports as ``Metal``."""

    MTLCompileOptions = CompileOptions15

    def __init__(self, devices=None):
        self.devices = [Device()] if devices is None else devices

    def MTLCopyAllDevices(self):
        return list(self.devices)

    def MTLCreateSystemDefaultDevice(self):
        return self.devices[0] if self.devices else None

    @staticmethod
    def MTLSizeMake(w, h, d):
        return Size(w, h, d)
