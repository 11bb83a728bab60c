"""Log lines as oslo.log formats them: request ids and identities included.

    from tests.oslo_log_lines import oslo_log_lines  # noqa: F401

    def test_something(oslo_log_lines):
        ...
        oslo_log_lines.text    # every line logged at INFO or above
"""

import logging

from oslo_config import cfg
from oslo_log import formatters
from oslo_log import log
import pytest


def oslo_formatter():
    """oslo.log's formatter with its default formats: a line made while
    a request context is current carries that request's id."""
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf([], project='cyborg', default_config_files=[])
    return formatters.ContextFormatter(project='cyborg', version='test',
                                       config=conf)


@pytest.fixture
def oslo_log_lines(caplog):
    caplog.handler.setFormatter(oslo_formatter())
    caplog.set_level(logging.INFO)
    return caplog
