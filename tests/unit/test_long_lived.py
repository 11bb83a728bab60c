"""A launched service's start-up objects leave the collector's full
passes (``cyborg.long_lived``), and come back when it stops."""

import gc
import signal
import threading

from cyborg import service


class Started(service.Service):

    def __init__(self):
        super().__init__('cyborg-test')
        self.up = threading.Event()

    def on_start(self):
        self.up.set()


def test_a_started_service_freezes_what_it_holds_until_it_stops():
    started = Started()
    results = []

    def watch():
        started.up.wait(30)
        # settle() runs right after start() returns, on the same thread.
        for _ in range(300):
            if gc.get_freeze_count():
                break
            threading.Event().wait(0.01)
        results.append(gc.get_freeze_count())
        service.stop_foreground(signal.SIGTERM)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert service.launch(started) == 0
        after_stop = gc.get_freeze_count()
    finally:
        watcher.join(30)
        gc.unfreeze()
    assert results and results[0] > 1000
    assert after_stop == 0
