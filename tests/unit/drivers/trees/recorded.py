"""Sysfs trees recorded on real machines (``tests/unit/drivers/recorded``),
unpacked with their links rebuilt.

A recording keeps each link of a device directory as ``<name>.link``
holding the link's target; here it becomes the symlink ``<name>`` again
(dangling where the target was not recorded: readers only take its last
component, as they do on a real host).
"""

import os
import pathlib
import tarfile

RECORDED = pathlib.Path(__file__).resolve().parent.parent / 'recorded'


def recording(name, filename):
    return RECORDED / name / filename


def unpack(name, target):
    """Write host ``name``'s tree below ``target``; return its root."""
    target = pathlib.Path(target)
    with tarfile.open(recording(name, 'sysfs.tgz')) as archive:
        archive.extractall(target, filter='data')
    root = target / 'root'
    for link_file in sorted(root.glob('sys/bus/pci/devices/*/*.link')):
        os.symlink(link_file.read_text().strip(),
                   link_file.with_suffix(''))
        link_file.unlink()
    return str(root)
