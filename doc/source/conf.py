"""Sphinx configuration of the Cyborg documentation."""

project = 'Cyborg'
copyright = 'The Cyborg developers'

extensions = [
    # `show-options`: the configuration reference, read from the code.
    'oslo_config.sphinxext',
    # `show-policy`: the policy reference, read from the code.
    'oslo_policy.sphinxext',
]

master_doc = 'index'
exclude_patterns = ['_build']
html_theme = 'alabaster'
html_static_path = []

# Listing oslo.messaging's options imports oslo.service's eventlet backend,
# which warns on import that eventlet is deprecated; the services never
# run on it (see cyborg/service.py).
import warnings  # noqa: E402

warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')
