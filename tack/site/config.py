"""The site config: one YAML file an admin writes, validated against a documented schema.

Every error names the file, the line and the key path, says what was
expected, and suggests the closest valid key for a typo; all errors are
collected before reporting.  See docs/site.md for the schema.
"""

from __future__ import annotations

import difflib
import os
import re

import yaml

from ..cache import MODES, parse_size

# Each key: (kind, required, description).  kind: "str", "size", "mode", "int",
# "list[str]", "list[int]", "map" (a nested schema), "kernels", "nodes".
SCHEMA = {
    "version": ("int", True, "schema version; 1"),
    "cache": ("map", False, {
        "directory": ("str", False, "TACK_CACHE_DIR; $USER, $HOME, $SCRATCH... expanded at module load"),
        "mode": ("mode", False, "TACK_CACHE: write, read, bundle or off"),
        "mpi_mode": ("mode", False, "TACK_CACHE_MPI: the mode under MPI (default bundle)"),
        "size": ("size", False, "TACK_CACHE_SIZE: e.g. 500M, 4G, unlimited"),
        "bundles": ("str", False, "TACK_CACHE_BUNDLES: where the site's bundles are installed"),
    }),
    "build": ("map", False, {
        "archs": ("map", False, {
            "cpu": ("list[str]", False, "CPU microarchitectures, by archspec name (zen3, ...)"),
            "cuda": ("list[str]", False, "CUDA compute capabilities (sm_80, sm_90, ...)"),
            "rocm": ("list[str]", False, "AMD GPU targets (gfx90a, gfx942, ...)"),
            "level_zero": ("list[str]", False, "Intel GPU devices (pvc, acm, ...)"),
        }),
        "kernels": ("kernels", False, "what to warm into the bundles"),
    }),
    "modules": ("map", False, {
        "name": ("str", False, "module name (default tack)"),
        "version": ("str", False, "module version (default: Tack's)"),
        "formats": ("list[str]", False, "lmod, tcl"),
        "root": ("str", False, "where module files are written"),
        "help": ("str", False, "module help text"),
        "whatis": ("str", False, "one-line description"),
        "conflicts": ("list[str]", False, "modules that cannot be loaded with this one"),
        "prereqs": ("list[str]", False, "modules that must be loaded first (e.g. an MPI)"),
    }),
    "nodes": ("nodes", False, "node types and the architectures their bundles are built for"),
}
KERNEL_KEYS = {"module": "importable module", "shapes": "field shapes for the module's tack_warm()",
               "kernel": "a @tack.kernel in the module", "args": "argument specs, e.g. float32[64,64]",
               "grid": "launch grid dimensions (1-3)"}
NODE_KEYS = {"name": "node type", "cpu": "a build.archs.cpu entry", "gpu": "a GPU arch from build.archs"}
FORMATS = ("lmod", "tcl")
CUDA_RE = re.compile(r"^sm_\d{2,3}[a-z]?$")
ROCM_RE = re.compile(r"^gfx[0-9a-f]{3,4}$")
LEVEL_ZERO = ("pvc", "acm", "dg2", "mtl", "lnl", "bmg")


class SiteConfigError(Exception):
    """One or more problems in a site config; each line names file, line and key."""

    def __init__(self, problems):
        self.problems = problems
        super().__init__("\n".join(problems))


class SiteConfig:
    """A validated site config: plain values, with the file it came from."""

    def __init__(self, path, data):
        self.path = path
        self.data = data

    def get(self, dotted, default=None):
        node = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def module_name(self):
        return self.get("modules.name", "tack")

    @property
    def module_version(self):
        from .._version import __version__
        return str(self.get("modules.version", __version__))

    @property
    def formats(self):
        return self.get("modules.formats", list(FORMATS))

    def exports(self) -> dict:
        """Environment variables the site sets for users, values unexpanded ($USER stays)."""
        out = {}
        for key, var in (("directory", "TACK_CACHE_DIR"), ("mode", "TACK_CACHE"),
                         ("mpi_mode", "TACK_CACHE_MPI"), ("size", "TACK_CACHE_SIZE"),
                         ("bundles", "TACK_CACHE_BUNDLES")):
            value = self.get(f"cache.{key}")
            if value is not None:
                out[var] = str(value)
        return out

    def cpu_archs(self):
        return list(self.get("build.archs.cpu", []) or [])

    def gpu_archs(self):
        archs = self.get("build.archs", {}) or {}
        return [(kind, a) for kind in ("cuda", "rocm", "level_zero") for a in archs.get(kind) or []]


def load(path) -> SiteConfig:
    """Read and validate ``path``; SiteConfigError listing every problem otherwise."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SiteConfigError([f"{path}: cannot read: {e.strerror or e}"]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise SiteConfigError([f"{where}: invalid YAML: {getattr(e, 'problem', None) or e}"]) from None
    v = _Validator(path)
    if root is None:
        raise SiteConfigError([f"{path}:1: the config is empty; expected a mapping with "
                               f"'version: 1' and {', '.join(k for k in SCHEMA if k != 'version')}"])
    data = v.mapping(root, SCHEMA, ())
    v.cross_checks(data, root)
    if v.problems:
        raise SiteConfigError(v.problems)
    return SiteConfig(path, data)


class _Validator:
    def __init__(self, path):
        self.path = path
        self.problems = []
        self.lines = {}

    def fail(self, node, keypath, message):
        line = node.start_mark.line + 1 if node is not None else 1
        name = ".".join(map(str, keypath)) or "(top level)"
        self.problems.append(f"{self.path}:{line}: {name}: {message}")

    def scalar(self, node):
        return yaml.SafeLoader.construct_object(_loader(), node, deep=True)

    def mapping(self, node, schema, keypath):
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, keypath, f"expected a mapping of {', '.join(schema)}")
            return {}
        out = {}
        for knode, vnode in node.value:
            key = knode.value
            here = keypath + (key,)
            self.lines[here] = knode.start_mark.line + 1
            if key not in schema:
                close = difflib.get_close_matches(str(key), list(schema), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.fail(knode, keypath + (key,), f"unknown key{hint} (expected one of: "
                          f"{', '.join(schema)})")
                continue
            kind, _, detail = schema[key]
            out[key] = self.value(vnode, kind, detail, here)
        for key, (kind, required, _) in schema.items():
            if required and key not in out:
                self.fail(node, keypath + (key,), "missing; it is required")
        return out

    def value(self, node, kind, detail, keypath):
        if kind == "map":
            return self.mapping(node, detail, keypath)
        if kind == "kernels":
            return self.kernels(node, keypath)
        if kind == "nodes":
            return self.nodes(node, keypath)
        if kind.startswith("list["):
            if not isinstance(node, yaml.SequenceNode):
                self.fail(node, keypath, f"expected a list ({detail})")
                return []
            item_kind = kind[5:-1]
            return [self.value(n, item_kind, detail, keypath + (i,)) for i, n in enumerate(node.value)]
        if not isinstance(node, yaml.ScalarNode):
            self.fail(node, keypath, f"expected a single value ({detail})")
            return None
        value = self.scalar(node)
        if kind == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                self.fail(node, keypath, f"expected an integer, got {value!r} ({detail})")
            elif keypath == ("version",) and value != 1:
                self.fail(node, keypath, f"schema version {value} is not supported; expected 1")
            return value
        if kind == "size":
            try:
                parse_size(value if isinstance(value, str) else value)
            except ValueError as e:
                self.fail(node, keypath, str(e))
            return value
        if kind == "mode":
            if value not in MODES:
                close = difflib.get_close_matches(str(value), MODES, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.fail(node, keypath, f"{value!r} is not a cache mode; expected one of "
                          f"{', '.join(MODES)}{hint}")
            return value
        if not isinstance(value, str):
            self.fail(node, keypath, f"expected a string, got {value!r} ({detail})")
            return str(value)
        return value

    def kernels(self, node, keypath):
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, keypath, "expected a list of {module: ..., shapes: [...]} or "
                      "{module: ..., kernel: ..., args: [...]}")
            return []
        out = []
        for i, item in enumerate(node.value):
            here = keypath + (i,)
            if not isinstance(item, yaml.MappingNode):
                self.fail(item, here, "expected a mapping with 'module'")
                continue
            entry = {}
            for knode, vnode in item.value:
                key = knode.value
                if key not in KERNEL_KEYS:
                    close = difflib.get_close_matches(str(key), list(KERNEL_KEYS), n=1)
                    hint = f"; did you mean '{close[0]}'?" if close else ""
                    self.fail(knode, here + (key,), f"unknown key{hint} (expected one of: "
                              f"{', '.join(KERNEL_KEYS)})")
                    continue
                if key == "shapes":
                    entry[key] = self.shapes(vnode, here + (key,))
                elif key == "args":
                    entry[key] = self.value(vnode, "list[str]", KERNEL_KEYS[key], here + (key,))
                elif key == "grid":
                    entry[key] = self.value(vnode, "int", KERNEL_KEYS[key], here + (key,))
                else:
                    entry[key] = self.value(vnode, "str", KERNEL_KEYS[key], here + (key,))
            if "module" not in entry:
                self.fail(item, here + ("module",), "missing; it is required")
            if "kernel" in entry and "args" not in entry:
                self.fail(item, here + ("args",), "missing; a 'kernel' entry needs its 'args'")
            out.append(entry)
        return out

    def shapes(self, node, keypath):
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, keypath, "expected a list of shapes, e.g. [[21, 21, 21], [64, 64, 64]]")
            return []
        out = []
        for i, s in enumerate(node.value):
            ok = isinstance(s, yaml.SequenceNode) and all(
                isinstance(n, yaml.ScalarNode) and isinstance(self.scalar(n), int) and self.scalar(n) > 0
                for n in s.value)
            if not ok:
                self.fail(s, keypath + (i,), "expected a shape: a list of positive integers")
                continue
            out.append([self.scalar(n) for n in s.value])
        return out

    def nodes(self, node, keypath):
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, keypath, "expected a list of {name: ..., cpu: ..., gpu: ...}")
            return []
        out = []
        for i, item in enumerate(node.value):
            if not isinstance(item, yaml.MappingNode):
                self.fail(item, keypath + (i,), "expected a mapping with 'name' and 'cpu'")
                continue
            entry = self.mapping(item, {k: ("str", k == "name", d) for k, d in NODE_KEYS.items()},
                                 keypath + (i,))
            entry["_line"] = item.start_mark.line + 1
            out.append(entry)
        return out

    # -- checks across keys -------------------------------------------------

    def at(self, keypath):
        return self.lines.get(keypath, 1)

    def fail_at(self, keypath, message):
        name = ".".join(map(str, keypath))
        self.problems.append(f"{self.path}:{self.at(keypath)}: {name}: {message}")

    def cross_checks(self, data, root):
        archs = (data.get("build") or {}).get("archs") or {}
        known_cpu = known_cpu_archs()
        for i, a in enumerate(archs.get("cpu") or []):
            if a not in known_cpu:
                close = difflib.get_close_matches(a, known_cpu, n=3)
                hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
                self.fail_at(("build", "archs", "cpu"),
                             f"unknown CPU microarchitecture {a!r}{hint} (archspec knows: "
                             f"{', '.join(known_cpu)})")
        for kind, pattern, example in (("cuda", CUDA_RE, "sm_90"), ("rocm", ROCM_RE, "gfx90a")):
            for a in archs.get(kind) or []:
                if not pattern.match(a):
                    self.fail_at(("build", "archs", kind), f"{a!r} is not a {kind} architecture "
                                 f"(expected a name like {example})")
        for a in archs.get("level_zero") or []:
            if a not in LEVEL_ZERO:
                self.fail_at(("build", "archs", "level_zero"),
                             f"unknown Intel GPU device {a!r} (known: {', '.join(LEVEL_ZERO)})")
        for i, fmt in enumerate((data.get("modules") or {}).get("formats") or []):
            if fmt not in FORMATS:
                close = difflib.get_close_matches(fmt, FORMATS, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.fail_at(("modules", "formats"), f"unknown module format {fmt!r}{hint} "
                             f"(expected {' or '.join(FORMATS)})")
        gpus = {a for k in ("cuda", "rocm", "level_zero") for a in archs.get(k) or []}
        for n in data.get("nodes") or []:
            where = n.pop("_line", 1)
            if n.get("cpu") and n["cpu"] not in (archs.get("cpu") or []):
                self.problems.append(f"{self.path}:{where}: nodes.{n.get('name')}.cpu: {n['cpu']!r} "
                                     "is not in build.archs.cpu, so no bundle is built for it")
            if n.get("gpu") and n["gpu"] not in gpus:
                self.problems.append(f"{self.path}:{where}: nodes.{n.get('name')}.gpu: {n['gpu']!r} "
                                     "is not among build.archs' GPU architectures")


_loader_instance = None


def _loader():
    global _loader_instance
    if _loader_instance is None:
        _loader_instance = yaml.SafeLoader("")
    return _loader_instance


def known_cpu_archs() -> list:
    """CPU microarchitecture names archspec knows (the site config's vocabulary)."""
    import archspec.cpu
    return sorted(archspec.cpu.TARGETS)
