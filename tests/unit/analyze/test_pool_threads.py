"""The report's worker pool forks; in ``profile()`` the process forking runs torch's threads.
Python 3.12+ warns about forking a threaded process, and a program run with ``-W error`` (or a
test suite with ``filterwarnings = error``) must not fail over the tool's own report."""

from __future__ import annotations

import threading
import warnings

from proton_inject.analyze.pool import Workers


def test_workers_start_in_a_threaded_process_with_warnings_as_errors():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with Workers(2) as w:
                assert not w.in_process
                assert w.map(abs, [-1, -2, 3, -4]) == [1, 2, 3, 4]
                assert list(w.stream(sum, [1, 2, 3, 4, 5], 2)) == [3, 7, 5]
    finally:
        stop.set()
        t.join()
