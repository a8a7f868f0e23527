"""File system failures are never fatal: one RuntimeWarning per process, right results, exit status 0."""

import os

from tack.cache import entry, trust, trust_write

from .conftest import KMOD_LAUNCHES, check_results, decode_entry, drop_dac_caps, entry_files, run_child

LAUNCHES = KMOD_LAUNCHES + [{"kernel": "k_main", "n": 7, "dtype": "float32"}]     # a new variant

FILE_TOO_BIG = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
"""


def assert_one_warning_and_right(run):
    assert run.rc == 0, run.stderr
    check_results(run)
    assert len(run.warnings) == 1, run.warnings
    assert run.warnings[0]["category"] == "TackWarning"
    assert run.warnings[0]["message"].startswith("tack: ")


def test_read_only_directory(warm):
    """A read-only cache directory still serves its entries; the one store that fails is a single warning."""
    cache, src = warm
    dirs = [cache] + [p for p in cache.rglob("*") if p.is_dir()]
    for d in dirs:
        os.chmod(d, 0o500)
    try:
        run = run_child(cache, src, LAUNCHES, preexec_fn=drop_dac_caps)
    finally:
        for d in dirs:
            os.chmod(d, 0o700)
    assert_one_warning_and_right(run)
    assert "Permission denied" in run.warnings[0]["message"], run.warnings
    assert run.stats["hits"] == {"lowered": 1, "variant": 3}
    assert run.stats["bytes_written"] == 0
    assert not [p for p in cache.rglob("*") if trust.TMP_MARK in p.name]
    assert len(entry_files(cache)) == 6


def test_empty_read_only_directory(tmp_path, warm):
    """An empty, read-only cache directory: nothing can be stored, one warning, right results."""
    _, src = warm
    cache = tmp_path / "empty-ro"
    cache.mkdir(mode=0o500)
    try:
        run = run_child(cache, src, LAUNCHES, preexec_fn=drop_dac_caps)
    finally:
        os.chmod(cache, 0o700)
    assert_one_warning_and_right(run)
    assert "Permission denied" in run.warnings[0]["message"], run.warnings
    assert list(cache.iterdir()) == []


def test_directory_that_is_a_file(tmp_path, warm):
    """TACK_CACHE_DIR naming a regular file: one warning, right results, the file untouched."""
    _, src = warm
    afile = tmp_path / "a-file"
    afile.write_text("mine")
    run = run_child(afile, src, LAUNCHES)
    assert_one_warning_and_right(run)
    assert str(afile) in run.warnings[0]["message"] and "not a directory" in run.warnings[0]["message"]
    assert afile.read_text() == "mine"


def test_file_too_big(tmp_path, cache_dir, warm):
    """Writes failing with EFBIG (RLIMIT_FSIZE) are one warning; right results; no temporary or partial entry is left."""
    _, src = warm
    run = run_child(cache_dir, src, LAUNCHES, prelude=FILE_TOO_BIG)
    assert_one_warning_and_right(run)
    assert "too large" in run.warnings[0]["message"].lower(), run.warnings
    assert not [p for p in cache_dir.rglob("*") if trust.TMP_MARK in p.name]
    for p in entry_files(cache_dir):
        decode_entry(p)


def test_a_file_where_a_level_of_the_cache_should_be(warm):
    """A regular file in place of the variants level: one warning naming it, right results,
    nothing stored under it and the file untouched."""
    cache, src = warm
    (version_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    level = version_dir / entry.LEVEL_DIR[entry.KIND_VARIANT]
    for p in sorted(level.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    level.rmdir()
    level.write_text("mine")
    run = run_child(cache, src, LAUNCHES)
    assert_one_warning_and_right(run)
    assert str(level) in run.warnings[0]["message"] and "not a directory" in run.warnings[0]["message"]
    assert run.stats["hits"]["variant"] == 0
    assert level.read_text() == "mine"


def test_size_check_that_fails_is_tried_again_in_an_hour_not_per_store(warm, tmp_path):
    """A size check whose scan fails (an unreadable fan directory of another Tack version's
    entries, which count against the same limit) is one warning naming that directory; the stamp
    is still set, so neither the next kernel stored nor the next process scans again within the hour."""
    from tack.cache import size
    cache, src = warm
    fan = cache / "0.0.1" / "lowered" / "ab"
    fan.mkdir(parents=True)
    (fan / ("ab" + "0" * 62 + ".tlk")).write_bytes(b"an entry of another version")
    (cache / size.STAMP).unlink(missing_ok=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "kmod.py").write_text((src / "kmod.py").read_text().replace("a[i] * a[i] - 1.0",
                                                                         "a[i] * a[i] - 2.0"))
    os.chmod(fan, 0)
    try:
        first = run_child(cache, other, [{"kernel": "k_other", "n": 5},
                                         {"kernel": "k_other", "n": 6, "dtype": "float32"},
                                         {"kernel": "k_main", "n": 5}], preexec_fn=drop_dac_caps)
        stamped = (cache / size.STAMP).exists()
        again = run_child(cache, other, [{"kernel": "k_other", "n": 9, "dtype": "int64"}],
                          preexec_fn=drop_dac_caps)
    finally:
        os.chmod(fan, 0o700)
    assert first.rc == 0, first.stderr
    assert len(first.warnings) == 1, first.warnings
    message = first.warnings[0]["message"]
    assert "cannot check the kernel cache's size" in message and str(fan) in message, message
    assert stamped
    assert again.rc == 0 and again.warnings == [], again.warnings
    assert again.stats["bytes_written"] > 0          # it stored its new variant, without a scan


DELETED_CWD = """
import os, sys, tempfile
gone = tempfile.mkdtemp()
os.chdir(gone)
os.rmdir(gone)                      # the job's working directory, deleted under it
sys.path.insert(0, "")              # as python -c, -m or a REPL put it
import numpy as np
import tack
sys.path.append({src!r})
import kmin
x = np.ones(4)
tack.launch(kmin.double, dim=4, args=(x,))
print(x.tolist())
"""


def test_a_deleted_working_directory_with_a_relative_sys_path_entry(tmp_path):
    """A first compile named its functions' files relative to the ``sys.path`` entries, each
    made absolute from the working directory; where that was deleted (and ``''`` is on
    ``sys.path``, as under ``python -c``) ``os.path.abspath`` raised FileNotFoundError, with
    the cache on or off.  The relative entry names nothing then: the kernel compiles and runs."""
    import subprocess
    import sys
    from pathlib import Path
    src = tmp_path / "src"
    src.mkdir()
    (src / "kmin.py").write_text("import tack\n@tack.kernel\ndef double(x):\n"
                                 "    i = tack.tid()\n    x[i] = x[i] * 2.0\n")
    root = Path(__file__).resolve().parents[2]
    for mode in ("write", "off"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
        env.update(TACK_CACHE=mode, TACK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(root))
        run = subprocess.run([sys.executable, "-c", DELETED_CWD.format(src=str(src))], env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, (mode, run.stderr)
        assert run.stdout.strip() == "[2.0, 2.0, 2.0, 2.0]", (mode, run.stdout)
        assert "Traceback" not in run.stderr, run.stderr


NO_MEMORY_FOR_CODE = '''
import json, resource, sys
import numpy as np, tack, tack.cache
import tack.launch, tack.backends.cpu_runtime, tack.backends.cpu_loader, tack.cache.stores, tack.cache.stores_write

@tack.kernel
def addk(x, y):
    i = tack.tid()
    y[i] = x[i] + 3

@tack.kernel
def warmk(y):
    i = tack.tid()
    y[i] = 1.0


x = np.arange(10.0); y = np.empty_like(x)
# Another kernel's launch first: the cache's session, its settings and log, the lazy imports (a
# checkout's version hash: a walk of its sources) all made before the starving, which any of them
# could otherwise meet first (a MemoryError before the loader, where a process's heap had no room)
tack.launch(warmk, dim=10, args=(np.empty(10),))
s0 = tack.cache.stats()
if sys.argv[1] == "starved":        # no address space left but a page: the loader's mmap fails
    vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + 4096, resource.RLIM_INFINITY))
try:
    tack.launch(addk, dim=10, args=(x, y))
    r = "right" if np.array_equal(y, x + 3) else "WRONG"
except Exception as e:              # the compile that follows has no memory either
    r = type(e).__name__
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
s = tack.cache.stats()              # addk's alone
print(json.dumps({"result": r, "hits": s["hits"]["variant"] - s0["hits"]["variant"],
                  "damaged": s["damaged"] - s0["damaged"], "compiled": s["compiled"] - s0["compiled"]}))
'''


def test_an_entry_whose_code_finds_no_memory_is_kept(tmp_path):
    """A process out of address space when it loads a stored variant (the loader's mmap refused,
    ENOMEM; so too where a policy refuses executable memory) counted the entry damaged and
    deleted it: the next process, with memory, compiled again.  The entry is not at fault: it is
    kept, not counted damaged, and the next process loads it."""
    import json
    import subprocess
    import sys
    script = tmp_path / "starved.py"
    script.write_text(NO_MEMORY_FOR_CODE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(tmp_path / "cache"), TACK_CACHE_LOG="1", TACK_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.path.dirname(os.path.dirname(os.path.dirname(
                   os.path.abspath(__file__))))]))

    def run(how):
        p = subprocess.run([sys.executable, str(script), how], env=env, capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr

    first, _ = run("fed")
    assert first == {"result": "right", "hits": 0, "damaged": 0, "compiled": 1}
    stored = entry_files(tmp_path / "cache")
    starved, log = run("starved")
    assert "does not load (LoadError: mmap of" in log and "Cannot allocate memory" in log, log
    assert starved["damaged"] == 0, starved
    assert entry_files(tmp_path / "cache") == stored
    again, _ = run("fed")
    assert again == {"result": "right", "hits": 1, "damaged": 0, "compiled": 0}


def test_a_marker_a_full_disk_cut_is_not_left_empty_and_one_left_so_is_written_again(warm, tmp_path):
    """The version marker and CACHEDIR.TAG were written in place: a full disk left them empty,
    for good (the next process saw one there): ``clear`` and ``prune`` then took the cache's own
    version directory for another's, and backup tools no longer skipped the cache.  Written whole
    beside it and linked into place now, a failed write leaves none; and an empty one a full disk
    left before is written again by the next process that stores."""
    import resource
    import signal
    (tmp_path / "d").mkdir()
    path = tmp_path / "d" / "marker"
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))        # no byte can be written
    try:
        try:
            trust_write.write_new(str(path), trust.MARKER_TEXT)
        except OSError:
            pass
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert list((tmp_path / "d").iterdir()) == [], list((tmp_path / "d").iterdir())

    cache, src = warm
    (version,) = [d for d in cache.iterdir() if d.is_dir()]
    marker = version / trust.VERSION_MARKER
    marker.write_bytes(b"")                                    # as a full disk left it
    tag = cache / trust_write.CACHEDIR_TAG[0]
    tag.write_bytes(b"")
    for p in entry_files(cache):
        if p.parts[-3] == "variants":
            p.unlink()
    run = run_child(cache, src, [{"kernel": "k_other", "n": 5}])
    check_results(run)
    assert run.stats["compiled"] == 1 and run.warnings == []
    assert marker.read_bytes() == trust.MARKER_TEXT and tag.read_bytes() == trust_write.CACHEDIR_TAG[1]
    from tack.cache import size
    assert size.is_version_dir(str(cache), version.name)


def test_a_marker_on_a_file_system_without_links_is_written_in_place(tmp_path, monkeypatch):
    """``write_new`` links a whole file into place; where the file system makes no links (EPERM:
    some FUSE and FAT mounts) it writes in place, as before, and leaves no temporary file."""
    import errno
    def no_links(src, dst, **kw):
        raise OSError(errno.EPERM, "Operation not permitted", src)
    monkeypatch.setattr(trust.os, "link", no_links)
    trust_write.write_new(str(tmp_path / "marker"), trust.MARKER_TEXT)
    assert [p.name for p in tmp_path.iterdir()] == ["marker"]
    assert (tmp_path / "marker").read_bytes() == trust.MARKER_TEXT
