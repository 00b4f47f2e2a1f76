"""Running until SIGTERM or SIGINT, the same way in every long-running process.

Asynchronous servers (the worker, the codec server, the LLM simulator) await `stop_event`;
synchronous launchers (the local stack, the demo) turn both signals into ``KeyboardInterrupt``
with `interrupt_on_stop`, so Ctrl-C and ``kill`` take the same path.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_Handler = Callable[[int, FrameType | None], object] | int | None


def stop_event() -> asyncio.Event:
    """An event that the first SIGTERM or SIGINT sets, handled on the running event loop.

    Call it before the process starts its work, so a signal during start-up is not lost (the
    work starts, finds the event set and stops again). The handlers stay with the loop, which a
    server runs until it stops.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    return stop


@contextlib.contextmanager
def interrupt_on_stop() -> Iterator[None]:
    """In the ``with`` block, SIGTERM and SIGINT raise ``KeyboardInterrupt`` in the main thread.

    Only the first does: it starts a clean shutdown, and repeats are ignored until the block
    ends, so an impatient second Ctrl-C cannot cut the shutdown short and leave orphans.
    """

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for each in STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous: dict[signal.Signals, _Handler] = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
