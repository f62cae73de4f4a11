"""What the remote tests share: a cache folder's size, and its largest size
sampled every millisecond while an epoch runs."""
import os
import threading


def folder_bytes(d):
    """The bytes of the files directly in folder d."""
    n = 0
    for e in os.scandir(d):
        try:
            if e.is_file():
                n += e.stat().st_size
        except FileNotFoundError:
            pass  # renamed or evicted since the listing
    return n


class PeakSampler:
    """A thread sampling folder_bytes(d) from entering the with block to
    leaving it; peak is the largest sample."""

    def __init__(self, d):
        self.d, self.peak = d, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, folder_bytes(self.d))
            self._stop.wait(0.001)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, folder_bytes(self.d))
