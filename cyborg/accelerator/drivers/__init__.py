"""Accelerator drivers: one per kind of device, loaded with stevedore.

``base`` holds the contract, ``pci`` the one sysfs reader the drivers
share, ``traits`` the spelling of the traits they report and ``loader``
turns the names of enabled drivers into driver objects.
"""
