"""How deep the compiler lets a kernel nest, and the recursion headroom that makes it safe.

The compiler's stages (the front end, the dependency walk, type inference,
the grid check, code generation, the lowered kernel's JSON) walk expressions
and device-function calls recursively, a few Python frames per level.  Python
itself compiles expressions about 3,000 levels deep (a flat chain of 2,999
``+`` terms is 2,999 levels), so the front end refuses, with a ``CompileError``
at the line, only what goes beyond that:

- ``MAX_EXPR_DEPTH``: one expression nested more deeply than this;
- ``MAX_CALL_DEPTH``: device functions calling each other more deeply than this;
- ``MAX_TOTAL_DEPTH``: expression levels summed along a chain of calls (each
  function's lowering runs inside its caller's expression).

Within those bounds every stage's recursion fits in ``FRAMES``, and each stage
runs inside ``deep()``, which raises the interpreter's recursion limit to that
for as long as some thread is compiling (then puts it back).  Python 3.11 runs
a Python-to-Python call without C recursion, so the frames cost heap, not C
stack; the JSON codec does recurse in C, so ``deep(json=True)`` asks only for
what a bounded lowered kernel's JSON needs (``JSON_DEPTH``), and a damaged
entry nested more deeply is refused as damaged rather than overflowing the stack.
"""

from __future__ import annotations

import _thread
import os
import sys
from contextlib import contextmanager

MAX_EXPR_DEPTH = 3000
MAX_CALL_DEPTH = 1000
MAX_TOTAL_DEPTH = 20000

# Python frames per level: an expression level costs at most 4 in any stage (expr, the node's
# method, a comprehension, the helper it calls); a call level about 16 (run, block, stmt, ...).
FRAMES = 4 * MAX_TOTAL_DEPTH + 16 * MAX_CALL_DEPTH + 1000
# JSON nesting of a lowered function: two list levels per expression level at most (a call's
# argument list, an index's), two per statement level (Python allows 100), and a few more.
JSON_DEPTH = 2 * MAX_EXPR_DEPTH + 2 * 100 + 100

_lock = _thread.RLock()     # re-entrant: a signal handler's launch on a thread inside deep() compiles


# After ``os.fork()`` the child's lock is made free again, in place: another thread of the parent
# may have held it at the fork (a compile stage's headroom), and no thread of the child would ever
# release it (its first compile waited for ever).  The hook is the lock's own method, as
# ``tack.cache``'s is (which says why not a function of the module).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_lock._at_fork_reinit)
_active = {}            # headroom asked for -> how many are inside deep() with it
_saved = [None]         # the limit before the first deep() began


def _frame_depth() -> int:
    n, f = 0, sys._getframe()
    while f is not None:
        n += 1
        f = f.f_back
    return n


@contextmanager
def deep(json: bool = False):
    """Run a compiler stage with the recursion headroom the bounds above need."""
    want = _frame_depth() + (JSON_DEPTH if json else FRAMES)
    with _lock:
        if not _active:
            _saved[0] = sys.getrecursionlimit()
        _active[want] = _active.get(want, 0) + 1
        limit = max([_saved[0], *_active])
        if sys.getrecursionlimit() < limit:
            sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        with _lock:
            _active[want] -= 1
            if not _active[want]:
                del _active[want]
            limit = max([_saved[0], *_active])
            if sys.getrecursionlimit() > limit:
                try:
                    sys.setrecursionlimit(limit)
                except RecursionError:          # still too deep somewhere to lower it: later
                    pass
