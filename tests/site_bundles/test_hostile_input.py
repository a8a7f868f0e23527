"""Hostile input to ``python -m tack.site`` and ``python -m tack.cache``: each is refused with one
clear line naming where it is at fault (no traceback), and nothing good is lost."""

import os
import textwrap

import pytest

from tack.site import cli


def write_module(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))


WARM_MODULE = """
    import numpy as np
    import tack

    @tack.kernel
    def k(a):
        i = tack.tid()
        a[i] = a[i] + 1.0

    def tack_warm(shape):
        a = np.zeros(shape, np.float32)
        return {items}
"""


@pytest.mark.parametrize("items, why", [
    ("[5]", "item 0: got int"),
    ("[(k, (a,))]", "item 0: got 2 values"),
    ("[(k, (a,), 1), (len, (a,), 1)]", "item 1: len is not a @tack.kernel"),
    ("[(k, (a,), 'x')]", "item 0: its grid is 'x', not 1, 2 or 3"),
])
def test_check_malformed_tack_warm_items(tmp_path, monkeypatch, capsys, items, why):
    """A module's tack_warm that returns something other than (kernel, args, grid) items: check
    names the config's line and key and what is wrong, instead of a traceback (TypeError,
    ValueError from unpacking)."""
    name = f"warm_{abs(hash(items)) % 10**8}"
    write_module(tmp_path, monkeypatch, name, WARM_MODULE.format(items=items))
    config = tmp_path / "site.yaml"
    config.write_text(f"version: 1\nbuild:\n  archs: {{cpu: [x86_64_v3]}}\n  kernels:\n"
                      f"    - module: {name}\n      shapes: [[4]]\n")
    rc = cli.main(["check", str(config)])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"{config}:6: build.kernels.0.shapes.0: {name}.tack_warm([4]) {why}" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["unknown target", "site-env.json is a directory"])
def test_a_failed_install_leaves_the_prefixs_kept_config_as_it_was(tmp_path, case):
    """``bundles install --site-config B`` that fails before building (a --target Tack does not
    build; a file it writes that cannot be written) left the prefix's site.yaml replaced by B
    (and site-env.json with B's exports) beside bundles built from A's: now nothing is written."""
    import io
    import shutil
    from tack.site import install
    from tests.site_bundles.test_install import installed_prefix
    prefix, _ = installed_prefix(tmp_path)
    share = prefix / "share" / "tack"
    share.mkdir(parents=True)
    first = b"version: 1\ncache:\n  size: 4G\n"
    (share / "site.yaml").write_bytes(first)
    if case == "site-env.json is a directory":
        (share / "site-env.json").mkdir()
        targets = ["x86_64"]
    else:
        (share / "site-env.json").write_text('{\n  "TACK_CACHE_SIZE": "4G"\n}\n')
        targets = ["zen9"]
    before = {p.name: p.read_bytes() for p in share.iterdir() if p.is_file()}
    second = tmp_path / "B.yaml"
    second.write_text("version: 1\ncache:\n  size: 8G\n")
    out, err = io.StringIO(), io.StringIO()
    rc = install.bundles_install(str(prefix), targets, (), str(second), out=out, err=err)
    assert rc == 1, out.getvalue() + err.getvalue()
    assert {p.name: p.read_bytes() for p in share.iterdir() if p.is_file()} == before
    assert "nothing was written" in err.getvalue(), err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert not (share / "bundles").exists() and not (share / "bundles-build.yaml").exists()
    shutil.rmtree(prefix)


def test_env_fish_a_reference_a_word_character_follows(tmp_path, capsys):
    """``directory: ${SCRATCH}x`` (a reference that needs its braces): bash and csh write
    ``${SCRATCH}x``; fish was given ``{$SCRATCH}x`` inside double quotes, where fish does no brace
    expansion, so the directory became ``{/scratch/b}x``.  Each shell now sets ``/scratch/bx``."""
    import shutil
    import subprocess
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\ncache:\n  directory: '${SCRATCH}x/$USER'\n")
    assert cli.main(["env", str(config), "--shell", "fish"]) == 0
    text = capsys.readouterr().out
    assert "{$SCRATCH}" not in text, text
    shells = {"fish": ["fish", "--no-config", "-c"], "bash": ["bash", "--norc", "-c"],
              "csh": ["csh", "-f", "-c"]}
    ran = 0
    for shell, argv in shells.items():
        if shutil.which(argv[0]) is None:
            continue
        assert cli.main(["env", str(config), "--shell", shell]) == 0
        script = tmp_path / f"env.{shell}"
        script.write_text(capsys.readouterr().out)
        r = subprocess.run(argv + [f"source {script}; printenv TACK_CACHE_DIR"], capture_output=True,
                           text=True, env={"PATH": "/usr/bin:/bin", "SCRATCH": "/scratch/b",
                                           "USER": "bob", "HOME": str(tmp_path)})
        # (fish sets USER itself, from the account running it)
        assert r.stdout.startswith("/scratch/bx/"), (shell, r.stdout, r.stderr)
        ran += 1
    assert ran, "no shell to source the output with"


def test_export_of_a_directory_of_bundles_says_to_name_a_bundle(tmp_path):
    """``tack.cache export /site/bundles --output DIR`` (the directory ``bundles build`` fills, not
    a cache directory) said "exported 0 file(s)" and made DIR, exit status 0; now an error saying
    the directory holds no entries of this Tack, naming a bundle in it to export instead."""
    import subprocess
    import sys
    import tack
    from tack.cache import bundle_write
    site = tmp_path / "bundles"
    site.mkdir()
    (site / "bundle-x86_64-cpu-zen3-0123456789ab").write_bytes(
        bundle_write.pack([], {"arch": "cpu:zen3", "machine": "x86_64"}))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "tack.cache", "export", str(site), "--output", str(out)],
                       capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "TACK_CACHE_DIR": str(tmp_path / "cache"),
                            "PYTHONPATH": os.path.dirname(os.path.dirname(tack.__file__))})
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"tack.cache: error: {site} holds no entries of this Tack" in r.stderr, r.stderr
    assert f"export a bundle by its path, e.g. {site}/bundle-x86_64-cpu-zen3-0123456789ab" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_a_template_module_that_exits_when_imported_is_an_error_naming_it(tmp_path, monkeypatch,
                                                                          capsys):
    """An argument spec ``pkg.module:Class`` whose module calls sys.exit(3) when imported: check
    (and bundles build) ended with exit status 3 and not a word; now one error at its line."""
    write_module(tmp_path, monkeypatch, "exits_tpl", "import sys\nsys.exit(3)\n")
    write_module(tmp_path, monkeypatch, "one_kernel", WARM_MODULE.format(items="[]"))
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\nbuild:\n  archs: {cpu: [x86_64_v3]}\n  kernels:\n"
                      "    - module: one_kernel\n      kernel: k\n      args: ['exits_tpl:Policy']\n")
    rc = cli.main(["check", str(config)])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"{config}:7: build.kernels.0.args.0: template 'exits_tpl:Policy': SystemExit: 3" in err, err


def in_an_empty_directory(tmp_path, monkeypatch, **env):
    """Run from the empty directory ``tmp_path/cwd`` (returned), with ``HOME`` at
    ``tmp_path/home``, ``env``'s variables set and ``TACK_TEST_UNSET_VAR`` unset: where a path the
    config names unexpanded (``~``, ``$VAR``) would show up as a directory of that name."""
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("TACK_TEST_UNSET_VAR", raising=False)
    return here


@pytest.mark.parametrize("bundles, error", [
    ("{tmp}/s1:{tmp}/s2", "names 2 directories; give --output"),
    ("$TACK_TEST_UNSET_VAR/bundles", "names $TACK_TEST_UNSET_VAR, which is not set; give --output"),
    ("~/bundles", None),
    ("$TACK_TEST_SITE/bundles", None),
])
def test_build_without_output_reads_cache_bundles_as_a_job_does(tmp_path, monkeypatch, bundles,
                                                               error):
    """``bundles build`` without --output took cache.bundles as it is written: ``/a:/b`` made a
    directory named ``/a:`` (holding ``tmp/.../b``), ``$SITE/bundles`` and ``~/bundles`` a
    directory named ``$SITE`` or ``~`` in the working directory, where no job looks.  Now it is
    expanded as a job expands TACK_CACHE_BUNDLES, and a list or an unset variable is refused
    naming the config's line."""
    import io
    from tack.site import build
    from tack.site.config import load
    here = in_an_empty_directory(tmp_path, monkeypatch, TACK_TEST_SITE=tmp_path / "site")
    write_module(tmp_path, monkeypatch, "one_warm", WARM_MODULE.format(items="[(k, (a,), 1)]"))
    config = tmp_path / "site.yaml"
    bundles = bundles.format(tmp=tmp_path)
    config.write_text(f"version: 1\ncache:\n  bundles: '{bundles}'\nbuild:\n  archs: {{cpu: "
                      "[x86_64_v3]}\n  kernels:\n    - module: one_warm\n      shapes: [[4]]\n")
    out, err = io.StringIO(), io.StringIO()
    rc = build.build_bundles(load(config), out=out, err=err)
    assert os.listdir(here) == []
    assert not os.path.lexists(f"{tmp_path}/s1:")
    if error is not None:
        assert rc == 1
        assert f"error: {config}:3: cache.bundles: " in err.getvalue() and error in err.getvalue(), \
            err.getvalue()
        return
    assert rc == 0, out.getvalue() + err.getvalue()
    where = tmp_path / ("home" if bundles.startswith("~") else "site") / "bundles"
    assert [n for n in os.listdir(where) if n.startswith("bundle-")], os.listdir(tmp_path)


@pytest.mark.parametrize("root, error", [
    ("~/modulefiles", None),
    ("$TACK_TEST_APPS/modulefiles", None),
    ("$TACK_TEST_UNSET_VAR/modulefiles", "names $TACK_TEST_UNSET_VAR, which is not set"),
])
def test_modules_root_from_the_config_is_expanded_as_a_shell_expands_root(tmp_path, monkeypatch,
                                                                          capsys, root, error):
    """``modules.root: ~/modulefiles`` wrote the module files under a directory named ``~`` in the
    working directory (``$APPS/modulefiles``: one named ``$APPS``); --root, which the shell
    expands, did not.  Now the config's root is expanded too, an unset variable refused."""
    here = in_an_empty_directory(tmp_path, monkeypatch, TACK_TEST_APPS=tmp_path / "apps")
    config = tmp_path / "site.yaml"
    config.write_text(f"version: 1\nmodules:\n  name: tack\n  version: '1.0'\n  root: '{root}'\n")
    rc = cli.main(["modules", str(config)])
    captured = capsys.readouterr()
    assert os.listdir(here) == []
    if error is not None:
        assert rc == 1
        assert f"error: {config}:5: modules.root: '{root}' {error}; nothing was written" in \
            captured.err, captured.err
        return
    assert rc == 0, captured.err
    where = tmp_path / ("home" if root.startswith("~") else "apps") / "modulefiles" / "tack"
    assert sorted(os.listdir(where)) == ["1.0", "1.0.lua"]


def test_a_file_name_that_is_not_utf8_is_listed_not_a_traceback(tmp_path):
    """A file ``bundle-\\xff`` in the cache directory or a bundle directory, under a UTF-8 locale
    whose stdout is strict (en_US.UTF-8; emulated with PYTHONIOENCODING): ``tack.cache info``
    and ``tack.site bundles status`` stopped with UnicodeEncodeError; now they list it, its name
    as its bytes."""
    import subprocess
    import sys
    import tack
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    site = tmp_path / "site"
    site.mkdir()
    for d in (cache, site):
        open(os.path.join(os.fsencode(d), b"bundle-\xff"), "wb").close()
    env = {"PATH": "/usr/bin:/bin", "TACK_CACHE_DIR": str(cache), "PYTHONIOENCODING": "utf-8:strict",
           "PYTHONPATH": os.path.dirname(os.path.dirname(tack.__file__))}
    for argv in (["tack.cache", "info"], ["tack.site", "bundles", "status", str(site)]):
        r = subprocess.run([sys.executable, "-m", *argv], capture_output=True, env=env)
        assert r.returncode == 0 and b"Traceback" not in r.stderr, (argv, r.stderr)
        assert b"bundle-\xff" in r.stdout, (argv, r.stdout)


def test_a_nodes_gpu_is_matched_by_the_architecture_build_archs_builds(tmp_path):
    """``build.archs.level_zero: [acm]`` builds level_zero:dg2 (an alias); a node with ``gpu: dg2``
    (or ``level_zero:dg2``) was refused as "not among build.archs' GPU architectures", and with
    ``[dg2]`` listed, ``gpu: acm`` too.  Both are accepted now; another kind's name is not."""
    from tack.site.config import load
    from tack.site.errors import SiteConfigError
    good = tmp_path / "good.yaml"
    good.write_text("version: 1\nbuild:\n  archs: {cpu: [zen3], level_zero: [acm], cuda: [sm_90]}\n"
                    "nodes:\n  - {name: a, cpu: zen3, gpu: dg2}\n"
                    "  - {name: b, cpu: zen3, gpu: level_zero:dg2}\n"
                    "  - {name: c, cpu: zen3, gpu: acm}\n")
    assert [n["gpu"] for n in load(good).get("nodes")] == ["dg2", "level_zero:dg2", "acm"]
    listed = tmp_path / "listed.yaml"
    listed.write_text("version: 1\nbuild:\n  archs: {cpu: [zen3], level_zero: [dg2]}\n"
                      "nodes:\n  - {name: a, cpu: zen3, gpu: level_zero:acm}\n")
    load(listed)
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nbuild:\n  archs: {cpu: [zen3], level_zero: [acm], cuda: [sm_90]}\n"
                   "nodes:\n  - {name: a, cpu: zen3, gpu: cuda:dg2}\n"
                   "  - {name: b, cpu: zen3, gpu: rocm:sm_90}\n")
    with pytest.raises(SiteConfigError) as e:
        load(bad)
    assert e.value.problems == [
        f"{bad}:5: nodes.0.gpu: 'cuda:dg2' is not among build.archs' GPU architectures (node 'a')",
        f"{bad}:6: nodes.1.gpu: 'rocm:sm_90' is not among build.archs' GPU architectures (node 'b')"]


def test_keys_of_the_other_form_of_kernel_entry_are_errors_not_ignored(tmp_path):
    """An entry with 'shapes' (built from its module's tack_warm) and 'args' or 'grid', or one
    with 'kernel' and 'shapes': the keys the entry's form does not read were accepted and
    silently ignored (an admin's grid: 2 built grid 1).  Each is now an error at its line."""
    from tack.site.config import load
    from tack.site.errors import SiteConfigError
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\nbuild:\n  kernels:\n"
                      "    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n      grid: 2\n"
                      "    - module: tack.kernels.contour\n      kernel: classify\n"
                      "      args: ['float32[8,8,8]']\n      shapes: [[8, 8, 8]]\n")
    with pytest.raises(SiteConfigError) as e:
        load(config)
    assert e.value.problems == [
        f"{config}:6: build.kernels.0.grid: ignored by an entry without 'kernel' (its module's "
        "tack_warm(shape) gives each kernel's arguments and grid); add 'kernel' or leave it out",
        f"{config}:10: build.kernels.1.shapes: ignored by a 'kernel' entry, which is built for its "
        "'args'; give the shapes to an entry without 'kernel' (its module's tack_warm(shape))"]


def _cache_cli(cache, *argv):
    import subprocess
    import sys
    import tack
    env = {"PATH": "/usr/bin:/bin", "TACK_CACHE_DIR": str(cache),
           "PYTHONPATH": os.path.dirname(os.path.dirname(tack.__file__))}
    return subprocess.run([sys.executable, "-m", "tack.cache", *argv], capture_output=True,
                          text=True, env=env)


def test_pack_takes_target_key_the_name_info_lists_for_another_hosts_code(tmp_path):
    """A copied cache's code, compiled by another host for itself, is listed by info as
    ``target <key prefix>`` (and named so by pack's own 'the cache holds: ...'), which the docs
    say pack --arch takes; ``pack --arch 'target cccc...'`` was refused as 'not an architecture
    name'.  It packs that target's entries now; a prefix no key has is refused."""
    import tack.aot
    from tack.kernels.contour import tack_warm
    kernel, args, grid = tack_warm((8, 8, 8))[0]
    a = tack.aot.compile(kernel, "cpu:x86_64_v3", args, grid=grid)
    meta = dict(a.meta, target_key="c" * 64)
    meta.pop("arch", None)                      # compiled by a host for itself: no arch named
    cache = tmp_path / "cache"
    tack.aot.save([a._replace(key="f" * 64, meta=meta)], str(cache))
    cache.chmod(0o700)
    info = _cache_cli(cache, "info")
    assert "for target cccccccccccccccc " in info.stdout, info.stdout + info.stderr
    out = tmp_path / "b"
    packed = _cache_cli(cache, "pack", "--arch", "target cccccccccccccccc", "--output", str(out))
    assert packed.returncode == 0 and out.is_file(), packed.stderr
    other = _cache_cli(cache, "pack", "--arch", "target dddd", "--output", str(tmp_path / "c"))
    assert other.returncode == 1 and "no target key starts with 'dddd'" in other.stderr, other.stderr
    assert not (tmp_path / "c").exists()


def test_pack_with_an_empty_arch_is_bad_usage(tmp_path):
    """``pack --arch "$ARCH"`` with ARCH unset packed every architecture's entries, as if no
    --arch were given; now bad usage (exit status 2), nothing written."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    r = _cache_cli(cache, "pack", "--arch", "", "--output", str(tmp_path / "b"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.splitlines()[-1].endswith(
        "error: argument --arch: an empty architecture name (an unset variable?)"), r.stderr
    assert not (tmp_path / "b").exists()


def test_module_lists_that_would_render_a_broken_module_file_are_errors(tmp_path, capsys):
    """``modules.formats: []`` passed check ("as  under ...") and made ``modules`` fail with an
    IndexError traceback; a conflict or prereq of '' or 'a b' was written into every module
    file (``prereq("")``), failing each load.  Each is an error at its line now."""
    config = tmp_path / "site.yaml"
    config.write_text(f"version: 1\nmodules:\n  root: {tmp_path / 'mf'}\n  formats: []\n"
                      "  prereqs: ['', 'openmpi/4.1', 'a b']\n")
    rc = cli.main(["modules", str(config)])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert err.splitlines() == [
        f"error: {config}:5: modules.prereqs.0: '' is empty: give a module's name, or leave the "
        "item out",
        f"error: {config}:5: modules.prereqs.2: 'a b' holds ' ': a module name has no whitespace "
        "(list each module as its own item)",
        f"error: {config}:4: modules.formats: an empty list names no module format; give lmod or "
        "tcl (or leave the key out for both)",
        "3 problem(s); nothing was written"], err
    assert not (tmp_path / "mf").exists()


def test_an_array_spec_this_host_cannot_allocate_is_an_error_at_its_line(tmp_path, monkeypatch):
    """``args: ['float64[1048576,16384]']`` is within the bounds a spec takes (2^34 elements) but
    is 128 GiB: check and bundles build stopped with numpy's MemoryError traceback.  Now an
    error naming the spec's line.  (Run with its address space bounded to 16 GiB, so that the
    allocation fails on any host.)"""
    import resource
    import subprocess
    import sys
    import tack
    write_module(tmp_path, monkeypatch, "one_kernel", WARM_MODULE.format(items="[]"))
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\nbuild:\n  archs: {cpu: [x86_64_v3]}\n  kernels:\n"
                      "    - module: one_kernel\n      kernel: k\n      args: ['float64[1048576,16384]']\n")
    env = {"PATH": "/usr/bin:/bin", "TACK_CACHE": "off", "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(tack.__file__))])}
    r = subprocess.run([sys.executable, "-m", "tack.site", "check", str(config)], env=env,
                       capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (16 << 30, 16 << 30)))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert (f"error: {config}:7: build.kernels.0.args.0: 'float64[1048576,16384]': this host cannot "
            "allocate the example array (MemoryError") in r.stderr, r.stderr


def test_check_size_past_what_the_contour_takes_is_refused_up_front(tmp_path):
    """``bundles check --size 1000`` asked its child for 22 GiB (the demo's field, made in
    float64) before the contour refused a field past its int32 ids: now refused first, naming
    --size, the bound and the memory it would need.  (Run with its address space bounded to
    8 GiB, so that a regression fails with a MemoryError rather than fills the host.)"""
    import resource
    import subprocess
    import sys
    import tack
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.path.dirname(os.path.dirname(tack.__file__))}
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "check", str(tmp_path),
                        "--size", "1000"], env=env, capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30)))
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        "error: bundles check: --size 1000: a 1000^3 field is more than the contour takes (at most "
        "715827882 points, 894^3: its ids are int32), and contouring it would need about 37.3 GiB of "
        "memory; give a smaller --size (the default, 21, checks the same kernels: they are "
        "shape-generic)"], r.stderr
    assert r.stdout == ""


def test_check_size_past_this_hosts_memory_is_refused_up_front(tmp_path, monkeypatch, capsys):
    """A --size the contour takes whose field needs more memory than the host has available is
    refused before the check's child starts, naming both."""
    from tack import demo
    monkeypatch.setattr(demo, "available_memory", lambda: 1 << 29)
    monkeypatch.setattr("subprocess.run", lambda *a, **k: pytest.fail("the child was started"))
    rc = cli.main(["bundles", "check", str(tmp_path), "--size", "300"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err == ("error: bundles check: --size 300: contouring a 300^3 field would need about "
                   "1.0 GiB of memory, more than is available here (512.0 MiB: the least of the "
                   "host's available memory, its cgroups' limits and ulimit -v); give a smaller "
                   "--size (the default, 21, checks the same kernels: they are shape-generic)\n"), err


def _fake_host(tmp_path, cgroup_lines, files, avail_kib=64 << 20):
    """A /proc (meminfo with ``avail_kib`` available, self/cgroup) and a cgroup tree (each
    mount's root marked by its cgroup.procs; ``files``: {relative path: text}) in ``tmp_path``."""
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal: {2 * avail_kib} kB\nMemAvailable: {avail_kib} kB\n")
    (proc / "self" / "cgroup").write_text("".join(line + "\n" for line in cgroup_lines))
    for mount in ("", "memory"):
        (cgroups / mount).mkdir(parents=True, exist_ok=True)
        (cgroups / mount / "cgroup.procs").write_text("1\n")
    for rel, text in files.items():
        (cgroups / rel).parent.mkdir(parents=True, exist_ok=True)
        (cgroups / rel).write_text(text)
    return str(proc), str(cgroups)


GiB = 1 << 30


@pytest.mark.parametrize("case", ["v2 job", "v2 step below", "v1 job", "v1 in a container",
                                  "no limit", "no cgroups"])
def test_check_memory_is_what_a_job_may_use_not_only_what_the_host_has_free(tmp_path, case):
    """A Slurm job with --mem (or a container with a memory limit) may use less than the host's
    MemAvailable: the room left under its cgroups' limits bounds what ``bundles check`` may ask
    for, at its own level or any level above it (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), so that a check in a job is refused rather than killed.  (It
    took MemAvailable alone: a 64 GiB node's job with --mem=4G was let allocate 40 GiB.)"""
    from tack.demo import available_memory
    job = "system.slice/slurmstepd.scope/job_42"
    proc, cgroups = _fake_host(tmp_path, *{
        "v2 job": (["0::/" + job + "/step_0"],
                   {f"{job}/memory.max": f"{4 * GiB}\n", f"{job}/memory.current": f"{GiB}\n",
                    f"{job}/step_0/memory.max": "max\n", f"{job}/step_0/memory.current": "5\n"}),
        "v2 step below": (["0::/" + job + "/step_0"],
                          {f"{job}/memory.max": f"{8 * GiB}\n", f"{job}/memory.current": f"{GiB}\n",
                           f"{job}/step_0/memory.max": f"{4 * GiB}\n",
                           f"{job}/step_0/memory.current": f"{GiB}\n"}),
        "v1 job": (["5:cpuset:/", "4:memory:/slurm/uid_0/job_7", "0::/"],
                   {"memory/slurm/uid_0/job_7/memory.limit_in_bytes": f"{5 * GiB}\n",
                    "memory/slurm/uid_0/job_7/memory.usage_in_bytes": f"{2 * GiB}\n",
                    "memory/memory.limit_in_bytes": "9223372036854771712\n",
                    "memory/memory.usage_in_bytes": f"{40 * GiB}\n"}),
        # the host's path, not under the container's mount: its root is the container's cgroup
        "v1 in a container": (["4:memory:/process_api/abc"],
                              {"memory/memory.limit_in_bytes": f"{4 * GiB}\n",
                               "memory/memory.usage_in_bytes": f"{GiB}\n"}),
        "no limit": (["0::/" + job], {f"{job}/memory.max": "max\n", f"{job}/memory.current": "1\n"}),
        "no cgroups": ([], {}),
    }[case])
    want = 64 * GiB if case in ("no limit", "no cgroups") else 3 * GiB
    got = available_memory(proc, cgroups)
    import resource
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:          # (this test's own process bounded by ulimit -v)
        want = min(want, soft)
    assert got == want, (got / GiB, want / GiB)


def test_check_memory_is_bounded_by_ulimit_v(tmp_path):
    """An address-space limit (``ulimit -v``, which the check's child inherits) bounds it too."""
    import resource
    import subprocess
    import sys
    proc, cgroups = _fake_host(tmp_path, [], {})
    code = ("import sys; from tack.demo import available_memory; "
            "print(available_memory(sys.argv[1], sys.argv[2]))")
    r = subprocess.run([sys.executable, "-c", code, proc, cgroups], capture_output=True, text=True,
                       timeout=120,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (6 * GiB, 6 * GiB)))
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 6 * GiB


def test_pack_with_an_unknown_arch_says_it_is_unknown_and_lists_the_known(tmp_path):
    """``pack --arch nothing`` (no such microarchitecture) said "no entries for arch
    'cpu:nothing'", as for a real arch the cache holds nothing of: now it says the name is
    unknown, why, and what the cache holds.  A known arch with no entries still says that."""
    import tack.aot
    from tack.kernels.contour import tack_warm
    kernel, args, grid = tack_warm((8, 8, 8))[0]
    cache = tmp_path / "cache"
    tack.aot.save([tack.aot.compile(kernel, "cpu:x86_64_v3", args, grid=grid)], str(cache))
    cache.chmod(0o700)
    for arch, why in (("nothing", "cpu:nothing: archspec knows no such CPU microarchitecture"),
                      ("cpu:zen9", "cpu:zen9: archspec knows no such CPU microarchitecture (did "
                                   "you mean"),
                      ("cuda:sm_1", "cuda:sm_1: Tack builds PTX for NVIDIA compute capabilities"),
                      ("opencl:1", "'opencl:1': unknown kind 'opencl'")):
        r = _cache_cli(cache, "pack", "--arch", arch, "--output", str(tmp_path / "b"))
        assert r.returncode == 1, (r.stdout, r.stderr)
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"tack.cache: error: unknown architecture {arch!r} ({why}"), line
        assert line.endswith("); the cache holds: cpu:x86_64_v3"), line
        assert "no entries" not in line
    for arch in ("cpu:zen3", "cpu:host"):      # known names (cpu:host: this host's own code)
        known = _cache_cli(cache, "pack", "--arch", arch, "--output", str(tmp_path / "b"))
        assert known.returncode == 1 and known.stderr.splitlines() == [
            f"tack.cache: error: no entries for arch {arch!r}; the cache holds: cpu:x86_64_v3"], \
            known.stderr
    assert not (tmp_path / "b").exists()
