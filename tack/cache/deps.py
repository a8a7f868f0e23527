"""The dependency record: an entry is used only if every name it resolved still means the same.

A lowered kernel records, for the kernel and each device function it
reaches, every global name it resolved and what that was bound to
(``identity``: a function's fingerprint, a constant's, a module's name...).
``check_deps`` walks the record with no source: device functions are reached
through the names that bind them, from the kernel outward, and each name is
resolved again in the function's globals, closure or builtins.
"""

import builtins
import types

from ..fingerprints import class_fingerprint, class_id, func_id, function_fingerprint, value_identity
from ..language import Constant, Func, intrinsic_identity, lowers_to

_MISSING = object()


def _resolve(fn, name):
    """What ``name`` (or a dotted ``module.attr`` chain) means in ``fn`` now."""
    if "." in name:
        head, *attrs = name.split(".")
        obj = _resolve(fn, head)
        for attr in attrs:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                break
        return obj
    code = fn.__code__
    if fn.__closure__ and name in code.co_freevars:
        try:
            return fn.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:          # an empty cell
            return _MISSING
    g = fn.__globals__
    if name in g:
        return g[name]
    return vars(builtins).get(name, _MISSING)


def _func_fid(func: Func) -> str:
    return func_id(func.py_func)


def template_scopes(cls) -> dict:
    """fid -> function for each static method of a template class, as lowering names them."""
    out = {}
    fp = class_fingerprint(cls)
    attrs = {}
    for klass in reversed(cls.__mro__[:-1]):
        attrs.update(vars(klass))
    for name, attr in attrs.items():
        if isinstance(attr, staticmethod):
            attr = attr.__func__
        if isinstance(attr, Func):
            attr = attr.py_func
        if isinstance(attr, types.FunctionType):
            out[class_id(cls, name, fp)] = attr
    return out


def identity(kind: str, obj):
    """What a dependency of ``kind`` is bound to now, as the record writes it (None: not that kind)."""
    if kind == "func":
        return function_fingerprint(obj.py_func) if isinstance(obj, Func) else None
    if kind == "const":
        return obj.fingerprint if isinstance(obj, Constant) else None
    if kind == "module":
        return obj.__name__ if isinstance(obj, types.ModuleType) else None
    if kind == "template":
        return class_fingerprint(obj) if isinstance(obj, type) else None
    if kind == "intrinsic":
        return intrinsic_identity(obj)    # (check_deps asks lowers_to(), which is cheaper)
    if kind == "value":
        return value_identity(obj)
    return None


def check_deps(deps, kernel, templates: dict, scopes: dict | None = None):
    """None if every recorded name still resolves as recorded; else the reason it does not.

    ``scopes``, if given, is filled with fid -> Python function for every
    function the record reaches (to locate source lines later).
    """
    scopes = {} if scopes is None else scopes
    scopes[kernel.__qualname__] = kernel.py_func
    for cls in templates.values():
        scopes.update(template_scopes(cls))
    for scope, name, kind, recorded in deps:
        fn = scopes.get(scope.split("[", 1)[0])
        if fn is None:
            return f"device function {scope} can no longer be reached"
        obj = _resolve(fn, name)
        if obj is _MISSING:
            return f"name '{name}' (in {fn.__qualname__}) is no longer defined"
        if not (lowers_to(obj, recorded) if kind == "intrinsic" else identity(kind, obj) == recorded):
            return f"'{name}' (in {fn.__qualname__}) changed"
        if kind == "func":
            scopes[_func_fid(obj)] = obj.py_func
        elif kind == "template":
            scopes.update(template_scopes(obj))
    return None


def functions_now(deps, kernel, templates: dict):
    """``fid -> the Python function it names now, or None`` for the functions a dependency
    record reaches (the kernel's, its device functions', its templates' methods)."""
    scopes = {}
    check_deps(deps, kernel, templates, scopes)
    return lambda fid: scopes.get(fid.split("[", 1)[0])


def locate(deps, kernel, templates: dict, fid: str):
    """(file, first line) of the function ``fid`` as it is now, or None."""
    fn = functions_now(deps, kernel, templates)(fid)
    return (fn.__code__.co_filename, fn.__code__.co_firstlineno) if fn is not None else None
