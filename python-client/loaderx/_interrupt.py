"""Ctrl-C (SIGINT) and the connection's stream.

Python raises ``KeyboardInterrupt`` in the main thread between two bytecodes, also
right after a system call has returned. Two stretches of a connection (_conn.py)
must not be cut that way: a frame half sent, and the bytes of a reply taken off the
socket but not yet handed to whoever waits for them. Either leaves the connection's
place in the stream unknown, and _conn then breaks the connection (the next request
opens a fresh one). Everywhere else, waiting for a reply included (a ``poll`` that
takes nothing), an interrupt costs nothing: the connection stays whole, and the
reply, when it comes, is dropped.

Conversions (_conversion.py) need more than a whole connection afterwards: they
undo their work on that same connection, after the request that was under way (the
daemon runs one connection's requests in order). While one runs in the main thread,
:func:`deferring` installs a SIGINT handler that holds the interrupt while the main
thread is inside such a stretch (:func:`enter`, :func:`leave`: microseconds) and
delivers it as the stretch ends, and delivers it at once anywhere else.
:func:`holding` holds every interrupt until its block ends (the undo itself). A
second SIGINT while one is held is delivered at once: the user's way out if the
daemon does not answer.

Delivering is raising ``KeyboardInterrupt``, or calling the handler that was
installed before when it is a Python function. Under ``SIG_IGN``, ``SIG_DFL`` or
outside the main thread nothing is installed (no ``KeyboardInterrupt`` can come).
"""

import contextlib
import signal
import threading

_installed = 0      # deferring() blocks running; the handler is ours while > 0
_prev = None        # the handler before ours
_main_ident = None  # the thread the handler runs in
_depth = 0          # stretches of that thread under way (enter/leave)
_holding = 0        # holding() blocks running
_held = None        # an interrupt held: the callable that delivers it


def _ours():
    return _installed and threading.get_ident() == _main_ident


def enter():
    """A stretch that an interrupt must not cut begins (the calling thread's)."""
    global _depth
    if _ours():
        _depth += 1


def leave():
    """The stretch ends; an interrupt held meanwhile is delivered now (it raises)."""
    global _depth, _held
    if _ours():
        _depth -= 1
        if _depth == 0 and _held is not None and not _holding:
            deliver, _held = _held, None
            deliver()


def _handler(signum, frame):
    global _held
    prev = _prev

    def deliver():
        if prev is signal.default_int_handler or prev is None:
            raise KeyboardInterrupt
        prev(signum, frame)

    if (_depth or _holding) and _held is None:
        _held = deliver
        return
    _held = None
    deliver()


@contextlib.contextmanager
def deferring():
    """While the block runs, SIGINT is held through the stretches of :func:`enter`
    and :func:`leave` and inside :func:`holding` (main thread only; nests)."""
    global _installed, _prev, _main_ident, _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not _installed:
        prev = signal.getsignal(signal.SIGINT)
        if not callable(prev):          # SIG_IGN, SIG_DFL, or set from C
            yield
            return
        _prev, _main_ident, _held = prev, threading.get_ident(), None
        signal.signal(signal.SIGINT, _handler)
    _installed += 1
    try:
        yield
    finally:
        _installed -= 1
        if not _installed:
            signal.signal(signal.SIGINT, _prev)
            _prev = None
            held, _held = _held, None
            if held is not None:
                held()


@contextlib.contextmanager
def holding():
    """Holds every SIGINT until the block ends (a second one is delivered at once),
    then delivers the one held; under :func:`deferring` only."""
    global _holding, _held
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1
        if not _holding and not _depth and _held is not None:
            deliver, _held = _held, None
            deliver()


def held():
    """Whether an interrupt is being held."""
    return _held is not None
