"""Declarative device configuration: what operators want of the devices
they select, checked before it is stored.

``kinds`` reads and checks the settings of each kind, ``selection``
decides which devices a policy selects, ``mig`` fits a MIG layout into a
card's profile and placement table, and ``device_checks`` holds the
settings against what the selected devices report. All pure: no database,
no HTTP.
"""
