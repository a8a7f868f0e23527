"""A launch's arguments -> their Tack types, split into template bindings and values.

Every compile starts here: a launch's miss (``tack.launch``), ``tack.aot`` and
the site tool.  ``typed_args`` types each argument (an array's dtype, rank,
layout and writability, its shape where the kernel compiles it in; a class
is a template), and splits the template bindings, which the front end
specializes on, from the value arguments, which are compiled and passed.
What it costs is a few attribute reads per argument: a cached kernel's first
launch in a process runs it.
"""

import numpy as np

from . import types as T
from .fingerprints import class_fingerprint
from .language import is_masked


class TypedArgs:
    """A launch's arguments, typed: every argument's type, ``templates`` ({param: class}, what
    the kernel is lowered for), and of the other arguments their types, parameter names and
    positions in ``args`` (what is compiled and passed).

    A plain class, not a ``typing.NamedTuple``: ``import tack`` loads this module, and making a
    NamedTuple class costs about 0.2 ms there."""

    __slots__ = ("argtypes", "templates", "value_types", "value_params", "arg_index")

    def __init__(self, argtypes, templates, value_types, value_params, arg_index):
        self.argtypes, self.templates, self.value_types = argtypes, templates, value_types
        self.value_params, self.arg_index = value_params, arg_index

    def __repr__(self):
        return (f"TypedArgs(argtypes={self.argtypes!r}, templates={self.templates!r}, "
                f"value_types={self.value_types!r})")


_CO_STARS = 0x04 | 0x08        # inspect.CO_VARARGS | inspect.CO_VARKEYWORDS (inspect is heavy)


def typed_args(kernel, args) -> TypedArgs:
    """The arguments of ``kernel`` launched with ``args``, typed; TypeError for a wrong argument
    count or an argument Tack cannot take, naming the parameter."""
    params = kernel.params
    if len(args) != len(params):
        code = kernel.py_func.__code__
        defaults = getattr(kernel.py_func, "__defaults__", None)
        more = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
        star = code.co_flags & _CO_STARS
        note = (f"; its default value{'s' if len(defaults) > 1 else ''} cannot be used: Tack "
                "kernels take plain positional parameters only (no defaults), so pass every "
                "argument") if defaults else ""
        if more or star:                # the front end refuses the kernel: say why now
            what = f"keyword-only parameter '{more[0]}'" if more else "*args or **kwargs"
            note = (f"; it has {what}, which Tack kernels cannot take: they take plain "
                    "positional parameters only")
        raise TypeError(f"kernel '{kernel.__qualname__}' takes {len(params)} arguments "
                        f"({', '.join(params)}), got {len(args)}{note}")
    argtypes = argtypes_of(kernel, args)
    values = [i for i, t in enumerate(argtypes) if not isinstance(t, T.Template)]
    return TypedArgs(argtypes,
                     {p: a for p, a, t in zip(params, args, argtypes) if isinstance(t, T.Template)},
                     tuple(argtypes[i] for i in values), [params[i] for i in values], values)


def why_not_taken(a, name: str = "a", launch: bool = True) -> str:
    """What to do about an array ``T.typeof_array`` refuses (``name``: the parameter's; ``launch``:
    a launch's argument, which a kernel may write, not ``to_device``'s, a copy anyway)."""
    copied = ("; a kernel writing to it then writes to the copy: copy the results back "
              f"({name}[...] = copy)") if launch else ""
    if T.from_dtype(a.dtype) is not None and 1 <= a.ndim <= 4:
        if not a.dtype.isnative:
            return ("its byte order is not this machine's: pass a copy in this machine's, "
                    f"{name}.astype({name}.dtype.newbyteorder('='))" + copied)
        return (f"its strides are not multiples of its itemsize ({a.dtype.itemsize}): pass a "
                f"copy (np.ascontiguousarray({name}))" + copied)
    if a.ndim == 0 and T.from_dtype(a.dtype) is not None:
        return f"a 0-d array is not an array a kernel indexes: pass its number ({name}[()])"
    return "use bool, int32/64, uint32/64 or float32/64 with 1-4 dimensions"


def argtypes_of(kernel, args):
    """The Tack types of a launch's arguments (with their shapes where the kernel compiles them in)."""
    name, static = kernel.__qualname__, kernel.static_shape
    return [typeof_arg(name, p, a, p in static) for p, a in zip(kernel.params, args)]


def typeof_arg(kernel_name, param, a, static=False):
    """The Tack type of one launch argument; TypeError naming the parameter otherwise.

    ``static``: an array's shape is compiled in.
    """
    if isinstance(a, np.ndarray):
        if type(a) is not np.ndarray and is_masked(a):
            raise TypeError(f"kernel '{kernel_name}': argument '{param}' is a NumPy masked array, "
                            "whose mask a kernel cannot see (it would read and write the values "
                            f"under it as any others): pass {param}.data to read and write the "
                            f"values under the mask as they are, or {param}.filled(value), a copy "
                            "whose masked elements hold value")
        t = T.typeof_array(a, static)
        if t is None:
            raise TypeError(f"kernel '{kernel_name}': argument '{param}' is an array Tack cannot "
                            f"take (dtype {a.dtype}, {a.ndim} dimensions, strides {a.strides}); "
                            + why_not_taken(a, param))
        return t
    if isinstance(a, bool):
        return T.boolean
    if isinstance(a, int):
        return T.int64
    if isinstance(a, float):
        return T.float64
    if isinstance(a, np.generic) and T.from_dtype(a.dtype) is not None:
        return T.from_dtype(a.dtype)
    if isinstance(a, type):
        return T.Template(a.__qualname__, class_fingerprint(a))
    t = device_array_type(a, static)
    if t is not None:
        return t
    if isinstance(a, np.generic) and not isinstance(a, (np.str_, np.bytes_, np.void)):
        raise TypeError(f"kernel '{kernel_name}': argument '{param}' is a NumPy {a.dtype} "
                        "scalar, a type kernels do not take: numbers are bool, int32/64, "
                        "uint32/64 or float32/64 (pass int(x), float(x) or np.float32(x))")
    what = type(a).__name__
    hint = ""
    if not isinstance(a, np.generic) and (       # (np.str_ has __array__: a string array too)
            hasattr(a, "__array__") or hasattr(a, "__array_interface__") or
            hasattr(a, "__buffer__") or isinstance(a, (memoryview, bytearray)) or what == "array"):
        hint = f" (pass np.asarray({param}) for a NumPy array of its values)"
    raise TypeError(f"kernel '{kernel_name}': argument '{param}' is {_a(what)} {what}; "
                    f"kernels take NumPy arrays, numbers, and classes (as templates){hint}")


def _a(word: str) -> str:
    """The article of ``word`` ('an array', 'a memoryview')."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def foreign_array_kind(a):
    """What kind of array ``a`` is, where it is not NumPy's (the one place that tells them
    apart: ``device_array_type`` types them by it, a CPU launch refuses the device ones by it):
    ``"tack"``, a device array of Tack's (``tack.to_device``: its ``writable`` and ``layout``);
    ``"cuda"``, another library's with ``__cuda_array_interface__`` (CuPy, Numba's); ``"dlpack"``,
    one with DLPack (PyTorch, JAX...: on a device, or in host memory); ``"host"``, anything else
    (NumPy-style ``shape`` and ``dtype`` read from it, if it has them: h5py's Dataset)."""
    if getattr(a, "writable", None) is not None and getattr(a, "layout", None) is not None:
        return "tack"
    if hasattr(a, "__cuda_array_interface__"):
        return "cuda"
    if hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"):
        return "dlpack"
    return "host"


def device_array_type(a, static=False):
    """The Tack type of an array that is not a NumPy array: a device array of Tack's
    (``tack.to_device``), another library's with ``__cuda_array_interface__`` or DLPack (CuPy,
    PyTorch, JAX...), or one with NumPy-style ``shape``, ``dtype`` and ``strides``; None for
    anything else (``foreign_array_kind`` tells which)."""
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(a, type):
        return None
    writable = getattr(a, "writable", None)     # (Tack's own, every launch: two lookups, as before)
    layout = getattr(a, "layout", None) if writable is not None else None
    kind = "tack" if layout is not None else foreign_array_kind(a)
    try:
        if kind == "tack":                              # Tack's own device arrays
            shape, dtype, estrides = a.shape, np.dtype(a.dtype), None
        elif kind == "cuda":
            cai = a.__cuda_array_interface__
            shape, dtype = cai["shape"], np.dtype(cai["typestr"])
            strides = cai.get("strides")
            estrides = None if strides is None else [s // dtype.itemsize for s in strides]
            writable = not cai["data"][1]
        elif kind == "dlpack":
            from . import dlpack
            t = dlpack.view(a)
            shape, dtype, estrides, writable = t.shape, t.dtype, t.estrides, t.writable
            t.close()
        else:
            shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
            if shape is None or dtype is None:
                return None
            dtype = np.dtype(dtype)
            strides = getattr(a, "estrides", None)
            if strides is None and getattr(a, "strides", None) is not None:
                strides = [s // dtype.itemsize for s in a.strides]
            estrides = strides
        shape = tuple(int(n) for n in shape)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        from .dlpack import DLPackError
        if isinstance(e, DLPackError):  # a DLPack object that cannot be taken: say why
            raise
        return None                     # not an array Tack reads: typeof_arg says what it is
    st = T.from_dtype(dtype)
    if st is None or not 1 <= len(shape) <= 4:
        return None
    if layout is None:
        layout = _layout_of_strides(shape, estrides)
    return T.Array(st, len(shape), layout, bool(True if writable is None else writable),
                   shape if static else None)


def _layout_of_strides(shape, strides):
    """C, F or A of element ``strides``, as NumPy flags an array: the stride of an axis of
    extent 1 is never used, and an empty array is contiguous.  On the CPU another library's
    host array is compiled as NumPy's view of it, whose layout is its flags', and the launch's
    key is this one: a (1, 3) array of strides (5, 1) compiled a C variant under the key of a
    strided one, which a (2, 3) array of those strides then ran, reading row 1 at 3, not 5."""
    if strides is None or 0 in shape:
        return "C"

    def contiguous(axes):
        step = 1
        for n, s in axes:
            if n != 1 and s != step:
                return False
            step *= n
        return True
    axes = tuple(zip(shape, strides))
    return "C" if contiguous(reversed(axes)) else "F" if contiguous(axes) else "A"
