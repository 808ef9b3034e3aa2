"""The dispatch loop every worker runs: take what a release made ready, sweep what fell due.

The thread worker runs it to hand executions to its pool, the asyncio worker (in a bridge, its
waits awaited) to start tasks, a Celery worker's dispatcher bootstep to send their jobs; only
``on_ready`` and ``sweep`` differ.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from py_reactor.aio import sleep
from py_reactor.errors import StoreUnavailableError
from py_reactor.runtime.namespaces import served
from py_reactor.storage import executions as stored_executions

__all__ = ["SWEEP_EVERY", "serve"]

logger = logging.getLogger("py_reactor")

#: Seconds between recovery passes (and the longest the loop blocks on the ready list).
SWEEP_EVERY = 0.5


def serve(
    stopped: threading.Event,
    on_ready: Callable[[str], object],
    sweep: Callable[[], object],
    who: str,
) -> None:
    """Until ``stopped``: block on the ready lists of the namespaces this process serves for an
    id made due now (a dispatch, or the release of a key an execution parked on) and pass it
    to ``on_ready``; every ``SWEEP_EVERY`` seconds run ``sweep`` (parks whose timer fired,
    lapsed leases).

    A store that goes away is said once (and once when it is back), not at every turn.
    """
    last = 0.0
    down = False
    while not stopped.is_set():
        try:
            # the configured store (it may change), and the namespaces served now (a module
            # imported since may add one)
            ready = stored_executions().next_ready(served(), SWEEP_EVERY)
            if ready is not None:
                on_ready(ready)
            now = time.monotonic()
            if now - last >= SWEEP_EVERY:
                last = now
                sweep()
            if down:
                down = False
                logger.warning("py_reactor: the store is reachable again; %s dispatches", who)
        except StoreUnavailableError as exc:
            if stopped.is_set():
                return
            if not down:
                down = True
                logger.warning("py_reactor: %s waits for the store: %s", who, exc)
            sleep(SWEEP_EVERY)
        except Exception:
            if stopped.is_set():
                return
            logger.exception("py_reactor: %s hit an error", who)
            sleep(SWEEP_EVERY)
