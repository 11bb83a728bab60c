"""The uuids of attach handles released on this host, kept across agent
restarts.

A handle whose device the agent makes at bind (an mdev, a MIG instance)
is named by the bind's uuid. A prepare that reaches the agent after its
handle's release (RPC gives no order between two calls, and a resumed
bind sends its prepare again) would make a device that no release will
ever remove; the agent refuses a prepare of a released uuid. The newest
``kept`` uuids are remembered, in a file under ``[DEFAULT] state_path``
when that directory exists, so that a restart between the release and
the late prepare does not forget them: one line per uuid, appended and
flushed to disk before the release answers; a torn last line is
ignored; the file is rewritten (atomically) when it holds twice
``kept`` lines.
"""

import collections
import logging
import os
import threading
import uuid as uuidlib

LOG = logging.getLogger(__name__)

FILE_NAME = 'released-attach-handles'


class ReleasedHandles:

    def __init__(self, state_path, kept):
        self.kept = kept
        # Releases of different handles run at once (RPC threads): one
        # append or rewrite of the file at a time.
        self._lock = threading.Lock()
        self._uuids = collections.OrderedDict()
        self._lines = 0
        self.path = (os.path.join(state_path, FILE_NAME)
                     if state_path and os.path.isdir(state_path) else None)
        if self.path is None:
            LOG.info('[DEFAULT] state_path %s is not a directory: released '
                     'attach handles are remembered in memory only',
                     state_path)
            return
        try:
            with open(self.path, encoding='ascii', errors='replace') as f:
                for line in f:
                    self._lines += 1
                    self._remember(line.strip())
        except FileNotFoundError:
            pass

    def __contains__(self, uuid):
        return uuid in self._uuids

    def add(self, uuid):
        """Remember ``uuid`` (on disk first, where there is a file)."""
        with self._lock:
            if self.path is not None:
                if self._lines >= 2 * self.kept:
                    self._rewrite()
                with open(self.path, 'a', encoding='ascii') as f:
                    f.write(uuid + '\n')
                    f.flush()
                    os.fsync(f.fileno())
                self._lines += 1
            self._remember(uuid)

    def _remember(self, text):
        try:
            uuid = str(uuidlib.UUID(text))
        except ValueError:
            return  # a torn or foreign line
        self._uuids[uuid] = True
        self._uuids.move_to_end(uuid)
        while len(self._uuids) > self.kept:
            self._uuids.popitem(last=False)

    def _rewrite(self):
        kept = list(self._uuids)
        temporary = self.path + '.new'
        with open(temporary, 'w', encoding='ascii') as f:
            f.writelines(uuid + '\n' for uuid in kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)
        self._lines = len(kept)
