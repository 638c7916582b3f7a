"""The cores a computation is shared out over: worker threads (NumPy lets go of the GIL
in its products and exponentials), and BLAS held to one thread while they work. The
fast path's blocks and the sparse indexer's scores both use them."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import numpy as np

Spread = Callable[[Callable[[Any], Any], list], Iterator[Any]]


@contextlib.contextmanager
def cores(hold: bool) -> Iterator[Spread]:
    """``spread(fn, items)``: fn applied to every item, the results in the items' order,
    the items shared out over every core this process may use (NumPy lets go of the GIL
    in its products and exponentials), under the caller's NumPy error settings.

    ``hold``: BLAS held to one thread meanwhile (a problem large enough that BLAS would
    share one of its products among threads of its own, with work to share out). The
    workers are then the threads, and a product is made the same way on any number of
    them (the same bits); and no BLAS helper thread is left spinning after a product of
    its own, for a tenth of a second, on the cores the workers need next (measured:
    the attention 20 % slower after a product BLAS had shared out).
    """
    workers = threads()
    settings = np.geterr()  # a worker thread starts with NumPy's defaults
    pool = None  # made when first needed: a small problem has nothing to share

    def spread(fn: Callable[[Any], Any], items: list) -> Iterator[Any]:
        nonlocal pool
        if workers <= 1 or len(items) <= 1:
            return map(fn, items)
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(workers)

        def guarded(item: Any) -> Any:
            with np.errstate(**settings):
                return fn(item)
        return pool.map(guarded, items)

    with _one_blas_thread() if hold else contextlib.nullcontext():
        try:
            yield spread
        finally:  # every worker done before BLAS may have its threads back
            if pool is not None:
                pool.shutdown()


def threads() -> int:
    """Threads for the fast path: the cores this process may use (MHA_THREADS to set)."""
    import os

    given = os.environ.get("MHA_THREADS", "")
    if given.strip().isdigit() and int(given) > 0:
        return int(given)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """BLAS held to one thread while it lasts (threadpoolctl, when it is installed; else
    BLAS keeps its own threads)."""
    global _CONTROLLER
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        yield
        return
    if _CONTROLLER is None:  # the BLAS libraries found once, not at every call
        _CONTROLLER = ThreadpoolController()
    with _CONTROLLER.limit(limits=1, user_api="blas"):
        yield


_CONTROLLER: Any = None
