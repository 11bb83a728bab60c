# What every playbook module of the agent's privileged helper checks of
# the sysfs tree it is given: PCI addresses, and paths that must stay
# below the tree's devices (or drivers) whatever links they go through;
# and the one way they write an attribute. Ansible ships this file with
# each module that imports it (ANSIBLE_MODULE_UTILS).

import os
import re

PCI_ADDRESS = re.compile(r'[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]')


class Sysfs:
    """The tree at ``root`` ("/" on a host); ``module`` fails the task
    on a path that leaves it."""

    def __init__(self, module, root):
        self.module = module
        self.root = os.path.realpath(root)
        self.devices = os.path.join(self.root, 'sys', 'devices')
        self.drivers = os.path.join(self.root, 'sys', 'bus', 'pci',
                                    'drivers')

    def function_link(self, address):
        """The bus's link to the function at ``address`` (checked)."""
        if not PCI_ADDRESS.fullmatch(address):
            self.module.fail_json(msg='%r is not a PCI address' % address)
        return os.path.join(self.root, 'sys', 'bus', 'pci', 'devices',
                            address)

    def inside(self, path, top=None, what=None):
        """The real path of ``path`` if it lies below ``top`` (the
        devices unless given); the task fails otherwise."""
        top = self.devices if top is None else top
        real = os.path.realpath(path)
        if os.path.commonpath([real, top]) != top:
            self.module.fail_json(msg='%s leads to %s, outside %s'
                                  % (what or path, real, top))
        return real

    def virtual_functions(self, function):
        """[(address, directory)] of the VFs of ``function`` (a real
        path), in VF order."""
        found = []
        for entry in os.listdir(function):
            if entry.startswith('virtfn') and entry[6:].isdigit():
                link = os.path.join(function, entry)
                directory = self.inside(link)
                address = os.path.basename(directory)
                if not PCI_ADDRESS.fullmatch(address):
                    self.module.fail_json(msg='%s is not a PCI function'
                                          % link)
                found.append((int(entry[6:]), address, directory))
        return [(address, directory) for _, address, directory
                in sorted(found)]

    def write(self, path, text, what=None):
        """``text`` into the attribute at ``path`` (a checked real path),
        through no link; the task fails with ``what`` (``path``) named
        if the kernel refuses it."""
        try:
            # sysfs ignores O_TRUNC; a recorded tree keeps what was
            # written, as the tests read it.
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC)
            try:
                os.write(fd, text.encode('ascii'))
            finally:
                os.close(fd)
        except OSError as exc:
            self.module.fail_json(msg='cannot write %r to %s: %s'
                                  % (text, what or path, exc.strerror))
