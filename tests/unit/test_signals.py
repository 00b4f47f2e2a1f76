"""Running until SIGTERM or SIGINT, the one way every long-running process does it."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from aiorch_runtime.signals import STOP_SIGNALS, interrupt_on_stop, stop_event


@pytest.mark.parametrize("signum", STOP_SIGNALS)
async def test_a_stop_signal_sets_the_event(signum: signal.Signals) -> None:
    """SIGTERM or SIGINT sets the server's stop event instead of killing the process."""
    loop = asyncio.get_running_loop()
    stop = stop_event()
    try:
        os.kill(os.getpid(), signum)
        await asyncio.wait_for(stop.wait(), timeout=5)
    finally:
        for each in STOP_SIGNALS:
            loop.remove_signal_handler(each)
    assert stop.is_set()


def test_the_first_stop_signal_interrupts_and_repeats_are_ignored() -> None:
    """In the block SIGTERM raises KeyboardInterrupt like Ctrl-C; a second signal during the
    shutdown that follows is ignored; afterwards the previous handlers are back."""
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    shut_down = False
    with interrupt_on_stop():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("SIGTERM did not interrupt")
        except KeyboardInterrupt:
            os.kill(os.getpid(), signal.SIGINT)  # an impatient second Ctrl-C
            shut_down = True
    assert shut_down
    assert {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} == before
