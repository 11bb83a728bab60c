"""The released attach handles an agent remembers, across restarts."""

import os
import uuid

from cyborg.agent import released

KEPT = 4


def uuids(count):
    return [str(uuid.uuid4()) for _ in range(count)]


def test_a_restart_reads_the_released_uuids_back(tmp_path):
    first, second = uuids(2)
    before = released.ReleasedHandles(str(tmp_path), KEPT)
    before.add(first)

    after = released.ReleasedHandles(str(tmp_path), KEPT)

    assert first in after
    assert second not in after


def test_only_the_newest_are_kept_and_the_file_stays_bounded(tmp_path):
    names = uuids(3 * KEPT)
    kept = released.ReleasedHandles(str(tmp_path), KEPT)
    for name in names:
        kept.add(name)

    again = released.ReleasedHandles(str(tmp_path), KEPT)

    assert [n in again for n in names] == [False] * (2 * KEPT) + [True] * KEPT
    with open(os.path.join(str(tmp_path), released.FILE_NAME)) as f:
        assert len(f.read().splitlines()) <= 2 * KEPT


def test_a_torn_last_line_is_left_out(tmp_path):
    whole = str(uuid.uuid4())
    with open(os.path.join(str(tmp_path), released.FILE_NAME), 'w') as f:
        f.write(whole + '\n' + whole[:13])

    read = released.ReleasedHandles(str(tmp_path), KEPT)

    assert whole in read
    assert whole[:13] not in read


def test_without_a_state_directory_they_are_kept_in_memory(tmp_path):
    missing = tmp_path / 'missing'
    name = str(uuid.uuid4())
    kept = released.ReleasedHandles(str(missing), KEPT)
    kept.add(name)

    assert name in kept
    assert not missing.exists()
    assert name not in released.ReleasedHandles(str(missing), KEPT)
