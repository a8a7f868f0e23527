"""A cache directory that is not the user's own, private, real directory is refused: one warning, nothing read or written."""

import os

import pytest

from .conftest import KMOD_LAUNCHES, check_results, compiled, run_child, snapshot


def group_writable(cache, tmp_path):
    os.chmod(cache, 0o775)
    return cache


def others_writable(cache, tmp_path):
    os.chmod(cache, 0o757)
    return cache


def other_owner(cache, tmp_path):
    os.chown(cache, 65534, 65534)
    return cache


def symlink(cache, tmp_path):
    link = tmp_path / "link-to-cache"
    link.symlink_to(cache, target_is_directory=True)
    return link


def version_dir_writable(cache, tmp_path):
    (version,) = [d for d in cache.iterdir() if d.is_dir()]
    os.chmod(version, 0o777)
    return cache


CASES = {
    "group-writable": (group_writable, "writable by its group"),
    "others-writable": (others_writable, "writable by others"),
    "owned by another user": (other_owner, "belongs to uid 65534"),
    "symbolic link": (symlink, "symbolic link"),
    "version directory writable by all": (version_dir_writable, "writable by its group and others"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_untrusted_directory_is_refused(case, warm, tmp_path):
    """An untrusted cache directory gets exactly one warning saying why; no entry is read or written, and every kernel runs right."""
    cache, src = warm
    make, reason = CASES[case]
    target = make(cache, tmp_path)
    before = snapshot(cache)
    run = run_child(target, src, KMOD_LAUNCHES)
    check_results(run)
    assert all(compiled(r) for r in run.results)
    assert len(run.warnings) == 1, run.warnings
    (warning,) = run.warnings
    assert warning["category"] == "TackWarning"
    assert reason in warning["message"], warning["message"]
    assert run.stats["hits"] == {"lowered": 0, "variant": 0}
    assert run.stats["bytes_read"] == 0 and run.stats["bytes_written"] == 0
    assert snapshot(cache) == before


def test_link_messages_name_the_fix_for_what_the_link_is(warm, tmp_path):
    """Every refused link said 'set TACK_CACHE_DIR to the real directory', also a link inside the
    cache or a bundle file, which that setting cannot fix.  The root's message names the
    variable and the real directory; a level's names the real directory; a file's says remove it."""
    cache, src = warm
    run = run_child(symlink(cache, tmp_path), src, KMOD_LAUNCHES)
    (w,) = run.warnings
    assert f"set TACK_CACHE_DIR to the real directory, {os.path.realpath(cache)}" in w["message"], w

    (version,) = [d for d in cache.iterdir() if d.is_dir()]
    level = version / "variants"                # what a warm run reads
    real = tmp_path / "elsewhere"
    level.rename(real)
    level.symlink_to(real, target_is_directory=True)
    run = run_child(cache, src, KMOD_LAUNCHES)
    check_results(run)
    said = [w["message"] for w in run.warnings]
    assert said and all("TACK_CACHE_DIR" not in m for m in said), said
    assert any(f"{level} is a symbolic link" in m and f"name the real directory, {real}" in m
               for m in said), said

    from tack.cache.trust import Untrusted, check_trusted
    f = tmp_path / "bundle-x"
    f.symlink_to(tmp_path / "nowhere")
    with pytest.raises(Untrusted, match=r"no file is read through a link: remove it \(rm "):
        check_trusted(str(f), is_dir=False)


def test_a_loop_of_links_is_not_named_as_the_real_directory(tmp_path):
    """Links that go round in a loop lead to no directory: the fix said "set TACK_CACHE_DIR to the
    real directory, <the link itself>" (``realpath`` gives back a loop's own name), which cannot
    work; it says what they are and to name a real directory.  A dangling link still names where
    it leads."""
    from tack.cache.trust import Untrusted, check_trusted
    a, b = tmp_path / "loop1", tmp_path / "loop2"
    a.symlink_to(b)
    b.symlink_to(a)
    for setting, fix in (("TACK_CACHE_DIR", "set TACK_CACHE_DIR to a real directory"),
                         ("TACK_CACHE_BUNDLES", "set TACK_CACHE_BUNDLES to a real directory"),
                         (None, "name a real directory")):
        with pytest.raises(Untrusted) as e:
            check_trusted(str(a), setting=setting)
        assert str(e.value) == f"{a} is a symbolic link (to {b}); its links go round in a loop " \
                               f"to no directory: {fix}", str(e.value)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    with pytest.raises(Untrusted, match=f"set TACK_CACHE_DIR to the real directory, {tmp_path / 'gone'}$"):
        check_trusted(str(dangling), setting="TACK_CACHE_DIR")


def test_a_site_file_of_a_third_user_names_its_admins_fix(tmp_path):
    """A site bundle (trusted where it is the user's or root's) owned by a third user: the
    message said "not to you ... remove it: rm PATH", a fix for the user's own cache, not a job
    user's to make in the site's directory; it names root too, and the admin's fix."""
    from tack.cache.trust import Untrusted, check_stat
    f = tmp_path / "bundle-x86_64-cpu-x86_64_v3-0"
    f.write_bytes(b"x")
    os.chmod(f, 0o644)
    os.chown(f, 65534, 65534)
    with pytest.raises(Untrusted) as e:
        check_stat(os.lstat(f), str(f), allow_root=True, is_dir=False)
    msg = str(e.value)
    assert "belongs to uid 65534, neither to you" in msg and "nor to root" in msg, msg
    assert f"chown root {f}" in msg and "rm " not in msg, msg
    with pytest.raises(Untrusted, match=f"not to you .*; remove it: rm {f}"):     # the user's own
        check_stat(os.lstat(f), str(f), allow_root=False, is_dir=False)


WARNINGS_AS_ERRORS = """
import numpy as np, tack

@tack.kernel
def k(out):
    i = tack.tid()
    out[i] = 2.0

tack.launch(k, dim=3, args=(np.zeros(3),))
"""


def test_a_cache_warning_raised_as_an_error_is_raised_as_it_is(tmp_path):
    """Under ``python -W error`` a cache that cannot be used raises its TackWarning: the store's
    catch-all took it for a cache error of its own and warned again, raising "tack: kernel cache
    error (TackWarning: tack: not using the kernel cache: ...); compiling without it" (two
    "tack:", and it did not compile).  The warning comes out as it is."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)              # others may write it, without the sticky bit
    script = tmp_path / "prog.py"
    script.write_text(WARNINGS_AS_ERRORS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(PYTHONPATH=root, TACK_CACHE_DIR=str(loose / "cache"))
    p = subprocess.run([sys.executable, "-W", "error", str(script)], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=120)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("tack.errors.TackWarning: tack: not using the kernel cache: the "
                           f"directory {loose}, above "), last
    assert "kernel cache error" not in p.stderr, p.stderr[-2000:]
