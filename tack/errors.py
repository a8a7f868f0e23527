"""Errors Tack raises at users.  Each names where in the user's source it arose."""

import warnings

from .records import fields


class TackWarning(RuntimeWarning):
    """What Tack warns about (a bad setting, a cache it cannot use...): a RuntimeWarning, so
    ``-W ignore::RuntimeWarning`` and filters on ``tack.TackWarning`` both silence it.  Shown as
    its message alone (``tack: ...``, one line), not with a line of Tack's source: see ``warn``."""


_shown = None                    # warnings.formatwarning as it was when Tack first warned


def _format(message, category, filename, lineno, line=None):
    if issubclass(category, TackWarning):
        return f"{message}\n"
    return _shown(message, category, filename, lineno, line)


def warn(message: str, stacklevel: int = 1) -> None:
    """Warn with ``message`` (starting ``tack: ``) as a TackWarning, filtered as any warning.

    The first call wraps ``warnings.formatwarning`` (what the default ``showwarning`` and
    ``logging.captureWarnings`` print with) so that a TackWarning prints as its message alone;
    every other warning is formatted as before.  ``stacklevel`` counts from the caller of warn."""
    global _shown
    if _shown is None and warnings.formatwarning is not _format:
        _shown = warnings.formatwarning
        warnings.formatwarning = _format
    warnings.warn(message, TackWarning, stacklevel=stacklevel + 1)


def no_room(e) -> bool:
    """Whether the exception ``e``, or one it was raised from or while handling, says that memory
    or a device's resources ran out (``MemoryError``, or an error a runtime marked ``resource``:
    an mmap refused, a driver's out-of-memory status), not that what was being loaded is at
    fault: a cache entry that fails so is kept (``launch._load_hit``)."""
    for _ in range(8):
        if e is None:
            return False
        if isinstance(e, MemoryError) or getattr(e, "resource", False) is True:
            return True
        e = e.__cause__ or e.__context__
    return False


class CompileError(Exception):
    """A kernel could not be compiled: outside the language, a type error, an unknown name.

    The message names the kernel, the file and line, and shows the offending
    line with a caret under the column at fault.
    """

    def __init__(self, message, *, kernel=None, filename=None, lineno=None,
                 col=None, line_text=None):
        self.message = message
        self.kernel = kernel
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.line_text = line_text
        super().__init__(self._format())

    def _format(self) -> str:
        head = f"in kernel '{self.kernel}': " if self.kernel else ""
        out = head + self.message
        if self.filename is not None and self.lineno is not None:
            out += f'\n  File "{self.filename}", line {self.lineno}'
            if self.line_text is not None:
                text = self.line_text.rstrip()
                stripped = text.lstrip()
                out += "\n    " + stripped
                if self.col is not None:
                    indent = len(text) - len(stripped)
                    out += "\n    " + " " * max(self.col - indent, 0) + "^"
        return out

    def with_kernel(self, kernel: str) -> "CompileError":
        if self.kernel is None:
            self.kernel = kernel
            self.args = (self._format(),)
        return self


class SourceContext:
    """Where a function's code came from, to point errors at the user's line."""

    __slots__ = ("name", "filename", "first_line", "lines", "shift")

    def __init__(self, name, filename, first_line, lines):
        self.name = name
        self.filename = filename
        self.first_line = first_line   # file line number of lines[0]
        self.lines = lines
        self.shift = 0                 # lines the function moved since (``moved_to``)

    def moved_to(self, filename, first_line):
        """The function is now at ``first_line`` of ``filename`` (a lowered kernel read from the
        cache was lowered where the same text stood then: another line, another file): errors
        name where it is now.  The locations in the code stay the recorded ones."""
        self.filename = filename
        self.shift = first_line - self.first_line

    def parameter_loc(self, name):
        """(file line, column) of parameter ``name`` on the ``def`` line, or None: where an
        error about a parameter (a float64 one a device cannot take) points."""
        for k, text in enumerate(self.lines):
            if text.lstrip().startswith("def ") and name in text:
                at = text.find(name, text.find("("))
                return self.first_line + k, len(text[:at].encode("utf-8"))   # as ast's offsets
        return None

    def error(self, message, loc) -> CompileError:
        lineno, col = loc if loc else (None, None)
        text = None
        if lineno is not None and 0 <= lineno - self.first_line < len(self.lines):
            text = self.lines[lineno - self.first_line]
            if col is not None:
                # ast's col_offset counts UTF-8 bytes: after a non-ASCII name (αβγ) the caret
                # stood a byte a character further right; the caret counts characters
                col = len(text.encode("utf-8")[:col].decode("utf-8", "ignore"))
        return CompileError(message, filename=self.filename,
                            lineno=None if lineno is None else lineno + self.shift,
                            col=col, line_text=text)


#: Set in the axis a debug-mode bounds check records when the index is unsigned (its 64 bits are
#: then reported as an unsigned number, not as a negative one).
UNSIGNED_INDEX = 1 << 32


@fields(("function", "array", "filename", "line", "fid", "offset"), defaults=("", -1))
class BoundsSite(tuple):
    """Where a debug-mode bounds check sits, to name it when it fails.

    ``fid`` and ``offset`` (lines below the function's first line) let the
    error point at the current file and line when the code was loaded from
    the cache and the lines above the function have moved since.
    """

    __slots__ = ()
