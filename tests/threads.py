"""Work started in several threads at the same instant."""

import sys
import threading


def race(count, work):
    """``work(i)`` in ``count`` threads at once: [result or exception]."""
    results = [None] * count
    barrier = threading.Barrier(count)

    def one(i):
        barrier.wait()
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    interval = sys.getswitchinterval()
    # Switching threads often, so that work not kept apart meets.
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    return results
