"""The scrub of an NVMe attach handle: the strongest erase its controller
offers, then the controller's own word that it is done.

``NVME_SANITIZE`` works on a PCI function whose controller the host's
``nvme`` driver holds; the privileged helper (``cyborg.privsep.nvme``)
refuses every other, rebinds nothing, and erases nothing the host uses.

- The whole controller: the first it supports of a sanitize by crypto
  erase, a sanitize by block erase (SANICAP bits 0 and 1), a Format NVM
  of each namespace with crypto erase (FNA bit 2), one with user data
  erase. A sanitize runs on in the controller once started: its log is
  read until it ends, at most ``NVME_SETTLE`` seconds, and must say that
  it completed successfully. One found still running (it outlived an
  earlier scrub's wait) is waited for, not started again: it erases as
  well. Overwrite sanitizes take hours on a large drive: never chosen.
- A VF: a Format NVM of each namespace attached to its own controller,
  never a sanitize, which erases the whole NVM subsystem, the other VFs'
  tenants included. It is refused where the controller says that a
  format reaches every namespace of the subsystem (FNA bits 0 and 1).

A format is verified by nvme-cli's exit status and by its namespaces
still being there afterwards. A function with no namespace cannot be
shown erased by a format: its scrub fails.

Each step that fails raises ``base.ScrubFailed`` naming it: ``identify``
(the controller's identify data; nothing was erased), ``sanitize``,
``format`` or ``verify``.
"""

import logging
import time

from cyborg.accelerator.drivers import base
from cyborg.privsep import nvme as privsep_nvme

LOG = logging.getLogger(__name__)

NVME_SANITIZE = 'nvme-sanitize'
# Seconds a sanitize may run before the scrub stops waiting for it (and
# fails; the next scrub waits again): a crypto erase takes seconds, a
# block erase minutes on most drives. Within [scrub] timeouts' default.
NVME_SETTLE = 600
# Seconds between two reads of the sanitize log.
POLL_INTERVAL = 2

# SANICAP bits, strongest first.
SANICAP_CRYPTO = 0x1
SANICAP_BLOCK = 0x2
# FNA bits: a format, or its secure erase, reaches every namespace of the
# NVM subsystem; a crypto erase is a secure erase a format can do.
FNA_ALL_NAMESPACES = 0x3
FNA_CRYPTO_ERASE = 0x4

_SANACT_NAMES = {2: 'block', 3: 'overwrite', 4: 'crypto'}
_STATUS_TEXT = {
    privsep_nvme.NEVER_SANITIZED: 'the controller was never sanitized',
    privsep_nvme.SANITIZE_FAILED: 'the last sanitize failed',
}
_SANITIZE_CODES = privsep_nvme.SANITIZE_ACTIONS


def _call(step, failure, entrypoint, *args):
    """``entrypoint(*args)``; its failure is ``ScrubFailed(step)``, its
    message starting with ``failure``."""
    try:
        with base.privileged(failure):
            try:
                return entrypoint(*args)
            except privsep_nvme.NvmeFailed as exc:
                raise base.DriverError('%s: %s' % (failure, exc)) from exc
    except base.DriverError as e:
        raise base.ScrubFailed(step, e.message) from e


def _identify(address, step):
    return _call(step, 'Cannot identify the NVMe controller at %s' % address,
                 privsep_nvme.identify_controller, str(address))


def scrub(address, whole, settle=None):
    """The NVME_SANITIZE scrub of the function at ``address`` (a
    PCIAddress): the whole controller if ``whole``, else a VF. The steps
    done; the settle time is ``NVME_SETTLE`` unless given."""
    found = _identify(address, 'identify')
    sanicap, fna = found['sanicap'], found['fna']
    if whole and not found['shared']:
        if sanicap & SANICAP_CRYPTO:
            return _sanitize(address, 'crypto', settle)
        if sanicap & SANICAP_BLOCK:
            return _sanitize(address, 'block', settle)
    if found['shared'] and fna & FNA_ALL_NAMESPACES:
        raise base.ScrubFailed(
            'format', 'a format of a namespace of the NVMe controller at %s '
                      'would erase every namespace of its NVM subsystem (FNA '
                      '%#x), and %s: no erase it offers leaves the others '
                      'alone' % (address, fna, found['shared']))
    erase = 'crypto' if fna & FNA_CRYPTO_ERASE else 'user-data'
    return _format(address, found['namespaces'], erase)


def _sanitize(address, action, settle):
    failure = 'Cannot sanitize the NVMe controller at %s' % address
    log = _call('sanitize', failure, privsep_nvme.sanitize_log, str(address))
    if log['status'] == privsep_nvme.SANITIZE_IN_PROGRESS:
        expected = log['action']
        running = _SANACT_NAMES.get(expected, 'unknown')
        LOG.info('The NVMe controller at %s is already being sanitized '
                 '(%s): waiting for it rather than starting another',
                 address, running)
        step = 'sanitize:%s:resumed' % running
    else:
        _call('sanitize', failure, privsep_nvme.start_sanitize, str(address),
              action)
        expected = _SANITIZE_CODES[action]
        step = 'sanitize:%s' % action
    log = _wait(address, NVME_SETTLE if settle is None else settle)
    if log['status'] != privsep_nvme.SANITIZE_COMPLETED:
        raise base.ScrubFailed('verify', 'the sanitize log of the NVMe '
                                         'controller at %s says %s' % (
                                             address, _STATUS_TEXT.get(
                                                 log['status'],
                                                 'status %s' % log['status'])))
    if log['action'] is not None and log['action'] != expected:
        raise base.ScrubFailed(
            'verify', 'the sanitize log of the NVMe controller at %s reports '
                      'a completed %s sanitize, not the %s one started' % (
                          address,
                          _SANACT_NAMES.get(log['action'], log['action']),
                          _SANACT_NAMES.get(expected, expected)))
    return [step, 'verify']


def _wait(address, settle):
    """The sanitize log once no sanitize runs; ScrubFailed('verify') if
    one still does ``settle`` seconds from now."""
    deadline = time.monotonic() + settle
    while True:
        log = _call('verify', 'Cannot read the sanitize log of the NVMe '
                              'controller at %s' % address,
                    privsep_nvme.sanitize_log, str(address))
        if log['status'] != privsep_nvme.SANITIZE_IN_PROGRESS:
            return log
        if time.monotonic() >= deadline:
            raise base.ScrubFailed(
                'verify', 'the sanitize of the NVMe controller at %s still '
                          'runs after %s s (%.0f%% done); the next scrub '
                          'waits for it again' % (
                              address, settle,
                              log['progress'] * 100 / 65536))
        time.sleep(POLL_INTERVAL)


def _format(address, namespaces, erase):
    if not namespaces:
        raise base.ScrubFailed(
            'format', 'the NVMe controller at %s has no namespace: a format '
                      'has nothing to erase, so what the last tenant wrote '
                      'cannot be shown erased' % address)
    steps = []
    for namespace in namespaces:
        _call('format', 'Cannot format namespace %s of the NVMe controller '
                        'at %s' % (namespace, address),
              privsep_nvme.format_namespace, str(address), namespace, erase)
        steps.append('format:%s:%s' % (erase, namespace))
    after = _identify(address, 'verify')
    gone = [n for n in namespaces if n not in after['namespaces']]
    if gone:
        raise base.ScrubFailed(
            'verify', 'namespace %s of the NVMe controller at %s is gone '
                      'after its format' % (', '.join(gone), address))
    return steps + ['verify']
