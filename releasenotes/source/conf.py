"""Sphinx configuration of the Cyborg release notes."""

project = 'Cyborg Release Notes'
copyright = 'The Cyborg developers'

# reno reads the notes from releasenotes/notes in the git history (and the
# working tree) and groups them by release tag.
extensions = ['reno.sphinxext']

master_doc = 'index'
exclude_patterns = ['_build']
html_theme = 'alabaster'
html_static_path = []
