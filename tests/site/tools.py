"""Where .ci/run puts the module systems, and running a command in a clean bash.

.ci/run installs Debian's ``lmod`` with apt-get and unpacks Debian's
``environment-modules`` into ``/opt/envmodules`` (the two packages
conflict).  Both define ``module`` and share MODULEPATH and LOADEDMODULES,
so each test runs one of them in its own ``env -i ... bash --noprofile
--norc``.  A missing tool fails the test, saying to run .ci/run.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
ENVMODULES_DIR = "/opt/envmodules"  # the ENVMODULES_DIR of .ci/run
ENVMODULES_INIT = os.path.join(ENVMODULES_DIR, "usr/share/modules/init/bash")

SYSTEMS = {
    "lmod": ("Lmod (Debian's lmod 8.6)", LMOD_INIT),
    "envmodules": ("Environment Modules 5.2 (Debian's environment-modules, unpacked)", ENVMODULES_INIT),
}
# The module file format each system loads in these tests.
FORMAT = {"lmod": "lmod", "envmodules": "tcl"}


def module_init(system):
    """The bash init script of ``system``; fails the test if .ci/run has not installed it."""
    what, path = SYSTEMS[system]
    if not os.path.isfile(path):
        pytest.fail(f"{what} is not installed: {path} is missing. Run .ci/run (as root, on "
                    "Debian bookworm), which installs Lmod and Environment Modules for these tests.",
                    pytrace=False)
    return path


def clean_bash(script, home, user="bob", scratch="/scratch/b", extra=None, timeout=60):
    """Run ``script`` in ``env -i HOME USER SCRATCH PATH=/usr/bin:/bin bash --noprofile --norc``."""
    env = ["env", "-i", f"HOME={home}", f"PATH=/usr/bin:/bin"]
    if user is not None:
        env.append(f"USER={user}")
    if scratch is not None:
        env.append(f"SCRATCH={scratch}")
    env += [f"{k}={v}" for k, v in (extra or {}).items()]
    return subprocess.run(env + ["bash", "--noprofile", "--norc", "-c", script],
                          capture_output=True, text=True, timeout=timeout)


# A shell function printing each variable as NAME=VALUE, or NAME unset.
SHOW = r'''show() { for v in "$@"; do if [ -n "${!v+x}" ]; then printf '%s=%s\n' "$v" "${!v}"; else printf '%s unset\n' "$v"; fi; done; }
'''


def sections(stdout):
    """Split output on lines '@@ NAME' into {NAME: [lines]}."""
    out, name = {}, None
    for line in stdout.splitlines():
        if line.startswith("@@ "):
            name = line[3:].strip()
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return out


def have(program):
    return shutil.which(program) is not None
