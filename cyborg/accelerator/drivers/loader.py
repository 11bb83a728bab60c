"""Turn the names of enabled drivers into driver objects (stevedore)."""

import stevedore

from cyborg.accelerator.drivers import base


def load_drivers(conf, names, pci_reader):
    """Drivers ``names`` in that order; an unknown name is an error."""
    manager = stevedore.NamedExtensionManager(
        base.NAMESPACE, names, name_order=True,
        on_missing_entrypoints_callback=_missing,
        on_load_failure_callback=_failed)
    return build_drivers(manager, conf, pci_reader)


def build_drivers(manager, conf, pci_reader):
    """Instantiate the driver classes a stevedore manager has loaded."""
    drivers = []
    for extension in manager:
        driver = extension.plugin(conf, pci_reader)
        if driver.name != extension.name:
            raise base.DriverError('Entry point %s loads driver %s'
                                   % (extension.name, driver.name))
        drivers.append(driver)
    return drivers


def _missing(names):
    raise base.DriverError('Unknown accelerator drivers: %s'
                           % ', '.join(sorted(names)))


def _failed(manager, entry_point, error):
    raise base.DriverError('Cannot load accelerator driver %s: %s'
                           % (entry_point.name, error))
